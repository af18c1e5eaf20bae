// The chunk plan (see chunk_plan.h).
#include "fpdt/pipeline/chunk_plan.h"

#include <algorithm>
#include <limits>

#include "fpdt/base/checked_math.h"
#include "fpdt/base/error.h"

namespace fpdt::pipeline {

int64_t ChunkPlan::local_chunk_real_tokens(int i) const {
  return std::clamp<int64_t>(seq_tokens - local_chunk_begin(i), 0, local_chunk_tokens);
}

std::string ChunkPlan::describe() const {
  std::string text;
  for (int i = 0; i < chunks; ++i) {
    const int64_t begin = local_chunk_begin(i);
    text += "chunk " + std::to_string(i) + ": global [" + std::to_string(begin) + ", " +
            std::to_string(begin + local_chunk_tokens) + ") real " + std::to_string(local_chunk_real_tokens(i)) +
            " | attends kv 0.." + std::to_string(i) + "\n";
  }
  return text;
}

ChunkPlan make_chunk_plan(int64_t seq_tokens, int ranks, int rank, int64_t chunk_tokens, int chunks) {
  const char* kModule = "chunk plan";
  if (seq_tokens <= 0) throw Error(kModule, "sequence length must be positive, got " + std::to_string(seq_tokens));
  if (ranks <= 0) throw Error(kModule, "the number of ranks must be positive, got " + std::to_string(ranks));
  if (rank < 0 || rank >= ranks)
    throw Error(kModule, "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(ranks) + ")");
  if ((chunk_tokens > 0) == (chunks > 0))
    throw Error(kModule, "give exactly one of a chunk size (--chunk-tokens) or a chunk count (--chunks)");
  ChunkPlan plan;
  plan.seq_tokens = seq_tokens;
  plan.ranks = ranks;
  plan.rank = rank;
  if (chunk_tokens > 0) {
    if (chunk_tokens % ranks != 0)
      throw Error(kModule,
                  "--chunk-tokens " + std::to_string(chunk_tokens) + " does not split over --sp " +
                      std::to_string(ranks) + " ranks",
                  "use a multiple of " + std::to_string(ranks));
    const int64_t rounded_sequence = std::min(ceil_div<int64_t>(seq_tokens, ranks), std::numeric_limits<int64_t>::max() / ranks) * ranks;
    plan.local_chunk_tokens = std::min(chunk_tokens, rounded_sequence) / ranks;
    const int64_t C = plan.local_chunk_tokens * ranks;
    const int64_t chunk_count = ceil_div(seq_tokens, C);
    if (chunk_count > std::numeric_limits<int>::max())
      throw Error(kModule,
                  "--seq " + std::to_string(seq_tokens) + " is too long for chunks of " + std::to_string(C) +
                      " tokens: " + std::to_string(chunk_count) + " chunks, more than 2^31 - 1",
                  "raise --chunk-tokens or lower --seq");
    plan.chunks = static_cast<int>(chunk_count);
  } else {
    plan.chunks = chunks;
    const int64_t per_rank_and_chunk = int64_t{ranks} * chunks;
    plan.local_chunk_tokens = ceil_div(seq_tokens, per_rank_and_chunk);
  }
  plan.chunk_tokens = plan.local_chunk_tokens * ranks;
  plan.padded_tokens = plan.chunk_tokens * plan.chunks;
  return plan;
}

}  // namespace fpdt::pipeline
