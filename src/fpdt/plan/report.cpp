// Text and JSON views of a plan (see report.h).
#include "fpdt/plan/report.h"

#include <cmath>
#include <cstdio>

#include "fpdt/base/error.h"
#include "fpdt/pipeline/ulysses.h"
#include "fpdt/plan/memory_model.h"

namespace fpdt::plan {

namespace {

std::string printf_string(const char* format, auto... args) {
  char line[512];
  std::snprintf(line, sizeof line, format, args...);
  return line;
}

// 2097152 → "2,097,152"
std::string grouped(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string text;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text.push_back(',');
    text.push_back(digits[i]);
  }
  return value < 0 ? std::string("-").append(text) : text;
}

// 2097152 → "2M", 196608 → "192K", 1000 → "1000"
std::string short_tokens(int64_t tokens) {
  if (tokens > 0 && tokens % (int64_t{1} << 20) == 0) return std::to_string(tokens >> 20).append("M");
  if (tokens > 0 && tokens % 1024 == 0) return std::to_string(tokens >> 10).append("K");
  return std::to_string(tokens);
}

std::string seconds_text(double seconds) {
  if (seconds >= 100) return printf_string("%.0f s", seconds);
  if (seconds >= 1) return printf_string("%.2f s", seconds);
  if (seconds >= 1e-3) return printf_string("%.2f ms", seconds * 1e3);
  return printf_string("%.1f us", seconds * 1e6);
}

// 8030261248 → "8.03 B", 1507328 → "1.51 M"
std::string count_text(double count) {
  if (count >= 1e9) return printf_string("%.2f B", count / 1e9);
  if (count >= 1e6) return printf_string("%.2f M", count / 1e6);
  return printf_string("%.0f", count);
}

// 3.12e14 → "312.0 TFLOP/s", 9e10 → "90.0 GFLOP/s"
std::string flops_text(double flops_per_s) {
  if (flops_per_s >= 1e12) return printf_string("%.1f TFLOP/s", flops_per_s / 1e12);
  return printf_string("%.1f GFLOP/s", flops_per_s / 1e9);
}

std::string bytes_or_dash(double bytes) { return bytes > 0 ? format_bytes(bytes) : std::string("-"); }

int64_t rounded(double value) { return static_cast<int64_t>(std::llround(value)); }

// Ulysses' head split (pipeline/ulysses.h): each rank's q heads and kv slots, the attention imbalance,
// and which rank the per-rank figures are (the largest).
std::string heads_text(const PlanResult& plan) {
  const PlanShape& s = plan.shape;
  const model::ModelConfig& m = plan.config.model;
  if (s.P == 1) return "";
  const pipeline::HeadSharding sharding = pipeline::make_head_sharding(m.heads, m.kv_heads, static_cast<int>(s.P), 0);
  const std::string largest =
      plan.config.run.mode == Mode::fpdt ? "rank " + std::to_string(fpdt_largest_rank(plan.config, s)) : "rank 0";
  return printf_string("  heads     Hq %d over SP %lld: %s\n            attention imbalance %.3f (%s); time and memory "
                       "below are %s's, the largest\n",
                       m.heads, static_cast<long long>(s.P), pipeline::describe_head_split(sharding).c_str(), s.imbalance,
                       s.imbalance == 1.0 ? "exact balance: SP divides Hq" : "SP does not divide Hq", largest.c_str());
}

}  // namespace

std::string format_plan_text(const PlanResult& plan) {
  const PlanConfig& c = plan.config;
  const PlanShape& s = plan.shape;
  const Hardware& hw = plan.hardware;
  const model::ModelConfig& m = c.model;
  std::string text;
  std::string positions;
  if (c.positions == Positions::rope) positions = "; rotary positions, no table";
  if (c.positions == Positions::learned) positions = "; a learned position table of S rows";
  if (c.positions == Positions::model && m.uses_rope()) positions = "; RoPE " + model::describe_rope(m);
  text.append(printf_string("fpdt plan (per rank)\n  model     %s: %s parameters; L %d, h %d, Hq %d, Hkv %d, D %d, f %d, V %d%s\n",
                            m.name.c_str(), count_text(static_cast<double>(s.params)).c_str(), m.layers, m.hidden, m.heads,
                            m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab_size, positions.c_str()));
  text.append(printf_string("  layout    S %s tokens x batch %lld; SP %lld x DP %lld -> T %s tokens per rank\n",
                            grouped(s.S).c_str(), static_cast<long long>(s.B), static_cast<long long>(s.P),
                            static_cast<long long>(c.run.dp), grouped(s.T).c_str()));
  text.append(heads_text(plan));
  std::string mode = pipeline::spelling(c.run.mode);
  if (c.run.mode != Mode::ulysses)
    mode.append(printf_string(": C %s tokens (c %s per rank, u %lld chunks, padding %s)", grouped(s.C).c_str(),
                              grouped(s.c).c_str(), static_cast<long long>(s.u),
                              grouped(s.chunk_plan.padded_tokens - s.S).c_str()));
  text.append(printf_string("  mode      %s; recompute %s, offload %s, ZeRO-%d, %s\n", mode.c_str(),
                            pipeline::spelling(c.run.recompute).c_str(), pipeline::spelling(c.run.offload.kind).c_str(), c.run.zero,
                            pipeline::spelling(c.run.precision).c_str()));
  const std::string network =
      hw.ranks_per_node >= (1 << 20)
          ? printf_string("network %.0f GB/s (ranks of one process)", hw.intra_node_bytes_per_s / 1e9)
          : printf_string("network %.0f GB/s in a node of %d, %.0f GB/s across", hw.intra_node_bytes_per_s / 1e9,
                          hw.ranks_per_node, hw.inter_node_bytes_per_s / 1e9);
  text.append(printf_string("  hardware  %s: compute %s (%s reserved), host %s%s, host link %.1f GB/s, %s %s x %.2f "
                            "sustained, %s\n%s",
                            hw.name.c_str(), format_bytes(hw.compute_bytes).c_str(), format_bytes(hw.reserved_bytes).c_str(),
                            format_bytes(hw.host_bytes).c_str(), hw.host_shares_compute ? " (the same RAM)" : "",
                            hw.host_link_bytes_per_s / 1e9, flops_text(hw.peak_flops(c.run.precision)).c_str(),
                            pipeline::spelling(c.run.precision).c_str(), hw.compute_efficiency, network.c_str(),
                            hw.rates_measured.empty() ? "" : ("            (" + hw.rates_measured + ")\n").c_str()));

  text.append("\nmemory per rank                                     compute     offload  live in              formula\n");
  for (const Component& component : plan.components) {
    const bool compute = component.tier == Tier::compute;
    text.append(printf_string("  %-48s %10s  %10s  %-20s %s\n", component.name.c_str(),
                              compute ? format_bytes(component.bytes).c_str() : "-",
                              compute ? "-" : format_bytes(component.bytes).c_str(),
                              phase_name(component.phase).c_str(), component.formula.c_str()));
  }
  const std::string compute_phase = phase_name(plan.compute_peak.phase);
  const std::string offload_phase = phase_name(plan.offload_peak.phase);
  text.append(printf_string("  %-48s %10s  %10s  compute at %s, offload at %s\n", "peak",
                            format_bytes(plan.compute_peak.bytes).c_str(), bytes_or_dash(plan.offload_peak.bytes).c_str(),
                            compute_phase.c_str(), offload_phase.c_str()));
  text.append(printf_string("  %-48s %10s  %10s\n", "capacity (compute: less the runtime's reserve)",
                            format_bytes(plan.compute_capacity_bytes).c_str(),
                            bytes_or_dash(plan.offload_capacity_bytes).c_str()));
  text.append(plan.fits ? "  fits: yes\n"
                        : printf_string("  fits: NO, the %s is over by %s\n", plan.bound.c_str(),
                                        format_bytes(plan.bound == "compute tier"
                                                         ? plan.compute_peak.bytes - plan.compute_capacity_bytes
                                                         : plan.offload_peak.bytes - plan.offload_capacity_bytes)
                                            .c_str()));

  const StepFlops& f = plan.flops;
  text.append(printf_string("\nper step and rank\n  FLOPs     model %.3e, hardware %.3e (dense %.3e, attention %.3e, LM head %.3e)\n",
                            f.model, f.hardware, f.dense, f.attention, f.head));
  const StepTraffic& t = plan.traffic;
  text.append(printf_string("  offload   %s out, %s in (%s)\n", bytes_or_dash(t.to_offload_bytes).c_str(),
                            bytes_or_dash(t.from_offload_bytes).c_str(),
                            c.run.offload.kind == OffloadKind::disk ? "disk" : c.run.offload.kind == OffloadKind::ram ? "host link" : "no offload"));
  text.append(printf_string("  network   all-to-all %s sent, ZeRO %s sent\n", bytes_or_dash(t.all_to_all_bytes).c_str(),
                            bytes_or_dash(t.zero_bytes).c_str()));
  const Prefetch& p = plan.prefetch;
  if (p.applies) {
    text.append(printf_string("  prefetch  %s: forward block %s compute vs %s copy, backward block %s vs %s\n",
                              p.hides ? "hides" : "does NOT hide", seconds_text(p.forward_block_compute_s).c_str(),
                              seconds_text(p.forward_block_copy_s).c_str(), seconds_text(p.backward_block_compute_s).c_str(),
                              seconds_text(p.backward_block_copy_s).c_str()));
    text.append(p.smallest_hiding_chunk > 0
                    ? printf_string("            smallest chunk that hides: C %s tokens (bound %.0f)\n",
                                    grouped(p.smallest_hiding_chunk).c_str(), p.min_hiding_chunk_tokens)
                    : printf_string("            no chunk of this sequence hides (needs C >= %.0f tokens)\n",
                                    p.min_hiding_chunk_tokens));
  } else {
    text.append(c.run.mode == Mode::ulysses ? "  prefetch  - (no chunk pipeline)\n" : "  prefetch  - (nothing offloaded)\n");
  }
  const StepTime& time = plan.time;
  text.append(printf_string("  time      %s per step: compute %s, all-to-all %s, exposed copies %s, exposed ZeRO %s\n",
                            seconds_text(time.total_s).c_str(), seconds_text(time.compute_s).c_str(),
                            seconds_text(time.all_to_all_s).c_str(), seconds_text(time.copy_exposed_s).c_str(),
                            seconds_text(time.zero_exposed_s).c_str()));
  text.append(printf_string("  MFU       %.1f %%  (%.0f tokens/s per rank)\n", 100 * time.mfu,
                            time.total_s > 0 ? static_cast<double>(s.T) / time.total_s : 0.0));
  return text;
}

std::string format_max_seq_text(const MaxSeqResult& searched, const std::vector<MaxSeqResult>& by_mode) {
  std::string text = printf_string("\nlongest sequence (%s): S %s tokens (%s), bound by the %s\n",
                                   pipeline::spelling(searched.mode).c_str(), grouped(searched.seq_tokens).c_str(),
                                   short_tokens(searched.seq_tokens).c_str(), searched.bound.c_str());
  text.append("by mode on this hardware:\n");
  for (const MaxSeqResult& result : by_mode) {
    std::string chunk = result.chunk_tokens > 0 ? printf_string("C %s", grouped(result.chunk_tokens).c_str())
                                                : std::string("-");
    std::string mode = pipeline::spelling(result.mode);
    if (result.mode == Mode::fpdt) mode.append(" (").append(pipeline::spelling(result.offload)).append(")");
    text.append(printf_string("  %-15s S %14s tokens (%6s)  %-12s bound by the %s\n", mode.c_str(),
                              grouped(result.seq_tokens).c_str(), short_tokens(result.seq_tokens).c_str(),
                              chunk.c_str(), result.bound.c_str()));
    if (result.model_state_bytes > result.compute_capacity_bytes && result.compute_capacity_bytes > 0)
      text.append(printf_string("  %-15s   (the model states alone take %s of the compute tier's %s)\n", "",
                                format_bytes(result.model_state_bytes).c_str(),
                                format_bytes(result.compute_capacity_bytes).c_str()));
    if (result.halved_from_tokens > 0)
      text.append(printf_string("  %-15s   (C %s did not fit the compute tier even once%s)\n", "",
                                grouped(result.halved_from_tokens).c_str(),
                                result.mode == Mode::fpdt ? ": the smaller chunk's copies are not hidden" : ""));
  }
  return text;
}

nlohmann::ordered_json max_seq_to_json(const MaxSeqResult& result) {
  nlohmann::ordered_json json;
  json["mode"] = pipeline::spelling(result.mode);
  json["offload"] = pipeline::spelling(result.offload);
  json["seq_tokens"] = result.seq_tokens;
  json["granule_tokens"] = result.granule_tokens;
  json["chunk_tokens"] = result.chunk_tokens;
  json["halved_from_tokens"] = result.halved_from_tokens;
  json["bound"] = result.bound;
  return json;
}

nlohmann::ordered_json plan_to_json(const PlanResult& plan) {
  const PlanConfig& c = plan.config;
  const PlanShape& s = plan.shape;
  const Hardware& hw = plan.hardware;
  nlohmann::ordered_json json;
  json["model"] = {{"name", c.model.name},         {"parameters", s.params},  {"layers", s.L},
                   {"hidden", s.h},                {"heads", s.Hq},           {"kv_heads", s.Hkv},
                   {"head_dim", s.D},              {"ffn_hidden", s.f},       {"vocab", s.V},
                   {"positions", positions_name(c.positions)},
                   {"rope", nlohmann::ordered_json::parse(model::rope_parameters_json(c.model))},
                   {"attention_window", model::describe_window(c.model)}};
  json["config"] = {{"seq_tokens", s.S},
                    {"micro_batch", s.B},
                    {"sp", s.P},
                    {"attention_imbalance", s.imbalance},
                    {"dp", c.run.dp},
                    {"local_tokens", s.T},
                    {"chunk_tokens", s.C},
                    {"local_chunk_tokens", s.c},
                    {"chunks_per_rank", s.u},
                    {"padding_tokens", s.chunk_plan.padded_tokens - s.S},
                    {"mode", pipeline::spelling(c.run.mode)},
                    {"recompute", pipeline::spelling(c.run.recompute)},
                    {"offload", pipeline::spelling(c.run.offload.kind)},
                    {"zero_stage", c.run.zero},
                    {"precision", pipeline::spelling(c.run.precision)}};
  json["hardware"] = {{"name", hw.name},
                      {"compute_bytes", rounded(hw.compute_bytes)},
                      {"reserved_bytes", rounded(hw.reserved_bytes)},
                      {"host_bytes", rounded(hw.host_bytes)},
                      {"host_shares_compute", hw.host_shares_compute},
                      {"disk_bytes", rounded(hw.disk_bytes)},
                      {"host_link_bytes_per_s", hw.host_link_bytes_per_s},
                      {"disk_bytes_per_s", hw.disk_bytes_per_s},
                      {"peak_flops", hw.peak_flops(c.run.precision)},
                      {"compute_efficiency", hw.compute_efficiency},
                      {"rates_measured", hw.rates_measured},
                      {"intra_node_bytes_per_s", hw.intra_node_bytes_per_s},
                      {"inter_node_bytes_per_s", hw.inter_node_bytes_per_s},
                      {"ranks_per_node", hw.ranks_per_node}};
  nlohmann::ordered_json components = nlohmann::ordered_json::array();
  for (const Component& component : plan.components)
    components.push_back({{"name", component.name},
                          {"kind", component.kind},
                          {"tier", tier_name(component.tier)},
                          {"phase", phase_name(component.phase)},
                          {"bytes", rounded(component.bytes)},
                          {"formula", component.formula}});
  json["memory"] = {
      {"components", components},
      {"compute", {{"peak_bytes", rounded(plan.compute_peak.bytes)},
                   {"always_bytes", rounded(plan.compute_peak.always_bytes)},
                   {"peak_phase", phase_name(plan.compute_peak.phase)},
                   {"capacity_bytes", rounded(plan.compute_capacity_bytes)},
                   {"fits", plan.fits_compute}}},
      {"offload", {{"peak_bytes", rounded(plan.offload_peak.bytes)},
                   {"always_bytes", rounded(plan.offload_peak.always_bytes)},
                   {"peak_phase", phase_name(plan.offload_peak.phase)},
                   {"capacity_bytes", rounded(plan.offload_capacity_bytes)},
                   {"fits", plan.fits_offload}}},
      {"fits", plan.fits},
      {"bound", plan.bound}};
  json["flops"] = {{"model", plan.flops.model},
                   {"hardware", plan.flops.hardware},
                   {"dense", plan.flops.dense},
                   {"attention", plan.flops.attention},
                   {"head", plan.flops.head}};
  json["traffic"] = {{"to_offload_bytes", rounded(plan.traffic.to_offload_bytes)},
                     {"from_offload_bytes", rounded(plan.traffic.from_offload_bytes)},
                     {"checkpoint_bytes", rounded(plan.traffic.checkpoint_bytes)},
                     {"all_to_all_bytes", rounded(plan.traffic.all_to_all_bytes)},
                     {"zero_bytes", rounded(plan.traffic.zero_bytes)}};
  const Prefetch& p = plan.prefetch;
  json["prefetch"] = {{"applies", p.applies},
                      {"hides", p.hides},
                      {"forward_block_compute_s", p.forward_block_compute_s},
                      {"forward_block_copy_s", p.forward_block_copy_s},
                      {"backward_block_compute_s", p.backward_block_compute_s},
                      {"backward_block_copy_s", p.backward_block_copy_s},
                      {"min_hiding_chunk_tokens", p.min_hiding_chunk_tokens},
                      {"smallest_hiding_chunk_tokens", p.smallest_hiding_chunk}};
  json["time"] = {{"step_s", plan.time.total_s},
                  {"compute_s", plan.time.compute_s},
                  {"all_to_all_s", plan.time.all_to_all_s},
                  {"copy_exposed_s", plan.time.copy_exposed_s},
                  {"zero_exposed_s", plan.time.zero_exposed_s},
                  {"mfu", plan.time.mfu}};
  return json;
}

}  // namespace fpdt::plan
