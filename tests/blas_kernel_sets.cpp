// Lists, one a line, the OpenBLAS kernel sets the suite's numerics tests also run under ("blas.<set>.…",
// CMakeLists.txt): each of Prescott, Haswell, SkylakeX, Cooperlake, SapphireRapids and the set fpdt runs
// here (e.g. Zen) that this CPU can execute (blas_core.h) and the loaded library has — it takes the set
// under OPENBLAS_CORETYPE, checked in a child started with it (OpenBLAS reads the variable only when it
// loads). `blas_kernel_sets --loaded` prints the set this process runs.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fpdt/kernels/cpu/blas_core.h"

namespace {

// The set a child of this program loads with OPENBLAS_CORETYPE=core ("" when it could not be run).
std::string loaded_under(const std::string& core) {
  std::array<char, 4096> self{};
  if (::readlink("/proc/self/exe", self.data(), self.size() - 1) <= 0) return "";
  const std::string command = "OPENBLAS_CORETYPE=" + core + " '" + self.data() + "' --loaded";
  std::FILE* child = ::popen(command.c_str(), "r");
  if (child == nullptr) return "";
  char line[256] = {};
  const bool read = std::fgets(line, sizeof line, child) != nullptr;
  ::pclose(child);
  std::string name = read ? line : "";
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fpdt::kernels::cpu;
  if (argc == 2 && std::strcmp(argv[1], "--loaded") == 0) {
    std::printf("%s\n", loaded_blas_core().c_str());
    return 0;
  }
  if (!blas_kernels_selectable()) return 0;  // a build for one CPU has one set: nothing to choose
  // What fpdt runs here: the library's own choice, or the set its restart takes instead.
  const std::string own = loaded_blas_core();
  const std::string replaced = matching_blas_core(own, cpu_isa());
  std::vector<std::string> cores = {"Prescott", "Haswell", "SkylakeX", "Cooperlake", "SapphireRapids"};
  if (const std::string fpdts = replaced.empty() ? own : replaced; std::ranges::find(cores, fpdts) == cores.end())
    cores.push_back(fpdts);
  for (const std::string& core : cores)
    if (cpu_runs_blas_core(core) && loaded_under(core) == core) std::printf("%s\n", core.c_str());
  return 0;
}
