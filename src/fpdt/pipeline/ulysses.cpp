// Ulysses all-to-all re-layout (see ulysses.h).
#include "fpdt/pipeline/ulysses.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/base/trace.h"

namespace fpdt::pipeline {

namespace {

// G_p: the q heads of one kv slot of a rank owning q heads [begin, begin + count) — the gcd of the
// lengths of the runs its heads make between multiples of g (each run reads one kv head).
// E.g. Hq 9, Hkv 3 (g 3), P 2: rank 0 owns [0, 5), runs 3 + 2, G 1 (5 slots); rank 1 [5, 9), runs 1 + 3, G 1.
int slot_heads(int begin, int count, int g) {
  int slot = 0;
  for (int head = begin; head < begin + count;) {
    const int run_end = std::min(begin + count, (head / g + 1) * g);
    slot = std::gcd(slot, run_end - head);
    head = run_end;
  }
  return slot;
}

}  // namespace

int HeadSharding::q_head_begin(int p) const {
  return p * (q_heads / ranks) + std::min(p, q_heads % ranks);
}

int HeadSharding::q_head_count(int p) const { return q_heads / ranks + (p < q_heads % ranks ? 1 : 0); }

int HeadSharding::kv_slots(int p) const {
  return q_head_count(p) / slot_heads(q_head_begin(p), q_head_count(p), group());
}

int HeadSharding::kv_head_of_slot(int p, int slot) const {
  return (q_head_begin(p) + slot * slot_heads(q_head_begin(p), q_head_count(p), group())) / group();
}

int HeadSharding::kv_send_heads() const {
  int total = 0;
  for (int p = 0; p < ranks; ++p) total += kv_slots(p);
  return total;
}

double HeadSharding::forward_elements_per_token(int head_dim) const {
  return (q_heads - local_q_heads + (ranks - 1.0) * local_q_heads + 2.0 * (kv_send_heads() - local_kv_heads)) *
         head_dim;
}

std::string describe_head_split(const HeadSharding& sharding) {
  std::string text;
  for (int first = 0; first < sharding.ranks;) {
    const int heads = sharding.q_head_count(first), slots = sharding.kv_slots(first);
    int last = first;
    while (last + 1 < sharding.ranks && sharding.q_head_count(last + 1) == heads && sharding.kv_slots(last + 1) == slots)
      ++last;
    text += (text.empty() ? "" : "; ") +
            (first == last ? "rank " + std::to_string(first) : "ranks " + std::to_string(first) + "-" + std::to_string(last)) +
            ": " + std::to_string(heads) + " q heads, " + std::to_string(slots) + " kv slots";
    first = last + 1;
  }
  return text;
}

HeadSharding make_head_sharding(int q_heads, int kv_heads, int ranks, int rank) {
  if (ranks > q_heads)
    throw Error("ulysses",
                "--sp " + std::to_string(ranks) + " is more sequence-parallel ranks than the model's " +
                    std::to_string(q_heads) + " attention heads: a rank would hold no head",
                "use an --sp of at most " + std::to_string(q_heads));
  if (kv_heads <= 0 || q_heads % kv_heads != 0)
    throw Error("ulysses",
                std::to_string(kv_heads) + " key/value heads do not divide the " + std::to_string(q_heads) +
                    " attention heads",
                "the model's kv_heads must divide its heads");
  FPDT_ASSERT(rank >= 0 && rank < ranks);
  HeadSharding sharding;
  sharding.ranks = ranks;
  sharding.rank = rank;
  sharding.q_heads = q_heads;
  sharding.kv_heads = kv_heads;
  sharding.local_q_heads = sharding.q_head_count(rank);
  sharding.local_kv_heads = sharding.kv_slots(rank);
  return sharding;
}

UlyssesExchange::Blocks UlyssesExchange::blocks_of(int (HeadSharding::*width)(int) const) const {
  Blocks blocks;
  size_t offset = 0;
  for (int p = 0; p < sharding_.ranks; ++p) {
    blocks.counts.push_back(static_cast<size_t>(c_) * static_cast<size_t>((sharding_.*width)(p)) * head_dim_);
    blocks.displs.push_back(offset);
    offset += blocks.counts.back();
  }
  return blocks;
}

UlyssesExchange::Blocks UlyssesExchange::equal_blocks(int width) const {
  const size_t count = static_cast<size_t>(c_) * static_cast<size_t>(width) * head_dim_;
  Blocks blocks;
  for (int p = 0; p < sharding_.ranks; ++p) {
    blocks.counts.push_back(count);
    blocks.displs.push_back(p * count);
  }
  return blocks;
}

UlyssesExchange::UlyssesExchange(comm::Communicator& comm, kernels::Backend& backend, const HeadSharding& sharding,
                                 int head_dim, int64_t c, float* pack, int32_t* rows)
    : comm_(comm),
      backend_(backend),
      memory_(backend.memory()),
      sharding_(sharding),
      head_dim_(head_dim),
      c_(c),
      pack_(pack),
      rows_(rows) {
  q_heads_ = blocks_of(&HeadSharding::q_head_count);
  q_mine_ = equal_blocks(sharding_.local_q_heads);
  kv_slots_ = blocks_of(&HeadSharding::kv_slots);
  kv_mine_ = equal_blocks(sharding_.local_kv_heads);
  if (sharding_.ranks == 1) return;
  // Row (p, t, s) of a received gradient block — rank p's slot s of token t, p-major — adds into token
  // t's kv head kv_head_of_slot(p, s).
  std::vector<int32_t> rows_host;
  for (int p = 0; p < sharding_.ranks; ++p)
    for (int64_t t = 0; t < c; ++t)
      for (int s = 0; s < sharding_.kv_slots(p); ++s)
        rows_host.push_back(static_cast<int32_t>(t * sharding_.kv_heads + sharding_.kv_head_of_slot(p, s)));
  memory_.upload(rows_, rows_host.data(), rows_host.size() * sizeof(int32_t));
}

void UlyssesExchange::q_to_heads(const float* x, float* out, int B) {
  const int P = sharding_.ranks, H = sharding_.q_heads, D = head_dim_;
  const int64_t c = c_, sequence = c * H * D;  // floats of one sequence's chunk in the token-sharded layout
  const int64_t heads_sequence = P * c * sharding_.local_q_heads * D;  // and in the head-sharded one
  const trace::Span span("all-to-all q", "comm");
  if (P == 1) return memory_.copy(out, x, sizeof(float) * static_cast<size_t>(B * sequence));
  for (int b = 0; b < B; ++b) {
    // pack: block p = (c, H_p, D), heads [q_head_begin(p), +H_p) of every token.
    for (int p = 0; p < P; ++p) {
      const size_t row = static_cast<size_t>(sharding_.q_head_count(p)) * D;
      memory_.copy_2d(pack_ + q_heads_.displs[p], row * sizeof(float), x + b * sequence + sharding_.q_head_begin(p) * D,
                      H * D * sizeof(float), row * sizeof(float), static_cast<size_t>(c));
    }
    // Block p from rank p holds its c tokens: in rank order they are the chunk's global order.
    comm_.all_to_all_v(pack_, q_heads_.counts.data(), q_heads_.displs.data(), out + b * heads_sequence,
                       q_mine_.counts.data(), q_mine_.displs.data());
  }
}

void UlyssesExchange::q_to_sequence(const float* x, float* out, int B) {
  const int P = sharding_.ranks, H = sharding_.q_heads, D = head_dim_;
  const int64_t c = c_, sequence = c * H * D, heads_sequence = P * c * sharding_.local_q_heads * D;
  const trace::Span span("all-to-all back", "comm");
  if (P == 1) return memory_.copy(out, x, sizeof(float) * static_cast<size_t>(B * sequence));
  for (int b = 0; b < B; ++b) {
    // Send block p = tokens [p·c, (p+1)·c) of the chunk (contiguous); receive our c tokens' heads from each rank.
    comm_.all_to_all_v(x + b * heads_sequence, q_mine_.counts.data(), q_mine_.displs.data(), pack_,
                       q_heads_.counts.data(), q_heads_.displs.data());
    for (int p = 0; p < P; ++p) {
      const size_t row = static_cast<size_t>(sharding_.q_head_count(p)) * D;
      memory_.copy_2d(out + b * sequence + sharding_.q_head_begin(p) * D, H * D * sizeof(float),
                      pack_ + q_heads_.displs[p], row * sizeof(float), row * sizeof(float), static_cast<size_t>(c));
    }
  }
}

void UlyssesExchange::kv_to_heads(const float* x, float* out, int B) {
  const int P = sharding_.ranks, H = sharding_.kv_heads, D = head_dim_;
  const int64_t c = c_, in_sequence = c * H * D, out_sequence = P * c * sharding_.local_kv_heads * D;
  const trace::Span span("all-to-all kv", "comm");
  if (P == 1) return memory_.copy(out, x, sizeof(float) * static_cast<size_t>(B * in_sequence));
  for (int b = 0; b < B; ++b) {
    // pack: block p = (c, K_p, D), slot s of every token its kv head kv_head_of_slot(p, s).
    for (int p = 0; p < P; ++p) {
      const int slots = sharding_.kv_slots(p);
      for (int s = 0; s < slots; ++s)
        memory_.copy_2d(pack_ + kv_slots_.displs[p] + s * D, slots * D * sizeof(float),
                        x + b * in_sequence + sharding_.kv_head_of_slot(p, s) * D, H * D * sizeof(float),
                        D * sizeof(float), static_cast<size_t>(c));
    }
    comm_.all_to_all_v(pack_, kv_slots_.counts.data(), kv_slots_.displs.data(), out + b * out_sequence,
                       kv_mine_.counts.data(), kv_mine_.displs.data());
  }
}

void UlyssesExchange::kv_grad_to_sequence(const float* x, float* out, int B) {
  const int P = sharding_.ranks, H = sharding_.kv_heads, D = head_dim_;
  const int64_t c = c_, out_sequence = c * H * D, in_sequence = P * c * sharding_.local_kv_heads * D;
  const trace::Span span("all-to-all kv grad", "comm");
  if (P == 1) return memory_.copy(out, x, sizeof(float) * static_cast<size_t>(B * out_sequence));
  for (int b = 0; b < B; ++b) {
    comm_.all_to_all_v(x + b * in_sequence, kv_mine_.counts.data(), kv_mine_.displs.data(), pack_,
                       kv_slots_.counts.data(), kv_slots_.displs.data());
    // Every slot's gradient is added into its kv head, in (rank, slot) order (the rows are p-major), so the
    // sum is the same on every run; a head held once is its one copy (0 + x is x).
    float* target = out + b * out_sequence;
    memory_.fill_zero(target, sizeof(float) * static_cast<size_t>(out_sequence));
    backend_.embedding_backward(target, pack_, rows_, static_cast<int64_t>(sharding_.kv_send_heads()) * c, D);
  }
}

}  // namespace fpdt::pipeline
