// The double buffer (pipeline/double_buffer.h): the two stages are distinct buffers of the arena, each
// shaped exactly as the buffer it stages, the backward's q set absent from a forward-only layout, and
// the loops' blocks alternate between the stages.
#include <gtest/gtest.h>

#include <set>

#include "fpdt/pipeline/double_buffer.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

// What each role of a stage stages.
struct Staged {
  Buf Stage::*role;
  Buf like;
  bool backward_only;
};
constexpr Staged kRoles[] = {{&Stage::k, Buf::k_head, false},       {&Stage::v, Buf::v_head, false},
                             {&Stage::q, Buf::q_head, true},        {&Stage::d_o, Buf::d_o_head, true},
                             {&Stage::lse, Buf::lse, true},         {&Stage::delta, Buf::delta, true},
                             {&Stage::d_q, Buf::dq_first, true}};

TEST(DoubleBuffer, StagesAreShapedAsWhatTheyStage) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    LayoutShape shape;
    shape.B = 1 + static_cast<int64_t>(rng.below(3));
    shape.c = 1 + static_cast<int64_t>(rng.below(64));
    shape.P = 1 + static_cast<int64_t>(rng.below(4));
    shape.D = 8 * (1 + static_cast<int64_t>(rng.below(4)));
    shape.local_q_heads = 1 + static_cast<int64_t>(rng.below(4));
    shape.local_kv_heads = 1 + static_cast<int64_t>(rng.below(2));
    shape.q = shape.P * shape.local_q_heads * shape.D;
    shape.kv = shape.P * shape.local_kv_heads * shape.D;
    shape.h = 64;
    shape.f = 128;
    shape.V = 100;
    shape.backward = rng.below(2) == 0;
    SCOPED_TRACE("trial " + std::to_string(trial) + (shape.backward ? " backward" : " forward only"));
    const std::vector<BufferSpec> table = chunk_buffers(shape);  // in Buf order
    auto row = [&](Buf buffer) { return table[static_cast<size_t>(buffer)]; };
    std::set<Buf> staged;
    for (const Staged& role : kRoles) {
      const BufferSpec like = row(role.like);
      for (int stage = 0; stage < 2; ++stage) {
        const BufferSpec buffer = row(kStages[stage].*role.role);
        EXPECT_TRUE(staged.insert(buffer.id).second) << buffer.name << " is in two roles or stages";
        EXPECT_STREQ(buffer.shape, like.shape) << buffer.name;
        EXPECT_EQ(buffer.element, like.element) << buffer.name;
        EXPECT_EQ(buffer.elements, role.backward_only && !shape.backward ? 0 : like.elements) << buffer.name;
        if (!role.backward_only || shape.backward) {
          EXPECT_GT(buffer.elements, 0) << buffer.name;
        }
        EXPECT_EQ(std::string(buffer.name), std::string(buffer_name(buffer.id)));
      }
    }
    EXPECT_EQ(staged.size(), 14u);
  }
  EXPECT_EQ(&stage_of(0), &kStages[0]);
  EXPECT_EQ(&stage_of(1), &kStages[1]);
  EXPECT_EQ(&stage_of(6), &kStages[0]);
}

}  // namespace
}  // namespace fpdt::pipeline
