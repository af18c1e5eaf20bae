// Fuzz target: a GGUF file, read as `fpdt inspect`, `convert` and `--init-from` read it — the container,
// every metadata value described, the model config, the tokenizer, and the weights of a small model.
#include "fpdt/data/gguf_tokenizer.h"
#include "fpdt/model/gguf.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fpdt::fuzz::MemoryFile file;
  const std::string& path = file.write(data, size);
  fpdt::fuzz::expect_clean([&] {
    const fpdt::model::GgufFile gguf(path);
    for (const auto& [key, value] : gguf.metadata()) (void)key.size(), (void)value.describe();
    try {
      (void)fpdt::data::gguf_tokenizer(gguf);
    } catch (const fpdt::Error& error) {
      if (error.module() == "internal") throw;  // expect_clean reports it
    }
    const fpdt::model::ModelConfig config = fpdt::model::gguf_model_config(gguf);
    // The weights a file this small can hold: every tensor is checked against the file before reading.
    if (config.parameter_count() > (int64_t{1} << 20)) return;
    const fpdt::model::ParameterLayout layout(config);
    fpdt::model::ParameterBlock params(layout, "fuzzed weights");
    fpdt::model::load_gguf_weights(gguf, config, layout, params);
  });
  return 0;
}
