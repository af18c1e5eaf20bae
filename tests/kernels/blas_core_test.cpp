// OpenBLAS's kernel set against the CPU: the rule that picks the set to restart with (every case), and
// what the process itself runs: in this test binary (no restart: it only ever loads OpenBLAS's own
// choice) the description names the loaded set. The restart itself: tests/cli/commands_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "fpdt/kernels/cpu/blas_core.h"

extern "C" char* openblas_get_corename(void);

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

TEST(BlasCore, TheDescriptionNamesTheLoadedSet) {
  const std::string loaded = openblas_get_corename();
  const std::string described = describe_blas_core();
  EXPECT_EQ(described.rfind(loaded, 0), 0u) << described;
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    EXPECT_EQ(described, loaded);
  }
}

}  // namespace
}  // namespace fpdt::kernels::cpu
