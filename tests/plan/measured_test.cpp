// Our fpdt mode's predicted tier peaks against the pipeline's own: `fpdt train --dry-run` lays out
// one step (the chunk arena, the offload store, parameters, gradients and AdamW state) and reports the
// tier peaks its allocator counted. Both read the pipeline's memory table (pipeline/memory_layout.h),
// so the compute tier must match within 0.2 % (issue 7 asked for 10 %) and the offload store within
// 1 % (it is exact). One process, so P = 1; P = 2 under mpirun matched as well (docs/memory.md §11).
#include <gtest/gtest.h>

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
};

TEST(PlanMeasured, DryRunPeaksMatchThePrediction) {
  const TempDir dir;
  for (const Case& c : kCases) {
    const std::string model = std::string(c.model).ends_with(".json") ? std::string(FPDT_SOURCE_DIR) + "/" + c.model
                                                                       : std::string(c.model);
    SCOPED_TRACE(model + " S=" + std::to_string(c.seq_tokens) + " C=" + std::to_string(c.chunk_tokens) + " offload " +
                 c.offload + " recompute " + c.recompute + " B=" + std::to_string(c.batch));
    const ProgramResult run = run_fpdt(
        join_args({"train", "--model", model, "--seq", std::to_string(c.seq_tokens), "--chunk-tokens",
                   std::to_string(c.chunk_tokens), "--offload", c.offload, "--recompute", c.recompute, "--batch",
                   std::to_string(c.batch), "--dry-run",
                   "--threads", "1", "--peak-gflops", "40", "--out", dir.file("run")}));
    ASSERT_EQ(run.exit_status, 0) << run.output;
    const size_t line = run.output.rfind("\n{");
    ASSERT_NE(line, std::string::npos) << run.output;
    const nlohmann::json measured = nlohmann::json::parse(run.output.substr(line + 1));
    const double measured_compute = measured["compute_peak_bytes"].get<double>();
    const double measured_offload = measured["offload_peak_bytes"].get<double>();

    plan::PlanConfig config;
    config.model = model::resolve_model(model);
    config.seq_tokens = c.seq_tokens;
    config.chunk_tokens = c.chunk_tokens;
    config.sp = 1;
    config.micro_batch = c.batch;
    config.mode = plan::Mode::fpdt;
    config.offload = plan::parse_offload(c.offload);
    config.recompute = plan::parse_recompute(c.recompute);
    config.zero_stage = 0;
    config.precision = DType::f32;
    const plan::PlanResult predicted = plan::make_plan(config, plan::hardware_preset("cpu"));
    const double compute_error = std::fabs(predicted.compute_peak.bytes - measured_compute) / measured_compute;
    std::printf("%-34s S %8lld: compute %12.0f predicted, %12.0f measured (%.4f %%); offload %12.0f / %12.0f\n",
                c.model, static_cast<long long>(c.seq_tokens), predicted.compute_peak.bytes, measured_compute,
                100 * compute_error, predicted.offload_peak.bytes, measured_offload);
    // The plan and the pipeline read one memory table; what is left is the parameter blocks' per-tensor
    // alignment (a few KiB), which the plan does not model.
    EXPECT_LE(compute_error, 0.002);
    if (measured_offload > 0) {
      EXPECT_LE(std::fabs(predicted.offload_peak.bytes - measured_offload) / measured_offload, 0.01);
    } else {
      EXPECT_EQ(predicted.offload_peak.bytes, 0);
    }
  }
}

}  // namespace
}  // namespace fpdt::testing
