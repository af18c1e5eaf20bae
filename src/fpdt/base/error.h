// Errors with a module tag, the failing rank and a hint. Every user or config mistake throws
// fpdt::Error; `main` catches it, prints it once on the failing rank and exits non-zero.
// Format: "[module] what went wrong; hint: what to try" (hint optional).
#pragma once

#include <stdexcept>
#include <string>

namespace fpdt {

class Error : public std::runtime_error {
 public:
  Error(std::string module, std::string what, std::string hint = "");
  const std::string& module() const { return module_; }
  const std::string& message() const { return message_; }  // what went wrong, without module and hint
  const std::string& hint() const { return hint_; }

 private:
  std::string module_;
  std::string message_;
  std::string hint_;
};

// Throws fpdt::Error("[module] message; hint: hint") when `condition` is false.
#define FPDT_CHECK(condition, module, message, hint)                  \
  do {                                                                \
    if (!(condition)) throw ::fpdt::Error((module), (message), (hint)); \
  } while (0)

// Internal invariant (a bug, not a user error): names the expression, file and line.
#define FPDT_ASSERT(condition)                                                              \
  do {                                                                                      \
    if (!(condition))                                                                       \
      throw ::fpdt::Error("internal", std::string("assertion failed: ") + #condition +       \
                                          " at " + __FILE__ + ":" + std::to_string(__LINE__)); \
  } while (0)

// Human-readable byte count: "1.50 GiB", "512 B".
std::string format_bytes(double bytes);

// A number to four significant digits: "0.0003", "176.4", "1.235e+05".
std::string format_number(double value);

}  // namespace fpdt
