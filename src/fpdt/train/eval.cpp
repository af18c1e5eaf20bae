// `fpdt eval` (see eval.h): options, the loss by context position, the passkey grid, their JSON.
#include "fpdt/train/eval.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/log.h"
#include "fpdt/base/machine.h"
#include "fpdt/base/random.h"
#include "fpdt/base/timer.h"
#include "fpdt/data/data_loader.h"
#include "fpdt/data/shard.h"
#include "fpdt/data/shard_tokenizer.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/machine/process.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/pipeline/run_options.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/train/checkpoint.h"
#include "fpdt/train/rank_agreement.h"
#include "fpdt/train/sampler.h"
#include "fpdt/train/settings.h"
#include "fpdt/train/trainer.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "eval";

// The passkey prompt's text (see make_passkey_prompt). The answer is " " + the number, so that a BPE
// tokenizer sees the number as it follows "is" in running text.
constexpr const char* kPasskeyIntro =
    "A secret number is hidden in the long text below. Remember it, for you will be asked for it.\n";
constexpr const char* kPasskeyFiller = "The grass grows, the wind blows, and the river runs on to the sea. ";
constexpr const char* kPasskeyQuestion = "\nWhat is the secret number? The secret number is";
constexpr int64_t kPasskeyDigits = 5;

std::string str(int64_t value) { return std::to_string(value); }

std::string passkey_needle(const std::string& number) {
  return "The secret number is " + number + ". Remember it: " + number + ". ";
}

// Calls visit(position) for every real position (< S) of this rank's chunks, in order.
template <class Visit>
void for_each_local_position(const pipeline::ChunkPlan& plan, Visit&& visit) {
  for (int chunk = 0; chunk < plan.chunks; ++chunk) {
    const int64_t begin = plan.local_chunk_begin(chunk);
    const int64_t end = std::min(begin + plan.local_chunk_tokens, plan.seq_tokens);
    for (int64_t position = begin; position < end; ++position) visit(position);
  }
}

// Index of the bucket of context length n ≥ 1 among `buckets` buckets (the bucket [2^k, 2^(k+1) − 1] is
// k; the last one may hold S too).
size_t bucket_of(int64_t context, size_t buckets) {
  return std::min(static_cast<size_t>(std::bit_width(static_cast<uint64_t>(context)) - 1), buckets - 1);
}

// The prompt lengths --passkey-lengths names (each checked against --seq), or none.
std::vector<int64_t> passkey_lengths(const EvalSettings& s) {
  std::vector<int64_t> lengths;
  if (s.passkey_trials == 0 || s.passkey_lengths == "none") return lengths;
  if (s.passkey_lengths == "auto") {
    for (int64_t L = 1024; L < s.run.seq_tokens; L *= 2) lengths.push_back(L);
    lengths.push_back(s.run.seq_tokens);
    return lengths;
  }
  size_t begin = 0;
  while (begin <= s.passkey_lengths.size()) {
    const size_t end = std::min(s.passkey_lengths.find(',', begin), s.passkey_lengths.size());
    const std::string item = s.passkey_lengths.substr(begin, end - begin);
    const std::optional<long double> value = parse_number(item, Unit::tokens);
    if (!value || *value < 1 || *value != std::floor(*value))
      throw Error(kModule, "--passkey-lengths: '" + item + "' is not a number of tokens",
                  "auto, none, or token counts separated by commas, e.g. 1K,4K,16K");
    if (*value > static_cast<long double>(s.run.seq_tokens))
      throw Error(kModule, "--passkey-lengths: " + item + " tokens is longer than --seq " + str(s.run.seq_tokens),
                  "raise --seq (the model is laid out for sequences of --seq tokens) or shorten the prompt");
    lengths.push_back(static_cast<int64_t>(*value));
    begin = end + 1;
  }
  return lengths;
}

// The shard of the split, checked against the checkpoint's tokenizer.
data::ShardReader open_split(const EvalSettings& s, const data::Tokenizer& tokenizer, const std::string& folder) {
  const std::string path = path_in(s.data_dir, s.split + ".bin");
  if (!std::filesystem::exists(path))
    throw Error(kModule, "no " + s.split + ".bin in " + s.data_dir,
                "tokenize held-out text with the checkpoint's tokenizer: fpdt tokenize --tokenizer " + folder +
                    " --out " + s.data_dir + " FILE...");
  data::ShardReader shard(path);
  data::check_made_by(kModule, shard, tokenizer, folder);
  return shard;
}

// A file time as nanoseconds since 1970 (the file clock's own epoch is the library's choice: libstdc++'s
// makes today's times negative).
int64_t unix_nanoseconds(std::filesystem::file_time_type time) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::file_clock::to_sys(time).time_since_epoch())
      .count();
}

// What a RULER run's answers depend on besides their prompts, and what the prompts are drawn with: a progress
// file made under other ones is refused (read_ruler_progress). The weights are named by their files' sizes
// and modification times, as make knows a file changed. The chunks, the offload tier and the ranks may
// change between a run and its resumption: the pipeline's answers do not depend on them.
nlohmann::ordered_json ruler_identity(const EvalResult& result, const EvalSettings& s, const RulerSources& sources) {
  nlohmann::ordered_json weights = nlohmann::ordered_json::array();
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(result.checkpoint))
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const std::filesystem::path& file : files)
    weights.push_back({{"file", file.filename().string()},
                       {"bytes", std::filesystem::file_size(file)},
                       {"modified_unix_ns", unix_nanoseconds(std::filesystem::last_write_time(file))}});
  return {{"checkpoint", result.checkpoint},
          {"weights", weights},
          {"rope_parameters", nlohmann::ordered_json::parse(result.rope_parameters)},
          {"precision", pipeline::spelling(s.run.precision)},
          {"template", ruler_template_spelling(s.ruler.chat)},
          {"seed", s.ruler.seed},
          {"haystack", sources.essay_origin}};
}

}  // namespace

void declare_eval_options(OptionSet& set, EvalSettings& s) {
  namespace run = pipeline::options;
  set.add("checkpoint", "DIR", "run folder (its latest step), step folder or Hugging Face model folder", s.checkpoint);
  set.add("data", "DIR", "folder with val.bin (and train.bin) made by the checkpoint's tokenizer", s.data_dir);
  set.add("split", "val|train", "the shard the sequences come from", s.split).choices({"val", "train"});
  set.add("out", "DIR", "where loss_by_position.json, passkey.json and ruler.json go (default: <checkpoint>/eval)", s.out_dir);
  run::rope(set, s.rope_theta, s.rope_scaling);
  run::seq(set, s.run.seq_tokens);
  run::batch(set, s.run.batch_size);
  set.add("sequences", "N", "held-out sequences of --seq tokens for the loss by position", s.sequences)
      .at_least(0)
      .zero_means("all");
  set.add("passkey-lengths", "auto|none|L,...",
          "prompt lengths of the passkey grid (auto: 1K, 2K, ... up to --seq; none: no grid)", s.passkey_lengths);
  set.add("passkey-depths", "N", "depths of the number in the filler: 0, 1/(N-1), ..., 1", s.passkey_depths)
      .at_least(1)
      .at_most(101);
  set.add("passkey-trials", "N", "prompts (numbers) per depth and length (0: no passkey grid)", s.passkey_trials)
      .at_least(0);
  set.add("seed", "N", "seed of the passkey numbers", s.seed);
  declare_ruler_options(set, s.ruler);
  run::forward_run(set, s.run, "cut the sequence into --chunks");
  run::mode(set, s.run.mode);
  set.add("dry-run", "", "lay out the forward at --seq (no data, no weights, no arithmetic), print the tier peaks and exit",
          s.dry_run);
}

std::vector<PositionBucket> position_buckets(int64_t seq_tokens) {
  std::vector<PositionBucket> buckets;
  for (int64_t first = 1; first <= seq_tokens; first *= 2)
    buckets.push_back({first, std::min(2 * first - 1, seq_tokens)});
  // S a power of two: its own bucket would hold one position; it joins the one before.
  if (buckets.size() > 1 && buckets.back().first == seq_tokens) {
    buckets.pop_back();
    buckets.back().last = seq_tokens;
  }
  return buckets;
}

int64_t passkey_fixed_tokens(const data::Tokenizer& tokenizer, const std::string& number) {
  return static_cast<int64_t>(tokenizer.encode(kPasskeyIntro).size() + tokenizer.encode(passkey_needle(number)).size() +
                              tokenizer.encode(kPasskeyQuestion).size() + tokenizer.encode(" " + number).size());
}

PasskeyPrompt make_passkey_prompt(const data::Tokenizer& tokenizer, int64_t length_tokens, double depth,
                                  const std::string& number) {
  const std::vector<int32_t> intro = tokenizer.encode(kPasskeyIntro), filler = tokenizer.encode(kPasskeyFiller),
                             needle = tokenizer.encode(passkey_needle(number)),
                             question = tokenizer.encode(kPasskeyQuestion), answer = tokenizer.encode(" " + number);
  const int64_t fixed = passkey_fixed_tokens(tokenizer, number);
  if (length_tokens < fixed)
    throw Error(kModule,
                "a passkey prompt of " + str(length_tokens) + " tokens is shorter than its fixed parts (" + str(fixed) +
                    " tokens: intro, number, question and answer)",
                "use --passkey-lengths of at least " + str(fixed));
  FPDT_CHECK(depth >= 0 && depth <= 1 && !filler.empty(), kModule, "passkey depth must be in [0, 1]", "");
  const int64_t filler_tokens = length_tokens - fixed, unit = static_cast<int64_t>(filler.size());
  // Whole filler sentences before the needle.
  const int64_t before = unit * static_cast<int64_t>(std::floor(depth * static_cast<double>(filler_tokens / unit)));
  PasskeyPrompt prompt;
  std::vector<int32_t>& tokens = prompt.tokens;
  tokens.reserve(static_cast<size_t>(length_tokens));
  auto append = [&](const std::vector<int32_t>& part) { tokens.insert(tokens.end(), part.begin(), part.end()); };
  auto append_filler = [&](int64_t from, int64_t to) {
    for (int64_t i = from; i < to; ++i) tokens.push_back(filler[static_cast<size_t>(i % unit)]);
  };
  append(intro);
  append_filler(0, before);
  prompt.needle_begin = static_cast<int64_t>(tokens.size());
  append(needle);
  append_filler(before, filler_tokens);
  append(question);
  prompt.answer_begin = static_cast<int64_t>(tokens.size());
  append(answer);
  FPDT_ASSERT(static_cast<int64_t>(tokens.size()) == length_tokens);
  return prompt;
}

EvalResult evaluate(const EvalSettings& settings, comm::Communicator& world) {
  EvalSettings s = settings;
  if (s.out_dir.empty()) s.out_dir = path_in(s.checkpoint, "eval");
  check_as_options(kModule, s, declare_eval_options);
  check_ranks_agree(world, kModule, options_json(kModule, settings, declare_eval_options));
  check_runnable(kModule, s.run);
  if (s.run.sp != world.size())
    throw Error(kModule, "--sp " + str(s.run.sp) + " ranks, but the job has " + str(world.size()),
                "launch --sp ranks (mpirun -np P fpdt eval --sp P ...)");
  s.run.forward_only = true;
  s.run.offload = pipeline::with_run_folder(s.run.offload, s.out_dir);
  pipeline::run_chunk_plan(kModule, s.run);
  const std::vector<int64_t> lengths = passkey_lengths(s);
  // A length's passkey prompts are made and held at once (trials × depths of L tokens): within half the
  // machine's memory, or refused now rather than found out after minutes (a dry run makes none).
  for (const int64_t L : lengths) {
    if (s.dry_run) break;
    int64_t prompts = 0, bytes = 0;
    const size_t memory = machine_memory_bytes();
    if (!checked_mul(prompts, s.passkey_trials, s.passkey_depths) || !checked_mul(bytes, prompts, L) ||
        !checked_mul(bytes, bytes, int64_t{2 * sizeof(int32_t)}) ||
        (memory > 0 && static_cast<uint64_t>(bytes) > memory / 2))
      throw Error(kModule,
                  "--passkey-trials " + str(s.passkey_trials) + " x --passkey-depths " + str(s.passkey_depths) +
                      " prompts of " + str(L) + " tokens do not fit in half of this machine's " +
                      format_bytes(static_cast<double>(memory)),
                  "lower --passkey-trials (each cell's accuracy is right/trials: 20 trials give it to ±0.1)");
  }
  const std::vector<std::string> ruler_tasks = ruler_task_names(s.ruler);
  const std::vector<int64_t> ruler_lengths_asked =
      ruler_tasks.empty() ? std::vector<int64_t>{} : ruler_lengths(s.ruler, s.run.seq_tokens);
  if (!ruler_tasks.empty()) load_word_list();  // a missing word list is refused before any work

  // The checkpoint, its tokenizer, the data it is evaluated on.
  EvalResult result;
  result.checkpoint = checkpoint_folder(s.checkpoint);
  model::ModelConfig config = model::load_hf_config(path_in(result.checkpoint, "config.json"));
  model::override_rope(config, s.rope_theta, s.rope_scaling);
  result.positions = model::describe_rope(config);
  result.rope_parameters = model::rope_parameters_json(config);
  result.rope_overridden = s.rope_theta.has_value() || !s.rope_scaling.empty();
  const data::Tokenizer tokenizer = checkpoint_tokenizer(result.checkpoint, config.vocab_size);
  const int64_t S = s.run.seq_tokens;
  data::ShardReader shard;
  if (!s.dry_run) {
  shard = open_split(s, tokenizer, result.checkpoint);
  const int64_t whole = static_cast<int64_t>((shard.token_count() - std::min<uint64_t>(shard.token_count(), 1)) /
                                             static_cast<uint64_t>(S));
  if (whole == 0)
    throw Error(kModule,
                shard.path() + " holds " + std::to_string(shard.token_count()) + " tokens, fewer than one sequence of --seq " +
                    str(S) + " (+1 target)",
                "lower --seq, evaluate --split train, or tokenize more held-out text (fpdt tokenize --val-fraction)");
  if (s.sequences > whole)
    throw Error(kModule,
                "--sequences " + str(s.sequences) + " asks for more than the " + str(whole) + " sequences of " + str(S) +
                    " tokens in " + shard.path(),
                "use --sequences " + str(whole) + " or fewer (0: all of them)");
  result.sequences = !s.loss_by_position ? 0 : s.sequences > 0 ? s.sequences : whole;
  }
  result.seq_tokens = S;
  // The results folder is made (and its writability checked) before the work, not after it.
  if (!s.dry_run && world.rank() == 0) create_folder(s.out_dir, kModule, "results folder (--out)");

  // The model, laid out for forward passes only.
  machine::set_threads(s.run.threads);
  if (s.run.compute_mem_bytes > 0) MemoryTiers::instance().set_limit(Tier::compute, static_cast<size_t>(s.run.compute_mem_bytes));
  auto backend = kernels::make_backend(s.run.backend);
  if (s.run.offload.kind == pipeline::OffloadKind::disk)
    create_folder(s.run.offload.directory, kModule, "offload folder");
  // The weights are the checkpoint's; a dry run's states are counted only, neither allocated nor made.
  pipeline::ModelStates states(config, *backend, world, s.run, s.seed, s.dry_run);
  pipeline::FpdtModel model(config, *backend, world, s.run, states);
  const pipeline::ChunkPlan plan = model.plan_for(S);  // refuses S beyond learned positions
  check_layout_fits(kModule, model, s.run);
  if (s.dry_run) {  // the layout of a forward at S: the tiers' peaks, no weights, no data, no arithmetic
    model.dry_run(S, static_cast<int>(s.run.batch_size));
    // RULER's longest prompts, generated through the KV cache (its peaks, beside the forward's).
    int64_t most_new_tokens = 0;
    for (const std::string& task : ruler_tasks)
      most_new_tokens = std::max(most_new_tokens, ruler_recipe(task).tokens_to_generate);
    if (!ruler_tasks.empty())  // a prompt and its answer fill the length at most
      model.dry_run_generation(std::max<int64_t>(1, ruler_lengths_asked.back() - most_new_tokens), most_new_tokens);
    result.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
    result.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
    result.peak_rss_bytes = machine::peak_rss_bytes();
    return result;
  }
  load_weights(result.checkpoint, config, model.states());
  log::info("eval " + result.checkpoint + ": " + config.name + " (" + result.positions +
            (result.rope_overridden ? ", from --rope-*" : "") + "), S = " + str(S) +
            ", " + str(plan.chunks) + " chunks of " + str(plan.chunk_tokens) + " tokens, offload " +
            pipeline::spelling(s.run.offload) + ", " + str(world.size()) + " rank(s)");

  // Loss by context position: sequence k is tokens [k·S, k·S + S] of the split.
  result.buckets.clear();
  for (const PositionBucket& bucket : position_buckets(S)) result.buckets.push_back(LossBucket{bucket});
  if (s.loss_by_position) {
    const Timer timer;
    const int64_t B = std::min(s.run.batch_size, result.sequences);  // a forward takes the sequences there are
    std::vector<int32_t> inputs(static_cast<size_t>(B * S)), targets(inputs.size()), window(static_cast<size_t>(S + 1));
    std::vector<float> losses(inputs.size());
    // (sequences, 2, buckets): each sequence's loss sums, then its token counts
    const size_t nb = result.buckets.size();
    std::vector<double> sums(static_cast<size_t>(result.sequences) * 2 * nb, 0.0);
    for (int64_t first = 0; first < result.sequences; first += B) {
      const int rows = static_cast<int>(std::min(B, result.sequences - first));
      for (int row = 0; row < rows; ++row) {
        shard.read(static_cast<uint64_t>((first + row) * S), static_cast<uint64_t>(S + 1), window.data());
        data::fill_inputs(inputs.data() + row * S, S, window, 0);
        data::fill_targets(targets.data() + row * S, S, window);
      }
      model.forward(model::Batch{rows, S, inputs.data(), targets.data(), nullptr},
                    pipeline::TokenOutputs{losses.data(), nullptr});
      for (int row = 0; row < rows; ++row) {
        double* sequence_sums = sums.data() + static_cast<size_t>(first + row) * 2 * nb;
        for_each_local_position(plan, [&](int64_t position) {
          const size_t bucket = bucket_of(position + 1, nb);
          sequence_sums[bucket] += losses[static_cast<size_t>(row * S + position)];
          sequence_sums[nb + bucket] += 1.0;
        });
      }
      char line[160];
      std::snprintf(line, sizeof line, "loss by position: %lld/%lld sequences, %.1f s",
                    static_cast<long long>(first + rows), static_cast<long long>(result.sequences), timer.seconds());
      log::info(line);
    }
    world.all_reduce_sum(sums.data(), sums.size());
    double loss_sum = 0.0, tokens = 0.0;
    result.sequence_buckets.assign(static_cast<size_t>(result.sequences), result.buckets);
    for (size_t n = 0; n < result.sequence_buckets.size(); ++n)
      for (size_t k = 0; k < nb; ++k) {
        LossBucket& own = result.sequence_buckets[n][k];
        own.loss_sum = sums[n * 2 * nb + k];
        own.tokens = sums[n * 2 * nb + nb + k];
        result.buckets[k].loss_sum += own.loss_sum;
        result.buckets[k].tokens += own.tokens;
        loss_sum += own.loss_sum;
        tokens += own.tokens;
      }
    result.mean_loss = tokens > 0 ? loss_sum / tokens : 0.0;
    result.loss_seconds = timer.seconds();
  }

  // The passkey grid: per length, the prompts of every depth and trial, B at a time.
  if (!lengths.empty()) {
    const Timer timer;
    Rng rng(s.seed);
    for (const int64_t L : lengths) {
      const pipeline::ChunkPlan length_plan = model.plan_for(L);
      std::vector<PasskeyPrompt> prompts;
      std::vector<std::string> numbers;
      for (int64_t d = 0; d < s.passkey_depths; ++d) {
        const double depth = s.passkey_depths == 1 ? 0.0 : static_cast<double>(d) / static_cast<double>(s.passkey_depths - 1);
        PasskeyCell cell;
        cell.length_tokens = L;
        cell.depth = depth;
        cell.trials = s.passkey_trials;
        for (int64_t trial = 0; trial < s.passkey_trials; ++trial) {
          const std::string number = std::to_string(10000 + rng.below(90000));
          FPDT_ASSERT(static_cast<int64_t>(number.size()) == kPasskeyDigits);
          prompts.push_back(make_passkey_prompt(tokenizer, L, depth, number));
          numbers.push_back(number);
        }
        cell.needle_depth = static_cast<double>(prompts.back().needle_begin) / static_cast<double>(L);
        result.passkey.push_back(cell);
      }
      // Per prompt: answer tokens predicted wrongly, and their loss sum, over this rank's positions; and
      // the predicted token at each answer position (0 at the positions of other ranks), prompt after prompt.
      std::vector<double> tallies(2 * prompts.size(), 0.0);
      std::vector<size_t> answer_at(prompts.size() + 1, 0);  // prompt n's predictions: [answer_at[n], answer_at[n + 1])
      for (size_t n = 0; n < prompts.size(); ++n)
        answer_at[n + 1] = answer_at[n] + static_cast<size_t>(L - prompts[n].answer_begin);
      std::vector<double> greedy(answer_at.back(), 0.0);
      std::vector<int32_t> inputs, targets;
      std::vector<float> losses;
      std::vector<int32_t> predictions;
      for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(s.run.batch_size)) {
        const size_t rows = std::min(prompts.size() - first, static_cast<size_t>(s.run.batch_size));
        inputs.assign(rows * static_cast<size_t>(L), 0);
        targets.assign(inputs.size(), data::kIgnoreIndex);
        losses.assign(inputs.size(), 0.0f);
        predictions.assign(inputs.size(), 0);
        for (size_t row = 0; row < rows; ++row) {
          const PasskeyPrompt& prompt = prompts[first + row];
          const size_t at = row * static_cast<size_t>(L);
          std::copy(prompt.tokens.begin(), prompt.tokens.end(), inputs.begin() + static_cast<std::ptrdiff_t>(at));
          // Position p predicts token p + 1: the answer's tokens from positions answer_begin − 1 .. L − 2.
          for (int64_t p = prompt.answer_begin - 1; p + 1 < L; ++p)
            targets[at + static_cast<size_t>(p)] = prompt.tokens[static_cast<size_t>(p + 1)];
        }
        model.forward(model::Batch{static_cast<int>(rows), L, inputs.data(), targets.data(), nullptr},
                      pipeline::TokenOutputs{losses.data(), predictions.data()});
        for (size_t row = 0; row < rows; ++row) {
          const size_t at = row * static_cast<size_t>(L);
          double* tally = &tallies[2 * (first + row)];
          const int64_t answer_begin = prompts[first + row].answer_begin;
          for_each_local_position(length_plan, [&](int64_t p) {
            const int32_t target = targets[at + static_cast<size_t>(p)];
            if (target == data::kIgnoreIndex) return;
            tally[0] += predictions[at + static_cast<size_t>(p)] != target ? 1.0 : 0.0;
            tally[1] += losses[at + static_cast<size_t>(p)];
            greedy[answer_at[first + row] + static_cast<size_t>(p + 1 - answer_begin)] =
                predictions[at + static_cast<size_t>(p)];
          });
        }
      }
      world.all_reduce_sum(tallies.data(), tallies.size());
      world.all_reduce_sum(greedy.data(), greedy.size());  // token ids < 2^24: exact in a double sum of one
      PasskeyCell* cells = &result.passkey[result.passkey.size() - static_cast<size_t>(s.passkey_depths)];
      for (size_t n = 0; n < prompts.size(); ++n) {
        PasskeyCell& cell = cells[n / static_cast<size_t>(s.passkey_trials)];
        const double answer_tokens = static_cast<double>(L - prompts[n].answer_begin);
        cell.correct += tallies[2 * n] == 0.0 ? 1 : 0;
        cell.answer_loss += tallies[2 * n + 1] / answer_tokens / static_cast<double>(s.passkey_trials);
        // The greedy answer: the predictions up to and including the first that misses its target.
        std::vector<int32_t> answer;
        for (size_t i = answer_at[n]; i < answer_at[n + 1]; ++i) {
          answer.push_back(static_cast<int32_t>(greedy[i]));
          const size_t p = static_cast<size_t>(prompts[n].answer_begin) + (i - answer_at[n]);
          if (answer.back() != prompts[n].tokens[p]) break;
        }
        cell.answers.push_back({numbers[n], tokenizer.render(answer), tallies[2 * n] == 0.0});
      }
      char line[160];
      std::snprintf(line, sizeof line, "passkey: length %lld done, %.1f s", static_cast<long long>(L), timer.seconds());
      log::info(line);
    }
    result.passkey_seconds = timer.seconds();
  }

  // RULER: each prompt prefilled into the KV cache and answered greedily, stopping at the model's end of turn.
  if (!ruler_tasks.empty()) {
    const RulerSources sources = load_ruler_sources(s.ruler, tokenizer, shard, ruler_lengths_asked.back());
    SampleSettings greedy;
    greedy.greedy = true;
    greedy.stop_ids = stop_ids(result.checkpoint, config);
    Rng unused(s.seed);  // greedy draws nothing
    const GenerateFn generate = [&](const std::vector<int32_t>& prompt, int64_t max_new_tokens) {
      greedy.new_tokens = max_new_tokens;
      return train::generate(model, prompt, greedy, unused).tokens;
    };
    // A stopped run's answers (rank 0's progress file, sent to every rank so that all skip the same prompts)
    // are kept; each new one is appended as it is scored.
    const std::string progress_path = path_in(s.out_dir, kRulerProgressFile);
    const nlohmann::ordered_json identity = ruler_identity(result, s, sources);
    std::string progress_text;
    if (world.rank() == 0 && std::filesystem::exists(progress_path))
      progress_text = read_text_file(progress_path, kModule, "the RULER progress file must be a file");
    uint64_t progress_bytes = progress_text.size();
    world.broadcast(&progress_bytes, sizeof progress_bytes, 0);
    progress_text.resize(progress_bytes);
    world.broadcast(progress_text.data(), progress_bytes, 0);
    const std::vector<RulerSample> finished = read_ruler_progress(progress_text, progress_path, identity);
    std::optional<RulerProgressLog> progress;
    if (world.rank() == 0) progress.emplace(progress_path, identity, finished);
    const ScoredFn on_scored = [&](const RulerSample& sample) {
      if (progress) progress->append(sample);
    };
    result.ruler = run_ruler(s.ruler, ruler_lengths_asked, tokenizer, sources, generate, finished, progress_path,
                             on_scored);
  }

  result.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
  result.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
  result.peak_rss_bytes = machine::peak_rss_bytes();
  if (world.rank() == 0) {
    if (s.loss_by_position)
      write_text_file_atomic(path_in(s.out_dir, "loss_by_position.json"), loss_json(result, s).dump(2) + "\n", kModule);
    if (!result.passkey.empty())
      write_text_file_atomic(path_in(s.out_dir, "passkey.json"), passkey_json(result, s).dump(2) + "\n", kModule);
    if (result.ruler) {
      write_text_file_atomic(path_in(s.out_dir, "ruler.json"), ruler_json(*result.ruler, s.ruler).dump(2) + "\n",
                             kModule);
      std::filesystem::remove(path_in(s.out_dir, kRulerProgressFile));  // ruler.json holds every sample now
    }
  }
  return result;
}

namespace {

nlohmann::ordered_json common_json(const EvalResult& result, const EvalSettings& s) {
  nlohmann::ordered_json json;
  json["checkpoint"] = result.checkpoint;
  json["data"] = path_in(s.data_dir, s.split + ".bin");
  json["seq"] = result.seq_tokens;
  json["rope_parameters"] = nlohmann::ordered_json::parse(result.rope_parameters);
  json["rope_overridden"] = result.rope_overridden;
  json["ranks"] = s.run.sp;
  json["mode"] = pipeline::spelling(s.run.mode);
  json["chunk_tokens"] = s.run.chunk_tokens;
  json["chunks"] = s.run.chunks;
  json["offload"] = pipeline::spelling(s.run.offload);
  json["compute_peak_bytes"] = result.compute_peak_bytes;
  json["offload_peak_bytes"] = result.offload_peak_bytes;
  json["peak_rss_bytes"] = result.peak_rss_bytes;
  return json;
}

nlohmann::ordered_json answers_json(const std::vector<PasskeyAnswer>& answers) {
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  for (const PasskeyAnswer& answer : answers)
    json.push_back({{"number", answer.number}, {"greedy", answer.greedy}, {"right", answer.right}});
  return json;
}

}  // namespace

nlohmann::ordered_json loss_json(const EvalResult& result, const EvalSettings& settings) {
  nlohmann::ordered_json json = common_json(result, settings);
  json["sequences"] = result.sequences;
  json["mean_loss"] = result.mean_loss;
  json["seconds"] = result.loss_seconds;
  json["tokens_per_second"] =
      result.loss_seconds > 0 ? static_cast<double>(result.sequences * result.seq_tokens) / result.loss_seconds : 0.0;
  nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
  for (const LossBucket& bucket : result.buckets)
    buckets.push_back({{"first", bucket.positions.first},
                       {"last", bucket.positions.last},
                       {"tokens", bucket.tokens},
                       {"loss_sum", bucket.loss_sum},
                       {"mean_loss", bucket.mean()}});
  json["buckets"] = buckets;
  nlohmann::ordered_json sequences = nlohmann::ordered_json::array();  // each sequence's bucket means
  for (const std::vector<LossBucket>& own : result.sequence_buckets) {
    nlohmann::ordered_json means = nlohmann::ordered_json::array();
    for (const LossBucket& bucket : own) means.push_back(bucket.mean());
    sequences.push_back(means);
  }
  json["sequence_bucket_losses"] = sequences;
  return json;
}

nlohmann::ordered_json passkey_json(const EvalResult& result, const EvalSettings& settings) {
  nlohmann::ordered_json json = common_json(result, settings);
  json["seconds"] = result.passkey_seconds;
  json["digits"] = kPasskeyDigits;
  nlohmann::ordered_json cells = nlohmann::ordered_json::array();
  for (const PasskeyCell& cell : result.passkey)
    cells.push_back({{"length", cell.length_tokens},
                     {"depth", cell.depth},
                     {"needle_depth", cell.needle_depth},
                     {"trials", cell.trials},
                     {"correct", cell.correct},
                     {"accuracy", cell.trials > 0 ? static_cast<double>(cell.correct) / static_cast<double>(cell.trials) : 0.0},
                     {"answer_loss", cell.answer_loss},
                     {"answers", answers_json(cell.answers)}});
  json["cells"] = cells;
  return json;
}

}  // namespace fpdt::train
