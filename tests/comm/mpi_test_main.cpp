// The main of every *_mpi_test.cpp program: the fpdt program's OpenBLAS kernel set (blas_test_core.h),
// then MPI comes up through comm::make_world, rank 0 prints GoogleTest's usual report, other ranks print
// only their failures (prefixed with their rank), and the exit code is agreed: non-zero on every rank
// when any rank failed a test.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "blas_test_core.h"
#include "comm/mpi_testing.h"
#include "fpdt/comm/communicator.h"

namespace fpdt::comm::testing {

namespace {
Communicator* g_world = nullptr;

// Replaces GoogleTest's printer on ranks other than 0: failures only, each line naming the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "rank %d: [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};
}  // namespace

Communicator& world() { return *g_world; }

}  // namespace fpdt::comm::testing

int main(int argc, char** argv) {
  if (!fpdt::testing::run_the_programs_blas_core(argv)) return 1;
  std::unique_ptr<fpdt::comm::Communicator> world;
  try {
    world = fpdt::comm::make_world(&argc, &argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
  fpdt::comm::testing::g_world = world.get();
  ::testing::InitGoogleTest(&argc, argv);
  if (world->rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new fpdt::comm::testing::FailurePrinter(world->rank()));
  }
  const int result = RUN_ALL_TESTS();
  double failed_ranks = result != 0 ? 1.0 : 0.0;
  world->all_reduce_sum(&failed_ranks, 1);
  if (world->rank() == 0 && failed_ranks > 0)
    std::fprintf(stderr, "%.0f of %d ranks failed a test\n", failed_ranks, world->size());
  return failed_ranks > 0 ? 1 : 0;
}
