// ZeRO's plan as data (zero_plan.h), replayed step by step against its slots: every segment finds the
// weights it reads gathered and waited for and the gradients it adds to in a slot of their own; a
// gather never overwrites what the segment in flight or the next one uses; each gradient is zeroed
// before its first segment and reduced once, after its last; a unit is gathered one segment ahead
// (the prefetch) except at the very start. And the pool stays small: two layers and a few slots the
// size of the embeddings or the head.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "fpdt/model/config.h"
#include "fpdt/pipeline/memory_layout.h"
#include "fpdt/pipeline/zero_plan.h"

namespace fpdt::pipeline {
namespace {

struct Held {
  bool gradient = false;
  int unit = -1;
  bool ready = false;  // weights: waited for
};

// Replays one pass; *peak = the largest number of bytes held at once.
void replay(const ZeroPlan& plan, bool backward, const std::vector<int64_t>& unit_floats, int64_t* peak) {
  const std::vector<ZeroSegment>& segments = plan.pass(backward);
  std::vector<Held> slots(plan.slots.size());
  std::map<int, int> reduced;  // unit → times
  auto find = [&](bool gradient, int unit) {
    for (size_t s = 0; s < slots.size(); ++s)
      if (slots[s].unit == unit && slots[s].gradient == gradient) return static_cast<int>(s);
    return -1;
  };
  *peak = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    const ZeroSegment& segment = segments[k];
    SCOPED_TRACE("segment " + std::to_string(k) + " (" + call_kind_name(segment.kind) + " " +
                 std::to_string(segment.layer) + "." + std::to_string(segment.half) + ")");
    std::vector<int> in_use = segment.units;  // what this segment and the next read
    if (k + 1 < segments.size())
      in_use.insert(in_use.end(), segments[k + 1].units.begin(), segments[k + 1].units.end());
    for (const ZeroStep& step : segment.before) {
      ASSERT_GE(step.slot, 0);
      ASSERT_LT(step.slot, static_cast<int>(slots.size()));
      Held& slot = slots[static_cast<size_t>(step.slot)];
      const int64_t bytes = unit_floats[static_cast<size_t>(step.unit)] * 4;  // fp32 weights and gradients
      switch (step.kind) {
        case ZeroStep::Kind::gather:
          EXPECT_EQ(plan.stage, 3);
          EXPECT_FALSE(slot.gradient && slot.unit >= 0) << "a gather overwrites a live gradient";
          EXPECT_TRUE(slot.unit < 0 || std::find(in_use.begin(), in_use.end(), slot.unit) == in_use.end())
              << "a gather overwrites weights in use";
          if (k > 0) {
            EXPECT_TRUE(std::find(segment.units.begin(), segment.units.end(), step.unit) == segment.units.end())
                << "unit " << step.unit << " is gathered for its own segment, not one ahead";
          }
          EXPECT_GE(plan.slots[static_cast<size_t>(step.slot)].bytes, bytes);
          slot = Held{false, step.unit, false};
          break;
        case ZeroStep::Kind::wait:
          ASSERT_EQ(slots[static_cast<size_t>(step.slot)].unit, step.unit);
          slots[static_cast<size_t>(step.slot)].ready = true;
          break;
        case ZeroStep::Kind::zero_gradients:
          EXPECT_GE(plan.stage, 2);
          EXPECT_FALSE(slot.gradient && slot.unit >= 0) << "a gradient overwrites a live gradient";
          EXPECT_TRUE(slot.unit < 0 || slot.gradient ||
                      std::find(in_use.begin(), in_use.end(), slot.unit) == in_use.end())
              << "a gradient overwrites weights in use";
          EXPECT_GE(plan.slots[static_cast<size_t>(step.slot)].bytes, bytes);
          slot = Held{true, step.unit, true};
          break;
        case ZeroStep::Kind::reduce_gradients: ADD_FAILURE() << "a reduce before a segment";
      }
    }
    int64_t held = 0;
    for (const Held& slot : slots)
      if (slot.unit >= 0) held += unit_floats[static_cast<size_t>(slot.unit)] * 4;
    *peak = std::max(*peak, held);
    for (int unit : segment.units) {
      if (plan.stage < 3) break;
      const int slot = find(false, unit);
      ASSERT_GE(slot, 0) << "unit " << unit << " is not gathered";
      EXPECT_TRUE(slots[static_cast<size_t>(slot)].ready) << "unit " << unit << " is not waited for";
    }
    if (plan.stage >= 2) {
      for (int unit : segment.gradient_units) EXPECT_GE(find(true, unit), 0) << "no gradient slot for " << unit;
    }
    for (const ZeroStep& step : segment.after) {
      ASSERT_EQ(step.kind, ZeroStep::Kind::reduce_gradients);
      ASSERT_EQ(find(true, step.unit), step.slot);
      // The last segment that adds to it.
      for (size_t j = k + 1; j < segments.size(); ++j) {
        const std::vector<int>& later = segments[j].gradient_units;
        EXPECT_TRUE(std::find(later.begin(), later.end(), step.unit) == later.end());
      }
      slots[static_cast<size_t>(step.slot)] = Held{};
      ++reduced[step.unit];
    }
  }
  if (backward && plan.stage >= 2) {
    EXPECT_EQ(reduced.size(), unit_floats.size()) << "every unit's gradient is reduced";
    for (const auto& [unit, times] : reduced) EXPECT_EQ(times, 1) << "unit " << unit;
  } else {
    EXPECT_TRUE(reduced.empty());
  }
}

std::vector<int64_t> unit_floats(const model::ModelConfig& config) {
  std::vector<int64_t> floats;
  const model::ParameterLayout layout(config);
  for (const model::ParameterUnit& unit : layout.units()) floats.push_back(unit.numel());
  return floats;
}

TEST(ZeroPlan, ReplaysCleanlyForEveryStageModelAndRecomputeMode) {
  model::ModelConfig tied = model::preset("llama-tiny");
  tied.tie_embeddings = true;
  const std::pair<const char*, model::ModelConfig> models[] = {
      {"llama-tiny", model::preset("llama-tiny")}, {"gpt-tiny", model::preset("gpt-tiny")}, {"tied llama", tied},
      {"llama3-8b", model::preset("llama3-8b")}};
  for (const auto& [name, config] : models)
    for (int stage : {0, 1, 2, 3})
      for (Recompute recompute : {Recompute::none, Recompute::layer}) {
        SCOPED_TRACE(std::string(name) + " stage " + std::to_string(stage) + " recompute " + spelling(recompute));
        const std::vector<int64_t> floats = unit_floats(config);
        const ZeroPlan plan = make_zero_plan(floats, config.tie_embeddings, stage, recompute);
        EXPECT_EQ(plan.training.size(), 3u * static_cast<size_t>(config.layers) + 3);  // a layer backward is two
        EXPECT_EQ(plan.forward.size(), static_cast<size_t>(config.layers) + 2);
        int64_t peak = 0, forward_peak = 0;
        replay(plan, true, floats, &peak);
        replay(plan, false, floats, &forward_peak);
        if (stage < 2) {
          EXPECT_TRUE(plan.slots.empty());
          continue;
        }
        int64_t pool = 0;
        for (const ZeroSlot& slot : plan.slots) pool += slot.bytes;
        // Two layers (the one in use and the next; three under recompute, whose first backward half
        // reads both units and holds a gradient), the embeddings' or head's weights and gradient
        // (together in the head and embedding segments), and one more of those where the greedy walk
        // has given a slot of that size to a layer's unit (it never plans ahead).
        const int64_t layer = floats[1] + floats[2], ends = std::max(floats.front(), floats.back());
        const int64_t layers = recompute == Recompute::layer ? 3 : 2;
        const int64_t bound =
            4 * (stage >= 3 ? layers * layer + 3 * ends : std::max(layer, ends) + floats.front());
        EXPECT_LE(pool, bound) << "the pool: " << plan.describe(true);
        EXPECT_LE(peak, pool);
      }
}

// The memory table's slot rows are the plan's slots.
TEST(ZeroPlan, MemoryTableCountsItsSlots) {
  const model::ModelConfig config = model::preset("llama3-8b");
  const model::ParameterLayout layout(config);
  StateShape shape;
  shape.run.zero = 3;
  shape.W = 4;
  const ZeroPlan plan = zero_plan(layout, shape);
  std::vector<int64_t> rows;
  for (const StateSpec& spec : model_state_buffers(layout, shape))
    if (spec.id == StateBuf::slot) rows.push_back(spec.elements * spec.element_bytes);
  ASSERT_EQ(rows.size(), plan.slots.size());
  for (size_t s = 0; s < rows.size(); ++s) EXPECT_EQ(rows[s], plan.slots[s].bytes);
}

}  // namespace
}  // namespace fpdt::pipeline
