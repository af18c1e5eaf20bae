// OpenBLAS's kernel set, checked against the CPU (see blas_core.h).
#include "fpdt/kernels/cpu/blas_core.h"

#include <cpuid.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
char* openblas_get_corename(void);
char* openblas_get_config(void);
}

namespace fpdt::kernels::cpu {

namespace {

// Set by the restart, for describe_blas_core: the kernel set OpenBLAS first took, and the one fpdt set in
// OPENBLAS_CORETYPE. Both are inherited by the processes fpdt (or a test program) starts, which may set
// OPENBLAS_CORETYPE themselves: the choice is fpdt's only while OPENBLAS_CORETYPE still names its set.
constexpr const char* kReplacedCoreVariable = "FPDT_BLAS_CORE_REPLACED";
constexpr const char* kChosenCoreVariable = "FPDT_BLAS_CORE_CHOSEN";

// The kernel set OpenBLAS first took, when the OPENBLAS_CORETYPE in force is the restart's; else nullptr.
const char* core_replaced_by_restart() {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* chosen = std::getenv(kChosenCoreVariable);
  if (coretype == nullptr || chosen == nullptr || std::strcmp(coretype, chosen) != 0) return nullptr;
  return std::getenv(kReplacedCoreVariable);
}

}  // namespace

std::string loaded_blas_core() { return openblas_get_corename(); }

bool blas_kernels_selectable() { return std::strstr(openblas_get_config(), "DYNAMIC_ARCH") != nullptr; }

VectorIsa blas_core_isa(const std::string& core) {
  for (const char* name : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == name) return VectorIsa::avx512;
  for (const char* name : {"Haswell", "Zen", "Excavator"})
    if (core == name) return VectorIsa::avx2;
  return VectorIsa::older;
}

VectorIsa cpu_isa() {
  // __builtin_cpu_supports also checks that the OS saves the registers (XGETBV), not only CPUID.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return VectorIsa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VectorIsa::avx2;
  return VectorIsa::older;
}

bool cpu_has_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  constexpr unsigned kOsxsave = 1u << 27;  // leaf 1 ECX: the OS enabled XGETBV
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & kOsxsave) == 0) return false;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);  // XCR0: XTILECFG, XTILEDATA saved by the OS
  if ((xcr0_low & kTileState) != kTileState) return false;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
  return (edx & kAmxBf16) != 0 && (edx & kAmxTile) != 0;
}

bool cpu_runs_blas_core(const std::string& core) {
  if (blas_core_isa(core) > cpu_isa()) return false;
  if ((core == "Cooperlake" || core == "SapphireRapids") && !__builtin_cpu_supports("avx512bf16")) return false;
  return core != "SapphireRapids" || cpu_has_amx_bf16();
}

std::string matching_blas_core(const std::string& loaded, VectorIsa cpu) {
  if (blas_core_isa(loaded) >= cpu) return "";
  switch (cpu) {
    case VectorIsa::avx512: return "SkylakeX";
    case VectorIsa::avx2: return "Haswell";
    case VectorIsa::older: return "";
  }
  return "";
}

bool blas_core_chosen_by_user() {
  return std::getenv("OPENBLAS_CORETYPE") != nullptr && core_replaced_by_restart() == nullptr;
}

std::string describe_blas_core() {
  const std::string core = loaded_blas_core();
  if (const char* replaced = core_replaced_by_restart())
    return core + " (fpdt's choice: OpenBLAS took " + replaced + ")";
  if (blas_core_chosen_by_user()) return core + " (OPENBLAS_CORETYPE)";
  return core;
}

void restart_with_matching_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !blas_kernels_selectable()) return;
  const std::string loaded = loaded_blas_core();
  const std::string better = matching_blas_core(loaded, cpu_isa());
  if (better.empty()) return;
  setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
  setenv(kReplacedCoreVariable, loaded.c_str(), 1);
  setenv(kChosenCoreVariable, better.c_str(), 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "[blas] OpenBLAS runs its %s kernels on a CPU with %s; restarting with OPENBLAS_CORETYPE=%s "
               "failed (%s), so GEMMs run several times slower; hint: set OPENBLAS_CORETYPE=%s yourself\n",
               loaded.c_str(), better == "SkylakeX" ? "AVX-512" : "AVX2", better.c_str(), std::strerror(errno),
               better.c_str());
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kReplacedCoreVariable);
  unsetenv(kChosenCoreVariable);
}

}  // namespace fpdt::kernels::cpu
