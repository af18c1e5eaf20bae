// RULER (Hsieh et al., NVIDIA, arXiv 2404.06654) for `fpdt eval --ruler`: its synthetic tasks made offline by
// its recipes (NVIDIA/RULER scripts/synthetic.yaml and scripts/data/synthetic/*.py), its metric
// (string_match_all), scores per task and length, and the effective length. Generating the answers is the
// caller's (a GenerateFn); nothing here runs a model. QA tasks (downloaded SQuAD/HotpotQA) are not built.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fpdt/base/options.h"
#include "fpdt/data/shard.h"
#include "fpdt/data/tokenizer.h"

namespace fpdt::train {

// Prompt token ids -> the generated token ids (not including the prompt), at most max_new_tokens, greedy,
// stopping at the model's end-of-turn ids (the generator knows them). Every rank of an sp group calls it
// with the same prompts in the same order (run_ruler draws them alike on every rank).
using GenerateFn = std::function<std::vector<int32_t>(const std::vector<int32_t>& prompt, int64_t max_new_tokens)>;

// Llama-2-7B's RULER average at 4K: the paper's bar for a length to count as effective.
inline constexpr double kRulerThreshold = 85.6;
// Dictionary words (Debian's wamerican): the keys of the needles and the words of cwe.
inline constexpr const char* kWordListPath = "/usr/share/dict/words";

enum class RulerFamily { niah, variable_tracking, common_words, freq_words };
enum class HaystackKind { noise, essay, needle };  // a repeated sentence, the essay text, distractor needles
enum class NeedleKind { numbers, words, uuids };   // 7-digit numbers, two dictionary words, UUID4s

// One task of RULER's scripts/synthetic.yaml, with its family's tokens_to_generate (constants.py).
struct RulerRecipe {
  const char* name;
  RulerFamily family;
  int64_t tokens_to_generate;
  // niah: num_needle_k/v/q (the keys are at least the queries), the haystack, the kinds of key and value
  HaystackKind haystack = HaystackKind::noise;
  NeedleKind key = NeedleKind::words, value = NeedleKind::numbers;
  int keys = 1, values = 1, queries = 1;
  int chains = 0, hops = 0;                   // variable_tracking
  int freq_cw = 0, freq_ucw = 0, num_cw = 0;  // common_words: repeats of the common and uncommon words
  double alpha = 0.0;                         // freq_words: the Zipf exponent of the words' counts
};
// The 11 tasks that need no downloaded data, in RULER's order.
const std::vector<RulerRecipe>& ruler_recipes();
// The recipe named `name`; fpdt::Error for qa_1/qa_2 (downloaded data) and for any other unknown name.
const RulerRecipe& ruler_recipe(const std::string& name);

// The prompt around a task's text: RULER's "base" template (the text alone), or SmolLM2-Instruct's chat
// template with its default system turn (as its tokenizer_config.json's chat_template renders one user turn
// with add_generation_prompt). RULER's answer prefix follows the template, as in RULER's prepare.py.
enum class RulerChat { base, smollm2 };
// "base" or "smollm2-chat", as --ruler-template spells it.
std::string ruler_template_spelling(RulerChat chat);

struct RulerSettings {
  bool all_tasks = false;        // --ruler: the 11 tasks
  std::string tasks;             // --tasks a,b,c (any of them; implies RULER)
  std::string lengths = "auto";  // target lengths L (prompt + tokens_to_generate ≤ L); auto: see ruler_lengths
  // Samples per (task, length). 20: the floor the issue sets for a recorded score, so a task's score (a
  // mean of per-sample fractions) has a standard error ≤ 11 points and the 11-task average ≤ 3.4 points —
  // enough to tell 85.6 from 60 — at ~1/25 of RULER's 500 prompts, which take hours at 64K+ on a CPU.
  int64_t samples = 20;
  std::string haystack;                // the essay haystack's text file ("": the eval data's held-out text)
  double threshold = kRulerThreshold;  // the effective length is also reported against this one
  RulerChat chat = RulerChat::base;
  uint64_t seed = 42;  // RULER's default random_seed; each (task, length) draws from its own stream
};
// --ruler, --tasks, --ruler-lengths, --ruler-samples, --ruler-haystack, --ruler-threshold, --ruler-template,
// --ruler-seed; `fpdt eval` declares them (declare_eval_options).
void declare_ruler_options(OptionSet& set, RulerSettings& settings);
// The tasks to run (empty: RULER was not asked for); fpdt::Error for an unknown name, qa_1/qa_2 or a repeat.
std::vector<std::string> ruler_task_names(const RulerSettings& settings);
// The target lengths: --ruler-lengths (token counts, 4K spelling allowed, each ≤ S), or auto: 4096, 8192, …
// up to S (powers of two), or S alone when S < 4096.
std::vector<int64_t> ruler_lengths(const RulerSettings& settings, int64_t seq_tokens);

// What the prompts are drawn from.
struct RulerSources {
  std::vector<std::string> words;  // dictionary words, lowercase a–z, sorted, no repeats
  std::vector<std::string> essay;  // the essay haystack as whitespace-separated words (RULER: Paul Graham essays)
  std::string essay_origin;        // where the essay came from, for the JSON
};
// The words of the word list at `path` that are lowercase ASCII letters only, at least 3 of them; fpdt::Error
// naming the file and the wamerican package when it is missing.
std::vector<std::string> load_word_list(const std::string& path = kWordListPath);
// The word list and the essay: the --ruler-haystack file, or else the first `essay_tokens` tokens of
// `held_out` decoded (documents joined by a space: end-of-document tokens are not text); the longest length
// is enough, for a shorter essay repeats as RULER's does.
RulerSources load_ruler_sources(const RulerSettings& settings, const data::Tokenizer& tokenizer,
                                const data::ShardReader& held_out, int64_t essay_tokens);
// `text` split at runs of whitespace (RULER: re.sub(r'\s+', ' ', essay).split(' ')).
std::vector<std::string> split_words(const std::string& text);

// One prompt as RULER writes it to its jsonl: the model reads input + answer_prefix.
struct RulerPrompt {
  std::string input;                    // the prompt up to the answer prefix
  std::string answer_prefix;            // e.g. " The special magic number for x-y mentioned in the provided text is"
  std::vector<std::string> references;  // "outputs": every one must be in the answer
  // input + answer_prefix tokenized, ≤ L − tokens_to_generate, without a BOS (RULER counts lengths with
  // tokenize(), which adds none; a generator for a model whose tokenizer adds one puts it in front).
  std::vector<int32_t> tokens;
};
// `samples` prompts of `recipe` fitted to `length_tokens` by RULER's rule: the haystack's size is the largest
// whose prompt (template, answer prefix and all) fits length_tokens − tokens_to_generate tokens of
// `tokenizer`; a sample drawn over that is drawn again with its haystack shortened by its excess. The same
// (seed, recipe, length) gives the same prompts. fpdt::Error when even the smallest haystack does not fit.
std::vector<RulerPrompt> make_ruler_prompts(const RulerRecipe& recipe, int64_t length_tokens, int64_t samples,
                                            const data::Tokenizer& tokenizer, const RulerSources& sources,
                                            RulerChat chat, uint64_t seed);

// RULER's postprocess_pred: strip, control characters (\x00-\x1f) to '\n', strip.
std::string ruler_postprocess(const std::string& prediction);
// RULER's string_match_all for one sample: the fraction of `references` found in `prediction`, ignoring
// ASCII case (the references are ASCII), in [0, 1]. A task's score is the mean × 100.
double string_match_all(const std::string& prediction, const std::vector<std::string>& references);
// The effective length: the longest length L such that the average at every length up to L is at least
// `threshold` (RULER's table: a model is effective up to the first length where it falls below); 0 when the
// shortest length is already below. `lengths` ascending, `averages` beside them.
int64_t effective_length(const std::vector<int64_t>& lengths, const std::vector<double>& averages, double threshold);

struct RulerSample {
  std::string task;
  int64_t length_tokens = 0;  // the target L
  int64_t index = 0;          // of the sample in its (task, length)
  int64_t prompt_tokens = 0;
  std::vector<int32_t> prompt_ids;     // what the model read (for a peer to answer the same prompt)
  std::vector<std::string> references;
  std::string prediction;  // decoded and postprocessed
  std::vector<int32_t> generated_ids;  // what it answered
  double score = 0.0;    // string_match_all, 0..1
  double seconds = 0.0;  // of the generation
};

struct RulerCell {
  std::string task;
  int64_t length_tokens = 0;
  int64_t samples = 0;
  double score = 0.0;            // mean of the samples' scores × 100
  double prepare_seconds = 0.0;  // drawing and fitting the prompts
  double seconds = 0.0;          // generating
};

struct RulerResult {
  std::vector<std::string> tasks;
  std::vector<int64_t> lengths;               // ascending
  std::vector<RulerCell> cells;               // length-major, tasks in order
  std::vector<double> averages;               // per length: the mean of its cells' scores
  int64_t effective_length = 0;               // against kRulerThreshold
  int64_t effective_length_at_threshold = 0;  // against settings.threshold
  std::vector<RulerSample> samples;           // cell by cell
  std::string essay_origin;
  double seconds = 0.0;
};

// Called with each sample as soon as it is scored (rank 0 appends it to the progress log).
using ScoredFn = std::function<void(const RulerSample& sample)>;

// Draws every (task, length)'s prompts, asks `generate` for each answer, scores them, logs progress with an
// ETA and the table at the end. `lengths` from ruler_lengths, `sources` from load_ruler_sources. A sample of
// `finished` (a stopped run's, read_ruler_progress) is taken as it is instead of generated again, once its
// prompt is checked to be the one drawn now (fpdt::Error naming `progress_path` otherwise).
RulerResult run_ruler(const RulerSettings& settings, const std::vector<int64_t>& lengths,
                      const data::Tokenizer& tokenizer, const RulerSources& sources, const GenerateFn& generate,
                      const std::vector<RulerSample>& finished = {}, const std::string& progress_path = "",
                      const ScoredFn& on_scored = nullptr);

// A RULER run's progress, so that one stopped (killed, preempted, out of its allocation: hours at 16K+ on a
// CPU) goes on where it stopped: a JSON-lines file whose first line is the run's identity (what the answers
// depend on besides the prompt: the model, its positions, the precision; and what the prompts are drawn
// with) and then one line per scored sample, appended and flushed as it is scored.
inline constexpr const char* kRulerProgressFile = "ruler_progress.jsonl";
// The samples of a progress file's text (read from `path`) made for `identity`. fpdt::Error naming the path
// when its first line is another identity (each field that differs, with a hint to rerun as it was or delete
// the file) or a whole line is not a sample; a torn last line (its writer killed mid-line) is dropped.
std::vector<RulerSample> read_ruler_progress(const std::string& text, const std::string& path,
                                             const nlohmann::ordered_json& identity);
// Appends scored samples to a progress file, which it first rewrites (atomically) as `identity` and `kept`.
class RulerProgressLog {
 public:
  RulerProgressLog(const std::string& path, const nlohmann::ordered_json& identity,
                   const std::vector<RulerSample>& kept);
  ~RulerProgressLog();
  RulerProgressLog(const RulerProgressLog&) = delete;
  RulerProgressLog& operator=(const RulerProgressLog&) = delete;
  void append(const RulerSample& sample);  // one line, flushed and fsynced: a kill loses the sample being answered only

 private:
  std::string path_;
  int fd_ = -1;
};
// ruler.json: the settings, the scores per task and length, the averages, the effective lengths, every sample.
nlohmann::ordered_json ruler_json(const RulerResult& result, const RulerSettings& settings);
// The scores as a table (task × length, the average, the effective lengths), one line per row.
std::vector<std::string> ruler_table(const RulerResult& result, const RulerSettings& settings);

}  // namespace fpdt::train
