// Which of OpenBLAS's kernel sets this process runs, and the restart that corrects a wrong one.
// A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernel set once, when it is loaded, from the CPU's
// family and model numbers; a model newer than the library gets its oldest x86-64 set, Prescott
// (SSE3). Debian 12's OpenBLAS 0.3.21 does that on Emerald Rapids (family 6, model 207), where its
// sgemm then runs 4.7× slower than its own AVX-512 set (SkylakeX) on the same core, and `make run`'s
// MFU falls from 0.54 to 0.17. The library reads OPENBLAS_CORETYPE when it loads, so the fix is to set
// that and start the program again, before anything else has run: fpdt's main does it first thing
// (restart_with_matching_blas_core), unless the user set OPENBLAS_CORETYPE themselves.
#pragma once

#include <string>

namespace fpdt::kernels::cpu {

// The widest vector instructions a kernel set uses or a CPU offers, in increasing order.
enum class VectorIsa { older, avx2, avx512 };

// The kernel set the loaded OpenBLAS runs, by the name openblas_get_corename() gives it.
std::string loaded_blas_core();

// Of an OpenBLAS kernel set, by the name openblas_get_corename() gives it ("SkylakeX", "Haswell", ...).
VectorIsa blas_core_isa(const std::string& core);
// Of this CPU, as far as the operating system lets programs use it (AVX-512 here means F, BW, DQ and
// VL: what OpenBLAS's SkylakeX set needs).
VectorIsa cpu_isa();
// Whether this CPU has AMX-TILE and AMX-BF16 and the OS saves the tile state (CPUID leaf 7 EDX bits 24 and
// 22, XCR0 bits 17 and 18, as GCC's __builtin_cpu_supports checks them; read directly, as clang before 16
// has no "amx-tile" there). Whether Linux grants this process the tile state is panel_gemm_amx.h's
// amx_tiles_supported().
bool cpu_has_amx_bf16();

// Whether this CPU can execute the kernels of `core`: its widest vectors (blas_core_isa), and the
// instructions beside them that the newer AVX-512 sets use — AVX512-BF16 (Cooperlake, SapphireRapids) and
// AMX-BF16 (SapphireRapids).
bool cpu_runs_blas_core(const std::string& core);

// Whether the loaded OpenBLAS chooses its kernel set at load (a DYNAMIC_ARCH build, which reads
// OPENBLAS_CORETYPE); a build for one CPU has only the set it was built for.
bool blas_kernels_selectable();

// The kernel set OpenBLAS should load instead of `loaded` on a CPU offering `cpu`, or "" when `loaded`
// already uses the CPU's widest vectors (or the CPU has neither AVX2 nor AVX-512).
std::string matching_blas_core(const std::string& loaded, VectorIsa cpu);

// Whether OPENBLAS_CORETYPE was set by the user (or whoever started the program), not by fpdt's restart:
// a process started by a restarted fpdt inherits its OPENBLAS_CORETYPE, and is the user's when it changed it.
bool blas_core_chosen_by_user();

// The kernel set this process runs, for the training config table: "SkylakeX", or when fpdt chose it,
// "SkylakeX (fpdt's choice: OpenBLAS took Prescott)", or "Haswell (OPENBLAS_CORETYPE)" when the user did.
std::string describe_blas_core();

// The first call in main: when the loaded OpenBLAS is a DYNAMIC_ARCH build running a kernel set older
// than this CPU's vectors and OPENBLAS_CORETYPE is unset, sets it to the matching set and re-executes
// the program with the same arguments. Returns when there is nothing to change, or when the re-exec
// failed (then after saying so on stderr; the run goes on with the slower kernels).
void restart_with_matching_blas_core(char** argv);

}  // namespace fpdt::kernels::cpu
