// The fuzz targets' main where no libFuzzer toolchain is present (GCC builds, `make test`): runs
// every file of the seed corpus through LLVMFuzzerTestOneInput, then N random mutations of them
// (byte flips, interesting numbers, JSON tokens, cuts, repeats, splices). Usage:
//   fuzz_<target> [--mutations N] [--seed S] CORPUS_DIR_OR_FILE...
// A finding aborts the process; the input that caused it is written to ./fuzz-crash-<seed>-<i>
// first, and --seed S replays the same sequence.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Input = std::vector<uint8_t>;

// The input being run and where to save it, for the signal handler (which may only write).
const Input* g_current = nullptr;
char g_crash_path[256];

void save_current_input(int signal_number) {
  if (g_current != nullptr) {
    const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      if (::write(fd, g_current->data(), g_current->size()) < 0) {
      }
      ::close(fd);
      static const char note[] = "fuzz: the input that failed is in ";
      if (::write(2, note, sizeof note - 1) < 0 || ::write(2, g_crash_path, std::strlen(g_crash_path)) < 0 ||
          ::write(2, "\n", 1) < 0) {
      }
    }
  }
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

Input read_input(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return Input(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// Byte strings that matter to the formats fuzzed: JSON structure and numbers at the edges of the
// integer types the readers convert to.
const char* const kTokens[] = {"{", "}", "[", "]", "\"", ":", ",", "null", "true", "-", "-1", "0", "1e308",
                               "1.5", "2147483648", "4294967296", "9223372036854775807", "18446744073709551616",
                               "\\u0000", "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"",
                               "\"F32\"", "\"BF16\"", "\"I64\""};
const uint64_t kNumbers[] = {0, 1, 2, 4, 31, 32, 0x7f, 0x80, 0xff, 0x7fffffff, 0x80000000, 0xffffffff,
                             0x100000000ull, 0x7fffffffffffffffull, 0x8000000000000000ull, ~0ull};

void mutate(Input& input, const std::vector<Input>& corpus, std::mt19937_64& rng) {
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  switch (below(8)) {
    case 0:  // flip a bit
      if (!input.empty()) input[below(input.size())] ^= static_cast<uint8_t>(1u << below(8));
      break;
    case 1:  // a random byte
      if (!input.empty()) input[below(input.size())] = static_cast<uint8_t>(rng());
      break;
    case 2: {  // an interesting number, little-endian, 1, 2, 4 or 8 bytes, over or into the input
      const uint64_t value = kNumbers[below(std::size(kNumbers))];
      const size_t width = size_t{1} << below(4);
      const size_t at = below(input.size() + 1);
      if (at + width > input.size()) input.resize(at + width);
      for (size_t i = 0; i < width; ++i) input[at + i] = static_cast<uint8_t>(value >> (8 * i));
      break;
    }
    case 3: {  // insert a token
      const char* token = kTokens[below(std::size(kTokens))];
      input.insert(input.begin() + static_cast<std::ptrdiff_t>(below(input.size() + 1)), token,
                   token + std::strlen(token));
      break;
    }
    case 4: {  // erase a range
      if (input.empty()) break;
      const size_t at = below(input.size());
      const size_t n = 1 + below(std::min<size_t>(input.size() - at, 64));
      input.erase(input.begin() + static_cast<std::ptrdiff_t>(at), input.begin() + static_cast<std::ptrdiff_t>(at + n));
      break;
    }
    case 5: {  // repeat a range (deep nesting, long strings)
      if (input.empty()) break;
      const size_t at = below(input.size());
      const size_t n = 1 + below(std::min<size_t>(input.size() - at, 8));
      const Input piece(input.begin() + static_cast<std::ptrdiff_t>(at),
                        input.begin() + static_cast<std::ptrdiff_t>(at + n));
      const size_t times = 1 + below(input.size() < 4096 ? 200 : 2);
      for (size_t t = 0; t < times; ++t)
        input.insert(input.begin() + static_cast<std::ptrdiff_t>(at), piece.begin(), piece.end());
      break;
    }
    case 6:  // cut the end
      input.resize(below(input.size() + 1));
      break;
    default: {  // splice: the head of this input, the tail of another
      const Input& other = corpus[below(corpus.size())];
      const size_t keep = below(input.size() + 1), from = below(other.size() + 1);
      input.resize(keep);
      input.insert(input.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mutations = 0;
  uint64_t seed = std::random_device{}();
  std::vector<Input> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mutations" && i + 1 < argc) {
      mutations = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> files;  // sorted: the same order, so --seed replays
      for (const auto& entry : std::filesystem::directory_iterator(arg))
        if (entry.is_regular_file()) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto& file : files) corpus.push_back(read_input(file));
    } else if (std::filesystem::is_regular_file(arg)) {
      corpus.push_back(read_input(arg));
    } else {
      std::fprintf(stderr, "usage: %s [--mutations N] [--seed S] CORPUS_DIR_OR_FILE...\n  no such file: %s\n", argv[0],
                   arg.c_str());
      return 2;
    }
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "%s: no corpus files given\n", argv[0]);
    return 2;
  }
  std::printf("replay: %zu corpus inputs, %llu mutations, --seed %llu\n", corpus.size(),
              static_cast<unsigned long long>(mutations), static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  for (int signal_number : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(signal_number, save_current_input);

  for (size_t i = 0; i < corpus.size(); ++i) {
    std::snprintf(g_crash_path, sizeof g_crash_path, "fuzz-crash-corpus-%zu", i);
    g_current = &corpus[i];
    LLVMFuzzerTestOneInput(corpus[i].data(), corpus[i].size());
  }
  std::mt19937_64 rng(seed);
  Input input;
  for (uint64_t i = 0; i < mutations; ++i) {
    input = corpus[rng() % corpus.size()];
    for (uint64_t n = 1 + rng() % 4; n > 0; --n) mutate(input, corpus, rng);
    std::snprintf(g_crash_path, sizeof g_crash_path, "fuzz-crash-%llu-%llu", static_cast<unsigned long long>(seed),
                  static_cast<unsigned long long>(i));
    g_current = &input;
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  g_current = nullptr;
  std::printf("replay: done, no finding\n");
  return 0;
}
