// `fpdt sample` (see sample_command.h): options → train::SampleCommand, the generation, its report.
#include "sample_command.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"
#include "fpdt/base/options.h"
#include "fpdt/train/sample.h"

namespace fpdt::cli {

int command_sample(int argc, char** argv, comm::Communicator& world) {
  train::SampleCommand settings;
  OptionSet options("sample",
                    "Continue a prompt with a checkpoint: greedy or sampled (temperature, top-k, top-p), through the "
                    "FPDT pipeline's chunks and a KV cache in its offload tier (any prompt length the tier holds).");
  train::declare_sample_options(options, settings);
  if (!options.parse(argc, argv)) return 0;
  const train::SampleResult result = train::sample(settings, world);
  nlohmann::ordered_json report{{"prompt_tokens", result.prompt.size()},
                                {"compute_peak_bytes", result.compute_peak_bytes},
                                {"offload_peak_bytes", result.offload_peak_bytes},
                                {"peak_rss_bytes", result.peak_rss_bytes}};
  const std::string memory = "compute peak " + format_bytes(static_cast<double>(result.compute_peak_bytes)) +
                             ", offload peak " + format_bytes(static_cast<double>(result.offload_peak_bytes)) +
                             " per rank";
  if (settings.dry_run) {
    log::info("dry run of a generation after a prompt of " + std::to_string(result.prompt.size()) + " tokens: " + memory);
    report["dry_run"] = true;
    log::info(report.dump());
    return 0;
  }
  const train::Generation& generation = result.generation;
  // The text first (what a pipe reads), then how it was made.
  if (world.rank() == 0) {
    std::printf("%s\n", result.text.c_str());
    if (settings.print_ids) {
      std::string ids = "ids:";
      for (const int32_t id : result.prompt) ids += " " + std::to_string(id);
      for (const int32_t id : generation.tokens) ids += " " + std::to_string(id);
      std::printf("%s\n", ids.c_str());
    }
    std::fflush(stdout);
  }
  const size_t generated = generation.tokens.size();
  char line[200];
  std::snprintf(line, sizeof line, "prefill %.2f s (%.0f tokens/s), %zu tokens decoded in %.2f s (%.2f tokens/s)%s",
                generation.prefill_seconds,
                generation.prefill_seconds > 0 ? static_cast<double>(result.prompt.size()) / generation.prefill_seconds : 0.0,
                generated, generation.decode_seconds,
                generation.decode_seconds > 0 ? static_cast<double>(generated) / generation.decode_seconds : 0.0,
                generation.stopped ? ", ended on an end-of-turn id" : "");
  log::info("sample " + result.description);
  log::info(std::string(line) + "; " + memory);
  report["new_tokens"] = generated;
  report["stopped"] = generation.stopped;
  report["prefill_seconds"] = generation.prefill_seconds;
  report["decode_seconds"] = generation.decode_seconds;
  log::info(report.dump());
  return 0;
}

}  // namespace fpdt::cli
