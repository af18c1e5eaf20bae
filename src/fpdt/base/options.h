// Command-line options declared once: each option is bound straight to the settings field it sets,
// with its meaning checks (range, finiteness, units) and its help. That one declaration parses argv,
// prints --help, checks settings made in code, and reports the effective values as JSON and as text.
// Every bad value is one "[cli] --name must be ..., got '...'; hint: <its help line>" error.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace fpdt {

// How a number is written. tokens: 131072, 128K, 2M, 1G, 1e6 (K, M, G, T are powers of 1024).
// bytes: 2GiB, 512MiB, 1.5G (K, M, G, T and KiB … TiB are powers of 1024; KB … TB of 1000), 1e9.
enum class Unit { plain, tokens, bytes };

class Option {
 public:
  // Meaning checks of a number (reals are always required to be finite).
  Option& at_least(double low);
  Option& above(double low);
  Option& at_most(double high);
  Option& below(double high);
  Option& unit(Unit unit);
  // Text: the value must be one of `words`; in a word with ':' what follows is a placeholder for any
  // non-empty text ("disk:DIR" accepts disk:/scratch).
  Option& choices(std::vector<std::string> words);
  // A number's 0 is shown as `word` (table) and `word` is accepted for it: "unlimited", "auto". The
  // help says "(0: word)".
  Option& zero_means(std::string word);
  // An optional field without a value (or an empty text) is shown as `word`, and `word` is accepted
  // for it: "preset".
  Option& unset_means(std::string word);

  const std::string& name() const { return name_; }
  // The current value as shown to a person ("2.00 GiB", "unlimited", "0.95") and as JSON (numbers
  // as numbers; an unset optional as null).
  std::string text() const;
  nlohmann::ordered_json json() const;
  // "--beta1 B1  AdamW beta1 [0.9]" (the initial value of the field is the default).
  std::string help_line() const;

 private:
  friend class OptionSet;
  // A field of a type spelled by words (an enum, an offload tier with its directory): its word, and a
  // word (one of the choices) read into it.
  struct Words {
    std::function<std::string()> show;
    std::function<void(const std::string&)> read;
  };
  using Target = std::variant<bool*, int*, int64_t*, uint64_t*, double*, std::string*, std::optional<int64_t>*,
                              std::optional<double>*, Words>;
  using Value = std::variant<bool, int, int64_t, uint64_t, double, std::string, std::optional<int64_t>,
                             std::optional<double>>;
  Option(std::string name, std::string value_name, std::string help, Target target);
  static Value read(const Target& target);
  std::string show(const Value& value) const;
  // Parses `text`, checks its meaning and stores it; throws fpdt::Error quoting `text`.
  void set(const std::string& text);
  // Checks the field's current value (for settings made in code).
  void check() const;
  void check_number(long double value, const std::string& shown) const;
  void check_text(const std::string& value) const;
  [[noreturn]] void fail(const std::string& what, const std::string& shown) const;

  std::string name_, value_name_, help_;
  Target target_;
  Value default_;
  Unit unit_ = Unit::plain;
  std::optional<double> at_least_, above_, at_most_, below_;
  std::vector<std::string> choices_;
  std::string zero_word_, unset_word_;
};

class OptionSet {
 public:
  // `command` as in "fpdt <command>"; `positional` names the bare arguments ("FILE...") or is empty.
  OptionSet(std::string command, std::string summary, std::string positional = "");
  OptionSet(const OptionSet&) = delete;
  OptionSet& operator=(const OptionSet&) = delete;

  // Declares --name bound to `field`: bool (a flag, no value), int, int64_t, uint64_t, double,
  // std::string, std::optional<int64_t> or std::optional<double>. The field's value now is the default.
  template <class T>
  Option& add(std::string name, std::string value_name, std::string help, T& field) {
    return options_.emplace_back(Option(std::move(name), std::move(value_name), std::move(help), &field));
  }
  // Declares --name bound to a field of a type spelled by words (an enum): `show(field)` is its word,
  // `parse(word)` its value; give the accepted words with choices(), so that only they reach `parse`.
  template <class T, class Show, class Parse>
  Option& add(std::string name, std::string value_name, std::string help, T& field, Show show, Parse parse) {
    Option::Words words{[&field, show] { return show(field); },
                        [&field, parse](const std::string& word) { field = parse(word); }};
    return options_.emplace_back(Option(std::move(name), std::move(value_name), std::move(help), std::move(words)));
  }

  // Parses argv after the subcommand into the bound fields. Returns false when --help was asked (the
  // help is printed). Throws fpdt::Error for an unknown option, a missing value or a bad one.
  bool parse(int argc, char** argv);
  // Checks every bound field's current value against its declaration (settings made in code).
  void check() const;
  std::string help() const;
  // {"name": value, ...} in declaration order.
  nlohmann::ordered_json values() const;
  const std::deque<Option>& options() const { return options_; }
  // The option --name; throws fpdt::Error when there is none.
  const Option& option(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Whether parse() saw --name (its field may still hold the default).
  bool given(const std::string& name) const { return given_.count(option(name).name()) != 0; }

 private:
  Option& find(const std::string& name) { return const_cast<Option&>(option(name)); }
  std::string command_, summary_, positional_name_;
  std::deque<Option> options_;  // a deque: add() hands out references that stay valid
  std::vector<std::string> positional_;
  std::set<std::string> given_;
};

// The values of `settings` set in code, checked as parsing them would be: `declare` binds a copy's fields to
// a fresh OptionSet of `command`, whose check() throws fpdt::Error naming the option.
template <class Settings>
void check_as_options(const std::string& command, Settings settings, void (*declare)(OptionSet&, Settings&)) {
  OptionSet bound(command, "");
  declare(bound, settings);
  bound.check();
}

// {"option": value, ...} of `settings` as `declare` binds them (OptionSet::values).
template <class Settings>
nlohmann::ordered_json options_json(const std::string& command, Settings settings,
                                    void (*declare)(OptionSet&, Settings&)) {
  OptionSet bound(command, "");
  declare(bound, settings);
  return bound.values();
}

// Reads a number written in `unit` (see Unit); nullopt when `text` is not one. Finite or nullopt.
std::optional<long double> parse_number(const std::string& text, Unit unit);

}  // namespace fpdt
