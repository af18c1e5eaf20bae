// Rank-aware logging (see log.h).
#include "fpdt/base/log.h"

#include <cstdio>
#include <mutex>

namespace fpdt::log {

namespace {
int g_rank = 0;
int g_world_size = 1;
std::mutex g_mutex;
}  // namespace

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world_size = world_size;
}

int rank() { return g_rank; }

void info(const std::string& message) {
  if (g_rank != 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stdout, "%s\n", message.c_str());
  std::fflush(stdout);
}

void error(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world_size > 1)
    std::fprintf(stderr, "rank %d: %s\n", g_rank, message.c_str());
  else
    std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace fpdt::log
