// Preemption: a cluster ending a job asks first — Slurm sends SIGTERM (or the signal its --signal names)
// before SIGKILL at a time limit or a preemption, a user's Ctrl-C is SIGINT — and a run that hears it
// finishes its step, saves and exits (train/trainer.cpp). Here: the signals taken as that request, caught
// once; a second one ends the process at once, as the signal itself would (what was saved stays saved:
// checkpoints are written atomically).
#pragma once

#include <string>
#include <vector>

namespace fpdt::preemption {

// The signals of `spelling`: "TERM,INT,USR1" (names without SIG, or numbers), or "none". Throws
// fpdt::Error naming the word it does not know.
std::vector<int> parse_signals(const std::string& spelling);

// While alive, `signals` are caught as a preemption request (requested()); a second one of them ends the
// process by that signal. The handlers before are restored on destruction. One at a time.
class Catcher {
 public:
  explicit Catcher(const std::vector<int>& signals);
  ~Catcher();
  Catcher(const Catcher&) = delete;
  Catcher& operator=(const Catcher&) = delete;
  // The first signal caught, 0 when none.
  static int requested();

 private:
  std::vector<int> signals_;
  std::vector<void (*)(int)> before_;  // their handlers before
};

// "SIGTERM" for 15, as a person reads it.
std::string signal_name(int signal);

}  // namespace fpdt::preemption
