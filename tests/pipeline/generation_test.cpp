// Generation through the FPDT pipeline (pipeline/generation.cpp, train/sampler.h): the prompt prefilled
// chunk by chunk into a KV cache in the store, then one token at a time. Each decoded token's logits equal
// the unchunked model's over the whole sequence so far (the spec, on the reference backend and the cpu
// backend alike), whatever the chunks, the sp ranks, the offload tier (bitwise the same for none, ram and
// disk) and the precision; the dry run lays out what a generation allocates, to the byte, and its compute
// tier does not grow with the prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "fpdt/comm/communicator.h"
#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/transformer.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/train/sampler.h"
#include "pipeline/pipeline_testing.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

using kernels::BackendKind;
using kernels::Precision;

// A generation's tokens and the logits each token was chosen from (steps × V).
struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};

// Greedy generation of `steps` tokens after `prompt` through the pipeline on P thread ranks (rank 0's
// result; every rank must return the same tokens and logits, bitwise).
Decoded generate_greedy(const model::ModelConfig& config, RunSpec run, int ranks, BackendKind backend_kind,
                        const std::vector<int32_t>& prompt, int64_t steps, uint64_t seed) {
  run.forward_only = true;
  const int V = config.vocab_size;
  auto backend = kernels::make_backend(backend_kind);
  std::vector<Decoded> by_rank(static_cast<size_t>(ranks));
  comm::run_ranks(ranks, [&](comm::Communicator& comm) {
    FpdtModel model(config, *backend, comm, run, seed);
    Decoded& decoded = by_rank[static_cast<size_t>(comm.rank())];
    decoded.logits.resize(static_cast<size_t>(steps * V));
    model.prefill(prompt, steps - 1, decoded.logits.data());
    for (int64_t i = 0; i < steps; ++i) {
      const float* logits = decoded.logits.data() + i * V;
      if (i > 0) model.decode(decoded.tokens.back(), decoded.logits.data() + i * V);
      decoded.tokens.push_back(static_cast<int32_t>(std::max_element(logits, logits + V) - logits));
    }
    EXPECT_EQ(model.cached_tokens(), static_cast<int64_t>(prompt.size()) + steps - 1);
  });
  for (int r = 1; r < ranks; ++r) {
    EXPECT_EQ(by_rank[static_cast<size_t>(r)].tokens, by_rank[0].tokens) << "rank " << r;
    EXPECT_EQ(0, std::memcmp(by_rank[static_cast<size_t>(r)].logits.data(), by_rank[0].logits.data(),
                             by_rank[0].logits.size() * sizeof(float)))
        << "rank " << r;
  }
  return by_rank[0];
}

// The unchunked model's logits at the positions the generation chose its tokens at: one forward over
// the prompt and every generated token but the last.
std::vector<float> unchunked_logits(const model::ModelConfig& config, BackendKind backend_kind, Precision precision,
                                    const std::vector<int32_t>& prompt, const Decoded& decoded, uint64_t seed) {
  auto backend = kernels::make_backend(backend_kind);
  model::Transformer model(config, *backend, seed, precision);
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), decoded.tokens.begin(), decoded.tokens.end() - 1);
  const int64_t T = static_cast<int64_t>(sequence.size());
  const int V = config.vocab_size;
  std::vector<float> all(static_cast<size_t>(T * V));
  model.forward(model::Batch{1, T, sequence.data(), nullptr, nullptr}, all.data());
  return std::vector<float>(all.begin() + (static_cast<int64_t>(prompt.size()) - 1) * V, all.end());
}

// The generation's logits against the unchunked model's: within `bound` (relative_error, per step), and
// each token the unchunked model's argmax wherever its top two differ by more than the error measured
// (a near-tie may fall either way within rounding).
void expect_matches_unchunked(const Decoded& got, const std::vector<float>& want, int V, double bound) {
  const int64_t steps = static_cast<int64_t>(got.tokens.size());
  ASSERT_EQ(want.size(), static_cast<size_t>(steps * V));
  double worst = 0.0;
  for (int64_t i = 0; i < steps; ++i) {
    const float* g = got.logits.data() + i * V;
    const float* w = want.data() + i * V;
    const double error = testing::relative_error(g, w, static_cast<size_t>(V));
    worst = std::max(worst, error);
    EXPECT_LE(error, bound) << "step " << i;
    std::vector<float> sorted(w, w + V);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    double norm = 0.0;
    for (int v = 0; v < V; ++v) norm += static_cast<double>(w[v]) * w[v];
    const double max_abs_error = error * std::sqrt(norm);  // ≥ every entry's error
    if (sorted[0] - sorted[1] > 2 * max_abs_error) {
      EXPECT_EQ(got.tokens[static_cast<size_t>(i)], std::max_element(w, w + V) - w) << "step " << i;
    }
  }
  std::printf("[ error    ] worst step %.2e (bound %.2e)\n", worst, bound);
}

std::vector<int32_t> random_prompt(Rng& rng, int64_t length, int V) {
  std::vector<int32_t> prompt;
  for (int64_t t = 0; t < length; ++t) prompt.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(V))));
  return prompt;
}

struct Layout {
  const char* name;
  int64_t chunk_tokens;
  int ranks;
};

// fp32: every layout's logits are the unchunked model's within fp32 reordering (the LSE merges over kv
// chunks, the keys of a softmax summed in another order); the offload tiers bitwise the resident one.
TEST(Generation, DecodedLogitsEqualTheUnchunkedModelInEveryLayout) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const int64_t steps = 12;
  for (const model::Family family : {model::Family::llama, model::Family::gpt}) {
    const model::ModelConfig config = tiny(family, 4, family == model::Family::llama ? 2 : 4);
    const int V = config.vocab_size;
    const std::vector<int32_t> prompt = random_prompt(rng, 5 + static_cast<int64_t>(rng.below(30)), V);
    SCOPED_TRACE(config.name + ", prompt of " + std::to_string(prompt.size()));
    const int64_t keys = static_cast<int64_t>(prompt.size()) + steps;
    const double bound = testing::fp32_bound(testing::transformer_reordering(config, 1, keys, false));
    Decoded first;
    for (const Layout layout : {Layout{"chunks of 4", 4, 1}, Layout{"chunks of 6 over 2 ranks", 6, 2},
                                Layout{"one chunk", 4096, 1}, Layout{"one chunk over 2 ranks", 4096, 2}}) {
      SCOPED_TRACE(layout.name);
      RunSpec run;
      run.chunk_tokens = layout.chunk_tokens;
      run.chunks = 0;
      run.offload = parse_offload("none");
      const Decoded resident = generate_greedy(config, run, layout.ranks, BackendKind::cpu, prompt, steps, seed);
      expect_matches_unchunked(resident, unchunked_logits(config, BackendKind::cpu, Precision::fp32, prompt, resident, seed),
                               V, bound);
      for (const char* offload : {"ram", "disk:/tmp"}) {
        run.offload = parse_offload(offload);
        const Decoded offloaded = generate_greedy(config, run, layout.ranks, BackendKind::cpu, prompt, steps, seed);
        EXPECT_EQ(offloaded.tokens, resident.tokens) << offload;
        EXPECT_EQ(0, std::memcmp(offloaded.logits.data(), resident.logits.data(), resident.logits.size() * sizeof(float)))
            << offload;
      }
      if (first.tokens.empty()) first = resident;
    }
    // The spec: the reference backend's decoding, against its own unchunked model and the cpu backend's.
    RunSpec run;
    run.chunk_tokens = 4;
    run.chunks = 0;
    run.offload = parse_offload("ram");
    const Decoded reference = generate_greedy(config, run, 1, BackendKind::reference, prompt, steps, seed);
    expect_matches_unchunked(reference,
                             unchunked_logits(config, BackendKind::reference, Precision::fp32, prompt, reference, seed),
                             V, bound);
    expect_matches_unchunked(first, reference.logits, V, bound);
  }
}

// Issue 46: decoding over P ranks of an uneven head split — each rank attends its q heads against its kv
// slots, the outputs gathered by all_gather_v — gives the unchunked model's logits within fp32 reordering,
// for fresh head layouts of every HeadCase (printed with the seed).
TEST(Generation, UnevenHeadSplitsDecodeTheUnchunkedModelsLogits) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const int64_t steps = 6;
  for (int draw = 0; draw < static_cast<int>(HeadCase::count); ++draw) {
    const HeadDraw layout = draw_heads(rng, static_cast<HeadCase>(draw), 0);
    const model::ModelConfig config = tiny(model::Family::llama, layout.heads, layout.kv_heads);
    const std::vector<int32_t> prompt = random_prompt(rng, 5 + static_cast<int64_t>(rng.below(20)), config.vocab_size);
    SCOPED_TRACE("Hq " + std::to_string(layout.heads) + ", Hkv " + std::to_string(layout.kv_heads) + ", P " +
                 std::to_string(layout.ranks));
    RunSpec run;
    run.chunk_tokens = layout.ranks * (1 + static_cast<int64_t>(rng.below(4)));
    run.chunks = 0;
    run.offload = parse_offload(draw % 2 == 0 ? "none" : "ram");
    const Decoded decoded = generate_greedy(config, run, layout.ranks, BackendKind::cpu, prompt, steps, seed);
    const int64_t keys = static_cast<int64_t>(prompt.size()) + steps;
    expect_matches_unchunked(decoded, unchunked_logits(config, BackendKind::cpu, Precision::fp32, prompt, decoded, seed),
                             config.vocab_size, testing::fp32_bound(testing::transformer_reordering(config, 1, keys, false)));
  }
}

// A sliding window: the decoded token reads only the chunks its window reaches.
TEST(Generation, SlidingWindowReadsOnlyTheChunksItsWindowReaches) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  model::ModelConfig config = tiny(model::Family::llama, 4, 2);
  config.sliding_window = 7;
  config.sliding_layers = {true, false};
  const std::vector<int32_t> prompt = random_prompt(rng, 29, config.vocab_size);
  const int64_t steps = 10;
  RunSpec run;
  run.chunk_tokens = 5;
  run.chunks = 0;
  run.offload = parse_offload("ram");
  const Decoded got = generate_greedy(config, run, 1, BackendKind::cpu, prompt, steps, seed);
  const double bound = testing::fp32_bound(testing::transformer_reordering(config, 1, 39, false));
  expect_matches_unchunked(got, unchunked_logits(config, BackendKind::cpu, Precision::fp32, prompt, got, seed),
                           config.vocab_size, bound);
}

// bf16: the cache holds bf16 words; the logits are the unchunked bf16 model's within bf16's bound, and
// the offload tiers bitwise the resident store.
TEST(Generation, Bf16DecodedLogitsEqualTheUnchunkedBf16Model) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  const model::ModelConfig config = tiny(model::Family::llama, 4, 2);
  const std::vector<int32_t> prompt = random_prompt(rng, 17, config.vocab_size);
  const int64_t steps = 8;
  RunSpec run;
  run.chunk_tokens = 6;
  run.chunks = 0;
  run.precision = Precision::bf16;
  run.offload = parse_offload("none");
  const Decoded resident = generate_greedy(config, run, 2, BackendKind::cpu, prompt, steps, seed);
  expect_matches_unchunked(resident, unchunked_logits(config, BackendKind::cpu, Precision::bf16, prompt, resident, seed),
                           config.vocab_size, testing::bf16_bound(testing::bf16_roundings(config, false), true));
  for (const char* offload : {"ram", "disk:/tmp"}) {
    run.offload = parse_offload(offload);
    const Decoded offloaded = generate_greedy(config, run, 2, BackendKind::cpu, prompt, steps, seed);
    EXPECT_EQ(0, std::memcmp(offloaded.logits.data(), resident.logits.data(), resident.logits.size() * sizeof(float)))
        << offload;
  }
}

// The memory of a generation: a dry run lays out what prefill and decode allocate, to the byte, in both
// tiers; the compute tier is the chunk's arena whatever the prompt (only the store grows).
TEST(Generation, DryRunIsTheRealRunAndTheComputeTierDoesNotGrowWithThePrompt) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  auto backend = kernels::make_backend(BackendKind::cpu);
  auto local = comm::make_local();
  const model::ModelConfig config = tiny(model::Family::llama, 4, 2);
  size_t store_growth = 0;  // from the 16K prompt to the 256K one
  for (const char* offload : {"ram", "none"}) {
    SCOPED_TRACE(offload);
    RunSpec run;
    run.chunk_tokens = 8;
    run.chunks = 0;
    run.forward_only = true;
    run.offload = parse_offload(offload);
    const std::vector<int32_t> prompt = random_prompt(rng, 37, config.vocab_size);
    auto active = [] {
      return std::pair{MemoryTiers::instance().usage(Tier::compute).active_bytes,
                       MemoryTiers::instance().usage(Tier::offload).active_bytes};
    };
    std::pair<size_t, size_t> dry, real;
    {
      FpdtModel model(config, *backend, *local, run, seed);
      const auto before = active();
      model.dry_run_generation(37, 5);
      dry = {active().first - before.first, active().second - before.second};
    }
    {
      FpdtModel model(config, *backend, *local, run, seed);
      const auto before = active();
      std::vector<float> logits(static_cast<size_t>(config.vocab_size));
      model.prefill(prompt, 5, logits.data());
      for (int i = 0; i < 5; ++i) model.decode(static_cast<int32_t>(rng.below(61)), logits.data());
      real = {active().first - before.first, active().second - before.second};
      // Room for 37 + 5 positions, in whole chunks of 8: 48; then the cache is full.
      EXPECT_EQ(model.cache_capacity(), 48);
      while (model.cached_tokens() < model.cache_capacity()) model.decode(0, logits.data());
      EXPECT_THROW(model.decode(0, logits.data()), Error);
    }
    EXPECT_EQ(real, dry);
    // 16K and 256K prompts in chunks of 4K: the same compute tier (the arena); only the store grows.
    run.chunk_tokens = 4096;
    FpdtModel model(config, *backend, *local, run, seed);
    const auto before = active();  // the weights
    auto laid_out = [&](int64_t prompt_tokens) {  // each lay-out replaces the one before
      model.dry_run_generation(prompt_tokens, 32);
      const auto after = active();
      return std::pair{after.first - before.first, after.second - before.second};
    };
    const auto short_prompt = laid_out(16384), long_prompt = laid_out(262144);
    if (std::string(offload) == "ram") {
      EXPECT_EQ(short_prompt.first, long_prompt.first);
      // The cache's chunks: 4 + 1 (the 32 new tokens) against 64 + 1; the layer inputs' 4 against 64.
      const double store_ratio = static_cast<double>(long_prompt.second) / static_cast<double>(short_prompt.second);
      EXPECT_GE(store_ratio, 13.0);
      EXPECT_LE(store_ratio, 16.0);
      store_growth = long_prompt.second - short_prompt.second;
    } else {  // resident: the store is in the compute tier, and it alone grows, by as much
      EXPECT_EQ(long_prompt.first - short_prompt.first, store_growth);
    }
  }
}

// The sampling rule: greedy is the argmax (the lowest id among equals); top-k 1 is greedy; top-p keeps the
// fewest tokens whose probability reaches p; draws follow the softmax.
TEST(Generation, NextTokenRule) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  train::SamplerScratch scratch;
  const std::vector<float> logits = {0.0f, 2.0f, 2.0f, 1.0f, -1.0f};
  train::SampleSettings greedy;
  greedy.greedy = true;
  EXPECT_EQ(train::next_token(logits.data(), 5, greedy, rng, scratch), 1);
  train::SampleSettings top1;
  top1.top_k = 1;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(train::next_token(logits.data(), 5, top1, rng, scratch), 1);
  // p(1) = p(2) = e²/(2e² + e + 1 + e⁻¹) ≈ 0.40 each: top-p 0.5 keeps exactly tokens 1 and 2.
  train::SampleSettings nucleus;
  nucleus.top_k = 0;
  nucleus.temperature = 1.0;
  nucleus.top_p = 0.5;
  std::vector<int> counts(5, 0);
  const int draws = 4000;
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(train::next_token(logits.data(), 5, nucleus, rng, scratch))];
  EXPECT_EQ(counts[0] + counts[3] + counts[4], 0);
  // Binomial(4000, 1/2): standard deviation √1000 ≈ 32; six of them.
  EXPECT_NEAR(counts[1], draws / 2, 6 * 32);
  // The whole softmax: token 3's probability e/(2e² + e + 1 + e⁻¹) ≈ 0.148.
  train::SampleSettings all;
  all.top_k = 0;
  all.temperature = 1.0;
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(train::next_token(logits.data(), 5, all, rng, scratch))];
  const double e = std::exp(1.0), p3 = e / (2 * e * e + e + 1 + 1 / e);
  EXPECT_NEAR(counts[3], draws * p3, 6 * std::sqrt(draws * p3 * (1 - p3)));
}

}  // namespace
}  // namespace fpdt::pipeline
