// Hugging Face checkpoint folders: the weights land where they belong whatever the file layout
// (single or sharded, F32/BF16/F16, with or without the base model's prefix, GPT-2's old mask
// buffers), and each broken folder — no weights, a missing shard, a tensor missing, unexpected, of
// the wrong shape or stored twice, a tied head that is not the embedding — is one clear error.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "fpdt/base/error.h"
#include "fpdt/model/hf_checkpoint.h"
#include "testing.h"

namespace fpdt::model {
namespace {

ModelConfig tiny(const std::string& type) {
  ModelConfig config = preset(type == "gpt2" ? "gpt-tiny" : "llama-tiny");
  config.vocab_size = 40;
  config.max_positions = type == "gpt2" ? 32 : config.max_positions;
  if (type == "qwen2") config.type = ModelType::qwen2;
  return config;
}

// Tensors of `config` under their full Hugging Face names, random values, each its own buffer.
struct HfTensors {
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  std::vector<Shape> shapes;
  HfTensors(const ModelConfig& config, Rng& rng) {
    for (const HfTensor& entry : hf_tensor_map(config)) {
      tensors.emplace_back(entry.hf_name, testing::random_normal<float>(rng, static_cast<size_t>(shape_numel(entry.hf_shape))));
      shapes.push_back(entry.hf_shape);
    }
  }
  // Writes the tensors whose index passes `keep` to `path`, renamed by `rename`.
  template <typename Keep, typename Rename>
  void write(const std::string& path, Keep keep, Rename rename) const {
    SafetensorsWriter writer;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (keep(i)) writer.add(rename(tensors[i].first), Tensor(const_cast<float*>(tensors[i].second.data()), DType::f32, shapes[i]));
    writer.write(path);
  }
  void write(const std::string& path) const {
    write(path, [](size_t) { return true; }, [](const std::string& name) { return name; });
  }
};

class HfCheckpointTest : public ::testing::Test {
 protected:
  std::string error_loading(const ModelConfig& config, const std::string& dir) {
    const ParameterLayout layout(config);
    ParameterBlock params(layout, "test parameters");
    return testing::error_message([&] { HfCheckpoint(dir).load(config, layout, params); });
  }
  testing::TempDir dir_;
  Rng rng_{testing::fresh_seed()};
};

TEST_F(HfCheckpointTest, OurCheckpointFilesReadBackBitwise) {
  for (const std::string type : {"llama", "qwen2", "gpt2"}) {
    const ModelConfig config = tiny(type);
    const ParameterLayout layout(config);
    ParameterBlock saved(layout, "saved"), loaded(layout, "loaded");
    init_parameters(config, layout, saved, rng_.next_u64());
    for (int64_t i = 0; i < saved.numel(); ++i) saved.data()[i] += static_cast<float>(0.01 * rng_.normal());  // biases too
    save_hf_safetensors(config, layout, saved, dir_.file("model.safetensors"));
    HfCheckpoint(dir_.path()).load(config, layout, loaded);
    EXPECT_EQ(0, std::memcmp(saved.data(), loaded.data(), sizeof(float) * static_cast<size_t>(saved.numel()))) << type;
  }
}

TEST_F(HfCheckpointTest, BaseModelNamesBf16ShardsAndOldBuffersLoadTheSameWeights) {
  const ModelConfig config = tiny("gpt2");
  const HfTensors hf(config, rng_);
  const ParameterLayout layout(config);
  ParameterBlock want(layout, "want"), got(layout, "got");
  hf.write(dir_.file("model.safetensors"));
  HfCheckpoint(dir_.path()).load(config, layout, want);

  // The Hub's gpt2: no "transformer." prefix, and the causal-mask buffers h.N.attn.bias/masked_bias.
  testing::TempDir base;
  {
    SafetensorsWriter writer;
    std::vector<float> mask(64, 1.0f);
    for (size_t i = 0; i < hf.tensors.size(); ++i)
      writer.add(hf.tensors[i].first.substr(std::strlen("transformer.")),
                 Tensor(const_cast<float*>(hf.tensors[i].second.data()), DType::f32, hf.shapes[i]));
    writer.add("h.0.attn.bias", Tensor(mask.data(), DType::f32, {1, 1, 8, 8}));
    writer.add("h.1.attn.masked_bias", Tensor(mask.data(), DType::f32, {1}));
    writer.write(base.file("model.safetensors"));
  }
  HfCheckpoint(base.path()).load(config, layout, got);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * static_cast<size_t>(want.numel())));

  // Sharded with an index, BF16: the same as an F32 file of the BF16 values.
  testing::TempDir sharded, rounded;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  std::vector<std::vector<uint16_t>> bf16(hf.tensors.size());
  std::vector<std::vector<float>> bf16_values(hf.tensors.size());
  SafetensorsWriter first, second, as_f32;
  for (size_t i = 0; i < hf.tensors.size(); ++i) {
    for (float value : hf.tensors[i].second) {
      uint32_t bits;
      std::memcpy(&bits, &value, 4);
      bf16[i].push_back(static_cast<uint16_t>(bits >> 16));  // truncated: a BF16 value
      bits &= 0xffff0000u;
      std::memcpy(&value, &bits, 4);
      bf16_values[i].push_back(value);
    }
    const bool in_first = i % 2 == 0;
    (in_first ? first : second).add(hf.tensors[i].first, Tensor(bf16[i].data(), DType::bf16, hf.shapes[i]));
    as_f32.add(hf.tensors[i].first, Tensor(bf16_values[i].data(), DType::f32, hf.shapes[i]));
    index["weight_map"][hf.tensors[i].first] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  first.write(sharded.file("model-00001-of-00002.safetensors"));
  second.write(sharded.file("model-00002-of-00002.safetensors"));
  testing::write_text_file(sharded.file("model.safetensors.index.json"), index.dump());
  as_f32.write(rounded.file("model.safetensors"));
  const HfCheckpoint checkpoint(sharded.path());
  EXPECT_EQ(checkpoint.files().size(), 2u);
  checkpoint.load(config, layout, got);
  HfCheckpoint(rounded.path()).load(config, layout, want);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * static_cast<size_t>(want.numel())));
  // Missing shard: one error naming it.
  std::filesystem::remove(sharded.file("model-00002-of-00002.safetensors"));
  testing::expect_contains(error_loading(config, sharded.path()),
                           {"[model]", "shard model-00002-of-00002.safetensors", "is missing"});
}

TEST_F(HfCheckpointTest, BrokenFoldersGetOneClearError) {
  const ModelConfig config = tiny("llama");
  const HfTensors hf(config, rng_);
  auto folder = [&](const std::string& name) {
    const std::string path = dir_.file(name);
    std::filesystem::create_directories(path);
    return path;
  };
  const auto same = [](const std::string& name) { return name; };

  testing::expect_contains(error_loading(config, folder("empty")), {"holds no model.safetensors", "model.safetensors.index.json"});
  const std::string bin = folder("bin");
  testing::write_text_file(bin + "/pytorch_model.bin", "x");
  testing::expect_contains(error_loading(config, bin), {"pytorch_model.bin checkpoints are not read"});
  testing::expect_contains(error_loading(config, dir_.file("absent")), {"no checkpoint folder"});

  const std::string missing = folder("missing");
  hf.write(missing + "/model.safetensors", [](size_t i) { return i != 5; }, same);
  testing::expect_contains(error_loading(config, missing), {"missing tensor '" + hf.tensors[5].first + "'", "config.json"});

  // Qwen2's weights (q/k/v biases) into a Llama config: unexpected tensors.
  const HfTensors qwen(tiny("qwen2"), rng_);
  const std::string extra = folder("extra");
  qwen.write(extra + "/model.safetensors");
  testing::expect_contains(error_loading(config, extra), {"unexpected tensor 'model.layers.0.self_attn.", "_proj.bias'", "more)"});

  const std::string shape = folder("shape");
  {
    SafetensorsWriter writer;
    std::vector<float> wrong(7);
    for (size_t i = 0; i < hf.tensors.size(); ++i)
      if (i == 3)
        writer.add(hf.tensors[i].first, Tensor(wrong.data(), DType::f32, {7}));
      else
        writer.add(hf.tensors[i].first, Tensor(const_cast<float*>(hf.tensors[i].second.data()), DType::f32, hf.shapes[i]));
    writer.write(shape + "/model.safetensors");
  }
  testing::expect_contains(error_loading(config, shape),
                           {"tensor '" + hf.tensors[3].first + "' has shape [7]", "the model expects " + shape_string(hf.shapes[3])});

  const std::string twice = folder("twice");
  {
    SafetensorsWriter writer;
    for (size_t i = 0; i < hf.tensors.size(); ++i)
      writer.add(hf.tensors[i].first, Tensor(const_cast<float*>(hf.tensors[i].second.data()), DType::f32, hf.shapes[i]));
    writer.add(hf.tensors[0].first.substr(std::strlen("model.")),
               Tensor(const_cast<float*>(hf.tensors[0].second.data()), DType::f32, hf.shapes[0]));
    writer.write(twice + "/model.safetensors");
  }
  testing::expect_contains(error_loading(config, twice), {"holds both", "embed_tokens.weight"});

  const std::string integer = folder("integer");
  {
    SafetensorsWriter writer;
    std::vector<int32_t> ids(static_cast<size_t>(shape_numel(hf.shapes[0])));
    writer.add(hf.tensors[0].first, Tensor(ids.data(), DType::i32, hf.shapes[0]));
    for (size_t i = 1; i < hf.tensors.size(); ++i)
      writer.add(hf.tensors[i].first, Tensor(const_cast<float*>(hf.tensors[i].second.data()), DType::f32, hf.shapes[i]));
    writer.write(integer + "/model.safetensors");
  }
  testing::expect_contains(error_loading(config, integer), {"is I32", "F32, BF16 or F16"});

  // An index that is not JSON, names a file outside the folder, or a tensor its shard lacks.
  const std::string bad_index = folder("bad_index");
  testing::write_text_file(bad_index + "/model.safetensors.index.json", "{\"weight_map\": ");
  testing::expect_contains(error_loading(config, bad_index), {"model.safetensors.index.json is not valid JSON"});
  testing::write_text_file(bad_index + "/model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "../x.safetensors"}})");
  testing::expect_contains(error_loading(config, bad_index), {"not a file beside the index"});
  hf.write(bad_index + "/a.safetensors", [](size_t i) { return i != 2; }, same);
  testing::write_text_file(bad_index + "/model.safetensors.index.json",
                           nlohmann::json{{"weight_map", {{hf.tensors[2].first, "a.safetensors"}}}}.dump());
  testing::expect_contains(error_loading(config, bad_index), {"places tensor '" + hf.tensors[2].first + "' in a.safetensors",
                                                              "which does not hold it"});
}

TEST_F(HfCheckpointTest, ATiedHeadStoredBesideTheEmbeddingMustEqualIt) {
  ModelConfig config = tiny("llama");
  config.tie_embeddings = true;
  const HfTensors hf(config, rng_);
  const ParameterLayout layout(config);
  ParameterBlock params(layout, "params");
  auto write_with_head = [&](const std::vector<float>& head) {
    SafetensorsWriter writer;
    for (size_t i = 0; i < hf.tensors.size(); ++i)
      writer.add(hf.tensors[i].first, Tensor(const_cast<float*>(hf.tensors[i].second.data()), DType::f32, hf.shapes[i]));
    writer.add("lm_head.weight", Tensor(const_cast<float*>(head.data()), DType::f32, hf.shapes[0]));
    writer.write(dir_.file("model.safetensors"));
  };
  ASSERT_EQ(hf.tensors[0].first, "model.embed_tokens.weight");
  write_with_head(hf.tensors[0].second);
  EXPECT_NO_THROW(HfCheckpoint(dir_.path()).load(config, layout, params));
  std::vector<float> other = hf.tensors[0].second;
  other[3] += 1.0f;
  write_with_head(other);
  testing::expect_contains(error_loading(config, dir_.path()), {"lm_head.weight differs from the token embedding",
                                                                "tie_word_embeddings"});
}

}  // namespace
}  // namespace fpdt::model
