// Tests of the DataLoader: rows are true shard windows, seeded sampling is reproducible, a restored
// cursor continues bit for bit, sequential sampling covers every target once per epoch, padding is
// marked kIgnoreIndex, packed documents end with (and include) their end-of-document token, and short
// shards, mismatched cursors or documents without an end-of-document token fail with clear errors.
#include "fpdt/data/data_loader.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "testing.h"

namespace fpdt::data {
namespace {

using testing::error_message;
using testing::expect_contains;
using testing::TempDir;

// A shard of `count` random tokens below `vocab_size`; returns the tokens.
std::vector<int32_t> write_random_shard(const std::string& path, Rng& rng, size_t count, uint32_t vocab_size = 257) {
  std::vector<int32_t> tokens(count);
  for (int32_t& token : tokens) token = static_cast<int32_t>(rng.below(vocab_size));
  write_shard(path, tokens, vocab_size);
  return tokens;
}

void expect_same_batch(const Batch& got, const Batch& want, int index) {
  EXPECT_EQ(got.batch_size, want.batch_size) << "batch " << index;
  EXPECT_EQ(got.seq_tokens, want.seq_tokens) << "batch " << index;
  EXPECT_EQ(got.inputs, want.inputs) << "batch " << index;
  EXPECT_EQ(got.targets, want.targets) << "batch " << index;
  EXPECT_EQ(got.doc_ids, want.doc_ids) << "batch " << index;
  EXPECT_EQ(got.positions, want.positions) << "batch " << index;
  EXPECT_EQ(got.row_offsets, want.row_offsets) << "batch " << index;
  EXPECT_EQ(got.target_tokens, want.target_tokens) << "batch " << index;
}

TEST(DataLoaderHelpers, FillInputsAndTargetsMarkPadding) {
  const std::vector<int32_t> window = {5, 6, 7, 8};  // S + 1 = 4
  std::vector<int32_t> inputs(3), targets(3);
  fill_inputs(inputs.data(), 3, window, 0);
  fill_targets(targets.data(), 3, window);
  EXPECT_EQ(inputs, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(targets, (std::vector<int32_t>{6, 7, 8}));

  // A row longer than the window: padded positions get pad inputs and ignored targets.
  inputs.assign(6, -1);
  targets.assign(6, -1);
  fill_inputs(inputs.data(), 6, window, 9);
  fill_targets(targets.data(), 6, window);
  EXPECT_EQ(inputs, (std::vector<int32_t>{5, 6, 7, 9, 9, 9}));  // 8 has no next token: padding
  EXPECT_EQ(targets, (std::vector<int32_t>{6, 7, 8, kIgnoreIndex, kIgnoreIndex, kIgnoreIndex}));

  // An empty window is a row of padding.
  fill_inputs(inputs.data(), 6, {}, 0);
  fill_targets(targets.data(), 6, {});
  EXPECT_EQ(inputs, std::vector<int32_t>(6, 0));
  EXPECT_EQ(targets, std::vector<int32_t>(6, kIgnoreIndex));
}

TEST(DataLoaderHelpers, DocumentsEndWithTheirEndOfDocumentToken) {
  constexpr int32_t E = 9;  // the end-of-document token
  const std::vector<int32_t> window = {1, 2, E, 3, E, E, 4, 5};  // S + 1 = 8: inputs 1 2 E 3 E E 4
  std::vector<int32_t> docs(7, -1), positions(7, -1);
  fill_documents(docs.data(), positions.data(), 7, window, E);
  EXPECT_EQ(docs, (std::vector<int32_t>{0, 0, 0, 1, 1, 2, 3}));  // each E in the document it ends
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 0}));

  // Padding past the real positions is one document after them, its positions from 0.
  docs.assign(10, -1);
  positions.assign(10, -1);
  fill_documents(docs.data(), positions.data(), 10, window, E);
  EXPECT_EQ(docs, (std::vector<int32_t>{0, 0, 0, 1, 1, 2, 3, 4, 4, 4}));
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 0, 0, 1, 2}));
  fill_documents(docs.data(), positions.data(), 10, std::span(window).first(6), E);  // inputs 1 2 E 3 E
  EXPECT_EQ(docs, (std::vector<int32_t>{0, 0, 0, 1, 1, 2, 2, 2, 2, 2}));             // after an E: its id
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 1, 2, 3, 4}));

  // A document longer than the row (no E in it) is the part the row holds, at positions 0..S−1: restarted
  // positions never reach S. Positions are optional.
  const std::vector<int32_t> long_document = {1, 2, 3, 4, 5, 6};
  docs.assign(5, -1);
  positions.assign(5, -1);
  fill_documents(docs.data(), positions.data(), 5, long_document, E);
  EXPECT_EQ(docs, std::vector<int32_t>(5, 0));
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  fill_documents(docs.data(), nullptr, 5, window, E);
  EXPECT_EQ(docs, (std::vector<int32_t>{0, 0, 0, 1, 1}));
}

// A shard of random tokens in which `end_of_document` ends a document about every 8 tokens (runs of
// it too: empty documents), recording it in its header.
std::vector<int32_t> write_documents_shard(const std::string& path, Rng& rng, size_t count, int32_t end_of_document) {
  std::vector<int32_t> tokens(count);
  for (int32_t& token : tokens) token = rng.below(8) == 0 ? end_of_document : static_cast<int32_t>(rng.below(200));
  write_shard(path, tokens, 257, ShardTokenizer{1, static_cast<uint32_t>(end_of_document)});
  return tokens;
}

TEST(DataLoader, DocumentsOfEachRowFollowItsEndOfDocumentTokens) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  constexpr int32_t E = 256;
  write_documents_shard(dir.file("s.bin"), rng, 3000, E);
  for (const Sampling sampling : {Sampling::random, Sampling::sequential}) {
    // The shard's own end-of-document token (end_of_document −1); rows padded past S.
    DataLoader loader(ShardReader(dir.file("s.bin")),
                      {.batch_size = 3, .seq_tokens = 70, .padded_seq_tokens = 80, .sampling = sampling,
                       .seed = rng.next_u64(), .documents = true, .restart_positions = true});
    Batch batch;
    for (int step = 0; step < 30; ++step) {
      loader.next(batch);
      ASSERT_EQ(batch.doc_ids.size(), batch.inputs.size());
      ASSERT_EQ(batch.positions.size(), batch.inputs.size());
      for (int64_t row = 0; row < 3; ++row) {
        const int64_t at = row * 80;
        EXPECT_EQ(batch.doc_ids[at], 0);
        EXPECT_EQ(batch.positions[at], 0);
        for (int64_t i = 1; i < 80; ++i) {
          // A new document starts right after an E and at the padding (target ignored), nowhere else.
          const bool starts = batch.inputs[at + i - 1] == E || (batch.targets[at + i] == kIgnoreIndex &&
                                                                batch.targets[at + i - 1] != kIgnoreIndex);
          EXPECT_EQ(batch.doc_ids[at + i], batch.doc_ids[at + i - 1] + (starts ? 1 : 0)) << "row " << row << " " << i;
          EXPECT_EQ(batch.positions[at + i], starts ? 0 : batch.positions[at + i - 1] + 1) << "row " << row << " " << i;
        }
      }
    }
  }
  // Documents without restarted positions: no positions in the batch (the model's 0..S−1).
  DataLoader global(ShardReader(dir.file("s.bin")), {.batch_size = 2, .seq_tokens = 70, .documents = true});
  const Batch batch = global.next();
  EXPECT_EQ(batch.doc_ids.size(), batch.inputs.size());
  EXPECT_TRUE(batch.positions.empty());
}

TEST(DataLoader, DocumentsNeedAnEndOfDocumentToken) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  write_random_shard(dir.file("plain.bin"), rng, 100);  // records no tokenizer, no end-of-document token
  write_documents_shard(dir.file("docs.bin"), rng, 100, 256);
  expect_contains(error_message([&] {
                    DataLoader loader(ShardReader(dir.file("plain.bin")), {.seq_tokens = 8, .documents = true});
                  }),
                  {"[data]", dir.file("plain.bin"), "records no end-of-document token", "hint:", "--doc-mask"});
  // Told which token ends documents, it splits there (a byte-tokenizer shard that predates the record).
  DataLoader told(ShardReader(dir.file("plain.bin")), {.seq_tokens = 8, .documents = true, .end_of_document = 256});
  EXPECT_EQ(told.next().doc_ids.size(), 8u);
  expect_contains(error_message([&] {
                    DataLoader loader(ShardReader(dir.file("docs.bin")),
                                      {.seq_tokens = 8, .documents = true, .end_of_document = 5});
                  }),
                  {"[data]", dir.file("docs.bin"), "ends its documents with token 256, not with 5"});
  expect_contains(error_message([&] {
                    DataLoader loader(ShardReader(dir.file("plain.bin")),
                                      {.seq_tokens = 8, .documents = true, .end_of_document = 257});
                  }),
                  {"end-of-document token 257", "outside the vocabulary [0, 257)"});
  expect_contains(error_message([&] {
                    DataLoader loader(ShardReader(dir.file("docs.bin")), {.seq_tokens = 8, .restart_positions = true});
                  }),
                  {"[data]", "documents are off", "hint: --doc-positions restart needs --doc-mask"});
}

TEST(DataLoader, RandomRowsAreShardWindows) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  const std::vector<int32_t> tokens = write_random_shard(dir.file("s.bin"), rng, 500 + rng.below(500));
  const int64_t seq_tokens = 1 + static_cast<int64_t>(rng.below(64));
  DataLoader loader(ShardReader(dir.file("s.bin")), {.batch_size = 4, .seq_tokens = seq_tokens, .seed = rng.next_u64()});
  Batch batch;
  for (int step = 0; step < 20; ++step) {
    loader.next(batch);
    ASSERT_EQ(batch.inputs.size(), static_cast<size_t>(4 * seq_tokens));
    EXPECT_EQ(batch.target_tokens, 4 * seq_tokens);
    for (int64_t row = 0; row < 4; ++row) {
      const int64_t offset = batch.row_offsets[row];
      ASSERT_GE(offset, 0);
      ASSERT_LE(offset + seq_tokens + 1, static_cast<int64_t>(tokens.size()));
      for (int64_t i = 0; i < seq_tokens; ++i) {
        ASSERT_EQ(batch.inputs[row * seq_tokens + i], tokens[offset + i]);
        ASSERT_EQ(batch.targets[row * seq_tokens + i], tokens[offset + i + 1]);
      }
    }
  }
  EXPECT_EQ(loader.state().batches_served, 20u);
}

TEST(DataLoader, RandomSamplingReachesBothEnds) {
  // N − S = 3 possible offsets; 200 rows hit each, including the last window that ends at the shard's end.
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  write_random_shard(dir.file("s.bin"), rng, 11);
  DataLoader loader(ShardReader(dir.file("s.bin")), {.batch_size = 8, .seq_tokens = 8, .seed = rng.next_u64()});
  std::vector<int> hits(3, 0);
  for (int step = 0; step < 25; ++step)
    for (const int64_t offset : loader.next().row_offsets) ++hits.at(static_cast<size_t>(offset));
  for (const int count : hits) EXPECT_GT(count, 0);
}

TEST(DataLoader, SameSeedSameBatchesOtherSeedOtherBatches) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  write_random_shard(dir.file("s.bin"), rng, 10000);
  const uint64_t seed = rng.next_u64();
  const DataLoaderConfig config{.batch_size = 2, .seq_tokens = 16, .seed = seed};
  DataLoader first(ShardReader(dir.file("s.bin")), config);
  DataLoader second(ShardReader(dir.file("s.bin")), config);
  DataLoaderConfig other_config = config;
  other_config.seed = seed + 1;
  DataLoader other(ShardReader(dir.file("s.bin")), other_config);
  bool any_difference = false;
  for (int step = 0; step < 5; ++step) {
    const Batch batch = first.next();
    expect_same_batch(second.next(), batch, step);
    any_difference |= other.next().row_offsets != batch.row_offsets;
  }
  EXPECT_TRUE(any_difference);
}

// Takes 7 batches; a new loader restored from the cursor after 3 yields batches 4..7 identically.
void expect_resume_continues(Sampling sampling) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  write_random_shard(dir.file("s.bin"), rng, 300 + rng.below(300));
  // With documents (ended by token 7 of the random tokens), which a resumed loader derives alike.
  const DataLoaderConfig config{.batch_size = 3, .seq_tokens = 17, .sampling = sampling, .seed = rng.next_u64(),
                                .documents = true, .restart_positions = true, .end_of_document = 7};
  DataLoader original(ShardReader(dir.file("s.bin")), config);
  std::vector<Batch> batches;
  DataLoaderState after_three{};
  for (int step = 0; step < 7; ++step) {
    batches.push_back(original.next());
    if (step == 2) after_three = original.state();
  }
  // The cursor travels as raw bytes, as in a checkpoint.
  unsigned char saved[sizeof(DataLoaderState)];
  std::memcpy(saved, &after_three, sizeof saved);
  DataLoaderState loaded;
  std::memcpy(&loaded, saved, sizeof saved);

  DataLoaderConfig fresh_config = config;
  fresh_config.seed = config.seed ^ 0x1234;  // the seed must not matter once a cursor is restored
  DataLoader resumed(ShardReader(dir.file("s.bin")), fresh_config);
  resumed.restore(loaded);
  for (int step = 3; step < 7; ++step) expect_same_batch(resumed.next(), batches[static_cast<size_t>(step)], step);
  const DataLoaderState original_end = original.state(), resumed_end = resumed.state();
  EXPECT_EQ(std::memcmp(original_end.rng_state, resumed_end.rng_state, sizeof original_end.rng_state), 0);
  EXPECT_EQ(resumed.state().batches_served, 7u);
}

TEST(DataLoader, ResumedCursorYieldsTheSameBatchesRandom) { expect_resume_continues(Sampling::random); }
TEST(DataLoader, ResumedCursorYieldsTheSameBatchesSequential) { expect_resume_continues(Sampling::sequential); }

TEST(DataLoader, SequentialCoversEveryTargetOncePerEpoch) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  const size_t shard_tokens = 200 + rng.below(400);
  const std::vector<int32_t> tokens = write_random_shard(dir.file("val.bin"), rng, shard_tokens);
  const int64_t seq_tokens = 2 + static_cast<int64_t>(rng.below(40));
  const int64_t batch_size = 1 + static_cast<int64_t>(rng.below(5));
  DataLoader loader(ShardReader(dir.file("val.bin")),
                    {.batch_size = batch_size, .seq_tokens = seq_tokens, .sampling = Sampling::sequential});
  const uint64_t windows = (shard_tokens - 1 + seq_tokens - 1) / seq_tokens;
  EXPECT_EQ(loader.windows_per_epoch(), windows);
  EXPECT_EQ(loader.batches_per_epoch(), (windows + batch_size - 1) / batch_size);

  std::vector<int> target_hits(shard_tokens, 0);
  std::vector<Batch> epoch;
  int64_t target_tokens = 0;
  for (uint64_t step = 0; step < loader.batches_per_epoch(); ++step) {
    epoch.push_back(loader.next());
    const Batch& batch = epoch.back();
    target_tokens += batch.target_tokens;
    for (int64_t row = 0; row < batch_size; ++row) {
      const int64_t offset = batch.row_offsets[row];
      for (int64_t i = 0; i < seq_tokens; ++i) {
        const int32_t target = batch.targets[row * seq_tokens + i];
        if (target == kIgnoreIndex) continue;
        ASSERT_GE(offset, 0);
        const size_t position = static_cast<size_t>(offset + i + 1);
        ASSERT_LT(position, shard_tokens);
        ASSERT_EQ(target, tokens[position]);
        ASSERT_EQ(batch.inputs[row * seq_tokens + i], tokens[position - 1]);
        ++target_hits[position];
      }
    }
  }
  EXPECT_EQ(target_hits[0], 0);
  for (size_t position = 1; position < shard_tokens; ++position) ASSERT_EQ(target_hits[position], 1) << position;
  EXPECT_EQ(target_tokens, static_cast<int64_t>(shard_tokens - 1));
  EXPECT_EQ(loader.state().epoch, 1u);
  EXPECT_EQ(loader.state().next_window, 0u);
  // The next epoch repeats the same order.
  for (size_t step = 0; step < epoch.size(); ++step) expect_same_batch(loader.next(), epoch[step], static_cast<int>(step));
}

TEST(DataLoader, PaddedRowsIgnoreThePadding) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  const std::vector<int32_t> tokens = write_random_shard(dir.file("s.bin"), rng, 1000);
  DataLoader loader(ShardReader(dir.file("s.bin")),
                    {.batch_size = 2, .seq_tokens = 10, .padded_seq_tokens = 16, .seed = rng.next_u64(), .pad_token = 256});
  const Batch batch = loader.next();
  EXPECT_EQ(batch.seq_tokens, 16);
  EXPECT_EQ(batch.target_tokens, 2 * 10);
  for (int64_t row = 0; row < 2; ++row) {
    const int64_t offset = batch.row_offsets[row];
    for (int64_t i = 0; i < 16; ++i) {
      const int32_t input = batch.inputs[row * 16 + i];
      const int32_t target = batch.targets[row * 16 + i];
      if (i < 10) {
        EXPECT_EQ(input, tokens[offset + i]);
        EXPECT_EQ(target, tokens[offset + i + 1]);
      } else {
        EXPECT_EQ(input, 256);
        EXPECT_EQ(target, kIgnoreIndex);
      }
    }
  }
}

TEST(DataLoader, ShortShardSaysTokensAndSequenceLength) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  write_random_shard(dir.file("tiny.bin"), rng, 100);
  for (const Sampling sampling : {Sampling::random, Sampling::sequential}) {
    const std::string message = error_message([&] {
      DataLoader loader(ShardReader(dir.file("tiny.bin")), {.batch_size = 1, .seq_tokens = 100, .sampling = sampling});
    });
    expect_contains(message, {"[data]", dir.file("tiny.bin"), "has 100 tokens", "sequence length of 100",
                              "at least 101", "hint: lower --seq or add data"});
  }
  // Exactly S + 1 tokens is enough: one window.
  DataLoader loader(ShardReader(dir.file("tiny.bin")), {.batch_size = 1, .seq_tokens = 99, .sampling = Sampling::sequential});
  EXPECT_EQ(loader.batches_per_epoch(), 1u);
  EXPECT_EQ(loader.next().target_tokens, 99);
}

TEST(DataLoader, RestoreRefusesACursorOfOtherData) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  write_random_shard(dir.file("a.bin"), rng, 1000);
  write_random_shard(dir.file("b.bin"), rng, 2000);
  DataLoader loader_a(ShardReader(dir.file("a.bin")), {.batch_size = 2, .seq_tokens = 8});
  DataLoader loader_b(ShardReader(dir.file("b.bin")), {.batch_size = 2, .seq_tokens = 8});
  expect_contains(error_message([&] { loader_b.restore(loader_a.state()); }),
                  {"[data]", "cannot resume", "1000 tokens", "2000 tokens", dir.file("b.bin")});
  DataLoader other_seq(ShardReader(dir.file("a.bin")), {.batch_size = 2, .seq_tokens = 9});
  expect_contains(error_message([&] { other_seq.restore(loader_a.state()); }), {"seq 8", "seq 9"});
}

TEST(DataLoader, ConfigErrors) {
  TempDir dir;
  Rng rng(fpdt::testing::fresh_seed());
  write_random_shard(dir.file("s.bin"), rng, 100);
  expect_contains(error_message([&] { DataLoader loader(ShardReader(dir.file("s.bin")), {.batch_size = 0, .seq_tokens = 8}); }),
                  {"batch size 0"});
  expect_contains(error_message([&] { DataLoader loader(ShardReader(dir.file("s.bin")), {.batch_size = 1, .seq_tokens = 0}); }),
                  {"sequence length 0"});
  expect_contains(error_message([&] {
                    DataLoader loader(ShardReader(dir.file("s.bin")), {.batch_size = 1, .seq_tokens = 8, .padded_seq_tokens = 4});
                  }),
                  {"padded row length 4"});
  expect_contains(error_message([&] {
                    DataLoader loader(ShardReader(dir.file("s.bin")), {.batch_size = 1, .seq_tokens = 8, .pad_token = 257});
                  }),
                  {"pad token 257", dir.file("s.bin")});
}

}  // namespace
}  // namespace fpdt::data
