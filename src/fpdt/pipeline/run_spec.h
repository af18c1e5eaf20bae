// The run spec: what a run is — RunSpec, one value that `fpdt train`, `fpdt eval` and `fpdt plan` embed
// and hand whole to the pipeline and the model states — with the types its fields are spelled in (mode,
// offload tier, recompute, precision, backend, document positions), each declared once with its spellings,
// and the one chunk rule of a run. The commands bind their options straight to its fields
// (run_options.h) and cut their sequence with run_chunk_plan, so they accept and refuse the same runs
// and lay them out alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/kernels/backend.h"
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
// types live where the lowest layer that reads them is; their spellings are these.
using kernels::OffloadConfig;
using kernels::OffloadKind;
using kernels::Precision;
// The kernels a run computes with (kernels/backend.h).
using kernels::BackendKind;
// global: positions (RoPE, learned) count 0..S−1 over the whole sequence; restart: at 0 at each
// document of a packed sequence (with document masks).
enum class DocPositions : uint8_t { global, restart };

// What a run is: its model, sequence, parallel layout, pipeline layout, arithmetic, model states and
// machine. Each command embeds one (its initial values are the command's defaults) and adds only what
// is its own; what the pipeline and the model states need is read from it (resolved_layout below), never
// copied into structs of their own.
struct RunSpec {
  std::string model;                      // preset, Hugging Face config.json or model folder ("": the command's)
  BackendKind backend = BackendKind::cpu;
  int64_t seq_tokens = 0;                 // S, global tokens per sequence
  int64_t batch_size = 1;                 // B, sequences per micro-batch and replica
  int sp = 1;                             // P, sequence-parallel ranks sharing each sequence
  int dp = 1;                             // data-parallel replicas: the world is dp × sp ranks
  Mode mode = Mode::fpdt;
  int64_t chunk_tokens = 0;               // C, global tokens per chunk (0: cut the sequence into `chunks`)
  int chunks = 1;                         // u, when chunk_tokens is 0
  OffloadConfig offload{OffloadKind::ram, ""};   // train and eval default to none; disk without a
                                                 // directory: in the run's folder
  Recompute recompute = Recompute::none;
  // The maths' precision (model/layer.h): in bf16 the GEMMs and attention round their inputs, the kept
  // activations are bf16 values and the store holds them as bf16 (memory_layout.h); LSE, Δ, dQ, norm
  // statistics, the loss and every state the optimizer reads stay fp32; the model states keep a bf16
  // working copy of the fp32 weights (model_states.h).
  Precision precision = Precision::fp32;
  int zero = 0;                           // ZeRO stage 0..3 over the dp × sp ranks (model_states.h)
  bool offload_optimizer = false;         // stage ≥ 2: gradient shards, moments and master weights offloaded
  bool doc_mask = false;                  // attention stays inside each document of a packed sequence
  DocPositions doc_positions = DocPositions::global;
  // Forward passes only (fpdt eval): the store keeps what a forward needs (memory_layout.h: two layers'
  // inputs, one layer's k and v), the arena has no backward buffers and the model states are the weights
  // alone (stage 0); a backward is refused.
  bool forward_only = false;
  int threads = 0;                        // OpenMP threads (0: all cores)
  int64_t compute_mem_bytes = 0;          // compute-tier budget per rank (0: unlimited)
  int64_t offload_mem_bytes = 0;          // offload-tier budget per rank (0: unlimited)
};

// The spelling of each value, as the options have it: "fpdt", "layer", "ram", "disk:/scratch" ("disk": in
// the run's folder), "bf16", "cpu-guarded", "restart".
std::string spelling(Mode mode);
std::string spelling(Recompute recompute);
std::string spelling(OffloadKind offload);
std::string spelling(const OffloadConfig& offload);
std::string spelling(Precision precision);
std::string spelling(BackendKind backend);
std::string spelling(DocPositions positions);
// The accepted spellings (option choices; "disk:DIR" stands for any directory).
std::vector<std::string> mode_spellings();
std::vector<std::string> recompute_spellings();
std::vector<std::string> offload_spellings();
std::vector<std::string> precision_spellings();
std::vector<std::string> backend_spellings();
std::vector<std::string> doc_positions_spellings();
// Inverses; each throws fpdt::Error listing the accepted spellings. parse_offload("disk") leaves the
// directory empty: the run's own folder (with_run_folder).
Mode parse_mode(const std::string& text);
Recompute parse_recompute(const std::string& text);
OffloadConfig parse_offload(const std::string& text);
Precision parse_precision(const std::string& text);
BackendKind parse_backend(const std::string& text);
DocPositions parse_doc_positions(const std::string& text);
// `offload` with "disk" (no directory) placed in `folder`.
OffloadConfig with_run_folder(OffloadConfig offload, const std::string& folder);

// The pipeline layout a run asks for, as the pipeline and the model states read it: mode ulysses is the
// sequence as one chunk, nothing offloaded, nothing recomputed; the fpdt modes cut it into chunks of C =
// `chunk_tokens` tokens or, when C is 0, into u = `chunks` (chunks is 0 when C is given). Idempotent.
RunSpec resolved_layout(RunSpec run);
// The ranks the model states are partitioned over: the world's W from ZeRO stage 1, 1 at stage 0.
int partition_ranks(const RunSpec& run, int world_ranks);

// The one chunk rule of a run, for its own sequence of S = seq_tokens on P = sp ranks (rank 0's plan;
// every rank's has its sizes): make_chunk_plan of the pipeline's C or u (C a multiple of P; the last chunk padded),
// refusing what would only waste the run: C longer than the sequence rounded up to P (make_chunk_plan
// shortens it, as a pass over a shorter sequence needs) or u chunks some of which hold no token.
// `fpdt train`, `fpdt eval` and `fpdt plan` all cut their sequence with it. Throws one fpdt::Error of
// `module` ("train", "eval", "plan") naming the option.
ChunkPlan run_chunk_plan(const std::string& module, const RunSpec& run);
// This rank's chunk plan of sequences of S tokens under the run's (resolved) chunk size or count.
ChunkPlan plan_chunks(const RunSpec& run, int64_t seq_tokens, int ranks, int rank);

}  // namespace fpdt::pipeline
