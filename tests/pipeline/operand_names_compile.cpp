// Compiled (not linked) by the ctests pipeline.schedule.OperandNames*: a step's operands are read by
// role, and a role the op does not have is a compile error. FPDT_WRONG_OPERAND asks for one.
#include "fpdt/pipeline/schedule.h"

namespace fpdt::pipeline {

#ifdef FPDT_WRONG_OPERAND
constexpr int position = OperandOf<Op::mlp>(Operand::dq).position;  // the MLP has no dq
#else
constexpr int position = OperandOf<Op::attention_block_backward>(Operand::dq).position;
static_assert(position == signature(Op::attention_block_backward).position(Operand::dq));
#endif

}  // namespace fpdt::pipeline
