// OpenBLAS's kernel set against the CPU: the rule that picks the set to restart with (every case), the
// sets a CPU can execute, and what the process itself runs: this test program, like every one of the
// suite, starts with fpdt's restart rule (tests/test_main.cpp), so it runs the set `fpdt` runs here, and
// the description names the loaded set. The restart of `fpdt` itself: tests/cli/commands_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "fpdt/kernels/cpu/blas_core.h"

namespace fpdt::kernels::cpu {
namespace {

TEST(BlasCore, KernelSetsAreClassedByTheirWidestVectors) {
  for (const char* core : {"SkylakeX", "Cooperlake", "SapphireRapids"}) EXPECT_EQ(blas_core_isa(core), VectorIsa::avx512) << core;
  for (const char* core : {"Haswell", "Zen", "Excavator"}) EXPECT_EQ(blas_core_isa(core), VectorIsa::avx2) << core;
  for (const char* core : {"Prescott", "Core2", "Nehalem", "Sandybridge", "Penryn", ""})
    EXPECT_EQ(blas_core_isa(core), VectorIsa::older) << core;
}

TEST(BlasCore, AnOlderSetThanTheCpuIsReplacedByTheCpusOwn) {
  // Emerald Rapids under OpenBLAS 0.3.21: Prescott on an AVX-512 CPU.
  EXPECT_EQ(matching_blas_core("Prescott", VectorIsa::avx512), "SkylakeX");
  EXPECT_EQ(matching_blas_core("Haswell", VectorIsa::avx512), "SkylakeX");
  EXPECT_EQ(matching_blas_core("Sandybridge", VectorIsa::avx2), "Haswell");
  // Already the CPU's widest vectors, or wider than a CPU without AVX2 could ask for: left alone.
  for (const char* core : {"SkylakeX", "Cooperlake", "SapphireRapids"}) EXPECT_EQ(matching_blas_core(core, VectorIsa::avx512), "") << core;
  EXPECT_EQ(matching_blas_core("Zen", VectorIsa::avx2), "");
  EXPECT_EQ(matching_blas_core("SkylakeX", VectorIsa::avx2), "");
  EXPECT_EQ(matching_blas_core("Prescott", VectorIsa::older), "");
}

TEST(BlasCore, ACpuRunsTheSetsUpToItsVectors) {
  EXPECT_TRUE(cpu_runs_blas_core("Prescott"));  // SSE3: every x86-64 CPU this builds for
  EXPECT_EQ(cpu_runs_blas_core("Haswell"), cpu_isa() >= VectorIsa::avx2);
  EXPECT_EQ(cpu_runs_blas_core("SkylakeX"), cpu_isa() >= VectorIsa::avx512);
  // Each newer AVX-512 set needs what the one before needs, and more.
  EXPECT_TRUE(!cpu_runs_blas_core("Cooperlake") || cpu_runs_blas_core("SkylakeX"));
  EXPECT_TRUE(!cpu_runs_blas_core("SapphireRapids") || cpu_runs_blas_core("Cooperlake"));
}

// The set fpdt would run here: unless the user chose one (OPENBLAS_CORETYPE, set before the program
// started: OpenBLAS takes it as fpdt does), one that uses the CPU's widest vectors — the restart's when
// OpenBLAS took an older one.
TEST(BlasCore, ThisProgramRunsTheSetFpdtRuns) {
  if (!blas_core_chosen_by_user() && blas_kernels_selectable()) {
    EXPECT_EQ(matching_blas_core(loaded_blas_core(), cpu_isa()), "") << loaded_blas_core() << ": fpdt would restart";
  }
}

TEST(BlasCore, TheDescriptionNamesTheLoadedSet) {
  const std::string loaded = loaded_blas_core();
  const std::string described = describe_blas_core();
  EXPECT_EQ(described.rfind(loaded, 0), 0u) << described;
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    EXPECT_EQ(described, loaded);
  }
}

}  // namespace
}  // namespace fpdt::kernels::cpu
