// Our fpdt mode's predicted tier peaks against the pipeline's own: `fpdt train --dry-run` lays out
// one step (the chunk arena, the offload store, and the model states of its ZeRO stage: weights,
// gradients, AdamW state, ZeRO's slots) — counted, never allocated — and reports the tier peaks its
// allocator counted. Both read the pipeline's memory table (pipeline/memory_layout.h), so they agree to
// the byte. A dry run in one process lays out rank 0 of the --sp x --dp world it is given: the paper's
// models at 2M-token scale over 4 to 32 ranks, each in well under a minute and 2 GiB of memory.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/fpdt_program.h"
#include "fpdt/plan/plan.h"

namespace fpdt::testing {
namespace {

struct Case {
  const char* model;   // preset or config.json under the source tree
  int64_t seq_tokens;
  int64_t chunk_tokens;
  const char* offload;
  const char* recompute;
  int batch;
  int sp = 1, dp = 1, zero = 0;
  bool offload_optimizer = false;
  plan::Precision precision = plan::Precision::fp32;
};

// The FPDT memory benchmark's model (bench/fpdt_memory.sh) and the small presets.
const Case kCases[] = {
    {"bench/configs/memory_llama.json", 8192, 4096, "ram", "layer", 1},
    {"bench/configs/memory_llama.json", 65536, 4096, "ram", "layer", 1},
    {"bench/configs/memory_llama.json", 1048576, 4096, "ram", "layer", 1},
    {"bench/configs/memory_llama.json", 4194304, 4096, "ram", "layer", 1},
    {"bench/configs/memory_llama.json", 65536, 4096, "none", "layer", 1},
    {"bench/configs/memory_llama.json", 16384, 1024, "ram", "none", 1},
    {"llama-tiny", 8192, 256, "ram", "none", 4},
    {"gpt-tiny", 1024, 128, "ram", "layer", 2},
    {"llama-demo", 32768, 2048, "none", "none", 1},
    {"llama-demo", 256, 256, "ram", "none", 8},  // make run's shape: the batch's 8 sequences in each chunk
    // ZeRO over sp x dp ranks (rank 0 laid out in one process)
    {"llama-demo", 4096, 512, "ram", "none", 1, 2, 2, 1},
    {"llama-demo", 4096, 512, "ram", "layer", 1, 4, 1, 2},
    {"gpt-tiny", 1024, 128, "none", "none", 2, 2, 1, 3},
    {"llama-tiny", 8192, 256, "ram", "layer", 1, 2, 2, 3, true},
    // the paper's models at its scale; first the issue's `fpdt train --model llama3-8b --sp 4 --zero 3
    // --seq 2M --dry-run` (train's defaults: one chunk, nothing offloaded, no recompute)
    {"llama3-8b", 2097152, 2097152, "none", "none", 1, 4, 1, 3},
    {"llama3-8b", 2097152, 65536, "ram", "layer", 1, 4, 1, 3},
    {"llama3-8b", 2097152, 65536, "ram", "layer", 1, 4, 1, 3, true},
    {"llama3-70b", 4194304, 131072, "ram", "layer", 1, 32, 1, 3},
    {"gpt-2.7b", 524288, 32768, "ram", "layer", 1, 2, 1, 3},
    {"gpt-13b", 1048576, 65536, "ram", "layer", 1, 8, 1, 3},
    {"gpt-30b", 2097152, 65536, "ram", "layer", 1, 8, 2, 3},
    // bf16: the store's activation arrays in bf16, the chunk buffers fp32 with their bf16 twins
    {"llama-demo", 32768, 2048, "none", "none", 1, 1, 1, 0, false, plan::Precision::bf16},
    {"llama-demo", 4096, 512, "ram", "layer", 1, 4, 1, 2, false, plan::Precision::bf16},
    {"gpt-tiny", 1024, 128, "ram", "none", 2, 2, 1, 3, false, plan::Precision::bf16},
    {"llama3-8b", 2097152, 65536, "ram", "layer", 1, 4, 1, 3, true, plan::Precision::bf16},
};

TEST(PlanMeasured, DryRunPeaksMatchThePrediction) {
  const TempDir dir;
  for (const Case& c : kCases) {
    const std::string model = std::string(c.model).ends_with(".json") ? std::string(FPDT_SOURCE_DIR) + "/" + c.model
                                                                       : std::string(c.model);
    const std::string tag = model + " S=" + std::to_string(c.seq_tokens) + " C=" + std::to_string(c.chunk_tokens) +
                            " offload " + c.offload + " recompute " + c.recompute + " B=" + std::to_string(c.batch) +
                            " sp " + std::to_string(c.sp) + " dp " + std::to_string(c.dp) + " ZeRO " +
                            std::to_string(c.zero) + (c.offload_optimizer ? " optimizer offloaded" : "") + " " +
                            pipeline::spelling(c.precision);
    SCOPED_TRACE(tag);
    const auto start = std::chrono::steady_clock::now();
    const ProgramResult run = run_fpdt(
        join_args({"train", "--model", model, "--seq", std::to_string(c.seq_tokens), "--chunk-tokens",
                   std::to_string(c.chunk_tokens), "--offload", c.offload, "--recompute", c.recompute, "--batch",
                   std::to_string(c.batch), "--sp", std::to_string(c.sp), "--dp", std::to_string(c.dp), "--zero",
                   std::to_string(c.zero), "--offload-optimizer", c.offload_optimizer ? "ram" : "none", "--precision",
                   pipeline::spelling(c.precision), "--dry-run",
                   "--threads", "1", "--peak-gflops", "40", "--out", dir.file("run")}));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(run.exit_status, 0) << run.output;
    const size_t line = run.output.rfind("\n{");
    ASSERT_NE(line, std::string::npos) << run.output;
    const nlohmann::json measured = nlohmann::json::parse(run.output.substr(line + 1));
    const double measured_compute = measured["compute_peak_bytes"].get<double>();
    const double measured_offload = measured["offload_peak_bytes"].get<double>();

    plan::PlanConfig config;
    config.model = model::resolve_model(model);
    config.run.seq_tokens = c.seq_tokens;
    config.run.chunk_tokens = c.chunk_tokens;
    config.run.sp = c.sp;
    config.run.dp = c.dp;
    config.run.batch_size = c.batch;
    config.run.mode = plan::Mode::fpdt;
    config.run.offload.kind = pipeline::parse_offload(c.offload).kind;
    config.run.recompute = pipeline::parse_recompute(c.recompute);
    config.run.zero = c.zero;
    config.run.offload_optimizer = c.offload_optimizer;
    config.run.precision = c.precision;
    const plan::PlanResult predicted = plan::make_plan(config, plan::hardware_preset("cpu"));
    const double peak_rss = measured["peak_rss_bytes"].get<double>();
    std::printf("[ measured ] %s: compute %.0f predicted, %.0f measured; offload %.0f / %.0f; %.2f s, RSS %.0f MiB\n",
                tag.c_str(), predicted.compute_peak.bytes, measured_compute, predicted.offload_peak.bytes,
                measured_offload, seconds, peak_rss / (1 << 20));
    // The plan and the dry run read one memory table: equal to the byte (the issue asked for 2 %).
    EXPECT_EQ(predicted.compute_peak.bytes, measured_compute);
    EXPECT_EQ(predicted.offload_peak.bytes, measured_offload);
    // Counted, never allocated: any model at any scale in seconds and little memory (the issue's
    // bounds: a minute and 2 GiB).
    EXPECT_LT(seconds, 60.0);
    EXPECT_LT(peak_rss, 2.0 * (1 << 30));
  }
}

}  // namespace
}  // namespace fpdt::testing
