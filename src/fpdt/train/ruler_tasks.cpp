// RULER's synthetic tasks (ruler.h): the recipes' table, their templates (the texts of RULER's
// scripts/data/synthetic/constants.py, exact), the draws of niah, variable tracking, common and frequent
// words, and the fitting of each prompt's haystack to its target length. Random draws come from fpdt's Rng.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/train/ruler.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "ruler";

// RULER's scripts/data/synthetic/constants.py: each family's template and answer prefix.
constexpr const char* kNiahTemplate =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will "
    "quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for "
    "{query} mentioned in the provided text?";
constexpr const char* kNiahPrefix = " The special magic {type_needle_v} for {query} mentioned in the provided text are";
constexpr const char* kVtTemplate =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\nQuestion: "
    "Find all variables that are assigned the value {query} in the text above.";
constexpr const char* kVtPrefix =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned "
    "the value {query}, they are: ";
constexpr const char* kCweTemplate =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that "
    "appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?";
constexpr const char* kCwePrefix = " Answer: The top 10 words that appear most often in the list are:";
constexpr const char* kFweTemplate =
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
    "What are the three most frequently appeared words in the above coded text?";
constexpr const char* kFwePrefix =
    " Answer: According to the coded text above, the three most frequently appeared words are:";

// niah.py's needle, its noise haystack (also variable_tracking.py's), and its depths in percent:
// np.round(np.linspace(0, 100, 40)).
constexpr const char* kNeedle = "One of the special magic {type_needle_v} for {key} is: {value}.";
constexpr const char* kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
constexpr int kDepthCount = 40;

// SmolLM2-Instruct's chat template around one user turn (its default system turn first).
constexpr const char* kSmolLm2Before =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\n";
constexpr const char* kSmolLm2After = "<|im_end|>\n<|im_start|>assistant\n";

std::string str(int64_t value) { return std::to_string(value); }

// Python's str.replace: every occurrence, left to right, the result not searched again.
std::string replace_all(const std::string& text, const std::string& from, const std::string& to) {
  std::string out;
  size_t begin = 0;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, begin)) {
    out.append(text, begin, at - begin).append(to);
    begin = at + from.size();
  }
  return out.append(text, begin);
}

// Python's str.format for fields "{name}" (one pass: text put in is not read again); every field of the
// template must be given.
using Fields = std::vector<std::pair<std::string, std::string>>;
std::string format(const std::string& pattern, const Fields& fields) {
  std::string out;
  size_t begin = 0;
  for (size_t open = pattern.find('{'); open != std::string::npos; open = pattern.find('{', begin)) {
    const size_t close = pattern.find('}', open);
    FPDT_ASSERT(close != std::string::npos);
    const std::string name = pattern.substr(open + 1, close - open - 1);
    const auto field = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == name; });
    FPDT_ASSERT(field != fields.end());
    out.append(pattern, begin, open - begin).append(field->second);
    begin = close + 1;
  }
  return out.append(pattern, begin);
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out.append(i > 0 ? separator : "").append(parts[i]);
  return out;
}

// random.sample(range(n), k): k distinct indices in random order (a partial Fisher–Yates shuffle).
std::vector<int64_t> sample_indices(Rng& rng, int64_t n, int64_t k) {
  FPDT_ASSERT(k <= n);
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t i = 0; i < k; ++i)
    std::swap(all[static_cast<size_t>(i)],
              all[static_cast<size_t>(i + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - i))))]);
  all.resize(static_cast<size_t>(k));
  return all;
}

template <class T>
void shuffle(Rng& rng, std::vector<T>& items) {
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng.below(i)]);
}

std::string random_letters(Rng& rng, char first, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) out.push_back(static_cast<char>(first + rng.below(26)));
  return out;
}

// uuid.UUID(int=getrandbits(128), version=4): the version nibble 4 and the variant bits 10.
std::string random_uuid(Rng& rng) {
  const uint64_t high = (rng.next_u64() & ~0xf000ull) | 0x4000ull;
  const uint64_t low = (rng.next_u64() & ~(3ull << 62)) | (2ull << 62);
  char text[40];
  std::snprintf(text, sizeof text, "%08llx-%04llx-%04llx-%04llx-%012llx", static_cast<unsigned long long>(high >> 32),
                static_cast<unsigned long long>((high >> 16) & 0xffff), static_cast<unsigned long long>(high & 0xffff),
                static_cast<unsigned long long>(low >> 48), static_cast<unsigned long long>(low & 0xffffffffffffull));
  return text;
}

// niah.py's generate_random: a 7-digit number, an adjective-noun pair (here two dictionary words joined by
// '-': the word list has no parts of speech), or a UUID.
std::string random_needle(Rng& rng, NeedleKind kind, const std::vector<std::string>& words) {
  switch (kind) {
    case NeedleKind::numbers:
      return str(1000000 + static_cast<int64_t>(rng.below(9000000)));
    case NeedleKind::words:
      return words[rng.below(words.size())] + "-" + words[rng.below(words.size())];
    case NeedleKind::uuids:
      return random_uuid(rng);
  }
  FPDT_ASSERT(false);
  return {};
}

const char* kind_name(NeedleKind kind) {
  switch (kind) {
    case NeedleKind::numbers:
      return "numbers";
    case NeedleKind::words:
      return "words";
    case NeedleKind::uuids:
      return "uuids";
  }
  return "";
}

// The sentences of whitespace-normalized text: each ends at '.', '!' or '?' (and closing quotes or
// brackets) before a space. (RULER uses NLTK's punkt, which also knows abbreviations such as "Mr.".)
std::vector<std::string> split_sentences(const std::string& text) {
  std::vector<std::string> sentences;
  size_t begin = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '.' && text[i] != '!' && text[i] != '?') continue;
    size_t end = i + 1;
    while (end < text.size() && std::string_view("\"')]").find(text[end]) != std::string_view::npos) ++end;
    if (end < text.size() && text[end] != ' ') continue;
    sentences.push_back(text.substr(begin, end - begin));
    begin = end + 1;
    i = end;
  }
  if (begin < text.size()) sentences.push_back(text.substr(begin));
  return sentences;
}

// The essay's first `words` words (the essay repeated as often as needed) with `needles` put between its
// sentences at depths drawn from RULER's 40 (niah.py: insertion_positions).
std::string essay_context(const std::vector<std::string>& essay, int64_t words, const std::vector<std::string>& needles,
                          Rng& rng) {
  std::string text;
  for (int64_t i = 0; i < words; ++i)
    text.append(i > 0 ? " " : "").append(essay[static_cast<size_t>(i) % essay.size()]);
  const std::vector<std::string> sentences = split_sentences(text);
  const int64_t count = static_cast<int64_t>(sentences.size());
  std::vector<int64_t> positions;
  for (const int64_t depth_index : sample_indices(rng, kDepthCount, static_cast<int64_t>(needles.size()))) {
    const double depth = std::round(100.0 * static_cast<double>(depth_index) / (kDepthCount - 1));
    positions.push_back(static_cast<int64_t>(static_cast<double>(count) * (depth / 100.0)));
  }
  std::sort(positions.begin(), positions.end());
  positions.insert(positions.begin(), 0);
  positions.push_back(count);
  std::vector<std::string> parts;
  for (size_t i = 1; i < positions.size(); ++i) {
    std::vector<std::string> run(sentences.begin() + positions[i - 1], sentences.begin() + positions[i]);
    parts.push_back(join(run, " "));
    if (i - 1 < needles.size()) parts.push_back(needles[i - 1]);
  }
  return join(parts, " ");
}

// `lines` with `needles` inserted at distinct random indices (niah.py: the largest index first), one per line.
std::string line_context(std::vector<std::string> lines, const std::vector<std::string>& needles, Rng& rng) {
  std::vector<int64_t> indices =
      sample_indices(rng, static_cast<int64_t>(lines.size()), static_cast<int64_t>(needles.size()));
  std::sort(indices.rbegin(), indices.rend());
  for (size_t i = 0; i < needles.size(); ++i) lines.insert(lines.begin() + indices[i], needles[i]);
  return join(lines, "\n");
}

// One drawn prompt: the text before the answer prefix, the prefix, the references.
struct Draw {
  std::string input, answer_prefix;
  std::vector<std::string> references;
};

// A task's prompt with `units` of haystack (sentences, essay words, distractor needles, noise lines, distinct
// words), drawn from `rng`.
using DrawFn = std::function<Draw(int64_t units, Rng& rng)>;

// What a task family gives the fitting: its draw, the smallest haystack it can take, and the step RULER
// estimates the tokens per unit at (its `incremental`).
struct TaskDraw {
  DrawFn draw;
  int64_t min_units = 1;
  int64_t max_units = std::numeric_limits<int64_t>::max() / 4;  // cwe: the word list's size
  int64_t estimate_units = 1;
};

struct Wrap {
  std::string before, after;
};
Wrap chat_wrap(RulerChat chat) {
  if (chat == RulerChat::smollm2) return {kSmolLm2Before, kSmolLm2After};
  return {};
}

TaskDraw niah_draw(const RulerRecipe& r, int64_t length, const RulerSources& sources, const Wrap& wrap) {
  const int keys = std::max(r.keys, r.queries);
  std::string task = kNiahTemplate, prefix = kNiahPrefix, type_v = kind_name(r.value);
  if (r.queries * r.values == 1) {  // niah.py: one answer, so the template speaks of one
    for (std::string* text : {&task, &prefix}) {
      *text = replace_all(*text, "Some", "A");
      *text = replace_all(*text, "are all", "is");
      *text = replace_all(*text, "are", "is");
      *text = replace_all(*text, "answers", "answer");
    }
    type_v.pop_back();
  }
  TaskDraw out;
  out.min_units = r.haystack == HaystackKind::essay ? 1 : keys * r.values;
  out.estimate_units = r.haystack == HaystackKind::essay ? 500 : length < 4096 ? 5 : 25;
  out.draw = [&r, &sources, wrap, keys, task, prefix, type_v](int64_t units, Rng& rng) {
    std::vector<std::string> key_list, needles;
    std::vector<std::vector<std::string>> values;
    for (int k = 0; k < keys; ++k) {
      key_list.push_back(random_needle(rng, r.key, sources.words));
      values.emplace_back();
      for (int v = 0; v < r.values; ++v) {
        values.back().push_back(random_needle(rng, r.value, sources.words));
        needles.push_back(
            format(kNeedle,
                   {{"type_needle_v", kind_name(r.value)}, {"key", key_list.back()}, {"value", values.back().back()}}));
      }
    }
    shuffle(rng, needles);
    std::string context;
    if (r.haystack == HaystackKind::essay) {
      context = essay_context(sources.essay, units, needles, rng);
    } else {
      std::vector<std::string> lines(static_cast<size_t>(units), kNoise);
      if (r.haystack == HaystackKind::needle)
        for (std::string& line : lines)
          line = format(kNeedle, {{"type_needle_v", kind_name(r.value)},
                                  {"key", random_needle(rng, r.key, sources.words)},
                                  {"value", random_needle(rng, r.value, sources.words)}});
      context = line_context(std::move(lines), needles, rng);
    }
    Draw d;
    std::vector<std::string> queries;
    for (const int64_t k : sample_indices(rng, keys, r.queries)) {
      queries.push_back(key_list[static_cast<size_t>(k)]);
      for (const std::string& value : values[static_cast<size_t>(k)]) d.references.push_back(value);
    }
    std::string query = queries.back();
    if (queries.size() > 1) query = join({queries.begin(), queries.end() - 1}, ", ") + ", and " + query;
    const Fields fields = {{"type_needle_v", type_v}, {"context", context}, {"query", query}};
    d.input = wrap.before + format(task, fields) + wrap.after;
    d.answer_prefix = format(prefix, fields);
    return d;
  };
  return out;
}

// variable_tracking.py: chains "VAR A = 12345", "VAR B = VAR A ", … among lines of noise, after one worked
// example (its in-context example: 3-letter names, hops ≤ 10, fitted to 500 tokens once per (task, length),
// then given fresh names and a fresh value in every prompt, as randomize_icl does).
struct VtLayout {
  int64_t noises = 0;
  std::vector<std::vector<int64_t>> positions;  // per chain: sorted insertion indices (before shifting)
};

VtLayout vt_layout(int64_t noises, int chains, int hops, Rng& rng) {
  VtLayout layout{noises, {}};
  for (int c = 0; c < chains; ++c) {
    std::vector<int64_t> at = sample_indices(rng, noises + c * (hops + 1), hops + 1);
    std::sort(at.begin(), at.end());
    layout.positions.push_back(at);
  }
  return layout;
}

struct VtChains {
  std::vector<std::vector<std::string>> names;  // per chain: hops + 1 variables
  std::vector<std::string> values;              // per chain
};

VtChains vt_chains(int chains, int hops, int name_letters, Rng& rng) {
  VtChains out;
  std::vector<std::string> seen;
  for (int c = 0; c < chains; ++c) {
    out.names.emplace_back();
    while (out.names.back().size() < static_cast<size_t>(hops + 1)) {
      std::string name = random_letters(rng, 'A', name_letters);
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
      seen.push_back(name);
      out.names.back().push_back(name);
    }
    out.values.push_back(str(10000 + static_cast<int64_t>(rng.below(89999))));  // np.random.randint(10000, 99999)
  }
  return out;
}

std::string vt_context(const VtLayout& layout, const VtChains& chains) {
  std::vector<std::string> lines(static_cast<size_t>(layout.noises), kNoise);
  for (size_t c = 0; c < chains.names.size(); ++c) {
    const std::vector<std::string>& names = chains.names[c];
    for (size_t j = 0; j < names.size(); ++j) {
      const std::string line =
          j == 0 ? "VAR " + names[0] + " = " + chains.values[c] : "VAR " + names[j] + " = VAR " + names[j - 1] + " ";
      lines.insert(lines.begin() + layout.positions[c][j] + static_cast<int64_t>(j), line);
    }
  }
  return replace_all(join(lines, "\n"), ". \n", ".\n");
}

// The task's text with its answer prefix for `chains` (the question asks for chain 0's value).
std::string vt_text(const VtLayout& layout, const VtChains& chains, int hops, std::string* prefix) {
  const Fields fields = {
      {"context", vt_context(layout, chains)}, {"query", chains.values[0]}, {"num_v", str(hops + 1)}};
  if (prefix != nullptr) *prefix = format(kVtPrefix, fields);
  return format(kVtTemplate, fields);
}

// Fits `task` to `budget` tokens: the largest number of units in [min_units, …] whose draw fits, by
// bisection as RULER's generate_samples (upper end 3× the estimate from `estimate_units`), each probe a
// fresh draw. Returns the units (0 when even min_units is over) and the tokens per unit of the estimate.
struct Fit {
  int64_t units = 0;
  double tokens_per_unit = 0.0;
};

int64_t prompt_tokens(const data::Tokenizer& tokenizer, const Draw& d) {
  return static_cast<int64_t>(tokenizer.encode(d.input + d.answer_prefix).size());
}

Fit fit_units(const TaskDraw& task, const data::Tokenizer& tokenizer, int64_t budget, Rng& rng) {
  const int64_t estimate_units = std::min(task.max_units, std::max(task.estimate_units, task.min_units));
  const double per_unit = static_cast<double>(prompt_tokens(tokenizer, task.draw(estimate_units, rng))) /
                          static_cast<double>(estimate_units);
  int64_t low = task.min_units;
  int64_t high = std::min(
      task.max_units, std::max(static_cast<int64_t>(static_cast<double>(budget) / per_unit * 3.0), 2 * estimate_units));
  Fit fit{0, per_unit};
  // Past RULER: an upper end that fits (an estimate inflated by the template's share) is doubled until a draw
  // is over, so the search never stops short of the budget.
  while (prompt_tokens(tokenizer, task.draw(high, rng)) <= budget) {
    fit.units = high;
    if (high == task.max_units) return fit;
    low = high + 1;
    high = std::min(task.max_units, 2 * high);
  }
  while (low <= high) {
    const int64_t mid = low + (high - low) / 2;
    if (prompt_tokens(tokenizer, task.draw(mid, rng)) <= budget) {
      fit.units = mid;
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  return fit;
}

// A draw that fits `budget`: at fit.units, then shortened by the excess (in units, at least one) until it fits.
// (RULER steps back its `incremental`, e.g. 25 sentences; stepping back by the excess keeps prompts closer.)
Draw fitted_draw(const TaskDraw& task, const Fit& fit, const data::Tokenizer& tokenizer, int64_t budget, Rng& rng,
                 const std::string& what, std::vector<int32_t>& tokens) {
  for (int64_t units = fit.units;;) {
    Draw d = task.draw(units, rng);
    tokens = tokenizer.encode(d.input + d.answer_prefix);
    const int64_t excess = static_cast<int64_t>(tokens.size()) - budget;
    if (excess <= 0) return d;
    if (units == task.min_units)
      throw Error(kModule,
                  what + ": a prompt with the smallest haystack is " + str(excess) + " tokens over the " + str(budget) +
                      " the length leaves after tokens_to_generate",
                  "use longer --ruler-lengths");
    const auto step = static_cast<int64_t>(std::ceil(static_cast<double>(excess) / fit.tokens_per_unit));
    units = std::max(task.min_units, units - std::max<int64_t>(1, step));
  }
}

TaskDraw vt_draw(const RulerRecipe& r, int64_t length, const data::Tokenizer& tokenizer, const Wrap& wrap, Rng& rng) {
  // The in-context example (variable_tracking.py's first call: max_seq_length 500, no tokens to generate).
  const int icl_hops = std::min(10, r.hops);
  TaskDraw icl;
  icl.min_units = icl_hops + 1;
  icl.estimate_units = 5;
  icl.draw = [&r, icl_hops](int64_t units, Rng& g) {
    VtChains chains = vt_chains(r.chains, icl_hops, 3, g);
    for (std::string& value : chains.values) value = "12345";
    Draw d;
    d.input = vt_text(vt_layout(units, r.chains, icl_hops, g), chains, icl_hops, &d.answer_prefix);
    return d;
  };
  // An example over 500 tokens at its smallest (a tokenizer of few bytes per token) stays at its smallest, as
  // RULER's fallback to its `incremental` (5 noise lines) does.
  const int64_t icl_units = std::max(icl.min_units, fit_units(icl, tokenizer, 500, rng).units);
  const VtLayout icl_layout = vt_layout(icl_units, r.chains, icl_hops, rng);

  TaskDraw out;
  out.min_units = r.hops + 1;
  out.estimate_units = length < 4096 ? 5 : 10;
  out.draw = [&r, wrap, icl_hops, icl_layout](int64_t units, Rng& g) {
    // The example with fresh names and value (one value for all its chains, as its "12345" was).
    VtChains example = vt_chains(r.chains, icl_hops, 3, g);
    for (std::string& value : example.values) value = example.values[0];
    std::string example_prefix;
    const std::string example_text = vt_text(icl_layout, example, icl_hops, &example_prefix) + example_prefix + " " +
                                     join(example.names[0], " ") + "\n";
    const VtChains chains = vt_chains(r.chains, r.hops, 5, g);
    Draw d;
    d.input = wrap.before + example_text + "\n" +
              vt_text(vt_layout(units, r.chains, r.hops, g), chains, r.hops, &d.answer_prefix) + wrap.after;
    d.references = chains.names[0];
    return d;
  };
  return out;
}

// common_words_extraction.py's get_example: `count` distinct words, the first num_cw of them `common_repeats`
// times, the others `uncommon_repeats` times, shuffled and numbered "1. w 2. w …".
std::pair<std::string, std::vector<std::string>> cwe_list(const std::vector<std::string>& words, int64_t count,
                                                          int common_repeats, int uncommon_repeats, int num_cw,
                                                          Rng& rng) {
  if (count > static_cast<int64_t>(words.size()))
    throw Error(kModule,
                "cwe needs " + str(count) + " distinct words at this length, but the word list has " +
                    str(static_cast<int64_t>(words.size())),
                "use shorter --ruler-lengths for cwe");
  std::vector<std::string> chosen;
  for (const int64_t i : sample_indices(rng, static_cast<int64_t>(words.size()), count))
    chosen.push_back(words[static_cast<size_t>(i)]);
  std::vector<std::string> list;
  for (size_t i = 0; i < chosen.size(); ++i)
    list.insert(list.end(), static_cast<size_t>(static_cast<int64_t>(i) < num_cw ? common_repeats : uncommon_repeats),
                chosen[i]);
  shuffle(rng, list);
  std::string context;
  for (size_t i = 0; i < list.size(); ++i)
    context.append(i > 0 ? " " : "").append(str(static_cast<int64_t>(i) + 1) + ". " + list[i]);
  chosen.resize(static_cast<size_t>(std::min<int64_t>(num_cw, count)));
  return {context, chosen};
}

TaskDraw cwe_draw(const RulerRecipe& r, int64_t length, const RulerSources& sources, const Wrap& wrap) {
  // Below 4K RULER's recipe shortens the example and the repeats (6 and 1) so that the list fits.
  const bool shortened = length < 4096;
  TaskDraw out;
  out.min_units = r.num_cw;
  out.max_units = static_cast<int64_t>(sources.words.size());
  out.estimate_units = 4096;  // common_words_extraction.py estimates its tokens per word at 4096 words
  out.draw = [&r, &sources, wrap, shortened](int64_t units, Rng& rng) {
    const auto [example, example_answer] = shortened ? cwe_list(sources.words, 20, 3, 1, r.num_cw, rng)
                                                     : cwe_list(sources.words, 40, 10, 3, r.num_cw, rng);
    const auto [context, answer] = shortened ? cwe_list(sources.words, units, 6, 1, r.num_cw, rng)
                                             : cwe_list(sources.words, units, r.freq_cw, r.freq_ucw, r.num_cw, rng);
    std::string numbered;
    for (size_t i = 0; i < example_answer.size(); ++i)
      numbered.append(i > 0 ? " " : "").append(str(static_cast<int64_t>(i) + 1) + ". " + example_answer[i]);
    Draw d;
    d.input = wrap.before + format(kCweTemplate, {{"context", example}}) + wrap.after + kCwePrefix + " " + numbered +
              "\n" + wrap.before + format(kCweTemplate, {{"context", context}}) + wrap.after;
    d.answer_prefix = kCwePrefix;
    d.references = answer;
    return d;
  };
  return out;
}

// ζ(s) for s > 1 (Euler–Maclaurin after 16 terms: error below 1e-15 at s = 2).
double riemann_zeta(double s) {
  constexpr int kTerms = 16;
  double sum = 0.0;
  for (int k = 1; k < kTerms; ++k) sum += std::pow(k, -s);
  const double n = kTerms;
  return sum + std::pow(n, 1.0 - s) / (s - 1.0) + 0.5 * std::pow(n, -s) + s * std::pow(n, -s - 1.0) / 12.0 -
         s * (s + 1.0) * (s + 2.0) * std::pow(n, -s - 3.0) / 720.0;
}

TaskDraw fwe_draw(const RulerRecipe& r, int64_t length, const Wrap& wrap) {
  // freq_words_extraction.py: a vocabulary of (L − tokens_to_generate) / 50 coded 6-letter words, the k-th
  // drawn ⌊n·k^−α/ζ(α)⌋ times for n = `units`; the first is "..." (noise), the next three the answer.
  const int64_t vocab_size = (length - r.tokens_to_generate) / 50;
  if (vocab_size < 4)
    throw Error(kModule,
                std::string(r.name) + " at " + str(length) + " tokens has a vocabulary of " + str(vocab_size) +
                    " coded words (L/50), fewer than the 4 its answer needs",
                "use --ruler-lengths of at least " + str(4 * 50 + r.tokens_to_generate));
  const double zeta = riemann_zeta(r.alpha);
  TaskDraw out;
  out.min_units = 1;
  out.estimate_units = std::max<int64_t>(1, (length - r.tokens_to_generate) / 6);
  out.draw = [&r, wrap, vocab_size, zeta](int64_t units, Rng& rng) {
    std::vector<std::string> vocab;
    std::unordered_set<std::string> seen;
    while (static_cast<int64_t>(vocab.size()) < vocab_size) {
      std::string word = random_letters(rng, 'a', 6);
      if (seen.insert(word).second) vocab.push_back(std::move(word));
    }
    vocab[0] = "...";
    std::vector<std::string> text;
    for (int64_t k = 0; k < vocab_size; ++k) {
      const auto count =
          static_cast<int64_t>(static_cast<double>(units) * std::pow(static_cast<double>(k + 1), -r.alpha) / zeta);
      text.insert(text.end(), static_cast<size_t>(count), vocab[static_cast<size_t>(k)]);
    }
    shuffle(rng, text);
    Draw d;
    d.input = wrap.before + format(kFweTemplate, {{"context", join(text, " ")}}) + wrap.after;
    d.answer_prefix = kFwePrefix;
    d.references.assign(vocab.begin() + 1, vocab.begin() + 4);
    return d;
  };
  return out;
}

// The stream of one (task, length): independent of the other tasks and lengths run beside it.
uint64_t stream_seed(uint64_t seed, const std::string& task, int64_t length) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the task's name, then the length and the seed mixed in
  for (const char c : task) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  Rng mix(h ^ (static_cast<uint64_t>(length) * 0x9e3779b97f4a7c15ull) ^ seed);
  return mix.next_u64();
}

}  // namespace

const std::vector<RulerRecipe>& ruler_recipes() {
  using enum HaystackKind;
  using enum NeedleKind;
  auto niah = [](const char* name, HaystackKind haystack, NeedleKind key, NeedleKind value, int k, int v, int q) {
    RulerRecipe r{name, RulerFamily::niah, 128};
    r.haystack = haystack;
    r.key = key;
    r.value = value;
    r.keys = k;
    r.values = v;
    r.queries = q;
    return r;
  };
  static const std::vector<RulerRecipe> recipes = [&] {
    std::vector<RulerRecipe> all = {
        niah("niah_single_1", noise, words, numbers, 1, 1, 1),
        niah("niah_single_2", essay, words, numbers, 1, 1, 1),
        niah("niah_single_3", essay, words, uuids, 1, 1, 1),
        niah("niah_multikey_1", essay, words, numbers, 4, 1, 1),
        niah("niah_multikey_2", needle, words, numbers, 1, 1, 1),
        niah("niah_multikey_3", needle, uuids, uuids, 1, 1, 1),
        niah("niah_multivalue", essay, words, numbers, 1, 4, 1),
        niah("niah_multiquery", essay, words, numbers, 1, 1, 4),
    };
    RulerRecipe vt{"vt", RulerFamily::variable_tracking, 30};
    vt.chains = 1;
    vt.hops = 4;
    RulerRecipe cwe{"cwe", RulerFamily::common_words, 120};
    cwe.freq_cw = 30;
    cwe.freq_ucw = 3;
    cwe.num_cw = 10;
    RulerRecipe fwe{"fwe", RulerFamily::freq_words, 50};
    fwe.alpha = 2.0;
    all.insert(all.end(), {vt, cwe, fwe});
    return all;
  }();
  return recipes;
}

const RulerRecipe& ruler_recipe(const std::string& name) {
  for (const RulerRecipe& recipe : ruler_recipes())
    if (name == recipe.name) return recipe;
  std::string names;
  for (const RulerRecipe& recipe : ruler_recipes()) names += std::string(names.empty() ? "" : ", ") + recipe.name;
  if (name == "qa_1" || name == "qa_2")
    throw Error(kModule,
                name + " is RULER's question answering over " + (name == "qa_1" ? "SQuAD" : "HotpotQA") +
                    ", which needs its downloaded data; fpdt generates only the synthetic tasks",
                "choose among " + names);
  throw Error(kModule, "unknown RULER task '" + name + "'", "choose among " + names);
}

std::vector<RulerPrompt> make_ruler_prompts(const RulerRecipe& recipe, int64_t length_tokens, int64_t samples,
                                            const data::Tokenizer& tokenizer, const RulerSources& sources,
                                            RulerChat chat, uint64_t seed) {
  const std::string what = std::string(recipe.name) + " at " + str(length_tokens) + " tokens";
  const int64_t budget = length_tokens - recipe.tokens_to_generate;
  if (budget <= 0)
    throw Error(
        kModule,
        what + ": the length leaves no room after its " + str(recipe.tokens_to_generate) + " tokens to generate",
        "use longer --ruler-lengths");
  const bool needs_words =
      recipe.family == RulerFamily::common_words ||
      (recipe.family == RulerFamily::niah && (recipe.key == NeedleKind::words || recipe.value == NeedleKind::words));
  FPDT_CHECK(!needs_words || !sources.words.empty(), kModule, what + " needs the word list, and it is empty",
             "install wamerican (" + std::string(kWordListPath) + ")");
  FPDT_CHECK(recipe.family != RulerFamily::niah || recipe.haystack != HaystackKind::essay || !sources.essay.empty(),
             kModule, what + " needs an essay haystack, and it has no words", "give a text file with --ruler-haystack");
  Rng rng(stream_seed(seed, recipe.name, length_tokens));
  const Wrap wrap = chat_wrap(chat);
  TaskDraw task;
  switch (recipe.family) {
    case RulerFamily::niah:
      task = niah_draw(recipe, length_tokens, sources, wrap);
      break;
    case RulerFamily::variable_tracking:
      task = vt_draw(recipe, length_tokens, tokenizer, wrap, rng);
      break;
    case RulerFamily::common_words:
      task = cwe_draw(recipe, length_tokens, sources, wrap);
      break;
    case RulerFamily::freq_words:
      task = fwe_draw(recipe, length_tokens, wrap);
      break;
  }
  const Fit fit = fit_units(task, tokenizer, budget, rng);
  if (fit.units == 0)
    throw Error(kModule,
                what + ": the prompt with its smallest haystack is over the " + str(budget) +
                    " tokens the length leaves after tokens_to_generate",
                "use longer --ruler-lengths");
  std::vector<RulerPrompt> prompts;
  for (int64_t n = 0; n < samples; ++n) {
    RulerPrompt prompt;
    Draw d = fitted_draw(task, fit, tokenizer, budget, rng, what, prompt.tokens);
    prompt.input = std::move(d.input);
    prompt.answer_prefix = std::move(d.answer_prefix);
    prompt.references = std::move(d.references);
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

}  // namespace fpdt::train
