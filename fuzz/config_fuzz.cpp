// Fuzz target: a Hugging Face config.json, parsed as `--model config.json` parses it. A config it
// accepts must survive the trip through to_hf_config_json (what checkpoints save) unchanged.
#include "fpdt/model/config.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fpdt::fuzz::expect_clean([&] {
    const fpdt::model::ModelConfig config = fpdt::model::parse_hf_config(text, "fuzz/config.json");
    const std::string saved = fpdt::model::to_hf_config_json(config);
    const std::string again = fpdt::model::to_hf_config_json(fpdt::model::parse_hf_config(saved, "fuzz/saved.json"));
    if (again != saved) fpdt::fuzz::finding("config.json does not round-trip:\n" + saved + "\nvs\n" + again);
  });
  return 0;
}
