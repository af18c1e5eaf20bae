// The GGUF golden sets of tests/golden/gguf (tools/make_gguf_golden.py): <set>.gguf, written by the gguf
// package, and <set>.golden.safetensors, what transformers' GGUF loader makes of it.
#pragma once

#include <string>

namespace fpdt::testing {

inline std::string gguf_golden(const std::string& name) {
  return std::string(FPDT_SOURCE_DIR) + "/tests/golden/gguf/" + name;
}

}  // namespace fpdt::testing
