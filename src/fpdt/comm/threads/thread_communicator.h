// The threads backend: P ranks as P threads of one process, so every multi-rank path (Ulysses
// all-to-all, DP × SP groups, gradient all-reduce) is tested on any machine, without mpirun.
// Collectives copy straight out of the peers' buffers (each rank pulls what it receives).
#pragma once

#include <functional>

#include "fpdt/comm/communicator.h"

namespace fpdt::comm {

// Runs body(comm) on `ranks` threads, each with its own Communicator of one group of `ranks`
// (comm.rank() = the thread's index), and returns when all have returned.
// Failure never hangs: when a rank throws (or calls comm.abort), every other rank's current or
// next collective throws fpdt::Error("[comm] rank R failed: <its message>"); so does a collective
// that can never complete because a member already returned (mismatched collective calls).
// After joining every thread, run_ranks throws fpdt::Error("[comm] rank R failed: <message>")
// for the first failure. A rank busy computing sees the failure at its next collective.
// Deadline: a collective whose peers have not all arrived within comm::deadline_seconds() fails the
// run as "[comm] rank R failed: did not reach a collective within the D s deadline (...)", R the
// first rank missing; run_ranks still returns only when every thread has returned.
void run_ranks(int ranks, const std::function<void(Communicator&)>& body);

}  // namespace fpdt::comm
