// Message building for the comm layer's errors: cat("rank ", 3, " failed") appends each part, so
// no `"literal" + std::string` expression appears (GCC 12 -O3 warns falsely on those, -Wrestrict).
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "fpdt/base/error.h"

namespace fpdt::comm::detail {

inline void append_part(std::string& text, std::string_view part) { text.append(part); }
template <typename Integer, typename = std::enable_if_t<std::is_integral_v<Integer>>>
void append_part(std::string& text, Integer value) {
  text.append(std::to_string(value));
}

template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string text;
  (append_part(text, parts), ...);
  return text;
}

// The error for an all_to_all_v whose counts disagree between a sender and a receiver.
inline Error count_mismatch(int sender, int receiver, size_t sent, size_t expected, const char* unit) {
  return Error("comm",
               cat("all_to_all_v: rank ", sender, " sends ", sent, " ", unit, " to rank ", receiver,
                   " but rank ", receiver, " expects ", expected),
               "send_counts[j] on rank i must equal recv_counts[i] on rank j");
}

}  // namespace fpdt::comm::detail
