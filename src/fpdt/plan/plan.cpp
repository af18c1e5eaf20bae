// make_plan and the longest-sequence search (see plan.h).
#include "fpdt/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fpdt/base/error.h"
#include "fpdt/plan/memory_model.h"

namespace fpdt::plan {

namespace {

constexpr int64_t kSearchLimitTokens = int64_t{1} << 40;

void require_positive(double value, const char* what) {
  if (!(value > 0)) {
    std::string message = "hardware '";
    message.append(what).append("' must be positive");
    throw Error("plan", message, "check the --compute-mem, --host-mem, --host-link-gbps, --peak-tflops and "
                                 "--network-gbps values");
  }
}

void validate_hardware(const Hardware& hw, const PlanConfig& config) {
  require_positive(hw.compute_bytes, "compute memory");
  require_positive(hw.peak_flops(config.run.precision), "peak FLOP/s");
  require_positive(hw.compute_efficiency, "compute efficiency");
  require_positive(hw.intra_node_bytes_per_s, "network bandwidth");
  require_positive(hw.inter_node_bytes_per_s, "network bandwidth");
  if (config.run.offload.kind == OffloadKind::ram) {
    require_positive(hw.host_bytes, "host memory");
    require_positive(hw.host_link_bytes_per_s, "host link bandwidth");
  }
  if (config.run.offload.kind == OffloadKind::disk) {
    require_positive(hw.disk_bytes, "disk size");
    require_positive(hw.disk_bytes_per_s, "disk bandwidth");
  }
  if (hw.reserved_bytes < 0 || (!hw.host_shares_compute && hw.reserved_bytes >= hw.compute_bytes)) {
    std::string hint = "raise --compute-mem above ";
    hint.append(format_bytes(hw.reserved_bytes));
    throw Error("plan", "the runtime's reserve leaves no compute memory for tensors", hint);
  }
}

// The chunk an fpdt mode plans with when none is given.
int64_t automatic_chunk(const PlanConfig& config, const Hardware& hardware) {
  // One chunk of the whole sequence (S rounded up to P) is always valid, and the longest.
  const int64_t whole = (config.run.seq_tokens + config.run.sp - 1) / config.run.sp * config.run.sp;
  if (config.run.mode == Mode::fpdt_reference) return std::min(kReferenceChunkTokens, whole);
  PlanConfig probe = config;
  probe.run.chunk_tokens = whole;  // any valid chunk: the bound does not depend on it
  const PlanShape shape = derive_shape(probe);
  const int64_t chunk = smallest_chunk_at_least(shape.S, shape.P, min_hiding_chunk_tokens(config, shape, hardware));
  return chunk > 0 ? chunk : whole;
}

// Whether `config`'s memory (its chunk size set) can be counted: at most 2^31 - 1 chunks (the chunk
// plan's count is an int), and, the pipeline's table of fpdt mode being counted in integers
// (memory_model.cpp refuses what overflows), in 64 bits; the other modes are counted in doubles.
bool countable(const PlanConfig& config) {
  if (config.run.chunk_tokens > 0 && config.run.seq_tokens / config.run.chunk_tokens >= std::numeric_limits<int>::max())
    return false;
  return config.run.mode != Mode::fpdt || fpdt_layout_countable(config, derive_shape(config));
}

}  // namespace

PlanResult make_plan(const PlanConfig& config_in, const Hardware& hardware) {
  PlanResult result;
  result.config = config_in;
  result.hardware = hardware;
  PlanConfig& config = result.config;
  if (config.run.mode != Mode::ulysses && config.run.chunk_tokens == 0 && config.run.chunks == 0) {
    if (config.run.seq_tokens <= 0 || config.run.sp <= 0) derive_shape(config);  // reports the bad size
    config.run.chunk_tokens = automatic_chunk(config, hardware);
  }
  if (config.run.mode == Mode::ulysses) config.run.chunk_tokens = config.run.chunks = 0;
  result.shape = derive_shape(config);
  validate_hardware(hardware, config);
  const PlanShape& s = result.shape;

  result.components = memory_components(config, s);
  result.compute_peak = tier_peak(result.components, Tier::compute);
  result.offload_peak = tier_peak(result.components, Tier::offload);
  if (hardware.host_shares_compute) {
    const double pool = hardware.host_bytes - hardware.reserved_bytes;
    result.compute_capacity_bytes = std::min(hardware.compute_bytes, pool);
    result.offload_capacity_bytes = config.run.offload.kind == OffloadKind::ram   ? std::max(0.0, pool - result.compute_peak.bytes)
                                    : config.run.offload.kind == OffloadKind::disk ? hardware.disk_bytes
                                                                          : 0.0;
  } else {
    result.compute_capacity_bytes = hardware.compute_bytes - hardware.reserved_bytes;
    result.offload_capacity_bytes = config.run.offload.kind == OffloadKind::ram   ? hardware.host_bytes
                                    : config.run.offload.kind == OffloadKind::disk ? hardware.disk_bytes
                                                                          : 0.0;
  }
  result.fits_compute = result.compute_peak.bytes <= result.compute_capacity_bytes;
  result.fits_offload = result.offload_peak.bytes <= result.offload_capacity_bytes;
  result.fits = result.fits_compute && result.fits_offload;
  result.bound = !result.fits_compute ? "compute tier" : !result.fits_offload ? "offload tier" : "";

  result.flops = step_flops(config, s);
  result.traffic = step_traffic(config, s);
  result.prefetch = prefetch_analysis(config, s, hardware);
  result.time = step_time(config, s, hardware, result.flops, result.traffic, result.prefetch);
  return result;
}

MaxSeqResult search_max_seq(const PlanConfig& config_in, const Hardware& hardware) {
  MaxSeqResult result;
  result.mode = config_in.run.mode;
  result.offload = config_in.run.offload.kind;
  PlanConfig probe = config_in;
  if (probe.run.sp <= 0) derive_shape(probe);  // reports the bad size
  const int64_t P = probe.run.sp;
  const bool chunk_chosen_here = probe.run.chunk_tokens == 0;
  if (probe.run.mode == Mode::ulysses) {
    probe.run.chunk_tokens = 0;
    result.granule_tokens = 1024 * P;
  } else {
    if (probe.run.chunk_tokens == 0 && probe.run.mode == Mode::fpdt_reference) probe.run.chunk_tokens = kReferenceChunkTokens;
    if (probe.run.chunk_tokens == 0) {
      // The hiding bound does not depend on S: take it from the shortest valid sequence.
      PlanConfig shortest = probe;
      shortest.run.seq_tokens = P;
      shortest.run.chunk_tokens = P;
      const PlanShape shape = derive_shape(shortest);
      const double bound = min_hiding_chunk_tokens(probe, shape, hardware);
      int64_t chunk = P;
      while (static_cast<double>(chunk) < bound && chunk < kSearchLimitTokens) chunk *= 2;
      probe.run.chunk_tokens = chunk;
    }
    probe.run.chunks = 0;  // the chunk is fixed, S varies
    result.granule_tokens = probe.run.chunk_tokens;
    result.chunk_tokens = probe.run.chunk_tokens;
  }
  int64_t granule = result.granule_tokens;
  int64_t limit = kSearchLimitTokens;
  bool position_limited = false;
  if (probe.model.learned_positions() && probe.positions == Positions::model && probe.model.max_positions < limit) {
    limit = probe.model.max_positions;
    position_limited = true;
  }
  int64_t max_k = limit / granule;
  PlanResult last;
  auto fits = [&](int64_t k) {
    probe.run.seq_tokens = k * granule;
    if (!countable(probe)) {
      last = PlanResult{};
      last.bound = "64-bit sizes";
      return false;
    }
    last = make_plan(probe, hardware);
    return last.fits;
  };
  auto bound_past = [&](int64_t k) -> std::string {
    if (k > max_k) return position_limited ? "position table" : "search limit";
    fits(k);
    return last.bound;
  };
  if (max_k < 1) {
    // Even one granule exceeds the position table: validate the chunk anyway (it may be the real error).
    probe.run.seq_tokens = granule;
    PlanConfig check = probe;
    check.positions = Positions::rope;
    derive_shape(check);
    result.bound = "position table";
    return result;
  }
  bool one_fits = fits(1);
  if (!one_fits && chunk_chosen_here && probe.run.mode != Mode::ulysses && last.bound == "compute tier") {
    // The chunk buffers grow with C: the chunk the search chose (the smallest that hides the prefetch, or the
    // reference's default) may be what leaves no room. Halve it (a multiple of P) until one chunk fits.
    const int64_t chosen = granule;
    for (int64_t smaller = granule / 2; !one_fits && last.bound == "compute tier" && smaller >= P && smaller % P == 0;
         smaller /= 2) {
      probe.run.chunk_tokens = granule = smaller;
      one_fits = fits(1);
    }
    if (one_fits) {
      result.granule_tokens = result.chunk_tokens = granule;
      result.halved_from_tokens = chosen;
      max_k = limit / granule;
    } else {
      probe.run.chunk_tokens = granule = chosen;
      fits(1);  // the bound the chosen chunk meets
    }
  }
  if (!one_fits) {
    result.bound = last.bound;
    for (const Component& component : last.components)
      if (component.kind == "model states" && component.tier == Tier::compute) result.model_state_bytes += component.bytes;
    result.compute_capacity_bytes = last.compute_capacity_bytes;
    return result;
  }
  int64_t lo = 1, hi = 2;  // fits(lo); hi unknown
  while (hi <= max_k && fits(hi)) {
    lo = hi;
    hi = hi > max_k / 2 ? max_k + 1 : hi * 2;
  }
  hi = std::min(hi, max_k + 1);
  while (hi - lo > 1) {  // fits(lo), !fits(hi) or hi past the limit
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid;
  }
  result.seq_tokens = lo * granule;
  result.bound = bound_past(lo + 1);
  return result;
}

std::vector<MaxSeqResult> search_max_seq_all_modes(const PlanConfig& config, const Hardware& hardware) {
  std::vector<MaxSeqResult> results;
  for (const Mode mode : {Mode::ulysses, Mode::fpdt_reference, Mode::fpdt}) {
    PlanConfig probe = config;
    probe.run.mode = mode;
    if (mode != Mode::fpdt) {
      if (probe.run.offload.kind == OffloadKind::disk) probe.run.offload.kind = OffloadKind::ram;
      probe.run.offload_optimizer = false;  // ZeRO-Offload is planned for fpdt alone
      if (mode == Mode::fpdt_reference) probe.run.recompute = Recompute::layer;
    }
    results.push_back(search_max_seq(probe, hardware));
  }
  if (config.run.offload.kind == OffloadKind::ram && hardware.disk_bytes > 0 && hardware.disk_bytes_per_s > 0) {
    PlanConfig probe = config;
    probe.run.mode = Mode::fpdt;
    probe.run.offload.kind = OffloadKind::disk;
    probe.run.chunk_tokens = 0;  // the disk's bandwidth sets its own hiding chunk
    results.push_back(search_max_seq(probe, hardware));
  }
  return results;
}

}  // namespace fpdt::plan
