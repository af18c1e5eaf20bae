// The `fpdt eval` subcommand: a checkpoint's loss by context position over held-out sequences of S
// tokens and its passkey-retrieval grid, forward only through the FPDT pipeline (train/eval.h), on
// --sp ranks; prints both as tables and writes them as JSON for tools/plot_eval.py.
#pragma once

#include "fpdt/comm/communicator.h"

namespace fpdt::cli {

// argv holds the arguments after "eval". Returns the exit status; throws fpdt::Error for bad input.
int command_eval(int argc, char** argv, comm::Communicator& world);

}  // namespace fpdt::cli
