// The CUDA backend's host-side decisions, which need no GPU and so run everywhere: what a GEMM of given
// sizes does (k = 0 never reaches cuBLASLt), the operand alignments its heuristic is told, where bf16
// operand copies lie in their scratch, the key its cached plans are found by (gemm_plan.h); how a byte range splits over pinned pieces and staging slots
// (pieces.h); which GPU a rank takes (device_choice.h); which attention blocks may go to cuDNN and the band
// it is asked for (sdpa_plan.h), and — where libcudnn is on the machine — that cuDNN accepts the graphs
// made for them, as far as it goes without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/kernels/cuda/cuda_backend.h"
#include "fpdt/kernels/cuda/device_choice.h"
#include "fpdt/kernels/cuda/gemm_plan.h"
#include "fpdt/kernels/cuda/pieces.h"
#include "fpdt/kernels/cuda/sdpa_plan.h"
#include "testing.h"

namespace fpdt::kernels::cuda {
namespace {

TEST(GemmAction, EmptyInnerDimensionNeverReachesTheLibrary) {
  EXPECT_EQ(gemm_action(16, 8, 0, 0.0f), GemmAction::zero_c);   // dx = 0 · w over 0 outputs
  EXPECT_EQ(gemm_action(16, 8, 0, 1.0f), GemmAction::nothing);  // dw += xᵀ · dout over 0 tokens
  EXPECT_EQ(gemm_action(0, 8, 0, 0.0f), GemmAction::nothing);   // nothing to write
  EXPECT_EQ(gemm_action(16, 0, 5, 0.0f), GemmAction::nothing);
  EXPECT_EQ(gemm_action(1, 1, 1, 0.0f), GemmAction::matmul);
  EXPECT_THROW(gemm_action(16, 8, 0, 0.5f), Error);  // C = 0.5 · C: no caller needs it
  EXPECT_THROW(gemm_action(-1, 8, 4, 0.0f), Error);
}

TEST(GemmAlignment, IsTheLargestPowerOfTwoDividingTheAddressUpTo256) {
  alignas(256) static char buffer[4096];
  EXPECT_EQ(alignment_bytes(buffer), 256u);
  EXPECT_EQ(alignment_bytes(buffer + 512), 256u);
  EXPECT_EQ(alignment_bytes(buffer + 128), 128u);
  EXPECT_EQ(alignment_bytes(buffer + 64), 64u);
  EXPECT_EQ(alignment_bytes(buffer + 4), 4u);
  EXPECT_EQ(alignment_bytes(buffer + 1), 1u);
  EXPECT_EQ(alignment_bytes(nullptr), 256u);
  // A parameter tensor starts at a multiple of 64 bytes (tensor/memory.h): the heuristic is told at
  // least 64, never more than the address has.
  Rng rng(fpdt::testing::fresh_seed());
  for (int trial = 0; trial < 200; ++trial) {
    const size_t offset = 64 * rng.below(60);
    const uint32_t alignment = alignment_bytes(buffer + offset);
    EXPECT_GE(alignment, 64u) << offset;
    EXPECT_EQ(offset % alignment, 0u) << offset;
  }
}

// A bf16 GEMM's operands are copied one after another into one scratch buffer (linear.cu gemm_inputs):
// each copy must hold its 2 bytes per value and end where the next may start at cuBLASLt's largest
// alignment, wasting less than that alignment.
TEST(GemmBf16Copies, EachCopyHoldsItsValuesAndKeepsTheNextAligned) {
  EXPECT_EQ(bf16_copy_bytes(0), 0u);  // an operand over no values takes no room
  EXPECT_EQ(bf16_copy_bytes(1), 256u);
  EXPECT_EQ(bf16_copy_bytes(128), 256u);
  EXPECT_EQ(bf16_copy_bytes(129), 512u);
  EXPECT_THROW(bf16_copy_bytes(-1), Error);
  alignas(256) static char scratch[1 << 16];
  Rng rng(fpdt::testing::fresh_seed());
  for (int trial = 0; trial < 200; ++trial) {
    size_t offset = 0;
    for (int operand = 0; operand < 3; ++operand) {
      const int64_t values = static_cast<int64_t>(rng.below(5000));
      const size_t bytes = bf16_copy_bytes(values);
      EXPECT_GE(bytes, 2u * values) << values;
      EXPECT_LT(bytes, 2u * values + kMaxGemmAlignmentBytes) << values;
      EXPECT_EQ(alignment_bytes(scratch + offset), kMaxGemmAlignmentBytes) << "copy " << operand << " misaligned";
      offset += bytes;
    }
  }
}

TEST(GemmKey, EveryFieldTellsPlansApart) {
  const GemmKey base{GemmInputs::fp32, true, false, 64, 32, 16, 16, 16, 64, 256, 64, 128};
  std::vector<GemmKey> keys{base};
  auto vary = [&](auto change) {
    GemmKey key = base;
    change(key);
    keys.push_back(key);
  };
  vary([](GemmKey& k) { k.inputs = GemmInputs::bf16; });  // same shape, bf16 operands: its own plan
  vary([](GemmKey& k) { k.trans_a = false; });
  vary([](GemmKey& k) { k.trans_b = true; });
  vary([](GemmKey& k) { k.m = 65; });
  vary([](GemmKey& k) { k.n = 33; });
  vary([](GemmKey& k) { k.k = 0; });
  vary([](GemmKey& k) { k.lda = 17; });
  vary([](GemmKey& k) { k.ldb = 17; });
  vary([](GemmKey& k) { k.ldc = 65; });
  vary([](GemmKey& k) { k.align_a = 64; });
  vary([](GemmKey& k) { k.align_b = 256; });
  vary([](GemmKey& k) { k.align_c = 4; });
  std::unordered_set<GemmKey, GemmKeyHash> plans(keys.begin(), keys.end());
  EXPECT_EQ(plans.size(), keys.size());
  GemmKey same = base;
  EXPECT_TRUE(plans.count(same) == 1 && same == base);
  EXPECT_EQ(GemmKeyHash{}(same), GemmKeyHash{}(base));
}

struct Part {
  size_t piece, in_piece, done, bytes;
};
std::vector<Part> parts_of(size_t offset, size_t bytes, size_t piece_bytes) {
  std::vector<Part> parts;
  for_each_piece(offset, bytes, piece_bytes, [&](size_t piece, size_t in_piece, size_t done, size_t length) {
    parts.push_back({piece, in_piece, done, length});
  });
  return parts;
}

TEST(Pieces, SplitARangeAtEveryPieceBoundaryAndNowhereElse) {
  EXPECT_TRUE(parts_of(123, 0, 64).empty());  // zero bytes: no copy at all
  const auto inside = parts_of(70, 50, 64);   // [70, 120): inside piece 1
  ASSERT_EQ(inside.size(), 1u);
  EXPECT_EQ(inside[0].piece, 1u);
  EXPECT_EQ(inside[0].in_piece, 6u);
  const auto at_end = parts_of(64, 64, 64);  // exactly piece 1
  ASSERT_EQ(at_end.size(), 1u);
  EXPECT_EQ(at_end[0].piece, 1u);
  EXPECT_EQ(at_end[0].bytes, 64u);
  Rng rng(fpdt::testing::fresh_seed());
  for (int trial = 0; trial < 500; ++trial) {
    const size_t piece_bytes = 1 + rng.below(100), offset = rng.below(1000), bytes = rng.below(1000);
    const auto parts = parts_of(offset, bytes, piece_bytes);
    size_t covered = 0;
    for (const Part& part : parts) {
      ASSERT_EQ(part.done, covered) << "parts out of order";
      ASSERT_GT(part.bytes, 0u);
      ASSERT_LE(part.in_piece + part.bytes, piece_bytes) << "a part crosses its piece's end";
      ASSERT_EQ(part.piece * piece_bytes + part.in_piece, offset + covered) << "a part at the wrong place";
      covered += part.bytes;
    }
    EXPECT_EQ(covered, bytes);
    EXPECT_LE(parts.size(), pieces_for(bytes, piece_bytes) + 1);
  }
}

// Sets one environment variable for the scope, and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_.c_str(), old_->c_str(), 1) : ::unsetenv(name_.c_str()); }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(DeviceChoice, TheLaunchersLocalRankPicksTheGpu) {
  const ScopedEnv a("OMPI_COMM_WORLD_LOCAL_RANK", nullptr), b("MPI_LOCALRANKID", nullptr),
      c("MV2_COMM_WORLD_LOCAL_RANK", nullptr), d("SLURM_LOCALID", nullptr), e("LOCAL_RANK", nullptr);
  EXPECT_EQ(local_rank_from_environment(), 0);  // a plain run
  {
    const ScopedEnv rank("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    EXPECT_EQ(local_rank_from_environment(), 3);
    EXPECT_EQ(device_for_local_rank(local_rank_from_environment(), 8), 3);
  }
  {
    const ScopedEnv rank("SLURM_LOCALID", "1");
    EXPECT_EQ(local_rank_from_environment(), 1);
  }
  {
    const ScopedEnv rank("OMPI_COMM_WORLD_LOCAL_RANK", "two");
    EXPECT_THROW(local_rank_from_environment(), Error);
  }
  EXPECT_EQ(device_for_local_rank(5, 1), 0);  // one visible device per rank (CUDA_VISIBLE_DEVICES)
  EXPECT_EQ(device_for_local_rank(0, 4), 0);
  try {
    device_for_local_rank(4, 4);
    ADD_FAILURE() << "five ranks on a node of four GPUs must be refused";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("local rank 4 but only 4 GPUs"), std::string::npos) << error.what();
  }
  EXPECT_THROW(device_for_local_rank(0, 0), Error);
}


// A bf16 block of one sequence, one head pair, head dim 64 at the given positions and window.
AttentionChunkParams sdpa_block(int64_t q_begin, int64_t Cq, int64_t kv_begin, int64_t Ck, int64_t window) {
  AttentionChunkParams p;
  p.B = 1;
  p.H = 4;
  p.Hkv = 2;
  p.D = 64;
  p.Cq = Cq;
  p.Ck = Ck;
  p.q_begin = q_begin;
  p.kv_begin = kv_begin;
  p.window = window;
  p.scale = 0.125;
  p.precision = Precision::bf16;
  return p;
}

// Whether some query row of the block sees no key by position.
bool has_empty_row(const AttentionChunkParams& p) {
  for (int64_t i = 0; i < p.Cq; ++i) {
    bool any = false;
    for (int64_t j = 0; j < p.Ck && !any; ++j) any = position_visible(p.q_begin + i, p.kv_begin + j, p.window);
    if (!any) return true;
  }
  return false;
}

// The band plan_sdpa asks cuDNN for keeps exactly the pairs position_visible keeps, over random blocks at
// every relative placement (above, on and below the diagonal, windows shorter and longer than the blocks);
// and a block is refused for its mask only where cuDNN could not express it: a query row with no key, or a
// window that ends before the kv block for the first row (a left bound ≤ 0).
TEST(SdpaPlan, BandKeepsExactlyThePositionVisiblePairs) {
  Rng rng(fpdt::testing::fresh_seed());
  int accepted = 0, refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t Cq = 1 + static_cast<int64_t>(rng.below(24)), Ck = 1 + static_cast<int64_t>(rng.below(24));
    const int64_t q_begin = static_cast<int64_t>(rng.below(64)), kv_begin = static_cast<int64_t>(rng.below(64));
    const int64_t window = rng.below(3) == 0 ? 0 : 1 + static_cast<int64_t>(rng.below(40));
    const AttentionChunkParams p = sdpa_block(q_begin, Cq, kv_begin, Ck, window);
    const SdpaDecision decision = plan_sdpa(p);
    const std::string where = "q_begin=" + std::to_string(q_begin) + " Cq=" + std::to_string(Cq) +
                              " kv_begin=" + std::to_string(kv_begin) + " Ck=" + std::to_string(Ck) +
                              " window=" + std::to_string(window);
    if (!decision.tries_cudnn()) {
      ++refused;
      const bool left_bound_not_positive = window > 0 && q_begin - kv_begin >= window;
      EXPECT_TRUE(has_empty_row(p) || left_bound_not_positive) << where << ": refused (" << decision.refusal
                                                               << ") though cuDNN could take it";
      continue;
    }
    ++accepted;
    EXPECT_FALSE(has_empty_row(p)) << where;
    for (int64_t i = 0; i < Cq; ++i)
      for (int64_t j = 0; j < Ck; ++j)
        ASSERT_EQ(sdpa_band_keeps(decision.key.right_bound, decision.key.left_bound, i, j),
                  position_visible(q_begin + i, kv_begin + j, window))
            << where << " i=" << i << " j=" << j << " right=" << decision.key.right_bound
            << " left=" << decision.key.left_bound;
    if (decision.key.right_bound != kNoBound) {
      EXPECT_GE(decision.key.right_bound, 0) << where;
    }
    if (decision.key.left_bound != kNoBound) {
      EXPECT_GT(decision.key.left_bound, 0) << where;
    }
  }
  EXPECT_GT(accepted, 300);  // both outcomes were exercised
  EXPECT_GT(refused, 300);
}

// FPDT's own blocks — q chunk i against kv chunks j ≤ i of equal chunks, no window — all go to cuDNN: the
// diagonal with the causal band (right bound 0), the rest unmasked; and their keys do not carry positions, so
// one graph serves every diagonal block and one every block below it.
TEST(SdpaPlan, TheChunkScheduleNeedsTwoGraphs) {
  constexpr int64_t C = 256;
  const SdpaKey diagonal = plan_sdpa(sdpa_block(0, C, 0, C, 0)).key;
  const SdpaKey below = plan_sdpa(sdpa_block(C, C, 0, C, 0)).key;
  EXPECT_EQ(diagonal.right_bound, 0);
  EXPECT_EQ(diagonal.left_bound, kNoBound);
  EXPECT_EQ(below.right_bound, kNoBound);
  EXPECT_EQ(below.left_bound, kNoBound);
  EXPECT_FALSE(diagonal == below);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const SdpaDecision decision = plan_sdpa(sdpa_block(i * C, C, j * C, C, 0));
      ASSERT_TRUE(decision.tries_cudnn()) << "q chunk " << i << ", kv chunk " << j << ": " << decision.refusal;
      const SdpaKey& want = i == j ? diagonal : below;
      EXPECT_TRUE(decision.key == want) << "q chunk " << i << ", kv chunk " << j;
      EXPECT_EQ(SdpaKeyHash{}(decision.key), SdpaKeyHash{}(want));
    }
  // The scale is baked into a graph: another scale is another key.
  AttentionChunkParams rescaled = sdpa_block(0, C, 0, C, 0);
  rescaled.scale = 0.1;
  EXPECT_FALSE(plan_sdpa(rescaled).key == diagonal);
  EXPECT_FLOAT_EQ(plan_sdpa(rescaled).key.scale(), 0.1f);
}

// What cuDNN's fused attention cannot compute goes to the CUDA-core kernels, each with its sentence.
TEST(SdpaPlan, RefusesWhatCudnnCannotCompute) {
  auto refusal = [](const AttentionChunkParams& p) { return plan_sdpa(p).refusal; };
  AttentionChunkParams fp32 = sdpa_block(0, 64, 0, 64, 0);
  fp32.precision = Precision::fp32;
  EXPECT_NE(refusal(fp32).find("fp32"), std::string::npos);
  AttentionChunkParams documents = sdpa_block(0, 64, 0, 64, 0);
  const int32_t ids[64] = {};
  documents.q_doc_ids = documents.kv_doc_ids = ids;
  EXPECT_NE(refusal(documents).find("document"), std::string::npos);
  for (const int D : {12, 60, 264}) {
    AttentionChunkParams odd = sdpa_block(0, 64, 0, 64, 0);
    odd.D = D;
    EXPECT_NE(refusal(odd).find("head dim"), std::string::npos) << D;
  }
  EXPECT_NE(refusal(sdpa_block(0, 64, 64, 64, 0)).find("above the diagonal"), std::string::npos);
  for (const int D : {8, 64, 128, 256}) {
    AttentionChunkParams fine = sdpa_block(0, 64, 0, 64, 0);
    fine.D = D;
    EXPECT_TRUE(plan_sdpa(fine).tries_cudnn()) << D;
  }
}


// The graphs cudnn_sdpa.cpp makes for the blocks of the chunk schedule — the diagonal's causal band, the
// unmasked blocks below it, a window's band, GQA and the head dims of the models fpdt trains — pass the
// frontend's checks and become cuDNN operation graphs for a Hopper GPU (sm_90), without a device: what can
// be known of them on a CPU (plans and execution need the GPU: the cuda tests). Where this build or
// machine has no cuDNN there is nothing to ask: skipped, saying why.
TEST(SdpaGraphs, CudnnAcceptsTheScheduleGraphsWithoutAGpu) {
  const std::string kernels = cuda_attention_kernels(Precision::bf16);
  if (kernels.rfind("cuDNN", 0) != 0) GTEST_SKIP() << "no cuDNN here: " << kernels;
  struct Block {
    int64_t q_begin, Cq, kv_begin, Ck, window;
  };
  for (const int D : {64, 128, 256})
    for (const int Hkv : {4, 1})
      for (const Block b : {Block{0, 512, 0, 512, 0}, Block{512, 512, 0, 512, 0}, Block{512, 512, 512, 512, 300},
                            Block{100, 150, 0, 130, 0}}) {
        AttentionChunkParams p = sdpa_block(b.q_begin, b.Cq, b.kv_begin, b.Ck, b.window);
        p.B = 2;
        p.Hkv = Hkv;
        p.D = D;
        EXPECT_EQ(cuda_check_attention_graphs(p, 90), "")
            << "D=" << D << " Hkv=" << Hkv << " q_begin=" << b.q_begin << " Cq=" << b.Cq << " kv_begin=" << b.kv_begin
            << " Ck=" << b.Ck << " window=" << b.window;
      }
}

}  // namespace
}  // namespace fpdt::kernels::cuda
