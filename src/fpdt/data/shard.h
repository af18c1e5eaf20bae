// Token shards: the binary file the trainer reads tokens from. A 48-byte little-endian header
//   magic "FPDTSHRD" (8) | u32 version = 2 | u32 token width in bytes (2 or 4) | u64 token count |
//   u32 vocab size | u32 end-of-document id (0xFFFFFFFF: none) | u64 tokenizer fingerprint (0: not
//   recorded) | u64 reserved (0)
// followed by the tokens, little-endian, uint16 when vocab ≤ 65536 else uint32. Version 1 shards (a
// 32-byte header: ... | u32 vocab size | u32 reserved) are still read; they record no tokenizer (all
// were written by the byte tokenizer, the only one there was). Writers are atomic
// (temp file in the same directory, fsync, rename); readers check everything once at open, so a bad
// file fails with one fpdt::Error naming the file and the problem, never mid-training.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fpdt::data {

inline constexpr char kShardMagic[8] = {'F', 'P', 'D', 'T', 'S', 'H', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 2;
inline constexpr size_t kShardHeaderBytes = 48;
inline constexpr size_t kShardV1HeaderBytes = 32;
inline constexpr uint32_t kNoEndOfDocument = 0xFFFFFFFFu;
// Largest vocabulary stored with 2-byte tokens.
inline constexpr uint64_t kShardMaxUint16Vocab = 65536;

// Which tokenizer made a shard: Tokenizer::fingerprint() (0: not recorded) and its end-of-document id.
struct ShardTokenizer {
  uint64_t fingerprint = 0;
  uint32_t end_of_document_id = kNoEndOfDocument;
  bool operator==(const ShardTokenizer&) const = default;
};

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_width_bytes = 2;  // 2 = uint16, 4 = uint32
  uint64_t token_count = 0;
  uint32_t vocab_size = 0;
  ShardTokenizer tokenizer;
};

// Width a shard of this vocabulary uses: 2 when vocab_size ≤ 65536, else 4.
uint32_t shard_token_width_bytes(uint64_t vocab_size);

// Streams tokens into a new shard. The file appears at `path` only when finish() succeeds (temp
// file next to it, fsync, rename, fsync of the directory); a writer destroyed unfinished removes
// its temp file and leaves any previous `path` untouched.
class ShardWriter {
 public:
  // Throws fpdt::Error naming the directory when a file cannot be created there.
  ShardWriter(std::string path, uint32_t vocab_size, ShardTokenizer tokenizer = {});
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends tokens; each must be in [0, vocab_size) (else fpdt::Error naming the token and index).
  void append(std::span<const int32_t> tokens);
  // Moves the last `tokens` tokens appended here to the end of `other` (a writer of the same
  // vocabulary): a stream split whose point is known only at its end (fpdt tokenize's val.bin).
  void move_last_tokens_to(ShardWriter& other, uint64_t tokens);
  // Writes the header, fsyncs and renames into place. Returns the number of tokens written.
  uint64_t finish();

  uint64_t token_count() const { return token_count_; }
  const std::string& path() const { return path_; }

 private:
  void flush_staging();
  void abandon() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint32_t vocab_size_ = 0;
  uint32_t token_width_bytes_ = 2;
  ShardTokenizer tokenizer_;
  uint64_t token_count_ = 0;
  std::vector<unsigned char> staging_;  // encoded tokens waiting to be written
};

// Writes a whole shard at once (see ShardWriter).
void write_shard(const std::string& path, std::span<const int32_t> tokens, uint32_t vocab_size,
                 ShardTokenizer tokenizer = {});

// How much ShardReader checks at open. `full` also scans every token against the vocab size (one
// sequential pass over the file); `header` checks the header and the file size only.
enum class ShardCheck : uint8_t { header, full };

// A memory-mapped, validated, read-only shard. Movable, not copyable.
class ShardReader {
 public:
  ShardReader() = default;
  // Throws fpdt::Error naming `path` for: a missing or unreadable file, a file shorter than the
  // header, a wrong magic, an unsupported version, a bad token width, a size that disagrees with the
  // header's token count, and (ShardCheck::full) a token ≥ vocab size.
  explicit ShardReader(std::string path, ShardCheck check = ShardCheck::full);
  ~ShardReader();
  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&& other) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // Copies tokens [begin, begin + count) into out (count ints). Throws when the range is outside.
  void read(uint64_t begin, uint64_t count, int32_t* out) const;

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  uint64_t token_count() const { return header_.token_count; }
  uint32_t vocab_size() const { return header_.vocab_size; }
  uint32_t token_width_bytes() const { return header_.token_width_bytes; }
  const ShardTokenizer& tokenizer() const { return header_.tokenizer; }

 private:
  void close() noexcept;

  std::string path_;
  ShardHeader header_;
  size_t header_bytes_ = kShardHeaderBytes;  // where the tokens start (32 in version 1)
  const unsigned char* map_ = nullptr;  // the whole file
  size_t map_bytes_ = 0;
};

}  // namespace fpdt::data
