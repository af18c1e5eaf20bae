// The shared run options (see run_options.h).
#include "fpdt/pipeline/run_options.h"

#include <limits>

#include "fpdt/base/machine.h"

namespace fpdt::pipeline::options {

Option& model(OptionSet& set, std::string& field) {
  return set.add("model", "NAME|PATH", "model preset, or a Hugging Face config.json or model folder", field);
}

Option& backend(OptionSet& set, BackendKind& field) {
  return set
      .add("backend", "NAME",
           "kernel backend: cpu, reference, cuda (one GPU), or cpu-guarded (a test mode: cpu kernels over memory "
           "the host cannot read, as on a GPU)",
           field, [](BackendKind backend) { return spelling(backend); }, parse_backend)
      .choices(backend_spellings());
}

Option& seq(OptionSet& set, int64_t& field) {
  return set.add("seq", "S", "global tokens per sequence, e.g. 4096, 128K, 2M", field).unit(Unit::tokens).at_least(1);
}

Option& sp(OptionSet& set, int& field) {
  return set.add("sp", "P", "sequence-parallel ranks per sequence (Ulysses)", field).at_least(1);
}

Option& dp(OptionSet& set, int& field) {
  return set.add("dp", "N", "data-parallel replicas (world = sp x dp ranks)", field).at_least(1);
}

Option& batch(OptionSet& set, int64_t& field) {
  // The pipeline counts a micro-batch's sequences in an int.
  return set.add("batch", "B", "sequences per micro-batch and replica", field)
      .at_least(1)
      .at_most(std::numeric_limits<int>::max());
}

Option& chunk_tokens(OptionSet& set, int64_t& field, const std::string& zero, const std::string& zero_word) {
  return set
      .add("chunk-tokens", "C",
           "global tokens per chunk, a multiple of --sp (" + (zero_word.empty() ? "0" : zero_word) + ": " + zero + ")",
           field)
      .unit(Unit::tokens)
      .at_least(0)
      .zero_means(zero_word);
}

Option& chunks(OptionSet& set, int& field) {
  return set.add("chunks", "U", "chunks per sequence, when --chunk-tokens is 0", field).at_least(1);
}

Option& mode(OptionSet& set, Mode& field) {
  return set
      .add("mode", "fpdt|ulysses|fpdt-reference", "fpdt: our chunked pipeline; ulysses: one chunk, nothing offloaded; "
           "fpdt-reference: the paper's implementation (plan only)", field,
           [](Mode mode) { return spelling(mode); }, parse_mode)
      .choices(mode_spellings());
}

Option& recompute(OptionSet& set, Recompute& field) {
  return set
      .add("recompute", "none|layer", "layer: keep only layer inputs and re-run each layer in backward", field,
           [](Recompute recompute) { return spelling(recompute); }, parse_recompute)
      .choices(recompute_spellings());
}

Option& offload(OptionSet& set, OffloadConfig& field) {
  return set
      .add("offload", "none|ram|disk[:DIR]",
           "where chunks rest between uses (disk: a file in DIR, by default the run directory)", field,
           [](const OffloadConfig& offload) { return spelling(offload); }, parse_offload)
      .choices(offload_spellings());
}

namespace {
constexpr const char* kPrecisionHelp =
    "arithmetic of GEMMs and attention: fp32, or bf16 (bf16 inputs, fp32 accumulation and statistics)";
}  // namespace

Option& precision(OptionSet& set, Precision& field) {
  return set
      .add("precision", "fp32|bf16", kPrecisionHelp, field, [](Precision precision) { return spelling(precision); },
           parse_precision)
      .choices(precision_spellings());
}

Option& precision(OptionSet& set, Precision& field, bool& automatic, const std::string& auto_means) {
  constexpr const char* kAuto = "auto";
  std::vector<std::string> spellings = precision_spellings();
  spellings.push_back(kAuto);
  return set
      .add("precision", "fp32|bf16|auto", std::string(kPrecisionHelp) + " (auto: " + auto_means + ")", automatic,
           [&field](bool is_auto) { return is_auto ? std::string(kAuto) : spelling(field); },
           [&field](const std::string& text) {
             if (text == kAuto) return true;
             field = parse_precision(text);
             return false;
           })
      .choices(spellings);
}

Option& doc_mask(OptionSet& set, bool& field) {
  return set.add("doc-mask", "",
                 "attention stays inside each document of a packed sequence (a document ends with, and includes, the "
                 "tokenizer's end-of-document token)",
                 field);
}

Option& doc_positions(OptionSet& set, DocPositions& field) {
  return set
      .add("doc-positions", "global|restart",
           "positions (RoPE, learned) count over the whole sequence, or restart at 0 at each document (with --doc-mask)",
           field, [](DocPositions positions) { return spelling(positions); }, parse_doc_positions)
      .choices(doc_positions_spellings());
}

Option& compute_mem(OptionSet& set, int64_t& field) {
  return set.add("compute-mem", "BYTES", "compute-tier budget per rank, e.g. 2GiB", field)
      .unit(Unit::bytes)
      .at_least(0)
      .zero_means("unlimited");
}

Option& compute_mem(OptionSet& set, std::optional<int64_t>& field) {
  return set.add("compute-mem", "BYTES", "compute memory per rank, e.g. 80GiB", field)
      .unit(Unit::bytes)
      .above(0)
      .unset_means("preset");
}

// More threads than the machine has cores only slow every kernel down (each parallel region waits for
// its slowest thread; 1000 threads on 2 cores took minutes for a step of milliseconds): refused.
Option& threads(OptionSet& set, int& field) {
  const std::string cores = std::to_string(machine_cores());
  return set.add("threads", "N", "threads for OpenMP and OpenBLAS, at most this machine's " + cores + " cores", field)
      .at_least(0)
      .at_most(machine_cores())
      .zero_means("all cores");
}

void forward_run(OptionSet& set, RunSpec& run, const std::string& chunks_zero) {
  threads(set, run.threads);
  backend(set, run.backend);
  compute_mem(set, run.compute_mem_bytes);
  sp(set, run.sp);
  chunk_tokens(set, run.chunk_tokens, chunks_zero);
  chunks(set, run.chunks);
  offload(set, run.offload);
  precision(set, run.precision);
}

void rope(OptionSet& set, std::optional<double>& theta, std::string& scaling) {
  set.add("rope-theta", "THETA", "replace the model's RoPE base (context extension)", theta).above(0).unset_means("the model's");
  set.add("rope-scaling", "JSON",
          "replace its RoPE scaling: a rope_parameters object, e.g. '{\"rope_type\": \"yarn\", \"factor\": 4}'", scaling);
}

Option& zero(OptionSet& set, int& field) {
  return set
      .add("zero", "0..3",
           "ZeRO stage over the dp x sp ranks: 1 shards AdamW's moments, 2 also the gradients, 3 also the weights",
           field)
      .at_least(0)
      .at_most(3);
}

Option& offload_optimizer(OptionSet& set, bool& field) {
  return set
      .add("offload-optimizer", "none|ram",
           "ram: gradient shards, AdamW's moments and fp32 master weights in the offload tier, updated there "
           "(ZeRO-Offload; --zero 2 or 3)",
           field, [](bool offloaded) { return spelling(offloaded ? OffloadKind::ram : OffloadKind::none); },
           [](const std::string& text) { return parse_offload(text).kind == OffloadKind::ram; })
      .choices({spelling(OffloadKind::none), spelling(OffloadKind::ram)});
}

}  // namespace fpdt::pipeline::options
