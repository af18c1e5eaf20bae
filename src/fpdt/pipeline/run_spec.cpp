// The run spec's spellings and its chunk rule (see run_spec.h).
#include "fpdt/pipeline/run_spec.h"

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"
#include "fpdt/base/spellings.h"

namespace fpdt::pipeline {

namespace {

constexpr const char* kModule = "run spec";

std::string str(int64_t value) { return std::to_string(value); }

// Each type's spellings, once: spelling, parsing and the options' choices all read these tables.
constexpr Spelling<Mode> kModes[] = {{"fpdt", Mode::fpdt}, {"ulysses", Mode::ulysses}, {"fpdt-reference", Mode::fpdt_reference}};
constexpr Spelling<Recompute> kRecomputes[] = {{"none", Recompute::none}, {"layer", Recompute::layer}};
constexpr Spelling<OffloadKind> kOffloads[] = {{"none", OffloadKind::none}, {"ram", OffloadKind::ram}, {"disk", OffloadKind::disk}};
constexpr Spelling<Precision> kPrecisions[] = {{"fp32", Precision::fp32}, {"bf16", Precision::bf16}};
constexpr Spelling<BackendKind> kBackends[] = {{"cpu", BackendKind::cpu},
                                           {"reference", BackendKind::reference},
                                           {"cuda", BackendKind::cuda},
                                           {"cpu-guarded", BackendKind::cpu_guarded}};
constexpr Spelling<DocPositions> kDocPositions[] = {{"global", DocPositions::global}, {"restart", DocPositions::restart}};
constexpr const char* kDiskPrefix = "disk:";  // disk:DIR

}  // namespace

std::string spelling(Mode mode) { return spelling_of(kModes, mode); }
std::string spelling(Recompute recompute) { return spelling_of(kRecomputes, recompute); }
std::string spelling(OffloadKind offload) { return spelling_of(kOffloads, offload); }
std::string spelling(const OffloadConfig& offload) {
  return offload.kind == OffloadKind::disk && !offload.directory.empty() ? kDiskPrefix + offload.directory
                                                                         : spelling(offload.kind);
}
std::string spelling(Precision precision) { return spelling_of(kPrecisions, precision); }
std::string spelling(BackendKind backend) { return spelling_of(kBackends, backend); }
std::string spelling(DocPositions positions) { return spelling_of(kDocPositions, positions); }

std::vector<std::string> mode_spellings() { return spellings_of(kModes); }
std::vector<std::string> recompute_spellings() { return spellings_of(kRecomputes); }
std::vector<std::string> offload_spellings() {
  std::vector<std::string> spellings = spellings_of(kOffloads);
  spellings.push_back(std::string(kDiskPrefix) + "DIR");
  return spellings;
}
std::vector<std::string> precision_spellings() { return spellings_of(kPrecisions); }
std::vector<std::string> backend_spellings() { return spellings_of(kBackends); }
std::vector<std::string> doc_positions_spellings() { return spellings_of(kDocPositions); }

Mode parse_mode(const std::string& text) { return parse_spelling(kModes, text, kModule, "mode"); }
Recompute parse_recompute(const std::string& text) { return parse_spelling(kRecomputes, text, kModule, "recompute mode"); }
Precision parse_precision(const std::string& text) { return parse_spelling(kPrecisions, text, kModule, "precision"); }
BackendKind parse_backend(const std::string& text) { return parse_spelling(kBackends, text, kModule, "backend"); }
DocPositions parse_doc_positions(const std::string& text) {
  return parse_spelling(kDocPositions, text, kModule, "document positions");
}
OffloadConfig parse_offload(const std::string& text) {
  if (text.starts_with(kDiskPrefix) && text.size() > std::string(kDiskPrefix).size())
    return OffloadConfig{OffloadKind::disk, text.substr(std::string(kDiskPrefix).size())};
  for (const Spelling<OffloadKind>& row : kOffloads)
    if (text == row.text) return OffloadConfig{row.value, ""};
  throw Error(kModule, "unknown offload tier '" + text + "'", "use " + listed(offload_spellings()));
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
  const int64_t C = pipeline.chunk_tokens, covering = ceil_div<int64_t>(seq_tokens, sp) * sp;
  if (C > plan.chunk_tokens)
    throw Error(module, "--chunk-tokens " + str(C) + " is longer than the sequence of " + str(seq_tokens) + " tokens",
                "use --chunk-tokens " + str(covering) + " or less (one chunk of the whole sequence)");
  const int64_t holding = ceil_div(seq_tokens, plan.chunk_tokens);  // chunks with real tokens
  if (holding < plan.chunks)
    throw Error(module,
                "--chunks " + str(plan.chunks) + " leaves chunks without tokens: " + str(seq_tokens) + " tokens over " +
                    str(sp) + " rank(s) fill " + str(holding) + " chunks of " + str(plan.chunk_tokens) + " tokens",
                "use --chunks " + str(holding) + " or fewer");
  return plan;
}

}  // namespace fpdt::pipeline
