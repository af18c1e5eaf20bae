// Chrome trace (chrome://tracing, Perfetto) of where time goes: compute, copy and communication
// spans per rank and thread. Off unless enabled; a disabled TraceSpan costs one branch.
#pragma once

#include <cstdint>
#include <string>

namespace fpdt::trace {

// Starts recording; spans carry `rank` as their process id.
void enable(int rank);
bool enabled();
// Writes every span recorded so far as Chrome trace JSON (atomically); throws fpdt::Error on failure.
void write(const std::string& path);

// Records [construction, destruction) as a span named `name` in category `category`
// ("compute", "copy" or "comm"). Both strings must outlive the span (use literals).
class Span {
 public:
  Span(const char* name, const char* category);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* category_;
  int64_t begin_us_ = -1;
};

}  // namespace fpdt::trace
