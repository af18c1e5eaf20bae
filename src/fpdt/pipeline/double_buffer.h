// FPDT's double buffer: two stages of staging buffers in the compute tier, so that while a block
// computes on what one stage holds, the copy engine fetches the next block's chunk into the other —
// the kv chunk (k, v) of the forward's loop over kv chunks, the q set (q, dO, LSE, Δ, dQ) of the
// backward's loop over q chunks (whose kv chunk stays in stage 0's k, v through the loop). The
// schedule puts the n-th block of a loop in stage_of(n) (schedule.cpp), and its derived waits hold a
// fetch into a stage until the block before has done with it. Here: which buffer each staged role is
// in each stage, and the stages' rows of the arena table (memory_layout.h's chunk_buffers).
#pragma once

#include <cstddef>
#include <vector>

#include "fpdt/pipeline/memory_layout.h"

namespace fpdt::pipeline {

// One stage's buffers, by what they stage.
struct Stage {
  Buf k, v;                      // a kv chunk
  Buf q, d_o, lse, delta, d_q;   // the backward's q set
};
inline constexpr Stage kStages[2] = {
    {Buf::k_stage0, Buf::v_stage0, Buf::q_stage0, Buf::do_stage0, Buf::lse_stage0, Buf::delta_stage0, Buf::dq_stage0},
    {Buf::k_stage1, Buf::v_stage1, Buf::q_stage1, Buf::do_stage1, Buf::lse_stage1, Buf::delta_stage1, Buf::dq_stage1}};

// The stage of the n-th block of a loop: the two alternate.
constexpr const Stage& stage_of(size_t n) { return kStages[n % 2]; }

// The stages' rows of the arena table: each staged buffer, in both stages, shaped as the buffer it
// stages — found among `others`, the table's other rows (k_stage0 as k_head, dq_stage0 as dq_first) —
// the q set's empty in a layout without a backward.
std::vector<BufferSpec> stage_buffers(const std::vector<BufferSpec>& others, const LayoutShape& shape);

}  // namespace fpdt::pipeline
