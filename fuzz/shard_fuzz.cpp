// Fuzz target: a token shard (train.bin / val.bin), opened with the full check the trainer uses and
// then read whole, as the data loader and `fpdt inspect` do.
#include <vector>

#include "fpdt/data/shard.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fpdt::fuzz::MemoryFile file;
  const std::string& path = file.write(data, size);
  fpdt::fuzz::expect_clean([&] {
    const fpdt::data::ShardReader shard(path, fpdt::data::ShardCheck::full);
    std::vector<int32_t> tokens(shard.token_count());
    shard.read(0, shard.token_count(), tokens.data());
    for (int32_t token : tokens)
      if (token < 0 || static_cast<uint32_t>(token) >= shard.vocab_size())
        fpdt::fuzz::finding("a checked shard yielded token " + std::to_string(token));
  });
  return 0;
}
