// The optimizer step (see zero_optimizer.h): block sums for the norm, AdamW tensor piece by tensor piece
// over this rank's part, and the offloaded update's queue.
#include "fpdt/pipeline/zero_optimizer.h"

#include <algorithm>
#include <cmath>

#include "fpdt/base/trace.h"

namespace fpdt::pipeline {

namespace {

// Whether no element of x (n) is invalid, asked of the backend that holds x.
bool none_invalid(kernels::Backend& backend, const float* x, int64_t n, bool negative_invalid) {
  int64_t invalid = 0;
  backend.count_invalid(&invalid, x, n, negative_invalid);
  return invalid == 0;
}

// Whether `every` rank's verdict is true (a rank's false makes it false everywhere).
bool everywhere(comm::Communicator& comm, bool mine) {
  double bad = mine ? 0.0 : 1.0;
  if (comm.size() > 1) comm.all_reduce_sum(&bad, 1);
  return bad == 0.0;
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(const model::ParameterLayout& layout, const ZeroPartition& partition,
                             ZeroCollectives& collectives, WorkingCopy& working_copy, kernels::Backend& backend,
                             bool dry)
    : layout_(layout),
      partition_(partition),
      collectives_(collectives),
      working_copy_(working_copy),
      backend_(backend),
      updated_(partition.units(), 0),
      weights_ready_(partition.units(), 0),
      update_finite_(partition.units(), 1) {
  if (dry || !partition_.shape().run.offload_optimizer) return;
  host_ = kernels::make_backend(kernels::BackendKind::cpu);
  // Its tasks upload to the backend's memory: the thread computes on the backend's device.
  optimizer_queue_ = std::make_unique<WorkQueue>([&memory = backend_.memory()] { memory.bind_thread(); });
}

double ZeroOptimizer::gradient_norm() {
  // This rank's block sums, unit by unit; then everyone's, summed unit by unit, rank by rank, block by
  // block: the order of the whole gradient's blocks, whatever the partition.
  const size_t units = partition_.units();
  std::vector<double> mine;
  for (size_t u = 0; u < units; ++u) {
    const int unit = static_cast<int>(u);
    const size_t first = mine.size();
    mine.resize(first + static_cast<size_t>((partition_.own(unit).size() + kShardBlockFloats - 1) / kShardBlockFloats));
    backend().sum_squares(mine.data() + first, partition_.part(StateBuf::gradients, unit), partition_.own(unit).size(),
                          kShardBlockFloats);
  }
  double total = 0.0;
  if (partition_.ranks() == 1) {
    for (double sum : mine) total += sum;
    return std::sqrt(total);
  }
  const size_t ranks = static_cast<size_t>(partition_.ranks());
  auto blocks = [&](size_t u, size_t r) {
    return (partition_.counts(static_cast<int>(u))[r] + kShardBlockFloats - 1) / kShardBlockFloats;
  };
  std::vector<size_t> bytes(ranks, 0), rank_begin(ranks + 1, 0);  // in doubles
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t u = 0; u < units; ++u) rank_begin[r + 1] += blocks(u, r);
    rank_begin[r + 1] += rank_begin[r];
    bytes[r] = (rank_begin[r + 1] - rank_begin[r]) * sizeof(double);
  }
  std::vector<double> everyone(rank_begin[ranks]);
  collectives_.comm().all_gather_v(mine.data(), everyone.data(), bytes.data());
  std::vector<size_t> cursor(rank_begin.begin(), rank_begin.end() - 1);
  for (size_t u = 0; u < units; ++u)
    for (size_t r = 0; r < ranks; ++r)
      for (size_t b = 0; b < blocks(u, r); ++b) total += everyone[cursor[r]++];
  return std::sqrt(total);
}

void ZeroOptimizer::scale_gradients(float coefficient) {
  for (size_t u = 0; u < partition_.units(); ++u) {
    const int unit = static_cast<int>(u);
    backend().scale_inplace(partition_.part(StateBuf::gradients, unit), coefficient, partition_.own(unit).size());
  }
}

void ZeroOptimizer::adamw_update(kernels::AdamWParams hyper) {
  const double decay = hyper.weight_decay;
  const int stage = partition_.shape().run.zero;
  // The tensors' pieces in this rank's part of `unit`, with their weight decay.
  auto update_unit = [this, decay, hyper](int unit, kernels::Backend& kernels, StateBuf params) mutable {
    const ShardRange& own = partition_.own(unit);
    const int64_t base = layout_.units()[static_cast<size_t>(unit)].begin + own.begin;
    for (const model::ParameterInfo& info : layout_.tensors()) {
      const int64_t begin = std::max(info.offset, base), end = std::min(info.offset + info.numel(), base + own.size());
      if (begin >= end) continue;
      hyper.weight_decay = info.is_matrix() ? decay : 0.0;
      const int64_t at = begin - base;
      kernels.adamw_update(partition_.part(params, unit) + at, partition_.part(StateBuf::m, unit) + at,
                           partition_.part(StateBuf::v, unit) + at, partition_.part(StateBuf::gradients, unit) + at,
                           end - begin, hyper);
    }
  };
  const int units = static_cast<int>(partition_.units());
  if (host_) {
    // On the optimizer's thread, unit by unit in the order a pass first uses them (the embeddings,
    // the layers, the head: the layout's order); a unit's gather or first use waits for it alone.
    for (int unit = 0; unit < units; ++unit) {
      updated_[static_cast<size_t>(unit)] = optimizer_queue_->submit([this, unit, update_unit, stage]() mutable {
        const trace::Span span("optimizer update (offloaded)", "copy");
        update_unit(unit, *host_, StateBuf::master);
        const float* master = partition_.part(StateBuf::master, unit);
        const int64_t n = partition_.own(unit).size();
        update_finite_[static_cast<size_t>(unit)] = none_invalid(*host_, master, n, false);
        backend_.memory().upload(partition_.part(StateBuf::weights, unit), master,
                                 static_cast<size_t>(n) * sizeof(float));
        if (stage >= 3) working_copy_.make(unit);  // its shard's words (stage 2: after the all-gather)
      });
      if (stage == 2) {
        float* whole = partition_.array(StateBuf::weights) + layout_.units()[static_cast<size_t>(unit)].begin;
        const float* mine = partition_.part(StateBuf::weights, unit);
        const WorkQueue::Event updated = updated_[static_cast<size_t>(unit)];
        weights_ready_[static_cast<size_t>(unit)] = collectives_.queue().submit([this, unit, whole, mine, updated] {
          optimizer_queue_->wait(updated);
          const trace::Span span("gather weights", "comm");
          collectives_.all_gather_unit(unit, mine, whole);
          working_copy_.make(unit);
        });
      }
    }
    return;
  }
  for (int unit = 0; unit < units; ++unit) update_unit(unit, backend_, StateBuf::weights);
  if (stage == 1 || stage == 2) {
    float* whole = partition_.array(StateBuf::weights);
    for (int unit = 0; unit < units; ++unit)
      collectives_.all_gather_unit(unit, partition_.part(StateBuf::weights, unit),
                                   whole + layout_.units()[static_cast<size_t>(unit)].begin);
  }
  for (int unit = 0; unit < units; ++unit) working_copy_.make(unit);
}

void ZeroOptimizer::wait_weights_ready(int unit) {
  WorkQueue::Event& ready = weights_ready_[static_cast<size_t>(unit)];
  if (ready != 0) collectives_.queue().wait(ready);
  ready = 0;
}

bool ZeroOptimizer::finish_update() {
  if (!optimizer_queue_) return true;
  optimizer_queue_->wait_all();
  collectives_.wait_all();  // stage 2's all-gathers
  std::fill(updated_.begin(), updated_.end(), 0);
  std::fill(weights_ready_.begin(), weights_ready_.end(), 0);
  return std::all_of(update_finite_.begin(), update_finite_.end(), [](char finite) { return finite != 0; });
}

bool ZeroOptimizer::weights_finite() {
  bool finite = finish_update();
  for (size_t u = 0; u < partition_.units(); ++u) {
    const int unit = static_cast<int>(u);
    finite &= none_invalid(backend_, partition_.part(StateBuf::weights, unit), partition_.own(unit).size(), false);
  }
  return everywhere(collectives_.comm(), finite);
}

bool ZeroOptimizer::moments_valid() {
  bool valid = finish_update();
  for (size_t u = 0; u < partition_.units(); ++u) {
    const int unit = static_cast<int>(u);
    valid &= none_invalid(backend(), partition_.part(StateBuf::m, unit), partition_.own(unit).size(), false);
    valid &= none_invalid(backend(), partition_.part(StateBuf::v, unit), partition_.own(unit).size(), true);
  }
  return everywhere(collectives_.comm(), valid);
}

}  // namespace fpdt::pipeline
