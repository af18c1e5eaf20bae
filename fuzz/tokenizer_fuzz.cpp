// Fuzz target: a Hugging Face tokenizer.json (optionally followed by kConfigSeparator and a
// tokenizer_config.json), loaded as `fpdt tokenize --tokenizer` and checkpoints load it, then used:
// a fixed text and the input's first bytes are encoded (ids must be inside the vocabulary) and
// decoded, and ids past the vocabulary are decoded (they are dropped).
#include <string_view>
#include <vector>

#include "fpdt/data/tokenizer.h"
#include "fuzz_target.h"

namespace {
constexpr std::string_view kConfigSeparator = "\n---tokenizer_config.json---\n";
constexpr std::string_view kText = "In the beginning, God created <|endoftext|> the heaven 123 4567 héllo 日本語\n\t  x!";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t separator = input.find(kConfigSeparator);
  const std::string tokenizer_json(input.substr(0, separator));
  const std::string config_json(separator == std::string_view::npos ? std::string_view()
                                                                    : input.substr(separator + kConfigSeparator.size()));
  fpdt::fuzz::expect_clean([&] {
    const fpdt::data::Tokenizer tokenizer =
        fpdt::data::Tokenizer::from_json(tokenizer_json, config_json, "", "fuzz/tokenizer.json");
    const int32_t vocab = tokenizer.vocab_size();
    if (tokenizer.end_of_document_id() < 0 || tokenizer.end_of_document_id() >= vocab)
      fpdt::fuzz::finding("end-of-document id " + std::to_string(tokenizer.end_of_document_id()) +
                          " outside the vocabulary of " + std::to_string(vocab));
    for (const std::string_view text : {kText, input.substr(0, 256)}) {
      std::vector<int32_t> ids;
      fpdt::fuzz::expect_clean([&] { ids = tokenizer.encode(text); });  // text that is not UTF-8: an Error
      for (int32_t id : ids)
        if (id < 0 || id >= vocab)
          fpdt::fuzz::finding("encode gave id " + std::to_string(id) + " outside the vocabulary of " +
                              std::to_string(vocab));
      (void)tokenizer.decode(ids);
      (void)tokenizer.render(ids);
    }
    const std::vector<int32_t> beyond = {vocab - 1, vocab, vocab + 1, -1, 0};
    (void)tokenizer.decode(beyond);
  });
  return 0;
}
