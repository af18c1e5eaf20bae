// `fpdt extend RECIPE` (see extend.h): the stages trained in order, gated, reported.
#include "fpdt/train/extend.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/log.h"
#include "fpdt/base/timer.h"
#include "fpdt/data/mixture.h"
#include "fpdt/data/shard.h"
#include "fpdt/data/shard_tokenizer.h"
#include "fpdt/model/gguf.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/train/auto_layout.h"
#include "fpdt/train/checkpoint.h"
#include "fpdt/train/convert.h"
#include "fpdt/train/eval.h"
#include "fpdt/train/metrics.h"
#include "fpdt/train/recipe.h"
#include "fpdt/train/run_folder.h"
#include "fpdt/train/trainer.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "extend";
constexpr const char* kResolvedFile = "recipe.resolved.json";
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string fixed(double value, int digits = 4) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// A gate's figure as gates.json has it: a number, or null when it has none (not applicable).
std::string figure_text(const Json& gate) {
  return gate["figure"].is_number() ? fixed(gate["figure"].get<double>()) : std::string("n/a");
}

Json read_json(const std::string& path) {
  return Json::parse(read_text_file(path, kModule, "remove it, or start the run afresh with --overwrite"), nullptr, true,
                     true);
}

// Tokens a stage trains on: steps × dp × B × grad_accum rows of S.
double stage_tokens(const RecipeStage& stage) {
  const TrainSettings& s = stage.train;
  return static_cast<double>(s.steps) * static_cast<double>(s.run.dp * s.run.batch_size * s.grad_accum) *
         static_cast<double>(s.run.seq_tokens);
}

// Every data source the recipe names, opened and checked before anything runs: --data's shards (and their
// tokenizer), the mixture's documents against their length rules, and one prompt of every RULER gate's task
// at each of its lengths (a length too short for a task is refused now, not after a stage's training).
void check_data(const Recipe& recipe) {
  const data::ShardReader train_shard(path_in(recipe.data_dir, "train.bin"), data::ShardCheck::header);
  const data::ShardReader val_shard(path_in(recipe.data_dir, "val.bin"), data::ShardCheck::header);
  const data::Tokenizer tokenizer = data::shards_tokenizer(kModule, recipe.data_dir, train_shard, &val_shard);
  for (const RecipeStage& stage : recipe.stages) {
    if (!stage.train.mixture.empty()) {
      std::vector<data::MixtureSource> sources = data::parse_mixture(stage.train.mixture);
      data::DataLoaderConfig config;
      config.seq_tokens = stage.train.run.seq_tokens;
      data::MixtureLoader(data::open_mixture_shards(sources), std::move(sources), config);
    }
    const RulerGate& gate = stage.gates.ruler;
    if (!gate.on) continue;
    RulerSettings ruler;
    ruler.tasks = gate.tasks;
    ruler.lengths = gate.lengths.empty() ? std::to_string(stage.train.run.seq_tokens) : gate.lengths;
    try {
      const std::vector<int64_t> lengths = ruler_lengths(ruler, stage.train.run.seq_tokens);
      const RulerSources sources = load_ruler_sources(ruler, tokenizer, val_shard, lengths.back());
      for (const std::string& task : ruler_task_names(ruler))
        for (const int64_t length : lengths)
          make_ruler_prompts(ruler_recipe(task), length, 1, tokenizer, sources, RulerChat::base, ruler.seed);
    } catch (const Error& error) {
      throw Error(kModule, recipe.path + ":" + std::to_string(stage.line) + ": stage " + stage.name + "'s ruler gate: " +
                               error.message(),
                  "give the gate lengths (or a stage seq) its tasks fit, or another task");
    }
  }
}

// The mixture a stage drew: its loader replayed from the stage's seed for every step (the draw is a
// function of the seed alone), counted.
Json mixture_drawn(const RecipeStage& stage) {
  const TrainSettings& s = stage.train;
  std::vector<data::MixtureSource> sources = data::parse_mixture(s.mixture);
  data::DataLoaderConfig config;
  config.batch_size = s.run.batch_size * s.run.dp * s.grad_accum;
  config.seq_tokens = s.run.seq_tokens;
  config.seed = s.seed;
  data::MixtureLoader loader(data::open_mixture_shards(sources), sources, config);
  data::Batch batch;
  for (int64_t step = 0; step < s.steps; ++step) loader.next(batch);
  const data::MixtureDraws& draws = loader.draws();
  Json json = Json::array();
  for (size_t i = 0; i < sources.size(); ++i)
    json.push_back({{"data", sources[i].dir},
                    {"weight", sources[i].weight},
                    {"rows", draws.rows[i]},
                    {"tokens", draws.tokens[i]},
                    {"documents", draws.documents[i]},
                    {"cut_documents", draws.cut_documents[i]}});
  Json histogram = Json::object();
  for (size_t bucket = 0; bucket < draws.length_histogram.size(); ++bucket)
    if (draws.length_histogram[bucket] > 0)
      histogram[std::to_string(int64_t{1} << bucket) + "-" + std::to_string((int64_t{2} << bucket) - 1)] =
          draws.length_histogram[bucket];
  return {{"sources", json}, {"document_tokens", histogram}};
}

// An eval of `checkpoint` at S tokens laid out as the stage is (its backend, precision, offload; its chunk,
// at most S), forward only.
EvalSettings gate_eval(const Recipe& recipe, const RecipeStage& stage, const std::string& checkpoint, int64_t seq_tokens,
                       const std::string& out_dir) {
  EvalSettings e;
  const pipeline::RunSpec& trained = stage.train.run;
  e.run.backend = trained.backend;
  e.run.precision = trained.precision;
  e.run.offload = trained.offload;
  e.run.threads = trained.threads;
  e.run.sp = trained.sp;
  e.run.seq_tokens = seq_tokens;
  e.run.chunk_tokens = trained.chunk_tokens > 0 ? std::min(trained.chunk_tokens, seq_tokens) : 0;
  e.run.chunks = trained.chunk_tokens > 0 ? 1 : trained.chunks;
  e.checkpoint = checkpoint;
  e.data_dir = recipe.data_dir;
  e.passkey_lengths = "none";
  e.out_dir = out_dir;
  return e;
}

// Mean loss of the buckets whose positions lie in [first, last].
double loss_between(const std::vector<LossBucket>& buckets, int64_t first, int64_t last) {
  double tokens = 0, sum = 0;
  for (const LossBucket& bucket : buckets) {
    if (bucket.positions.first < first || bucket.positions.last > last) continue;
    tokens += bucket.tokens;
    sum += bucket.loss_sum;
  }
  return tokens > 0 ? sum / tokens : std::numeric_limits<double>::quiet_NaN();
}

Json buckets_json(const EvalResult& result) {
  Json json = Json::array();
  for (const LossBucket& bucket : result.buckets)
    json.push_back({{"first", bucket.positions.first}, {"last", bucket.positions.last}, {"loss", bucket.mean()},
                    {"tokens", bucket.tokens}});
  return json;
}

class ExtendRun {
 public:
  ExtendRun(const ExtendSettings& settings, comm::Communicator& world)
      : settings_(settings), world_(world), recipe_(load_recipe(settings.recipe)), resolved_(resolved_json(recipe_)) {}

  int run();

 private:
  int dry_run();
  void take_folder();
  void import_base();
  // Trains stage i to its last step (fresh, or resumed from its checkpoint); returns the trainer's result.
  TrainResult train_stage(size_t i);
  // Runs stage i's gates (or reads them when they ran); returns whether a gate of policy stop failed.
  bool gate_stage(size_t i);
  double base_short_loss(const RecipeStage& stage);
  void write_report();
  bool rank0() const { return world_.rank() == 0; }
  std::string stage_file(size_t i, const char* name) const { return path_in(stage_dir(recipe_, i), name); }
  std::string final_checkpoint(size_t i) const {
    return path_in(stage_dir(recipe_, i), "step_" + std::to_string(recipe_.stages[i].train.steps));
  }
  std::string base_folder() const {
    return model::is_gguf_path(recipe_.base_model) ? path_in(recipe_.out_dir, "base") : recipe_.base_model;
  }

  ExtendSettings settings_;
  comm::Communicator& world_;
  Recipe recipe_;
  Json resolved_;
  Timer timer_;
};

int ExtendRun::dry_run() {
  check_data(recipe_);
  log::info("recipe " + recipe_.path + ": " + std::to_string(recipe_.stages.size()) + " stages from " + recipe_.base_model +
            " (context " + std::to_string(recipe_.base_seq) + "), run folder " + recipe_.out_dir);
  std::vector<std::string> rows;
  for (size_t i = 0; i < recipe_.stages.size(); ++i) {
    const RecipeStage& stage = recipe_.stages[i];
    TrainSettings s = stage.train;
    s.dry_run = true;
    s.init_from = recipe_.base_model;  // its architecture; the RoPE is the stage's
    s.init_optimizer = false;
    MemoryTiers::instance().reset_peak(Tier::compute);  // each stage's own peaks, not the process's
    MemoryTiers::instance().reset_peak(Tier::offload);
    const TrainResult result = train(s, world_);
    char row[400];
    std::snprintf(row, sizeof row, "  %-3zu %-10s S %-8lld steps %-6lld tokens %-10.3g %-6s %-40s compute %-11s %s %s",
                  i + 1, stage.name.c_str(), static_cast<long long>(s.run.seq_tokens), static_cast<long long>(s.steps),
                  stage_tokens(stage), pipeline::spelling(s.run.precision).c_str(),
                  (describe_layout(s.run) + (stage.auto_layout ? " (auto)" : "")).c_str(),
                  format_bytes(static_cast<double>(result.compute_peak_bytes)).c_str(),
                  pipeline::spelling(s.run.offload.kind).c_str(),
                  format_bytes(static_cast<double>(result.offload_peak_bytes)).c_str());
    rows.push_back(row);
  }
  log::info("dry run of " + recipe_.path + " (per rank; nothing trained):");
  for (const std::string& row : rows) log::info(row);
  log::info("resolved recipe:\n" + resolved_.dump(2));
  return 0;
}

void ExtendRun::take_folder() {
  const std::string resolved_path = path_in(recipe_.out_dir, kResolvedFile);
  const bool has_run = fs::exists(resolved_path);
  if (has_run && !settings_.resume && !settings_.overwrite)
    throw Error(kModule, recipe_.out_dir + " holds a run of a recipe (" + resolved_path + ")",
                "continue it with --resume, or start afresh with --overwrite (its stages are deleted)");
  if (settings_.resume && settings_.overwrite)
    throw Error(kModule, "--resume and --overwrite contradict each other", "give one");
  if (has_run && settings_.resume) {
    size_t started = 0;
    for (size_t i = 0; i < recipe_.stages.size(); ++i)
      if (fs::exists(stage_dir(recipe_, i))) started = i + 1;
    for (const std::string& accepted : check_recipe_edit(read_json(resolved_path), resolved_, started))
      log::info("recipe edited in a stage that has not started, accepted: " + accepted);
  }
  world_.barrier();
  if (!rank0()) return;
  if (has_run && settings_.overwrite) {
    for (const auto& entry : fs::directory_iterator(recipe_.out_dir)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("stage") || name == "base" || name == "base_eval" || name == "base_short_loss.json" ||
          name == "report.json" || name == "summary.txt" || name == kResolvedFile) {
        log::info("--overwrite: removing " + entry.path().string());
        fs::remove_all(entry.path());
      }
    }
  }
  create_folder(recipe_.out_dir, kModule, "the run folder");
  write_text_file_atomic(resolved_path, resolved_.dump(2) + "\n", kModule);
}

void ExtendRun::import_base() {
  if (!model::is_gguf_path(recipe_.base_model) || fs::exists(base_folder())) return;
  if (rank0()) {
    log::info("base model: converting " + recipe_.base_model + " into " + base_folder());
    std::string written = convert_gguf(kModule, recipe_.base_model, base_folder());
    if (!written.empty() && written.back() == '\n') written.pop_back();
    log::info(written);
  }
  world_.barrier();
}

TrainResult ExtendRun::train_stage(size_t i) {
  const RecipeStage& stage = recipe_.stages[i];
  TrainSettings s = stage.train;
  const std::string dir = stage_dir(recipe_, i);
  const bool has_checkpoint = fs::exists(dir) && !resume_checkpoint(dir).empty();
  if (has_checkpoint) {  // the stage's own checkpoint holds weights, moments and the data cursor
    s.resume = true;
    s.init_from.clear();
    s.init_optimizer = false;
  } else {
    s.overwrite = fs::exists(dir);  // a start killed before its first checkpoint
  }
  log::info("stage " + std::to_string(i + 1) + "/" + std::to_string(recipe_.stages.size()) + " " + stage.name + ": S " +
            std::to_string(s.run.seq_tokens) + ", " + std::to_string(s.steps) + " steps, " + describe_layout(s.run) +
            (stage.auto_layout ? " (auto)" : "") + (has_checkpoint ? ", resumed" : ", from " + s.init_from) +
            (stage.carry_optimizer && !has_checkpoint ? " with its optimizer state" : ""));
  return train(s, world_);
}

double ExtendRun::base_short_loss(const RecipeStage& stage) {
  const int64_t sequences = stage.gates.short_loss.sequences;
  const std::string path = path_in(recipe_.out_dir, "base_short_loss.json");
  if (fs::exists(path)) {
    const Json saved = read_json(path);
    if (saved.value("sequences", int64_t{0}) == sequences && saved.value("seq", int64_t{0}) == recipe_.base_seq)
      return saved["loss"].get<double>();
  }
  EvalSettings e = gate_eval(recipe_, stage, base_folder(), recipe_.base_seq, path_in(recipe_.out_dir, "base_eval"));
  e.sequences = sequences;
  const double loss = evaluate(e, world_).mean_loss;
  if (rank0())
    write_text_file_atomic(path, Json{{"seq", recipe_.base_seq}, {"sequences", sequences}, {"loss", loss}}.dump() + "\n",
                           kModule);
  return loss;
}

bool ExtendRun::gate_stage(size_t i) {
  const RecipeStage& stage = recipe_.stages[i];
  const std::string gates_path = stage_file(i, "gates.json");
  const std::string checkpoint = final_checkpoint(i);
  const Json& rules = resolved_["stages"][i]["gates"];
  if (fs::exists(gates_path)) {  // they ran: the same rules on the same weights give the same verdicts
    const Json saved = read_json(gates_path);
    if (saved.value("rules", Json()) == rules) {
      bool stop = false;
      for (const Json& gate : saved["gates"]) {
        log::info("gate " + gate["gate"].get<std::string>() + " after stage " + stage.name + ": " +
                  figure_text(gate) + " (" + gate["rule"].get<std::string>() + "): " +
                  (gate["passed"].get<bool>() ? "passed" : "failed") + " (" + gates_path + ")");
        stop |= !gate["passed"].get<bool>() && gate["policy"] == "stop";
      }
      return stop;
    }
    log::info("the gates of stage " + stage.name + " were edited: running them again");
  }
  Json gates = Json::array();
  // A gate's verdict: logged, and kept with its figure, its rule (for people) and its threshold (for plots).
  const auto verdict = [&](const std::string& name, double figure, const std::string& rule, const std::string& threshold,
                           bool passed, GatePolicy policy, Json details) {
    log::info("gate " + name + " after stage " + stage.name + ": " + (std::isfinite(figure) ? fixed(figure) : "n/a") + " (" + rule + "): " +
              (passed ? "passed" : policy == GatePolicy::stop ? "FAILED, the run stops" : "failed (warn)"));
    gates.push_back({{"gate", name},
                     {"figure", std::isfinite(figure) ? Json(figure) : Json()},
                     {"rule", rule},
                     {"threshold", threshold},
                     {"passed", passed},
                     {"policy", gate_policy_spelling(policy)},
                     {"details", std::move(details)}});
    return !passed && policy == GatePolicy::stop;
  };
  bool stop = false;
  const int64_t seq = stage.train.run.seq_tokens;
  if (const PositionLossGate& g = stage.gates.position_loss; g.on) {
    EvalSettings e = gate_eval(recipe_, stage, checkpoint, seq, stage_file(i, "gate_position_loss"));
    e.sequences = g.sequences;
    const EvalResult result = evaluate(e, world_);
    const double far = loss_between(result.buckets, recipe_.base_seq, seq);
    const double near = loss_between(result.buckets, recipe_.base_seq / 2, recipe_.base_seq - 1);
    const double excess = far - near;
    // A stage no longer than the base context has no positions beyond it: nothing to compare, so it passes.
    const bool beyond = seq > recipe_.base_seq;
    // far and near over all the sequences, and each sequence's own (their spread; the same sequences in every
    // evaluation of this gate, so two models' figures pair up sequence by sequence).
    const auto figures = [&](const EvalResult& evaluated) {
      Json far_each = Json::array(), near_each = Json::array();
      for (const std::vector<LossBucket>& own : evaluated.sequence_buckets) {
        far_each.push_back(beyond ? Json(loss_between(own, recipe_.base_seq, seq)) : Json());
        near_each.push_back(loss_between(own, recipe_.base_seq / 2, recipe_.base_seq - 1));
      }
      return Json{{"far", beyond ? Json(loss_between(evaluated.buckets, recipe_.base_seq, seq)) : Json()},
                  {"near", loss_between(evaluated.buckets, recipe_.base_seq / 2, recipe_.base_seq - 1)},
                  {"far_by_sequence", far_each},
                  {"near_by_sequence", near_each},
                  {"buckets", buckets_json(evaluated)}};
    };
    Json details = figures(result);
    details["sequences"] = result.sequences;
    if (g.compare_base) {  // the same sequences through the base model, as it is and with the stage's RoPE
      EvalSettings base = gate_eval(recipe_, stage, base_folder(), seq, stage_file(i, "gate_position_loss/base"));
      base.sequences = g.sequences;
      details["base"] = figures(evaluate(base, world_));
      base.rope_theta = stage.train.rope_theta;
      base.rope_scaling = stage.train.rope_scaling;
      base.out_dir = stage_file(i, "gate_position_loss/base_with_rope");
      if (base.rope_theta || !base.rope_scaling.empty()) details["base_with_rope"] = figures(evaluate(base, world_));
    }
    stop |= verdict("position_loss", excess,
                    beyond ? "loss at positions >= " + std::to_string(recipe_.base_seq) + " minus loss at " +
                                 std::to_string(recipe_.base_seq / 2) + ".." + std::to_string(recipe_.base_seq - 1) +
                                 " <= " + fixed(g.max_excess, 3)
                           : "not applicable: S " + std::to_string(seq) + " is within the base context",
                    "<= " + fixed(g.max_excess, 3), !beyond || (std::isfinite(excess) && excess <= g.max_excess), g.policy,
                    std::move(details));
  }
  if (const ShortLossGate& g = stage.gates.short_loss; g.on) {
    const double base = base_short_loss(stage);
    EvalSettings e = gate_eval(recipe_, stage, checkpoint, recipe_.base_seq, stage_file(i, "gate_short_loss"));
    e.sequences = g.sequences;
    const double loss = evaluate(e, world_).mean_loss;
    stop |= verdict("short_loss", loss - base,
                    "loss at S " + std::to_string(recipe_.base_seq) + " minus the base model's <= " +
                        fixed(g.max_regression, 3),
                    "<= " + fixed(g.max_regression, 3), std::isfinite(loss) && loss - base <= g.max_regression, g.policy,
                    {{"loss", loss}, {"base_loss", base}, {"sequences", g.sequences}});
  }
  if (const RulerGate& g = stage.gates.ruler; g.on) {
    EvalSettings e = gate_eval(recipe_, stage, checkpoint, seq, stage_file(i, "gate_ruler"));
    e.loss_by_position = false;
    e.ruler.tasks = g.tasks;
    e.ruler.samples = g.samples;
    e.ruler.lengths = g.lengths.empty() ? std::to_string(seq) : g.lengths;
    e.ruler.chat = g.chat_template == "smollm2" ? RulerChat::smollm2 : RulerChat::base;
    const EvalResult result = evaluate(e, world_);
    double sum = 0;
    for (const double average : result.ruler->averages) sum += average;
    const double score = sum / static_cast<double>(result.ruler->averages.size());
    Json lengths = Json::array();
    for (size_t l = 0; l < result.ruler->lengths.size(); ++l)
      lengths.push_back({{"length", result.ruler->lengths[l]}, {"average", result.ruler->averages[l]}});
    stop |= verdict("ruler", score, g.tasks + " x " + std::to_string(g.samples) + " samples: average >= " + fixed(g.min_score, 1),
                    ">= " + fixed(g.min_score, 1), score >= g.min_score, g.policy, {{"lengths", lengths}});
  }
  if (rank0())
    write_text_file_atomic(gates_path, Json{{"stage", stage.name}, {"rules", rules}, {"gates", gates}}.dump(2) + "\n",
                           kModule);
  return stop;
}

void ExtendRun::write_report() {
  if (!rank0()) return;
  Json stages = Json::array();
  std::string summary = "fpdt extend " + recipe_.path + ": " + recipe_.base_model + " (context " +
                        std::to_string(recipe_.base_seq) + ")\n";
  for (size_t i = 0; i < recipe_.stages.size(); ++i) {
    const RecipeStage& stage = recipe_.stages[i];
    Json entry = {{"name", stage.name},
                  {"seq", stage.train.run.seq_tokens},
                  {"steps", stage.train.steps},
                  {"tokens", stage_tokens(stage)},
                  {"rope_theta", stage.train.rope_theta ? Json(*stage.train.rope_theta) : Json()},
                  {"rope_scaling", stage.train.rope_scaling.empty() ? Json() : Json::parse(stage.train.rope_scaling)},
                  {"layout", describe_layout(stage.train.run) + (stage.auto_layout ? " (auto)" : "")},
                  {"precision", pipeline::spelling(stage.train.run.precision)},
                  {"optimizer", stage.carry_optimizer ? "carry" : "fresh"}};
    std::string line = "stage " + std::to_string(i + 1) + " " + stage.name + " (S " +
                       std::to_string(stage.train.run.seq_tokens) + ", " + std::to_string(stage.train.steps) + " steps): ";
    // Training as its metrics log has it (every step's, across resumes): losses, validation, peaks.
    Json losses = Json::array();
    double last_val_loss = -1, compute_peak = 0, offload_peak = 0;
    if (std::ifstream metrics(stage_file(i, "metrics.jsonl")); metrics) {
      for (std::string text; std::getline(metrics, text);) {
        const Json step = Json::parse(text, nullptr, false);
        if (!step.is_object() || !step.contains("loss")) continue;
        losses.push_back({step["step"], step["loss"]});
        if (step.contains("val_loss")) last_val_loss = step["val_loss"].get<double>();
        compute_peak = std::max(compute_peak, step.value("compute_peak_bytes", 0.0));
        offload_peak = std::max(offload_peak, step.value("offload_peak_bytes", 0.0));
      }
    }
    entry["loss_by_step"] = losses;
    entry["last_val_loss"] = last_val_loss;
    entry["compute_peak_bytes"] = compute_peak;
    entry["offload_peak_bytes"] = offload_peak;
    if (!stage.train.mixture.empty() && !losses.empty()) entry["mixture"] = mixture_drawn(stage);
    if (losses.empty()) {
      line += "not trained yet";
    } else {
      line += "loss " + fixed(losses.front()[1].get<double>()) + " -> " + fixed(losses.back()[1].get<double>()) +
              ", compute peak " + format_bytes(compute_peak) + ", offload peak " + format_bytes(offload_peak);
    }
    if (fs::exists(stage_file(i, "gates.json"))) {
      entry["gates"] = read_json(stage_file(i, "gates.json"))["gates"];
      for (const Json& gate : entry["gates"])
        line += "; " + gate["gate"].get<std::string>() + " " + figure_text(gate) +
                (gate["passed"].get<bool>() ? " passed" : " failed");
    }
    stages.push_back(entry);
    summary += line + "\n";
  }
  Json report = {{"recipe", resolved_}, {"stages", stages}};
  if (const std::string base = path_in(recipe_.out_dir, "base_short_loss.json"); fs::exists(base))
    report["base_short_loss"] = read_json(base);
  write_text_file_atomic(path_in(recipe_.out_dir, "report.json"), report.dump(2) + "\n", kModule);
  write_text_file_atomic(path_in(recipe_.out_dir, "summary.txt"), summary, kModule);
}

int ExtendRun::run() {
  if (settings_.dry_run) return dry_run();
  check_data(recipe_);
  take_folder();
  import_base();
  double left_tokens = 0, trained_tokens = 0;  // of the stages still to train; trained by this process
  for (const RecipeStage& stage : recipe_.stages) left_tokens += stage_tokens(stage);
  for (size_t i = 0; i < recipe_.stages.size(); ++i) {
    const RecipeStage& stage = recipe_.stages[i];
    left_tokens -= stage_tokens(stage);
    if (!fs::exists(final_checkpoint(i))) {
      const TrainResult result = train_stage(i);
      if (result.preempted_by != 0) {
        write_report();
        log::info("stage " + stage.name + " was preempted and saved; continue with fpdt extend " + recipe_.path + " --resume");
        return kPreemptedExitStatus;
      }
      if (!result.already_complete) trained_tokens += stage_tokens(stage);
    }
    const bool stop = gate_stage(i);
    write_report();
    const double seconds = timer_.seconds();
    log::info("stage " + std::to_string(i + 1) + "/" + std::to_string(recipe_.stages.size()) + " " + stage.name +
              " done; run " + format_eta(seconds) + " so far" +
              (left_tokens > 0 && trained_tokens > 0
                   ? ", ETA of the rest " + format_eta(seconds / trained_tokens * left_tokens) +
                         " (at this process's tokens per second so far)"
                   : ""));
    if (stop) {
      log::error("[extend] a gate of policy stop failed after stage " + stage.name + " (figures in " +
                 stage_file(i, "gates.json") + "); the run stops. Its checkpoints are kept: edit the gate or the next "
                 "stages and continue with --resume");
      return kGateStoppedExitStatus;
    }
  }
  log::info("report: " + path_in(recipe_.out_dir, "report.json") + ", " + path_in(recipe_.out_dir, "summary.txt"));
  return 0;
}

}  // namespace

int run_extend(const ExtendSettings& settings, comm::Communicator& world) { return ExtendRun(settings, world).run(); }

}  // namespace fpdt::train
