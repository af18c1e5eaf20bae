// What the rooms of the model config share, not part of its interface (config.h is): HfReader, which
// reads a Hugging Face config.json object by the field table of hf_config.cpp (typed values,
// transformers' defaults, one error naming the file and the field), and RoPE's side of that reading
// and writing (rope_parameters.cpp). hf_config.cpp, rope_parameters.cpp and config.cpp include it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/json.h"
#include "fpdt/model/config.h"

namespace fpdt::model::detail {

inline constexpr const char* kModule = "model";
using Json = nlohmann::json;

// The generation token ids: their config.json keys and fields.
inline constexpr std::pair<const char*, std::optional<TokenIds> ModelConfig::*> kTokenIdFields[] = {
    {"bos_token_id", &ModelConfig::bos_token_id},
    {"eos_token_id", &ModelConfig::eos_token_id},
    {"pad_token_id", &ModelConfig::pad_token_id}};

// A value quoted in a message, cut short.
inline std::string excerpt(const Json& value) { return json::excerpt(value, 57); }
// A number as messages and descriptions print it ("%g").
std::string format_number(double value);

struct Field;  // a row of the field table (hf_config.cpp)

// Reads a config.json object by the field table, for one model type. A key transformers ignores is
// listed (a file's) or refused (the command line's, where an unknown word is a typo).
enum class UnknownKeys { listed, refused };
class HfReader {
 public:
  HfReader(const Json& json, ModelType type, std::string where, UnknownKeys unknown = UnknownKeys::listed);

  const std::string& where() const { return where_; }
  std::string type_name() const { return model_type_name(type_); }

  // Keys outside the table are ignored (listed by ignored()); refused keys must hold an accepted
  // value, and every one that does not is named in one error.
  void check_fields() const;

  // A key transformers ignores for this type: a config.json field outside the table, or a key of a
  // RoPE object that transformers' RoPE check only warns about.
  bool lists_unknown_keys() const { return unknown_ == UnknownKeys::listed; }
  void ignore(const std::string& name) const { ignored_.push_back(json::excerpt_text(name)); }
  const std::vector<std::string>& ignored() const { return ignored_; }

  bool present(const char* name) const { return json_.contains(name) && !json_[name].is_null(); }

  // The field's value, or transformers' default for this type when absent.
  Json value(const char* name) const;

  // A JSON integer in [min, INT32_MAX] (larger sizes would overflow the kernels' int arguments).
  int integer(const char* name, int64_t min) const { return integer_value(value(name), name, min); }
  int integer_value(const Json& value, const std::string& name, int64_t min) const {
    if (!value.is_number_integer()) wrong_type(name, value, "a whole number");
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(kMax)) out_of_range(name, value, min);
    const int64_t number = value.get<int64_t>();
    if (number < min || number > kMax) out_of_range(name, value, min);
    return static_cast<int>(number);
  }
  double real(const char* name) const { return real_value(value(name), name); }
  double real_value(const Json& value, const std::string& name) const {
    if (!value.is_number() || !std::isfinite(value.get<double>())) wrong_type(name, value, "a finite number");
    return value.get<double>();
  }
  bool boolean(const char* name) const {
    const Json v = value(name);
    if (!v.is_boolean()) wrong_type(name, v, "true or false");
    return v.get<bool>();
  }
  std::string text(const char* name) const {
    const Json v = value(name);
    if (!v.is_string()) wrong_type(name, v, "a string");
    return v.get<std::string>();
  }

  [[noreturn]] void wrong_type(const std::string& name, const Json& value, const char* want) const {
    throw Error(kModule, where_ + ": field '" + json::excerpt_text(name) + "' has the wrong type (" + excerpt(value) + ", expected " + want + ")");
  }
  [[noreturn]] void out_of_range(const std::string& name, const Json& value, int64_t min) const;
  [[noreturn]] void bad_value(const std::string& name, const Json& value, const std::string& why,
                              const std::string& hint = "") const {
    throw Error(kModule, where_ + ": field '" + json::excerpt_text(name) + "' = " + excerpt(value) + " " + why, hint);
  }

 private:
  const Field* find(const char* name) const;
  static bool accepted(const Field& field, const Json& value);
  const Json& json_;
  ModelType type_;
  uint8_t bit_;
  std::string where_;
  UnknownKeys unknown_;
  mutable std::vector<std::string> ignored_;
};

// RoPE (rope_parameters.cpp). A Llama-family config's RoPE from either layout, rope_parameters or the
// legacy rope_theta / rope_scaling (when both are given they must agree), into config.rope_theta and
// config.rope_scaling.
void read_rope(const HfReader& r, ModelConfig& config);
// The rope_parameters object of config.json (with rope_theta when `with_theta`; without it, the
// legacy rope_scaling).
Json rope_parameters_object(const ModelConfig& config, bool with_theta);

}  // namespace fpdt::model::detail
