// `fpdt tokenize`: text and FASTA inputs (files or pipes, each read once) encoded by a tokenizer into
// one token stream, written as train.bin and val.bin shards with the tokenizer's files beside them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/data/tokenizer.h"

namespace fpdt::data {

struct TokenizeSummary {
  std::string train_path;      // <output_dir>/train.bin
  std::string val_path;        // <output_dir>/val.bin (written even when it holds 0 tokens)
  uint64_t train_tokens = 0;
  uint64_t val_tokens = 0;
  uint64_t documents = 0;      // non-empty text files + FASTA records with sequence
  int32_t vocab_size = 0;
};

// Tokenizes `input_paths` in order with `tokenizer` into one token stream and writes its first part to
// <output_dir>/train.bin and its last floor(val_fraction · tokens) tokens to val.bin; the shards record
// the tokenizer's fingerprint, and its tokenizer.json and tokenizer_config.json are written beside
// them. An input is FASTA when has_fasta_extension() or its first byte is '>' (each record a
// document), else text (one document per file); it may be a pipe, read once. Documents are separated
// by the tokenizer's end-of-document token. Memory: the largest document plus a few MiB. Throws
// fpdt::Error for an unreadable, compressed or non-file input (a device), text that the tokenizer
// cannot take (not UTF-8), an output directory that is missing or not writable, or that already holds
// shards or other tokenizer files (unless `overwrite`), val_fraction outside [0, 1), or inputs without
// any token; nothing in output_dir changes then.
TokenizeSummary tokenize_files(const std::vector<std::string>& input_paths, const std::string& output_dir,
                               double val_fraction, const Tokenizer& tokenizer, bool overwrite = false);

}  // namespace fpdt::data
