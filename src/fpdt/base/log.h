// Logging that knows the process's rank: info goes to rank 0 only, errors name the rank.
// Ranks are set once by the communicator layer; until then every process is rank 0 of 1.
#pragma once

#include <string>

namespace fpdt::log {

void set_rank(int rank, int world_size);
int rank();

// Printed by rank 0 only, to stdout.
void info(const std::string& message);
// Printed by every rank, to stderr, prefixed with "rank R: " when the world has several ranks.
void error(const std::string& message);

}  // namespace fpdt::log
