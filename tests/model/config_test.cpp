// Model configuration: presets, and Hugging Face config.json read field by field — transformers'
// defaults per model type, both RoPE layouts, sliding windows, GPT-2's scaling flags — with one clear
// error for every refused field of every type, every unknown field and every impossible shape.
#include <gtest/gtest.h>

#include <limits>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fpdt/base/error.h"
#include "fpdt/model/config.h"

namespace fpdt::model {
namespace {

using Json = nlohmann::json;

// Minimal valid configs of each type (the shape fields fpdt requires).
Json base(const std::string& type) {
  if (type == "gpt2") return {{"model_type", "gpt2"}, {"vocab_size", 50}, {"n_embd", 64}, {"n_layer", 2},
                              {"n_head", 4}, {"n_positions", 128}};
  Json json = {{"model_type", type}, {"vocab_size", 100}, {"hidden_size", 64}, {"intermediate_size", 160},
               {"num_hidden_layers", 3}, {"num_attention_heads", 8}};
  if (type != "llama") json["num_key_value_heads"] = 2;  // their class defaults (8, 32) need more heads
  return json;
}

ModelConfig parse(const Json& json) { return parse_hf_config(json.dump(), "test/config.json"); }

// parse(json) throws one fpdt::Error, on one line, tagged [model], containing every part.
void expect_config_error(const Json& json, std::initializer_list<std::string> parts) {
  try {
    parse(json);
    FAIL() << "no error for " << json.dump();
  } catch (const Error& error) {
    const std::string text = error.what();
    EXPECT_TRUE(text.starts_with("[model] ")) << text;
    EXPECT_NE(text.find("test/config.json"), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    for (const std::string& part : parts) EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
  }
}

Json with(Json json, const std::string& key, const Json& value) {
  json[key] = value;
  return json;
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

TEST(ModelConfig, ReadsLlamaWithTransformersDefaults) {
  Json json = base("llama");
  json["num_key_value_heads"] = 2;
  json["tie_word_embeddings"] = true;
  const ModelConfig llama = parse(json);
  EXPECT_EQ(llama.type, ModelType::llama);
  EXPECT_EQ(llama.family, Family::llama);
  EXPECT_EQ(llama.head_dim, 8);
  EXPECT_EQ(llama.rotary_dim, 8);
  EXPECT_EQ(llama.kv_heads, 2);
  EXPECT_TRUE(llama.tie_embeddings);
  // transformers 5.24's LlamaConfig defaults: θ 10000, eps 1e-6, 2048 positions, no window.
  EXPECT_DOUBLE_EQ(llama.rope_theta, 10000.0);
  EXPECT_EQ(llama.rope_scaling.type, RopeType::none);
  EXPECT_DOUBLE_EQ(llama.norm_eps, 1e-6);
  EXPECT_EQ(llama.max_positions, 2048);
  EXPECT_EQ(llama.window(0), 0);
  EXPECT_FALSE(llama.has_qkv_bias());
  // Absent num_key_value_heads: Hq for llama, the class defaults for mistral (8) and qwen2 (32).
  EXPECT_EQ(parse(base("llama")).kv_heads, 8);
  Json mistral = with(with(base("mistral"), "num_attention_heads", 16), "hidden_size", 128);
  mistral.erase("num_key_value_heads");
  EXPECT_EQ(parse(mistral).kv_heads, 8);
  Json qwen = with(with(base("qwen2"), "num_attention_heads", 32), "hidden_size", 128);
  qwen.erase("num_key_value_heads");
  EXPECT_EQ(parse(qwen).kv_heads, 32);
  // head_dim given explicitly may differ from h / Hq.
  EXPECT_EQ(parse(with(base("llama"), "head_dim", 16)).q_dim(), 128);
}

TEST(ModelConfig, ReadsRopeFromBothLayouts) {
  // transformers ≥ 5 writes rope_parameters; older files rope_theta + rope_scaling. Same model.
  Json v5 = base("llama");
  v5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                           {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 8192}};
  Json v4 = base("llama");
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const ModelConfig a = parse(v5), b = parse(v4);
  EXPECT_DOUBLE_EQ(a.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(b.rope_theta, 500000.0);
  EXPECT_EQ(a.rope_scaling.type, RopeType::llama3);
  EXPECT_TRUE(a.rope_scaling == b.rope_scaling);
  EXPECT_EQ(a.rope_scaling.original_max_positions, 8192);
  EXPECT_DOUBLE_EQ(a.rope_scaling.high_freq_factor, 4.0);
  // The legacy key "type" for rope_type; both layouts together when they agree.
  Json legacy_type = base("llama");
  legacy_type["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse(legacy_type).rope_scaling.type, RopeType::linear);
  Json both = v5;
  both["rope_scaling"] = v4["rope_scaling"];
  both["rope_theta"] = 500000.0;
  EXPECT_TRUE(parse(both).rope_scaling == a.rope_scaling);
  // rope_type "default" changes nothing and is accepted in either layout.
  EXPECT_EQ(parse(with(base("llama"), "rope_scaling", {{"rope_type", "default"}})).rope_scaling.type, RopeType::none);
  EXPECT_DOUBLE_EQ(parse(with(base("llama"), "rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}})).rope_theta, 1e6);
  // llama3 / yarn without an original length: max_position_embeddings (transformers' standardisation);
  // a top-level original_max_position_embeddings wins, as in transformers.
  Json yarn = with(base("mistral"), "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}});
  yarn["max_position_embeddings"] = 4096;
  EXPECT_EQ(parse(yarn).rope_scaling.original_max_positions, 4096);
  EXPECT_DOUBLE_EQ(parse(yarn).rope_scaling.beta_fast, 32.0);
  EXPECT_FALSE(parse(yarn).rope_scaling.attention_factor.has_value());
  EXPECT_EQ(parse(with(yarn, "original_max_position_embeddings", 1024)).rope_scaling.original_max_positions, 1024);
  // yarn with a null factor: the ratio of the lengths.
  yarn["rope_scaling"]["factor"] = nullptr;
  yarn["rope_scaling"]["original_max_position_embeddings"] = 1024;
  EXPECT_DOUBLE_EQ(parse(yarn).rope_scaling.factor, 4.0);
  // dynamic is read (inspect shows it); model/rope refuses to train with it.
  EXPECT_EQ(parse(with(base("qwen2"), "rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}})).rope_scaling.type,
            RopeType::dynamic);
}

TEST(ModelConfig, RopeConflictsAndBadParametersAreRefused) {
  Json json = base("llama");
  json["rope_theta"] = 10000.0;
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  expect_config_error(json, {"field 'rope_theta'", "disagrees with rope_parameters.rope_theta"});
  json = base("llama");
  json["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  expect_config_error(json, {"rope_scaling", "disagrees with rope_parameters"});
  expect_config_error(with(base("llama"), "rope_scaling", {{"rope_type", "longrope"}, {"factor", 2.0}}),
                      {"rope_type 'longrope' is not supported"});
  expect_config_error(with(base("llama"), "rope_scaling", {{"rope_type", "linear"}}), {"needs 'factor'"});
  expect_config_error(with(base("llama"), "rope_scaling", {{"rope_type", "linear"}, {"factor", 0}}),
                      {"rope_scaling.factor", "must be positive"});
  // A key its rope_type does not read: transformers warns and reads past it; so does fpdt, listing it.
  EXPECT_EQ(parse(with(base("llama"), "rope_scaling", {{"rope_type", "linear"}, {"factor", 2}, {"beta_fast", 4}})).ignored_fields,
            std::vector<std::string>{"rope_scaling.beta_fast"});
  expect_config_error(with(base("llama"), "rope_scaling",
                           {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 4}}),
                      {"high_freq_factor", "must be larger than low_freq_factor"});
  expect_config_error(with(base("llama"), "rope_scaling", {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}),
                      {"partial_rotary_factor", "rotates the whole head"});
  expect_config_error(with(base("llama"), "rope_theta", -1.0), {"field 'rope_theta'", "must be positive"});
  expect_config_error(with(base("llama"), "rope_theta", 0.0), {"field 'rope_theta'", "must be positive"});
  expect_config_error(with(base("llama"), "max_position_embeddings", -5),
                      {"field 'max_position_embeddings'", "outside [1, 2147483647]"});
  expect_config_error(with(base("gpt2"), "n_positions", -5), {"field 'n_positions'", "outside [1, 2147483647]"});
  expect_config_error(with(base("llama"), "rope_scaling", "yarn"), {"rope_scaling", "wrong type"});
}

TEST(ModelConfig, ReadsSlidingWindowsAsTransformersDoes) {
  // Mistral: every layer; absent means transformers' default 4096, null means none.
  EXPECT_EQ(parse(base("mistral")).window(2), 4096);
  EXPECT_EQ(parse(with(base("mistral"), "sliding_window", 16)).window(0), 16);
  EXPECT_EQ(parse(with(base("mistral"), "sliding_window", nullptr)).window(0), 0);
  // Qwen2: only with use_sliding_window, on layers ≥ max_window_layers (or as layer_types says).
  EXPECT_EQ(parse(with(base("qwen2"), "sliding_window", 16)).window(2), 0);
  Json qwen = with(with(base("qwen2"), "use_sliding_window", true), "sliding_window", 16);
  qwen["max_window_layers"] = 1;
  const ModelConfig q = parse(qwen);
  EXPECT_EQ(q.window(0), 0);
  EXPECT_EQ(q.window(1), 16);
  EXPECT_EQ(q.window(2), 16);
  EXPECT_EQ(describe_window(q), "16 tokens (layers 1,2)");
  qwen["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  const ModelConfig typed = parse(qwen);
  EXPECT_EQ(typed.window(0), 16);
  EXPECT_EQ(typed.window(1), 0);
  EXPECT_TRUE(typed.has_qkv_bias());
  // Qwen2's biases: q/k/v only, in the parameter count (Qwen2-7B: 4608 per layer).
  Json qwen7b = {{"model_type", "qwen2"}, {"vocab_size", 152064}, {"hidden_size", 3584}, {"intermediate_size", 18944},
                 {"num_hidden_layers", 28}, {"num_attention_heads", 28}, {"num_key_value_heads", 4}};
  EXPECT_EQ(parse(qwen7b).parameter_count(), 7615616512);  // Qwen2-7B's 7.62 B
  qwen["layer_types"] = {"sliding_attention"};
  expect_config_error(qwen, {"field 'layer_types'", "one entry per layer (3)"});
  qwen["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
  expect_config_error(qwen, {"field 'layer_types'", "chunked_attention"});
}

TEST(ModelConfig, ReadsGpt2AndItsScalingFlags) {
  const ModelConfig gpt = parse(with(with(base("gpt2"), "n_embd", 768), "n_head", 12));
  EXPECT_EQ(gpt.family, Family::gpt);
  EXPECT_EQ(gpt.ffn_hidden, 3072);
  EXPECT_TRUE(gpt.tie_embeddings);
  EXPECT_DOUBLE_EQ(gpt.attention_scale(1), 1.0 / 8.0);  // 1/sqrt(64)
  // GPT-2 small: 124,439,808 parameters (tied head).
  Json small = {{"model_type", "gpt2"}, {"vocab_size", 50257}, {"n_embd", 768}, {"n_layer", 12}, {"n_head", 12},
                {"n_positions", 1024}, {"n_ctx", 1024}, {"resid_pdrop", 0.1}, {"summary_type", "cls_index"},
                {"task_specific_params", {{"text-generation", {{"do_sample", true}}}}}};
  EXPECT_EQ(parse(small).parameter_count(), 124439808);
  Json flags = base("gpt2");
  flags["scale_attn_weights"] = false;
  flags["scale_attn_by_inverse_layer_idx"] = true;
  const ModelConfig scaled = parse(flags);
  EXPECT_DOUBLE_EQ(scaled.attention_scale(0), 1.0);
  EXPECT_DOUBLE_EQ(scaled.attention_scale(1), 0.5);
  flags["scale_attn_weights"] = true;
  EXPECT_DOUBLE_EQ(parse(flags).attention_scale(1), 1.0 / 4.0 / 2.0);
}

TEST(ModelConfig, OurConfigJsonRoundTrips) {
  Json llama = base("llama");
  llama["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}, {"beta_fast", 16},
                              {"original_max_position_embeddings", 1024}, {"attention_factor", 1.2}, {"truncate", false}};
  Json qwen = with(with(base("qwen2"), "use_sliding_window", true), "sliding_window", 16);
  qwen["max_window_layers"] = 2;
  Json flags = with(base("gpt2"), "scale_attn_by_inverse_layer_idx", true);
  for (const Json& json : {llama, with(base("mistral"), "sliding_window", 32), qwen, flags}) {
    const ModelConfig config = parse(json);
    const ModelConfig again = parse_hf_config(to_hf_config_json(config), "again.json");
    EXPECT_EQ(to_hf_config_json(again), to_hf_config_json(config)) << json.dump();
    EXPECT_EQ(again.type, config.type);
    EXPECT_TRUE(again.rope_scaling == config.rope_scaling);
    EXPECT_EQ(again.sliding_layers, config.sliding_layers);
    EXPECT_EQ(again.parameter_count(), config.parameter_count());
    EXPECT_DOUBLE_EQ(again.attention_scale(1), config.attention_scale(1));
  }
  // Both RoPE layouts are written, and they agree.
  const Json written = Json::parse(to_hf_config_json(parse(llama)));
  EXPECT_EQ(written["rope_parameters"]["rope_type"], "yarn");
  EXPECT_EQ(written["rope_scaling"]["factor"], 4.0);
  EXPECT_EQ(written["rope_theta"], 1e6);
}

TEST(ModelConfig, GenerationTokenIdsRoundTripAsStated) {
  // Llama 3.1's: one bos id, a list of eos ids; written back exactly, in both families.
  for (const char* type : {"llama", "gpt2"}) {
    SCOPED_TRACE(type);
    Json json = with(with(base(type), "bos_token_id", 7), "eos_token_id", Json::array({8, 9, 49}));
    json["pad_token_id"] = 0;
    const ModelConfig config = parse(json);
    ASSERT_TRUE(config.eos_token_id.has_value());
    EXPECT_EQ(config.eos_token_id->ids, (std::vector<int>{8, 9, 49}));
    EXPECT_TRUE(config.eos_token_id->list);
    const Json written = Json::parse(to_hf_config_json(config));
    EXPECT_EQ(written["bos_token_id"], 7);
    EXPECT_EQ(written["eos_token_id"], Json::array({8, 9, 49}));
    EXPECT_EQ(written["pad_token_id"], 0);
    // A list of one stays a list, an id stays an id, null stays null.
    json["eos_token_id"] = Json::array({9});
    json["bos_token_id"] = nullptr;
    const Json again = Json::parse(to_hf_config_json(parse(json)));
    EXPECT_EQ(again["eos_token_id"], Json::array({9}));
    EXPECT_TRUE(again["bos_token_id"].is_null());
    EXPECT_TRUE(again.contains("bos_token_id"));
    const std::string saved = to_hf_config_json(parse(json));
    EXPECT_EQ(to_hf_config_json(parse_hf_config(saved, "again.json")), saved);
  }
  // Not stated: unset (a checkpoint takes its tokenizer's), written as null, never a class default such
  // as GPT2Config's 50256, outside this vocabulary of 50.
  const ModelConfig bare = parse(base("gpt2"));
  EXPECT_FALSE(bare.bos_token_id.has_value());
  EXPECT_FALSE(bare.eos_token_id.has_value());
  const Json written = Json::parse(to_hf_config_json(bare));
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    EXPECT_TRUE(written.contains(key) && written[key].is_null()) << key;
  EXPECT_FALSE(preset("gpt-tiny").eos_token_id.has_value());
}

TEST(ModelConfig, GenerationTokenIdOutsideTheVocabularyIsOneClearError) {
  // base("llama") has a vocabulary of 100.
  const Json llama = base("llama");
  expect_config_error(with(llama, "eos_token_id", 100), {"field 'eos_token_id' = 100", "vocabulary [0, 100)", "null"});
  expect_config_error(with(llama, "bos_token_id", -1), {"field 'bos_token_id' = -1", "vocabulary [0, 100)"});
  expect_config_error(with(base("gpt2"), "pad_token_id", 50256), {"'pad_token_id' = 50256", "vocabulary [0, 50)"});
  expect_config_error(with(llama, "eos_token_id", Json::array({2, 128001})), {"field 'eos_token_id'", "holds 128001"});
  expect_config_error(with(llama, "eos_token_id", Json::array({2, "x"})), {"field 'eos_token_id'", "token ids"});
  expect_config_error(with(llama, "bos_token_id", Json::array({1})), {"field 'bos_token_id'", "a token id or null"});
  expect_config_error(with(llama, "pad_token_id", 1.5), {"field 'pad_token_id'", "wrong type"});
  // ...but a negative pad_token_id, what older conversions write for "none", reads as null.
  const ModelConfig no_padding = parse(with(llama, "pad_token_id", -1));
  ASSERT_TRUE(no_padding.pad_token_id.has_value());
  EXPECT_TRUE(no_padding.pad_token_id->ids.empty() && !no_padding.pad_token_id->list);
  EXPECT_TRUE(Json::parse(to_hf_config_json(no_padding))["pad_token_id"].is_null());
  expect_config_error(with(llama, "eos_token_id", Json::parse("18446744073709551615")), {"field 'eos_token_id'"});
  // Configs made in code are held to the same rule.
  ModelConfig config = preset("gpt-tiny");
  config.eos_token_id = TokenIds{{257}, false};
  EXPECT_THROW(config.validate(), Error);
  config.eos_token_id = TokenIds{{256}, false};
  EXPECT_NO_THROW(config.validate());
  // A norm epsilon of +inf (a GGUF header can say so) would make every norm 0: refused, as 0 and NaN are.
  for (const double eps : {std::numeric_limits<double>::infinity(), 0.0, std::numeric_limits<double>::quiet_NaN()}) {
    ModelConfig bad_eps = preset("llama-tiny");
    bad_eps.norm_eps = eps;
    try {
      bad_eps.validate();
      ADD_FAILURE() << "norm epsilon " << eps << " accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("norm epsilon must be a positive number"), std::string::npos)
          << error.what();
    }
  }
}

TEST(ModelConfig, ConfigDifferenceNamesTheFirstFieldAndCountsOnlyStatedTokenIds) {
  const ModelConfig config = parse(base("llama"));
  EXPECT_FALSE(config_difference(config, config).has_value());
  ModelConfig other = config;
  other.rope_theta = 20000.0;
  std::optional<ConfigDifference> difference = config_difference(config, other);
  ASSERT_TRUE(difference.has_value());
  EXPECT_EQ(difference->field, "rope_parameters");
  EXPECT_NE(difference->saved.find("10000"), std::string::npos) << difference->saved;
  EXPECT_NE(difference->given.find("20000"), std::string::npos) << difference->given;
  other = config;
  other.layers = 4;
  other.validate();
  EXPECT_EQ(config_difference(config, other)->field, "num_hidden_layers");
  EXPECT_EQ(config_difference(config, parse(base("mistral")))->field, "architectures");
  // A token id one side leaves unset agrees with anything; two stated ones must be equal.
  other = config;
  other.eos_token_id = TokenIds{{5}, false};
  EXPECT_FALSE(config_difference(config, other).has_value());
  EXPECT_FALSE(config_difference(other, config).has_value());
  ModelConfig stated = config;
  stated.eos_token_id = TokenIds{{5}, true};
  difference = config_difference(stated, other);
  ASSERT_TRUE(difference.has_value());
  EXPECT_EQ(difference->field, "eos_token_id");
  EXPECT_EQ(difference->saved, "[5]");
  EXPECT_EQ(difference->given, "5");
}

TEST(ModelConfig, RopeOverridesForContextExtension) {
  ModelConfig config = parse(base("llama"));
  override_rope(config, 500000.0, "");
  EXPECT_DOUBLE_EQ(config.rope_theta, 500000.0);
  EXPECT_EQ(config.rope_scaling.type, RopeType::none);
  override_rope(config, std::nullopt, R"({"rope_type": "yarn", "factor": 8, "original_max_position_embeddings": 2048})");
  EXPECT_EQ(config.rope_scaling.type, RopeType::yarn);
  EXPECT_DOUBLE_EQ(config.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(config.rope_theta, 500000.0);
  EXPECT_NE(describe_rope(config).find("yarn x8"), std::string::npos) << describe_rope(config);
  override_rope(config, std::nullopt, R"({"rope_type": "default"})");
  EXPECT_EQ(config.rope_scaling.type, RopeType::none);
  EXPECT_THROW(override_rope(config, -5.0, ""), Error);
  EXPECT_THROW(override_rope(config, std::nullopt, "{\"rope_type\": "), Error);
  EXPECT_THROW(override_rope(config, std::nullopt, R"({"rope_type": "linear", "factor": 2, "bogus": 1})"), Error);
  ModelConfig gpt = parse(base("gpt2"));
  EXPECT_THROW(override_rope(gpt, 500000.0, ""), Error);
}

// Every refused field of every supported type: one line naming the field, at a value that would
// change the model. The same list is checked against the table (docs) below.
struct Refused {
  const char* type;
  const char* field;
  Json value;
};
std::vector<Refused> refused_fields() {
  std::vector<Refused> cases;
  for (const char* type : {"llama", "mistral", "qwen2", "gpt2"}) {
    cases.push_back({type, "is_encoder_decoder", true});
    cases.push_back({type, "tie_encoder_decoder", true});
    cases.push_back({type, "cross_attention_hidden_size", 64});
    cases.push_back({type, "pruned_heads", {{"0", {1}}}});
    cases.push_back({type, "quantization_config", {{"quant_method", "gptq"}}});
  }
  for (const char* type : {"llama", "mistral", "qwen2"}) cases.push_back({type, "partial_rotary_factor", 0.5});
  cases.push_back({"llama", "attention_bias", true});
  cases.push_back({"mistral", "attention_bias", true});
  cases.push_back({"llama", "mlp_bias", true});
  cases.push_back({"mistral", "layer_types", Json::array({"full_attention", "sliding_attention", "full_attention"})});
  cases.push_back({"qwen2", "use_mrope", true});
  cases.push_back({"gpt2", "add_cross_attention", true});
  return cases;
}

TEST(ModelConfig, EveryRefusedFieldOfEveryTypeIsOneClearError) {
  for (const Refused& r : refused_fields()) {
    SCOPED_TRACE(std::string(r.type) + " " + r.field);
    expect_config_error(with(base(r.type), r.field, r.value),
                        {"field '" + std::string(r.field) + "'", "refused for model_type " + std::string(r.type)});
  }
  // At their neutral values they are accepted (they change nothing).
  EXPECT_NO_THROW(parse(with(base("llama"), "attention_bias", false)));
  EXPECT_NO_THROW(parse(with(base("qwen2"), "partial_rotary_factor", 1.0)));
  EXPECT_NO_THROW(parse(with(base("gpt2"), "pruned_heads", Json::object())));
  // Values a used field cannot take.
  expect_config_error(with(base("llama"), "hidden_act", "gelu"), {"field 'hidden_act'", "not supported"});
  expect_config_error(with(base("gpt2"), "activation_function", "relu"), {"field 'activation_function'"});
}

TEST(ModelConfig, TheRefusedListCoversTheTable) {
  // Every "refused" row of the table (docs/hf_config.md) has a case above, and no case is stale.
  std::stringstream table(hf_field_table_markdown());
  std::string line;
  std::set<std::pair<std::string, std::string>> in_table, in_test;
  for (const Refused& r : refused_fields()) in_test.insert({r.type, r.field});
  while (std::getline(table, line)) {
    if (line.find("| refused") == std::string::npos) continue;
    const std::string field = line.substr(3, line.find('`', 3) - 3);
    const size_t types_begin = line.find("| ", 3) + 2;
    std::string types = line.substr(types_begin, line.find(" |", types_begin) - types_begin);
    if (types == "all") types = "llama, mistral, qwen2, gpt2";
    std::stringstream list(types);
    std::string type;
    while (std::getline(list, type, ',')) in_table.insert({type.substr(type.find_first_not_of(' ')), field});
  }
  EXPECT_EQ(in_table, in_test);
}

TEST(ModelConfig, FieldsTransformersIgnoresAreListedNotRefused) {
  // Fields real Hub configs carry that transformers' config classes keep as attributes and its
  // modelling code never reads (distilgpt2, SmolLM2, early Llama conversions, YaRN Llama-2 and
  // fine-tuned uploads, folders transformers writes from a GGUF file), and fields of other types.
  Json llama = base("llama");
  const std::vector<std::pair<std::string, Json>> extra = {
      {"is_llama_config", true},       {"rope_interleaved", false}, {"max_sequence_length", 2048},
      {"use_flash_attention_2", true}, {"unsloth_fixed", true},     {"unsloth_version", "2024.9"},
      {"_model_name_or_path", "x/y"},  {"unk_token_id", 0},         {"num_experts", 8},
      {"sliding_window", 16}};
  for (const auto& [key, value] : extra) llama[key] = value;
  llama["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 4096}, {"finetuned", true}};
  const ModelConfig config = parse(llama);
  std::set<std::string> want = {"rope_scaling.finetuned"}, got(config.ignored_fields.begin(), config.ignored_fields.end());
  for (const auto& [key, value] : extra) want.insert(key);
  EXPECT_EQ(got, want);
  EXPECT_EQ(config.ignored_fields.size(), want.size());
  EXPECT_EQ(config.window(0), 0) << "a llama config's sliding_window is not read (transformers' LlamaConfig has none)";
  EXPECT_EQ(config.rope_scaling.type, RopeType::yarn);
  const std::string listed = describe_ignored(config);
  for (const std::string& name : want) EXPECT_NE(listed.find(name), std::string::npos) << listed;
  EXPECT_EQ(describe_ignored(parse(base("llama"))), "none");
  // auto_map names remote code; transformers without trust_remote_code builds model_type's own class.
  const ModelConfig mapped = parse(with(base("qwen2"), "auto_map", {{"AutoModelForCausalLM", "modeling_x.X"}}));
  EXPECT_EQ(mapped.ignored_fields, std::vector<std::string>{"auto_map"});
  EXPECT_NE(describe_ignored(mapped).find("remote modelling code, which is not run"), std::string::npos)
      << describe_ignored(mapped);
  // distilgpt2's _num_labels; and the harmless fields and generation defaults, read past unlisted.
  EXPECT_EQ(parse(with(base("gpt2"), "_num_labels", 1)).ignored_fields, std::vector<std::string>{"_num_labels"});
  Json harmless = base("mistral");
  for (const char* key : {"attention_dropout", "initializer_range", "bos_token_id", "eos_token_id", "torch_dtype",
                          "use_cache", "transformers_version", "temperature", "max_length"})
    harmless[key] = 1;
  harmless["architectures"] = {"MistralForCausalLM"};
  EXPECT_TRUE(parse(harmless).ignored_fields.empty());
}

TEST(ModelConfig, Gpt2AliasesMustAgreeWithTheFieldsTheyName) {
  // transformers' GPT2Config maps hidden_size, num_attention_heads, num_hidden_layers and
  // max_position_embeddings onto n_embd, n_head, n_layer and n_positions: such a key is no metadata.
  const Json gpt2 = base("gpt2");
  const std::vector<std::pair<const char*, const char*>> aliases = {{"hidden_size", "n_embd"},
                                                                    {"num_attention_heads", "n_head"},
                                                                    {"num_hidden_layers", "n_layer"},
                                                                    {"max_position_embeddings", "n_positions"}};
  for (const auto& [alias, field] : aliases) {
    SCOPED_TRACE(alias);
    EXPECT_TRUE(parse(with(gpt2, alias, gpt2[field])).ignored_fields.empty());
    expect_config_error(with(gpt2, alias, gpt2[field].get<int>() * 2),
                        {"field '" + std::string(alias) + "'", "disagrees with " + std::string(field)});
  }
}

TEST(ModelConfig, EveryRefusedFieldIsNamedInOneMessage) {
  Json json = base("llama");
  json["attention_bias"] = true;
  json["mlp_bias"] = true;
  json["quantization_config"] = {{"quant_method", "gptq"}};
  json["unsloth_version"] = "2024.9";  // ignored, so not named
  try {
    parse(json);
    FAIL() << "no error";
  } catch (const Error& error) {
    const std::string text = error.what();
    for (const char* field : {"'attention_bias'", "'mlp_bias'", "'quantization_config'"})
      EXPECT_NE(text.find(field), std::string::npos) << field << " not in: " << text;
    EXPECT_EQ(text.find("unsloth_version"), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  }
}

TEST(ModelConfig, SizesBeyondInt32AndOverflowingProductsAreRefused) {
  // 2^32 + 256 used to be read as 256.
  expect_config_error(with(base("llama"), "hidden_size", 4294967552LL), {"field 'hidden_size'", "outside [1, 2147483647]"});
  expect_config_error(with(base("gpt2"), "n_embd", 2147483648LL), {"field 'n_embd'", "outside"});
  expect_config_error(with(base("llama"), "vocab_size", 64.5), {"field 'vocab_size'", "wrong type"});
  expect_config_error(with(base("llama"), "vocab_size", -3), {"field 'vocab_size'", "outside"});
  // Fields within int32 whose products are not: 4·n_embd, q/k/v widths, parameter counts.
  Json wide = base("gpt2");
  wide["n_embd"] = 1 << 30;
  wide["n_head"] = 1;
  expect_config_error(wide, {"field 'n_embd'", "4·n_embd"});
  Json heads = base("llama");
  heads["num_attention_heads"] = 65536;
  heads["hidden_size"] = 65536;
  heads["head_dim"] = 65536;
  expect_config_error(heads, {"projection widths"});
  Json big = base("llama");
  big["hidden_size"] = 1 << 30;
  big["num_attention_heads"] = 1 << 24;
  big["num_key_value_heads"] = 1;
  big["vocab_size"] = 2147483647;
  big["num_hidden_layers"] = 2147483647;
  big["intermediate_size"] = 1 << 29;
  expect_config_error(big, {"overflows 64-bit arithmetic"});
}

TEST(ModelConfig, ImpossibleShapesAreRefusedWithOneSentence) {
  const Json base_llama = base("llama");
  expect_config_error(with(with(base_llama, "hidden_size", 66), "num_attention_heads", 4),
                      {"not divisible by 4 attention heads"});
  // transformers' Llama refuses it even with head_dim; Mistral accepts head_dim instead.
  expect_config_error(with(with(with(base_llama, "hidden_size", 66), "num_attention_heads", 4), "head_dim", 16),
                      {"not divisible by 4 attention heads"});
  EXPECT_EQ(parse(with(with(with(base("mistral"), "hidden_size", 66), "num_attention_heads", 4), "head_dim", 16)).head_dim, 16);
  expect_config_error(with(with(base_llama, "num_attention_heads", 4), "num_key_value_heads", 3),
                      {"cannot be shared evenly by 3 key/value heads"});
  expect_config_error(with(base_llama, "num_attention_heads", 0), {"field 'num_attention_heads'", "outside [1,"});
  expect_config_error(with(with(base("gpt2"), "n_embd", 66), "n_head", 4), {"not divisible by n_head 4"});
}

TEST(ModelConfig, MalformedConfigJsonNamesTheFileAndField) {
  auto error_of = [](const std::string& text) {
    try {
      parse_hf_config(text, "test/config.json");
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("{\"model_type\": \"llama\",").find("test/config.json is not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"llama","vocab_size":100})").find("missing field 'hidden_size'"), std::string::npos);
  EXPECT_NE(error_of(R"({"model_type":"bert"})").find("model_type 'bert' is not supported"), std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("not a JSON object"), std::string::npos);
  expect_config_error(with(base("llama"), "vocab_size", "many"), {"field 'vocab_size' has the wrong type"});
  EXPECT_THROW(load_hf_config("/nonexistent/config.json"), Error);
}

TEST(ModelConfig, DocsHoldTheFieldTable) {
  // docs/hf_config.md shows the table hf_config.cpp reads by (hf_fields.cpp); they must not drift apart.
  std::ifstream file(std::string(FPDT_SOURCE_DIR) + "/docs/hf_config.md");
  ASSERT_TRUE(file) << "docs/hf_config.md is missing";
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_NE(text.str().find(hf_field_table_markdown()), std::string::npos)
      << "docs/hf_config.md does not hold the current table; paste fpdt::model::hf_field_table_markdown() into it:\n"
      << hf_field_table_markdown();
}

// Messages quote input as bounded excerpts, and nesting is limited at parse (base/json.h): 100k
// levels used to overflow the stack when a message dumped the value.
TEST(ModelConfig, DeeplyNestedOrHugeValuesGiveABoundedError) {
  auto message_of = [](const std::string& text) {
    try {
      parse_hf_config(text, "test/config.json");
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_NE(message_of(R"({"model_type": "llama", "vocab_size": )" + deep + "}").find("nests JSON deeper than 64 levels"),
            std::string::npos);
  const std::string huge(1 << 20, 'x');
  Json long_key = base("llama");
  long_key[huge] = 1;
  // An ignored key of 1 MiB is listed by an excerpt.
  EXPECT_LT(describe_ignored(parse(long_key)).size(), 1000u);
  long_key["vocab_size"] = 0;
  for (const std::string& text : {R"({"model_type": ")" + huge + R"("})", with(base("llama"), "vocab_size", Json::array({huge})).dump(),
                                  with(with(base("llama"), "_name_or_path", huge), "vocab_size", 0).dump(), long_key.dump(),
                                  with(base("llama"), "rope_parameters", {{"rope_type", huge}}).dump(),
                                  with(base("llama"), "rope_parameters", {{"rope_type", "linear"}, {huge, 1}}).dump(),
                                  "{\"model_type\": \"" + huge}) {
    const std::string message = message_of(text);
    EXPECT_NE(message, "no error");
    EXPECT_LT(message.size(), 1000u) << "the message repeats the input: " << message.substr(0, 300);
  }
}

}  // namespace
}  // namespace fpdt::model
