// The `fpdt sample` subcommand: a checkpoint continues a prompt through the FPDT pipeline and its KV cache
// (train/sample.h), on --sp ranks; prints the text, the time and the memory it took.
#pragma once

#include "fpdt/comm/communicator.h"

namespace fpdt::cli {

// argv holds the arguments after "sample". Returns the exit status; throws fpdt::Error for bad input.
int command_sample(int argc, char** argv, comm::Communicator& world);

}  // namespace fpdt::cli
