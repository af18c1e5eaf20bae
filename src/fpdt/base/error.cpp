// fpdt::Error and small formatting helpers used in error messages.
#include "fpdt/base/error.h"

#include <cstdio>

namespace fpdt {

namespace {
std::string compose(const std::string& module, const std::string& what, const std::string& hint) {
  std::string text = "[" + module + "] " + what;
  if (!hint.empty()) text += "; hint: " + hint;
  return text;
}
}  // namespace

Error::Error(std::string module, std::string what, std::string hint)
    : std::runtime_error(compose(module, what, hint)),
      module_(std::move(module)),
      message_(std::move(what)),
      hint_(std::move(hint)) {}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = bytes;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0)
    std::snprintf(text, sizeof text, "%.0f B", value);
  else
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

}  // namespace fpdt
