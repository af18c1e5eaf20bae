// FASTA, read as `fpdt tokenize` reads it: each record is one document, its sequence lines only, as one
// upper-case text. FastaParser takes a file in pieces of any size (tokenize_files streams its inputs);
// fasta_records and tokenize_fasta take a whole text.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fpdt::data {

// FASTA state machine: feed() any split of the text, the records are the same. A record's text goes
// to `on_record` when the next header starts or at finish().
class FastaParser {
 public:
  explicit FastaParser(std::function<void(const std::string&)> on_record) : on_record_(std::move(on_record)) {}
  void feed(std::string_view text);
  void finish();

 private:
  std::function<void(const std::string&)> on_record_;
  std::string record_;
  bool at_line_start_ = true;
  bool skipping_line_ = false;
};

// Texts of the records of a FASTA file: sequence lines only ('>' headers, ';' comments and blank lines
// skipped), without newlines or other whitespace, ASCII upper-cased. Records without sequence lines
// add nothing. Lines before the first header count as a record.
std::vector<std::string> fasta_records(std::string_view text);
// The byte tokenizer's tokens of a FASTA text: its records with kEndOfDocumentId *between* them.
std::vector<int32_t> tokenize_fasta(std::string_view text);

// True when the extension (any case) is .fa, .fasta or .fna.
bool has_fasta_extension(std::string_view path);

}  // namespace fpdt::data
