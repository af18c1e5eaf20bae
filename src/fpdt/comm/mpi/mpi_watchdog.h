// Liveness of an MPI job (communicator.h, "Liveness"): one thread per process sends heartbeats
// around a ring on a communicator of its own and watches the next rank's, so a stopped or frozen
// rank ends the job within the deadline instead of leaving the others spinning in a collective.
// Internal to the MPI backend (mpi_communicator.cpp starts and stops it); needs MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <string>

namespace fpdt::comm::mpi {

// Starts the heartbeat thread on `comm` (a duplicate of MPI_COMM_WORLD, owned from now on).
// Nothing for a world of one rank.
void start_watchdog(MPI_Comm comm);

// Ends the thread before MPI_Finalize: it sends a goodbye to its watcher and keeps watching (the
// deadline still holds) until the rank it watches says goodbye too, so no heartbeat is left
// unreceived; then frees the communicator. Collective in effect: every rank calls it at exit.
void stop_watchdog();

// Prints "rank R: <reason>" (R = rank in MPI_COMM_WORLD) and ends every rank of the job.
[[noreturn]] void abort_job(const std::string& reason);

}  // namespace fpdt::comm::mpi
