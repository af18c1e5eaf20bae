// The run's starting table (see run_table.h).
#include "fpdt/train/run_table.h"

#include <cstdio>
#include <string>
#include <vector>

#include "fpdt/base/log.h"
#include "fpdt/pipeline/chunk_plan.h"
#include "fpdt/pipeline/ulysses.h"
#include "fpdt/train/trainer.h"

namespace fpdt::train {

namespace {

std::string str(int64_t value) { return std::to_string(value); }

}  // namespace

void print_run_table(const model::ModelConfig& config, const TrainSettings& s, const machine::Hardware& hardware,
                     const comm::Communicator& world) {
  auto row = [](const std::string& key, const std::string& value) {
    char line[160];
    std::snprintf(line, sizeof line, "| %-22s | %-48s |", key.c_str(), value.c_str());
    log::info(line);
  };
  const std::string rule = "+" + std::string(24, '-') + "+" + std::string(50, '-') + "+";
  const std::string option_rule = "+" + std::string(37, '-') + "+" + std::string(37, '-') + "+";
  log::info(rule);
  row("model", config.name + " (" + model::model_type_name(config.type) + ")");
  row("layers / hidden / ffn", str(config.layers) + " / " + str(config.hidden) + " / " + str(config.ffn_hidden));
  row("heads / kv heads / dim", str(config.heads) + " / " + str(config.kv_heads) + " / " + str(config.head_dim));
  row("vocabulary", str(config.vocab_size));
  row("parameters", str(config.parameter_count()));
  row("positions", model::describe_rope(config));
  row("attention window", model::describe_window(config));
  if (!config.ignored_fields.empty()) row("ignored config fields", model::describe_ignored(config));
  const pipeline::ChunkPlan plan = pipeline::plan_chunks(s.run, s.run.seq_tokens, s.run.sp, 0);
  const int64_t padding = plan.padded_tokens - plan.seq_tokens;
  row("chunks", str(plan.chunks) + " x " + str(plan.chunk_tokens) + " tokens (" + str(plan.local_chunk_tokens) +
                    " per rank), padding " + str(padding) + (padding > 0 ? " (targets ignored)" : ""));
  if (s.run.sp > 1) {
    const pipeline::HeadSharding sharding = pipeline::make_head_sharding(config.heads, config.kv_heads, s.run.sp, 0);
    char imbalance[96];
    std::snprintf(imbalance, sizeof imbalance, "%d or %d q heads a rank, attention imbalance %.3f",
                  config.heads / s.run.sp, sharding.max_q_heads(), sharding.imbalance());
    row("sp heads", sharding.imbalance() == 1.0 ? str(sharding.local_q_heads) + " q heads a rank, exact balance"
                                                               : imbalance);
  }
  for (const auto& [key, value] : hardware.table_rows(world)) row(key, value);
  log::info(option_rule);
  std::vector<std::string> cells;
  for (const auto& [name, value] : settings_rows(s)) {
    char cell[128];
    std::snprintf(cell, sizeof cell, "%-21s %-13s", ("--" + name).c_str(), value.c_str());
    if (name != "model") cells.push_back(cell);
  }
  for (size_t i = 0; i < cells.size(); i += 2)
    log::info("| " + cells[i] + " | " + (i + 1 < cells.size() ? cells[i + 1] : std::string(35, ' ')) + " |");
  log::info(option_rule);
}

}  // namespace fpdt::train
