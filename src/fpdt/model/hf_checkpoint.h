// Hugging Face weights in and out: the one place that knows Hugging Face tensor names and checkpoint
// folders (the fields of config.json are hf_fields.cpp's table).
//   hf_tensor_map        each Hugging Face tensor ↔ rows of one of our tensors (parameters.h)
//   HfCheckpoint         a folder's weights as transformers' from_pretrained finds them: model.safetensors,
//                        or the shards model.safetensors.index.json names; F32, BF16 or F16; names
//                        with or without the base model's prefix ("model." / "transformer.")
//   save/load_hf_safetensors  one file in our checkpoints' layout (full names, F32)
// Every tensor is checked before any is read: a missing shard or tensor, an unexpected tensor or a
// wrong shape is one fpdt::Error naming it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fpdt/model/config.h"
#include "fpdt/model/parameters.h"
#include "fpdt/tensor/safetensors.h"

namespace fpdt::model {

// One Hugging Face tensor and where it lives in our layout: rows [row_begin, row_begin + rows) of an
// internal tensor, stored transposed in the file when `transposed` (GPT-2's Conv1D (in, out) layout).
struct HfTensor {
  std::string hf_name;
  Shape hf_shape;
  std::string internal_name;
  int64_t row_begin = 0;
  int64_t rows = 0;
  bool transposed = false;
};
// Full names ("model.layers.0.self_attn.q_proj.weight", "transformer.h.0.attn.c_attn.weight").
std::vector<HfTensor> hf_tensor_map(const ModelConfig& config);

class HfCheckpoint {
 public:
  // Opens the weight files of `dir` (model.safetensors first, as transformers does, else the index
  // and every shard it names). Throws fpdt::Error for no weights, a malformed index or a missing shard.
  explicit HfCheckpoint(std::string dir);

  const std::string& dir() const { return dir_; }
  std::vector<std::string> files() const;  // paths of the safetensors files (shards in name order)

  // Reads the weights of `config` into `params` (fp32, converted exactly from BF16/F16). A tied
  // model's lm_head.weight, when the file has one, must equal the embedding. Buffers transformers
  // drops on load (GPT-2's attn.bias / attn.masked_bias, rotary_emb.inv_freq) are skipped. A tensor
  // holding NaN or Inf is refused (fpdt::Error naming the file and the tensor).
  void load(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params) const;

 private:
  struct Stored {
    size_t file = 0;    // index into readers_
    std::string name;   // as stored
  };
  void add_file(const std::string& file_name);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, Stored> tensors_;  // stored name → where
};

// Our checkpoints' model.safetensors (weights, or gradients under a name prefix), F32 with full names.
void load_hf_safetensors(const ModelConfig& config, const ParameterLayout& layout, ParameterBlock& params,
                         const std::string& path, const std::string& name_prefix = "");
void save_hf_safetensors(const ModelConfig& config, const ParameterLayout& layout, const ParameterBlock& params,
                         const std::string& path, const std::map<std::string, std::string>& metadata = {});

// Refuses weights no training or inference can use — NaN or Inf among the `count` values read from tensor
// `name` of file `path` — with one error counting them (Hugging Face folders and GGUF files alike).
void check_finite(const float* values, int64_t count, const std::string& path, const std::string& name);

}  // namespace fpdt::model
