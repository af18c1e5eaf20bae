// The run spec's words and its chunk rule (see run_spec.h).
#include "fpdt/pipeline/run_spec.h"

#include "fpdt/base/error.h"
#include "fpdt/base/words.h"

namespace fpdt::pipeline {

namespace {

constexpr const char* kModule = "run spec";

std::string str(int64_t value) { return std::to_string(value); }

// Each type's spellings, once: words, parsing and the options' choices all read these tables.
constexpr Word<Mode> kModes[] = {{"fpdt", Mode::fpdt}, {"ulysses", Mode::ulysses}, {"fpdt-reference", Mode::fpdt_reference}};
constexpr Word<Recompute> kRecomputes[] = {{"none", Recompute::none}, {"layer", Recompute::layer}};
constexpr Word<OffloadKind> kOffloads[] = {{"none", OffloadKind::none}, {"ram", OffloadKind::ram}, {"disk", OffloadKind::disk}};
constexpr Word<Precision> kPrecisions[] = {{"fp32", Precision::fp32}, {"bf16", Precision::bf16}};
constexpr Word<BackendKind> kBackends[] = {{"cpu", BackendKind::cpu},
                                           {"reference", BackendKind::reference},
                                           {"cuda", BackendKind::cuda},
                                           {"cpu-guarded", BackendKind::cpu_guarded}};
constexpr Word<DocPositions> kDocPositions[] = {{"global", DocPositions::global}, {"restart", DocPositions::restart}};
constexpr const char* kDiskPrefix = "disk:";  // disk:DIR

}  // namespace

std::string word(Mode mode) { return word_of(kModes, mode); }
std::string word(Recompute recompute) { return word_of(kRecomputes, recompute); }
std::string word(OffloadKind offload) { return word_of(kOffloads, offload); }
std::string word(const OffloadConfig& offload) {
  return offload.kind == OffloadKind::disk && !offload.directory.empty() ? kDiskPrefix + offload.directory
                                                                         : word(offload.kind);
}
std::string word(Precision precision) { return word_of(kPrecisions, precision); }
std::string word(BackendKind backend) { return word_of(kBackends, backend); }
std::string word(DocPositions positions) { return word_of(kDocPositions, positions); }

std::vector<std::string> mode_words() { return words_of(kModes); }
std::vector<std::string> recompute_words() { return words_of(kRecomputes); }
std::vector<std::string> offload_words() {
  std::vector<std::string> words = words_of(kOffloads);
  words.push_back(std::string(kDiskPrefix) + "DIR");
  return words;
}
std::vector<std::string> precision_words() { return words_of(kPrecisions); }
std::vector<std::string> backend_words() { return words_of(kBackends); }
std::vector<std::string> doc_positions_words() { return words_of(kDocPositions); }

Mode parse_mode(const std::string& text) { return parse_word(kModes, text, kModule, "mode"); }
Recompute parse_recompute(const std::string& text) { return parse_word(kRecomputes, text, kModule, "recompute mode"); }
Precision parse_precision(const std::string& text) { return parse_word(kPrecisions, text, kModule, "precision"); }
BackendKind parse_backend(const std::string& text) { return parse_word(kBackends, text, kModule, "backend"); }
DocPositions parse_doc_positions(const std::string& text) {
  return parse_word(kDocPositions, text, kModule, "document positions");
}
OffloadConfig parse_offload(const std::string& text) {
  if (text.starts_with(kDiskPrefix) && text.size() > std::string(kDiskPrefix).size())
    return OffloadConfig{OffloadKind::disk, text.substr(std::string(kDiskPrefix).size())};
  for (const Word<OffloadKind>& word : kOffloads)
    if (text == word.text) return OffloadConfig{word.value, ""};
  throw Error(kModule, "unknown offload tier '" + text + "'", "use " + listed(offload_words()));
}

OffloadConfig with_run_folder(OffloadConfig offload, const std::string& folder) {
  if (offload.kind == OffloadKind::disk && offload.directory.empty()) offload.directory = folder;
  return offload;
}

RunSpec resolved_layout(RunSpec run) {
  if (run.mode == Mode::ulysses) {  // the baseline: the whole sequence as one chunk, all resident
    run.chunk_tokens = 0;
    run.chunks = 1;
    run.offload = OffloadConfig{OffloadKind::none, ""};
    run.recompute = Recompute::none;
  } else if (run.chunk_tokens > 0) {
    run.chunks = 0;
  }
  return run;
}

int partition_ranks(const RunSpec& run, int world_ranks) { return run.zero >= 1 ? world_ranks : 1; }

ChunkPlan plan_chunks(const RunSpec& run, int64_t seq_tokens, int ranks, int rank) {
  const RunSpec layout = resolved_layout(run);
  return make_chunk_plan(seq_tokens, ranks, rank, layout.chunk_tokens, layout.chunks);
}

ChunkPlan run_chunk_plan(const std::string& module, const RunSpec& run) {
  const RunSpec pipeline = resolved_layout(run);
  const int64_t seq_tokens = run.seq_tokens;
  const int sp = run.sp;
  ChunkPlan plan;
  try {
    plan = plan_chunks(pipeline, seq_tokens, sp, 0);
  } catch (const Error& error) {  // the chunk plan's refusal is the command's
    throw Error(module, error.message(), error.hint());
  }
  const int64_t C = pipeline.chunk_tokens, covering = (seq_tokens + sp - 1) / sp * sp;
  if (C > plan.chunk_tokens)
    throw Error(module, "--chunk-tokens " + str(C) + " is longer than the sequence of " + str(seq_tokens) + " tokens",
                "use --chunk-tokens " + str(covering) + " or less (one chunk of the whole sequence)");
  const int64_t holding = (seq_tokens + plan.chunk_tokens - 1) / plan.chunk_tokens;  // chunks with real tokens
  if (holding < plan.chunks)
    throw Error(module,
                "--chunks " + str(plan.chunks) + " leaves chunks without tokens: " + str(seq_tokens) + " tokens over " +
                    str(sp) + " rank(s) fill " + str(holding) + " chunks of " + str(plan.chunk_tokens) + " tokens",
                "use --chunks " + str(holding) + " or fewer");
  return plan;
}

}  // namespace fpdt::pipeline
