// A run's hardware: its OpenMP team, the fewest cores a rank may run on (process.h), and the peaks its
// MFU divides by — given (--peak-gflops), stated for its GPU, or measured here (rates.h) — with the rows
// they take in the run's table and the notes logged after it. What the run divides by them is train's.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fpdt/comm/communicator.h"
#include "fpdt/machine/process.h"
#include "fpdt/machine/rates.h"
#include "fpdt/pipeline/run_spec.h"

namespace fpdt::machine {

// What a run asks of the machine.
struct HardwareRequest {
  pipeline::RunSpec run;           // its threads (the OpenMP team; 0: every core), backend and precision
  double given_peak_gflops = 0.0;  // --peak-gflops (0: none given)
  bool dry_run = false;            // nothing measured
};

// A measured FMA peak is measured once more after each step at least this long (Hardware::recheck_after_step).
inline constexpr double kPeakRecheckMinStepSeconds = 1.0;

class Hardware {
 public:
  Hardware() = default;  // none yet: no threads, no peaks
  // Sets the OpenMP team, finds the peaks (--peak-gflops; --backend cuda: the GPU's stated ones, an
  // fpdt::Error where it is not listed; else measured on the team, the bf16 units' too for a bf16 run; a
  // dry run: none), and the fewest cores of a rank of `world` (collective, except in a dry run).
  Hardware(const HardwareRequest& request, comm::Communicator& world);

  int threads() const { return threads_; }
  const MachineRates& fp32() const { return fp32_; }  // the FMA peak raised by recheck_after_step
  // What MFU divides by: the peak of the run's precision (or the one given with --peak-gflops), a bf16
  // run's the fastest unit a bf16 product can run on here (Bf16Rates: AMX, AVX512-BF16 or the FMAs); a
  // rank's.
  double mfu_peak_gflops() const;
  // A measured FMA peak once more after a step of kPeakRecheckMinStepSeconds or more, kept when higher.
  void recheck_after_step(double step_seconds);

  // The table's rows of the hardware (key, value): ranks and threads, cores, peaks, the cpu backend's
  // bf16 arithmetic, the BLAS kernels. `world` is the run's.
  std::vector<std::pair<std::string, std::string>> table_rows(const comm::Communicator& world) const;
  // The notes on the hardware logged after the table: bf16 slower than fp32 here; the load above the team.
  void log_notes() const;

 private:
  HardwareRequest request_;
  int threads_ = 0;
  RankCores cores_;
  MachineRates fp32_;  // --peak-gflops: given
  Bf16Rates bf16_;     // a bf16 run's, measured at set-up (its FMA peak fp32_'s)
  bool fma_peak_measured_ = false;  // fp32_.fma_peak_gflops was measured here (not given, not a GPU's)
};

}  // namespace fpdt::machine
