// The Hugging Face golden sets of tests/golden (tools/make_hf_golden.py): a folder transformers wrote
// with save_pretrained, and golden.safetensors with one batch and transformers' numbers for it.
#pragma once

#include <string>
#include <vector>

#include "fpdt/model/config.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/model/transformer.h"
#include "fpdt/tensor/safetensors.h"

namespace fpdt::testing {

inline std::string golden_dir(const std::string& set) { return std::string(FPDT_SOURCE_DIR) + "/tests/golden/" + set; }

struct GoldenSet {
  std::string dir;
  model::ModelConfig config;
  SafetensorsReader golden;
  std::vector<int32_t> tokens, targets;
  model::Batch batch;
  std::vector<float> logits;  // (B, T, V)
  double loss = 0.0;          // mean cross-entropy over counted targets

  explicit GoldenSet(const std::string& set)
      : dir(golden_dir(set)),
        config(model::load_hf_config(dir + "/config.json")),
        golden(dir + "/golden.safetensors"),
        tokens(golden.read_ints("golden.input_ids")),
        targets(golden.read_ints("golden.targets")),
        logits(golden.read_floats("golden.logits")),
        loss(golden.read_floats("golden.loss")[0]) {
    const Shape& shape = golden.entry("golden.input_ids").shape;
    batch = model::Batch{static_cast<int>(shape[0]), shape[1], tokens.data(), targets.data(), nullptr};
  }
  // The folder's weights, as `fpdt train --init-from` reads them.
  void load(const model::ParameterLayout& layout, model::ParameterBlock& params) const {
    model::HfCheckpoint(dir).load(config, layout, params);
  }
};

}  // namespace fpdt::testing
