// The cpu-guarded backend's memory (kernels/guarded/): a compute-tier handle cannot be read or written
// by host code — a planted dereference, like the ones a GPU would crash on, dies of SIGSEGV in a child
// process — while the memory's own operations, its copy queue and the backend's ops reach the bytes and
// give exactly what host_memory() and the cpu backend give. (The ops, row by row: backend_ops_test.)
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <limits>
#include <numeric>
#include <thread>
#include <vector>

#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/guarded/guarded_memory.h"
#include "fpdt/model/config.h"
#include "fpdt/pipeline/model_states.h"
#include "fpdt/tensor/memory.h"
#include "testing.h"

namespace fpdt::kernels {
namespace {

class GuardedMemory : public ::testing::Test {
 protected:
  // The child of a death test re-runs the test from the start (the parent has OpenMP and copy threads).
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

float read_through(const void* handle) { return *static_cast<const volatile float*>(handle); }
void write_through(void* handle) { *static_cast<volatile float*>(handle) = 1.0f; }

TEST_F(GuardedMemory, HostCodeCannotReadOrWriteAComputeTierBuffer) {
  DeviceMemory& memory = guarded_memory();
  const auto buffer = memory.allocate(5000, "test buffer", "");
  EXPECT_EQ(buffer->bytes(), 8192u);  // whole transfer blocks, as host_memory()'s
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kTransferAlignBytes, 0u);
  EXPECT_EXIT(read_through(buffer->data()), ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EXIT(write_through(static_cast<char*>(buffer->data()) + 4996), ::testing::KilledBySignal(SIGSEGV), "");
  // The readable twin is another address of the same bytes.
  const std::vector<float> value = {3.5f};
  memory.upload(buffer->data(), value.data(), sizeof(float));
  EXPECT_NE(guarded_readable(buffer->data()), buffer->data());
  EXPECT_EQ(*static_cast<const float*>(guarded_readable(buffer->data())), 3.5f);
  int host = 0;
  EXPECT_EQ(guarded_readable(&host), &host);  // host memory passes unchanged
}

// Device memory is never zeroed for us (cudaMalloc promises nothing), so neither is guarded memory: a new
// buffer, and a resident store, hold 0xFF bytes — NaN floats, −1 integers — until something writes them, so
// a read of what nothing wrote shows in the results of a cpu-guarded run instead of passing as zeros.
TEST_F(GuardedMemory, NewBuffersHoldPoisonNotZeros) {
  DeviceMemory& memory = guarded_memory();
  const auto buffer = memory.allocate(3 * kTransferAlignBytes + 12, "test buffer", "");
  std::vector<float> floats(buffer->bytes() / sizeof(float), 0.0f);
  memory.download(floats.data(), buffer->data(), buffer->bytes());
  for (const float value : floats) ASSERT_TRUE(std::isnan(value));
  std::vector<int32_t> ids(4, 0);
  memory.download(ids.data(), buffer->data(), sizeof(int32_t) * ids.size());
  for (const int32_t id : ids) EXPECT_EQ(id, -1);
  const auto storage = memory.allocate_offload(OffloadConfig{OffloadKind::none, ""}, kTransferAlignBytes, false, "store");
  float resident = 0.0f;
  memory.download(&resident, storage->resident(0), sizeof resident);
  EXPECT_TRUE(std::isnan(resident));
}

// ZeRO's worker thread (stage 2 and up: the collectives' queue) computes on the backend's device: it binds
// itself through DeviceMemory::bind_thread before its first task (on a GPU, cudaSetDevice — a new thread
// starts on GPU 0, whichever the backend took). The test's own thread never needed to.
TEST_F(GuardedMemory, ZerosWorkerThreadBindsToTheBackendsDevice) {
  auto backend = make_backend(BackendKind::cpu_guarded);
  pipeline::RunSpec run;
  run.backend = BackendKind::cpu_guarded;
  run.zero = 2;
  auto world = comm::make_local();
  const size_t before = guarded_bound_threads();
  {  // made and ended: the worker has started (and joined) by the end of the scope
    pipeline::ModelStates states(model::preset("llama-tiny"), *backend, *world, run, testing::fresh_seed());
    states.zero_gradients();
    states.reduce_gradients();
  }
  EXPECT_EQ(guarded_bound_threads(), before + 1) << "the collectives' worker did not bind itself";
  EXPECT_FALSE(guarded_thread_bound(std::this_thread::get_id()));
}

TEST_F(GuardedMemory, ResidentStorageIsComputeTierToo) {
  const auto storage = guarded_memory().allocate_offload(OffloadConfig{OffloadKind::none, ""}, 2 * kTransferAlignBytes,
                                                         false, "test store");
  ASSERT_NE(storage->resident(kTransferAlignBytes), nullptr);
  EXPECT_EXIT(read_through(storage->resident(kTransferAlignBytes)), ::testing::KilledBySignal(SIGSEGV), "");
}

TEST_F(GuardedMemory, OperationsAndCopyQueueMoveTheBytes) {
  DeviceMemory& memory = guarded_memory();
  Rng rng(testing::fresh_seed());
  const std::vector<float> values = testing::random_normal<float>(rng, 1000);
  const auto source = memory.allocate(kTransferAlignBytes, "source", "");
  const auto target = memory.allocate(kTransferAlignBytes, "target", "");
  memory.upload(source->data(), values.data(), 4000);
  std::vector<float> got(1000, -1.0f);
  // copy_2d: 4 rows of 3 floats, from rows 8 floats apart into rows 5 apart, over zeros.
  memory.fill_zero(target->data(), 4000);
  memory.copy_2d(target->data(), 5 * sizeof(float), static_cast<float*>(source->data()) + 2, 8 * sizeof(float),
                 3 * sizeof(float), 4);
  memory.download(got.data(), target->data(), 4000);
  for (int row = 0; row < 4; ++row)
    for (int col = 0; col < 5; ++col) EXPECT_EQ(got[row * 5 + col], col < 3 ? values[row * 8 + 2 + col] : 0.0f);
  memory.copy(target->data(), source->data(), 4000);
  memory.download(got.data(), target->data(), 4000);
  EXPECT_EQ(got, values);

  const testing::TempDir dir;
  for (const OffloadConfig& config : {OffloadConfig{OffloadKind::ram, ""}, OffloadConfig{OffloadKind::disk, dir.path()}}) {
    SCOPED_TRACE(static_cast<int>(config.kind));
    const auto storage = memory.allocate_offload(config, 3 * kTransferAlignBytes, false, "test storage");
    EXPECT_EQ(storage->resident(0), nullptr);
    memory.fill_zero(target->data(), 4000);
    const auto queue = memory.make_copy_queue();
    queue->write(*storage, 2 * kTransferAlignBytes, source->data(), 4000);
    queue->wait(queue->read(target->data(), *storage, 2 * kTransferAlignBytes, 4000));
    memory.download(got.data(), target->data(), 4000);
    EXPECT_EQ(got, values);
  }
}

// What model_states.cpp did before issue 29 — the host writing the initial weights through the weights'
// handle, and reading them to check them — dies on the guarded backend; through uploads, downloads and
// the backend's ops the same states are the cpu backend's, bit for bit.
TEST_F(GuardedMemory, APlantedHostDereferenceOfModelStatesIsCaught) {
  const model::ModelConfig config = model::resolve_model("llama-tiny");
  const auto world = comm::make_local();
  const auto guarded_backend = make_backend(BackendKind::cpu_guarded), cpu_backend = make_backend(BackendKind::cpu);
  pipeline::ModelStates guarded(config, *guarded_backend, *world, pipeline::RunSpec{}, 7);
  pipeline::ModelStates cpu(config, *cpu_backend, *world, pipeline::RunSpec{}, 7);
  float* weights = guarded.weights().data();
  EXPECT_EXIT(read_through(weights + 100), ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EXIT(write_through(weights), ::testing::KilledBySignal(SIGSEGV), "");

  EXPECT_TRUE(guarded.weights_finite());
  EXPECT_TRUE(guarded.moments_valid());
  model::ParameterBlock got(guarded.layout(), "test copy", Tier::offload);
  guarded.gather_weights(got);
  const int64_t n = guarded.layout().total_numel();
  EXPECT_EQ(0, std::memcmp(got.data(), cpu.weights().data(), static_cast<size_t>(n) * sizeof(float)));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  guarded_memory().upload(weights + n - 1, &nan, sizeof nan);
  EXPECT_FALSE(guarded.weights_finite());  // the last weight, found through count_invalid
}

}  // namespace
}  // namespace fpdt::kernels
