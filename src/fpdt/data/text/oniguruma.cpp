// text::Regex over Oniguruma (oniguruma.h). Each search runs under two of Oniguruma's limits: the
// retries (backtracks) of one match attempt, at Oniguruma's own default that `tokenizers` runs with,
// and the retries of the whole search, which starts small and grows tenfold when a search needs more,
// every limit given charged to one budget per text (kRetriesPerByte), so that no text costs more than
// a bounded number of retries per byte however its matches fall. The supported patterns need a few.
#include "fpdt/data/text/oniguruma.h"

#include <oniguruma.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "fpdt/data/text/unicode.h"

namespace fpdt::data::text {

namespace {

constexpr const char* kModule = "tokenizer";
constexpr unsigned long kRetriesPerMatch = 10'000'000;  // ONIG_DEFAULT_RETRY_LIMIT_IN_MATCH
constexpr unsigned long kFirstSearchRetries = 100;      // a GPT-2 style search takes ~10 (one per alternative)
constexpr uint64_t kRetriesPerByte = 1000;              // the budget of one text, with kBudgetSlack more:
constexpr uint64_t kBudgetSlack = 2 * kRetriesPerMatch;   // room for one search the library accepts (≤ 1.11·10^7)

std::string named(const std::string& pattern) { return "pre-tokenizer regex '" + json::excerpt_text(pattern) + "'"; }

std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar text[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int length = info ? onig_error_code_to_str(text, code, info) : onig_error_code_to_str(text, code);
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(std::max(length, 0)));
}

void initialize_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    if (onig_initialize(encodings, 1) != ONIG_NORMAL)
      throw Error("internal", "Oniguruma failed to initialise its UTF-8 encoding", "");
  });
}

// One OnigMatchParam for the searches of one find_all.
class MatchParam {
 public:
  MatchParam() : param_(onig_new_match_param()) {
    if (!param_) throw Error(kModule, "out of memory for a regex search", "");
    onig_initialize_match_param(param_);
    onig_set_retry_limit_in_match_of_match_param(param_, kRetriesPerMatch);
  }
  ~MatchParam() { onig_free_match_param(param_); }
  MatchParam(const MatchParam&) = delete;
  MatchParam& operator=(const MatchParam&) = delete;
  OnigMatchParam* with_search_limit(unsigned long retries) {
    onig_set_retry_limit_in_search_of_match_param(param_, retries);
    return param_;
  }

 private:
  OnigMatchParam* param_;
};

}  // namespace

void Regex::Free::operator()(re_pattern_buffer* compiled) const { onig_free(compiled); }

Regex::Regex(std::string_view pattern, std::string_view origin) : pattern_(pattern) {
  initialize_once();
  OnigRegex compiled = nullptr;
  OnigErrorInfo info;
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern_.data());
  const int code = onig_new(&compiled, begin, begin + pattern_.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                            ONIG_SYNTAX_DEFAULT, &info);
  if (code != ONIG_NORMAL)
    throw Error(kModule,
                (origin.empty() ? "" : std::string(origin) + ": ") + named(pattern_) + " is not valid: " +
                    onig_message(code, &info),
                "the pattern must be one Hugging Face tokenizers accepts (Oniguruma syntax)");
  compiled_.reset(compiled);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const OnigUChar* end = begin + text.size();
  std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> region(onig_region_new(),
                                                            [](OnigRegion* r) { onig_region_free(r, 1); });
  MatchParam param;
  const uint64_t budget = kRetriesPerByte * text.size() + kBudgetSlack;
  uint64_t charged = 0;  // the search limits handed out so far: at least the retries spent
  size_t search_from = 0;
  bool matched_before = false;
  size_t last_match_end = 0;
  auto backtracks_too_much = [&] {
    return Error(kModule,
                 named(pattern_) + " backtracks too much on a text of " + std::to_string(text.size()) +
                     " bytes, searching from byte " + std::to_string(search_from) + " (limits: " +
                     std::to_string(kRetriesPerMatch) + " retries at one position, " + std::to_string(kRetriesPerByte) +
                     " per byte of the text)",
                 "the pattern has nested or ambiguous repetitions; GPT-2, Llama 3 and Qwen2 patterns do not");
  };
  while (search_from <= text.size()) {
    int found = ONIGERR_RETRY_LIMIT_IN_SEARCH_OVER;
    for (unsigned long limit = kFirstSearchRetries; found == ONIGERR_RETRY_LIMIT_IN_SEARCH_OVER; limit *= 10) {
      if (charged + limit > budget) throw backtracks_too_much();
      charged += limit;
      found = onig_search_with_param(compiled_.get(), begin, end, begin + search_from, end, region.get(),
                                     ONIG_OPTION_NONE, param.with_search_limit(limit));
    }
    if (found == ONIG_MISMATCH) break;
    if (found == ONIGERR_RETRY_LIMIT_IN_MATCH_OVER) throw backtracks_too_much();
    if (found < 0)
      throw Error(kModule, named(pattern_) + " failed on a text of " + std::to_string(text.size()) +
                               " bytes: " + onig_message(found, nullptr), "");
    const size_t match_begin = static_cast<size_t>(region->beg[0]), match_end = static_cast<size_t>(region->end[0]);
    if (match_begin == match_end && matched_before && last_match_end == match_end) {
      // An empty match right where the previous one ended: move on one code point and search again.
      if (search_from < text.size()) {
        next_code_point(text, search_from);
      } else {
        ++search_from;
      }
      continue;
    }
    matches.emplace_back(match_begin, match_end);
    search_from = match_end;
    matched_before = true;
    last_match_end = match_end;
  }
  return matches;
}

}  // namespace fpdt::data::text
