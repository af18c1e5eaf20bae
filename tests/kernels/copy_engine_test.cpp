// The host copy engine (kernels/copy_engine.h) on storage of its own making: copies run in submission
// order (a read queued after writes of its slot sees the last of them), events count the copies, and a
// copy that fails fails every later wait; storage it cannot move is an internal error, not a hang.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fpdt/kernels/copy_engine.h"
#include "fpdt/kernels/device_memory.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

// Offload storage in a host vector; write number `fail_at` (from 1) throws, as a full disk does.
class VectorStorage final : public OffloadStorage, public HostMoves {
 public:
  explicit VectorStorage(size_t bytes, int fail_at = 0) : OffloadStorage(bytes), bytes_(bytes), fail_at_(fail_at) {}
  void* resident(size_t) const override { return nullptr; }
  void write(size_t offset, const void* src, size_t bytes) override {
    if (++writes_ == fail_at_) throw Error("offload", "the test's storage refused write " + std::to_string(writes_));
    std::memcpy(bytes_.data() + offset, src, bytes);
  }
  void read(size_t offset, void* dst, size_t bytes) const override { std::memcpy(dst, bytes_.data() + offset, bytes); }

 private:
  std::vector<char> bytes_;
  int fail_at_;
  int writes_ = 0;  // on the engine's thread only
};

// Storage that is not the host's: the engine cannot reach its bytes.
class ForeignStorage final : public OffloadStorage {
 public:
  ForeignStorage() : OffloadStorage(kTransferAlignBytes) {}
  void* resident(size_t) const override { return nullptr; }
};

TEST(CopyEngine, CopiesRunInSubmissionOrder) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  constexpr size_t kSlot = 256, kSlots = 4;
  VectorStorage storage(kSlot * kSlots);
  const auto queue = make_host_copy_queue();
  queue->wait(0);  // event 0 has always happened
  // Rounds of writes of fresh bytes to random slots, each followed by a read of a random slot into its
  // own buffer: FIFO order means each read holds the last bytes written to its slot before it.
  constexpr int kRounds = 200;
  std::vector<std::vector<char>> sources(kRounds, std::vector<char>(kSlot)), reads(kRounds, std::vector<char>(kSlot));
  std::vector<std::vector<char>> latest(kSlots, std::vector<char>(kSlot, 0));
  std::vector<std::vector<char>> expected(kRounds);
  const std::vector<char> zeros(kSlot, 0);  // a source stays untouched until its copy has run
  for (size_t slot = 0; slot < kSlots; ++slot) queue->write(storage, slot * kSlot, zeros.data(), kSlot);
  CopyEvent last = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (char& byte : sources[round]) byte = static_cast<char>(rng.below(256));
    const size_t written = rng.below(kSlots), read = rng.below(kSlots);
    const CopyEvent write_event = queue->write(storage, written * kSlot, sources[round].data(), kSlot);
    latest[written] = sources[round];
    const CopyEvent read_event = queue->read(reads[round].data(), storage, read * kSlot, kSlot);
    expected[round] = latest[read];
    EXPECT_GT(write_event, last);
    EXPECT_EQ(read_event, write_event + 1);  // one event per copy, in submission order
    last = read_event;
  }
  queue->wait(last);  // waiting for the last copy is waiting for every copy before it
  for (int round = 0; round < kRounds; ++round) EXPECT_EQ(reads[round], expected[round]) << "round " << round;
  queue->wait_all();
}

TEST(CopyEngine, AFailedCopyFailsEveryLaterWait) {
  VectorStorage storage(2 * kTransferAlignBytes, 2);
  std::vector<char> bytes(kTransferAlignBytes, 7);
  const auto queue = make_host_copy_queue();
  const CopyEvent first = queue->write(storage, 0, bytes.data(), bytes.size());
  queue->wait(first);  // the first write succeeds
  const CopyEvent failed = queue->write(storage, kTransferAlignBytes, bytes.data(), bytes.size());
  testing::expect_contains(testing::error_message([&] { queue->wait(failed); }), {"[offload]", "refused write 2"});
  const CopyEvent later = queue->read(bytes.data(), storage, 0, bytes.size());
  testing::expect_contains(testing::error_message([&] { queue->wait(later); }), {"refused write 2"});
  testing::expect_contains(testing::error_message([&] { queue->wait_all(); }), {"refused write 2"});
}

TEST(CopyEngine, StorageItCannotMoveIsAnInternalError) {
  ForeignStorage storage;
  std::vector<char> bytes(kTransferAlignBytes);
  const auto queue = make_host_copy_queue();
  testing::expect_contains(testing::error_message([&] { queue->write(storage, 0, bytes.data(), bytes.size()); }),
                           {"[internal]"});
  testing::expect_contains(testing::error_message([&] { queue->read(bytes.data(), storage, 0, bytes.size()); }),
                           {"[internal]"});
  queue->wait_all();  // nothing was queued
}

}  // namespace
}  // namespace fpdt::kernels
