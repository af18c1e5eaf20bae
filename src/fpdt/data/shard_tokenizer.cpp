// Which tokenizer made a token shard (see shard_tokenizer.h).
#include "fpdt/data/shard_tokenizer.h"

#include <filesystem>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"

namespace fpdt::data {

namespace {

// "0x… (vocabulary N)", or "bytes (not recorded; vocabulary N)" for a version 1 shard.
std::string recorded_tokenizer(const ShardReader& shard) {
  const uint64_t fingerprint = shard.tokenizer().fingerprint;
  return (fingerprint == 0 ? std::string("bytes (not recorded; ") : fingerprint_string(fingerprint) + " (") +
         "vocabulary " + std::to_string(shard.vocab_size()) + ")";
}

}  // namespace

bool made_by(const ShardReader& shard, const Tokenizer& tokenizer) {
  const uint64_t recorded = shard.tokenizer().fingerprint;
  if (recorded != 0) return recorded == tokenizer.fingerprint();
  return tokenizer.is_byte_tokenizer() && shard.vocab_size() <= static_cast<uint32_t>(tokenizer.vocab_size());
}

void check_made_by(const std::string& module, const ShardReader& shard, const Tokenizer& tokenizer,
                   const std::string& model_folder) {
  if (made_by(shard, tokenizer)) return;
  throw Error(module,
              shard.path() + " was made by tokenizer " + recorded_tokenizer(shard) + ", but " + model_folder +
                  "'s model was trained with tokenizer " + fingerprint_string(tokenizer.fingerprint()) + " (vocabulary " +
                  std::to_string(tokenizer.vocab_size()) + ")",
              "tokenize the text with the model's own tokenizer: fpdt tokenize --tokenizer " + model_folder +
                  " --out DIR FILE...");
}

Tokenizer shards_tokenizer(const std::string& module, const std::string& data_dir, const ShardReader& train_shard,
                           const ShardReader* val_shard) {
  if (val_shard != nullptr && train_shard.tokenizer() != val_shard->tokenizer())
    throw Error(module,
                train_shard.path() + " and " + val_shard->path() + " were made by different tokenizers (" +
                    fingerprint_string(train_shard.tokenizer().fingerprint) + ", " +
                    fingerprint_string(val_shard->tokenizer().fingerprint) + ")",
                "re-create both with one `fpdt tokenize` run");
  const std::string file = path_in(data_dir, kTokenizerFile);
  const bool has_file = std::filesystem::exists(file);
  Tokenizer tokenizer = has_file ? Tokenizer::load(data_dir) : Tokenizer::bytes();
  const uint64_t recorded = train_shard.tokenizer().fingerprint;
  if (!made_by(train_shard, tokenizer)) {
    if (!has_file)
      throw Error(module,
                  train_shard.path() + " was made by tokenizer " + recorded_tokenizer(train_shard) + ", but " + data_dir +
                      " holds no " + kTokenizerFile,
                  "put back the tokenizer.json that `fpdt tokenize` wrote beside the shards, or re-run it");
    throw Error(module,
                train_shard.path() + " was made by another tokenizer (" + recorded_tokenizer(train_shard) + ") than " +
                    file + " (" + fingerprint_string(tokenizer.fingerprint()) + ")",
                "re-run `fpdt tokenize` with this tokenizer, or put back the tokenizer.json it wrote");
  }
  const uint32_t separator = train_shard.tokenizer().end_of_document_id;
  if (recorded != 0 && separator != static_cast<uint32_t>(tokenizer.end_of_document_id()))
    throw Error(module,
                train_shard.path() +
                    (separator == kNoEndOfDocument ? std::string(" records no token between its documents")
                                                   : " separates documents with id " + std::to_string(separator)) +
                    ", but " + data_dir + "'s tokenizer ends documents with '" + tokenizer.end_of_document_token() +
                    "' (id " + std::to_string(tokenizer.end_of_document_id()) + ")",
                "put back the tokenizer_config.json that `fpdt tokenize` wrote, or re-run it");
  return tokenizer;
}

}  // namespace fpdt::data
