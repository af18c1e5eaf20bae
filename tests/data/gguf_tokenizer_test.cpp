// The tokenizer of a GGUF file (data/gguf_tokenizer.h): the golden sets of tools/make_gguf_golden.py
// (a byte-level BPE with control and user-defined tokens, pre-tokenizers llama-bpe, qwen2 and gpt-2) give
// transformers' converted tokenizer's ids on a multilingual text, and decode back to it; a tokenizer
// model other than byte-level BPE is one clear error.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "fpdt/data/gguf_tokenizer.h"
#include "fpdt/tensor/safetensors.h"
#include "model/gguf_golden.h"
#include "testing.h"

namespace fpdt::data {
namespace {

class GgufTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizer, IdsAreTransformersOnAMultilingualText) {
  const model::GgufFile file(testing::gguf_golden(GetParam() + ".gguf"));
  const Tokenizer tokenizer = gguf_tokenizer(file);
  const std::string text = testing::file_bytes(testing::gguf_golden("multilingual.txt"));
  const std::vector<int32_t> want = SafetensorsReader(testing::gguf_golden(GetParam() + ".golden.safetensors")).read_ints("golden.text_ids");
  const std::vector<int32_t> ids = tokenizer.encode(text);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_EQ(tokenizer.vocab_size(), 400);
  EXPECT_EQ(tokenizer.end_of_document_token(), "<|im_end|>");
  EXPECT_EQ(tokenizer.begin_of_text_id(), tokenizer.token_id("<|im_start|>"));
  EXPECT_EQ(tokenizer.padding_id(), tokenizer.token_id("<|endoftext|>"));
}

INSTANTIATE_TEST_SUITE_P(Sets, GgufTokenizer, ::testing::Values("llama", "qwen2", "gpt2"));

TEST(GgufTokenizerErrors, ATokenizerModelFpdtDoesNotReadIsOneClearError) {
  testing::TempDir dir;
  std::string bytes = testing::file_bytes(testing::gguf_golden("llama.gguf"));
  // tokenizer.ggml.model "gpt2" → "t5xx" (the same length keeps the file well formed).
  const std::string from = std::string("\x04\0\0\0\0\0\0\0gpt2", 12);
  const size_t at = bytes.find(std::string("tokenizer.ggml.model") + std::string("\x08\0\0\0", 4) + from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at + std::strlen("tokenizer.ggml.model") + 4 + 8, 4, "t5xx");
  testing::write_text_file(dir.file("t5.gguf"), bytes);
  testing::expect_contains(testing::error_message([&] { gguf_tokenizer(model::GgufFile(dir.file("t5.gguf"))); }),
                           {"[gguf]", "t5.gguf", "tokenizer.ggml.model is 't5xx'", "hint:"});
}

}  // namespace
}  // namespace fpdt::data
