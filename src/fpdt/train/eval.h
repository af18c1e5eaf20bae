// Evaluation of a checkpoint on long sequences (`fpdt eval`): forward passes only, through the FPDT
// pipeline laid out for them (RunSpec::forward_only: the store keeps two layers' inputs and one
// layer's k and v, the compute tier O(B·C·h) whatever S is), on the sp ranks of the world.
//  - Loss by context position: the mean cross-entropy of the held-out tokens predicted from 1, 2–3,
//    4–7, … tokens of context, up to S (power-of-two buckets of the context length).
//  - Passkey retrieval: a number hidden at depth d of L tokens of filler text, then the question; the
//    answer is right when greedy decoding would produce it, i.e. when each of its tokens is the argmax
//    after the prompt and the answer tokens before it (one forward pass, teacher-forced), over d × L.
//  - RULER (ruler.h): its synthetic tasks answered by generation, scored by its metric (ruler.json).
// Results are JSON (loss_by_position.json, passkey.json, ruler.json in --out); tools/plot_eval.py draws them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fpdt/base/options.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/pipeline/run_spec.h"
#include "fpdt/train/ruler.h"

namespace fpdt::train {

// The run `fpdt eval` describes unless told otherwise: one sequence of 16K tokens on one rank (its sp
// ranks are the world; a disk offload without a directory goes in out_dir). evaluate() runs it forward
// only, whatever forward_only says.
inline pipeline::RunSpec default_eval_run() {
  pipeline::RunSpec run;
  run.seq_tokens = 16384;
  run.offload = pipeline::OffloadConfig{pipeline::OffloadKind::none, ""};
  return run;
}

struct EvalSettings {
  pipeline::RunSpec run = default_eval_run();  // the options every command shares; B sequences per forward
  std::string checkpoint = "runs/demo";  // run folder (its latest step), step folder or Hugging Face folder
  std::string data_dir = "data/kjv";     // token shards made by the checkpoint's tokenizer
  std::string split = "val";             // val | train: which shard the sequences come from
  std::optional<double> rope_theta;      // replaces the checkpoint's RoPE base (training-free extension)
  std::string rope_scaling;              // replaces its RoPE scaling: a rope_parameters JSON object ("": keep)
  std::string out_dir;                   // "": <checkpoint>/eval
  int64_t sequences = 0;                 // sequences of S tokens for the loss (0: every whole one in the split)
  bool loss_by_position = true;          // false: no loss forwards (a caller that asks only for passkey or RULER)
  std::string passkey_lengths = "auto";  // token counts L of the prompts, "auto" (1K, 2K, … up to S) or "none"
  int64_t passkey_depths = 5;            // depths 0, 1/(n−1), …, 1 of the number in the filler
  int64_t passkey_trials = 2;            // prompts (numbers) per (depth, length)
  uint64_t seed = 1234;                  // of the passkey numbers
  RulerSettings ruler;                   // RULER's tasks (ruler.h): run when ruler_task_names(ruler) is not empty
  bool dry_run = false;                  // lay out the forward at S and report the tiers' peaks only
};

// Declares every `fpdt eval` option, bound to the fields of `settings` (the options a run describes
// are spelled as `fpdt train` spells them: pipeline/run_options.h).
void declare_eval_options(OptionSet& set, EvalSettings& settings);

// Context lengths [first, last] of the loss buckets of sequences of S tokens: [1, 1], [2, 3], [4, 7], …,
// the last one ending at S (S a power of two is in the bucket [S/2, S]).
struct PositionBucket {
  int64_t first = 0, last = 0;
};
std::vector<PositionBucket> position_buckets(int64_t seq_tokens);

// One passkey prompt of exactly `length_tokens` tokens:
//   intro | filler before | needle (the number, twice) | filler after | question | answer (the number)
// The filler is one sentence repeated; the needle goes after the whole sentences that fill `depth`
// (0..1) of the filler, so depth 0 is right after the intro and depth 1 right before the question. Each
// part is tokenized on its own and the prompt is their concatenation.
struct PasskeyPrompt {
  std::vector<int32_t> tokens;  // (length_tokens)
  int64_t needle_begin = 0;     // first token of the needle
  int64_t answer_begin = 0;     // first token of the answer; the answer runs to the end
};
PasskeyPrompt make_passkey_prompt(const data::Tokenizer& tokenizer, int64_t length_tokens, double depth,
                                  const std::string& number);
// Tokens of a prompt that are not filler (intro, needle, question, answer), for the number's length of
// digits: the shortest length a prompt can have.
int64_t passkey_fixed_tokens(const data::Tokenizer& tokenizer, const std::string& number);

struct LossBucket {
  PositionBucket positions;
  double tokens = 0.0;     // tokens counted, over every sequence
  double loss_sum = 0.0;   // their cross-entropy, nats
  double mean() const { return tokens > 0 ? loss_sum / tokens : 0.0; }
};

// One prompt's number and the model's greedy answer to it: the argmax tokens at the answer's positions
// up to and including the first wrong one. Up to there every earlier token is right, so these are the
// tokens greedy decoding would generate; after a wrong token it would continue from another prefix.
struct PasskeyAnswer {
  std::string number;
  std::string greedy;  // decoded
  bool right = false;  // every answer token predicted
};

struct PasskeyCell {
  int64_t length_tokens = 0;
  double depth = 0.0;          // asked for
  double needle_depth = 0.0;   // where the needle begins: its first token / the prompt's length
  int64_t trials = 0;
  int64_t correct = 0;         // greedy answers equal to the number
  double answer_loss = 0.0;    // mean cross-entropy of the answer's tokens, nats
  std::vector<PasskeyAnswer> answers;  // (trials)
};

struct EvalResult {
  std::string checkpoint;  // the step folder evaluated
  std::string positions;   // the RoPE evaluated, for people ("theta 10000, yarn x4 (...)"; model::describe_rope)
  std::string rope_parameters;  // and as config.json's rope_parameters object (JSON text; "null" for GPT)
  bool rope_overridden = false;  // --rope-theta or --rope-scaling replaced the checkpoint's
  int64_t seq_tokens = 0;
  int64_t sequences = 0;
  std::vector<LossBucket> buckets;
  std::vector<std::vector<LossBucket>> sequence_buckets;  // (sequences) each sequence's own; buckets is their sum
  double mean_loss = 0.0;  // over every token of every sequence
  double loss_seconds = 0.0;
  std::vector<PasskeyCell> passkey;  // length-major; empty without a passkey grid
  std::optional<RulerResult> ruler;  // when RULER was asked for
  double passkey_seconds = 0.0;
  size_t compute_peak_bytes = 0;     // this rank, over the evaluation
  size_t offload_peak_bytes = 0;
  size_t peak_rss_bytes = 0;
};

// Runs the evaluation on every rank of `world` (world size = settings.sp); rank 0 writes the JSON files
// into the settings' out_dir. A dry run lays out the forward at S and returns the peaks, nothing else. Throws fpdt::Error for bad settings, a missing or foreign checkpoint or
// data, or a sequence the model cannot take.
EvalResult evaluate(const EvalSettings& settings, comm::Communicator& world);

// The JSON files' contents.
nlohmann::ordered_json loss_json(const EvalResult& result, const EvalSettings& settings);
nlohmann::ordered_json passkey_json(const EvalResult& result, const EvalSettings& settings);

}  // namespace fpdt::train
