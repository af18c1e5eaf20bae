// RoPE's parameters as JSON, in and out: the rope_parameters object of a Hugging Face config.json (and
// its legacy layout, rope_theta + rope_scaling) read into ModelConfig's rope_theta and rope_scaling by
// transformers' rules, the object written back, --rope-theta / --rope-scaling, and the one-line
// description. The frequencies themselves are rope.h's.
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "fpdt/model/config.h"
#include "fpdt/model/hf_reader.h"
#include "fpdt/model/rope.h"

namespace fpdt::model {

namespace {

using detail::excerpt;
using detail::format_number;
using detail::HfReader;
using detail::Json;
using detail::kModule;
using detail::rope_parameters_object;
using detail::UnknownKeys;

// The keys of a rope_parameters object, per rope_type (transformers' _validate_*_rope_parameters).
struct RopeKeys {
  const char* type;
  std::vector<std::string> keys;  // beside rope_type / type, rope_theta and partial_rotary_factor
};
const std::vector<RopeKeys>& rope_keys() {
  static const std::vector<RopeKeys> table = {
      {"default", {}},
      {"linear", {"factor"}},
      {"dynamic", {"factor"}},
      {"llama3", {"factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"}},
      {"yarn",
       {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
        "mscale_all_dim", "truncate"}},
  };
  return table;
}

std::string join(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += (text.empty() ? "" : ", ") + word;
  return text;
}

// The RopeType of a rope_type word (rope_type_name's words).
RopeType rope_type_from_name(const std::string& name, const std::string& where) {
  for (const RopeType type : {RopeType::none, RopeType::linear, RopeType::dynamic, RopeType::llama3, RopeType::yarn})
    if (rope_type_name(type) == name) return type;
  throw Error(kModule, where + ": rope_type '" + json::excerpt_text(name) + "' is not supported",
              "use default, linear, llama3 or yarn (dynamic is read but not trained)");
}

// Reads one rope_parameters object (keys as in transformers) into theta and scaling. `object_name`
// names it in errors; `max_positions` and `original_override` are the config's, for the defaults.
void read_rope_object(const HfReader& r, const Json& rope, const std::string& object_name, int64_t max_positions,
                      std::optional<int64_t> original_override, std::optional<double>& theta, RopeScaling& scaling) {
  const std::string where = object_name + " ";
  if (!rope.is_object()) r.wrong_type(object_name, rope, "an object");
  if (rope.contains("rope_type") && rope.contains("type") && rope["rope_type"] != rope["type"])
    r.bad_value(object_name + ".type", rope["type"], "disagrees with rope_type " + excerpt(rope["rope_type"]));
  const Json type_value = rope.contains("rope_type") ? rope["rope_type"] : rope.contains("type") ? rope["type"] : Json("default");
  if (!type_value.is_string()) r.wrong_type(object_name + ".rope_type", type_value, "a string");
  const std::string type_name = type_value.get<std::string>();
  scaling = RopeScaling{};
  scaling.type = rope_type_from_name(type_name, r.where() + ": " + object_name);
  const std::vector<std::string>* keys = nullptr;
  for (const RopeKeys& row : rope_keys())
    if (type_name == row.type) keys = &row.keys;
  for (const auto& [key, value] : rope.items()) {
    if (key == "rope_type" || key == "type") continue;
    const std::string name = object_name + "." + key;
    if (key == "rope_theta") {
      const double value_theta = r.real_value(value, name);
      if (!(value_theta > 0)) r.bad_value(name, value, "must be positive");
      theta = value_theta;
      continue;
    }
    if (key == "partial_rotary_factor") {
      if (value.is_null() || value == Json(1)) continue;
      r.bad_value(name, value, "is refused: transformers' Llama family rotates the whole head whatever this says",
                  "remove it");
    }
    bool known = false;
    for (const std::string& allowed : *keys) known = known || key == allowed;
    if (known) continue;
    if (r.lists_unknown_keys())
      r.ignore(name);
    else
      throw Error(kModule, r.where() + ": " + object_name + " key '" + json::excerpt_text(key) + "' is not a parameter of rope_type " + type_name,
                  "rope_type " + type_name + " reads " + (keys->empty() ? std::string("only rope_theta") : join(*keys)));
  }
  auto number = [&](const char* key) -> std::optional<double> {
    if (!rope.contains(key) || rope[key].is_null()) return std::nullopt;
    return r.real_value(rope[key], object_name + "." + key);
  };
  auto required = [&](const char* key) -> double {
    const std::optional<double> value = number(key);
    if (!value)
      throw Error(kModule, r.where() + ": " + object_name + " of rope_type " + type_name + " needs '" + key + "'");
    return *value;
  };
  auto positive = [&](const char* key, double value) {
    if (!(value > 0)) r.bad_value(object_name + "." + key, rope[key], "must be positive");
  };
  if (scaling.type == RopeType::none) return;
  if (scaling.type == RopeType::llama3 || scaling.type == RopeType::yarn) {
    // transformers: a top-level original_max_position_embeddings wins; absent everywhere, the
    // config's max_position_embeddings.
    const std::optional<double> inside = number("original_max_position_embeddings");
    if (inside && original_override && *inside != static_cast<double>(*original_override))
      r.bad_value(object_name + ".original_max_position_embeddings", rope["original_max_position_embeddings"],
                  "disagrees with the top-level original_max_position_embeddings " + std::to_string(*original_override));
    scaling.original_max_positions =
        original_override ? *original_override
                          : inside ? r.integer_value(rope["original_max_position_embeddings"],
                                                     object_name + ".original_max_position_embeddings", 1)
                                   : max_positions;
  }
  if (scaling.type == RopeType::yarn && rope.contains("factor") && rope["factor"].is_null()) {
    // transformers: a null factor is the ratio of the context lengths.
    scaling.factor = static_cast<double>(max_positions) / static_cast<double>(scaling.original_max_positions);
  } else {
    scaling.factor = required("factor");
    positive("factor", scaling.factor);
  }
  if (scaling.type == RopeType::llama3) {
    scaling.low_freq_factor = required("low_freq_factor");
    scaling.high_freq_factor = required("high_freq_factor");
    positive("low_freq_factor", scaling.low_freq_factor);
    if (!(scaling.high_freq_factor > scaling.low_freq_factor))
      r.bad_value(object_name + ".high_freq_factor", rope["high_freq_factor"],
                  "must be larger than low_freq_factor " + excerpt(rope["low_freq_factor"]));
  }
  if (scaling.type == RopeType::yarn) {
    // transformers: `beta_fast or 32`, `beta_slow or 1`: absent, null and 0 take the default.
    const double beta_fast = number("beta_fast").value_or(0.0), beta_slow = number("beta_slow").value_or(0.0);
    scaling.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
    scaling.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
    scaling.attention_factor = number("attention_factor");
    if (scaling.attention_factor) positive("attention_factor", *scaling.attention_factor);
    scaling.mscale = number("mscale").value_or(0.0);
    scaling.mscale_all_dim = number("mscale_all_dim").value_or(0.0);
    if (rope.contains("truncate") && !rope["truncate"].is_null()) {
      if (!rope["truncate"].is_boolean()) r.wrong_type(object_name + ".truncate", rope["truncate"], "true or false");
      scaling.truncate = rope["truncate"].get<bool>();
    }
  }
}

}  // namespace

namespace detail {

// RoPE of a Llama-family config, from either layout; when both are given they must agree.
void read_rope(const HfReader& r, ModelConfig& config) {
  const Json parameters = r.value("rope_parameters");
  const Json legacy = r.value("rope_scaling");
  std::optional<int64_t> original_override;
  if (r.present("original_max_position_embeddings"))
    original_override = r.integer("original_max_position_embeddings", 1);
  std::optional<double> theta;
  if (r.present("rope_theta")) {
    theta = r.real("rope_theta");
    if (!(*theta > 0)) r.bad_value("rope_theta", r.value("rope_theta"), "must be positive");
  }
  const bool has_parameters = parameters.is_object() ? !parameters.empty() : !parameters.is_null();
  const bool has_legacy = legacy.is_object() ? !legacy.empty() : !legacy.is_null();
  RopeScaling scaling;
  if (has_parameters) {
    std::optional<double> inner_theta;
    read_rope_object(r, parameters, "rope_parameters", config.max_positions, original_override, inner_theta, scaling);
    if (inner_theta && theta && *inner_theta != *theta)
      r.bad_value("rope_theta", r.value("rope_theta"), "disagrees with rope_parameters.rope_theta " + excerpt(parameters["rope_theta"]),
                  "keep one θ");
    if (inner_theta) theta = inner_theta;
  }
  if (has_legacy) {
    RopeScaling legacy_scaling;
    std::optional<double> legacy_theta;
    read_rope_object(r, legacy, "rope_scaling", config.max_positions, original_override, legacy_theta, legacy_scaling);
    if (has_parameters && !(legacy_scaling == scaling))
      throw Error(kModule, r.where() + ": rope_scaling " + excerpt(legacy) + " disagrees with rope_parameters " +
                               excerpt(parameters),
                  "keep one of the two layouts, or make them equal");
    if (legacy_theta && theta && *legacy_theta != *theta)
      r.bad_value("rope_scaling.rope_theta", legacy["rope_theta"], "disagrees with θ " + std::to_string(*theta));
    if (legacy_theta) theta = legacy_theta;
    scaling = legacy_scaling;
  }
  config.rope_theta = theta.value_or(10000.0);
  config.rope_scaling = scaling;
}

Json rope_parameters_object(const ModelConfig& config, bool with_theta) {
  const RopeScaling& s = config.rope_scaling;
  Json json = Json::object();
  json["rope_type"] = s.type == RopeType::none ? "default" : rope_type_name(s.type);
  if (with_theta) json["rope_theta"] = config.rope_theta;
  if (s.type == RopeType::none) return json;
  json["factor"] = s.factor;
  if (s.type == RopeType::llama3 || s.type == RopeType::yarn)
    json["original_max_position_embeddings"] = s.original_max_positions;
  if (s.type == RopeType::llama3) {
    json["low_freq_factor"] = s.low_freq_factor;
    json["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type == RopeType::yarn) {
    json["beta_fast"] = s.beta_fast;
    json["beta_slow"] = s.beta_slow;
    if (s.attention_factor) json["attention_factor"] = *s.attention_factor;
    if (s.mscale != 0.0) json["mscale"] = s.mscale;
    if (s.mscale_all_dim != 0.0) json["mscale_all_dim"] = s.mscale_all_dim;
    json["truncate"] = s.truncate;
  }
  return json;
}

}  // namespace detail

std::string rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::none: return "default";
    case RopeType::linear: return "linear";
    case RopeType::dynamic: return "dynamic";
    case RopeType::llama3: return "llama3";
    case RopeType::yarn: return "yarn";
  }
  return "?";
}

void override_rope(ModelConfig& config, std::optional<double> theta, const std::string& scaling_json) {
  if (!theta && scaling_json.empty()) return;
  if (!config.uses_rope())
    throw Error(kModule, "model '" + json::excerpt_text(config.name) + "' has learned positions, not RoPE",
                "--rope-theta and --rope-scaling apply to llama, mistral and qwen2 models");
  if (theta) {
    if (!(*theta > 0 && std::isfinite(*theta)))
      throw Error(kModule, "--rope-theta must be a positive number, got " + format_number(*theta));
    config.rope_theta = *theta;
  }
  if (!scaling_json.empty()) {
    Json rope;
    try {
      rope = Json::parse(scaling_json);
    } catch (const std::exception& error) {
      throw Error(kModule, "--rope-scaling is not valid JSON: " + std::string(error.what()),
                  "give an object such as '{\"rope_type\": \"yarn\", \"factor\": 4}'");
    }
    const Json empty = Json::object();
    const HfReader reader(empty, config.type, "--rope-scaling", UnknownKeys::refused);
    std::optional<double> inner_theta;
    read_rope_object(reader, rope, "--rope-scaling", config.max_positions, std::nullopt, inner_theta,
                     config.rope_scaling);
    if (inner_theta && theta && *inner_theta != *theta)
      throw Error(kModule, "--rope-scaling's rope_theta disagrees with --rope-theta", "give θ once");
    if (inner_theta) config.rope_theta = *inner_theta;
  }
  config.validate();
}

std::string describe_rope(const ModelConfig& config) {
  if (!config.uses_rope()) return "learned positions";
  std::string text = "theta " + format_number(config.rope_theta);
  const RopeScaling& s = config.rope_scaling;
  if (s.type == RopeType::none) return text;
  text += ", " + rope_type_name(s.type) + " x" + format_number(s.factor);
  if (s.type == RopeType::llama3)
    text += " (original " + std::to_string(s.original_max_positions) + ", low " + format_number(s.low_freq_factor) +
            ", high " + format_number(s.high_freq_factor) + ")";
  if (s.type == RopeType::yarn)
    text += " (original " + std::to_string(s.original_max_positions) + ", beta " + format_number(s.beta_fast) + "/" +
            format_number(s.beta_slow) + ", attention x" + format_number(rope_frequencies(config).attention_scaling) + ")";
  return text;
}

std::string rope_parameters_json(const ModelConfig& config) {
  if (!config.uses_rope()) return "null";
  return rope_parameters_object(config, true).dump();
}

}  // namespace fpdt::model
