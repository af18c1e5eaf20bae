// The regex engine of regex.h: a recursive-descent parser into a node tree, and a backtracking matcher
// that passes "what must match next" as a chain of continuations on the stack. Repetitions of one
// character class (the common case: \p{L}+, \s+) count forward and give back without recursing per
// character, so long runs of letters or spaces do not deepen the stack.
#include "fpdt/train/text/regex.h"

#include <cctype>
#include <cstdint>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "fpdt/train/text/unicode.h"

namespace fpdt::train::text {

namespace {
constexpr const char* kModule = "tokenizer";
constexpr size_t kUnbounded = SIZE_MAX;
// Bounds that turn a pathological pattern into an error instead of a hang or a stack overflow:
// nested match calls (each a few hundred bytes of stack; repetitions of a group nest one level per
// repetition) and match steps per text byte (the supported patterns take about ten).
constexpr int kMaxMatchDepth = 5000;
constexpr uint64_t kMaxStepsPerByte = 1000;
}  // namespace

// One code point test: a union of items, optionally negated.
struct CharClass {
  struct Item {
    enum Kind : uint8_t { range, categories, space, not_space, not_categories } kind;
    char32_t first = 0, last = 0;
    uint32_t category_mask = 0;  // bit c ↔ GeneralCategory c
  };
  bool negated = false;
  std::vector<Item> items;

  bool matches(char32_t cp) const {
    bool hit = false;
    for (const Item& item : items) {
      switch (item.kind) {
        case Item::range: hit = cp >= item.first && cp <= item.last; break;
        case Item::categories: hit = (item.category_mask >> static_cast<int>(general_category(cp))) & 1u; break;
        case Item::not_categories: hit = !((item.category_mask >> static_cast<int>(general_category(cp))) & 1u); break;
        case Item::space: hit = is_white_space(cp); break;
        case Item::not_space: hit = !is_white_space(cp); break;
      }
      if (hit) break;
    }
    return hit != negated;
  }
};

struct Regex::Node {
  enum Kind : uint8_t { char_class, sequence, alternation, repeat, look_ahead, negative_look_ahead } kind;
  CharClass char_class_;
  std::vector<std::unique_ptr<Node>> children;  // sequence/alternation: all; repeat/look-ahead: one
  size_t min = 0, max = 0;                      // repeat bounds (max may be kUnbounded)
  bool greedy = true;
};

namespace {

using Node = Regex::Node;

// ---------------------------------------------------------------------------------------------
// Parser

class Parser {
 public:
  Parser(std::string_view pattern, std::string_view origin) : pattern_(pattern), origin_(origin) {}

  std::unique_ptr<Node> parse() {
    auto root = parse_alternation();
    if (pos_ != pattern_.size()) fail("unbalanced ')'");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(kModule,
                (origin_.empty() ? "" : std::string(origin_) + ": ") + "pre-tokenizer regex '" + json::excerpt_text(pattern_) +
                    "' at offset " + std::to_string(pos_) + ": " + what,
                "fpdt's regex engine supports the constructs of GPT-2, Llama 3 and Qwen2 patterns");
  }
  bool at_end() const { return pos_ >= pattern_.size(); }
  char peek() const { return pattern_[pos_]; }
  bool accept(std::string_view token) {
    if (pattern_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  char32_t next_literal() {
    if (static_cast<unsigned char>(pattern_[pos_]) < 0x80) return static_cast<unsigned char>(pattern_[pos_++]);
    if (first_invalid_utf8(pattern_.substr(pos_, 4)) == 0) fail("the pattern is not valid UTF-8");
    return next_code_point(pattern_, pos_);
  }

  std::unique_ptr<Node> make(Node::Kind kind) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    return node;
  }

  std::unique_ptr<Node> parse_alternation() {
    auto first = parse_sequence();
    if (at_end() || peek() != '|') return first;
    auto alternation = make(Node::alternation);
    alternation->children.push_back(std::move(first));
    while (accept("|")) alternation->children.push_back(parse_sequence());
    return alternation;
  }

  std::unique_ptr<Node> parse_sequence() {
    auto sequence = make(Node::sequence);
    const bool saved_ignore_case = ignore_case_;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (accept("(?i)")) {  // case-insensitive for the rest of the enclosing group
        ignore_case_ = true;
        continue;
      }
      auto atom = parse_atom();
      sequence->children.push_back(parse_quantifier(std::move(atom)));
    }
    ignore_case_ = saved_ignore_case;
    if (sequence->children.size() == 1) return std::move(sequence->children[0]);
    return sequence;
  }

  std::unique_ptr<Node> parse_quantifier(std::unique_ptr<Node> atom) {
    if (at_end()) return atom;
    size_t min = 0, max = 0;
    const char c = peek();
    if (c == '?') min = 0, max = 1, ++pos_;
    else if (c == '*') min = 0, max = kUnbounded, ++pos_;
    else if (c == '+') min = 1, max = kUnbounded, ++pos_;
    else if (c == '{') {
      ++pos_;
      min = parse_number();
      max = min;
      if (accept(",")) max = (!at_end() && peek() == '}') ? kUnbounded : parse_number();
      if (!accept("}")) fail("expected '}' to close a {m,n} quantifier");
      if (max < min) fail("a {m,n} quantifier with n < m");
    } else {
      return atom;
    }
    auto repeat = make(Node::repeat);
    repeat->min = min;
    repeat->max = max;
    if (accept("?")) repeat->greedy = false;
    else if (!at_end() && peek() == '+') fail("possessive quantifiers are not supported");
    if (!at_end() && (peek() == '?' || peek() == '*' || peek() == '+' || peek() == '{'))
      fail("a quantifier on a quantifier is not supported");
    repeat->children.push_back(std::move(atom));
    return repeat;
  }

  size_t parse_number() {
    size_t value = 0, digits = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      value = value * 10 + static_cast<size_t>(peek() - '0');
      if (value > 100000) fail("a repetition count above 100000");
      ++pos_, ++digits;
    }
    if (digits == 0) fail("expected a number in a {m,n} quantifier");
    return value;
  }

  std::unique_ptr<Node> parse_group() {  // after '('
    std::unique_ptr<Node> group;
    const bool saved_ignore_case = ignore_case_;
    Node::Kind look = Node::sequence;
    if (accept("?:")) {
    } else if (accept("?i:")) {
      ignore_case_ = true;
    } else if (accept("?-i:")) {
      ignore_case_ = false;
    } else if (accept("?=")) {
      look = Node::look_ahead;
    } else if (accept("?!")) {
      look = Node::negative_look_ahead;
    } else if (!at_end() && peek() == '?') {
      fail("this group kind (lookbehind, named, atomic or flags other than i) is not supported");
    }
    group = parse_alternation();
    ignore_case_ = saved_ignore_case;
    if (!accept(")")) fail("missing ')'");
    if (look == Node::sequence) return group;
    auto node = make(look);
    node->children.push_back(std::move(group));
    return node;
  }

  std::unique_ptr<Node> class_node(CharClass char_class) {
    auto node = make(Node::char_class);
    node->char_class_ = std::move(char_class);
    return node;
  }

  std::unique_ptr<Node> parse_atom() {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      return parse_group();
    }
    if (c == '[') {
      ++pos_;
      return class_node(parse_class());
    }
    if (c == '.') {  // any code point but '\n' (Oniguruma's default)
      ++pos_;
      CharClass any;
      any.negated = true;
      any.items.push_back({CharClass::Item::range, '\n', '\n', 0});
      return class_node(std::move(any));
    }
    if (c == '^' || c == '$') fail("anchors are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    CharClass single;
    if (c == '\\') {
      ++pos_;
      add_escape(single, /*in_class=*/false);
    } else {
      add_literal(single, next_literal());
    }
    return class_node(std::move(single));
  }

  void add_literal(CharClass& out, char32_t cp) {
    if (!ignore_case_) {
      out.items.push_back({CharClass::Item::range, cp, cp, 0});
      return;
    }
    const bool letter = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    if (!letter) {
      if (cp >= 0x80) fail("case-insensitive matching of a non-ASCII character is not supported");
      out.items.push_back({CharClass::Item::range, cp, cp, 0});
      return;
    }
    const char32_t lower = cp | 0x20, upper = lower & ~char32_t{0x20};
    out.items.push_back({CharClass::Item::range, lower, lower, 0});
    out.items.push_back({CharClass::Item::range, upper, upper, 0});
    // Simple case folds onto ASCII letters (CaseFolding.txt; checked by tools/make_unicode_tables.py).
    if (lower == 's') out.items.push_back({CharClass::Item::range, 0x017F, 0x017F, 0});
    if (lower == 'k') out.items.push_back({CharClass::Item::range, 0x212A, 0x212A, 0});
  }

  uint32_t parse_property(bool& negated) {  // after \p or \P
    if (!accept("{")) fail("expected '{' after \\p");
    if (accept("^")) negated = !negated;
    const size_t end = pattern_.find('}', pos_);
    if (end == std::string_view::npos) fail("missing '}' after \\p{");
    const std::string_view name = pattern_.substr(pos_, end - pos_);
    static constexpr const char* kNames[kGeneralCategoryCount] = {
        "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
        "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
    uint32_t mask = 0;
    for (int i = 0; i < kGeneralCategoryCount; ++i) {
      const std::string_view category = kNames[i];
      if (category == name || (name.size() == 1 && category[0] == name[0])) mask |= 1u << i;
    }
    if (mask == 0) fail("unsupported property \\p{" + json::excerpt_text(name, 40) + "} (general categories only, e.g. L, Lu, N, P)");
    pos_ = end + 1;
    return mask;
  }

  // After a backslash: appends the escape's items to `out`.
  void add_escape(CharClass& out, bool in_class) {
    if (at_end()) fail("the pattern ends with a backslash");
    const char c = pattern_[pos_++];
    using Item = CharClass::Item;
    switch (c) {
      case 's': out.items.push_back({Item::space}); return;
      case 'S': out.items.push_back({Item::not_space}); return;
      case 'd': out.items.push_back({Item::categories, 0, 0, 1u << static_cast<int>(GeneralCategory::Nd)}); return;
      case 'D': out.items.push_back({Item::not_categories, 0, 0, 1u << static_cast<int>(GeneralCategory::Nd)}); return;
      case 'p':
      case 'P': {
        bool negated = c == 'P';
        const uint32_t mask = parse_property(negated);
        out.items.push_back({negated ? Item::not_categories : Item::categories, 0, 0, mask});
        return;
      }
      case 'r': add_literal(out, '\r'); return;
      case 'n': add_literal(out, '\n'); return;
      case 't': add_literal(out, '\t'); return;
      case 'f': add_literal(out, '\f'); return;
      case 'v': add_literal(out, '\v'); return;
      case 'x': {
        char32_t value = 0;
        const bool braced = accept("{");
        size_t digits = 0;
        while (!at_end() && std::isxdigit(static_cast<unsigned char>(peek())) && (braced || digits < 2)) {
          const char h = peek();
          value = value * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
          ++pos_, ++digits;
        }
        if (digits == 0 || (braced && !accept("}")) || value > 0x10FFFF) fail("a bad \\x escape");
        add_literal(out, value);
        return;
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(c)))
          fail(std::string("the escape \\") + c + " is not supported" + (in_class ? " in a class" : ""));
        add_literal(out, static_cast<unsigned char>(c));  // an escaped punctuation character
    }
  }

  CharClass parse_class() {  // after '['
    CharClass out;
    if (accept("^")) out.negated = true;
    bool first = true;
    while (true) {
      if (at_end()) fail("missing ']'");
      if (peek() == ']' && !first) {
        ++pos_;
        return out;
      }
      first = false;
      if (accept("[") || accept("&&")) fail("nested classes and class intersections are not supported");
      const size_t items_before = out.items.size();
      char32_t low;
      if (peek() == '\\') {
        ++pos_;
        add_escape(out, /*in_class=*/true);
        const bool single = out.items.size() == items_before + 1 && out.items.back().kind == CharClass::Item::range &&
                            out.items.back().first == out.items.back().last;
        if (!single || ignore_case_) continue;
        low = out.items.back().first;
      } else {
        low = next_literal();
        add_literal(out, low);
      }
      if (pattern_.substr(pos_, 1) == "-" && pattern_.substr(pos_ + 1, 1) != "]" && pos_ + 1 < pattern_.size()) {
        if (ignore_case_) fail("case-insensitive class ranges are not supported");
        ++pos_;
        char32_t high;
        if (peek() == '\\') {
          ++pos_;
          CharClass end;
          add_escape(end, true);
          if (end.items.size() != 1 || end.items[0].kind != CharClass::Item::range) fail("a class range must end in a character");
          high = end.items[0].first;
        } else {
          high = next_literal();
        }
        if (high < low) fail("a class range out of order");
        out.items.back().last = high;
      }
    }
  }

  std::string_view pattern_;
  std::string_view origin_;
  size_t pos_ = 0;
  bool ignore_case_ = false;
};

// ---------------------------------------------------------------------------------------------
// Matcher

// "Then match this": the rest of a sequence, the next repetition, or the end of the match.
struct Continuation {
  enum Kind : uint8_t { sequence_rest, repeat_next, accept } kind;
  const Node* node = nullptr;
  size_t index = 0;           // sequence_rest: next child; repeat_next: repetitions done
  size_t iteration_start = 0; // repeat_next: where the last repetition began (stops empty loops)
  const Continuation* next = nullptr;
  size_t* end = nullptr;      // accept: where the match ended
};

class Matcher {
 public:
  Matcher(std::string_view text, std::string_view pattern)
      : text_(text), pattern_(pattern), step_budget_(kMaxStepsPerByte * (text.size() + 1000)) {}

  bool match(const Node& node, size_t pos, const Continuation* then) {
    if (++steps_ > step_budget_)
      throw Error(kModule, "pre-tokenizer regex '" + json::excerpt_text(pattern_) + "' backtracks too much on a text of " +
                               std::to_string(text_.size()) + " bytes (more than " +
                               std::to_string(kMaxStepsPerByte) + " steps per byte)",
                  "the pattern has nested or ambiguous repetitions; GPT-2, Llama 3 and Qwen2 patterns do not");
    if (depth_ >= kMaxMatchDepth)
      throw Error(kModule, "pre-tokenizer regex '" + json::excerpt_text(pattern_) + "' nests more than " +
                               std::to_string(kMaxMatchDepth) + " repetitions of a group on this text",
                  "repeat single characters or classes (e.g. \\p{L}+) rather than groups");
    ++depth_;
    const bool matched = match_node(node, pos, then);
    --depth_;
    return matched;
  }

 private:
  bool match_node(const Node& node, size_t pos, const Continuation* then) {
    switch (node.kind) {
      case Node::char_class: {
        if (pos >= text_.size()) return false;
        size_t after = pos;
        if (!node.char_class_.matches(next_code_point(text_, after))) return false;
        return proceed(then, after);
      }
      case Node::sequence: return match_sequence(node, 0, pos, then);
      case Node::alternation:
        for (const auto& child : node.children)
          if (match(*child, pos, then)) return true;
        return false;
      case Node::repeat:
        if (node.children[0]->kind == Node::char_class) return match_class_repeat(node, pos, then);
        return match_repeat(node, 0, pos, then);
      case Node::look_ahead:
      case Node::negative_look_ahead: {
        size_t ignored = 0;
        const Continuation done{Continuation::accept, nullptr, 0, 0, nullptr, &ignored};
        const bool found = match(*node.children[0], pos, &done);
        return found == (node.kind == Node::look_ahead) && proceed(then, pos);
      }
    }
    return false;
  }

  bool proceed(const Continuation* then, size_t pos) {
    switch (then->kind) {
      case Continuation::accept: *then->end = pos; return true;
      case Continuation::sequence_rest: return match_sequence(*then->node, then->index, pos, then->next);
      case Continuation::repeat_next:
        if (pos == then->iteration_start) return proceed(then->next, pos);  // an empty repetition ends the loop
        return match_repeat(*then->node, then->index, pos, then->next);
    }
    return false;
  }

  bool match_sequence(const Node& node, size_t index, size_t pos, const Continuation* then) {
    if (index == node.children.size()) return proceed(then, pos);
    const Continuation rest{Continuation::sequence_rest, &node, index + 1, 0, then, nullptr};
    return match(*node.children[index], pos, &rest);
  }

  // A repetition of any sub-pattern: one recursion level per repetition.
  bool match_repeat(const Node& node, size_t done, size_t pos, const Continuation* then) {
    const Continuation again{Continuation::repeat_next, &node, done + 1, pos, then, nullptr};
    const bool may_stop = done >= node.min;
    const bool may_go_on = done < node.max;
    if (!node.greedy && may_stop && proceed(then, pos)) return true;
    if (may_go_on && match(*node.children[0], pos, &again)) return true;
    return node.greedy && may_stop && proceed(then, pos);
  }

  // A repetition of one character class: count forward, then give back one code point at a time.
  bool match_class_repeat(const Node& node, size_t pos, const Continuation* then) {
    const CharClass& char_class = node.children[0]->char_class_;
    size_t count = 0, end = pos;
    if (node.greedy) {
      while (count < node.max && end < text_.size()) {
        size_t after = end;
        if (!char_class.matches(next_code_point(text_, after))) break;
        end = after, ++count;
      }
      while (true) {
        if (count >= node.min && proceed(then, end)) return true;
        if (count == 0 || count <= node.min) return false;
        end = previous_boundary(text_, end), --count;
      }
    }
    while (true) {
      if (count >= node.min && proceed(then, end)) return true;
      if (count == node.max || end >= text_.size()) return false;
      size_t after = end;
      if (!char_class.matches(next_code_point(text_, after))) return false;
      end = after, ++count;
    }
  }

  std::string_view text_;
  std::string_view pattern_;
  uint64_t step_budget_;
  uint64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

Regex::Regex(std::string_view pattern, std::string_view origin)
    : pattern_(pattern), root_(Parser(pattern, origin).parse()) {}
Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  Matcher matcher(text, pattern_);
  size_t search_from = 0;
  bool matched_before = false;
  size_t last_match_end = 0;
  while (search_from <= text.size()) {
    // The leftmost match at a code point boundary at or after search_from.
    size_t begin = search_from, end = 0;
    const Continuation done{Continuation::accept, nullptr, 0, 0, nullptr, &end};
    bool found = false;
    for (; begin <= text.size(); ++begin) {
      if (begin < text.size() && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) continue;
      if ((found = matcher.match(*root_, begin, &done))) break;
    }
    if (!found) break;
    if (begin == end && matched_before && last_match_end == end) {
      // An empty match right where the previous one ended: move on one code point and search again.
      if (search_from < text.size()) next_code_point(text, search_from);
      else ++search_from;
      continue;
    }
    matches.emplace_back(begin, end);
    search_from = end;
    matched_before = true;
    last_match_end = end;
  }
  return matches;
}

}  // namespace fpdt::train::text
