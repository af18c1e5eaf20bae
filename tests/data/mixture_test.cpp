// Tests of data mixtures (data/mixture.h): over 10⁴ rows each source's share of the rows (so of the tokens)
// is its weight within 2 %; every whole document a row holds obeys its source's length rule; document ids
// break right after each end-of-document token (document masks at the packed boundaries); a restored
// cursor continues bit for bit; the spelling round-trips; bad mixtures fail with one clear error.
#include "fpdt/data/mixture.h"

#include <cmath>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "testing.h"

namespace fpdt::data {
namespace {

using testing::error_message;
using testing::expect_contains;
using testing::TempDir;

constexpr int32_t kEnd = 256;  // the end-of-document token of the shards here (a byte tokenizer's vocabulary)

// A source's shard: documents of random lengths in [shortest, longest] (end-of-document token included),
// whose tokens are all in [first_token, first_token + 40), so a row tells which source it came from.
struct SourceShard {
  std::string dir;
  int32_t first_token;
};
SourceShard write_source(const TempDir& dir, const std::string& name, Rng& rng, int32_t first_token, int documents,
                         int64_t shortest, int64_t longest) {
  std::vector<int32_t> tokens;
  for (int d = 0; d < documents; ++d) {
    const int64_t length = shortest + static_cast<int64_t>(rng.below(static_cast<uint64_t>(longest - shortest + 1)));
    for (int64_t t = 0; t + 1 < length; ++t) tokens.push_back(first_token + static_cast<int32_t>(rng.below(40)));
    tokens.push_back(kEnd);
  }
  const std::string folder = dir.file(name);
  std::filesystem::create_directories(folder);
  write_shard(folder + "/train.bin", tokens, 257, ShardTokenizer{0, static_cast<uint32_t>(kEnd)});
  return {folder, first_token};
}

// The source a row's tokens come from (every non-EOS token in its range), or −1 when they mix.
int source_of(const int32_t* inputs, int64_t tokens, const std::vector<SourceShard>& shards) {
  int found = -1;
  for (int64_t i = 0; i < tokens; ++i) {
    if (inputs[i] == kEnd) continue;
    int source = -1;
    for (size_t s = 0; s < shards.size(); ++s)
      if (inputs[i] >= shards[s].first_token && inputs[i] < shards[s].first_token + 40) source = static_cast<int>(s);
    if (source < 0 || (found >= 0 && source != found)) return -1;
    found = source;
  }
  return found;
}

TEST(Mixture, SharesFollowTheWeightsAndLengthRulesHold) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  TempDir dir;
  // Three sources: long documents only, short ones only, and any, with weights 0.5 / 0.3 / 0.2.
  const std::vector<SourceShard> shards = {write_source(dir, "long", rng, 0, 60, 20, 400),
                                           write_source(dir, "short", rng, 100, 400, 2, 60),
                                           write_source(dir, "any", rng, 200, 200, 2, 200)};
  std::vector<MixtureSource> sources = {{shards[0].dir, 0.5, 150, 0}, {shards[1].dir, 0.3, 0, 30}, {shards[2].dir, 0.2, 0, 0}};
  DataLoaderConfig config;
  config.batch_size = 100;
  config.seq_tokens = 96;
  config.seed = seed;
  config.documents = true;
  MixtureLoader loader(open_mixture_shards(sources), sources, config);
  std::vector<int64_t> rows(3, 0);
  int64_t whole_documents = 0;
  Batch batch;
  constexpr int kBatches = 100;  // 10⁴ rows
  for (int b = 0; b < kBatches; ++b) {
    loader.next(batch);
    for (int64_t r = 0; r < batch.batch_size; ++r) {
      const int32_t* inputs = batch.inputs.data() + r * batch.seq_tokens;
      const int32_t* targets = batch.targets.data() + r * batch.seq_tokens;
      const int32_t* documents = batch.doc_ids.data() + r * batch.seq_tokens;
      const int source = source_of(inputs, batch.seq_tokens, shards);
      ASSERT_GE(source, 0) << "row " << r << " of batch " << b << " mixes sources (seed " << seed << ")";
      ++rows[static_cast<size_t>(source)];
      // Document masks: the id steps by one right after each end-of-document token, never elsewhere.
      for (int64_t i = 1; i < batch.seq_tokens; ++i)
        ASSERT_EQ(documents[i], documents[i - 1] + (inputs[i - 1] == kEnd ? 1 : 0)) << "position " << i << " (seed " << seed << ")";
      // Targets are the next tokens: every position is real.
      for (int64_t i = 0; i + 1 < batch.seq_tokens; ++i) ASSERT_EQ(targets[i], inputs[i + 1]);
      // Every document that starts after an end-of-document token and ends with one inside the row, and is
      // not the row's last (a cut document fills the row to its end), is whole: its length obeys the rule.
      int64_t start = -1;
      for (int64_t i = 0; i < batch.seq_tokens; ++i) {
        if (inputs[i] != kEnd) continue;
        if (start >= 0 && i + 1 < batch.seq_tokens) {
          const int64_t length = i - start + 1;
          const MixtureSource& rule = sources[static_cast<size_t>(source)];
          EXPECT_GE(length, std::max<int64_t>(rule.min_doc_tokens, 2)) << "source " << source << " (seed " << seed << ")";
          if (rule.max_doc_tokens > 0) {
            EXPECT_LE(length, rule.max_doc_tokens) << "source " << source << " (seed " << seed << ")";
          }
          ++whole_documents;
        }
        start = i + 1;
      }
    }
  }
  EXPECT_GT(whole_documents, 1000) << "too few whole documents to test the length rules";
  const double total = kBatches * 100.0;
  // 2 % of the weight: the sampling error of a share p over 10⁴ rows is √(p(1−p)/10⁴) ≤ 0.5 %, so a share
  // outside 2 % is a 4σ event of a correct sampler and the sign of a wrong one.
  for (size_t s = 0; s < sources.size(); ++s)
    EXPECT_NEAR(rows[s] / total, sources[s].weight, 0.02) << "source " << s << " (seed " << seed << ")";
  // The loader's own counts agree.
  for (size_t s = 0; s < sources.size(); ++s) EXPECT_EQ(loader.draws().rows[s], rows[s]);
}

TEST(Mixture, RestoredCursorContinuesBitForBit) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  TempDir dir;
  const std::vector<SourceShard> shards = {write_source(dir, "a", rng, 0, 50, 2, 300), write_source(dir, "b", rng, 100, 50, 2, 30)};
  const std::vector<MixtureSource> sources = {{shards[0].dir, 2.0, 0, 0}, {shards[1].dir, 1.0, 0, 0}};
  DataLoaderConfig config;
  config.batch_size = 3;
  config.seq_tokens = 64;
  config.seed = seed;
  MixtureLoader first(open_mixture_shards(sources), sources, config);
  Batch batch, again;
  for (int b = 0; b < 5; ++b) first.next(batch);
  const DataLoaderState cursor = first.state();
  MixtureLoader second(open_mixture_shards(sources), sources, config);
  second.restore(cursor);
  for (int b = 0; b < 5; ++b) {
    first.next(batch);
    second.next(again);
    ASSERT_EQ(batch.inputs, again.inputs) << "batch " << b << " after the restore (seed " << seed << ")";
    ASSERT_EQ(batch.targets, again.targets);
  }
  // A cursor of other data is refused.
  const std::vector<MixtureSource> fewer = {sources[0]};
  MixtureLoader other(open_mixture_shards(fewer), fewer, config);
  expect_contains(error_message([&] { other.restore(cursor); }), {"cannot resume the data cursor", "mixture"});
}

TEST(Mixture, SpellingRoundTripsAndBadSpecsAreRefused) {
  const std::vector<MixtureSource> parsed = parse_mixture("data/long:0.6:8K,data/short:0.4:0:2K,data/any:1");
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0].dir, "data/long");
  EXPECT_EQ(parsed[0].min_doc_tokens, 8192);
  EXPECT_EQ(parsed[1].max_doc_tokens, 2048);
  EXPECT_EQ(parsed[2].weight, 1.0);
  const std::vector<MixtureSource> again = parse_mixture(mixture_spelling(parsed));
  ASSERT_EQ(again.size(), parsed.size());
  for (size_t i = 0; i < parsed.size(); ++i) {
    EXPECT_EQ(again[i].dir, parsed[i].dir);
    EXPECT_EQ(again[i].weight, parsed[i].weight);
    EXPECT_EQ(again[i].min_doc_tokens, parsed[i].min_doc_tokens);
    EXPECT_EQ(again[i].max_doc_tokens, parsed[i].max_doc_tokens);
  }
  expect_contains(error_message([] { parse_mixture("data/a"); }), {"'data/a' is not DIR:WEIGHT"});
  expect_contains(error_message([] { parse_mixture("data/a:-1"); }), {"data/a", "weight '-1'"});
  expect_contains(error_message([] { parse_mixture("data/a:1:2.5"); }), {"data/a", "MIN '2.5'"});
  expect_contains(error_message([] { parse_mixture("data/a:1:100:10"); }), {"data/a", "at least 100", "at most 10"});
}

TEST(Mixture, SourceWithoutAdmittedDocumentsIsRefused) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  TempDir dir;
  const SourceShard shard = write_source(dir, "short", rng, 0, 30, 2, 50);
  const std::vector<MixtureSource> sources = {{shard.dir, 1.0, 1000, 0}};
  DataLoaderConfig config;
  config.seq_tokens = 16;
  expect_contains(error_message([&] { MixtureLoader(open_mixture_shards(sources), sources, config); }),
                  {"mixture source " + shard.dir, "none of its 30 documents", "at least 1000"});
}

}  // namespace
}  // namespace fpdt::data
