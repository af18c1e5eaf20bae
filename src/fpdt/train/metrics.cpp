// Metrics: FLOP counting, the FMA peak benchmark, the JSON-lines log and the progress line.
#include "fpdt/train/metrics.h"

#include <immintrin.h>
#include <omp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/timer.h"

namespace fpdt::train {

double model_flops(const model::ModelConfig& config, int64_t sequences, int64_t seq_tokens) {
  double params = static_cast<double>(config.non_embedding_parameter_count());
  if (config.tie_embeddings) params += static_cast<double>(config.vocab_size) * config.hidden;
  const double tokens = static_cast<double>(sequences) * static_cast<double>(seq_tokens);
  const double S = static_cast<double>(seq_tokens);
  const double attention = 6.0 * S * S * config.heads * config.head_dim * config.layers;
  return 6.0 * params * tokens + attention * static_cast<double>(sequences);
}

namespace {
// 10 independent FMA chains per thread hide the FMA latency (4–5 cycles × 2 ports).
double fma_flops_on_this_thread(int64_t iterations) {
  __m256 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(1.0f + 0.01f * i);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 sum = acc[0];
  for (int i = 1; i < 10; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  // Use the result so the loop is not optimised away.
  volatile float sink = lanes[0];
  (void)sink;
  return static_cast<double>(iterations) * 10 * 8 * 2;
}
}  // namespace

double measure_peak_gflops(int threads) {
  const int64_t iterations = 20'000'000;  // ~0.1 s at 3 GHz
  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) {  // best of 3: the machine is shared and noisy
    double flops = 0.0;
    Timer timer;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    flops += fma_flops_on_this_thread(iterations);
    const double gflops = flops / timer.seconds() * 1e-9;
    if (gflops > best) best = gflops;
  }
  return best;
}

namespace {

// The lines of `path` that log steps 1 .. keep_through_step, whole lines only; nullopt when they are
// all the file holds (nothing to drop).
std::optional<std::string> kept_lines(const std::string& path, int64_t keep_through_step) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  std::string kept, line;
  bool dropped = false;
  while (std::getline(file, line)) {
    long long step = 0;
    const bool whole = !file.eof();  // ends with '\n'
    if (whole && std::sscanf(line.c_str(), "{\"step\":%lld,", &step) == 1 && step >= 1 && step <= keep_through_step)
      kept.append(line).append("\n");
    else
      dropped = true;
  }
  if (!dropped) return std::nullopt;
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, int64_t keep_through_step) {
  if (keep_through_step > 0) {
    if (const std::optional<std::string> kept = kept_lines(path, keep_through_step))
      write_file_atomic(path, [&](int fd) { write_fully(fd, kept->data(), kept->size(), path, "train"); }, "train");
  }
  file_ = std::fopen(path.c_str(), keep_through_step > 0 ? "a" : "w");
  if (file_ == nullptr)
    throw Error("train", "cannot open the metrics log " + path + ": " + std::strerror(errno),
                "check that the output directory exists and is writable");
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = other.file_;
    other.file_ = nullptr;
  }
  return *this;
}

void MetricsLog::write(const StepMetrics& m) {
  if (file_ == nullptr) return;
  nlohmann::ordered_json line = {{"step", m.step},
                                 {"loss", m.loss},
                                 {"lr", m.lr},
                                 {"grad_norm", m.grad_norm},
                                 {"step_seconds", m.step_seconds},
                                 {"tokens_per_second", m.tokens_per_second},
                                 {"gflops", m.gflops},
                                 {"mfu", m.mfu},
                                 {"compute_peak_bytes", m.compute_peak_bytes},
                                 {"offload_peak_bytes", m.offload_peak_bytes},
                                 {"alltoall_bytes", m.alltoall_bytes},
                                 {"offload_read_bytes", m.offload_read_bytes},
                                 {"offload_written_bytes", m.offload_written_bytes}};
  if (m.val_loss >= 0.0) line["val_loss"] = m.val_loss;
  if (m.skipped) line["skipped"] = true;
  std::fprintf(file_, "%s\n", line.dump().c_str());
  std::fflush(file_);
}

std::string progress_line(const StepMetrics& m, int64_t total_steps, double eta_seconds) {
  constexpr int kBarWidth = 20;
  const int filled = total_steps > 0 ? static_cast<int>(kBarWidth * m.step / total_steps) : 0;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kBarWidth) bar += '>' + std::string(static_cast<size_t>(kBarWidth - filled - 1), ' ');
  char val[32] = "";
  if (m.val_loss >= 0.0) std::snprintf(val, sizeof val, " val %.3f", m.val_loss);
  const int eta = static_cast<int>(eta_seconds + 0.5);
  std::string memory = "mem " + format_bytes(static_cast<double>(m.compute_peak_bytes));
  if (m.offload_peak_bytes > 0) memory += " + " + format_bytes(static_cast<double>(m.offload_peak_bytes)) + " offload";
  char text[320];
  std::snprintf(text, sizeof text,
                "step %5lld/%lld [%s] loss %.3f%s | lr %.1e | gnorm %.2f | %.1fk tok/s | %.1f GFLOP/s | MFU %.0f%% | "
                "%s | ETA %dm%02ds",
                static_cast<long long>(m.step), static_cast<long long>(total_steps), bar.c_str(), m.loss, val, m.lr,
                m.grad_norm, m.tokens_per_second / 1000.0, m.gflops, 100.0 * m.mfu, memory.c_str(), eta / 60, eta % 60);
  return m.skipped ? std::string(text) + " | SKIPPED: not finite, not applied" : std::string(text);
}

}  // namespace fpdt::train
