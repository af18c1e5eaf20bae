// Which tokenizer made a token shard: the one rule that `train` (the shards in --data against the
// tokenizer.json beside them and against an --init-from model's) and `eval` (a shard against its
// checkpoint's tokenizer) ask, and the one message that names both sides when they differ.
#pragma once

#include <string>

#include "fpdt/data/shard.h"
#include "fpdt/data/tokenizer.h"

namespace fpdt::data {

// Whether `tokenizer` made `shard`: the shard records its fingerprint, or records none (version 1,
// written only by the byte tokenizer, the one there was then) and `tokenizer` is the byte tokenizer
// with room for the shard's ids.
bool made_by(const ShardReader& shard, const Tokenizer& tokenizer);

// Throws one fpdt::Error of `module` unless made_by(shard, tokenizer): it names the shard's tokenizer
// and `model_folder`'s (the folder whose model was trained with `tokenizer`), with their vocabularies.
void check_made_by(const std::string& module, const ShardReader& shard, const Tokenizer& tokenizer,
                   const std::string& model_folder);

// The tokenizer that made the shards of `data_dir`: its tokenizer.json (the byte tokenizer when there
// is none), checked with made_by against `train_shard` and, when given, `val_shard`, which must agree,
// and against the end-of-document id they record. Throws fpdt::Error of `module` naming the files.
Tokenizer shards_tokenizer(const std::string& module, const std::string& data_dir, const ShardReader& train_shard,
                           const ShardReader* val_shard);

}  // namespace fpdt::data
