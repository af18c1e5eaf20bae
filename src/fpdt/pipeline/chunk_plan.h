// The chunk plan: which global tokens each rank's chunks hold, as a pure function that can be
// printed and golden-tested. P ranks each hold u chunks of c local tokens; local chunk i of rank r
// is the global token range [(i·P + r)·c, (i·P + r + 1)·c), so after the per-chunk all-to-all chunk
// i on every rank is the contiguous global range [i·C, (i+1)·C) with C = P·c, and causal attention
// becomes block-causal: q chunk i attends kv chunks 0..i (masked only on the diagonal block).
// A sequence that does not fill u·C tokens is padded at its end (targets there are ignored); a chunk
// is never longer than the sequence rounded up to a multiple of P, so the padding is < C.
#pragma once

#include <cstdint>
#include <string>

namespace fpdt::pipeline {

struct ChunkPlan {
  int64_t seq_tokens = 0;         // S: real tokens of a sequence
  int64_t padded_tokens = 0;      // u·C ≥ S
  int ranks = 1;                  // P
  int rank = 0;                   // r
  int chunks = 1;                 // u
  int64_t chunk_tokens = 0;       // C = P·c: global tokens of one chunk (after the all-to-all)
  int64_t local_chunk_tokens = 0; // c: tokens of one chunk on one rank (before the all-to-all)

  int64_t local_tokens() const { return chunks * local_chunk_tokens; }  // T = u·c
  // First global token of this rank's local chunk i.
  int64_t local_chunk_begin(int i) const { return (int64_t{i} * ranks + rank) * local_chunk_tokens; }
  // First global token of global (head-sharded) chunk i.
  int64_t chunk_begin(int i) const { return int64_t{i} * chunk_tokens; }
  // Real (unpadded) tokens in this rank's local chunk i.
  int64_t local_chunk_real_tokens(int i) const;
  // One line per local chunk, for logs and golden tests:
  // "chunk 0: global [0, 4) real 4 | attends kv 0..0".
  std::string describe() const;
};

// Plans S tokens over P ranks. Exactly one of `chunk_tokens` (C, global tokens per chunk, a multiple
// of P; longer than S rounded up to P, it is shortened to that) or `chunks` (u) is positive; with u
// the chunk is the smallest C that covers S in u chunks.
// Throws fpdt::Error for a non-positive size, a rank outside [0, P), or C not divisible by P.
ChunkPlan make_chunk_plan(int64_t seq_tokens, int ranks, int rank, int64_t chunk_tokens, int chunks);

}  // namespace fpdt::pipeline
