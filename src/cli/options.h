// Command-line options for the `fpdt` program: each subcommand declares its options in one table
// (name, value, default, help); the same table parses argv and prints --help.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fpdt::cli {

struct Option {
  std::string name;          // without the leading "--"
  std::string value_name;    // "" for a flag
  std::string default_value;
  std::string help;
};

class OptionTable {
 public:
  OptionTable(std::string command, std::string summary, std::string positional = "");
  OptionTable& add(std::string name, std::string value_name, std::string default_value, std::string help);
  OptionTable& flag(std::string name, std::string help);

  // Parses argv after the subcommand. Returns false when --help was asked (the help is printed).
  // Throws fpdt::Error for an unknown option or a missing value, with a hint to --help.
  bool parse(int argc, char** argv);
  std::string help() const;

  const std::string& str(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  bool enabled(const std::string& name) const;
  // "2GiB", "512MiB", "64KiB", "1e9" (bytes) → bytes.
  int64_t bytes(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  const Option& find(const std::string& name) const;
  std::string command_;
  std::string summary_;
  std::string positional_name_;
  std::vector<Option> options_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace fpdt::cli
