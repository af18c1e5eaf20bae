// `fpdt plan` (see plan_command.h): options → plan::PlanConfig and plan::Hardware, then the report.
#include "plan_command.h"

#include <omp.h>

#include <cstdio>
#include <optional>
#include <string>

#include "fpdt/base/options.h"
#include "fpdt/plan/plan.h"
#include "fpdt/plan/report.h"
#include "fpdt/pipeline/run_options.h"
#include "fpdt/machine/rates.h"

namespace fpdt::cli {

namespace {

// What `fpdt plan` is asked, as typed; resolved into plan::PlanConfig and plan::Hardware below.
// The defaults plan the paper's setting; an unset hardware override takes the --hardware preset's.
struct PlanOptions {
  pipeline::RunSpec run = plan::default_plan_run();
  bool precision_auto = true;  // --precision auto (the default): the hardware's
  int heads = 0;
  std::string positions = "model";
  std::string hardware = "A100-80GB";
  std::optional<int64_t> compute_mem, reserved_mem, host_mem, disk_mem;
  std::optional<double> host_link_gbps, disk_gbps, peak_tflops, network_gbps;
  bool max_seq = false;
  bool json = false;
};

void declare_plan_options(OptionSet& set, PlanOptions& o) {
  namespace run = pipeline::options;
  run::model(set, o.run.model);
  set.add("heads", "N", "plan with N attention heads, head_dim = h / N", o.heads).at_least(0).zero_means("the model's");
  set.add("positions", "model|rope|learned", "rope: rotary, no table; learned: a table of S rows", o.positions)
      .choices(plan::positions_spellings());
  run::seq(set, o.run.seq_tokens);
  run::sp(set, o.run.sp);
  run::dp(set, o.run.dp);
  run::batch(set, o.run.batch_size);
  run::chunk_tokens(set, o.run.chunk_tokens, "cut into --chunks; both auto: fpdt the smallest chunk whose prefetch hides, "
                   "fpdt-reference 64K", "auto");
  run::chunks(set, o.run.chunks).at_least(0).zero_means("auto");
  run::mode(set, o.run.mode);
  run::recompute(set, o.run.recompute);
  run::offload(set, o.run.offload);
  run::zero(set, o.run.zero);
  run::offload_optimizer(set, o.run.offload_optimizer);
  run::precision(set, o.run.precision, o.precision_auto, "the hardware's: bf16 on GPUs, fp32 on cpu");
  set.add("hardware", "PRESET",
          "A100-80GB, H100-80GB, H200-141GB or cpu (this machine: its peak measured on each run unless "
          "--peak-tflops states it)",
          o.hardware);
  run::compute_mem(set, o.compute_mem);
  const auto bytes = [&](const char* name, const char* help, std::optional<int64_t>& field) -> Option& {
    return set.add(name, "BYTES", help, field).unit(Unit::bytes).unset_means("preset");
  };
  bytes("reserved-mem", "of it, held by the runtime (CUDA context, NCCL)", o.reserved_mem).at_least(0);
  bytes("host-mem", "host RAM per rank for the offload tier", o.host_mem).above(0);
  bytes("disk-mem", "disk per rank for --offload disk", o.disk_mem).above(0);
  const auto rate = [&](const char* name, const char* value_name, const char* help, std::optional<double>& field) {
    set.add(name, value_name, help, field).above(0).unset_means("preset");
  };
  rate("host-link-gbps", "GB/s", "host link per direction, gigabytes per second", o.host_link_gbps);
  rate("disk-gbps", "GB/s", "disk bandwidth per direction, gigabytes per second", o.disk_gbps);
  rate("peak-tflops", "TFLOP/s", "dense peak per rank in the planned precision", o.peak_tflops);
  rate("network-gbps", "GB/s", "all-to-all bandwidth per rank, gigabytes per second (one flat network)",
       o.network_gbps);
  set.add("max-seq", "", "search the longest sequence that fits, and show all three modes", o.max_seq);
  set.add("json", "", "print one JSON object instead of the table", o.json);
}

// The cpu preset is the machine `fpdt plan` runs on, so its peak in the planned precision and the share
// of it a GEMM sustains (the compute efficiency) are measured here on every core, as `fpdt train` measures
// them for its MFU (machine/rates.h): fp32 the FMA peak and OpenBLAS's sgemm; bf16 the fastest unit a bf16
// product runs on (AMX tiles, AVX512-BF16 dot products or the FMAs) and the backend's bf16 GEMM.
void measure_this_machine(plan::Hardware& hw, plan::Precision precision) {
  const int threads = omp_get_num_procs();
  double peak = 0, sustained = 0;
  std::string unit = "fp32 FMA";
  if (precision == plan::Precision::bf16) {
    const machine::Bf16Rates bf16 = machine::measure_bf16_rates(threads, machine::measure_fma_peak_gflops(threads));
    peak = bf16.peak_gflops();
    unit = bf16.peak_unit();
    sustained = bf16.gemm_gflops;
  } else {
    const machine::MachineRates fp32 = machine::measure_machine_rates(threads);
    peak = fp32.fma_peak_gflops;
    sustained = fp32.sgemm_gflops;
  }
  (precision == plan::Precision::bf16 ? hw.peak_flops_bf16 : hw.peak_flops_fp32) = peak * 1e9;
  hw.compute_efficiency = sustained / peak;
  hw.rates_measured = unit + " peak and a 1024^3 " + pipeline::spelling(precision) + " GEMM's share of it, measured on " +
                      std::to_string(threads) + (threads == 1 ? " core" : " cores");
}

plan::Hardware hardware_from(const PlanOptions& o, plan::Precision precision) {
  plan::Hardware hw = plan::hardware_preset(o.hardware);
  if (hw.this_machine && !o.peak_tflops) measure_this_machine(hw, precision);
  const auto bytes = [](const std::optional<int64_t>& given, double& field) {
    if (given) field = static_cast<double>(*given);
  };
  bytes(o.compute_mem, hw.compute_bytes);
  bytes(o.reserved_mem, hw.reserved_bytes);
  bytes(o.host_mem, hw.host_bytes);
  bytes(o.disk_mem, hw.disk_bytes);
  if (o.host_link_gbps) hw.host_link_bytes_per_s = *o.host_link_gbps * 1e9;
  if (o.disk_gbps) hw.disk_bytes_per_s = *o.disk_gbps * 1e9;
  if (o.network_gbps) hw.intra_node_bytes_per_s = hw.inter_node_bytes_per_s = *o.network_gbps * 1e9;
  if (o.peak_tflops) (precision == plan::Precision::bf16 ? hw.peak_flops_bf16 : hw.peak_flops_fp32) = *o.peak_tflops * 1e12;
  return hw;
}

}  // namespace

int command_plan(int argc, char** argv) {
  PlanOptions o;
  OptionSet options("plan",
                    "Predict one training step per rank: memory per tier and component, FLOPs, bytes over the host "
                    "link and the network, whether prefetch hides, step time and MFU; --max-seq finds the longest "
                    "sequence that fits. The formulas are derived in docs/memory.md.");
  declare_plan_options(options, o);
  if (!options.parse(argc, argv)) return 0;

  plan::PlanConfig config;
  config.model = model::resolve_model(o.run.model);
  if (o.heads != 0) config.model = plan::with_heads(config.model, o.heads);
  config.positions = plan::parse_positions(o.positions);
  config.run = o.run;
  if (o.precision_auto) config.run.precision = plan::hardware_preset(o.hardware).default_precision;
  const plan::Hardware hardware = hardware_from(o, config.run.precision);

  if (!o.max_seq) {
    const plan::PlanResult result = plan::make_plan(config, hardware);
    if (o.json)
      std::printf("%s\n", plan::plan_to_json(result).dump(2).c_str());
    else
      std::printf("%s", plan::format_plan_text(result).c_str());
    return 0;
  }

  const plan::MaxSeqResult searched = plan::search_max_seq(config, hardware);
  const std::vector<plan::MaxSeqResult> by_mode = plan::search_max_seq_all_modes(config, hardware);
  // Show the plan at the longest sequence (or, when nothing fits, at one granule: why it does not).
  config.run.seq_tokens = searched.seq_tokens > 0 ? searched.seq_tokens : searched.granule_tokens;
  if (config.run.mode != plan::Mode::ulysses) config.run.chunk_tokens = searched.chunk_tokens;
  const plan::PlanResult result = plan::make_plan(config, hardware);
  if (o.json) {
    nlohmann::ordered_json json = plan::plan_to_json(result);
    json["max_seq"] = plan::max_seq_to_json(searched);
    nlohmann::ordered_json modes = nlohmann::ordered_json::array();
    for (const plan::MaxSeqResult& mode : by_mode) modes.push_back(plan::max_seq_to_json(mode));
    json["max_seq_by_mode"] = modes;
    std::printf("%s\n", json.dump(2).c_str());
  } else {
    std::printf("%s%s", plan::format_plan_text(result).c_str(), plan::format_max_seq_text(searched, by_mode).c_str());
  }
  return 0;
}

}  // namespace fpdt::cli
