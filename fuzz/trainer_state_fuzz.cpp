// Fuzz target: a checkpoint's trainer_state.json, parsed as --resume parses it.
#include "fpdt/train/checkpoint.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fpdt::fuzz::expect_clean([&] { (void)fpdt::train::parse_trainer_state(text, "fuzz/trainer_state.json"); });
  return 0;
}
