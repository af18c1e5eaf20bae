// `fpdt plan` (see plan_command.h): options → plan::PlanConfig and plan::Hardware, then the report.
#include "plan_command.h"

#include <cstdio>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/plan/plan.h"
#include "fpdt/plan/report.h"
#include "options.h"

namespace fpdt::cli {

namespace {

constexpr const char* kPreset = "preset";

// A positive number for an override, or false when the option was left at "preset".
bool override_value(const OptionTable& options, const std::string& name, double& value, double scale) {
  if (options.str(name) == kPreset) return false;
  value = options.real(name) * scale;
  if (!(value > 0)) {
    std::string what = "--";
    what.append(name).append(" must be positive, got '").append(options.str(name)).append("'");
    throw Error("plan", what);
  }
  return true;
}

bool override_bytes(const OptionTable& options, const std::string& name, double& value) {
  if (options.str(name) == kPreset) return false;
  value = static_cast<double>(options.bytes(name));
  if (!(value > 0)) {
    std::string what = "--";
    what.append(name).append(" must be positive, got '").append(options.str(name)).append("'");
    throw Error("plan", what);
  }
  return true;
}

plan::Hardware hardware_from(const OptionTable& options, DType precision_hint, bool precision_given) {
  plan::Hardware hw = plan::hardware_preset(options.str("hardware"));
  override_bytes(options, "compute-mem", hw.compute_bytes);
  override_bytes(options, "host-mem", hw.host_bytes);
  override_bytes(options, "disk-mem", hw.disk_bytes);
  if (options.str("reserved-mem") != kPreset) hw.reserved_bytes = static_cast<double>(options.bytes("reserved-mem"));
  override_value(options, "host-link-gbps", hw.host_link_bytes_per_s, 1e9);
  override_value(options, "disk-gbps", hw.disk_bytes_per_s, 1e9);
  double network = 0;
  if (override_value(options, "network-gbps", network, 1e9)) hw.intra_node_bytes_per_s = hw.inter_node_bytes_per_s = network;
  double peak = 0;
  if (override_value(options, "peak-tflops", peak, 1e12)) {
    const DType precision = precision_given ? precision_hint : hw.default_precision;
    (precision == DType::bf16 ? hw.peak_flops_bf16 : hw.peak_flops_fp32) = peak;
  }
  return hw;
}

}  // namespace

int command_plan(int argc, char** argv) {
  OptionTable options("plan",
                      "Predict one training step per rank: memory per tier and component, FLOPs, bytes over the host "
                      "link and the network, whether prefetch hides, step time and MFU; --max-seq finds the longest "
                      "sequence that fits. The formulas are derived in docs/memory.md.");
  options.add("model", "NAME|config.json", "llama3-8b", "model preset or Hugging Face config.json")
      .add("heads", "N", "0", "plan with N attention heads, head_dim = h / N (0: the model's)")
      .add("positions", "model|rope|learned", "model", "rope: rotary, no table; learned: a table of S rows")
      .add("seq", "S", "1M", "global tokens per sequence: 131072, 128K, 2M")
      .add("sp", "P", "1", "Ulysses sequence-parallel ranks")
      .add("dp", "N", "1", "data-parallel replicas (ZeRO shards over dp x sp ranks)")
      .add("batch", "B", "1", "sequences per micro-batch")
      .add("chunk", "C|auto", "auto", "global tokens per chunk (auto: fpdt the smallest that hides, reference 64K)")
      .add("mode", "ulysses|fpdt-reference|fpdt", "fpdt", "whose memory to predict (fpdt-reference: the paper's code)")
      .add("recompute", "layer|none", "layer", "re-run each layer in backward (activation checkpointing), or keep all")
      .add("offload", "ram|disk|none", "ram", "where chunks and checkpoints rest")
      .add("zero", "0..3", "3", "ZeRO stage over dp x sp ranks")
      .add("dtype", "bf16|fp32|auto", "auto", "storage precision (auto: the hardware's: bf16 on GPUs, fp32 on cpu)")
      .add("hardware", "PRESET", "A100-80GB", "A100-80GB, H100-80GB, H200-141GB or cpu (this machine)")
      .add("compute-mem", "BYTES", kPreset, "compute memory per rank, e.g. 80GiB")
      .add("reserved-mem", "BYTES", kPreset, "of it, held by the runtime (CUDA context, NCCL)")
      .add("host-mem", "BYTES", kPreset, "host RAM per rank for the offload tier")
      .add("disk-mem", "BYTES", kPreset, "disk per rank for --offload disk")
      .add("host-link-gbps", "GB/s", kPreset, "host link per direction, gigabytes per second")
      .add("disk-gbps", "GB/s", kPreset, "disk bandwidth per direction, gigabytes per second")
      .add("peak-tflops", "TFLOP/s", kPreset, "dense peak per rank in the planned precision")
      .add("network-gbps", "GB/s", kPreset, "all-to-all bandwidth per rank, gigabytes per second (one flat network)")
      .flag("max-seq", "search the longest sequence that fits, and show all three modes")
      .flag("json", "print one JSON object instead of the table");
  if (!options.parse(argc, argv)) return 0;

  plan::PlanConfig config;
  config.model = model::resolve_model(options.str("model"));
  const int64_t heads = options.integer("heads");
  if (heads != 0) config.model = plan::with_heads(config.model, static_cast<int>(heads));
  config.positions = plan::parse_positions(options.str("positions"));
  config.seq_tokens = plan::parse_tokens(options.str("seq"), "--seq");
  config.sp = options.integer("sp");
  config.dp = options.integer("dp");
  config.micro_batch = options.integer("batch");
  const std::string chunk = options.str("chunk");
  config.chunk_tokens = chunk == "auto" ? 0 : plan::parse_tokens(chunk, "--chunk");
  if (chunk != "auto" && config.chunk_tokens <= 0) {
    std::string what = "chunk size (--chunk) must be positive, got ";
    what.append(chunk);
    throw Error("plan", what, "give global tokens per chunk, e.g. 64K, or auto");
  }
  config.mode = plan::parse_mode(options.str("mode"));
  config.recompute = plan::parse_recompute(options.str("recompute"));
  config.offload = plan::parse_offload(options.str("offload"));
  config.zero_stage = static_cast<int>(options.integer("zero"));
  const bool precision_given = options.str("dtype") != "auto";
  const DType precision_hint = precision_given ? plan::parse_precision(options.str("dtype")) : DType::bf16;
  const plan::Hardware hardware = hardware_from(options, precision_hint, precision_given);
  config.precision = precision_given ? precision_hint : hardware.default_precision;

  if (!options.enabled("max-seq")) {
    const plan::PlanResult result = plan::make_plan(config, hardware);
    if (options.enabled("json"))
      std::printf("%s\n", plan::plan_to_json(result).dump(2).c_str());
    else
      std::printf("%s", plan::format_plan_text(result).c_str());
    return 0;
  }

  const plan::MaxSeqResult searched = plan::search_max_seq(config, hardware);
  const std::vector<plan::MaxSeqResult> by_mode = plan::search_max_seq_all_modes(config, hardware);
  // Show the plan at the longest sequence (or, when nothing fits, at one granule: why it does not).
  config.seq_tokens = searched.seq_tokens > 0 ? searched.seq_tokens : searched.granule_tokens;
  if (config.mode != plan::Mode::ulysses) config.chunk_tokens = searched.chunk_tokens;
  const plan::PlanResult result = plan::make_plan(config, hardware);
  if (options.enabled("json")) {
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
