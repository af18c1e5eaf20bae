// ZeRO's plan of a step (see zero_plan.h): the call order, the segments and the units they use, and
// the walk that places units in the slots of one pool and derives the steps around each segment.
#include "fpdt/pipeline/zero_plan.h"

#include <algorithm>
#include <climits>

#include "fpdt/base/error.h"

namespace fpdt::pipeline {

const char* call_kind_name(CallKind kind) {
  switch (kind) {
    case CallKind::embed: return "embed";
    case CallKind::layer_forward: return "layer forward";
    case CallKind::head: return "head";
    case CallKind::layer_backward: return "layer backward";
    case CallKind::embed_backward: return "embed backward";
  }
  return "?";
}

std::vector<CallRef> call_order(int layers, bool backward) {
  std::vector<CallRef> order = {{CallKind::embed, 0}};
  for (int layer = 0; layer < layers; ++layer) order.push_back({CallKind::layer_forward, layer});
  order.push_back({CallKind::head, layers});
  if (!backward) return order;
  for (int layer = layers - 1; layer >= 0; --layer) order.push_back({CallKind::layer_backward, layer});
  order.push_back({CallKind::embed_backward, 0});
  return order;
}

namespace {

int qkv_unit(int layer) { return 2 * layer + 1; }
int mlp_unit(int layer) { return 2 * layer + 2; }

std::string unit_name(int unit, int layers) {
  if (unit == 0) return "embeddings";
  if (unit == 2 * layers + 1) return "head";
  return "layer " + std::to_string((unit - 1) / 2) + (unit % 2 == 1 ? " norm + qkv" : " out + mlp");
}

std::vector<ZeroSegment> segments_of(int layers, bool backward, bool tied, Recompute recompute) {
  const int head = 2 * layers + 1;
  const std::vector<int> head_units = tied ? std::vector<int>{head, 0} : std::vector<int>{head};
  std::vector<ZeroSegment> segments;
  for (const CallRef& call : call_order(layers, backward)) {
    const int l = call.layer;
    switch (call.kind) {
      case CallKind::embed: segments.push_back({call.kind, l, 0, {0}, {}, {}, {}}); break;
      case CallKind::layer_forward: segments.push_back({call.kind, l, 0, {qkv_unit(l), mlp_unit(l)}, {}, {}, {}}); break;
      case CallKind::head:
        segments.push_back({call.kind, l, 0, head_units, backward ? head_units : std::vector<int>{}, {}, {}});
        break;
      case CallKind::layer_backward:
        segments.push_back({call.kind, l, 0,
                            recompute == Recompute::layer ? std::vector<int>{qkv_unit(l), mlp_unit(l)}
                                                          : std::vector<int>{mlp_unit(l)},
                            {mlp_unit(l)}, {}, {}});
        segments.push_back({call.kind, l, 1, {qkv_unit(l)}, {qkv_unit(l)}, {}, {}});
        break;
      // (the embeddings' backward scatters rows of the gradient: it reads none of their weights)
      case CallKind::embed_backward: segments.push_back({call.kind, l, 0, {}, {0}, {}, {}}); break;
    }
  }
  return segments;
}

constexpr int64_t kNever = INT64_MAX;

// What a slot holds: a unit's gathered weights or its gradient.
struct Item {
  bool gradient = false;
  int unit = -1;
  bool operator==(const Item&) const = default;
};

class Pool {
 public:
  explicit Pool(std::vector<ZeroSlot>& slots) : slots_(slots), holder_(slots.size()) {}

  int holding(const Item& item) const {
    for (size_t s = 0; s < holder_.size(); ++s)
      if (holder_[s] == item) return static_cast<int>(s);
    return -1;
  }
  // A slot for `item` of `bytes` (the rule of zero_plan.h), never one holding an item of `busy`.
  // next_use(unit): the next segment reading the unit's weights (kNever when none).
  template <typename NextUse>
  int place(const Item& item, int64_t bytes, const std::vector<Item>& busy, NextUse next_use) {
    int best = -1;
    // rank: 4 an empty slot that fits (the smallest), 3 evicting one that fits (the furthest next use),
    // 2 growing an empty one, 1 growing an evicted one (the largest: the least growth)
    int best_rank = 0;
    int64_t best_key = 0;
    for (size_t s = 0; s < holder_.size(); ++s) {
      const Item& held = holder_[s];
      if (held.unit >= 0 && std::find(busy.begin(), busy.end(), held) != busy.end()) continue;
      const bool fits = slots_[s].bytes >= bytes, empty = held.unit < 0;
      const int rank = fits ? (empty ? 4 : 3) : (empty ? 2 : 1);
      const int64_t key = rank == 4 ? -slots_[s].bytes : rank == 3 ? next_use(held.unit) : slots_[s].bytes;
      if (rank > best_rank || (rank == best_rank && key > best_key)) {
        best = static_cast<int>(s);
        best_rank = rank;
        best_key = key;
      }
    }
    if (best < 0) {
      slots_.push_back({bytes});
      holder_.emplace_back();
      best = static_cast<int>(slots_.size()) - 1;
    }
    slots_[static_cast<size_t>(best)].bytes = std::max(slots_[static_cast<size_t>(best)].bytes, bytes);
    holder_[static_cast<size_t>(best)] = item;
    return best;
  }
  void free(int slot) { holder_[static_cast<size_t>(slot)] = Item{}; }

 private:
  std::vector<ZeroSlot>& slots_;
  std::vector<Item> holder_;
};

// Walks the training pass: places its items in the pool's slots (growing the pool as needed) and
// writes each segment's steps.
void walk(std::vector<ZeroSegment>& segments, std::vector<ZeroSlot>& slots, const std::vector<int64_t>& unit_floats,
          int stage, int64_t weight_bytes) {
  Pool pool(slots);
  const int n = static_cast<int>(segments.size()), units = static_cast<int>(unit_floats.size());
  std::vector<int> first(static_cast<size_t>(units), -1), last(static_cast<size_t>(units), -1);
  for (int k = 0; k < n; ++k)
    for (int unit : segments[static_cast<size_t>(k)].gradient_units) {
      if (first[static_cast<size_t>(unit)] < 0) first[static_cast<size_t>(unit)] = k;
      last[static_cast<size_t>(unit)] = k;
    }
  std::vector<char> waited(static_cast<size_t>(units), 1);
  const bool gathers = stage >= 3, reduces = stage >= 2;
  for (int k = 0; k < n; ++k) {
    ZeroSegment& segment = segments[static_cast<size_t>(k)];
    const std::vector<int>* next = k + 1 < n ? &segments[static_cast<size_t>(k + 1)].units : nullptr;
    std::vector<Item> busy;
    if (gathers) {
      for (int unit : segment.units) busy.push_back({false, unit});
      if (next)
        for (int unit : *next) busy.push_back({false, unit});
    }
    if (reduces)
      for (int unit = 0; unit < units; ++unit)
        if (first[static_cast<size_t>(unit)] >= 0 && first[static_cast<size_t>(unit)] <= k &&
            last[static_cast<size_t>(unit)] >= k)
          busy.push_back({true, unit});
    auto next_use = [&](int unit) -> int64_t {
      for (int j = k + 1; j < n; ++j) {
        const std::vector<int>& uses = segments[static_cast<size_t>(j)].units;
        if (std::find(uses.begin(), uses.end(), unit) != uses.end()) return j;
      }
      return kNever;
    };
    auto gather = [&](int unit) {
      if (pool.holding({false, unit}) >= 0) return;
      const int slot = pool.place({false, unit}, unit_floats[static_cast<size_t>(unit)] * weight_bytes, busy, next_use);
      segment.before.push_back({ZeroStep::Kind::gather, unit, slot});
      waited[static_cast<size_t>(unit)] = 0;
    };
    if (gathers) {
      if (k == 0)
        for (int unit : segment.units) gather(unit);
      if (next)
        for (int unit : *next) gather(unit);  // the prefetch
    }
    if (reduces)
      for (int unit : segment.gradient_units) {
        if (first[static_cast<size_t>(unit)] != k) continue;
        const int slot = pool.place({true, unit}, unit_floats[static_cast<size_t>(unit)] * 4, busy, next_use);
        segment.before.push_back({ZeroStep::Kind::zero_gradients, unit, slot});
      }
    if (gathers)
      for (int unit : segment.units) {
        if (waited[static_cast<size_t>(unit)]) continue;
        segment.before.push_back({ZeroStep::Kind::wait, unit, pool.holding({false, unit})});
        waited[static_cast<size_t>(unit)] = 1;
      }
    if (reduces)
      for (int unit : segment.gradient_units) {
        if (last[static_cast<size_t>(unit)] != k) continue;
        const int slot = pool.holding({true, unit});
        segment.after.push_back({ZeroStep::Kind::reduce_gradients, unit, slot});
        pool.free(slot);
      }
  }
}

}  // namespace

ZeroPlan make_zero_plan(const std::vector<int64_t>& unit_floats, bool tied, int stage, Recompute recompute,
                        int64_t weight_bytes) {
  FPDT_ASSERT(unit_floats.size() >= 4 && unit_floats.size() % 2 == 0);
  ZeroPlan plan;
  plan.stage = stage;
  plan.layers = static_cast<int>(unit_floats.size() - 2) / 2;
  plan.training = segments_of(plan.layers, true, tied, recompute);
  walk(plan.training, plan.slots, unit_floats, stage, weight_bytes);
  // A forward pass is the training pass up to the head, without its gradients and without the head's
  // prefetch for the backward: the same gathers into the same slots.
  plan.forward = segments_of(plan.layers, false, tied, recompute);
  for (size_t k = 0; k < plan.forward.size(); ++k) {
    const bool last = k + 1 == plan.forward.size();
    for (const ZeroStep& step : plan.training[k].before)
      if (step.kind == ZeroStep::Kind::wait || (step.kind == ZeroStep::Kind::gather && !last))
        plan.forward[k].before.push_back(step);
  }
  return plan;
}

std::string ZeroPlan::describe(bool backward) const {
  std::string text = "ZeRO stage " + std::to_string(stage) + " (" + (backward ? "training" : "forward") + " pass)";
  if (!slots.empty()) {
    text += "; slots:";
    for (size_t s = 0; s < slots.size(); ++s)
      text += (s == 0 ? " " : ", ") + std::to_string(s) + " (" + std::to_string(slots[s].bytes) + " bytes)";
  }
  text += "\n";
  auto step_text = [&](const ZeroStep& step) {
    const std::string unit = unit_name(step.unit, layers), slot = std::to_string(step.slot);
    switch (step.kind) {
      case ZeroStep::Kind::gather: return "gather " + unit + " -> slot " + slot;
      case ZeroStep::Kind::wait: return "wait " + unit;
      case ZeroStep::Kind::zero_gradients: return "zero gradients of " + unit + " in slot " + slot;
      case ZeroStep::Kind::reduce_gradients: return "reduce-scatter gradients of " + unit + " from slot " + slot;
    }
    return std::string("?");
  };
  for (const ZeroSegment& segment : pass(backward)) {
    if (segment.before.empty() && segment.after.empty()) continue;
    text += "  " + std::string(call_kind_name(segment.kind)) + " l=" + std::to_string(segment.layer) +
            (segment.kind == CallKind::layer_backward ? segment.half == 0 ? " (out + mlp)" : " (attention)" : "") + ":";
    for (const ZeroStep& step : segment.before) text += " " + step_text(step) + ";";
    text += " [segment]";
    for (const ZeroStep& step : segment.after) text += "; " + step_text(step);
    text += "\n";
  }
  return text;
}

}  // namespace fpdt::pipeline
