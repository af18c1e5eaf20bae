// The chunk plan, golden-tested: which global tokens each rank's chunks hold (DESIGN.md §1's closed
// form), padding, and a clear error for each impossible request. Also the
// offload tier's errors for a directory that does not exist and for an unknown tier.
#include <gtest/gtest.h>

#include "fpdt/base/error.h"
#include "fpdt/pipeline/chunk_plan.h"
#include "fpdt/pipeline/offload.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

TEST(ChunkPlan, LayoutIsTheClosedFormGolden) {
  // S = 22 tokens over P = 2 ranks in u = 3 chunks: c = ceil(22 / 6) = 4, C = 8, padded to 24.
  const ChunkPlan rank0 = make_chunk_plan(22, 2, 0, 0, 3);
  const ChunkPlan rank1 = make_chunk_plan(22, 2, 1, 0, 3);
  EXPECT_EQ(rank0.local_chunk_tokens, 4);
  EXPECT_EQ(rank0.chunk_tokens, 8);
  EXPECT_EQ(rank0.padded_tokens, 24);
  EXPECT_EQ(rank0.local_tokens(), 12);
  EXPECT_EQ(rank0.describe(),
            "chunk 0: global [0, 4) real 4 | attends kv 0..0\n"
            "chunk 1: global [8, 12) real 4 | attends kv 0..1\n"
            "chunk 2: global [16, 20) real 4 | attends kv 0..2\n");
  EXPECT_EQ(rank1.describe(),
            "chunk 0: global [4, 8) real 4 | attends kv 0..0\n"
            "chunk 1: global [12, 16) real 4 | attends kv 0..1\n"
            "chunk 2: global [20, 24) real 2 | attends kv 0..2\n");
  // After the all-to-all, chunk i is [i·C, (i+1)·C): rank order of the local chunks is global order.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rank0.local_chunk_begin(i), rank0.chunk_begin(i));
    EXPECT_EQ(rank1.local_chunk_begin(i), rank0.chunk_begin(i) + rank0.local_chunk_tokens);
  }
}

TEST(ChunkPlan, ChunkTokensGiveTheChunkCount) {
  const ChunkPlan plan = make_chunk_plan(100000, 4, 3, 8192, 0);
  EXPECT_EQ(plan.chunks, 13);  // ceil(100000 / 8192)
  EXPECT_EQ(plan.local_chunk_tokens, 2048);
  EXPECT_EQ(plan.local_chunk_begin(12), (12 * 4 + 3) * 2048);
  EXPECT_EQ(plan.local_chunk_real_tokens(12), 0);  // past S on the last rank: all padding
  EXPECT_EQ(make_chunk_plan(100000, 4, 0, 8192, 0).local_chunk_real_tokens(12), 100000 - 12 * 8192);
}

TEST(ChunkPlan, AChunkIsNeverLongerThanTheSequence) {
  // C = 4096 asked for S = 2048 on 2 ranks: the chunk is the sequence (no padding).
  const ChunkPlan whole = make_chunk_plan(2048, 2, 0, 4096, 0);
  EXPECT_EQ(whole.chunk_tokens, 2048);
  EXPECT_EQ(whole.chunks, 1);
  EXPECT_EQ(whole.padded_tokens, 2048);
  // S = 1001 on 4 ranks: rounded up to a multiple of P, 1004 (3 padding tokens).
  const ChunkPlan rounded = make_chunk_plan(1001, 4, 0, 4096, 0);
  EXPECT_EQ(rounded.chunk_tokens, 1004);
  EXPECT_EQ(rounded.local_chunk_tokens, 251);
  EXPECT_EQ(rounded.padded_tokens - rounded.seq_tokens, 3);
  // Shorter chunks keep their size; the padding is what the last one does not fill.
  const ChunkPlan chunked = make_chunk_plan(1001, 4, 0, 256, 0);
  EXPECT_EQ(chunked.chunk_tokens, 256);
  EXPECT_EQ(chunked.chunks, 4);
  EXPECT_EQ(chunked.padded_tokens - chunked.seq_tokens, 23);
}

TEST(ChunkPlan, ImpossibleRequestsAreClearErrors) {
  testing::expect_contains(testing::error_message([] { make_chunk_plan(1000, 4, 0, 1002, 0); }),
                           {"--chunk-tokens 1002 does not split over --sp 4 ranks", "multiple of 4"});
  testing::expect_contains(testing::error_message([] { make_chunk_plan(0, 2, 0, 0, 1); }), {"must be positive"});
  testing::expect_contains(testing::error_message([] { make_chunk_plan(10, 2, 2, 0, 1); }), {"rank 2 is outside"});
  testing::expect_contains(testing::error_message([] { make_chunk_plan(10, 2, 0, 4, 2); }), {"exactly one"});
}

TEST(Offload, MissingDirectoryAndUnknownTierAreClearErrors) {
  LayoutShape shape;
  shape.c = 4;
  shape.h = 8;
  const OffloadConfig missing = parse_offload("disk:/nonexistent/fpdt");
  testing::expect_contains(testing::error_message([&] { OffloadStore(kernels::host_memory(), missing, shape, false); }),
                           {"[offload] cannot create an offload file in /nonexistent/fpdt", "create the directory"});
  testing::expect_contains(testing::error_message([] { parse_offload("tape"); }),
                           {"[run spec] unknown offload tier 'tape'", "none, ram, disk or disk:DIR"});
}

}  // namespace
}  // namespace fpdt::pipeline
