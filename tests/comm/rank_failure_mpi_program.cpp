// A small MPI job for tests/comm/rank_failure_mpirun_test.cpp: every rank runs 6 "steps" of
// all-to-all + all-reduce; in step 3 the chosen rank fails while the others are inside the step's
// collectives. Usage: comm_rank_failure_mpi_program kill|throw|none FAILING_RANK
//   kill   the rank dies by SIGKILL (no message of its own: mpirun must name it)
//   throw  the rank throws an fpdt::Error; main prints it and aborts the job (the CLI's path)
//   none   nobody fails; prints "all steps done" and exits 0
#include <csignal>
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
    FPDT_CHECK(argc == 3, "test", "usage: comm_rank_failure_mpi_program kill|throw|none FAILING_RANK", "");
    const std::string mode = argv[1];
    const int failing_rank = std::atoi(argv[2]);
    const size_t count = 4096;
    std::vector<float> send(world->size() * count, 1.0f), recv(world->size() * count);
    for (int step = 0; step < 6; ++step) {
      if (step == 3 && world->rank() == failing_rank) {
        if (mode == "kill") std::raise(SIGKILL);
        if (mode == "throw") throw fpdt::Error("test", "injected failure in step 3");
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
