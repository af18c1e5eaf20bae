// Metrics: FLOP counting, the JSON-lines log and the progress line (the machine's rates they are divided
// by: machine/rates.h).
#include "fpdt/train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"

namespace fpdt::train {

namespace {

// Visible (query, key) pairs of a causal run of S tokens whose queries see at most `window` keys (0: all).
double causal_pairs(double S, double window) {
  return window <= 0 || window >= S ? S * S / 2 : S * window - window * window / 2;
}

}  // namespace

double model_flops(const model::ModelConfig& config, int64_t sequences, int64_t seq_tokens, const int32_t* doc_ids) {
  double params = static_cast<double>(config.non_embedding_parameter_count());
  if (config.tie_embeddings) params += static_cast<double>(config.vocab_size) * config.hidden;
  const double tokens = static_cast<double>(sequences) * static_cast<double>(seq_tokens);
  // Visible pairs of one causal run of `length` tokens, summed over the layers (their windows differ).
  auto layers_pairs = [&](int64_t length) {
    double sum = 0.0;
    for (int layer = 0; layer < config.layers; ++layer)
      sum += causal_pairs(static_cast<double>(length), static_cast<double>(config.window(layer)));
    return sum;
  };
  double pairs = 0.0;  // over rows and layers
  if (doc_ids == nullptr) pairs = static_cast<double>(sequences) * layers_pairs(seq_tokens);
  for (int64_t row = 0; doc_ids != nullptr && row < sequences; ++row) {
    const int32_t* docs = doc_ids + row * seq_tokens;  // (seq_tokens), scanned once
    for (int64_t begin = 0, end = 0; begin < seq_tokens; begin = end) {
      while (end < seq_tokens && docs[end] == docs[begin]) ++end;
      pairs += layers_pairs(end - begin);
    }
  }
  return 6.0 * params * tokens + 12.0 * config.heads * config.head_dim * pairs;
}

namespace {

// The lines of `path` that log steps 1 .. keep_through_step, whole lines only; nullopt when they are
// all the file holds (nothing to drop).
std::optional<std::string> kept_lines(const std::string& path, int64_t keep_through_step) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  std::istringstream file(read_text_file(path, "train", "the run's metrics log must be a file"));
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
                                 {"cpu_seconds", m.cpu_seconds},
                                 {"tokens_per_second", m.tokens_per_second},
                                 {"gflops", m.gflops},
                                 {"mfu", m.mfu},
                                 {"fp32_mfu", m.fp32_mfu},
                                 {"peak_gflops", m.peak_gflops},
                                 {"sgemm_ratio", m.sgemm_ratio},
                                 {"load_average", m.load_average},
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

std::string format_eta(double seconds) {
  if (!(seconds >= 0.0)) return "?";
  if (seconds > kLongestEtaSeconds) return "over 30,000 years";
  const long long whole = std::llround(seconds);
  char text[48];
  if (whole < 100 * 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", whole / 60, whole % 60);
  else
    std::snprintf(text, sizeof text, "%lldh%02lldm", whole / 3600, whole / 60 % 60);
  return text;
}

std::string progress_line(const StepMetrics& m, int64_t total_steps, double eta_seconds) {
  constexpr int kBarWidth = 20;
  const int filled = total_steps > 0 ? static_cast<int>(kBarWidth * m.step / total_steps) : 0;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kBarWidth) bar += '>' + std::string(static_cast<size_t>(kBarWidth - filled - 1), ' ');
  char val[32] = "";
  if (m.val_loss >= 0.0) std::snprintf(val, sizeof val, " val %.3f", m.val_loss);
  std::string memory = "mem " + format_bytes(static_cast<double>(m.compute_peak_bytes));
  if (m.offload_peak_bytes > 0) memory += " + " + format_bytes(static_cast<double>(m.offload_peak_bytes)) + " offload";
  char sgemm[48] = "";
  if (m.fp32_mfu > 0.0)
    std::snprintf(sgemm, sizeof sgemm, " bf16 (fp32 peak %.0f%%)", 100.0 * m.fp32_mfu);
  else if (m.sgemm_ratio > 0.0)
    std::snprintf(sgemm, sizeof sgemm, " (sgemm %.0f%%)", 100.0 * m.sgemm_ratio);
  char load[32] = "";
  if (m.load_average >= 0.0) std::snprintf(load, sizeof load, " | load %.1f", m.load_average);
  char text[384];
  std::snprintf(text, sizeof text,
                "step %5lld/%lld [%s] loss %.3f%s | lr %.1e | gnorm %.2f | %.1fk tok/s | %.1f GFLOP/s | MFU %.0f%%%s%s | "
                "%s | ETA %s",
                static_cast<long long>(m.step), static_cast<long long>(total_steps), bar.c_str(), m.loss, val, m.lr,
                m.grad_norm, m.tokens_per_second / 1000.0, m.gflops, 100.0 * m.mfu, sgemm, load, memory.c_str(),
                format_eta(eta_seconds).c_str());
  return m.skipped ? std::string(text) + " | SKIPPED: not finite, not applied" : std::string(text);
}

}  // namespace fpdt::train
