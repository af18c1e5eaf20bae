// The tokenizer of a GGUF file: its tokenizer.ggml.* metadata (vocabulary, merges, token types,
// special token ids, pre-tokenizer name) made into a Hugging Face tokenizer.json and
// tokenizer_config.json as transformers' GGUF loader converts them (integrations/gguf/
// gguf_tokenizer_mapping.py: a GPT-2-style byte-level BPE, control tokens special, user-defined ones
// added, the split regex of the named pre-tokenizer), then loaded as any tokenizer.json.
#pragma once

#include "fpdt/data/tokenizer.h"
#include "fpdt/model/gguf.h"

namespace fpdt::data {

// Throws fpdt::Error naming the file and key for a file without a tokenizer, or one whose model is not
// "gpt2" (byte-level BPE; SentencePiece "llama" tokenizers are not read).
Tokenizer gguf_tokenizer(const model::GgufFile& file);

}  // namespace fpdt::data
