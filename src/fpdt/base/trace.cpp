// Chrome trace recording (see trace.h).
#include "fpdt/base/trace.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "fpdt/base/file_io.h"

namespace fpdt::trace {

namespace {

struct Event {
  const char* name;
  const char* category;
  int64_t begin_us;
  int64_t duration_us;
  uint64_t thread;
};

std::atomic<bool> g_enabled{false};
int g_rank = 0;
std::mutex g_mutex;
std::vector<Event> g_events;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void enable(int rank) {
  g_rank = rank;
  g_enabled.store(true);
}

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

Span::Span(const char* name, const char* category) : name_(name), category_(category) {
  if (enabled()) begin_us_ = now_us();
}

Span::~Span() {
  if (begin_us_ < 0) return;
  const Event event{name_, category_, begin_us_, now_us() - begin_us_,
                    std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000};
  std::lock_guard<std::mutex> lock(g_mutex);
  g_events.push_back(event);
}

void write(const std::string& path) {
  std::string json = "{\"traceEvents\":[\n";
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (size_t i = 0; i < g_events.size(); ++i) {
      const Event& e = g_events[i];
      char line[256];
      std::snprintf(line, sizeof line,
                    "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld,\"dur\":%lld,\"pid\":%d,\"tid\":%llu}%s\n",
                    e.name, e.category, static_cast<long long>(e.begin_us), static_cast<long long>(e.duration_us),
                    g_rank, static_cast<unsigned long long>(e.thread), i + 1 < g_events.size() ? "," : "");
      json += line;
    }
  }
  json += "]}\n";
  write_file_atomic(path, [&](int fd) { write_fully(fd, json.data(), json.size(), path, "trace"); }, "trace");
}

}  // namespace fpdt::trace
