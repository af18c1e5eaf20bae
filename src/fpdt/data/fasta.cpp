// FASTA records (see fasta.h).
#include "fpdt/data/fasta.h"

#include <filesystem>

#include "fpdt/data/tokenizer.h"

namespace fpdt::data {

void FastaParser::feed(std::string_view text) {
  for (const char c : text) {
    if (skipping_line_) {
      if (c == '\n') skipping_line_ = false, at_line_start_ = true;
      continue;
    }
    if (c == '\n') {
      at_line_start_ = true;
      continue;
    }
    if (at_line_start_ && (c == '>' || c == ';')) {
      if (c == '>') finish();  // a header starts a record; ';' is a comment line
      skipping_line_ = true;
      at_line_start_ = false;
      continue;
    }
    at_line_start_ = false;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') continue;
    record_.push_back((c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c);
  }
}

void FastaParser::finish() {
  if (!record_.empty()) on_record_(record_);
  record_.clear();
}

std::vector<std::string> fasta_records(std::string_view text) {
  std::vector<std::string> records;
  FastaParser parser([&](const std::string& record) { records.push_back(record); });
  parser.feed(text);
  parser.finish();
  return records;
}

std::vector<int32_t> tokenize_fasta(std::string_view text) {
  std::vector<int32_t> tokens;
  for (const std::string& record : fasta_records(text)) {
    if (!tokens.empty()) tokens.push_back(kEndOfDocumentId);
    for (const char c : record) tokens.push_back(static_cast<unsigned char>(c));
  }
  return tokens;
}

bool has_fasta_extension(std::string_view path) {
  std::string extension = std::filesystem::path(path).extension().string();
  for (char& c : extension)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return extension == ".fa" || extension == ".fasta" || extension == ".fna";
}

}  // namespace fpdt::data
