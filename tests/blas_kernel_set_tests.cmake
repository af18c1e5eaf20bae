# Read by ctest when it starts (CMakeLists.txt: the file it generates sets `lister`, the program
# tests/blas_kernel_sets.cpp, and `tests`, entries "<name>|<program>|<arguments>"): one ctest test
# "blas.<set>.<name>" per kernel set the lister prints and entry, run with OPENBLAS_CORETYPE=<set>. When
# the lister cannot run (not built yet, or it fails), the test "blas.kernel_sets" fails and says so.
execute_process(COMMAND "${lister}" OUTPUT_VARIABLE sets ERROR_VARIABLE lister_error RESULT_VARIABLE lister_result)
if(NOT lister_result EQUAL 0)
  add_test(blas.kernel_sets "${CMAKE_COMMAND}" -E echo
           "[test] ${lister} did not list the OpenBLAS kernel sets (${lister_result}: ${lister_error}); hint: build it")
  set_tests_properties(blas.kernel_sets PROPERTIES LABELS blas WILL_FAIL TRUE)
  return()
endif()
string(STRIP "${sets}" sets)
string(REPLACE "\n" ";" sets "${sets}")
foreach(set IN LISTS sets)
  foreach(entry IN LISTS tests)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 0 name)
    list(GET fields 1 program)
    list(SUBLIST fields 2 -1 arguments)
    add_test(blas.${set}.${name} "${program}" ${arguments})
    set_tests_properties(blas.${set}.${name} PROPERTIES LABELS blas TIMEOUT 600
                         ENVIRONMENT "OPENBLAS_CORETYPE=${set};FPDT_TEST_BLAS_CORE=${set}")
  endforeach()
endforeach()
