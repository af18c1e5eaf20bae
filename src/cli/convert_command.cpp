// `fpdt convert FILE.gguf --out DIR` (see convert_command.h): the model read by model/gguf.h, its
// tokenizer by data/gguf_tokenizer.h, the folder written by train::write_hf_model_files under a
// temporary name and renamed when complete, so a failed conversion leaves nothing at DIR.
#include "convert_command.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/base/options.h"
#include "fpdt/data/gguf_tokenizer.h"
#include "fpdt/model/gguf.h"
#include "fpdt/train/checkpoint.h"

namespace fpdt::cli {

namespace fs = std::filesystem;

int command_convert(int argc, char** argv) {
  std::string out;
  OptionSet options("convert", "Convert a GGUF file (llama.cpp) into a Hugging Face model folder, weights dequantized to F32.",
                    "FILE.gguf");
  options.add("out", "DIR", "the folder to write (must not exist)", out);
  if (!options.parse(argc, argv)) return 0;
  if (options.positional().size() != 1 || out.empty())
    throw Error("cli", "fpdt convert takes one GGUF file and --out", "fpdt convert FILE.gguf --out DIR");
  const std::string path = options.positional()[0];
  if (!model::is_gguf_path(path))
    throw Error("cli", path + " is not a .gguf file", "fpdt convert reads GGUF files; Hugging Face folders are read as they are");
  std::error_code error;
  if (fs::exists(fs::symlink_status(out, error)))
    throw Error("cli", "--out " + out + " exists; fpdt convert does not overwrite", "choose a new folder or remove it");

  const model::GgufFile file(path);
  const model::ModelConfig config = model::gguf_model_config(file);
  const model::ParameterLayout layout(config);
  model::ParameterBlock weights(layout, "weights from " + path, Tier::offload);
  model::load_gguf_weights(file, config, layout, weights);
  std::optional<data::Tokenizer> tokenizer;
  std::string tokenizer_note;
  try {
    tokenizer.emplace(data::gguf_tokenizer(file));
  } catch (const Error& refused) {
    tokenizer_note = refused.message();  // the weights are still of use: --init-from with shards' tokenizer
  }

  fs::path final_dir = fs::path(out).lexically_normal();
  if (final_dir.filename().empty()) final_dir = final_dir.parent_path();  // "dir/"
  const fs::path temp_dir = final_dir.string() + ".partial";
  fs::remove_all(temp_dir, error);  // debris of an earlier killed conversion
  if (!fs::create_directories(temp_dir, error) || error)
    throw Error("cli", "cannot create " + temp_dir.string() + ": " + (error ? error.message() : "it exists"),
                "check the parent folder's permissions and free space");
  train::write_hf_model_files(temp_dir.string(), config, layout, weights, tokenizer ? &*tokenizer : nullptr, "");
  fs::rename(temp_dir, final_dir, error);
  if (error) throw Error("cli", "cannot rename " + temp_dir.string() + " to " + out + ": " + error.message());
  std::printf("%s: %s, %d layers, hidden %d, %d/%d heads, vocab %d, %lld parameters (F32)\n", out.c_str(),
              model::model_type_name(config.type).c_str(), config.layers, config.hidden, config.heads, config.kv_heads,
              config.vocab_size, static_cast<long long>(config.parameter_count()));
  if (tokenizer)
    std::printf("tokenizer: %d tokens, end of document '%s' = %d\n", tokenizer->vocab_size(),
                tokenizer->end_of_document_token().c_str(), tokenizer->end_of_document_id());
  else
    std::printf("no tokenizer written: %s\n", tokenizer_note.c_str());
  return 0;
}

}  // namespace fpdt::cli
