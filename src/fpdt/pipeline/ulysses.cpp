// Ulysses all-to-all re-layout (see ulysses.h).
#include "fpdt/pipeline/ulysses.h"

#include <string>
#include <vector>

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
  if (!sharding_.kv_replicated) return;
  // Row (p·c + t) of a received gradient block is token t's copy of kv head kv_head_for(p, 0).
  std::vector<int32_t> rows_host(static_cast<size_t>(sharding_.ranks * c));
  for (int p = 0; p < sharding_.ranks; ++p)
    for (int64_t t = 0; t < c; ++t)
      rows_host[p * c + t] = static_cast<int32_t>(t * sharding_.kv_heads + sharding_.kv_head_for(p, 0));
  memory_.upload(rows_, rows_host.data(), rows_host.size() * sizeof(int32_t));
}

void UlyssesExchange::q_to_heads(const float* x, float* out, int B) {
  const int P = sharding_.ranks, H = sharding_.q_heads, local = sharding_.local_q_heads, D = head_dim_;
  const int64_t c = c_, sequence = c * H * D;  // floats of one sequence's chunk in either layout
  const size_t row = static_cast<size_t>(local) * D;
  const trace::Span span("all-to-all q", "comm");
  if (P == 1) return memory_.copy(out, x, sizeof(float) * static_cast<size_t>(B * sequence));
  for (int b = 0; b < B; ++b) {
    // pack: block p = (c, Hq/P, D), heads [p·Hq/P, (p+1)·Hq/P) of every token.
    for (int p = 0; p < P; ++p)
      memory_.copy_2d(pack_ + p * c * row, row * sizeof(float), x + b * sequence + p * row, H * D * sizeof(float),
                      row * sizeof(float), static_cast<size_t>(c));
    // Block p from rank p holds its c tokens: in rank order they are the chunk's global order.
    comm_.all_to_all(pack_, out + b * sequence, static_cast<size_t>(c) * row);
  }
}

void UlyssesExchange::q_to_sequence(const float* x, float* out, int B) {
  const int P = sharding_.ranks, H = sharding_.q_heads, local = sharding_.local_q_heads, D = head_dim_;
  const int64_t c = c_, sequence = c * H * D;
  const size_t row = static_cast<size_t>(local) * D;
  const trace::Span span("all-to-all back", "comm");
  if (P == 1) return memory_.copy(out, x, sizeof(float) * static_cast<size_t>(B * sequence));
  for (int b = 0; b < B; ++b) {
    // Send block p = tokens [p·c, (p+1)·c) of the chunk (contiguous); receive our c tokens' heads from each rank.
    comm_.all_to_all(x + b * sequence, pack_, static_cast<size_t>(c) * row);
    for (int p = 0; p < P; ++p)
      memory_.copy_2d(out + b * sequence + p * row, H * D * sizeof(float), pack_ + p * c * row, row * sizeof(float),
                      row * sizeof(float), static_cast<size_t>(c));
  }
}

void UlyssesExchange::kv_to_heads(const float* x, float* out, int B) {
  const int P = sharding_.ranks, H = sharding_.kv_heads, local = sharding_.local_kv_heads, D = head_dim_;
  const int64_t c = c_, in_sequence = c * H * D, out_sequence = P * c * local * D;
  const size_t row = static_cast<size_t>(local) * D;  // rank p's heads [kv_head_for(p, 0), + local) are contiguous
  const trace::Span span("all-to-all kv", "comm");
  if (P == 1) return memory_.copy(out, x, sizeof(float) * static_cast<size_t>(B * in_sequence));
  for (int b = 0; b < B; ++b) {
    for (int p = 0; p < P; ++p)
      memory_.copy_2d(pack_ + p * c * row, row * sizeof(float), x + b * in_sequence + sharding_.kv_head_for(p, 0) * D,
                      H * D * sizeof(float), row * sizeof(float), static_cast<size_t>(c));
    comm_.all_to_all(pack_, out + b * out_sequence, static_cast<size_t>(c) * row);
  }
}

void UlyssesExchange::kv_grad_to_sequence(const float* x, float* out, int B) {
  const int P = sharding_.ranks, H = sharding_.kv_heads, local = sharding_.local_kv_heads, D = head_dim_;
  const int64_t c = c_, out_sequence = c * H * D, in_sequence = P * c * local * D;
  const size_t row = static_cast<size_t>(local) * D;
  const trace::Span span("all-to-all kv grad", "comm");
  if (P == 1) return memory_.copy(out, x, sizeof(float) * static_cast<size_t>(B * out_sequence));
  for (int b = 0; b < B; ++b) {
    comm_.all_to_all(x + b * in_sequence, pack_, static_cast<size_t>(c) * row);
    float* target = out + b * out_sequence;
    if (!sharding_.kv_replicated) {
      for (int p = 0; p < P; ++p)
        memory_.copy_2d(target + sharding_.kv_head_for(p, 0) * D, H * D * sizeof(float), pack_ + p * c * row,
                        row * sizeof(float), row * sizeof(float), static_cast<size_t>(c));
      continue;
    }
    // Replicated heads: every rank's copy is added into its head, in rank order (the rows are p-major),
    // so the sum is the same on every run.
    memory_.fill_zero(target, sizeof(float) * static_cast<size_t>(out_sequence));
    backend_.embedding_backward(target, pack_, rows_, P * c, D);
  }
}

}  // namespace fpdt::pipeline
