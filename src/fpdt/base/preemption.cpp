// Preemption signals (see preemption.h). The handler only stores the signal (a lock-free atomic) or, the
// second time, restores the default action and raises it again: both async-signal-safe.
#include "fpdt/base/preemption.h"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>

#include "fpdt/base/error.h"

namespace fpdt::preemption {

namespace {

std::atomic<int> g_requested{0};
static_assert(std::atomic<int>::is_always_lock_free);

const std::map<std::string, int>& named_signals() {
  static const std::map<std::string, int> names = {{"TERM", SIGTERM}, {"INT", SIGINT}, {"USR1", SIGUSR1},
                                                   {"USR2", SIGUSR2}, {"HUP", SIGHUP},  {"QUIT", SIGQUIT}};
  return names;
}

void handle(int signal) {
  int none = 0;
  if (g_requested.compare_exchange_strong(none, signal)) return;
  std::signal(signal, SIG_DFL);  // the second: what the signal would have done
  std::raise(signal);
}

}  // namespace

std::vector<int> parse_signals(const std::string& spelling) {
  std::vector<int> signals;
  if (spelling == "none") return signals;
  size_t begin = 0;
  while (begin <= spelling.size()) {
    const size_t end = std::min(spelling.find(',', begin), spelling.size());
    std::string word = spelling.substr(begin, end - begin);
    if (word.rfind("SIG", 0) == 0) word = word.substr(3);
    const auto named = named_signals().find(word);
    char* rest = nullptr;
    const long number = std::strtol(word.c_str(), &rest, 10);
    if (named != named_signals().end())
      signals.push_back(named->second);
    else if (!word.empty() && *rest == '\0' && number > 0 && number < NSIG && number != SIGKILL && number != SIGSTOP)
      signals.push_back(static_cast<int>(number));
    else
      throw Error("cli", "'" + word + "' in --preempt-signals is not a signal that can be caught",
                  "name them as TERM,INT,USR1 (or numbers), or give none");
    begin = end + 1;
  }
  return signals;
}

Catcher::Catcher(const std::vector<int>& signals) : signals_(signals) {
  g_requested.store(0);
  for (const int signal : signals_) before_.push_back(std::signal(signal, handle));
}

Catcher::~Catcher() {
  for (size_t i = 0; i < signals_.size(); ++i) std::signal(signals_[i], before_[i]);
}

int Catcher::requested() { return g_requested.load(); }

std::string signal_name(int signal) {
  for (const auto& [name, number] : named_signals())
    if (number == signal) return "SIG" + name;
  return "signal " + std::to_string(signal);
}

}  // namespace fpdt::preemption
