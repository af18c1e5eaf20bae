// `fpdt eval` (see eval_command.h): options → train::EvalSettings, the evaluation, its tables.
#include "eval_command.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/log.h"
#include "fpdt/base/options.h"
#include "fpdt/train/eval.h"

namespace fpdt::cli {

namespace {

// 16384 → "16K", 1048576 → "1M", 1000 → "1000".
std::string tokens_text(int64_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= (1 << 10) && n % (1 << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

void print_loss(const train::EvalResult& result) {
  char line[160];
  std::snprintf(line, sizeof line, "loss by context position (%lld sequences of %lld tokens, nats/token):",
                static_cast<long long>(result.sequences), static_cast<long long>(result.seq_tokens));
  log::info(line);
  for (const train::LossBucket& bucket : result.buckets) {
    const std::string range = bucket.positions.first == bucket.positions.last
                                  ? std::to_string(bucket.positions.first)
                                  : std::to_string(bucket.positions.first) + "-" + std::to_string(bucket.positions.last);
    std::snprintf(line, sizeof line, "  %-14s %10.0f tokens  %.4f", range.c_str(), bucket.tokens, bucket.mean());
    log::info(line);
  }
  std::snprintf(line, sizeof line, "  %-14s %10.0f tokens  %.4f  (%.1f s)", "all", static_cast<double>(result.sequences * result.seq_tokens),
                result.mean_loss, result.loss_seconds);
  log::info(line);
}

// Depths as rows, lengths as columns: "correct/trials" per cell.
void print_passkey(const train::EvalResult& result) {
  std::map<double, std::map<int64_t, const train::PasskeyCell*>> grid;
  std::map<int64_t, bool> lengths;
  for (const train::PasskeyCell& cell : result.passkey) {
    grid[cell.depth][cell.length_tokens] = &cell;
    lengths[cell.length_tokens] = true;
  }
  char line[64];
  std::string header = "  depth \\ length";
  for (const auto& [length, unused] : lengths) {
    std::snprintf(line, sizeof line, " %8s", tokens_text(length).c_str());
    header += line;
  }
  log::info("passkey retrieval (greedy answers right / prompts; " + std::to_string(result.passkey.front().trials) +
            " prompt(s) per cell, teacher-forced):");
  log::info(header);
  for (const auto& [depth, row] : grid) {
    std::snprintf(line, sizeof line, "  %-15.2f", depth);
    std::string text = line;
    for (const auto& [length, cell] : row) {
      std::snprintf(line, sizeof line, " %8s",
                    (std::to_string(cell->correct) + "/" + std::to_string(cell->trials)).c_str());
      text += line;
    }
    log::info(text);
  }
}

}  // namespace

int command_eval(int argc, char** argv, comm::Communicator& world) {
  train::EvalSettings settings;
  OptionSet options("eval",
                    "Evaluate a checkpoint on long held-out sequences, forward only through the FPDT pipeline: the loss "
                    "by context position and a passkey-retrieval grid (JSON in --out; tools/plot_eval.py draws them).");
  train::declare_eval_options(options, settings);
  if (!options.parse(argc, argv)) return 0;
  const train::EvalResult result = train::evaluate(settings, world);
  if (settings.dry_run) {
    log::info("dry run of a forward at S = " + tokens_text(result.seq_tokens) + ": compute peak " +
              format_bytes(static_cast<double>(result.compute_peak_bytes)) + ", offload peak " +
              format_bytes(static_cast<double>(result.offload_peak_bytes)) + " per rank");
    log::info(nlohmann::ordered_json{{"dry_run", true},
                             {"seq", result.seq_tokens},
                             {"compute_peak_bytes", result.compute_peak_bytes},
                             {"offload_peak_bytes", result.offload_peak_bytes},
                             {"peak_rss_bytes", result.peak_rss_bytes}}
                  .dump());
    return 0;
  }
  print_loss(result);
  if (!result.passkey.empty()) print_passkey(result);
  const std::string out = settings.out_dir.empty() ? path_in(settings.checkpoint, "eval") : settings.out_dir;
  log::info("compute peak " + format_bytes(static_cast<double>(result.compute_peak_bytes)) + ", offload peak " +
            format_bytes(static_cast<double>(result.offload_peak_bytes)) + " per rank; written to " + out +
            "/loss_by_position.json" + (result.passkey.empty() ? "" : ", passkey.json") +
            (result.ruler ? ", ruler.json (tools/plot_eval.py ruler draws it)" : ""));
  log::info(nlohmann::json{{"eval", result.checkpoint},
                           {"seq", result.seq_tokens},
                           {"sequences", result.sequences},
                           {"mean_loss", result.mean_loss},
                           {"seconds", result.loss_seconds + result.passkey_seconds},
                           {"compute_peak_bytes", result.compute_peak_bytes},
                           {"offload_peak_bytes", result.offload_peak_bytes},
                           {"peak_rss_bytes", result.peak_rss_bytes}}
                .dump());
  return 0;
}

}  // namespace fpdt::cli
