// The `fpdt extend RECIPE` subcommand: a context extension as the recipe's stages, gated and reported
// (train/extend.h); --dry-run checks the recipe whole and lays out each stage's memory.
#pragma once

#include "fpdt/comm/communicator.h"

namespace fpdt::cli {

// argv holds the arguments after "extend". Returns the exit status; throws fpdt::Error for bad input.
int command_extend(int argc, char** argv, comm::Communicator& world);

}  // namespace fpdt::cli
