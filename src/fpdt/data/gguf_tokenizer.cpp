// A GGUF file's tokenizer as a tokenizer.json (see gguf_tokenizer.h).
#include "fpdt/data/gguf_tokenizer.h"

#include <nlohmann/json.hpp>
#include <map>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "fpdt/data/text/byte_level.h"
#include "fpdt/data/text/unicode.h"

namespace fpdt::data {

namespace {

constexpr const char* kModule = "gguf";
using Json = nlohmann::ordered_json;
using model::GgufValueType;

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
constexpr int64_t kControl = 3, kUserDefined = 4;

// The split regexes transformers gives the pre-tokenizers that tokenizer.ggml.pre names
// (GGUF_PRE_TOKENIZER_SPLITS); any other name keeps GPT-2's ByteLevel regex.
const char* split_regex(const std::string& pre) {
  static const char* kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kTekken =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kQwen35 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kGpt4o =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::pair<const char*, const char*> kTable[] = {
      {"llama3", kLlama3},  {"llama-v3", kLlama3}, {"llama-bpe", kLlama3}, {"falcon3", kLlama3},
      {"falcon-h1", kLlama3}, {"pixtral", kLlama3}, {"midm-2.0", kLlama3}, {"lfm2", kLlama3},
      {"jina-v5-nano", kLlama3}, {"dbrx", kLlama3}, {"smaug-bpe", kLlama3}, {"tekken", kTekken},
      {"qwen2", kQwen2},    {"deepseek-r1-qwen", kQwen2}, {"kormo", kQwen2}, {"f2llmv2", kQwen2},
      {"megrez", kQwen2},   {"qwen35", kQwen35},   {"gpt-4o", kGpt4o},     {"llama4", kGpt4o},
      {"kanana2", kGpt4o},  {"talkie", kGpt4o},    {"minimax-m2", kGpt4o}};
  for (const auto& [name, regex] : kTable)
    if (pre == name) return regex;
  return nullptr;
}

// A token as the byte-level vocabulary spells it: itself when every character is of the byte
// alphabet, else its UTF-8 bytes spelled in it (transformers' byte_level_tokenizer).
std::string byte_level_spelling(const std::string& token) {
  const text::ByteAlphabet& alphabet = text::byte_alphabet();
  if (!token.empty() && text::utf8_sequence_bytes(reinterpret_cast<const unsigned char*>(token.data()), token.size()) != 0) {
    bool spelled = true;
    for (size_t pos = 0; pos < token.size() && spelled;) {
      const size_t bytes = text::utf8_sequence_bytes(reinterpret_cast<const unsigned char*>(token.data()) + pos, token.size() - pos);
      if (bytes == 0) {
        spelled = false;
        break;
      }
      spelled = alphabet.char_to_byte.count(text::next_code_point(token, pos)) != 0;
    }
    if (spelled) return token;
  }
  std::string spelling;
  for (const char byte : token) spelling += alphabet.byte_to_utf8[static_cast<unsigned char>(byte)];
  return spelling;
}

bool in_byte_alphabet(const std::string& token) { return byte_level_spelling(token) == token; }

Json added_token(int64_t id, const std::string& content, bool special) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
          {"normalized", false}, {"special", special}};
}

}  // namespace

Tokenizer gguf_tokenizer(const model::GgufFile& file) {
  const std::string hint = "convert the model with its Hugging Face tokenizer folder, or tokenize with --tokenizer PATH";
  if (!file.find("tokenizer.ggml.model"))
    throw Error(kModule, file.path() + " holds no tokenizer (no tokenizer.ggml.model)", hint);
  const std::string model_name = file.text("tokenizer.ggml.model");
  if (model_name != "gpt2")
    throw Error(kModule,
                file.path() + ": tokenizer.ggml.model is '" + fpdt::json::excerpt_text(model_name) +
                    "'; fpdt reads the byte-level BPE tokenizers llama.cpp calls 'gpt2' "
                    "(GPT-2, Llama 3, Qwen2, SmolLM)",
                model_name == "llama" ? "SentencePiece tokenizers are not implemented; " + hint : hint);
  const std::vector<model::GgufValue>* tokens = file.array("tokenizer.ggml.tokens", GgufValueType::string);
  const std::vector<model::GgufValue>* merges = file.array("tokenizer.ggml.merges", GgufValueType::string);
  if (tokens == nullptr || tokens->empty()) throw Error(kModule, file.path() + " has no tokenizer.ggml.tokens", hint);
  if (merges == nullptr) throw Error(kModule, file.path() + " has a BPE tokenizer without tokenizer.ggml.merges", hint);
  const std::vector<model::GgufValue>* types = file.array("tokenizer.ggml.token_type", GgufValueType::i32);
  if (types != nullptr && types->size() != tokens->size())
    throw Error(kModule, file.path() + ": tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                             " entries for " + std::to_string(tokens->size()) + " tokens", "the file is corrupt");

  // The vocabulary (a later duplicate spelling takes the id, as a Python dict does) and the merges.
  Json vocab = Json::object();
  std::vector<std::string> spellings;
  spellings.reserve(tokens->size());
  for (size_t id = 0; id < tokens->size(); ++id) {
    spellings.push_back(byte_level_spelling((*tokens)[id].text));
    vocab[spellings.back()] = id;
  }
  Json merge_list = Json::array();
  for (const model::GgufValue& merge : *merges) {
    const size_t space = merge.text.find(' ');
    if (space == std::string::npos || merge.text.find(' ', space + 1) != std::string::npos)
      throw Error(kModule,
                  file.path() + ": merge '" + fpdt::json::excerpt_text(merge.text) +
                      "' of tokenizer.ggml.merges is not two tokens",
                  "the file is corrupt");
    merge_list.push_back(Json::array({merge.text.substr(0, space), merge.text.substr(space + 1)}));
  }

  // Added tokens: the special tokens the metadata names, control tokens (special) spelled in the byte
  // alphabet, user-defined ones (not special).
  std::map<int64_t, Json> added;
  Json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  for (const auto& [field, key] : {std::pair{"bos_token", "bos_token_id"}, std::pair{"eos_token", "eos_token_id"},
                                   std::pair{"unk_token", "unknown_token_id"}, std::pair{"pad_token", "padding_token_id"}}) {
    const std::optional<int64_t> id = file.optional_integer(std::string("tokenizer.ggml.") + key);
    if (!id) continue;
    if (*id < 0 || *id >= static_cast<int64_t>(tokens->size()))
      throw Error(kModule, file.path() + ": tokenizer.ggml." + key + " is " + std::to_string(*id) + ", outside the " +
                               std::to_string(tokens->size()) + " tokens", "the file is corrupt");
    config[field] = spellings[static_cast<size_t>(*id)];
    added[*id] = added_token(*id, spellings[static_cast<size_t>(*id)], true);
  }
  for (size_t id = 0; types != nullptr && id < tokens->size(); ++id) {
    const int64_t type = (*types)[id].integer;
    if (type == kControl && in_byte_alphabet((*tokens)[id].text)) added[static_cast<int64_t>(id)] = added_token(static_cast<int64_t>(id), spellings[id], true);
    if (type == kUserDefined && added.count(static_cast<int64_t>(id)) == 0)
      added[static_cast<int64_t>(id)] = added_token(static_cast<int64_t>(id), spellings[id], false);
  }
  Json added_tokens = Json::array();
  for (auto& [id, token] : added) added_tokens.push_back(std::move(token));
  for (const char* flag : {"add_bos_token", "add_eos_token"})
    if (const std::optional<bool> value = file.optional_boolean(std::string("tokenizer.ggml.") + flag)) config[flag] = *value;
  if (file.find("tokenizer.chat_template")) config["chat_template"] = file.text("tokenizer.chat_template");

  const std::string pre = file.find("tokenizer.ggml.pre") ? file.text("tokenizer.ggml.pre") : "";
  const bool prefix_space = file.optional_boolean("tokenizer.ggml.add_space_prefix").value_or(false);
  Json pre_tokenizer;
  if (const char* regex = split_regex(pre)) {
    pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  } else {
    pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"trim_offsets", true}, {"use_regex", true}};
  }
  const Json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merge_list}}}};
  std::string tokenizer_json, config_json;
  try {
    tokenizer_json = root.dump(2) + "\n";
    config_json = config.dump(2) + "\n";
  } catch (const nlohmann::json::exception&) {  // a merge or the chat template (tokens are respelled)
    throw Error(kModule, file.path() + ": tokenizer.ggml.merges or tokenizer.chat_template holds text that is not UTF-8",
                "the file is corrupt");
  }
  return Tokenizer::from_json(tokenizer_json, config_json, "", file.path() + " (tokenizer.ggml.*)");
}

}  // namespace fpdt::data
