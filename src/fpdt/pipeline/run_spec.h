// The run spec: the words a run is described by — mode, offload tier (with its directory), recompute and
// precision — each declared once, with its spellings, and the one chunk rule of a run. `fpdt train`,
// `fpdt eval` and `fpdt plan` bind their options straight to these types (run_options.h) and cut their
// sequence with run_chunk_plan, so they accept and refuse the same runs and lay them out alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/kernels/device_memory.h"
#include "fpdt/kernels/ops.h"
#include "fpdt/pipeline/chunk_plan.h"

namespace fpdt::pipeline {

// fpdt: ours (DESIGN.md §1), everything of sequence length streamed chunk by chunk through the offload
//   tier. ulysses: the sequence as one chunk — DeepSpeed-Ulysses; a training run keeps it resident (no
//   offload), a plan adds ZeRO and activation checkpointing (Megatron-DeepSpeed's GPT path).
//   fpdt_reference: the paper's implementation (DeepSpeed fpdt_layer.py), which `fpdt plan` predicts and
//   `fpdt train` does not run.
enum class Mode : uint8_t { fpdt, ulysses, fpdt_reference };
// none: keep each layer's activations from its one forward; layer: keep only layer inputs and re-run
// each layer's forward before its backward (the paper's activation checkpointing).
enum class Recompute : uint8_t { none, layer };
// Where chunks rest between uses, with the disk tier's directory (kernels/device_memory.h: the backend
// allocates it), and the arithmetic of GEMMs and attention (kernels/ops.h: the kernels take it). Their
// types live where the lowest layer that reads them is; their words are these.
using kernels::OffloadConfig;
using kernels::OffloadKind;
using kernels::Precision;

// The word of each value, as the options spell it: "fpdt", "layer", "ram", "disk:/scratch" ("disk": in
// the run's folder), "bf16".
std::string word(Mode mode);
std::string word(Recompute recompute);
std::string word(OffloadKind offload);
std::string word(const OffloadConfig& offload);
std::string word(Precision precision);
// The accepted spellings (option choices; "disk:DIR" stands for any directory).
std::vector<std::string> mode_words();
std::vector<std::string> recompute_words();
std::vector<std::string> offload_words();
std::vector<std::string> precision_words();
// Inverses; each throws fpdt::Error listing the accepted spellings. parse_offload("disk") leaves the
// directory empty: the run's own folder (with_run_folder).
Mode parse_mode(const std::string& text);
Recompute parse_recompute(const std::string& text);
OffloadConfig parse_offload(const std::string& text);
Precision parse_precision(const std::string& text);
// `offload` with "disk" (no directory) placed in `folder`.
OffloadConfig with_run_folder(OffloadConfig offload, const std::string& folder);

struct PipelineConfig;  // fpdt_model.h

// The pipeline a run asks for: mode ulysses is the sequence as one chunk with nothing offloaded; the
// fpdt modes cut it into chunks of C = `chunk_tokens` tokens or, when C is 0, into u = `chunks`.
PipelineConfig make_pipeline_config(Mode mode, int64_t chunk_tokens, int chunks, const OffloadConfig& offload,
                                    Recompute recompute);

// The one chunk rule of a run, for its own sequence of S tokens on P ranks (rank 0's plan; every rank's
// has its sizes): make_chunk_plan of the pipeline's C or u (C a multiple of P; the last chunk padded),
// refusing what would only waste the run: C longer than the sequence rounded up to P (make_chunk_plan
// shortens it, as a pass over a shorter sequence needs) or u chunks some of which hold no token.
// `fpdt train`, `fpdt eval` and `fpdt plan` all cut their sequence with it. Throws one fpdt::Error of
// `module` ("train", "eval", "plan") naming the option.
ChunkPlan run_chunk_plan(const std::string& module, const PipelineConfig& pipeline, int64_t seq_tokens, int sp);

}  // namespace fpdt::pipeline
