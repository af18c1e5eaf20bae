// Options bound to fields: values land in their fields with their units (tokens K = 1024; bytes KiB =
// 1024, KB = 1000), every meaning check refuses with one "[cli] --name must be ..., got '...'" error
// (ranges, finiteness, whole numbers, the field type's range, choices), special words round-trip, the
// same declaration checks values set in code, and the values come back as typed JSON.
#include "fpdt/base/options.h"

#include <gtest/gtest.h>

#include <limits>

#include "testing.h"

namespace fpdt {
namespace {

using testing::error_message;
using testing::expect_contains;

struct Settings {
  int64_t steps = 10;
  int threads = 0;
  double beta = 0.9;
  int64_t seq = 256;
  int64_t memory = 0;
  uint64_t seed = 7;
  std::string offload = "none";
  std::string prompt = "\n";
  bool resume = false;
  std::optional<double> rate;
  std::optional<int64_t> host;
};

struct Bound {
  Settings s;
  OptionSet set{"demo", "A demo command."};
  Bound() {
    set.add("steps", "N", "optimizer steps", s.steps).at_least(1);
    set.add("threads", "N", "threads", s.threads).at_least(0).zero_means("all cores");
    set.add("beta", "B", "a coefficient", s.beta).at_least(0).below(1);
    set.add("seq", "S", "tokens", s.seq).unit(Unit::tokens).at_least(1);
    set.add("memory", "BYTES", "a budget", s.memory).unit(Unit::bytes).at_least(0).zero_means("unlimited");
    set.add("seed", "N", "a seed", s.seed);
    set.add("offload", "none|ram|disk[:DIR]", "a tier", s.offload).choices({"none", "ram", "disk", "disk:DIR"});
    set.add("prompt", "TEXT", "a prompt", s.prompt);
    set.add("resume", "", "a flag", s.resume);
    set.add("rate", "GB/s", "a rate", s.rate).above(0).unset_means("preset");
    set.add("host", "BYTES", "host memory", s.host).unit(Unit::bytes).above(0).unset_means("preset");
  }
  void parse(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    ASSERT_TRUE(set.parse(static_cast<int>(argv.size()), argv.data()));
  }
  std::string error(std::vector<std::string> args) {
    return error_message([&] {
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      set.parse(static_cast<int>(argv.size()), argv.data());
    });
  }
};

TEST(Options, ValuesLandInTheirFieldsWithTheirUnits) {
  Bound bound;
  bound.parse({"--steps", "1e6", "--threads=4", "--beta", "0.95", "--seq", "128K", "--memory", "1.5GiB", "--seed",
               "18446744073709551615", "--offload", "disk:/scratch", "--prompt", "the light", "--resume", "--rate",
               "12.5", "--host", "64GB"});
  const Settings& s = bound.s;
  EXPECT_EQ(s.steps, 1000000);
  EXPECT_EQ(s.threads, 4);
  EXPECT_EQ(s.beta, 0.95);
  EXPECT_EQ(s.seq, 131072);
  EXPECT_EQ(s.memory, int64_t{3} << 29);
  EXPECT_EQ(s.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(s.offload, "disk:/scratch");
  EXPECT_EQ(s.prompt, "the light");
  EXPECT_TRUE(s.resume);
  EXPECT_EQ(s.rate, 12.5);
  EXPECT_EQ(s.host, int64_t{64000000000});
  // One unit rule for every size: K, M, G, T and KiB … are powers of 1024, KB … of 1000.
  EXPECT_EQ(parse_number("2M", Unit::tokens), 2097152.0L);
  EXPECT_EQ(parse_number("512MiB", Unit::bytes), 536870912.0L);
  EXPECT_EQ(parse_number("512M", Unit::bytes), 536870912.0L);
  EXPECT_EQ(parse_number("5KB", Unit::bytes), 5000.0L);
  EXPECT_FALSE(parse_number("5KiB", Unit::tokens));  // tokens are no bytes
  EXPECT_FALSE(parse_number("inf", Unit::plain));
  EXPECT_FALSE(parse_number("nan", Unit::plain));
  EXPECT_FALSE(parse_number("", Unit::plain));
}

// given() tells an option set to its default value apart from one left out.
TEST(Options, GivenSaysWhichOptionsTheCommandLineNamed) {
  Bound bound;
  bound.parse({"--steps", "10", "--resume", "--seq=256"});
  EXPECT_TRUE(bound.set.given("steps"));  // set to its default, given all the same
  EXPECT_TRUE(bound.set.given("resume"));
  EXPECT_TRUE(bound.set.given("seq"));
  EXPECT_FALSE(bound.set.given("threads"));
  expect_contains(error_message([&] { (void)bound.set.given("nope"); }), {"unknown option --nope"});
}

TEST(Options, EveryBadValueIsOneClearError) {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {{"--steps", "0"}, {"[cli] --steps must be ≥ 1, got '0'", "hint: --steps N: optimizer steps (default 10)"}},
      {{"--steps", "1e30"}, {"--steps must be at most 9223372036854775807, got '1e30'"}},
      {{"--steps", "2.5"}, {"--steps must be a whole number, got '2.5'"}},
      {{"--steps", "many"}, {"--steps must be a whole number, got 'many'"}},
      {{"--threads", "-5"}, {"--threads must be ≥ 0, got '-5'"}},
      {{"--threads", "1e10"}, {"--threads must be at most 2147483647, got '1e10'"}},
      {{"--beta", "2"}, {"--beta must be ≥ 0 and < 1, got '2'"}},
      {{"--beta", "1"}, {"--beta must be ≥ 0 and < 1, got '1'"}},
      {{"--beta", "inf"}, {"--beta must be a finite number, got 'inf'"}},
      {{"--beta", "nan"}, {"--beta must be a finite number, got 'nan'"}},
      {{"--seq", "1.3K"}, {"--seq must be a whole number, got '1.3K'"}},
      {{"--seq", "lots"}, {"--seq must be a whole number of tokens such as 131072, 128K or 2M, got 'lots'"}},
      {{"--memory", "-3GiB"}, {"--memory must be ≥ 0, got '-3GiB'"}},
      {{"--memory", "1e30TiB"}, {"--memory must be at most 9223372036854775807 bytes, got '1e30TiB'"}},
      {{"--memory", "two"}, {"--memory must be a size such as 2GiB or 512MiB, got 'two'"}},
      {{"--seed", "-1"}, {"--seed must be ≥ 0, got '-1'"}},
      {{"--offload", "tape"}, {"[cli] unknown --offload 'tape'", "hint: use none, ram, disk or disk:DIR"}},
      {{"--offload", "disk:"}, {"unknown --offload 'disk:'"}},
      {{"--rate", "-1"}, {"--rate must be > 0, got '-1'"}},
      {{"--rate", "0"}, {"--rate must be > 0, got '0'"}},
      {{"--resume=yes"}, {"--resume is a flag and takes no value"}},
      {{"--steps"}, {"option --steps needs a value (N)"}},
      {{"--bogus", "1"}, {"unknown option --bogus for 'fpdt demo'", "fpdt demo --help"}},
      {{"stray"}, {"unexpected argument 'stray' for 'fpdt demo'"}},
  };
  for (const Case& bad : cases) {
    Bound bound;
    const std::string message = bound.error(bad.args);
    SCOPED_TRACE(bad.args[0]);
    for (const std::string& part : bad.parts) EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(bound.s.steps, 10);  // a refused value is not stored
  }
}

TEST(Options, SpecialWordsAndValuesShownToAPerson) {
  Bound bound;
  EXPECT_EQ(bound.set.option("threads").text(), "all cores");
  EXPECT_EQ(bound.set.option("memory").text(), "unlimited");
  EXPECT_EQ(bound.set.option("rate").text(), "preset");
  EXPECT_EQ(bound.set.option("prompt").text(), "\\n");  // shown escaped
  EXPECT_EQ(bound.set.option("seq").text(), "256");
  bound.parse({"--memory", "unlimited", "--rate", "3", "--seq", "2M", "--threads", "all cores"});
  EXPECT_EQ(bound.s.memory, 0);
  EXPECT_EQ(bound.s.threads, 0);
  EXPECT_EQ(bound.set.option("seq").text(), "2M");
  EXPECT_EQ(bound.set.option("rate").text(), "3");
  bound.parse({"--rate", "preset", "--memory", "2GiB"});
  EXPECT_FALSE(bound.s.rate.has_value());
  EXPECT_EQ(bound.set.option("memory").text(), "2.00 GiB");
  const std::string help = bound.set.help();
  expect_contains(help, {"usage: fpdt demo [options]", "A demo command.", "--threads N", "threads (0: all cores) [0]",
                         "--beta B", "a coefficient [0.9]", "--resume", "--help"});
}

TEST(Options, ValuesAsJsonAndChecksOfSettingsMadeInCode) {
  Bound bound;
  bound.parse({"--steps", "12", "--host", "1KiB"});
  const nlohmann::ordered_json json = bound.set.values();
  EXPECT_EQ(json.begin().key(), "steps");  // declaration order
  EXPECT_EQ(json["steps"], 12);
  EXPECT_EQ(json["beta"], 0.9);
  EXPECT_EQ(json["offload"], "none");
  EXPECT_EQ(json["resume"], false);
  EXPECT_TRUE(json["rate"].is_null());
  EXPECT_EQ(json["host"], 1024);
  EXPECT_NO_THROW(bound.set.check());
  bound.s.beta = 1.5;
  expect_contains(error_message([&] { bound.set.check(); }), {"[cli] --beta must be ≥ 0 and < 1, got '1.5'"});
  bound.s.beta = std::numeric_limits<double>::infinity();
  expect_contains(error_message([&] { bound.set.check(); }), {"--beta must be a finite number"});
  bound.s.beta = 0.5;
  bound.s.offload = "nvme";
  expect_contains(error_message([&] { bound.set.check(); }), {"unknown --offload 'nvme'"});
}

}  // namespace
}  // namespace fpdt

namespace fpdt {
namespace {

// A field of an enum bound through its words: the word parses into the value, the value shows (text,
// JSON, help) as its word, a word it does not know is refused before its parser runs, and a value set
// in code is checked like a typed one.
enum class Tier { none, ram, disk };
const char* tier_word(Tier tier) { return tier == Tier::none ? "none" : tier == Tier::ram ? "ram" : "disk"; }
Tier parse_tier(const std::string& text) {
  EXPECT_NE(text, "tape");  // refused by the choices before it gets here
  return text == "ram" ? Tier::ram : text == "disk" ? Tier::disk : Tier::none;
}

TEST(Options, AnEnumBindsThroughItsWords) {
  Tier tier = Tier::ram;
  OptionSet set{"demo", "A demo command."};
  set.add("tier", "none|ram|disk", "a tier", tier, tier_word, parse_tier).choices({"none", "ram", "disk"});
  EXPECT_NE(set.help().find("--tier none|ram|disk"), std::string::npos);
  EXPECT_NE(set.help().find("a tier [ram]"), std::string::npos) << set.help();
  std::string args[] = {"--tier", "disk"};
  char* argv[] = {args[0].data(), args[1].data()};
  ASSERT_TRUE(set.parse(2, argv));
  EXPECT_EQ(tier, Tier::disk);
  EXPECT_EQ(set.option("tier").text(), "disk");
  EXPECT_EQ(set.values()["tier"], "disk");
  std::string bad[] = {"--tier=tape"};
  char* bad_argv[] = {bad[0].data()};
  testing::expect_contains(testing::error_message([&] { set.parse(1, bad_argv); }),
                           {"[cli] unknown --tier 'tape'", "use none, ram or disk"});
  EXPECT_EQ(tier, Tier::disk);  // left as it was
  tier = Tier::none;            // set in code: shown and checked as its word
  EXPECT_NO_THROW(set.check());
  EXPECT_EQ(set.option("tier").text(), "none");
}

}  // namespace
}  // namespace fpdt
