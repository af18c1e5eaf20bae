// RULER (train/ruler.h): each task's prompt held against RULER's recipe (template text, needle format, counts,
// answer prefix, tokens_to_generate), every reference where its task puts it, prompts fitted to their length,
// the metric, the effective-length rule, the options, and run_ruler with fake generators (100 and 0).
// The expected texts below are RULER's (scripts/data/synthetic/constants.py, niah.py), written out again
// here so that the generator is checked against the recipe, not against itself.
#include "fpdt/train/eval.h"
#include "fpdt/train/ruler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numbers>
#include <regex>
#include <set>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/random.h"
#include "fpdt/data/shard.h"
#include "fpdt/data/tokenizer.h"
#include "testing.h"

namespace fpdt::train {
namespace {

using testing::TempDir;

const std::string kSource = FPDT_SOURCE_DIR;
const std::string kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

const data::Tokenizer& bytes() {
  static const data::Tokenizer tokenizer = data::Tokenizer::bytes();
  return tokenizer;
}

const data::Tokenizer& gpt2() {
  static const data::Tokenizer tokenizer = data::Tokenizer::load(kSource + "/tests/data/fixtures/tokenizers/gpt2");
  return tokenizer;
}

// The word list, and an essay of fresh random sentences of its words (5–15 words, ending in . ! or ?).
RulerSources fresh_sources(uint64_t seed) {
  RulerSources sources;
  sources.words = load_word_list();
  Rng rng(seed);
  std::string essay;
  for (int sentence = 0; sentence < 400; ++sentence) {
    const int words = 5 + static_cast<int>(rng.below(11));
    for (int w = 0; w < words; ++w) {
      std::string word = sources.words[rng.below(sources.words.size())];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      essay += (essay.empty() ? "" : " ") + word;
    }
    essay += ".!?"[rng.below(3)];
  }
  sources.essay = split_words(essay);
  sources.essay_origin = "random sentences";
  return sources;
}

std::vector<std::string> split(const std::string& text, const std::string& separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t at = text.find(separator); at != std::string::npos; at = text.find(separator, begin)) {
    parts.push_back(text.substr(begin, at - begin));
    begin = at + separator.size();
  }
  parts.push_back(text.substr(begin));
  return parts;
}

// `run` throws one fpdt::Error "[module] …" on one line that says `part`.
void expect_error(const std::function<void()>& run, const std::string& module, const std::string& part) {
  try {
    run();
    ADD_FAILURE() << "no error; expected one saying '" << part << "'";
  } catch (const Error& error) {
    const std::string text = error.what();
    EXPECT_TRUE(text.starts_with("[" + module + "] ")) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
  }
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// RULER's scripts/synthetic.yaml and constants.py, as its tables say them.
TEST(Ruler, RecipesAreRulers) {
  struct Niah {
    const char* name;
    HaystackKind haystack;
    NeedleKind key, value;
    int k, v, q;
  };
  using enum HaystackKind;
  using enum NeedleKind;
  const std::vector<Niah> niah = {
      {"niah_single_1", noise, words, numbers, 1, 1, 1},    {"niah_single_2", essay, words, numbers, 1, 1, 1},
      {"niah_single_3", essay, words, uuids, 1, 1, 1},      {"niah_multikey_1", essay, words, numbers, 4, 1, 1},
      {"niah_multikey_2", needle, words, numbers, 1, 1, 1}, {"niah_multikey_3", needle, uuids, uuids, 1, 1, 1},
      {"niah_multivalue", essay, words, numbers, 1, 4, 1},  {"niah_multiquery", essay, words, numbers, 1, 1, 4}};
  ASSERT_EQ(ruler_recipes().size(), 11u);
  for (size_t i = 0; i < niah.size(); ++i) {
    const RulerRecipe& r = ruler_recipes()[i];
    SCOPED_TRACE(niah[i].name);
    EXPECT_EQ(std::string(r.name), niah[i].name);
    EXPECT_EQ(r.family, RulerFamily::niah);
    EXPECT_EQ(r.tokens_to_generate, 128);
    EXPECT_EQ(r.haystack, niah[i].haystack);
    EXPECT_EQ(r.key, niah[i].key);
    EXPECT_EQ(r.value, niah[i].value);
    EXPECT_EQ(r.keys, niah[i].k);
    EXPECT_EQ(r.values, niah[i].v);
    EXPECT_EQ(r.queries, niah[i].q);
  }
  const RulerRecipe& vt = ruler_recipe("vt");
  EXPECT_EQ(vt.family, RulerFamily::variable_tracking);
  EXPECT_EQ(vt.tokens_to_generate, 30);
  EXPECT_EQ(vt.chains, 1);
  EXPECT_EQ(vt.hops, 4);
  const RulerRecipe& cwe = ruler_recipe("cwe");
  EXPECT_EQ(cwe.family, RulerFamily::common_words);
  EXPECT_EQ(cwe.tokens_to_generate, 120);
  EXPECT_EQ(cwe.freq_cw, 30);
  EXPECT_EQ(cwe.freq_ucw, 3);
  EXPECT_EQ(cwe.num_cw, 10);
  const RulerRecipe& fwe = ruler_recipe("fwe");
  EXPECT_EQ(fwe.family, RulerFamily::freq_words);
  EXPECT_EQ(fwe.tokens_to_generate, 50);
  EXPECT_EQ(fwe.alpha, 2.0);
}

// One needle sentence of niah.py: "One of the special magic {numbers|uuids} for {key} is: {value}."
struct Needle {
  std::string key, value;
};

std::vector<Needle> needles_in(const std::string& text, const std::string& type_v) {
  std::vector<Needle> needles;
  const std::regex needle("One of the special magic " + type_v + " for (\\S+) is: (\\S+)\\.");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), needle); it != std::sregex_iterator(); ++it)
    needles.push_back({(*it)[1], (*it)[2]});
  return needles;
}

std::string needle_sentence(const std::string& type_v, const Needle& n) {
  return "One of the special magic " + type_v + " for " + n.key + " is: " + n.value + ".";
}

bool matches(const std::string& text, NeedleKind kind) {
  switch (kind) {
    case NeedleKind::numbers:
      return std::regex_match(text, std::regex("[1-9][0-9]{6}"));
    case NeedleKind::words:
      return std::regex_match(text, std::regex("[a-z]{3,}-[a-z]{3,}"));
    case NeedleKind::uuids:
      return std::regex_match(text, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"));
  }
  return false;
}

// The niah prompts of every variant, at a length below RULER's 4K branch and at 4K: the template (singular
// when one answer is asked for), the needles' format and count, the query, the references in the needles of
// the queried keys, the haystack between them.
TEST(Ruler, NiahPromptsFollowTheRecipe) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  for (const RulerRecipe& r : ruler_recipes()) {
    if (r.family != RulerFamily::niah) continue;
    for (const int64_t L : {2048, 4096}) {
      SCOPED_TRACE(std::string(r.name) + " at " + std::to_string(L));
      const bool one = r.values * r.queries == 1;
      const std::string type_v = r.value == NeedleKind::numbers ? "numbers" : "uuids";
      const std::string said = one ? type_v.substr(0, type_v.size() - 1) : type_v;  // "number" when one is asked
      for (const RulerPrompt& p : make_ruler_prompts(r, L, 3, bytes(), sources, RulerChat::base, seed)) {
        const std::string head = one ? "A special magic " + said +
                                           " is hidden within the following text. Make sure to "
                                           "memorize it. I will quiz you about the " +
                                           said + " afterwards.\n"
                                     : "Some special magic " + said +
                                           " are hidden within the following text. Make sure "
                                           "to memorize it. I will quiz you about the " +
                                           said + " afterwards.\n";
        ASSERT_TRUE(starts_with(p.input, head)) << p.input.substr(0, 200);
        const std::string question = one ? "\nWhat is the special magic " + said + " for "
                                         : "\nWhat are all the special magic " + said + " for ";
        const size_t asked = p.input.rfind(question);
        ASSERT_NE(asked, std::string::npos);
        const std::string tail = " mentioned in the provided text?";
        ASSERT_TRUE(ends_with(p.input, tail));
        const std::string query =
            p.input.substr(asked + question.size(), p.input.size() - asked - question.size() - tail.size());
        EXPECT_EQ(p.answer_prefix, " The special magic " + said + " for " + query + " mentioned in the provided text " +
                                       (one ? "is" : "are"));
        // The queried keys: "a", or "a, b, c, and d".
        std::vector<std::string> queries = {query};
        if (r.queries > 1) {
          const std::vector<std::string> last = split(query, ", and ");
          ASSERT_EQ(last.size(), 2u);
          queries = split(last[0], ", ");
          queries.push_back(last[1]);
        }
        ASSERT_EQ(queries.size(), static_cast<size_t>(r.queries));
        const std::string context = p.input.substr(head.size(), asked - head.size());
        const std::vector<Needle> needles = needles_in(context, type_v);
        // The needles of the task: max(k, q) keys with v values each; the needle haystack is all needles.
        std::map<std::string, std::vector<std::string>> by_key;
        for (const Needle& n : needles) by_key[n.key].push_back(n.value);
        for (const std::string& key : queries) ASSERT_EQ(by_key[key].size(), static_cast<size_t>(r.values)) << key;
        std::vector<std::string> expected;
        for (const std::string& key : queries)
          for (const std::string& value : by_key[key]) expected.push_back(value);
        std::vector<std::string> references = p.references;
        std::sort(expected.begin(), expected.end());
        std::sort(references.begin(), references.end());
        EXPECT_EQ(references, expected);  // every reference is the value of a needle of a queried key
        for (const Needle& n : needles) {
          EXPECT_TRUE(matches(n.key, r.key)) << n.key;
          EXPECT_TRUE(matches(n.value, r.value)) << n.value;
        }
        const size_t task_needles = static_cast<size_t>(std::max(r.keys, r.queries) * r.values);
        const std::vector<std::string> lines = split(context, "\n");
        if (r.haystack == HaystackKind::noise) {
          EXPECT_EQ(needles.size(), task_needles);
          for (const std::string& line : lines)
            EXPECT_TRUE(line == kNoise || needles_in(line, type_v).size() == 1) << line;
          EXPECT_EQ(lines.size() - task_needles, static_cast<size_t>(std::count(lines.begin(), lines.end(), kNoise)));
        } else if (r.haystack == HaystackKind::needle) {
          EXPECT_EQ(needles.size(), lines.size());  // distractors are needles of random keys
          EXPECT_GT(needles.size(), task_needles);
        } else {
          EXPECT_EQ(needles.size(), task_needles);
          EXPECT_EQ(lines.size(), 1u);
          // Without its needles the context is the essay's first words, in order, between sentences.
          std::string rest = context;
          for (const Needle& n : needles) {
            const std::string sentence = needle_sentence(type_v, n);
            // Between sentences: after a space that follows the end of a sentence (or of another needle).
            const size_t at = context.find(sentence);
            ASSERT_NE(at, std::string::npos);
            ASSERT_TRUE(at + sentence.size() == context.size() || context[at + sentence.size()] == ' ');
            // Only needles after it: depth 100, after the essay's last words, which are cut anywhere.
            std::string after = context.substr(at + sentence.size());
            for (const Needle& other : needles) {
              const size_t o = after.find(needle_sentence(type_v, other));
              if (o != std::string::npos) after.erase(o, needle_sentence(type_v, other).size());
            }
            const bool last = after.find_first_not_of(' ') == std::string::npos;
            if (at > 0 && !last) {
              ASSERT_EQ(context[at - 1], ' ');
              const size_t before = context.find_last_not_of(' ', at - 1);
              if (before != std::string::npos) {
                EXPECT_NE(std::string(".!?\"')]").find(context[before]), std::string::npos) << "inside a sentence";
              }
            }
            rest.erase(rest.find(sentence), sentence.size());
          }
          const std::vector<std::string> words = split_words(rest);
          ASSERT_GT(words.size(), 0u);
          for (size_t i = 0; i < words.size(); ++i) ASSERT_EQ(words[i], sources.essay[i % sources.essay.size()]);
        }
        EXPECT_EQ(p.tokens, bytes().encode(p.input + p.answer_prefix));
        EXPECT_LE(static_cast<int64_t>(p.tokens.size()) + r.tokens_to_generate, L);
      }
    }
  }
}

// variable_tracking.py: an in-context example (3-letter names, its own value, its answer), then the task's
// chain of 4 hops among noise lines; the references are the chain's variables, in order from the value.
TEST(Ruler, VtPromptFollowsTheRecipe) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  const std::string intro = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
  for (const int64_t L : {2048, 4096}) {
    for (const RulerPrompt& p : make_ruler_prompts(ruler_recipe("vt"), L, 3, bytes(), sources, RulerChat::base, seed)) {
      const std::vector<std::string> parts = split(p.input, intro);
      ASSERT_EQ(parts.size(), 3u) << "the example's text, then the task's";
      EXPECT_EQ(parts[0], "");
      // The example: its question, its answer prefix and its answer, then a blank line.
      const std::smatch example = [&] {
        std::smatch m;
        const std::regex pattern(
            "([^]*)\nQuestion: Find all variables that are assigned the value ([0-9]{5}) in the text above\\. Answer: "
            "According to the chain\\(s\\) of variable assignment in the text above, 5 variables are assigned the "
            "value "
            "\\2, they are:  ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3}) ([A-Z]{3})\n\n");
        EXPECT_TRUE(std::regex_match(parts[1], m, pattern)) << parts[1];
        return m;
      }();
      const std::string question = "\nQuestion: Find all variables that are assigned the value ";
      const size_t asked = parts[2].rfind(question);
      ASSERT_NE(asked, std::string::npos);
      const std::string value = parts[2].substr(asked + question.size(), 5);
      EXPECT_EQ(parts[2].substr(asked), question + value + " in the text above.");
      EXPECT_EQ(p.answer_prefix,
                " Answer: According to the chain(s) of variable assignment in the text above, 5 "
                "variables are assigned the value " +
                    value + ", they are: ");
      // Both contexts: noise lines and the chain's lines, in chain order.
      for (const std::string& context : {std::string(example[1]), parts[2].substr(0, asked)}) {
        const bool is_example = context == std::string(example[1]);
        const std::string chain_value = is_example ? std::string(example[2]) : value;
        std::vector<std::string> chain;
        for (const std::string& line : split(context, "\n")) {
          if (line == kNoise) continue;
          std::smatch m;
          if (chain.empty()) {
            ASSERT_TRUE(std::regex_match(line, m, std::regex("VAR ([A-Z]+) = ([0-9]+)"))) << line;
            EXPECT_EQ(m[2], chain_value);
          } else {
            ASSERT_TRUE(std::regex_match(line, m, std::regex("VAR ([A-Z]+) = VAR ([A-Z]+) "))) << line;
            EXPECT_EQ(m[2], chain.back());
          }
          EXPECT_EQ(m[1].length(), is_example ? 3 : 5);
          chain.push_back(m[1]);
        }
        ASSERT_EQ(chain.size(), 5u);
        if (is_example)
          for (size_t i = 0; i < 5; ++i) EXPECT_EQ(example[3 + i], chain[i]);
        else
          EXPECT_EQ(p.references, chain);
      }
      EXPECT_NE(std::string(example[2]), value);  // the example's value is its own (equal 1 time in 90000)
      EXPECT_LE(static_cast<int64_t>(p.tokens.size()) + 30, L);
    }
  }
}

// The numbered list "1. w 2. w …" as words, checking the numbers run 1, 2, ….
std::vector<std::string> numbered_words(const std::string& list) {
  std::vector<std::string> words;
  const std::vector<std::string> items = split_words(list);
  EXPECT_EQ(items.size() % 2, 0u);
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    EXPECT_EQ(items[i], std::to_string(i / 2 + 1) + ".");
    words.push_back(items[i + 1]);
  }
  return words;
}

// common_words_extraction.py: one worked example (40 words: 10 × 10 + 30 × 3; below 4K 20 words: 10 × 3 +
// 10 × 1), then the list whose 10 common words appear 30 times (below 4K: 6) and the others 3 (below: 1).
TEST(Ruler, CwePromptFollowsTheRecipe) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  const std::string head =
      "Below is a numbered list of words. In these words, some appear more often than others. "
      "Memorize the ones that appear most often.\n";
  const std::string question = "\nQuestion: What are the 10 most common words in the above list?";
  const std::string prefix = " Answer: The top 10 words that appear most often in the list are:";
  // 16K, not 8K, for the full recipe: with the byte tokenizer its 300 entries of the common words fill ~6K
  // tokens, and 8K left room for only a few uncommon words — a draw of long ones could be cut to none.
  for (const int64_t L : {3072, 16384}) {
    const bool shortened = L < 4096;
    for (const RulerPrompt& p :
         make_ruler_prompts(ruler_recipe("cwe"), L, 2, bytes(), sources, RulerChat::base, seed)) {
      EXPECT_EQ(p.answer_prefix, prefix);
      const std::vector<std::string> parts = split(p.input, head);
      ASSERT_EQ(parts.size(), 3u);
      EXPECT_EQ(parts[0], "");
      // The example and its answer.
      const std::vector<std::string> example = split(parts[1], question + prefix + " ");
      ASSERT_EQ(example.size(), 2u);
      ASSERT_TRUE(ends_with(example[1], "\n"));
      const std::vector<std::string> example_answer = numbered_words(example[1]);
      ASSERT_EQ(example_answer.size(), 10u);
      std::map<std::string, int> example_counts;
      for (const std::string& word : numbered_words(example[0])) ++example_counts[word];
      EXPECT_EQ(example_counts.size(), shortened ? 20u : 40u);
      for (const auto& [word, count] : example_counts) {
        const bool common = std::find(example_answer.begin(), example_answer.end(), word) != example_answer.end();
        EXPECT_EQ(count, common ? (shortened ? 3 : 10) : (shortened ? 1 : 3)) << word;
      }
      // The task's list: the references are its most common words.
      ASSERT_TRUE(ends_with(parts[2], question));
      std::map<std::string, int> counts;
      for (const std::string& word : numbered_words(parts[2].substr(0, parts[2].size() - question.size())))
        ++counts[word];
      ASSERT_EQ(p.references.size(), 10u);
      for (const std::string& word : p.references) EXPECT_EQ(counts[word], shortened ? 6 : 30) << word;
      EXPECT_GT(counts.size(), 10u);
      for (const auto& [word, count] : counts)
        if (std::find(p.references.begin(), p.references.end(), word) == p.references.end()) {
          EXPECT_EQ(count, shortened ? 1 : 3) << word;
        }
      EXPECT_LE(static_cast<int64_t>(p.tokens.size()) + 120, L);
    }
  }
}

// freq_words_extraction.py: coded 6-letter words, the k-th most frequent drawn ⌊x/k²⌋ times (x = n/ζ(2)) —
// so k²·count_k lies in (x − k², x] and |k²·count_k − count_1| < k² — the first "...", the next three the
// answer.
TEST(Ruler, FwePromptFollowsTheRecipe) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  const std::string head =
      "Read the following coded text and track the frequency of each coded word. Find the three "
      "most frequently appeared coded words. ";
  const std::string question =
      "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the "
      "three most frequently appeared words in the above coded text?";
  for (const int64_t L : {2048, 4096}) {
    for (const RulerPrompt& p :
         make_ruler_prompts(ruler_recipe("fwe"), L, 2, bytes(), sources, RulerChat::base, seed)) {
      EXPECT_EQ(p.answer_prefix,
                " Answer: According to the coded text above, the three most frequently appeared words are:");
      ASSERT_TRUE(starts_with(p.input, head));
      ASSERT_TRUE(ends_with(p.input, question));
      std::map<std::string, int64_t> counts;
      for (const std::string& word :
           split_words(p.input.substr(head.size(), p.input.size() - head.size() - question.size())))
        ++counts[word];
      std::vector<std::pair<int64_t, std::string>> ranked;
      for (const auto& [word, count] : counts) {
        EXPECT_TRUE(word == "..." || std::regex_match(word, std::regex("[a-z]{6}"))) << word;
        ranked.push_back({count, word});
      }
      std::sort(ranked.rbegin(), ranked.rend());
      ASSERT_GE(ranked.size(), 5u);
      EXPECT_LE(static_cast<int64_t>(ranked.size()), (L - 50) / 50);  // the vocabulary: (L − tokens_to_generate) / 50
      EXPECT_EQ(ranked[0].second, "...");
      ASSERT_EQ(p.references.size(), 3u);
      for (size_t k = 1; k <= 3; ++k) {
        EXPECT_EQ(p.references[k - 1], ranked[k].second);
        EXPECT_GT(ranked[k].first, ranked[k + 1].first) << "the answer's words are strictly the most frequent";
      }
      for (int64_t k = 2; k <= 5; ++k)
        EXPECT_LT(std::abs(k * k * ranked[static_cast<size_t>(k - 1)].first - ranked[0].first), k * k) << k;
      EXPECT_LE(static_cast<int64_t>(p.tokens.size()) + 50, L);
    }
  }
}

// SmolLM2's chat template wraps the task's text (the example of vt and cwe inside the turn, as RULER puts it
// after the model template's opening), and RULER's answer prefix follows the assistant's turn.
TEST(Ruler, ChatTemplateWrapsTheTask) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  const std::string before =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\n";
  const std::string after = "<|im_end|>\n<|im_start|>assistant\n";
  for (const char* task : {"niah_single_1", "vt", "fwe"}) {
    SCOPED_TRACE(task);
    const RulerPrompt p =
        make_ruler_prompts(ruler_recipe(task), 4096, 1, bytes(), sources, RulerChat::smollm2, seed)[0];
    EXPECT_TRUE(starts_with(p.input, before));
    EXPECT_TRUE(ends_with(p.input, after));
    EXPECT_EQ(split(p.input, before).size(), 2u);
  }
}

// Prompts fill their length: tokens + tokens_to_generate ≤ L, and not far below. The fitting finds the largest
// haystack whose draw fits; a later draw of that size differs from it by what it draws, and one that is over
// is shortened by its excess rounded up to a unit. Slack allowed: niah and vt, L/32 (one unit — a 90-byte noise
// line, a needle line — and the keys' lengths, a few hundred tokens; seen ≤ 0.8% of L); cwe and fwe, L/8, for
// their draws' spread is in repeated words: cwe's 10 common words are 300 items (their mean length moves a
// prompt by ~1.5%), fwe's 2nd to 4th coded words are a quarter of its text, so one more token in one of them
// under BPE moves it by several % (seen ≤ 4.4% with the gpt2 fixture).
TEST(Ruler, PromptsFitTheirLength) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  for (const data::Tokenizer* tokenizer : {&bytes(), &gpt2()}) {
    for (const RulerRecipe& r : ruler_recipes()) {
      for (const int64_t L : {16384, 32768}) {
        SCOPED_TRACE(std::string(r.name) + " at " + std::to_string(L) + (tokenizer == &bytes() ? " bytes" : " gpt2"));
        for (const RulerPrompt& p : make_ruler_prompts(r, L, 4, *tokenizer, sources, RulerChat::base, seed)) {
          const int64_t total = static_cast<int64_t>(p.tokens.size()) + r.tokens_to_generate;
          EXPECT_EQ(p.tokens, tokenizer->encode(p.input + p.answer_prefix));
          EXPECT_LE(total, L);
          const bool repeated_words = r.family == RulerFamily::common_words || r.family == RulerFamily::freq_words;
          EXPECT_GE(total, L - (repeated_words ? L / 8 : L / 32));
        }
      }
    }
  }
}

TEST(Ruler, TheSameSeedGivesTheSamePrompts) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  for (const RulerRecipe& r : ruler_recipes()) {
    SCOPED_TRACE(r.name);
    const auto first = make_ruler_prompts(r, 8192, 2, bytes(), sources, RulerChat::base, seed);
    const auto again = make_ruler_prompts(r, 8192, 2, bytes(), sources, RulerChat::base, seed);
    const auto other = make_ruler_prompts(r, 8192, 2, bytes(), sources, RulerChat::base, seed + 1);
    for (size_t n = 0; n < 2; ++n) {
      EXPECT_EQ(first[n].input, again[n].input);
      EXPECT_EQ(first[n].references, again[n].references);
      EXPECT_NE(first[n].input, other[n].input);
    }
    EXPECT_NE(first[0].input, first[1].input);
  }
}

// RULER's string_match_all: the fraction of references in the prediction, case-insensitive; its postprocess.
TEST(Ruler, StringMatchAll) {
  EXPECT_EQ(string_match_all("The numbers are 1234567 and ABC-Def.", {"1234567", "abc-DEF"}), 1.0);
  EXPECT_EQ(string_match_all("only 1234567 here", {"1234567", "7654321"}), 0.5);
  EXPECT_EQ(string_match_all("only 1234567 here", {"1234567", "7654321", "x1", "X2"}), 0.25);
  EXPECT_EQ(string_match_all("", {"1234567"}), 0.0);
  EXPECT_EQ(string_match_all("12345", {"1234567"}), 0.0);  // a reference must be whole
  EXPECT_EQ(ruler_postprocess("  \n 12\x01"
                              "34\t \n"),
            "12\n34");
  // Fresh references: each found exactly when it is put in.
  Rng rng(testing::fresh_seed());
  std::vector<std::string> references;
  for (int i = 0; i < 8; ++i) references.push_back(std::to_string(1000000 + rng.below(9000000)) + "-ZQ");
  std::string prediction;
  int put = 0;
  for (const std::string& reference : references)
    if (rng.below(2) == 1) {
      prediction += " and " + std::string(reference.begin(), reference.end() - 2) + "zq";
      ++put;
    }
  EXPECT_EQ(string_match_all(prediction, references), put / 8.0);
}

// The effective length: the longest length up to which every average is at least the threshold.
TEST(Ruler, EffectiveLength) {
  const std::vector<int64_t> lengths = {4096, 8192, 16384, 32768};
  EXPECT_EQ(effective_length(lengths, {95.5, 93.8, 91.6, 87.4}, kRulerThreshold), 32768);
  EXPECT_EQ(effective_length(lengths, {95.5, 93.8, 84.7, 77.0}, kRulerThreshold), 8192);
  EXPECT_EQ(effective_length(lengths, {95.5, 80.0, 90.0, 90.0}, kRulerThreshold), 4096);  // a dip ends it
  EXPECT_EQ(effective_length(lengths, {82.3, 78.4, 73.7, 69.1}, kRulerThreshold), 0);     // below at the first
  EXPECT_EQ(effective_length(lengths, {85.6, 85.6, 85.5, 90.0}, kRulerThreshold), 8192);  // at the threshold counts
  EXPECT_EQ(effective_length(lengths, {95.5, 93.8, 91.6, 87.4}, 92.0), 8192);
  EXPECT_EQ(kRulerThreshold, 85.6);
}

TEST(Ruler, TaskNamesAndLengths) {
  RulerSettings s;
  EXPECT_TRUE(ruler_task_names(s).empty());
  s.all_tasks = true;
  EXPECT_EQ(ruler_task_names(s).size(), 11u);
  s.tasks = "vt, cwe,niah_multikey_3";
  EXPECT_EQ(ruler_task_names(s), (std::vector<std::string>{"vt", "cwe", "niah_multikey_3"}));
  s.tasks = "vt,qa_1";
  expect_error([&] { ruler_task_names(s); }, "ruler", "SQuAD");
  s.tasks = "qa_2";
  expect_error([&] { ruler_task_names(s); }, "ruler", "HotpotQA");
  s.tasks = "niah";
  expect_error([&] { ruler_task_names(s); }, "ruler", "unknown RULER task 'niah'");
  s.tasks = "vt,vt";
  expect_error([&] { ruler_task_names(s); }, "ruler", "twice");

  EXPECT_EQ(ruler_lengths(s, 16384), (std::vector<int64_t>{4096, 8192, 16384}));
  EXPECT_EQ(ruler_lengths(s, 12288), (std::vector<int64_t>{4096, 8192}));
  EXPECT_EQ(ruler_lengths(s, 3000), (std::vector<int64_t>{3000}));
  s.lengths = "8K,4096";
  EXPECT_EQ(ruler_lengths(s, 8192), (std::vector<int64_t>{4096, 8192}));
  expect_error([&] { ruler_lengths(s, 4096); }, "ruler", "longer than --seq 4096");
  s.lengths = "4K,x";
  expect_error([&] { ruler_lengths(s, 8192); }, "ruler", "'x' is not a number of tokens");

  // `fpdt eval`'s options reach its RULER settings.
  EvalSettings eval;
  const RulerSettings& parsed = eval.ruler;
  OptionSet set("eval", "");
  declare_eval_options(set, eval);
  std::vector<std::string> args = {"--tasks",          "vt,fwe",       "--ruler-samples",   "5",
                                   "--ruler-template", "smollm2-chat", "--ruler-threshold", "50"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  ASSERT_TRUE(set.parse(static_cast<int>(argv.size()), argv.data()));
  EXPECT_EQ(parsed.tasks, "vt,fwe");
  EXPECT_EQ(parsed.samples, 5);
  EXPECT_EQ(parsed.chat, RulerChat::smollm2);
  EXPECT_EQ(parsed.threshold, 50.0);
}

TEST(Ruler, TooShortALengthIsOneError) {
  const RulerSources sources = fresh_sources(1);
  expect_error([&] { make_ruler_prompts(ruler_recipe("vt"), 600, 1, bytes(), sources, RulerChat::base, 1); }, "ruler",
               "use longer --ruler-lengths");
  expect_error([&] { make_ruler_prompts(ruler_recipe("niah_single_1"), 100, 1, bytes(), sources, RulerChat::base, 1); },
               "ruler", "use longer --ruler-lengths");
}

TEST(Ruler, MissingWordListNamesThePackage) {
  const TempDir dir;
  expect_error([&] { load_word_list(dir.file("words")); }, "ruler", dir.file("words"));
  expect_error([&] { load_word_list(dir.file("words")); }, "ruler", "wamerican");
  EXPECT_GT(load_word_list().size(), 10000u);
}

// The default essay: the held-out shard decoded, its documents joined without their end-of-document tokens.
TEST(Ruler, EssayFromTheHeldOutShard) {
  const TempDir dir;
  {
    data::ShardWriter writer(dir.file("val.bin"), static_cast<uint32_t>(bytes().vocab_size()));
    std::vector<int32_t> ids = bytes().encode("First text. It ends");
    ids.push_back(bytes().end_of_document_id());
    const std::vector<int32_t> second = bytes().encode("here.\nSecond  one.");
    ids.insert(ids.end(), second.begin(), second.end());
    writer.append(ids);
    writer.finish();
  }
  const data::ShardReader shard(dir.file("val.bin"));
  RulerSettings s;
  const RulerSources sources = load_ruler_sources(s, bytes(), shard, 1000);
  EXPECT_EQ(sources.essay, (std::vector<std::string>{"First", "text.", "It", "ends", "here.", "Second", "one."}));
  EXPECT_EQ(load_ruler_sources(s, bytes(), shard, 5).essay, (std::vector<std::string>{"First"}));
  s.haystack = dir.file("essay.txt");
  expect_error([&] { load_ruler_sources(s, bytes(), shard, 1000); }, "ruler", "essay.txt");
}

// run_ruler with generators that answer every reference (100 everywhere), none (0), or the first reference
// only (string_match_all's partial credit: 1 / the references' count), and its JSON.
TEST(Ruler, RunScoresFakeGenerators) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  RulerSettings s;
  s.all_tasks = true;
  s.samples = 2;
  s.seed = seed;
  const std::vector<int64_t> lengths = {3072, 8192};
  // The prompts the run will draw (the same seed), and their references.
  std::map<std::vector<int32_t>, std::vector<std::string>> answers;
  for (const int64_t L : lengths)
    for (const RulerRecipe& r : ruler_recipes())
      for (const RulerPrompt& p : make_ruler_prompts(r, L, s.samples, bytes(), sources, s.chat, s.seed))
        answers[p.tokens] = p.references;
  auto answering = [&](bool all) {
    return [&, all](const std::vector<int32_t>& prompt, int64_t max_new_tokens) {
      EXPECT_TRUE(answers.count(prompt));
      const std::vector<std::string>& references = answers[prompt];
      std::string text;
      for (size_t i = 0; i < (all ? references.size() : 1); ++i) text += " " + references[i];
      EXPECT_GT(max_new_tokens, 0);
      return bytes().encode(text);
    };
  };
  const RulerResult right = run_ruler(s, lengths, bytes(), sources, answering(true));
  ASSERT_EQ(right.cells.size(), 22u);
  for (const RulerCell& cell : right.cells) EXPECT_EQ(cell.score, 100.0) << cell.task;
  EXPECT_EQ(right.averages, (std::vector<double>{100.0, 100.0}));
  EXPECT_EQ(right.effective_length, 8192);

  const RulerResult first = run_ruler(s, lengths, bytes(), sources, answering(false));
  for (const RulerCell& cell : first.cells) {
    const RulerRecipe& r = ruler_recipe(cell.task);
    const double references = r.family == RulerFamily::niah                ? r.values * r.queries
                              : r.family == RulerFamily::variable_tracking ? 5
                              : r.family == RulerFamily::common_words      ? 10
                                                                           : 3;
    EXPECT_NEAR(cell.score, 100.0 / references, 1e-9)
        << cell.task;  // a mean of equal fractions: exact but for rounding
  }

  s.threshold = 0.0;
  const RulerResult none = run_ruler(s, lengths, bytes(), sources,
                                     [](const std::vector<int32_t>&, int64_t) { return std::vector<int32_t>{}; });
  for (const RulerCell& cell : none.cells) EXPECT_EQ(cell.score, 0.0);
  EXPECT_EQ(none.effective_length, 0);
  EXPECT_EQ(none.effective_length_at_threshold, 8192);  // 0 ≥ 0 at every length

  const nlohmann::ordered_json json = ruler_json(right, s);
  EXPECT_EQ(json["samples"].size(), 44u);
  EXPECT_EQ(json["effective_length"]["length"], 8192);
  EXPECT_EQ(json["effective_length"]["threshold"], 85.6);
  for (const auto& sample : json["samples"]) {
    EXPECT_LE(sample["prompt_tokens"].get<int64_t>() + ruler_recipe(sample["task"]).tokens_to_generate,
              sample["length"].get<int64_t>());
    EXPECT_EQ(sample["score"], 1.0);
    EXPECT_FALSE(sample["references"].empty());
  }
  const std::vector<std::string> table = ruler_table(right, s);
  EXPECT_EQ(table.size(), 1 + 1 + 11 + 1 + 2u);  // title, header, tasks, average, two effective lengths
}


// A run stopped after some samples (its generator killed mid-answer, its progress file's last line torn) goes
// on from its progress file: only the other prompts are answered, and the result is the uninterrupted run's.
// A file made under another identity, a changed prompt and a garbled line are refused by name.
TEST(Ruler, AStoppedRunGoesOnFromItsProgressFile) {
  const uint64_t seed = testing::fresh_seed();
  const RulerSources sources = fresh_sources(seed);
  RulerSettings s;
  s.tasks = "niah_single_1,niah_multivalue,vt,fwe";
  s.samples = 3;
  s.seed = seed;
  const std::vector<int64_t> lengths = {3072, 4096};
  std::map<std::vector<int32_t>, std::vector<std::string>> references;
  for (const int64_t L : lengths)
    for (const std::string& task : ruler_task_names(s))
      for (const RulerPrompt& p : make_ruler_prompts(ruler_recipe(task), L, s.samples, bytes(), sources, s.chat, seed))
        references[p.tokens] = p.references;
  // An answer that depends on the prompt alone: all of its references or the first one, drawn per prompt.
  int64_t answered = 0, stop_after = -1;
  const GenerateFn generate = [&](const std::vector<int32_t>& prompt, int64_t) {
    if (answered == stop_after) throw std::runtime_error("killed");
    ++answered;
    const std::vector<std::string>& refs = references.at(prompt);
    Rng pick(seed ^ static_cast<uint64_t>(prompt.size()));
    std::string text;
    for (size_t i = 0; i < (pick.below(2) == 0 ? refs.size() : 1); ++i) text += " " + refs[i];
    return bytes().encode(text);
  };
  const RulerResult whole = run_ruler(s, lengths, bytes(), sources, generate);
  const int64_t planned = static_cast<int64_t>(whole.samples.size());
  ASSERT_EQ(planned, 4 * 3 * 2);

  TempDir dir;
  const std::string path = dir.file(kRulerProgressFile);
  const nlohmann::ordered_json identity = {{"checkpoint", "/models/a"}, {"precision", "bf16"}, {"seed", seed}};
  answered = 0;
  stop_after = 1 + static_cast<int64_t>(Rng(seed).below(static_cast<uint64_t>(planned - 2)));
  {
    RulerProgressLog log(path, identity, {});
    EXPECT_THROW(run_ruler(s, lengths, bytes(), sources, generate, {}, path,
                           [&](const RulerSample& sample) { log.append(sample); }),
                 std::runtime_error);
  }
  const std::string torn = "{\"task\":\"vt\",\"len";  // a line cut by the kill
  {
    std::FILE* file = std::fopen(path.c_str(), "a");
    ASSERT_NE(file, nullptr);
    std::fputs(torn.c_str(), file);
    std::fclose(file);
  }
  const std::string text = read_text_file(path, "test", "");
  const std::vector<RulerSample> finished = read_ruler_progress(text, path, identity);
  ASSERT_EQ(static_cast<int64_t>(finished.size()), stop_after);

  answered = 0;
  stop_after = -1;
  std::vector<RulerSample> appended;
  const RulerResult resumed = run_ruler(s, lengths, bytes(), sources, generate, finished, path,
                                        [&](const RulerSample& sample) { appended.push_back(sample); });
  EXPECT_EQ(answered, planned - static_cast<int64_t>(finished.size()));  // the finished ones are not asked again
  EXPECT_EQ(appended.size(), static_cast<size_t>(answered));
  ASSERT_EQ(resumed.samples.size(), whole.samples.size());
  for (size_t i = 0; i < whole.samples.size(); ++i) {
    EXPECT_EQ(resumed.samples[i].task, whole.samples[i].task);
    EXPECT_EQ(resumed.samples[i].index, whole.samples[i].index);
    EXPECT_EQ(resumed.samples[i].prompt_ids, whole.samples[i].prompt_ids);
    EXPECT_EQ(resumed.samples[i].generated_ids, whole.samples[i].generated_ids);
    EXPECT_EQ(resumed.samples[i].prediction, whole.samples[i].prediction);
    EXPECT_EQ(resumed.samples[i].score, whole.samples[i].score);
  }
  for (size_t c = 0; c < whole.cells.size(); ++c) EXPECT_EQ(resumed.cells[c].score, whole.cells[c].score);
  EXPECT_EQ(resumed.averages, whole.averages);

  // The log reopened on the kept samples drops the torn line; appending goes on after them.
  {
    RulerProgressLog log(path, identity, finished);
    log.append(appended.front());
  }
  EXPECT_EQ(read_ruler_progress(read_text_file(path, "test", ""), path, identity).size(), finished.size() + 1);

  nlohmann::ordered_json other = identity;
  other["precision"] = "fp32";
  expect_error([&] { read_ruler_progress(text, path, other); }, "ruler", "precision \"bf16\" there, \"fp32\" now");
  expect_error([&] { read_ruler_progress("{\"step\":1}\n", path, identity); }, "ruler", "not a RULER progress file");
  const size_t second_line = text.find('\n') + 1;
  const std::string garbled = text.substr(0, second_line) + "{\"task\":1}\n" + text.substr(second_line);
  expect_error([&] { read_ruler_progress(garbled, path, identity); }, "ruler", "line 2 is not a RULER sample");
  std::vector<RulerSample> changed = finished;
  changed.back().prompt_ids.back() ^= 1;
  expect_error([&] { run_ruler(s, lengths, bytes(), sources, generate, changed, path); }, "ruler",
               "whose prompt is not the one drawn now");
}

}  // namespace
}  // namespace fpdt::train
