// Token shard writing (streamed, atomic) and reading (validated once, then memory-mapped).
// Byte order is explicit (little-endian on disk whatever the host), so shards move between machines.
#include "fpdt/data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"

namespace fpdt::data {

namespace {

constexpr const char* kModule = "shard";
constexpr size_t kStagingBytes = size_t{1} << 20;
constexpr const char* kRetokenizeHint = "re-create the shard with `fpdt tokenize`";

std::string os_error(int error_number) { return std::strerror(error_number); }

std::string in_quotes(const std::string& path) { return "'" + path + "'"; }

void store_u32(unsigned char* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}
void store_u64(unsigned char* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}
uint32_t load_u16(const unsigned char* in) { return uint32_t{in[0]} | (uint32_t{in[1]} << 8); }
uint32_t load_u32(const unsigned char* in) {
  return uint32_t{in[0]} | (uint32_t{in[1]} << 8) | (uint32_t{in[2]} << 16) | (uint32_t{in[3]} << 24);
}
uint64_t load_u64(const unsigned char* in) {
  return uint64_t{load_u32(in)} | (uint64_t{load_u32(in + 4)} << 32);
}

void encode_header(unsigned char* out, const ShardHeader& header) {
  std::memcpy(out, kShardMagic, 8);
  store_u32(out + 8, header.version);
  store_u32(out + 12, header.token_width_bytes);
  store_u64(out + 16, header.token_count);
  store_u32(out + 24, header.vocab_size);
  store_u32(out + 28, header.tokenizer.end_of_document_id);
  store_u64(out + 32, header.tokenizer.fingerprint);
  store_u64(out + 40, 0);  // reserved
}

// Writes all `bytes` at `offset` (pwrite) or at the current position (offset < 0), retrying short
// writes and EINTR. Returns 0 or the errno of the failure.
int write_all(int fd, const unsigned char* data, size_t bytes, off_t offset) {
  while (bytes > 0) {
    const ssize_t written = offset < 0 ? ::write(fd, data, bytes) : ::pwrite(fd, data, bytes, offset);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (written == 0) return EIO;
    data += written;
    bytes -= static_cast<size_t>(written);
    if (offset >= 0) offset += written;
  }
  return 0;
}

std::string directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// A name next to `path` that no other writer (thread or process) picks.
std::string temp_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path target(path);
  // Built by appending: GCC 12 at -O3 gives a false -Wrestrict warning for "literal" + std::string here.
  std::string name(".");
  name.append(target.filename().string()).append(".tmp.").append(std::to_string(::getpid()));
  name.append(".").append(std::to_string(counter.fetch_add(1)));
  return (target.parent_path() / name).string();
}

}  // namespace

uint32_t shard_token_width_bytes(uint64_t vocab_size) { return vocab_size <= kShardMaxUint16Vocab ? 2 : 4; }

// ---------------------------------------------------------------------------------------------
// ShardWriter

ShardWriter::ShardWriter(std::string path, uint32_t vocab_size, ShardTokenizer tokenizer)
    : path_(std::move(path)),
      vocab_size_(vocab_size),
      token_width_bytes_(shard_token_width_bytes(vocab_size)),
      tokenizer_(tokenizer) {
  FPDT_CHECK(vocab_size_ > 0, kModule, "cannot write shard " + in_quotes(path_) + " with vocab size 0",
             "pass the tokenizer's vocab size");
  FPDT_CHECK(vocab_size_ <= uint64_t{INT32_MAX} + 1, kModule,
             "cannot write shard " + in_quotes(path_) + " with vocab size " + std::to_string(vocab_size_) +
                 ": token ids are 32-bit signed",
             "use a vocabulary of at most 2^31 tokens");
  FPDT_CHECK(!std::filesystem::path(path_).filename().empty(), kModule,
             "shard path " + in_quotes(path_) + " names a directory, not a file", "add a file name such as train.bin");
  temp_path_ = temp_path_for(path_);
  fd_ = ::open(temp_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);  // read back by move_last_tokens_to
  if (fd_ < 0) {
    const int error_number = errno;
    const std::string directory = directory_of(path_);
    throw Error(kModule,
                "cannot create shard " + in_quotes(path_) + ": cannot write in directory " + in_quotes(directory) +
                    " (" + os_error(error_number) + ")",
                "create the directory (mkdir -p " + directory + ") or check its permissions");
  }
  // Placeholder header; finish() rewrites it with the final count.
  staging_.reserve(kStagingBytes);
  staging_.resize(kShardHeaderBytes);
  encode_header(staging_.data(), ShardHeader{kShardVersion, token_width_bytes_, 0, vocab_size_, tokenizer_});
}

ShardWriter::~ShardWriter() { abandon(); }

void ShardWriter::abandon() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
}

void ShardWriter::flush_staging() {
  if (staging_.empty()) return;
  if (const int error_number = write_all(fd_, staging_.data(), staging_.size(), -1)) {
    abandon();
    throw Error(kModule, "cannot write shard " + in_quotes(path_) + ": " + os_error(error_number),
                "check free space in " + directory_of(path_));
  }
  staging_.clear();
}

void ShardWriter::append(std::span<const int32_t> tokens) {
  FPDT_CHECK(fd_ >= 0, kModule, "append to shard " + in_quotes(path_) + " after finish() or a failed write", "");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t token = tokens[i];
    if (token < 0 || static_cast<uint32_t>(token) >= vocab_size_) {
      abandon();
      throw Error(kModule,
                  "cannot write shard " + in_quotes(path_) + ": token " + std::to_string(token) + " at index " +
                      std::to_string(token_count_ + i) + " is outside the vocabulary [0, " +
                      std::to_string(vocab_size_) + ")",
                  "the vocab size passed to the writer must exceed every token id");
    }
    if (staging_.size() + token_width_bytes_ > kStagingBytes) flush_staging();
    unsigned char bytes[4];
    store_u32(bytes, static_cast<uint32_t>(token));
    staging_.insert(staging_.end(), bytes, bytes + token_width_bytes_);
  }
  token_count_ += tokens.size();
}

void ShardWriter::move_last_tokens_to(ShardWriter& other, uint64_t tokens) {
  FPDT_CHECK(fd_ >= 0, kModule, "move tokens out of shard " + in_quotes(path_) + " after finish() or a failed write", "");
  FPDT_ASSERT(tokens <= token_count_ && other.vocab_size_ == vocab_size_);
  flush_staging();
  const uint64_t kept = token_count_ - tokens;
  std::vector<unsigned char> raw(kStagingBytes);
  std::vector<int32_t> decoded;
  for (uint64_t at = kept; at < token_count_;) {
    const uint64_t count = std::min<uint64_t>(token_count_ - at, kStagingBytes / token_width_bytes_);
    const size_t bytes = static_cast<size_t>(count) * token_width_bytes_;
    size_t got_bytes = 0;
    while (got_bytes < bytes) {
      const ssize_t got = ::pread(fd_, raw.data() + got_bytes, bytes - got_bytes,
                                  static_cast<off_t>(kShardHeaderBytes + at * token_width_bytes_ + got_bytes));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const int error_number = got < 0 ? errno : EIO;
        abandon();
        throw Error(kModule, "cannot read back shard " + in_quotes(path_) + ": " + os_error(error_number),
                    "check the disk of " + directory_of(path_));
      }
      got_bytes += static_cast<size_t>(got);
    }
    decoded.resize(static_cast<size_t>(count));
    for (size_t i = 0; i < decoded.size(); ++i)
      decoded[i] = static_cast<int32_t>(token_width_bytes_ == 2 ? load_u16(raw.data() + 2 * i) : load_u32(raw.data() + 4 * i));
    other.append(decoded);
    at += count;
  }
  const off_t kept_bytes = static_cast<off_t>(kShardHeaderBytes + kept * token_width_bytes_);
  if (::ftruncate(fd_, kept_bytes) != 0 || ::lseek(fd_, kept_bytes, SEEK_SET) != kept_bytes) {
    const int error_number = errno;
    abandon();
    throw Error(kModule, "cannot write shard " + in_quotes(path_) + ": " + os_error(error_number),
                "check the disk of " + directory_of(path_));
  }
  token_count_ = kept;
}

uint64_t ShardWriter::finish() {
  FPDT_CHECK(fd_ >= 0, kModule, "finish() on shard " + in_quotes(path_) + " after finish() or a failed write", "");
  flush_staging();
  unsigned char header[kShardHeaderBytes];
  encode_header(header, ShardHeader{kShardVersion, token_width_bytes_, token_count_, vocab_size_, tokenizer_});
  int error_number = write_all(fd_, header, sizeof header, 0);
  if (error_number == 0 && ::fsync(fd_) != 0) error_number = errno;
  if (error_number == 0 && ::close(std::exchange(fd_, -1)) != 0) error_number = errno;
  if (error_number == 0 && ::rename(temp_path_.c_str(), path_.c_str()) != 0) error_number = errno;
  if (error_number != 0) {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    ::unlink(temp_path_.c_str());
    throw Error(kModule, "cannot write shard " + in_quotes(path_) + ": " + os_error(error_number),
                "check free space and permissions in " + directory_of(path_));
  }
  // Make the rename itself durable. Best effort: some file systems refuse fsync on directories.
  const int directory_fd = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory_fd >= 0) {
    ::fsync(directory_fd);
    ::close(directory_fd);
  }
  return token_count_;
}

void write_shard(const std::string& path, std::span<const int32_t> tokens, uint32_t vocab_size,
                 ShardTokenizer tokenizer) {
  ShardWriter writer(path, vocab_size, tokenizer);
  writer.append(tokens);
  writer.finish();
}

// ---------------------------------------------------------------------------------------------
// ShardReader

ShardReader::ShardReader(std::string path, ShardCheck check) : path_(std::move(path)) {
  const std::string name = in_quotes(path_);
  // The mapping outlives the descriptor, which closes when `file` goes out of scope.
  const InputFile file(path_, kModule, "token shard", "pass a .bin file written by `fpdt tokenize`");
  const int fd = file.fd();
  auto fail = [&](const std::string& what, const std::string& hint) { throw Error(kModule, what, hint); };
  const size_t file_bytes = file.size_bytes();
  auto too_short = [&](size_t header_bytes) {
    fail("token shard " + name + " is " + std::to_string(file_bytes) + " bytes, shorter than the " +
             std::to_string(header_bytes) + "-byte shard header",
         "the file is empty or was cut short; " + std::string(kRetokenizeHint));
  };
  if (file_bytes < kShardV1HeaderBytes) too_short(kShardV1HeaderBytes);

  unsigned char raw[kShardHeaderBytes];
  auto read_header = [&](size_t bytes) {
    size_t got_bytes = 0;
    while (got_bytes < bytes) {
      const ssize_t got = ::pread(fd, raw + got_bytes, bytes - got_bytes, static_cast<off_t>(got_bytes));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) fail("cannot read the header of token shard " + name + ": " + os_error(got < 0 ? errno : EIO), "");
      got_bytes += static_cast<size_t>(got);
    }
  };
  read_header(kShardV1HeaderBytes);
  if (std::memcmp(raw, kShardMagic, 8) != 0)
    fail(name + " is not an fpdt token shard (it does not start with the magic \"FPDTSHRD\")",
         "pass a .bin file written by `fpdt tokenize`");
  header_.version = load_u32(raw + 8);
  if (header_.version != kShardVersion && header_.version != 1)
    fail("token shard " + name + " has format version " + std::to_string(header_.version) +
             "; this build reads versions 1 and " + std::to_string(kShardVersion),
         "re-create the shard with this build's `fpdt tokenize`, or use the fpdt build that wrote it");
  header_bytes_ = header_.version == 1 ? kShardV1HeaderBytes : kShardHeaderBytes;
  if (file_bytes < header_bytes_) too_short(header_bytes_);
  read_header(header_bytes_);
  header_.token_width_bytes = load_u32(raw + 12);
  header_.token_count = load_u64(raw + 16);
  header_.vocab_size = load_u32(raw + 24);
  if (header_.version >= 2) {
    header_.tokenizer.end_of_document_id = load_u32(raw + 28);
    header_.tokenizer.fingerprint = load_u64(raw + 32);
  }
  if (header_.token_width_bytes != 2 && header_.token_width_bytes != 4)
    fail("token shard " + name + " has a bad token width of " + std::to_string(header_.token_width_bytes) +
             " bytes; supported widths are 2 (uint16) and 4 (uint32)",
         "the header is corrupt; " + std::string(kRetokenizeHint));
  if (header_.vocab_size == 0)
    fail("token shard " + name + " is corrupt: its header says vocab size 0", kRetokenizeHint);
  if (header_.vocab_size > uint64_t{INT32_MAX} + 1)
    fail("token shard " + name + " is corrupt: its vocab size " + std::to_string(header_.vocab_size) +
             " does not fit 32-bit signed token ids",
         kRetokenizeHint);
  if (header_.token_width_bytes == 2 && header_.vocab_size > kShardMaxUint16Vocab)
    fail("token shard " + name + " is corrupt: a bad token width of 2 bytes cannot hold vocab size " +
             std::to_string(header_.vocab_size),
         kRetokenizeHint);

  const uint64_t max_tokens = (UINT64_MAX - header_bytes_) / header_.token_width_bytes;
  const bool count_fits = header_.token_count <= max_tokens;
  const uint64_t expected_bytes = count_fits ? header_bytes_ + header_.token_count * header_.token_width_bytes : 0;
  if (!count_fits || expected_bytes != file_bytes) {
    const std::string expected = count_fits ? std::to_string(expected_bytes) : "more than 2^64";
    const bool truncated = !count_fits || expected_bytes > file_bytes;
    fail("token shard " + name + (truncated ? " is truncated" : " has trailing data") + ": its header says " +
             std::to_string(header_.token_count) + " tokens of " + std::to_string(header_.token_width_bytes) +
             " bytes, so expected " + expected + " bytes, but the file has " + std::to_string(file_bytes) +
             " bytes",
         truncated ? "the copy or the tokenize run was cut short; " + std::string(kRetokenizeHint)
                   : std::string(kRetokenizeHint));
  }

  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) fail("cannot map token shard " + name + ": " + os_error(errno), "");
  map_ = static_cast<const unsigned char*>(map);
  map_bytes_ = file_bytes;

  if (check == ShardCheck::full) {
    ::madvise(map, file_bytes, MADV_SEQUENTIAL);
    const unsigned char* tokens = map_ + header_bytes_;
    const uint32_t vocab = header_.vocab_size;
    for (uint64_t i = 0; i < header_.token_count; ++i) {
      const uint32_t token = header_.token_width_bytes == 2 ? load_u16(tokens + 2 * i) : load_u32(tokens + 4 * i);
      if (token >= vocab) {
        close();
        throw Error(kModule,
                    "token shard " + name + " is corrupt: token " + std::to_string(token) + " at index " +
                        std::to_string(i) + " (byte offset " +
                        std::to_string(header_bytes_ + i * header_.token_width_bytes) +
                        ") is not below the vocab size " + std::to_string(vocab),
                    std::string(kRetokenizeHint) + " (the file is damaged or was written for another vocabulary)");
      }
    }
    ::madvise(map, file_bytes, MADV_NORMAL);
  }
}

ShardReader::~ShardReader() { close(); }

void ShardReader::close() noexcept {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

ShardReader::ShardReader(ShardReader&& other) noexcept
    : path_(std::move(other.path_)),
      header_(other.header_),
      header_bytes_(other.header_bytes_),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)) {
  other.header_ = ShardHeader{};
}

ShardReader& ShardReader::operator=(ShardReader&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    header_ = std::exchange(other.header_, ShardHeader{});
    header_bytes_ = other.header_bytes_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
  }
  return *this;
}

void ShardReader::read(uint64_t begin, uint64_t count, int32_t* out) const {
  FPDT_CHECK(map_ != nullptr || count == 0, kModule, "read from a closed token shard", "");
  FPDT_CHECK(begin <= header_.token_count && count <= header_.token_count - begin, kModule,
             "read of tokens [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                 ") is outside token shard " + in_quotes(path_) + ", which has " +
                 std::to_string(header_.token_count) + " tokens",
             "");
  const unsigned char* tokens = map_ + header_bytes_;
  if (header_.token_width_bytes == 2) {
    for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(load_u16(tokens + 2 * (begin + i)));
  } else {
    for (uint64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(load_u32(tokens + 4 * (begin + i)));
  }
}

}  // namespace fpdt::data
