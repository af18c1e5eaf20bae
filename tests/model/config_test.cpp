// Model configuration: presets, Hugging Face config.json parsing, and a clear error for each
// impossible or malformed configuration.
#include <gtest/gtest.h>

#include "fpdt/base/error.h"
#include "fpdt/model/config.h"

namespace fpdt::model {
namespace {

// Expects parse_hf_config(json) to throw an fpdt::Error containing `part`.
void expect_config_error(const std::string& json, const std::string& part) {
  try {
    parse_hf_config(json, "test/config.json");
    FAIL() << "no error for " << json;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("[model]"), std::string::npos) << error.what();
  }
}

TEST(ModelConfig, PresetsValidateAndCountParametersLikeTheReleasedModels) {
  for (const std::string& name : preset_names()) EXPECT_NO_THROW(preset(name).validate()) << name;
  // Llama-3-8B has 8,030,261,248 parameters (its model card); untied head.
  EXPECT_EQ(preset("llama3-8b").parameter_count(), 8030261248);
  // Non-embedding count excludes only the token (and position) tables; the untied head stays.
  EXPECT_EQ(preset("llama3-8b").non_embedding_parameter_count(), 8030261248 - 128256LL * 4096);
}

TEST(ModelConfig, UnknownPresetListsTheKnownOnes) {
  try {
    preset("llama-9000");
    FAIL();
  } catch (const Error& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find("unknown model preset 'llama-9000'"), std::string::npos) << text;
    EXPECT_NE(text.find("llama3-8b"), std::string::npos) << text;
  }
}

TEST(ModelConfig, ParsesLlamaAndGpt2ConfigJson) {
  const ModelConfig llama = parse_hf_config(
      R"({"model_type":"llama","vocab_size":100,"hidden_size":64,"intermediate_size":160,
          "num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"rope_theta":500000.0,
          "partial_rotary_factor":0.5,"tie_word_embeddings":true})",
      "llama.json");
  EXPECT_EQ(llama.family, Family::llama);
  EXPECT_EQ(llama.head_dim, 8);
  EXPECT_EQ(llama.rotary_dim, 4);
  EXPECT_EQ(llama.kv_heads, 2);
  EXPECT_TRUE(llama.tie_embeddings);
  EXPECT_DOUBLE_EQ(llama.rope_theta, 500000.0);
  const ModelConfig gpt = parse_hf_config(
      R"({"model_type":"gpt2","vocab_size":50257,"n_embd":768,"n_layer":12,"n_head":12,"n_positions":1024})",
      "gpt2.json");
  EXPECT_EQ(gpt.family, Family::gpt);
  EXPECT_EQ(gpt.ffn_hidden, 3072);
  // GPT-2 small: 124,439,808 parameters (tied head).
  EXPECT_EQ(gpt.parameter_count(), 124439808);
  // Our own config.json round-trips.
  const ModelConfig again = parse_hf_config(to_hf_config_json(llama), "again.json");
  EXPECT_EQ(again.rotary_dim, llama.rotary_dim);
  EXPECT_EQ(again.kv_heads, llama.kv_heads);
  EXPECT_EQ(parse_hf_config(to_hf_config_json(gpt), "again.json").parameter_count(), gpt.parameter_count());
}

TEST(ModelConfig, ImpossibleShapesAreRefusedWithOneSentence) {
  const std::string base = R"("model_type":"llama","vocab_size":100,"intermediate_size":160,"num_hidden_layers":2)";
  expect_config_error("{" + base + R"(,"hidden_size":66,"num_attention_heads":4})", "not divisible by 4 attention heads");
  expect_config_error("{" + base + R"(,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":3})",
                      "cannot be shared evenly by 3 key/value heads");
  expect_config_error("{" + base + R"(,"hidden_size":64,"num_attention_heads":0})", "must be positive");
  expect_config_error(R"({"model_type":"gpt2","vocab_size":10,"n_embd":66,"n_layer":1,"n_head":4,"n_positions":8})",
                      "not divisible by n_head 4");
}

TEST(ModelConfig, MalformedConfigJsonNamesTheFileAndField) {
  expect_config_error("{\"model_type\": \"llama\",", "test/config.json is not valid JSON");
  expect_config_error(R"({"model_type":"llama","vocab_size":100})", "missing field 'hidden_size'");
  expect_config_error(R"({"model_type":"llama","vocab_size":"many"})", "field 'vocab_size' is \"many\", not a whole number");
  expect_config_error(R"({"model_type":"llama","vocab_size":1e30})", "field 'vocab_size' is 1e+30, not a whole number");
  expect_config_error(R"({"model_type":"llama","tie_word_embeddings":3,"vocab_size":1,"hidden_size":1,
      "num_hidden_layers":1,"num_attention_heads":1,"intermediate_size":1})", "field 'tie_word_embeddings' has the wrong type");
  expect_config_error(R"({"model_type":"bert"})", "model_type 'bert' is not supported");
  expect_config_error("[1, 2]", "not a JSON object");
  EXPECT_THROW(load_hf_config("/nonexistent/config.json"), Error);
}

TEST(ModelConfig, DeeplyNestedOrHugeValuesGiveABoundedError) {
  // 100k levels used to overflow the stack when the wrong-type message dumped the value.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_config_error(R"({"model_type": "llama", "vocab_size": )" + deep + "}", "nests JSON deeper than 64 levels");
  const std::string huge(1 << 20, 'x');
  for (const std::string& json : {R"({"model_type": ")" + huge + R"("})",
                                  R"({"model_type": "llama", "vocab_size": [")" + huge + R"("]})",
                                  R"({"model_type": "llama", "_name_or_path": ")" + huge + R"(", "vocab_size": 0,
                                      "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
                                      "intermediate_size": 8})"}) {
    try {
      parse_hf_config(json, "test/config.json");
      FAIL() << "no error";
    } catch (const Error& error) {
      EXPECT_LT(std::string(error.what()).size(), 1000u) << "the message repeats the input";
    }
  }
}

}  // namespace
}  // namespace fpdt::model
