// A small MPI job for tests/comm/rank_failure_mpirun_test.cpp: every rank runs 6 "steps" of
// all-to-all + all-reduce; in step 3 the chosen rank fails while the others are inside the step's
// collectives. Usage: comm_rank_failure_mpi_program MODE FAILING_RANK [DEADLINE_SECONDS]
//   kill   the rank dies by SIGKILL (no message of its own: mpirun must name it)
//   throw  the rank throws an fpdt::Error; main prints it and aborts the job (the CLI's path)
//   stop   the rank stops itself (SIGSTOP): alive to the OS, silent to its peers
//   slow   the rank computes for 2 deadlines before its collectives: a long step, not a hang
//   none   nobody fails; prints "all steps done" and exits 0
// The failing rank first prints "failing at <seconds>" (steady_clock, shared by every process).
// DEADLINE_SECONDS sets comm::set_deadline_seconds (default: the library's).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"
#include "fpdt/comm/communicator.h"

int main(int argc, char** argv) {
  std::unique_ptr<fpdt::comm::Communicator> world;
  try {
    world = fpdt::comm::make_world(&argc, &argv);
    FPDT_CHECK(argc == 3 || argc == 4, "test",
               "usage: comm_rank_failure_mpi_program kill|throw|stop|slow|none FAILING_RANK [DEADLINE_SECONDS]", "");
    const std::string mode = argv[1];
    const int failing_rank = std::atoi(argv[2]);
    if (argc == 4) fpdt::comm::set_deadline_seconds(std::atof(argv[3]));
    const size_t count = 4096;
    std::vector<float> send(world->size() * count, 1.0f), recv(world->size() * count);
    for (int step = 0; step < 6; ++step) {
      if (step == 3 && world->rank() == failing_rank) {
        // When it fails, on the machine's monotonic clock (steady_clock), for the test to time from.
        std::fprintf(stderr, "failing at %.3f\n",
                     std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
        std::fflush(stderr);
        if (mode == "kill") std::raise(SIGKILL);
        if (mode == "throw") throw fpdt::Error("test", "injected failure in step 3");
        if (mode == "stop") std::raise(SIGSTOP);
        if (mode == "slow") {  // busy, as a long compute step is (no sleep: the thread stays runnable)
          const auto until = std::chrono::steady_clock::now() +
                             std::chrono::duration<double>(2 * fpdt::comm::deadline_seconds());
          volatile double sink = 0;
          while (std::chrono::steady_clock::now() < until) sink = sink + 1.0;
        }
      }
      world->all_to_all(send.data(), recv.data(), count);
      world->all_reduce_sum(recv.data(), recv.size());
    }
    world->barrier();
    fpdt::log::info("all steps done");
    return 0;
  } catch (const std::exception& error) {
    if (world) world->abort(error.what());  // prints "rank R: <message>", ends every rank
    fpdt::log::error(error.what());
    return 1;
  }
}
