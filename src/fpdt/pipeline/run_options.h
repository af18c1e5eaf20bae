// The options that every command describing a run shares — `fpdt train`, `fpdt eval` and `fpdt plan`:
// one spelling, one unit, one meaning check and one help line each. A command binds them to its own
// settings fields, whose initial values are its defaults, and says what 0 means there. The run spec's
// spellings (run_spec.h) bind straight to their types: no command compares their spellings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fpdt/base/options.h"
#include "fpdt/pipeline/run_spec.h"

namespace fpdt::pipeline::options {

Option& model(OptionSet& set, std::string& field);     // --model NAME|PATH (a preset, config.json or model folder)
Option& backend(OptionSet& set, BackendKind& field);   // --backend cpu|reference|cuda|cpu-guarded
Option& seq(OptionSet& set, int64_t& field);           // --seq S (tokens: 131072, 128K, 2M)
Option& sp(OptionSet& set, int& field);                // --sp P
Option& dp(OptionSet& set, int& field);                // --dp N
Option& batch(OptionSet& set, int64_t& field);         // --batch B
// --chunk-tokens C; `zero` says what 0 does in this command ("auto" is also accepted for 0 when
// zero_word is "auto").
Option& chunk_tokens(OptionSet& set, int64_t& field, const std::string& zero, const std::string& zero_word = "");
Option& chunks(OptionSet& set, int& field);            // --chunks U (when --chunk-tokens is 0)
Option& mode(OptionSet& set, Mode& field);              // --mode fpdt|ulysses|fpdt-reference
Option& recompute(OptionSet& set, Recompute& field);    // --recompute none|layer
Option& offload(OptionSet& set, OffloadConfig& field);  // --offload none|ram|disk|disk:DIR
Option& precision(OptionSet& set, Precision& field);    // --precision fp32|bf16
// --precision fp32|bf16|auto: `automatic` says auto was chosen (the command then decides `field`, as
// `auto_means` tells); another spelling clears it and sets `field`.
Option& precision(OptionSet& set, Precision& field, bool& automatic, const std::string& auto_means);
Option& doc_mask(OptionSet& set, bool& field);                     // --doc-mask
Option& doc_positions(OptionSet& set, DocPositions& field);        // --doc-positions global|restart
// --compute-mem BYTES: a budget (0: unlimited) or, for a plan, an override of the hardware preset.
Option& compute_mem(OptionSet& set, int64_t& field);
Option& compute_mem(OptionSet& set, std::optional<int64_t>& field);
Option& threads(OptionSet& set, int& field);           // --threads N (0: all cores)
Option& zero(OptionSet& set, int& field);              // --zero 0..3
Option& offload_optimizer(OptionSet& set, bool& field);  // --offload-optimizer none|ram
// What a run of forward passes is laid out by (`fpdt eval`, `fpdt sample`): --threads, --backend, --compute-mem,
// --sp, --chunk-tokens (0: `chunks_zero`), --chunks, --offload, --precision.
void forward_run(OptionSet& set, RunSpec& run, const std::string& chunks_zero);
// --rope-theta THETA and --rope-scaling JSON: the RoPE of the loaded model replaced (context extension).
void rope(OptionSet& set, std::optional<double>& theta, std::string& scaling);

}  // namespace fpdt::pipeline::options
