// The ranks of a job agree on what they run, or the job does not start: every command compares the
// options each rank was launched with before its first other collective, so that ranks started with
// different command lines (a node with another script, environment or version) are refused by name instead
// of hanging in mismatched collectives or computing something else. Any launcher: it needs only the world.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "fpdt/comm/communicator.h"

namespace fpdt::train {

// Collective over `world`: each rank's `settings` (option → value, as its command declared them) hashed and
// the hashes gathered; when they differ, the settings themselves, and fpdt::Error of `module` on every rank
// naming each option that differs with the ranks of each value.
void check_ranks_agree(comm::Communicator& world, const std::string& module, const nlohmann::ordered_json& settings);

}  // namespace fpdt::train
