// A GGUF file (llama.cpp) made into a Hugging Face model folder (config.json, model.safetensors in F32,
// tokenizer.json and tokenizer_config.json) that `fpdt train --init-from`, `fpdt eval` and transformers'
// from_pretrained read: `fpdt convert`, and `fpdt extend` of a recipe whose base model is a GGUF file.
#pragma once

#include <string>

namespace fpdt::train {

// Writes the folder `out_dir` (which must not exist) under a temporary name, renamed when complete, so a
// failed conversion leaves nothing at out_dir. Returns what was written, for a person (one line each for
// the model and its tokenizer, or why no tokenizer was written). Throws fpdt::Error of `module`.
std::string convert_gguf(const std::string& module, const std::string& gguf_path, const std::string& out_dir);

}  // namespace fpdt::train
