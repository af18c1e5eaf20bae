// A dry run's result: the memory of one training step laid out (nothing allocated) component by
// component — the model states' buffers, the chunk arena, the store's groups — with the tiers' peaks,
// this rank's chunks and the step's offload traffic; `--schedule` prints the step's schedule first.
#pragma once

#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/train/settings.h"
#include "fpdt/train/trainer.h"

namespace fpdt::train {

// Lays out a step of `model` (built on `states` for a dry run) and returns `result` (the set-up's) with
// the layout added. Prints the schedule and the ZeRO plan when s.print_schedule and `rank` is 0.
TrainResult dry_run_result(pipeline::FpdtModel& model, const pipeline::ModelStates& states, const TrainSettings& s,
                           int rank, TrainResult result);

}  // namespace fpdt::train
