// A run's hardware: its team, cores and peaks, and their rows in the run's table (see hardware.h).
#include "fpdt/machine/hardware.h"

#include <cstdlib>
#include <optional>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"
#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/kernels/cpu/cpu_backend.h"
#include "fpdt/kernels/cpu/gemm.h"
#include "fpdt/kernels/cuda/cuda_backend.h"

namespace fpdt::machine {

namespace {

constexpr const char* kModule = "train";  // the peaks are found as `fpdt train` sets up

std::string str(int64_t value) { return std::to_string(value); }

}  // namespace

Hardware::Hardware(const HardwareRequest& request, comm::Communicator& world)
    : request_(request), threads_(set_threads(request.run.threads)) {
  const bool bf16 = request.run.precision == kernels::Precision::bf16;
  if (request.given_peak_gflops > 0) {
    fp32_.fma_peak_gflops = request.given_peak_gflops;
  } else if (request.run.backend == kernels::BackendKind::cuda && !request.dry_run) {  // MFU against the GPU's peak, not the host's
    const std::string device = kernels::cuda_device_name();
    const std::optional<DevicePeak> peak = stated_device_peak(device);
    if (!peak)
      throw Error(kModule, "no peak rate is listed for the GPU '" + device + "', so MFU has nothing to divide by",
                  "give its fp32 peak with --peak-gflops (GFLOP/s per rank)");
    fp32_.fma_peak_gflops = peak->fp32_gflops;
    fp32_.peak_stated_for = peak->device;
    bf16_.dot_peak_gflops = peak->bf16_gflops;  // stated, as the fp32 one
  } else if (!request.dry_run) {
    fp32_ = measure_machine_rates(threads_);
    if (bf16) bf16_ = measure_bf16_rates(threads_, fp32_.fma_peak_gflops);
    fma_peak_measured_ = true;
  }
  cores_ = fewest_cores(world, request.dry_run);
}

double Hardware::mfu_peak_gflops() const {
  const bool bf16_peak = request_.run.precision == kernels::Precision::bf16 && bf16_.peak_gflops() > 0;
  return bf16_peak && request_.given_peak_gflops <= 0 ? bf16_.peak_gflops() : fp32_.fma_peak_gflops;
}

// One trial, ~50 ms: kept to steps of a second or more, so it adds at most 5 % to the job. Per-CPU-second
// timing keeps other processes out of the peak, but not a VM's host putting both vCPUs on one core's two
// hyperthreads for a while: on a 2-vCPU VM the set-up's peak read 176 GFLOP/s against 338–346 in other
// runs, and that run's steps printed MFU 98 %. Every rank re-measures at the same point of the step, as all
// measured at set-up.
void Hardware::recheck_after_step(double step_seconds) {
  if (!fma_peak_measured_ || step_seconds < kPeakRecheckMinStepSeconds) return;
  const double trial = measure_fma_peak_gflops(threads_, nullptr, /*trials=*/1);
  if (trial <= fp32_.fma_peak_gflops) return;
  fp32_.fma_peak_gflops = trial;
  if (request_.run.precision == kernels::Precision::bf16) bf16_.fma_peak_gflops = trial;
}

std::vector<std::pair<std::string, std::string>> Hardware::table_rows(const comm::Communicator& world) const {
  std::vector<std::pair<std::string, std::string>> rows;
  auto row = [&rows](const std::string& key, const std::string& value) { rows.emplace_back(key, value); };
  const bool bf16 = request_.run.precision == kernels::Precision::bf16;
  const bool given = request_.given_peak_gflops > 0;
  row("ranks / threads", str(world.size()) + " (" + world.backend() + ") / " + str(threads_));
  if (cores_.cores > 0) {
    const bool too_few = cores_.cores < threads_;
    row("cores per rank", str(cores_.cores) + " (CPU affinity" +
                              (world.size() > 1 ? " of rank " + str(cores_.rank) : "") + ")" +
                              (too_few ? ": fewer than " + str(threads_) + " threads" : ""));
    if (too_few)
      row("  to give them cores",
          world.backend() == "mpi" ? "mpirun --bind-to none, or --map-by slot:PE=" + str(threads_)
                                   : "widen taskset/numactl/cpuset, or --threads " + str(cores_.cores));
  }
  if (given) {
    row("peak GFLOP/s", format_number(fp32_.fma_peak_gflops) + " (given)");
  } else if (!fp32_.peak_stated_for.empty()) {
    row("peak GFLOP/s", format_number(fp32_.fma_peak_gflops) + " fp32, stated for " + fp32_.peak_stated_for);
  } else {
    row("peak GFLOP/s",
        format_number(fp32_.fma_peak_gflops) + " FMA (" + str(fp32_.vector_bits) + "-bit), measured");
    row("sgemm GFLOP/s", format_number(fp32_.sgemm_gflops) + " OpenBLAS, measured (load " +
                             format_number(fp32_.load_average) + ")");
  }
  if (bf16 && !given && !request_.dry_run) {
    std::string peak = format_number(bf16_.peak_gflops()) + " " +
                       (fp32_.peak_stated_for.empty() ? bf16_.peak_unit() + std::string(", measured")
                                                      : "stated for " + fp32_.peak_stated_for);
    if (bf16_.peak_gflops() == bf16_.fma_peak_gflops)  // the FMAs outrun the bf16 units, or there are none
      peak += bf16_.dot_peak_gflops > 0 ? " (AVX512-BF16 " + format_number(bf16_.dot_peak_gflops) + ")"
                                        : " (no bf16 units)";
    row("bf16 peak GFLOP/s", peak);
    if (bf16_.gemm_gflops > 0) row("bf16 GEMM GFLOP/s", format_number(bf16_.gemm_gflops) + " measured");
  }
  if (bf16 && request_.run.backend == kernels::BackendKind::cpu) {
    row("bf16 GEMMs", kernels::cpu::describe_bf16_gemms());
    row("bf16 attention", kernels::cpu::CpuBackend::bf16_attention_arithmetic());
  }
  if (request_.run.backend == kernels::BackendKind::cuda && !request_.dry_run)
    row("attention", kernels::cuda_attention_kernels(request_.run.precision));
  if (bf16 && !request_.dry_run)
    row("MFU divides by", format_number(mfu_peak_gflops()) + " GFLOP/s a rank (fp32's beside it)");
  row("BLAS kernels", kernels::cpu::describe_blas_core());
  return rows;
}

void Hardware::log_notes() const {
  if (request_.run.precision == kernels::Precision::bf16 && request_.run.backend == kernels::BackendKind::cpu &&
      kernels::cpu::bf16_gemm_arithmetic() == kernels::cpu::Bf16Gemm::fp32_fmas &&
      kernels::cpu::CpuBackend::bf16_attention() == kernels::cpu::CpuBackend::Bf16Attention::fp32_products)
    log::info("note: no unit of this CPU multiplies bf16 faster than its fp32 FMAs, which run this run's products: "
              "bf16 halves the store and the offload traffic here, but its roundings make a step slower than fp32's "
              "(1.1-1.2x on Emerald Rapids without AMX: bench/RESULTS.md)");
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && load_average() > threads_)
    log::info("note: the load average (" + format_number(load_average()) + ") exceeds the " + str(threads_) +
              " threads; export OMP_WAIT_POLICY=passive so that waiting threads yield their cores");
}

}  // namespace fpdt::machine
