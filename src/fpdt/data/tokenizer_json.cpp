// Reading a tokenizer: tokenizer.json (the BPE model, added tokens, normalizer, pre-tokenizers,
// decoder; what fpdt does not implement refused, naming the field) and tokenizer_config.json (the
// end-of-document, begin and padding tokens) into Tokenizer::Impl's tables (tokenizer_impl.h); the byte
// tokenizer's tokenizer.json; load, from_json, bytes and save.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "fpdt/base/error.h"
#include "fpdt/base/hash.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/json.h"
#include "fpdt/data/text/byte_level.h"
#include "fpdt/data/text/normalize.h"
#include "fpdt/data/text/oniguruma.h"
#include "fpdt/data/text/unicode.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/data/tokenizer_impl.h"

namespace fpdt::data {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using text::ByteAlphabet;
using text::byte_alphabet;
using tokenizer_detail::kModule;

// The pattern the ByteLevel pre-tokenizer splits with when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Largest vocabulary (1 + the largest id) accepted: real ones are ≤ 256K; this bounds the id table.
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

bool first_invalid_utf8_in(std::string_view text) { return text::first_invalid_utf8(text) != text.size(); }

// The byte tokenizer's tokenizer.json: ids 0..255 for the bytes (through the byte-level alphabet, no
// merges), and <|eod|> = 256, special.
const std::string& byte_tokenizer_json() {
  static const std::string text = [] {
    const ByteAlphabet& alphabet = byte_alphabet();
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    for (int b = 0; b < 256; ++b) vocab[alphabet.byte_to_utf8[b]] = b;
    const nlohmann::ordered_json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
    const nlohmann::ordered_json root = {
        {"version", "1.0"},
        {"truncation", nullptr},
        {"padding", nullptr},
        {"added_tokens",
         {{{"id", kEndOfDocumentId}, {"content", kEndOfDocumentName}, {"single_word", false}, {"lstrip", false},
           {"rstrip", false}, {"normalized", false}, {"special", true}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer", byte_level},
        {"post_processor", nullptr},
        {"decoder", byte_level},
        {"model",
         {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
          {"vocab", vocab}, {"merges", nlohmann::ordered_json::array()}}}};
    return root.dump(2) + "\n";
  }();
  return text;
}


bool flag(const json& node, const char* key, bool fallback = false) {
  const auto it = node.find(key);
  return it == node.end() || it->is_null() ? fallback : it->get<bool>();
}

std::string optional_string(const json& node, const char* key) {
  const auto it = node.find(key);
  return it == node.end() || it->is_null() ? std::string() : it->get<std::string>();
}

// A token of tokenizer_config.json: a string or {"content": "..."}; "" when absent or neither.
std::string config_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && it->at("content").is_string())
    return it->at("content").get<std::string>();
  return "";
}

}  // namespace

void Tokenizer::Impl::parse_pre_tokenizer(const json& node, const std::string& where) {
  if (node.is_null()) return;
  const std::string type = node.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& step : node.at("pretokenizers")) parse_pre_tokenizer(step, where + ".pretokenizers[]");
    return;
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::byte_level;
    step.add_prefix_space = flag(node, "add_prefix_space");
    if (flag(node, "use_regex", true)) step.regex = std::make_unique<text::Regex>(kGpt2Pattern);
  } else if (type == "Split") {
    const json& pattern = node.at("pattern");
    if (pattern.contains("Regex"))
      step.regex = std::make_unique<text::Regex>(pattern.at("Regex").get<std::string>(), origin + " " + where + ".pattern");
    else step.literal = pattern.at("String").get<std::string>();
    const std::string behavior = node.at("behavior").get<std::string>();
    if (behavior == "Removed") step.behavior = PreTokenizerStep::removed;
    else if (behavior == "Isolated") step.behavior = PreTokenizerStep::isolated;
    else if (behavior == "MergedWithPrevious") step.behavior = PreTokenizerStep::merged_with_previous;
    else if (behavior == "MergedWithNext") step.behavior = PreTokenizerStep::merged_with_next;
    else if (behavior == "Contiguous") step.behavior = PreTokenizerStep::contiguous;
    else fail(where + ".behavior '" + fpdt::json::excerpt_text(behavior) + "' is not a split behaviour");
    step.invert = flag(node, "invert");
  } else {
    fail(where + " of type '" + fpdt::json::excerpt_text(type) + "' is not supported (ByteLevel, Split and Sequence are)");
  }
  if (step.regex) needs_utf8 = true;
  pre_tokenizers.push_back(std::move(step));
}

void Tokenizer::Impl::parse_model(const json& model) {
  const std::string type = model.contains("type") ? model.at("type").get<std::string>() : (model.contains("merges") ? "BPE" : "?");
  if (type != "BPE")
    fail("model type '" + fpdt::json::excerpt_text(type) + "' is not supported (only BPE is)",
         "fpdt reads byte-level BPE tokenizers (GPT-2, Llama 3, Qwen2); WordPiece, Unigram and WordLevel "
         "tokenizers are not implemented — use the byte tokenizer or a BPE tokenizer.json");
  if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout").get<double>() != 0.0)
    fail("model.dropout is set: BPE dropout is random, so the ids would not be reproducible",
         "use a tokenizer.json with \"dropout\": null");
  ignore_merges = flag(model, "ignore_merges");
  fuse_unk = flag(model, "fuse_unk");
  byte_fallback = flag(model, "byte_fallback");
  continuing_subword_prefix = optional_string(model, "continuing_subword_prefix");
  end_of_word_suffix = optional_string(model, "end_of_word_suffix");
  for (const auto& [token, id] : model.at("vocab").items()) {
    const int64_t value = fpdt::json::integer<int64_t>(
        id, origin + " is not a valid tokenizer.json: model.vocab['" + fpdt::json::excerpt_text(token) + "']", kModule);
    if (value < 0 || value > INT32_MAX - 1) fail("model.vocab['" + fpdt::json::excerpt_text(token) + "'] = " + std::to_string(value) + " is not a valid id");
    vocab[token] = static_cast<int32_t>(value);
  }
  const std::string unk = optional_string(model, "unk_token");
  if (!unk.empty()) {
    const auto it = vocab.find(unk);
    if (it == vocab.end()) fail("model.unk_token '" + fpdt::json::excerpt_text(unk) + "' is not in the vocabulary", "fix the tokenizer.json");
    unk_id = it->second;
  }
  const json& merge_list = model.at("merges");
  int32_t rank = 0;
  const size_t prefix = continuing_subword_prefix.size();
  for (const json& merge : merge_list) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string line = merge.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        fail("model.merges[" + std::to_string(rank) + "] '" + fpdt::json::excerpt_text(line) + "' is not two tokens separated by one space",
             "fix the tokenizer.json");
      left = line.substr(0, space), right = line.substr(space + 1);
    } else {
      if (!merge.is_array() || merge.size() != 2) fail("model.merges[" + std::to_string(rank) + "] is not a pair", "fix the tokenizer.json");
      left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
    }
    const std::string merged = left + (right.size() >= prefix ? right.substr(prefix) : right);
    const auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(merged);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end())
      fail("model.merges[" + std::to_string(rank) + "] ('" + fpdt::json::excerpt_text(left) + "', '" + fpdt::json::excerpt_text(right) + "') uses a token that is not in the vocabulary",
           "fix the tokenizer.json");
    merges[(uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second)] = {rank, m->second};  // a later duplicate wins, as in the library
    ++rank;
  }
}

void Tokenizer::Impl::parse(const json& root) {
  if (!root.is_object()) fail("is not a JSON object", "pass a Hugging Face tokenizer.json");
  if (!root.contains("model")) fail("has no \"model\"", "pass a Hugging Face tokenizer.json");
  parse_model(root.at("model"));
  const auto normalizer = root.find("normalizer");
  if (normalizer != root.end() && !normalizer->is_null()) {
    // NFC alone, or a Sequence of nothing but NFC (as Qwen2 writes it).
    std::vector<json> steps{*normalizer};
    if (normalizer->at("type").get<std::string>() == "Sequence") steps = normalizer->at("normalizers").get<std::vector<json>>();
    for (const json& step : steps) {
      const std::string type = step.at("type").get<std::string>();
      if (type != "NFC")
        fail("normalizer '" + fpdt::json::excerpt_text(type) + "' is not supported (none and NFC are)", "GPT-2 and Llama 3 have none, Qwen2 has NFC");
      nfc = true;
    }
    needs_utf8 = needs_utf8 || nfc;
  }
  if (root.contains("pre_tokenizer")) parse_pre_tokenizer(root.at("pre_tokenizer"), "pre_tokenizer");
  const auto decoder = root.find("decoder");
  if (decoder != root.end() && !decoder->is_null()) {
    const std::string type = decoder->at("type").get<std::string>();
    if (type != "ByteLevel") fail("decoder '" + fpdt::json::excerpt_text(type) + "' is not supported (ByteLevel is)");
    byte_level_decoder = true;
  }
  if (root.contains("added_tokens")) {
    for (const json& token : root.at("added_tokens")) {
      AddedToken added_token;
      added_token.content = token.at("content").get<std::string>();
      const int64_t id = fpdt::json::integer<int64_t>(token.at("id"), origin + " is not a valid tokenizer.json: added_tokens[].id",
                                                         kModule);
      if (id < 0 || id > INT32_MAX - 1) fail("added token '" + fpdt::json::excerpt_text(added_token.content) + "' has a bad id " + std::to_string(id), "fix the tokenizer.json");
      added_token.id = static_cast<int32_t>(id);
      added_token.special = flag(token, "special");
      added_token.normalized = flag(token, "normalized", !added_token.special);
      if (flag(token, "single_word"))
        fail("added token '" + fpdt::json::excerpt_text(added_token.content) + "' sets single_word, which fpdt does not implement",
             "GPT-2, Llama 3 and Qwen2 tokenizers leave it false");
      added_token.lstrip = flag(token, "lstrip");
      added_token.rstrip = flag(token, "rstrip");
      if (added_token.lstrip || added_token.rstrip) needs_utf8 = true;  // white space is found by code point
      if (added_token.content.empty()) continue;
      if (first_invalid_utf8_in(added_token.content))
        fail("added token " + std::to_string(id) + " is not valid UTF-8", "fix the tokenizer.json");
      added.push_back(std::move(added_token));
    }
  }
}

void Tokenizer::Impl::finish(const std::string& end_of_document) {
  int64_t size = 0;
  for (const auto& [token, id] : vocab) size = std::max<int64_t>(size, id + 1);
  for (const AddedToken& token : added) size = std::max<int64_t>(size, token.id + 1);
  if (size > kMaxVocabSize)
    fail("has an id of " + std::to_string(size - 1) + ", more than fpdt's limit of " + std::to_string(kMaxVocabSize - 1),
         "ids must be dense from 0; fix the tokenizer.json");
  id_to_token.assign(static_cast<size_t>(size), std::string());
  for (const auto& [token, id] : vocab) id_to_token[static_cast<size_t>(id)] = token;
  for (AddedToken& token : added) {
    id_to_token[static_cast<size_t>(token.id)] = token.content;
    token.match_text = token.normalized && nfc ? text::nfc(token.content) : token.content;
    if (!token.match_text.empty()) added_first_byte[static_cast<unsigned char>(token.match_text[0])] = true;
  }
  if (size == 0) fail("has an empty vocabulary", "pass a trained tokenizer.json");

  // Parsed by base/json.h, whose nesting limit keeps a hostile file from recursing off the stack.
  const json config = config_text.empty() ? json::object()
                                          : fpdt::json::parse(config_text, origin + ": its " + kTokenizerConfigFile, kModule,
                                                              "fix or remove tokenizer_config.json");
  const std::string bos = config_token(config, "bos_token"), pad = config_token(config, "pad_token");
  bos_id = bos.empty() ? -1 : id_of(bos);
  pad_id = pad.empty() ? -1 : id_of(pad);

  // The end-of-document token.
  std::string eos = end_of_document.empty() ? config_token(config, "eos_token") : end_of_document;
  if (eos.empty()) {
    std::vector<std::string> specials;
    for (const AddedToken& token : added)
      if (token.special) specials.push_back(token.content);
    if (specials.size() == 1) eos = specials[0];
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
      if (eos.empty() && std::find(specials.begin(), specials.end(), name) != specials.end()) eos = name;
  }
  if (eos.empty())
    fail("does not say which token ends a document (no eos_token in tokenizer_config.json, no special token)",
         "name it as eos_token in tokenizer_config.json, or when tokenizing: "
         "fpdt tokenize --eos-token '<|endoftext|>'");
  eos_id = id_of(eos);
  // The hints name where the token is stated: train, eval and sample read it from tokenizer_config.json
  // (only tokenize has --eos-token).
  if (eos_id < 0)
    fail("has no token '" + fpdt::json::excerpt_text(eos) + "' to end documents with",
         "name a token of the tokenizer as eos_token in tokenizer_config.json, or when tokenizing: "
         "fpdt tokenize --eos-token TOKEN");
  eos_token = eos;
  fingerprint = fnv1a(json_text);
  if (config_text.empty())
    config_text = nlohmann::ordered_json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"eos_token", eos_token}}.dump(2) + "\n";
}

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json, const std::string& config_json,
                               const std::string& end_of_document, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  impl->json_text = tokenizer_json;
  impl->config_text = config_json;
  impl->origin = origin;
  // Malformed or nested past base/json.h's limit: "<origin>: not a valid tokenizer.json, it is not valid
  // JSON: ..." (or "... it nests JSON deeper than 64 levels").
  const json root = fpdt::json::parse(tokenizer_json, origin + ": not a valid tokenizer.json, it", kModule,
                                      "pass a Hugging Face tokenizer.json");
  try {
    impl->parse(root);
  } catch (const json::exception& error) {
    impl->fail("is not a valid tokenizer.json: " + fpdt::json::excerpt_text(error.what(), 240), "pass a Hugging Face tokenizer.json");
  }
  impl->finish(end_of_document);
  impl->byte_tokenizer = tokenizer_json == byte_tokenizer_json();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::load(const std::string& path, const std::string& end_of_document) {
  const fs::path given(path);
  const fs::path file = fs::is_directory(given) ? given / kTokenizerFile : given;
  if (fs::is_directory(given) && !fs::exists(file))
    throw Error(kModule, "folder " + path + " holds no " + kTokenizerFile,
                "pass a tokenizer.json or a folder with one (a Hugging Face model folder)");
  const fs::path config = file.parent_path() / kTokenizerConfigFile;
  const std::string hint = "check the path; a tokenizer folder holds tokenizer.json";
  return from_json(read_text_file(file.string(), kModule, hint),
                   fs::exists(config) ? read_text_file(config.string(), kModule, hint) : "",
                   end_of_document, file.string());
}

Tokenizer Tokenizer::bytes() {
  return from_json(byte_tokenizer_json(), "", std::string(kEndOfDocumentName), "the byte tokenizer");
}

void Tokenizer::save(const std::string& directory) const {
  for (const auto& [name, text] : {std::pair{kTokenizerFile, &impl_->json_text}, std::pair{kTokenizerConfigFile, &impl_->config_text}}) {
    const std::string path = (fs::path(directory) / name).string();
    const std::string* contents = text;  // clang 14 cannot capture a structured binding
    write_file_atomic(path, [&](int fd) { write_fully(fd, contents->data(), contents->size(), path, kModule); },
                      kModule);
  }
}

}  // namespace fpdt::data
