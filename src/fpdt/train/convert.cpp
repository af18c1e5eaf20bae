// GGUF → Hugging Face folder (see convert.h): the model read by model/gguf.h, its tokenizer by
// data/gguf_tokenizer.h, the folder written by write_hf_model_files.
#include "fpdt/train/convert.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "fpdt/base/error.h"
#include "fpdt/data/gguf_tokenizer.h"
#include "fpdt/model/gguf.h"
#include "fpdt/train/checkpoint.h"

namespace fpdt::train {

namespace fs = std::filesystem;

std::string convert_gguf(const std::string& module, const std::string& gguf_path, const std::string& out_dir) {
  std::error_code error;
  if (fs::exists(fs::symlink_status(out_dir, error)))
    throw Error(module, "--out " + out_dir + " exists; fpdt convert does not overwrite", "choose a new folder or remove it");

  const model::GgufFile file(gguf_path);
  const model::ModelConfig config = model::gguf_model_config(file);
  const model::ParameterLayout layout(config);
  model::ParameterBlock weights(layout, "weights from " + gguf_path, Tier::offload);
  model::load_gguf_weights(file, config, layout, weights);
  std::optional<data::Tokenizer> tokenizer;
  std::string tokenizer_note;
  try {
    tokenizer.emplace(data::gguf_tokenizer(file));
  } catch (const Error& refused) {
    tokenizer_note = refused.message();  // the weights are still of use: --init-from with shards' tokenizer
  }

  fs::path final_dir = fs::path(out_dir).lexically_normal();
  if (final_dir.filename().empty()) final_dir = final_dir.parent_path();  // "dir/"
  const fs::path temp_dir = final_dir.string() + ".partial";
  fs::remove_all(temp_dir, error);  // debris of an earlier killed conversion
  if (!fs::create_directories(temp_dir, error) || error)
    throw Error(module, "cannot create " + temp_dir.string() + ": " + (error ? error.message() : "it exists"),
                "check the parent folder's permissions and free space");
  train::write_hf_model_files(temp_dir.string(), config, layout, weights, tokenizer ? &*tokenizer : nullptr, "");
  fs::rename(temp_dir, final_dir, error);
  if (error) throw Error(module, "cannot rename " + temp_dir.string() + " to " + out_dir + ": " + error.message());
  char line[512];
  std::snprintf(line, sizeof line, "%s: %s, %d layers, hidden %d, %d/%d heads, vocab %d, %lld parameters (F32)\n", out_dir.c_str(),
                model::model_type_name(config.type).c_str(), config.layers, config.hidden, config.heads, config.kv_heads,
                config.vocab_size, static_cast<long long>(config.parameter_count()));
  std::string written = line;
  if (tokenizer) {
    std::snprintf(line, sizeof line, "tokenizer: %d tokens, end of document '%s' = %d\n", tokenizer->vocab_size(),
                  tokenizer->end_of_document_token().c_str(), tokenizer->end_of_document_id());
    written += line;
  } else {
    written += "no tokenizer written: " + tokenizer_note + "\n";
  }
  return written;
}

}  // namespace fpdt::train
