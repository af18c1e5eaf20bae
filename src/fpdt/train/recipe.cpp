// Recipes of `fpdt extend` (see recipe.h): the YAML read with yaml-cpp, every value checked where it is
// (file:line: field), each stage resolved into complete `fpdt train` settings.
#include "fpdt/train/recipe.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/data/mixture.h"
#include "fpdt/model/gguf.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/train/auto_layout.h"
#include "fpdt/train/ruler.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "recipe";
namespace fs = std::filesystem;

// The train options a recipe sets itself, which a stage may not give.
const std::set<std::string> kOwnedOptions = {"init-from", "init-optimizer", "out",      "data",   "mixture", "resume",
                                             "overwrite", "dry-run",        "schedule", "model",  "trace",   "stop-after",
                                             "rope-theta", "rope-scaling"};
// The keys of a stage besides its train options.
const std::vector<std::string> kStageKeys = {"name", "rope", "optimizer", "layout", "gates", "batch_tokens"};
const std::vector<std::string> kTopKeys = {"model", "data", "out", "base_seq", "mixture", "budget", "train", "gates", "stages"};

std::string join(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : ", ") + word;
  return text;
}

// Reads nodes of one file; every error names the file, the node's line and the field.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const YAML::Node& node, const std::string& field, const std::string& what,
                         const std::string& hint = "") const {
    const int line = node.IsDefined() ? node.Mark().line + 1 : 0;
    throw Error(kModule, path_ + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + field + ": " + what, hint);
  }

  // The keys of a map, each checked against `known` (unknown ones refused with the known ones listed).
  void check_keys(const YAML::Node& map, const std::string& field, const std::vector<std::string>& known,
                  const std::set<std::string>& also_known = {}) const {
    if (!map.IsMap()) fail(map, field, "is not a map of fields");
    for (const auto& entry : map) {
      const std::string key = entry.first.as<std::string>();
      if (std::find(known.begin(), known.end(), key) != known.end() || also_known.count(key)) continue;
      std::vector<std::string> listed = known;
      listed.insert(listed.end(), also_known.begin(), also_known.end());
      fail(entry.first, child(field, key), "unknown field", "the known fields here: " + join(listed));
    }
  }

  std::string text(const YAML::Node& node, const std::string& field) const {
    if (!node.IsScalar()) fail(node, field, "is not a single value");
    return node.Scalar();
  }
  double number(const YAML::Node& node, const std::string& field, Unit unit = Unit::plain) const {
    const std::string value = text(node, field);
    const auto parsed = parse_number(value, unit);
    if (!parsed) fail(node, field, "'" + value + "' is not a number");
    return static_cast<double>(*parsed);
  }
  int64_t whole(const YAML::Node& node, const std::string& field, Unit unit = Unit::plain, int64_t at_least = 0) const {
    const double value = number(node, field, unit);
    if (value != std::floor(value) || value < static_cast<double>(at_least) || value > 9e15)
      fail(node, field, "'" + text(node, field) + "' is not a whole number of at least " + std::to_string(at_least));
    return static_cast<int64_t>(value);
  }
  bool flag(const YAML::Node& node, const std::string& field) const {
    const std::string value = text(node, field);
    if (value != "true" && value != "false") fail(node, field, "'" + value + "' is not true or false");
    return value == "true";
  }
  GatePolicy policy(const YAML::Node& node, const std::string& field) const {
    const std::string value = text(node, field);
    if (value == "stop") return GatePolicy::stop;
    if (value == "warn") return GatePolicy::warn;
    fail(node, field, "'" + value + "' is not a policy", "stop (the run ends when the gate fails) or warn");
  }
  static std::string child(const std::string& field, const std::string& key) {
    return field.empty() ? key : field + "." + key;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A gate's fields over `gate` (the recipe's defaults for it); `on` once the gate is named.
void read_gates(const Reader& reader, const YAML::Node& node, const std::string& field, StageGates& gates) {
  reader.check_keys(node, field, {"position_loss", "short_loss", "ruler"});
  if (const YAML::Node gate = node["position_loss"]) {
    const std::string at = field + ".position_loss";
    reader.check_keys(gate, at, {"sequences", "max_excess", "compare_base", "policy"});
    PositionLossGate& g = gates.position_loss;
    g.on = true;
    if (gate["sequences"]) g.sequences = reader.whole(gate["sequences"], at + ".sequences", Unit::plain, 1);
    if (gate["max_excess"]) g.max_excess = reader.number(gate["max_excess"], at + ".max_excess");
    if (gate["compare_base"]) g.compare_base = reader.flag(gate["compare_base"], at + ".compare_base");
    if (gate["policy"]) g.policy = reader.policy(gate["policy"], at + ".policy");
  }
  if (const YAML::Node gate = node["short_loss"]) {
    const std::string at = field + ".short_loss";
    reader.check_keys(gate, at, {"sequences", "max_regression", "policy"});
    ShortLossGate& g = gates.short_loss;
    g.on = true;
    if (gate["sequences"]) g.sequences = reader.whole(gate["sequences"], at + ".sequences", Unit::plain, 1);
    if (gate["max_regression"]) g.max_regression = reader.number(gate["max_regression"], at + ".max_regression");
    if (gate["policy"]) g.policy = reader.policy(gate["policy"], at + ".policy");
  }
  if (const YAML::Node gate = node["ruler"]) {
    const std::string at = field + ".ruler";
    reader.check_keys(gate, at, {"tasks", "samples", "lengths", "template", "min_score", "policy"});
    RulerGate& g = gates.ruler;
    g.on = true;
    if (gate["tasks"]) {
      g.tasks = reader.text(gate["tasks"], at + ".tasks");
      RulerSettings check;
      check.tasks = g.tasks;
      try {
        ruler_task_names(check);
      } catch (const Error& error) {
        reader.fail(gate["tasks"], at + ".tasks", error.message(), error.hint());
      }
    }
    if (gate["samples"]) g.samples = reader.whole(gate["samples"], at + ".samples", Unit::plain, 1);
    if (gate["lengths"]) g.lengths = reader.text(gate["lengths"], at + ".lengths");
    if (gate["template"]) {
      g.chat_template = reader.text(gate["template"], at + ".template");
      if (g.chat_template != "base" && g.chat_template != "smollm2")
        reader.fail(gate["template"], at + ".template", "'" + g.chat_template + "' is not a template", "base or smollm2");
    }
    if (gate["min_score"]) g.min_score = reader.number(gate["min_score"], at + ".min_score");
    if (gate["policy"]) g.policy = reader.policy(gate["policy"], at + ".policy");
  }
}

nlohmann::ordered_json gates_json(const StageGates& gates) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  if (gates.position_loss.on)
    json["position_loss"] = {{"sequences", gates.position_loss.sequences},
                             {"max_excess", gates.position_loss.max_excess},
                             {"compare_base", gates.position_loss.compare_base},
                             {"policy", gate_policy_spelling(gates.position_loss.policy)}};
  if (gates.short_loss.on)
    json["short_loss"] = {{"sequences", gates.short_loss.sequences},
                          {"max_regression", gates.short_loss.max_regression},
                          {"policy", gate_policy_spelling(gates.short_loss.policy)}};
  if (gates.ruler.on)
    json["ruler"] = {{"tasks", gates.ruler.tasks},         {"samples", gates.ruler.samples},
                     {"lengths", gates.ruler.lengths},     {"template", gates.ruler.chat_template},
                     {"min_score", gates.ruler.min_score}, {"policy", gate_policy_spelling(gates.ruler.policy)}};
  return json;
}

// The base model's config: a GGUF file's metadata or a folder's config.json.
model::ModelConfig base_config(const Reader& reader, const YAML::Node& node, const std::string& path) {
  try {
    if (model::is_gguf_path(path)) return model::gguf_model_config(model::GgufFile(path));
    return model::load_hf_config(path_in(path, "config.json"));
  } catch (const Error& error) {
    reader.fail(node, "model", error.message(), error.hint());
  }
}

std::string stage_folder(const std::string& out_dir, size_t stage, const std::string& name) {
  return path_in(out_dir, "stage" + std::to_string(stage + 1) + "-" + name);
}

std::string expand_home(const std::string& path) {
  const char* home = std::getenv("HOME");
  if (path.starts_with("~/") && home) return std::string(home) + path.substr(1);
  return path;
}

// A stage's train options (the recipe's `train` map, then the stage's own keys over it) into `settings`,
// each parsed by fpdt train's declaration; `given` collects the names set.
void apply_train_options(const Reader& reader, const std::vector<std::pair<YAML::Node, std::string>>& maps,
                         TrainSettings& settings, std::set<std::string>& given) {
  OptionSet set("train", "");
  declare_train_options(set, settings);
  std::map<std::string, std::pair<YAML::Node, std::string>> merged;  // name → (value, field)
  std::vector<std::string> order;
  for (const auto& [map, field] : maps) {
    for (const auto& entry : map) {
      const std::string key = entry.first.as<std::string>();
      if (std::find(kStageKeys.begin(), kStageKeys.end(), key) != kStageKeys.end()) continue;
      if (!merged.count(key)) order.push_back(key);
      merged[key] = {entry.second, Reader::child(field, key)};
    }
  }
  for (const std::string& key : order) {
    const auto& [value, field] = merged[key];
    if (kOwnedOptions.count(key))
      reader.fail(value, field, "is the recipe's own, not a stage's",
                  key.starts_with("rope") ? "give the stage's RoPE as rope: {theta: T} or rope: {type: yarn, factor: F}"
                                          : "the recipe sets model, data, mixture and out at its top; stages chain themselves");
    const bool known = std::any_of(set.options().begin(), set.options().end(),
                                   [&](const Option& option) { return option.name() == key; });
    if (!known) {
      std::vector<std::string> names = kStageKeys;
      for (const Option& option : set.options())
        if (!kOwnedOptions.count(option.name())) names.push_back(option.name());
      reader.fail(value, field, "unknown field", "a stage's fields: " + join(names));
    }
    std::string argument = "--" + key;
    if (set.option(key).json().is_boolean()) {
      if (!reader.flag(value, field)) continue;  // flags are off unless given
    } else {
      argument += "=" + reader.text(value, field);
    }
    char* argv[] = {argument.data()};
    try {
      set.parse(1, argv);
    } catch (const Error& error) {
      reader.fail(value, field, error.message(), error.hint());
    }
    given.insert(key);
  }
}

std::string rope_scaling_json(const Reader& reader, const YAML::Node& rope, const std::string& field, const std::string& type,
                              double factor, int64_t base_seq) {
  if (type != "yarn" && type != "linear" && type != "dynamic")
    reader.fail(rope["type"], field + ".type", "'" + type + "' is not a RoPE scaling this recipe spells", "yarn, linear or dynamic");
  if (!(factor >= 1.0)) reader.fail(rope["factor"], field + ".factor", "a scaling factor is at least 1");
  nlohmann::ordered_json json = {{"rope_type", type}, {"factor", factor}};
  if (type == "yarn") json["original_max_position_embeddings"] = base_seq;
  return json.dump();
}

}  // namespace

std::string gate_policy_spelling(GatePolicy policy) { return policy == GatePolicy::stop ? "stop" : "warn"; }

std::string stage_dir(const Recipe& recipe, size_t stage) {
  return stage_folder(recipe.out_dir, stage, recipe.stages[stage].name);
}

Recipe load_recipe(const std::string& path) {
  const Reader reader(path);
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error(kModule, "cannot read the recipe " + path, "give the path of a YAML recipe (recipes/ has examples)");
  } catch (const YAML::ParserException& error) {
    throw Error(kModule, path + ":" + std::to_string(error.mark.line + 1) + ":" + std::to_string(error.mark.column + 1) +
                             ": not YAML: " + error.msg,
                "a recipe is a YAML map (recipes/ has examples)");
  }
  Recipe recipe;
  recipe.path = path;
  reader.check_keys(root, "", kTopKeys);
  for (const char* required : {"model", "data", "stages"})
    if (!root[required]) reader.fail(root, required, "missing", "a recipe names model, data and stages");
  recipe.base_model = expand_home(reader.text(root["model"], "model"));
  recipe.data_dir = reader.text(root["data"], "data");
  recipe.out_dir = root["out"] ? reader.text(root["out"], "out") : "runs/" + fs::path(path).stem().string();
  const model::ModelConfig base = base_config(reader, root["model"], recipe.base_model);
  recipe.base_seq = root["base_seq"] ? reader.whole(root["base_seq"], "base_seq", Unit::tokens, 1)
                    : base.rope_scaling.original_max_positions > 0 ? base.rope_scaling.original_max_positions
                                                      : base.max_positions;
  if (recipe.base_seq <= 0)
    reader.fail(root["model"], "model", "its config gives no context length", "give base_seq: the length it was trained at");

  std::string mixture;
  if (const YAML::Node sources = root["mixture"]) {
    if (!sources.IsSequence() || sources.size() == 0) reader.fail(sources, "mixture", "is not a list of sources");
    std::vector<data::MixtureSource> parsed;
    for (size_t i = 0; i < sources.size(); ++i) {
      const std::string at = "mixture[" + std::to_string(i) + "]";
      const YAML::Node source = sources[i];
      reader.check_keys(source, at, {"data", "weight", "min_doc_tokens", "max_doc_tokens"});
      if (!source["data"]) reader.fail(source, at + ".data", "missing", "each source names its shard folder");
      data::MixtureSource rule;
      rule.dir = reader.text(source["data"], at + ".data");
      if (source["weight"]) rule.weight = reader.number(source["weight"], at + ".weight");
      if (!(rule.weight > 0)) reader.fail(source["weight"], at + ".weight", "a weight is above 0");
      if (source["min_doc_tokens"]) rule.min_doc_tokens = reader.whole(source["min_doc_tokens"], at + ".min_doc_tokens", Unit::tokens);
      if (source["max_doc_tokens"]) rule.max_doc_tokens = reader.whole(source["max_doc_tokens"], at + ".max_doc_tokens", Unit::tokens);
      if (rule.max_doc_tokens > 0 && rule.min_doc_tokens > rule.max_doc_tokens)
        reader.fail(source, at, "min_doc_tokens is above max_doc_tokens: no document obeys both");
      if (!fs::exists(path_in(rule.dir, "train.bin")))
        reader.fail(source["data"], at + ".data", rule.dir + " holds no train.bin", "make it with fpdt tokenize --out " + rule.dir);
      parsed.push_back(rule);
    }
    mixture = data::mixture_spelling(parsed);
  }
  if (!fs::exists(path_in(recipe.data_dir, "val.bin")))
    reader.fail(root["data"], "data", recipe.data_dir + " holds no val.bin (the held-out tokens of validation and gates)",
                "make it with fpdt tokenize --val-fraction F --out " + recipe.data_dir);

  if (const YAML::Node node = root["budget"]) {
    reader.check_keys(node, "budget", {"compute", "ram", "disk"});
    if (node["compute"]) recipe.budget.compute_bytes = reader.whole(node["compute"], "budget.compute", Unit::bytes);
    if (node["ram"]) recipe.budget.ram_bytes = reader.whole(node["ram"], "budget.ram", Unit::bytes);
    if (node["disk"]) recipe.budget.disk_bytes = reader.whole(node["disk"], "budget.disk", Unit::bytes);
  }
  StageGates default_gates;
  if (const YAML::Node node = root["gates"]) read_gates(reader, node, "gates", default_gates);
  std::vector<std::pair<YAML::Node, std::string>> defaults;
  if (const YAML::Node node = root["train"]) {
    if (!node.IsMap()) reader.fail(node, "train", "is not a map of fpdt train options");
    defaults.emplace_back(node, "train");
  }

  const YAML::Node stages = root["stages"];
  if (!stages.IsSequence() || stages.size() == 0) reader.fail(stages, "stages", "is not a list of stages");
  std::set<std::string> names;
  for (size_t i = 0; i < stages.size(); ++i) {
    const YAML::Node node = stages[i];
    const std::string at = "stages[" + std::to_string(i) + "]";
    if (!node.IsMap()) reader.fail(node, at, "is not a map of fields");
    RecipeStage stage;
    stage.line = node.Mark().line + 1;
    stage.name = node["name"] ? reader.text(node["name"], at + ".name") : std::to_string(i + 1);
    if (stage.name.empty() || stage.name.find_first_of("/\\ ") != std::string::npos || !names.insert(stage.name).second)
      reader.fail(node["name"], at + ".name", "'" + stage.name + "' is empty, repeated or not a folder name",
                  "give each stage its own short name, e.g. 16k");
    // Train options: the defaults, then the stage's own.
    std::vector<std::pair<YAML::Node, std::string>> maps = defaults;
    maps.emplace_back(node, at);
    std::set<std::string> given;
    apply_train_options(reader, maps, stage.train, given);
    TrainSettings& train = stage.train;
    train.out_dir = stage_folder(recipe.out_dir, i, stage.name);
    train.data_dir = recipe.data_dir;
    train.mixture = mixture;
    // Every stage starts from a model: the base (converted into the run folder when it is a GGUF file), then
    // the previous stage's last checkpoint.
    train.init_from = i == 0 ? (model::is_gguf_path(recipe.base_model) ? path_in(recipe.out_dir, "base") : recipe.base_model)
                             : path_in(stage_dir(recipe, i - 1), "step_" + std::to_string(recipe.stages[i - 1].train.steps));
    if (!given.count("seed")) train.seed += i;  // each stage its own data order
    // RoPE: the stage's, else the previous stage's (the base model's for the first).
    if (i > 0) {
      train.rope_theta = recipe.stages[i - 1].train.rope_theta;
      train.rope_scaling = recipe.stages[i - 1].train.rope_scaling;
    }
    if (const YAML::Node rope = node["rope"]) {
      const std::string field = at + ".rope";
      reader.check_keys(rope, field, {"theta", "type", "factor"});
      if (rope["theta"]) train.rope_theta = reader.number(rope["theta"], field + ".theta");
      if (rope["type"] || rope["factor"]) {
        if (!rope["type"] || !rope["factor"]) reader.fail(rope, field, "a scaling needs both type and factor");
        train.rope_scaling = rope_scaling_json(reader, rope, field, reader.text(rope["type"], field + ".type"),
                                               reader.number(rope["factor"], field + ".factor"), recipe.base_seq);
      }
    }
    stage.carry_optimizer = i > 0;
    if (const YAML::Node optimizer = node["optimizer"]) {
      const std::string value = reader.text(optimizer, at + ".optimizer");
      if (value != "carry" && value != "fresh")
        reader.fail(optimizer, at + ".optimizer", "'" + value + "' is not carry or fresh",
                    "carry: the previous stage's AdamW moments; fresh: new ones");
      if (value == "carry" && i == 0)
        reader.fail(optimizer, at + ".optimizer", "the first stage has no previous stage to carry an optimizer from",
                    "drop it (the first stage starts fresh from the base model)");
      stage.carry_optimizer = value == "carry";
    }
    train.init_optimizer = stage.carry_optimizer;
    if (const YAML::Node tokens = node["batch_tokens"]) {
      const int64_t total = reader.whole(tokens, at + ".batch_tokens", Unit::tokens, 1);
      const int64_t micro = train.run.seq_tokens * train.run.batch_size * train.run.dp;
      if (given.count("grad-accum")) reader.fail(tokens, at + ".batch_tokens", "and grad-accum both set the batch", "give one");
      if (total % micro != 0)
        reader.fail(tokens, at + ".batch_tokens",
                    std::to_string(total) + " tokens are not a whole number of micro-batches of seq x batch x dp = " +
                        std::to_string(micro),
                    "give a multiple of " + std::to_string(micro));
      train.grad_accum = total / micro;
    }
    stage.gates = default_gates;
    if (const YAML::Node gates = node["gates"]) read_gates(reader, gates, at + ".gates", stage.gates);
    if (const YAML::Node layout = node["layout"]) {
      const std::string value = reader.text(layout, at + ".layout");
      if (value != "auto") reader.fail(layout, at + ".layout", "'" + value + "' is not auto",
                                       "auto, or leave it out and give chunk-tokens, offload, recompute as train options");
      for (const char* chosen : {"chunk-tokens", "chunks", "offload", "recompute", "mode", "compute-mem", "offload-mem"})
        if (given.count(chosen))
          reader.fail(layout, at + ".layout", std::string("auto chooses ") + chosen + ", which the stage also gives",
                      "drop one of them");
      stage.auto_layout = true;
      model::ModelConfig config = base;
      try {
        model::override_rope(config, train.rope_theta, train.rope_scaling);
        train.run = choose_layout(kModule, config, train.run, recipe.budget).run();
      } catch (const Error& error) {
        reader.fail(layout, at + ".layout", error.message(), error.hint());
      }
    }
    try {
      check_settings(train);
    } catch (const Error& error) {
      reader.fail(node, at, error.message(), error.hint());
    }
    recipe.stages.push_back(std::move(stage));
  }
  return recipe;
}

nlohmann::ordered_json resolved_json(const Recipe& recipe) {
  nlohmann::ordered_json json;
  json["recipe"] = recipe.path;
  json["model"] = recipe.base_model;
  json["data"] = recipe.data_dir;
  json["out"] = recipe.out_dir;
  json["base_seq"] = recipe.base_seq;
  json["budget"] = {{"compute", recipe.budget.compute_bytes}, {"ram", recipe.budget.ram_bytes}, {"disk", recipe.budget.disk_bytes}};
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const RecipeStage& stage : recipe.stages) {
    nlohmann::ordered_json entry;
    entry["name"] = stage.name;
    entry["optimizer"] = stage.carry_optimizer ? "carry" : "fresh";
    entry["layout"] = stage.auto_layout ? "auto" : "given";
    entry["train"] = settings_json(stage.train);
    entry["gates"] = gates_json(stage.gates);
    stages.push_back(entry);
  }
  json["stages"] = stages;
  return json;
}

std::vector<std::string> check_recipe_edit(const nlohmann::ordered_json& saved, const nlohmann::ordered_json& current,
                                           size_t started) {
  std::vector<std::string> refused, accepted;
  for (const char* key : {"model", "data", "base_seq"})
    if (started > 0 && saved.value(key, nlohmann::ordered_json()) != current.value(key, nlohmann::ordered_json()))
      refused.push_back(std::string(key) + " " + saved.value(key, nlohmann::ordered_json()).dump() + " -> " +
                        current.value(key, nlohmann::ordered_json()).dump());
  const nlohmann::ordered_json& before = saved["stages"];
  const nlohmann::ordered_json& after = current["stages"];
  if (after.size() < started)
    refused.push_back("the recipe has " + std::to_string(after.size()) + " stages, but " + std::to_string(started) +
                      " have started");
  for (size_t i = 0; i < std::max(before.size(), after.size()); ++i) {
    std::vector<std::string>& list = i < started ? refused : accepted;
    const std::string stage = "stage " + std::to_string(i + 1);
    if (i >= before.size() || i >= after.size()) {
      list.push_back(stage + (i >= after.size() ? " removed" : " added"));
      continue;
    }
    for (const char* key : {"name", "optimizer", "layout"})
      if (before[i][key] != after[i][key])
        list.push_back(stage + ": " + key + " " + before[i][key].dump() + " -> " + after[i][key].dump());
    for (const auto& [option, value] : before[i]["train"].items())
      if (!after[i]["train"].contains(option) || after[i]["train"][option] != value)
        list.push_back(stage + ": " + option + " " + value.dump() + " -> " +
                       (after[i]["train"].contains(option) ? after[i]["train"][option].dump() : std::string("(none)")));
    if (i >= started && before[i]["gates"] != after[i]["gates"]) accepted.push_back(stage + ": gates");
  }
  if (!refused.empty()) {
    std::string listed;
    for (const std::string& difference : refused) listed += (listed.empty() ? " " : "; ") + difference;
    throw Error(kModule, "the recipe was edited after its run started; what differs in stages that have started:" + listed,
                "put those fields back as they were (gates may change), or start the run afresh with --overwrite");
  }
  return accepted;
}

}  // namespace fpdt::train
