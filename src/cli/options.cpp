// Option tables: parsing and help (see options.h).
#include "options.h"

#include <cmath>
#include <cstdio>

#include "fpdt/base/error.h"

namespace fpdt::cli {

OptionTable::OptionTable(std::string command, std::string summary, std::string positional)
    : command_(std::move(command)), summary_(std::move(summary)), positional_name_(std::move(positional)) {}

OptionTable& OptionTable::add(std::string name, std::string value_name, std::string default_value, std::string help) {
  values_[name] = default_value;
  options_.push_back({std::move(name), std::move(value_name), std::move(default_value), std::move(help)});
  return *this;
}

OptionTable& OptionTable::flag(std::string name, std::string help) {
  values_[name] = "false";
  options_.push_back({std::move(name), "", "", std::move(help)});
  return *this;
}

const Option& OptionTable::find(const std::string& name) const {
  for (const Option& option : options_)
    if (option.name == name) return option;
  throw Error("cli", "unknown option --" + name + " for 'fpdt " + command_ + "'",
              "see fpdt " + command_ + " --help");
}

bool OptionTable::parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", help().c_str());
      return false;
    }
    if (!arg.starts_with("--")) {
      if (positional_name_.empty())
        throw Error("cli", "unexpected argument '" + arg + "' for 'fpdt " + command_ + "'",
                    "see fpdt " + command_ + " --help");
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    const auto equals = name.find('=');
    const bool inline_value = equals != std::string::npos;
    if (inline_value) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    const Option& option = find(name);
    if (option.value_name.empty()) {
      values_[name] = "true";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc)
        throw Error("cli", "option --" + name + " needs a value (" + option.value_name + ")",
                    "see fpdt " + command_ + " --help");
      value = argv[++i];
    }
    values_[name] = value;
  }
  return true;
}

std::string OptionTable::help() const {
  std::string text = "usage: fpdt " + command_ + " [options]" +
                     (positional_name_.empty() ? "" : " " + positional_name_) + "\n\n" + summary_ + "\n\noptions:\n";
  for (const Option& option : options_) {
    const std::string left = "  --" + option.name + (option.value_name.empty() ? "" : " " + option.value_name);
    char line[512];
    std::snprintf(line, sizeof line, "%-30s %s%s\n", left.c_str(), option.help.c_str(),
                  option.default_value.empty() ? "" : (" [" + option.default_value + "]").c_str());
    text += line;
  }
  return text + "  --help                         this text\n";
}

const std::string& OptionTable::str(const std::string& name) const {
  find(name);
  return values_.at(name);
}

int64_t OptionTable::integer(const std::string& name) const {
  const std::string& text = str(name);
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);  // accepts 1e6
    if (used == text.size() && value == std::floor(value)) return static_cast<int64_t>(value);
  } catch (const std::exception&) {
  }
  throw Error("cli", "--" + name + " expects a whole number, got '" + text + "'");
}

double OptionTable::real(const std::string& name) const {
  const std::string& text = str(name);
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw Error("cli", "--" + name + " expects a number, got '" + text + "'");
}

bool OptionTable::enabled(const std::string& name) const { return str(name) == "true"; }

int64_t OptionTable::bytes(const std::string& name) const {
  const std::string& text = str(name);
  static const std::pair<const char*, double> units[] = {{"TiB", 1099511627776.0}, {"GiB", 1073741824.0},
                                                         {"MiB", 1048576.0},       {"KiB", 1024.0},
                                                         {"TB", 1e12},             {"GB", 1e9},
                                                         {"MB", 1e6},              {"KB", 1e3},
                                                         {"B", 1.0}};
  double scale = 1.0;
  std::string number = text;
  for (const auto& [suffix, factor] : units) {
    const std::string unit = suffix;
    if (number.size() > unit.size() && number.ends_with(unit)) {
      scale = factor;
      number = number.substr(0, number.size() - unit.size());
      break;
    }
  }
  try {
    size_t used = 0;
    const double value = std::stod(number, &used);
    if (used == number.size() && value >= 0) return static_cast<int64_t>(value * scale);
  } catch (const std::exception&) {
  }
  throw Error("cli", "--" + name + " expects a size such as 2GiB or 512MiB, got '" + text + "'");
}

}  // namespace fpdt::cli
