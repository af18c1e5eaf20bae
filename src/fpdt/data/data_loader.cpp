// DataLoader: random or sequential windows of S + 1 tokens from a shard, split into (inputs, targets)
// rows with padding marked kIgnoreIndex. All randomness comes from one fpdt::Rng, whose state is
// part of the cursor, so a resumed run sees the same batches as one that never stopped.
#include "fpdt/data/data_loader.h"

#include <algorithm>
#include <string>
#include <utility>

#include "fpdt/base/error.h"

namespace fpdt::data {

namespace {

constexpr const char* kModule = "data";

const char* sampling_name(uint32_t sampling) {
  switch (static_cast<Sampling>(sampling)) {
    case Sampling::random: return "random";
    case Sampling::sequential: return "sequential";
    case Sampling::mixture: return "mixture";
  }
  return "unknown";
}

std::string describe(uint64_t shard_tokens, int64_t batch_size, int64_t seq_tokens, uint32_t sampling) {
  return "a shard of " + std::to_string(shard_tokens) + " tokens, batch " + std::to_string(batch_size) + ", seq " +
         std::to_string(seq_tokens) + ", " + sampling_name(sampling) + " sampling";
}

// Positions of a row that have both an input and a next token.
int64_t real_positions(int64_t row_tokens, std::span<const int32_t> window) {
  return std::clamp<int64_t>(static_cast<int64_t>(window.size()) - 1, 0, row_tokens);
}

}  // namespace

void fill_inputs(int32_t* inputs, int64_t row_tokens, std::span<const int32_t> window, int32_t pad_token) {
  const int64_t real = real_positions(row_tokens, window);
  std::copy(window.begin(), window.begin() + real, inputs);
  std::fill(inputs + real, inputs + row_tokens, pad_token);
}

void fill_targets(int32_t* targets, int64_t row_tokens, std::span<const int32_t> window) {
  const int64_t real = real_positions(row_tokens, window);
  if (real > 0) std::copy(window.begin() + 1, window.begin() + 1 + real, targets);
  std::fill(targets + real, targets + row_tokens, kIgnoreIndex);
}

void fill_documents(int32_t* doc_ids, int32_t* positions, int64_t row_tokens, std::span<const int32_t> window,
                    int32_t end_of_document) {
  const int64_t real = real_positions(row_tokens, window);
  int32_t document = 0;
  int64_t start = 0;  // of the document
  for (int64_t i = 0; i < real; ++i) {
    doc_ids[i] = document;
    if (positions) positions[i] = static_cast<int32_t>(i - start);
    if (window[static_cast<size_t>(i)] == end_of_document) {
      ++document;
      start = i + 1;
    }
  }
  // The padding: one document after the real ones (the next id: `document` unless it holds tokens).
  const bool unfinished = real > 0 && window[static_cast<size_t>(real - 1)] != end_of_document;
  const int32_t padding = unfinished ? document + 1 : document;
  for (int64_t i = real; i < row_tokens; ++i) {
    doc_ids[i] = padding;
    if (positions) positions[i] = static_cast<int32_t>(i - real);
  }
}

void check_row_config(DataLoaderConfig& config, const ShardReader& shard) {
  if (config.padded_seq_tokens == 0) config.padded_seq_tokens = config.seq_tokens;
  FPDT_CHECK(config.batch_size >= 1, kModule, "batch size " + std::to_string(config.batch_size) + " must be at least 1",
             "pass --batch 1 or more");
  FPDT_CHECK(config.seq_tokens >= 1, kModule, "sequence length " + std::to_string(config.seq_tokens) + " must be at least 1",
             "pass --seq 1 or more");
  FPDT_CHECK(config.padded_seq_tokens >= config.seq_tokens, kModule,
             "padded row length " + std::to_string(config.padded_seq_tokens) + " is shorter than the sequence length " +
                 std::to_string(config.seq_tokens),
             "padding can only lengthen a row");
  FPDT_CHECK(config.pad_token >= 0 && static_cast<uint32_t>(config.pad_token) < shard.vocab_size(), kModule,
             "pad token " + std::to_string(config.pad_token) + " is outside the vocabulary [0, " +
                 std::to_string(shard.vocab_size()) + ") of token shard '" + shard.path() + "'",
             "use a pad token id the model can embed, e.g. 0");
  FPDT_CHECK(config.documents || !config.restart_positions, kModule,
             "positions can restart only at the documents' starts, and documents are off",
             "--doc-positions restart needs --doc-mask");
  if (config.documents) {
    const uint32_t recorded = shard.tokenizer().end_of_document_id;
    FPDT_CHECK(config.end_of_document >= 0 || recorded != kNoEndOfDocument, kModule,
               "token shard '" + shard.path() + "' records no end-of-document token, so its documents cannot be told apart",
               "re-create it with `fpdt tokenize` (which puts the tokenizer's end-of-document token between "
               "documents), or train without --doc-mask");
    if (config.end_of_document < 0) config.end_of_document = static_cast<int32_t>(recorded);
    FPDT_CHECK(recorded == kNoEndOfDocument || recorded == static_cast<uint32_t>(config.end_of_document), kModule,
               "token shard '" + shard.path() + "' ends its documents with token " + std::to_string(recorded) +
                   ", not with " + std::to_string(config.end_of_document),
               "use the tokenizer the shard was made with");
    FPDT_CHECK(static_cast<uint32_t>(config.end_of_document) < shard.vocab_size(), kModule,
               "end-of-document token " + std::to_string(config.end_of_document) +
                   " is outside the vocabulary [0, " + std::to_string(shard.vocab_size()) + ") of token shard '" +
                   shard.path() + "'",
               "use the tokenizer the shard was made with");
  }
}

DataLoader::DataLoader(ShardReader shard, DataLoaderConfig config)
    : shard_(std::move(shard)), config_(config), rng_(config.seed) {
  FPDT_CHECK(config_.sampling == Sampling::random || config_.sampling == Sampling::sequential, kModule,
             "unknown sampling mode " + std::to_string(static_cast<uint32_t>(config_.sampling)), "");
  check_row_config(config_, shard_);
  const uint64_t window_tokens = static_cast<uint64_t>(config_.seq_tokens) + 1;
  FPDT_CHECK(shard_.token_count() >= window_tokens, kModule,
             "token shard '" + shard_.path() + "' has " + std::to_string(shard_.token_count()) +
                 " tokens, but a sequence length of " + std::to_string(config_.seq_tokens) + " needs at least " +
                 std::to_string(window_tokens) + " (S inputs plus one more for the shifted targets)",
             "lower --seq or add data");
  window_.resize(window_tokens);
}

uint64_t DataLoader::windows_per_epoch() const {
  const uint64_t seq_tokens = static_cast<uint64_t>(config_.seq_tokens);
  return (shard_.token_count() - 1 + seq_tokens - 1) / seq_tokens;
}

uint64_t DataLoader::batches_per_epoch() const {
  const uint64_t batch_size = static_cast<uint64_t>(config_.batch_size);
  return (windows_per_epoch() + batch_size - 1) / batch_size;
}

void start_batch(Batch& batch, const DataLoaderConfig& config) {
  const int64_t row_tokens = config.padded_seq_tokens;
  batch.batch_size = config.batch_size;
  batch.seq_tokens = row_tokens;
  batch.inputs.resize(static_cast<size_t>(config.batch_size * row_tokens));
  batch.targets.resize(batch.inputs.size());
  batch.doc_ids.resize(config.documents ? batch.inputs.size() : 0);
  batch.positions.resize(config.restart_positions ? batch.inputs.size() : 0);
  batch.row_offsets.resize(static_cast<size_t>(config.batch_size));
  batch.target_tokens = 0;
}

void fill_row(Batch& batch, int64_t row, std::span<const int32_t> window, int64_t offset, const DataLoaderConfig& config) {
  const int64_t row_tokens = batch.seq_tokens;
  fill_inputs(batch.inputs.data() + row * row_tokens, row_tokens, window, config.pad_token);
  fill_targets(batch.targets.data() + row * row_tokens, row_tokens, window);
  if (config.documents)
    fill_documents(batch.doc_ids.data() + row * row_tokens,
                   config.restart_positions ? batch.positions.data() + row * row_tokens : nullptr, row_tokens, window,
                   config.end_of_document);
  batch.row_offsets[static_cast<size_t>(row)] = offset;
  batch.target_tokens += real_positions(row_tokens, window);
}

void DataLoader::next(Batch& batch) {
  const uint64_t seq_tokens = static_cast<uint64_t>(config_.seq_tokens);
  const uint64_t shard_tokens = shard_.token_count();
  start_batch(batch, config_);
  const uint64_t windows = config_.sampling == Sampling::sequential ? windows_per_epoch() : 0;

  for (int64_t row = 0; row < config_.batch_size; ++row) {
    std::span<const int32_t> window;  // empty: an all-padding row
    int64_t offset = -1;
    if (config_.sampling == Sampling::random) {
      offset = static_cast<int64_t>(rng_.below(shard_tokens - seq_tokens));
      window = window_;
    } else if (next_window_ < windows) {
      const uint64_t begin = next_window_ * seq_tokens;
      offset = static_cast<int64_t>(begin);
      window = std::span<const int32_t>(window_).first(std::min(seq_tokens + 1, shard_tokens - begin));
      ++next_window_;
    }
    if (!window.empty()) shard_.read(static_cast<uint64_t>(offset), window.size(), window_.data());
    fill_row(batch, row, window, offset, config_);
  }
  if (config_.sampling == Sampling::sequential && next_window_ >= windows) {
    next_window_ = 0;
    ++epoch_;
  }
  ++batches_served_;
}

Batch DataLoader::next() {
  Batch batch;
  next(batch);
  return batch;
}

DataLoaderState DataLoader::state() const {
  DataLoaderState state{};
  const uint64_t* words = rng_.state();
  std::copy(words, words + 4, state.rng_state);
  state.batches_served = batches_served_;
  state.next_window = next_window_;
  state.epoch = epoch_;
  state.shard_tokens = shard_.token_count();
  state.batch_size = config_.batch_size;
  state.seq_tokens = config_.seq_tokens;
  state.sampling = static_cast<uint32_t>(config_.sampling);
  return state;
}

void check_same_cursor(const DataLoaderState& saved, const DataLoaderState& current, const std::string& data) {
  const bool same = saved.shard_tokens == current.shard_tokens && saved.batch_size == current.batch_size &&
                    saved.seq_tokens == current.seq_tokens && saved.sampling == current.sampling;
  FPDT_CHECK(same, kModule,
             "cannot resume the data cursor: it was saved for " +
                 describe(saved.shard_tokens, saved.batch_size, saved.seq_tokens, saved.sampling) + ", but this loader reads " +
                 data + " with " + describe(current.shard_tokens, current.batch_size, current.seq_tokens, current.sampling),
             "resume with the same data, --batch and --seq, or start a fresh run");
}

void DataLoader::restore(const DataLoaderState& state) {
  check_same_cursor(state, this->state(), "'" + shard_.path() + "'");
  FPDT_CHECK(config_.sampling == Sampling::random || state.next_window < windows_per_epoch(), kModule,
             "cannot resume the data cursor: window " + std::to_string(state.next_window) + " is past the " +
                 std::to_string(windows_per_epoch()) + " windows of '" + shard_.path() + "'",
             "the checkpoint's data cursor is corrupt; start a fresh run");
  rng_.set_state(state.rng_state);
  batches_served_ = state.batches_served;
  next_window_ = state.next_window;
  epoch_ = state.epoch;
}

}  // namespace fpdt::data
