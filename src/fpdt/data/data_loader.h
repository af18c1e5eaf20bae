// DataLoader: batches of B rows (inputs = S tokens, targets = the next S) from one token shard,
// drawn at seeded random offsets (training) or in a fixed order that covers the shard (validation).
// Its cursor is a small POD that checkpoints save; restoring it yields exactly the batches that would
// have come next. Rows can be padded past S (e.g. to a multiple of the chunk size): padded positions
// get target kIgnoreIndex, so they add nothing to the loss. With documents on (--doc-mask) each row
// also carries the document of every token (and, --doc-positions restart, its position in it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/data/shard.h"
#include "fpdt/kernels/ops.h"

namespace fpdt::data {

// Target of a position that does not count in the loss (PyTorch's ignore_index, −100): the one the
// cross-entropy kernels skip, so the loader and the loss cannot disagree.
inline constexpr int32_t kIgnoreIndex = kernels::kIgnoreIndex;
static_assert(kIgnoreIndex == -100);

// One row from a window of consecutive tokens: position i is real while i + 1 < window.size() (it
// has a next token to predict) and padding after that. A window of S + 1 tokens and row_tokens = S
// gives no padding; a shorter window or a longer row pads the tail.
// inputs (row_tokens): window[i] at real positions, pad_token at padding.
void fill_inputs(int32_t* inputs, int64_t row_tokens, std::span<const int32_t> window, int32_t pad_token);
// targets (row_tokens): window[i + 1] at real positions, kIgnoreIndex at padding.
void fill_targets(int32_t* targets, int64_t row_tokens, std::span<const int32_t> window);

// Packed documents. A shard holds documents separated by the tokenizer's end-of-document token (EOS),
// and the EOS belongs to the document it ends (its target, the next document's first token, still
// counts in the loss). In a row, document 0 is everything up to and including the first EOS, document
// d the tokens after the d-th EOS up to and including the (d+1)-th; the padding past the real
// positions is one document of its own after them (the next id). A document that the row's start
// cuts — a document longer than S always is — is the part the row holds, a document of its own from
// position 0: so restarted positions are always < S (learned positions need no more than the sequence).
// doc_ids (row_tokens): document of each input token, 0, 1, 2, … in order.
// positions (row_tokens) or null: position of each token in its document (padding: from 0 after the
// real positions).
void fill_documents(int32_t* doc_ids, int32_t* positions, int64_t row_tokens, std::span<const int32_t> window,
                    int32_t end_of_document);

enum class Sampling : uint32_t {
  random = 0,      // each row starts at a uniform offset in [0, N − S − 1]
  sequential = 1,  // rows at offsets 0, S, 2S, …: every token 1..N−1 is a target exactly once per epoch
  mixture = 2,     // rows of documents from several shards by weight (mixture.h's MixtureLoader)
};

struct DataLoaderConfig {
  int64_t batch_size = 1;         // B
  int64_t seq_tokens = 0;         // S: inputs per row; each row reads S + 1 tokens
  int64_t padded_seq_tokens = 0;  // row length of a Batch, ≥ S; 0 means S (no padding)
  Sampling sampling = Sampling::random;
  uint64_t seed = 0;              // random sampling only
  int32_t pad_token = 0;          // input id at padded positions (its target is kIgnoreIndex)
  bool documents = false;         // rows carry document ids (fill_documents)
  bool restart_positions = false; // and positions restarting at each document (needs documents)
  int32_t end_of_document = -1;   // the EOS that ends documents; −1: the one the shard records
};

struct Batch {
  int64_t batch_size = 0;           // B
  int64_t seq_tokens = 0;           // row length, padded_seq_tokens (or S)
  std::vector<int32_t> inputs;      // (B, seq_tokens)
  std::vector<int32_t> targets;     // (B, seq_tokens), kIgnoreIndex where padded
  std::vector<int32_t> doc_ids;     // (B, seq_tokens) with documents on, else empty
  std::vector<int32_t> positions;   // (B, seq_tokens) with restart_positions, else empty (0..seq_tokens−1)
  std::vector<int64_t> row_offsets; // (B) shard index of each row's first token; −1 for an all-padding row
                                    // and for a mixture's rows (documents of several places)
  int64_t target_tokens = 0;        // targets that count (≠ kIgnoreIndex), for normalising the loss
};

// The loader's cursor. Plain data (memcpy-able into a checkpoint); the last fields record what it
// belongs to, and restore() refuses a cursor saved for other data or shapes.
struct DataLoaderState {
  uint64_t rng_state[4];     // random sampling
  uint64_t batches_served;   // since the start of training
  uint64_t next_window;      // sequential sampling: the next row's window index
  uint64_t epoch;            // sequential sampling: completed passes over the shard
  uint64_t shard_tokens;     // N of the shard it was saved from
  int64_t batch_size;        // B
  int64_t seq_tokens;        // S
  uint32_t sampling;         // Sampling
  uint32_t reserved;         // 0
};
static_assert(std::is_trivial_v<DataLoaderState> && std::is_standard_layout_v<DataLoaderState>,
              "DataLoaderState is saved in checkpoints byte for byte");

// Checks a loader's row settings against a shard it reads (B, S, padding, pad token, documents and the
// end-of-document token: the shard's when config.end_of_document is −1, resolved here); fpdt::Error naming
// the shard. Sampling and the shard's length are each loader's own.
void check_row_config(DataLoaderConfig& config, const ShardReader& shard);

// A batch of config's B rows, its buffers sized (reusing their storage), no row filled yet.
void start_batch(Batch& batch, const DataLoaderConfig& config);
// Row `row` of `batch` from a window of consecutive tokens (fill_inputs, fill_targets and, with documents
// on, fill_documents), starting at shard index `offset` (−1: none); its real positions are counted.
void fill_row(Batch& batch, int64_t row, std::span<const int32_t> window, int64_t offset, const DataLoaderConfig& config);

// Throws fpdt::Error unless a saved cursor is for the data (`data`, named in the error: its token count),
// B, S and sampling of the loader whose cursor is `current`.
void check_same_cursor(const DataLoaderState& saved, const DataLoaderState& current, const std::string& data);

// What a trainer draws its batches from: one shard (DataLoader) or a mixture of them (mixture.h). Its
// cursor is a DataLoaderState, which checkpoints save.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills `batch` (reusing its storage) with the next rows and advances the cursor.
  virtual void next(Batch& batch) = 0;
  virtual DataLoaderState state() const = 0;
  // Continues from a cursor taken by state(); throws fpdt::Error when it was saved for other data or shapes.
  virtual void restore(const DataLoaderState& state) = 0;
};

class DataLoader : public BatchSource {
 public:
  // Throws fpdt::Error for a bad config, a shard with fewer than S + 1 tokens, or documents asked of a
  // shard that records no EOS while end_of_document is −1, or records another EOS than end_of_document.
  DataLoader(ShardReader shard, DataLoaderConfig config);

  // Fills `batch` (reusing its storage) with the next B rows and advances the cursor.
  void next(Batch& batch) override;
  Batch next();

  DataLoaderState state() const override;
  // Continues from a cursor taken by state(); throws fpdt::Error when it was saved for a shard of
  // another length or another B, S or sampling.
  void restore(const DataLoaderState& state) override;

  // Sequential sampling: windows ⌈(N − 1) / S⌉ and batches ⌈windows / B⌉ in one pass over the shard.
  // The last window may be short (padded), and rows past the last window in the last batch are all
  // padding, so a batch never mixes two epochs.
  uint64_t windows_per_epoch() const;
  uint64_t batches_per_epoch() const;

  const ShardReader& shard() const { return shard_; }
  const DataLoaderConfig& config() const { return config_; }

 private:
  ShardReader shard_;
  DataLoaderConfig config_;
  Rng rng_;
  uint64_t batches_served_ = 0;
  uint64_t next_window_ = 0;
  uint64_t epoch_ = 0;
  std::vector<int32_t> window_;  // (S + 1) scratch
};

}  // namespace fpdt::data
