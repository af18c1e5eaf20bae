// Model FLOPs (train::model_flops), the numerator of every MFU figure: causal attention counted once, and
// only the pairs a sliding window or document masks leave visible — checked against brute-force counts of
// the visible (query, key) pairs on fresh random windows and documents; and the progress line's ETA.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "fpdt/model/config.h"
#include "fpdt/train/metrics.h"
#include "testing.h"

namespace fpdt::train {
namespace {

using testing::fresh_seed;

// 6 · (non-embedding parameters + tied head) · tokens: every term of model_flops but attention's.
double dense_flops(const model::ModelConfig& config, int64_t tokens) {
  double params = static_cast<double>(config.non_embedding_parameter_count());
  if (config.tie_embeddings) params += static_cast<double>(config.vocab_size) * config.hidden;
  return 6.0 * params * static_cast<double>(tokens);
}

// Attention FLOPs of `pairs` visible pairs per layer, each summed over all layers' pairs by the caller:
// 2 products × 2 FLOPs × D per head, forward and backward (3×).
double attention_flops(const model::ModelConfig& config, double pairs) {
  return 12.0 * config.heads * config.head_dim * pairs;
}

// Visible (query, key) pairs of one document of n tokens under a window W (0: none), counted one by
// one, less the n diagonal pairs' half: the convention counts a causal block's pairs as n²/2.
double brute_force_pairs(int64_t n, int64_t window) {
  double pairs = 0.0;
  for (int64_t q = 0; q < n; ++q)
    for (int64_t k = 0; k <= q; ++k) pairs += window == 0 || q - k < window ? 1.0 : 0.0;
  return pairs - static_cast<double>(window == 0 || window >= n ? n : window) / 2.0;
}

TEST(ModelFlops, CausalRowsCountHalfTheScores) {
  const model::ModelConfig config = model::preset("llama-demo");
  const int64_t B = 3, S = 512;
  const double want = dense_flops(config, B * S) + 6.0 * S * S * config.heads * config.head_dim * config.layers * B;
  EXPECT_DOUBLE_EQ(model_flops(config, B, S), want);
  EXPECT_DOUBLE_EQ(model_flops(config, B, S), dense_flops(config, B * S) +
                                                   attention_flops(config, config.layers * B * brute_force_pairs(S, 0)));
}

TEST(ModelFlops, SlidingWindowLayersCountOnlyTheWindow) {
  Rng rng(fresh_seed());
  model::ModelConfig config = model::preset("llama-demo");
  const int64_t S = 300;
  config.sliding_window = 1 + static_cast<int64_t>(rng.uniform(0.0, S - 1.0));  // shorter than the row
  config.sliding_layers.assign(static_cast<size_t>(config.layers), false);
  config.sliding_layers[1] = true;  // one windowed layer, the others full
  const double pairs = (config.layers - 1) * brute_force_pairs(S, 0) + brute_force_pairs(S, config.sliding_window);
  // Both sides sum the same few hundred thousand whole numbers and halves: exact in double.
  EXPECT_DOUBLE_EQ(model_flops(config, 1, S), dense_flops(config, S) + attention_flops(config, pairs))
      << "window " << config.sliding_window;
}

TEST(ModelFlops, DocumentMasksCountEachDocumentAlone) {
  Rng rng(fresh_seed());
  model::ModelConfig config = model::preset("llama-demo");
  const int64_t B = 2, S = 256;
  std::vector<int32_t> doc_ids(static_cast<size_t>(B * S));
  double pairs = 0.0;  // per layer
  for (int64_t row = 0; row < B; ++row) {
    int32_t doc = 0;
    int64_t length = 0;
    for (int64_t i = 0; i < S; ++i) {
      doc_ids[static_cast<size_t>(row * S + i)] = doc;
      ++length;
      if (i + 1 == S || rng.uniform() < 0.03) {  // a document ends here (about every 33 tokens)
        pairs += brute_force_pairs(length, 0);
        ++doc;
        length = 0;
      }
    }
  }
  EXPECT_DOUBLE_EQ(model_flops(config, B, S, doc_ids.data()),
                   dense_flops(config, B * S) + attention_flops(config, config.layers * pairs));
  // One document per row is the unmasked row.
  std::fill(doc_ids.begin(), doc_ids.end(), 0);
  EXPECT_DOUBLE_EQ(model_flops(config, B, S, doc_ids.data()), model_flops(config, B, S));
}

// The progress line's ETA: minutes and seconds, hours and minutes beyond 100 hours, a bound beyond
// ~31,700 years — never a wrapped int (2.5e17 s printed "-35791394m-8s").
TEST(ProgressLine, EtaIsReadableAtAnyLength) {
  EXPECT_EQ(format_eta(125.4), "2m05s");
  EXPECT_EQ(format_eta(99 * 3600.0), "5940m00s");
  EXPECT_EQ(format_eta(100 * 3600.0 + 61), "100h01m");
  EXPECT_EQ(format_eta(kLongestEtaSeconds), "277777777h46m");
  EXPECT_EQ(format_eta(2.5e17), "over 30,000 years");
  EXPECT_EQ(format_eta(std::numeric_limits<double>::infinity()), "over 30,000 years");
  EXPECT_EQ(format_eta(std::numeric_limits<double>::quiet_NaN()), "?");
  StepMetrics metrics;
  metrics.step = 1;
  const std::string line = progress_line(metrics, int64_t{1} << 62, 2.5e17);
  EXPECT_NE(line.find("| ETA over 30,000 years"), std::string::npos) << line;
}

}  // namespace
}  // namespace fpdt::train
