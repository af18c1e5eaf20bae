// The table a run prints as it starts (rank 0; llm.c's habit): the model's facts, its chunks, the
// hardware's rows (machine/hardware.h), then every option's value from the option declarations, two to a
// row — the effective configuration at a glance.
#pragma once

#include "fpdt/comm/communicator.h"
#include "fpdt/machine/hardware.h"
#include "fpdt/model/config.h"
#include "fpdt/train/settings.h"

namespace fpdt::train {

// Logs the table (log::info: rank 0 prints it).
void print_run_table(const model::ModelConfig& config, const TrainSettings& s, const machine::Hardware& hardware,
                     const comm::Communicator& world);

}  // namespace fpdt::train
