// The double buffer's rows of the arena table (see double_buffer.h).
#include "fpdt/pipeline/double_buffer.h"

#include <algorithm>

#include "fpdt/base/error.h"

namespace fpdt::pipeline {

namespace {

// A staged role: its buffer in each stage (Stage::*role of kStages), their names, the buffer whose
// shape it stages, and whether only a backward stages it.
struct StagedRole {
  Buf Stage::*role;
  const char* names[2];
  Buf like;
  bool backward_only;
};
constexpr StagedRole kStagedRoles[] = {
    {&Stage::k, {"k_stage0", "k_stage1"}, Buf::k_head, false},
    {&Stage::v, {"v_stage0", "v_stage1"}, Buf::v_head, false},
    {&Stage::q, {"q_stage0", "q_stage1"}, Buf::q_head, true},
    {&Stage::d_o, {"do_stage0", "do_stage1"}, Buf::d_o_head, true},
    {&Stage::lse, {"lse_stage0", "lse_stage1"}, Buf::lse, true},
    {&Stage::delta, {"delta_stage0", "delta_stage1"}, Buf::delta, true},
    {&Stage::d_q, {"dq_stage0", "dq_stage1"}, Buf::dq_first, true},
};

}  // namespace

std::vector<BufferSpec> stage_buffers(const std::vector<BufferSpec>& others, const LayoutShape& shape) {
  std::vector<BufferSpec> rows;
  for (const StagedRole& staged : kStagedRoles) {
    const auto like =
        std::find_if(others.begin(), others.end(), [&](const BufferSpec& row) { return row.id == staged.like; });
    FPDT_ASSERT(like != others.end());
    const int64_t elements = staged.backward_only && !shape.backward ? 0 : like->elements;
    for (int stage = 0; stage < 2; ++stage)
      rows.push_back({kStages[stage].*staged.role, staged.names[stage], like->shape, like->element, elements});
  }
  return rows;
}

}  // namespace fpdt::pipeline
