// Options bound to settings fields: parsing, meaning checks, help and values (see options.h).
#include "fpdt/base/options.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "fpdt/base/error.h"

namespace fpdt {

namespace {

constexpr const char* kModule = "cli";

// The range a field's type can hold, as long double (exact for every 64-bit integer).
template <class T>
std::pair<long double, long double> type_range() {
  return {static_cast<long double>(std::numeric_limits<T>::lowest()),
          static_cast<long double>(std::numeric_limits<T>::max())};
}

std::string number_text(long double value) {
  char text[64];
  if (value == std::floor(value) && std::fabs(value) < 1e19L)
    std::snprintf(text, sizeof text, "%.0Lf", value);
  else
    std::snprintf(text, sizeof text, "%.6Lg", value);
  return text;
}

// 131072 → "128K", 1048576 → "1M", 256 → "256": the form a person would type.
std::string tokens_text(int64_t tokens) {
  const char* suffixes[] = {"T", "G", "M", "K"};
  for (int i = 0; i < 4; ++i) {
    const int64_t scale = int64_t{1} << (10 * (4 - i));
    if (tokens != 0 && tokens % scale == 0) return std::to_string(tokens / scale) + suffixes[i];
  }
  return std::to_string(tokens);
}

// std::visit over several lambdas: the pointer targets' generic one and the word field's own.
template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
// (clang before 17 deduces no aggregate's template arguments: make check-tsan's clang-14 needs the guide)
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace

std::optional<long double> parse_number(const std::string& text, Unit unit) {
  struct Suffix {
    const char* text;
    long double scale;
  };
  static const Suffix kBytes[] = {{"TiB", 1099511627776.0L}, {"GiB", 1073741824.0L}, {"MiB", 1048576.0L},
                                  {"KiB", 1024.0L},          {"TB", 1e12L},          {"GB", 1e9L},
                                  {"MB", 1e6L},              {"KB", 1e3L},           {"T", 1099511627776.0L},
                                  {"G", 1073741824.0L},      {"M", 1048576.0L},      {"K", 1024.0L},
                                  {"B", 1.0L}};
  static const Suffix kTokens[] = {{"T", 1099511627776.0L}, {"G", 1073741824.0L}, {"M", 1048576.0L}, {"K", 1024.0L},
                                   {"t", 1099511627776.0L}, {"g", 1073741824.0L}, {"m", 1048576.0L}, {"k", 1024.0L}};
  std::string number = text;
  long double scale = 1.0L;
  const auto strip = [&](const auto& suffixes) {
    for (const Suffix& suffix : suffixes) {
      const std::string ending = suffix.text;
      if (number.size() > ending.size() && number.ends_with(ending)) {
        number.resize(number.size() - ending.size());
        scale = suffix.scale;
        return;
      }
    }
  };
  if (unit == Unit::bytes) strip(kBytes);
  if (unit == Unit::tokens) strip(kTokens);
  if (number.empty() || std::isspace(static_cast<unsigned char>(number[0]))) return std::nullopt;
  char* end = nullptr;
  const long double value = std::strtold(number.c_str(), &end) * scale;
  if (end != number.c_str() + number.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

Option::Option(std::string name, std::string value_name, std::string help, Target target)
    : name_(std::move(name)), value_name_(std::move(value_name)), help_(std::move(help)), target_(target),
      default_(read(target)) {}

Option& Option::at_least(double low) {
  at_least_ = low;
  return *this;
}
Option& Option::above(double low) {
  above_ = low;
  return *this;
}
Option& Option::at_most(double high) {
  at_most_ = high;
  return *this;
}
Option& Option::below(double high) {
  below_ = high;
  return *this;
}
Option& Option::unit(Unit unit) {
  unit_ = unit;
  return *this;
}
Option& Option::choices(std::vector<std::string> words) {
  choices_ = std::move(words);
  return *this;
}
Option& Option::zero_means(std::string word) {
  zero_word_ = std::move(word);
  return *this;
}
Option& Option::unset_means(std::string word) {
  unset_word_ = std::move(word);
  return *this;
}

Option::Value Option::read(const Target& target) {
  return std::visit(Overloaded{[](auto* field) -> Value { return *field; },
                               [](const Words& words) -> Value { return words.show(); }},
                    target);
}

std::string Option::show(const Value& value) const {
  return std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "yes" : "no";
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (v.empty() && !unset_word_.empty()) return unset_word_;
          const std::string quoted = nlohmann::json(v).dump();  // control characters escaped: "\n"
          return quoted.substr(1, quoted.size() - 2);
        } else if constexpr (std::is_same_v<T, std::optional<int64_t>> || std::is_same_v<T, std::optional<double>>) {
          if (!v) return unset_word_.empty() ? "none" : unset_word_;
          return show(Value(*v));
        } else {
          if (v == 0 && !zero_word_.empty()) return zero_word_;
          if (unit_ == Unit::bytes) return format_bytes(static_cast<double>(v));
          if (unit_ == Unit::tokens) return tokens_text(static_cast<int64_t>(v));
          return number_text(static_cast<long double>(v));
        }
      },
      value);
}

std::string Option::text() const { return show(read(target_)); }

nlohmann::ordered_json Option::json() const {
  return std::visit(
      Overloaded{[](auto* field) -> nlohmann::ordered_json {
                   using T = std::decay_t<decltype(*field)>;
                   if constexpr (std::is_same_v<T, std::optional<int64_t>> || std::is_same_v<T, std::optional<double>>)
                     return *field ? nlohmann::ordered_json(**field) : nlohmann::ordered_json(nullptr);
                   else
                     return *field;
                 },
                 [](const Words& words) -> nlohmann::ordered_json { return words.show(); }},
      target_);
}

std::string Option::help_line() const {
  const std::string left = "  --" + name_ + (value_name_.empty() ? "" : " " + value_name_);
  std::string line = left + std::string(left.size() < 31 ? 31 - left.size() : 1, ' ') + help_;
  if (!zero_word_.empty()) line += " (0: " + zero_word_ + ")";
  std::string shown = show(default_);
  if (!zero_word_.empty() && shown == zero_word_) shown = "0";  // its meaning is said just before
  if (!std::holds_alternative<bool*>(target_) && !shown.empty()) line += " [" + shown + "]";
  return line;
}

void Option::fail(const std::string& what, const std::string& shown) const {
  const std::string usual = show(default_);
  throw Error(kModule, "--" + name_ + " " + what + ", got '" + shown + "'",
              "--" + name_ + " " + value_name_ + ": " + help_ + (usual.empty() ? "" : " (default " + usual + ")"));
}

void Option::check_number(long double value, const std::string& shown) const {
  std::string range;
  bool ok = true;
  const auto bound = [&](const std::optional<double>& limit, const char* word, bool holds) {
    if (!limit) return;
    range += (range.empty() ? " " : " and ") + std::string(word) + " " + number_text(*limit);
    ok = ok && holds;
  };
  bound(at_least_, "≥", at_least_ && value >= *at_least_);
  bound(above_, ">", above_ && value > *above_);
  bound(at_most_, "≤", at_most_ && value <= *at_most_);
  bound(below_, "<", below_ && value < *below_);
  if (!ok) fail("must be" + range, shown);
}

void Option::check_text(const std::string& value) const {
  if (choices_.empty()) return;
  std::string words;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const std::string& word = choices_[i];
    const auto colon = word.find(':');
    if (colon == std::string::npos ? value == word : value.size() > colon + 1 && value.starts_with(word.substr(0, colon + 1)))
      return;
    words += (i == 0 ? "" : i + 1 == choices_.size() ? " or " : ", ") + word;
  }
  throw Error(kModule, "unknown --" + name_ + " '" + value + "'", "use " + words);
}

void Option::set(const std::string& text) {
  std::visit(
      Overloaded{[&](const Words& words) {
                   check_text(text);  // only a word it knows reaches the field's parser
                   words.read(text);
                 },
                 [&](auto* field) {
        using T = std::decay_t<decltype(*field)>;
        if constexpr (std::is_same_v<T, bool>) {
          *field = true;
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!unset_word_.empty() && text == unset_word_) {
            field->clear();
            return;
          }
          check_text(text);
          *field = text;
        } else {
          using Number = std::conditional_t<std::is_same_v<T, std::optional<int64_t>>, int64_t,
                                            std::conditional_t<std::is_same_v<T, std::optional<double>>, double, T>>;
          constexpr bool optional = !std::is_same_v<T, Number>;
          if constexpr (optional) {
            if (!unset_word_.empty() && text == unset_word_) {
              field->reset();
              return;
            }
          }
          std::optional<long double> value = parse_number(text, unit_);
          if (!value && !zero_word_.empty() && text == zero_word_) value = 0.0L;
          const bool whole = std::is_integral_v<Number>;
          if (!value) {
            const char* expected = unit_ == Unit::bytes    ? "must be a size such as 2GiB or 512MiB"
                                   : unit_ == Unit::tokens ? "must be a whole number of tokens such as 131072, 128K or 2M"
                                   : whole                 ? "must be a whole number"
                                                           : "must be a finite number";
            fail(expected, text);
          }
          if (unit_ == Unit::bytes) *value = std::floor(*value);
          check_number(*value, text);
          const auto [lowest, highest] = type_range<Number>();
          if (whole && *value != std::floor(*value)) fail("must be a whole number", text);
          if (*value < lowest) fail("must be ≥ " + number_text(lowest), text);
          if (*value > highest)
            fail("must be at most " + number_text(highest) + (unit_ == Unit::bytes ? " bytes" : ""), text);
          *field = static_cast<Number>(*value);
        }
      }},
      target_);
}

void Option::check() const {
  std::visit(
      Overloaded{[&](const Words& words) { check_text(words.show()); }, [&](auto* field) {
        using T = std::decay_t<decltype(*field)>;
        if constexpr (std::is_same_v<T, std::string>) {
          check_text(*field);
        } else if constexpr (!std::is_same_v<T, bool>) {
          std::optional<long double> number;  // none for an unset optional
          if constexpr (std::is_same_v<T, std::optional<int64_t>> || std::is_same_v<T, std::optional<double>>) {
            if (*field) number = static_cast<long double>(**field);
          } else {
            number = static_cast<long double>(*field);
          }
          if (number && !std::isfinite(*number)) fail("must be a finite number", text());
          if (number) check_number(*number, text());
        }
      }},
      target_);
}

OptionSet::OptionSet(std::string command, std::string summary, std::string positional)
    : command_(std::move(command)), summary_(std::move(summary)), positional_name_(std::move(positional)) {}

const Option& OptionSet::option(const std::string& name) const {
  for (const Option& option : options_)
    if (option.name() == name) return option;
  throw Error(kModule, "unknown option --" + name + " for 'fpdt " + command_ + "'", "see fpdt " + command_ + " --help");
}

bool OptionSet::parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", help().c_str());
      return false;
    }
    if (!arg.starts_with("--")) {
      if (positional_name_.empty())
        throw Error(kModule, "unexpected argument '" + arg + "' for 'fpdt " + command_ + "'",
                    "see fpdt " + command_ + " --help");
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    const auto equals = name.find('=');
    const bool inline_value = equals != std::string::npos;
    if (inline_value) {
      value = name.substr(equals + 1);
      name.resize(equals);
    }
    Option& option = find(name);
    const bool flag = std::holds_alternative<bool*>(option.target_);
    if (flag && inline_value)
      throw Error(kModule, "--" + name + " is a flag and takes no value", "write --" + name + " alone");
    if (!flag && !inline_value) {
      if (i + 1 >= argc)
        throw Error(kModule, "option --" + name + " needs a value (" + option.value_name_ + ")",
                    "see fpdt " + command_ + " --help");
      value = argv[++i];
    }
    option.set(value);
    given_.insert(option.name());
  }
  return true;
}

void OptionSet::check() const {
  for (const Option& option : options_) option.check();
}

std::string OptionSet::help() const {
  std::string text = "usage: fpdt " + command_ + " [options]" +
                     (positional_name_.empty() ? "" : " " + positional_name_) + "\n\n" + summary_ + "\n\noptions:\n";
  for (const Option& option : options_) text += option.help_line() + "\n";
  return text + "  --help                       this text\n";
}

nlohmann::ordered_json OptionSet::values() const {
  nlohmann::ordered_json values = nlohmann::ordered_json::object();
  for (const Option& option : options_) values[option.name()] = option.json();
  return values;
}

}  // namespace fpdt
