# fpdt's libraries — OpenBLAS (target fpdt_openblas), Oniguruma (fpdt_oniguruma), OpenMP
# (OpenMP::OpenMP_CXX), nlohmann_json and, for the tests, GoogleTest (fpdt_find_gtest) — from the system,
# or from FPDT_DEPS_PREFIX: a folder of Debian packages unpacked with `dpkg -x`
# (scripts/prepare_gpu_carry.sh fetches them, scripts/gpu_check.sh unpacks them) on a machine that has
# only a compiler, CMake and the CUDA toolkit. The system's copy wins
# where it has one; the prefix fills the gaps.
set(FPDT_DEPS_PREFIX "" CACHE PATH
    "A root into which Debian packages were unpacked (dpkg -x): libraries missing on the system are taken from it")
set(FPDT_GTEST_SOURCE_DIR "" CACHE PATH
    "GoogleTest's source, built with the tests instead of a system GTest (default: <prefix>/usr/src/googletest)")
set(fpdt_multiarch x86_64-linux-gnu)
if(FPDT_DEPS_PREFIX)
  if(NOT IS_DIRECTORY "${FPDT_DEPS_PREFIX}/usr")
    message(FATAL_ERROR "FPDT_DEPS_PREFIX=${FPDT_DEPS_PREFIX} has no usr/ folder; hint: unpack the carried .deb files "
                        "into it first (dpkg -x FILE.deb ${FPDT_DEPS_PREFIX}), as scripts/gpu_check.sh does")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${FPDT_DEPS_PREFIX}/usr")  # after the system's: nlohmann_json's config
  if(NOT FPDT_GTEST_SOURCE_DIR AND IS_DIRECTORY "${FPDT_DEPS_PREFIX}/usr/src/googletest")
    set(FPDT_GTEST_SOURCE_DIR "${FPDT_DEPS_PREFIX}/usr/src/googletest")
  endif()
endif()

# fpdt_library(TARGET NAME PC LIBRARY HEADER SUBDIR HINT [OPTIONAL]): the INTERFACE target TARGET of a C
# library, from pkg-config's PC.pc where the system has it; else LIBRARY and HEADER by path, in the
# system's /usr and the prefix's usr/, under lib/<multiarch>[/SUBDIR], lib and include/<multiarch>/SUBDIR,
# include/NAME, include ("" SUBDIR: none). HINT ends the error when neither finds it; with OPTIONAL there
# is no error: TARGET stays empty, TARGET_FOUND (set either way) says which, and HINT is printed instead.
find_package(PkgConfig QUIET)
function(fpdt_library target name pc library header subdir hint)
  add_library(${target} INTERFACE)
  set(${target}_FOUND TRUE PARENT_SCOPE)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(${target}_pc QUIET IMPORTED_TARGET ${pc})
  endif()
  if(TARGET PkgConfig::${target}_pc)
    target_link_libraries(${target} INTERFACE PkgConfig::${target}_pc)
    message(STATUS "${name}: ${${target}_pc_LINK_LIBRARIES} (pkg-config)")
    return()
  endif()
  set(roots /usr)
  if(FPDT_DEPS_PREFIX)
    list(APPEND roots "${FPDT_DEPS_PREFIX}/usr")
  endif()
  set(library_dirs "")
  set(include_dirs "")
  foreach(root ${roots})
    if(subdir)
      list(APPEND library_dirs ${root}/lib/${fpdt_multiarch}/${subdir})
      list(APPEND include_dirs ${root}/include/${fpdt_multiarch}/${subdir})
    endif()
    list(APPEND library_dirs ${root}/lib/${fpdt_multiarch} ${root}/lib)
    list(APPEND include_dirs ${root}/include/${pc} ${root}/include)
  endforeach()
  string(TOUPPER "FPDT_${pc}" cache)
  find_library(${cache}_LIBRARY NAMES ${library} PATHS ${library_dirs} NO_DEFAULT_PATH)
  find_path(${cache}_INCLUDE_DIR ${header} PATHS ${include_dirs} NO_DEFAULT_PATH)
  if((NOT ${cache}_LIBRARY OR NOT ${cache}_INCLUDE_DIR) AND "OPTIONAL" IN_LIST ARGN)
    set(${target}_FOUND FALSE PARENT_SCOPE)
    message(STATUS "${name}: not found (optional; searched ${library_dirs}); hint: ${hint}")
    return()
  endif()
  if(NOT ${cache}_LIBRARY OR NOT ${cache}_INCLUDE_DIR)
    message(FATAL_ERROR "${name} not found (no pkg-config ${pc}; library: ${${cache}_LIBRARY}, ${header}: "
                        "${${cache}_INCLUDE_DIR}; searched ${library_dirs}); hint: ${hint}")
  endif()
  target_link_libraries(${target} INTERFACE ${${cache}_LIBRARY})
  target_include_directories(${target} SYSTEM INTERFACE ${${cache}_INCLUDE_DIR})
  message(STATUS "${name}: ${${cache}_LIBRARY} (by path)")
endfunction()

# OpenBLAS: Debian's openblas-pthread folders in the prefix (their .pc names /usr, not the prefix, and
# `dpkg -x` runs no update-alternatives, so only these folders exist there).
fpdt_library(fpdt_openblas OpenBLAS openblas openblas cblas.h openblas-pthread
             "apt-get install libopenblas-dev, or pass -DFPDT_DEPS_PREFIX=<folder with libopenblas-pthread-dev unpacked>")

# oneDNN (Debian's libdnnl-dev), optional: the cpu backend's bf16 GEMMs (AMX or AVX512-BF16 kernels, chosen
# by the CPU's instruction sets) and the fp32 shapes where its f32 matmul beats OpenBLAS (cpu/gemm.cpp).
# Without it (the GPU machine's carried build) bf16 GEMMs are OpenBLAS sgemm over bf16-rounded copies.
option(FPDT_ONEDNN "Use oneDNN for the cpu backend's GEMMs when it is found (OFF: OpenBLAS alone)" ON)
if(FPDT_ONEDNN)
  fpdt_library(fpdt_onednn oneDNN dnnl dnnl oneapi/dnnl/dnnl.hpp ""
               "apt-get install libdnnl-dev for the bf16 GEMM kernels; without it bf16 GEMMs run as fp32 sgemm" OPTIONAL)
else()
  set(fpdt_onednn_FOUND FALSE)
  message(STATUS "oneDNN: not used (FPDT_ONEDNN=OFF)")
endif()

# Oniguruma, the regex library of Hugging Face tokenizers, for the pre-tokenizer patterns
# (train/text/oniguruma.h). libonig also exports regcomp, regexec and regfree (its "binary compatible"
# POSIX API, another regex_t): first in the loader's lookup order, they would replace glibc's for every
# caller in the process — GoogleTest's death-test matchers stopped matching anything. glibc's libc.so.6
# linked before it comes first (tests/train/tokenizer_test.cpp checks that regcomp is glibc's); the
# object itself, as -lc names a linker script, which ld reads last.
add_library(fpdt_libc_first INTERFACE)
find_file(FPDT_LIBC_SHARED_OBJECT libc.so.6 PATHS /lib/${fpdt_multiarch} /usr/lib/${fpdt_multiarch} NO_DEFAULT_PATH)
if(FPDT_LIBC_SHARED_OBJECT)
  target_link_libraries(fpdt_libc_first INTERFACE ${FPDT_LIBC_SHARED_OBJECT})
endif()
fpdt_library(fpdt_onig Oniguruma oniguruma onig oniguruma.h ""
             "apt-get install libonig-dev, or pass -DFPDT_DEPS_PREFIX=<folder with libonig5 and libonig-dev unpacked>")
add_library(fpdt_oniguruma INTERFACE)
target_link_libraries(fpdt_oniguruma INTERFACE fpdt_libc_first fpdt_onig)

# OpenMP: the compiler's own; else GCC's runtime from the prefix (libgomp1 and libgcc-*-dev). Only omp.h is
# taken from that GCC's include folder (copied into the build tree: the folder's other headers belong to
# that GCC), and libgomp is linked by path, so the compiler's -fopenmp needs no spec file of its own.
find_package(OpenMP COMPONENTS CXX)
if(NOT OpenMP_CXX_FOUND)
  set(omp_header "")
  set(gomp_library "")
  if(FPDT_DEPS_PREFIX AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    file(GLOB omp_header "${FPDT_DEPS_PREFIX}/usr/lib/gcc/${fpdt_multiarch}/*/include/omp.h")
    file(GLOB gomp_library "${FPDT_DEPS_PREFIX}/usr/lib/${fpdt_multiarch}/libgomp.so.1")
  endif()
  if(NOT omp_header OR NOT gomp_library)
    message(FATAL_ERROR "OpenMP not found for ${CMAKE_CXX_COMPILER}; hint: install GCC's libgomp (libgcc-12-dev) or "
                        "libomp-dev, or pass -DFPDT_DEPS_PREFIX=<folder with libgomp1 and libgcc-12-dev unpacked>")
  endif()
  list(GET omp_header 0 omp_header)
  configure_file(${omp_header} ${CMAKE_BINARY_DIR}/deps/openmp/omp.h COPYONLY)
  add_library(OpenMP::OpenMP_CXX INTERFACE IMPORTED)
  target_compile_options(OpenMP::OpenMP_CXX INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fopenmp>)
  target_include_directories(OpenMP::OpenMP_CXX SYSTEM INTERFACE ${CMAKE_BINARY_DIR}/deps/openmp)
  target_link_libraries(OpenMP::OpenMP_CXX INTERFACE ${gomp_library} Threads::Threads)
  message(STATUS "OpenMP: ${gomp_library} with ${omp_header} (from FPDT_DEPS_PREFIX)")
endif()

find_package(nlohmann_json 3 REQUIRED)

# GoogleTest for the tests: built from FPDT_GTEST_SOURCE_DIR when given (no system GTest needed), else the
# system's. Either way the targets are GTest::gtest and GTest::gtest_main.
macro(fpdt_find_gtest)
  if(FPDT_GTEST_SOURCE_DIR)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(${FPDT_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
    foreach(gtest_target gtest gtest_main)
      if(NOT TARGET GTest::${gtest_target})
        add_library(GTest::${gtest_target} ALIAS ${gtest_target})
      endif()
    endforeach()
    message(STATUS "GoogleTest: built from ${FPDT_GTEST_SOURCE_DIR}")
  else()
    find_package(GTest REQUIRED)
  endif()
endmacro()
