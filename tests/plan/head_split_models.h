// Small Llama models of given head counts, written as Hugging Face config.json files, for the tests of
// uneven Ulysses head splits (issue 46): `fpdt plan` and `fpdt train --dry-run` take them by path.
#pragma once

#include <string>

#include "testing.h"

namespace fpdt::testing {

// A 2-layer Llama of `heads` q heads and `kv_heads` kv heads of 8 dimensions (hidden 8·heads, as Hugging
// Face configs divide it; MLP 48, vocabulary 61) written to `path`; returns the path.
inline std::string write_head_split_model(const std::string& path, int heads, int kv_heads) {
  write_text_file(path, "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 61, "
                        "\"hidden_size\": " + std::to_string(8 * heads) + ", \"intermediate_size\": 48, \"num_hidden_layers\": 2, "
                        "\"num_attention_heads\": " + std::to_string(heads) + ", \"num_key_value_heads\": " +
                        std::to_string(kv_heads) + ", \"head_dim\": 8, \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-5, "
                        "\"rope_theta\": 10000.0, \"max_position_embeddings\": 4096, \"tie_word_embeddings\": false}");
  return path;
}

}  // namespace fpdt::testing
