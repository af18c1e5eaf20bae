// The `fpdt plan` subcommand: predicts memory per tier and component, FLOPs, traffic, prefetch, step
// time and MFU of one training step per rank, and with --max-seq the longest sequence that fits, as a
// table or (--json) one JSON object. The model behind it is the fpdt::plan layer (docs/memory.md).
#pragma once

namespace fpdt::cli {

// argv holds the arguments after "plan". Returns the exit status; throws fpdt::Error for bad input.
int command_plan(int argc, char** argv);

}  // namespace fpdt::cli
