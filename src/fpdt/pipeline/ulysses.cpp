// Ulysses all-to-all re-layout (see ulysses.h).
#include "fpdt/pipeline/ulysses.h"

#include <cstring>
#include <string>

#include "fpdt/base/error.h"
#include "fpdt/base/trace.h"

namespace fpdt::pipeline {

int HeadSharding::kv_head_for(int destination, int local) const {
  if (kv_replicated) return destination / (ranks / kv_heads);
  return destination * local_kv_heads + local;
}

double HeadSharding::forward_elements_per_token(int head_dim) const {
  return (2.0 * q_heads + 2.0 * kv_send_heads()) * head_dim * (ranks - 1) / ranks;
}

HeadSharding make_head_sharding(int q_heads, int kv_heads, int ranks) {
  if (q_heads % ranks != 0)
    throw Error("ulysses",
                std::to_string(q_heads) + " attention heads cannot be split over " + std::to_string(ranks) +
                    " sequence-parallel ranks",
                "use an --sp that divides the number of heads");
  HeadSharding sharding;
  sharding.ranks = ranks;
  sharding.q_heads = q_heads;
  sharding.kv_heads = kv_heads;
  sharding.local_q_heads = q_heads / ranks;
  if (kv_heads % ranks == 0) {
    sharding.local_kv_heads = kv_heads / ranks;
  } else if (ranks % kv_heads == 0) {
    sharding.local_kv_heads = 1;
    sharding.kv_replicated = true;
  } else {
    throw Error("ulysses",
                std::to_string(kv_heads) + " key/value heads can be neither split over nor replicated across " +
                    std::to_string(ranks) + " sequence-parallel ranks",
                "use an --sp that divides the kv heads or that they divide");
  }
  return sharding;
}

UlyssesExchange::UlyssesExchange(comm::Communicator& comm, const HeadSharding& sharding, int head_dim, float* pack)
    : comm_(comm), sharding_(sharding), head_dim_(head_dim), pack_(pack) {}

void UlyssesExchange::q_to_heads(const float* x, float* out, int64_t c) {
  // pack: block p = (c, Hq/P, D), heads [p·Hq/P, (p+1)·Hq/P) of every token.
  const int P = sharding_.ranks, H = sharding_.q_heads, local = sharding_.local_q_heads, D = head_dim_;
  const size_t row = static_cast<size_t>(local) * D;
  for (int p = 0; p < P; ++p)
    for (int64_t t = 0; t < c; ++t)
      std::memcpy(pack_ + (p * c + t) * row, x + (t * H + p * local) * D, row * sizeof(float));
  // Block p from rank p holds its c tokens: in rank order they are the chunk's global order.
  const trace::Span span("all-to-all q", "comm");
  comm_.all_to_all(pack_, out, static_cast<size_t>(c) * row);
}

void UlyssesExchange::q_to_sequence(const float* x, float* out, int64_t c) {
  const int P = sharding_.ranks, H = sharding_.q_heads, local = sharding_.local_q_heads, D = head_dim_;
  const size_t row = static_cast<size_t>(local) * D;
  // Send block p = tokens [p·c, (p+1)·c) of the chunk (contiguous); receive our c tokens' heads from each rank.
  {
    const trace::Span span("all-to-all back", "comm");
    comm_.all_to_all(x, pack_, static_cast<size_t>(c) * row);
  }
  for (int p = 0; p < P; ++p)
    for (int64_t t = 0; t < c; ++t)
      std::memcpy(out + (t * H + p * local) * D, pack_ + (p * c + t) * row, row * sizeof(float));
}

void UlyssesExchange::kv_to_heads(const float* x, float* out, int64_t c) {
  const int P = sharding_.ranks, H = sharding_.kv_heads, local = sharding_.local_kv_heads, D = head_dim_;
  for (int p = 0; p < P; ++p)
    for (int64_t t = 0; t < c; ++t)
      for (int l = 0; l < local; ++l)
        std::memcpy(pack_ + ((p * c + t) * local + l) * D, x + (t * H + sharding_.kv_head_for(p, l)) * D,
                    static_cast<size_t>(D) * sizeof(float));
  const trace::Span span("all-to-all kv", "comm");
  comm_.all_to_all(pack_, out, static_cast<size_t>(c) * local * D);
}

void UlyssesExchange::kv_grad_to_sequence(const float* x, float* out, int64_t c) {
  const int P = sharding_.ranks, H = sharding_.kv_heads, local = sharding_.local_kv_heads, D = head_dim_;
  {
    const trace::Span span("all-to-all kv grad", "comm");
    comm_.all_to_all(x, pack_, static_cast<size_t>(c) * local * D);
  }
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(c) * H * D);
  // In rank order, so replicated copies are summed in the same order on every run.
  for (int p = 0; p < P; ++p)
    for (int64_t t = 0; t < c; ++t)
      for (int l = 0; l < local; ++l) {
        float* target = out + (t * H + sharding_.kv_head_for(p, l)) * D;
        const float* source = pack_ + ((p * c + t) * local + l) * D;
        for (int d = 0; d < D; ++d) target[d] += source[d];
      }
}

}  // namespace fpdt::pipeline
