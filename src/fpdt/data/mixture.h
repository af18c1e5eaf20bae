// Data mixtures: training rows drawn from several token shards by weight, each with its own rule on the
// documents it gives (at least / at most L tokens), packed into S + 1 token windows. ProLong and Fu et al.
// train long-context extension on such mixtures: long documents upsampled, short ones mixed in so that the
// short-context skills stay.
//
// The draw, row by row (each row is one source's: a sequence's documents come from one domain, as ProLong
// packs them, so the sources' shares of tokens are their weights):
//   1. a source by weight;
//   2. documents of that source until the row's window is full: each one that obeys the source's length
//      rule, with probability proportional to its tokens (every token of the admitted documents equally
//      likely); a document longer than the room left gives a window of it at a uniform offset;
//   3. inputs, targets and (--doc-mask) document ids of the window, as DataLoader fills them, so document
//      masks break at the packed boundaries (the end-of-document token ends each one).
// All randomness is one Rng, whose state is the cursor (DataLoaderState, sampling = mixture), so a resumed
// run draws what an uninterrupted one would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fpdt/base/random.h"
#include "fpdt/data/data_loader.h"
#include "fpdt/data/shard.h"

namespace fpdt::data {

struct MixtureSource {
  std::string dir;             // token shard folder: its train.bin is drawn from
  double weight = 1.0;         // share of the rows (normalised over the sources)
  int64_t min_doc_tokens = 0;  // documents shorter than this (end-of-document token included) are not drawn; 0: no bound
  int64_t max_doc_tokens = 0;  // nor longer ones; 0: no bound
};

// `--mixture` spelling: "DIR:WEIGHT[:MIN[:MAX]],..." (MIN, MAX in tokens, 4K spelling allowed, 0: no
// bound), e.g. "data/long:0.6:8K,data/short:0.4:0:2K". Throws fpdt::Error naming the source and the part.
std::vector<MixtureSource> parse_mixture(const std::string& spec);
std::string mixture_spelling(const std::vector<MixtureSource>& sources);

// What a loader has drawn since it was built (or restored: counts are not part of the cursor; replay a
// loader from the start to count a whole run's draws).
struct MixtureDraws {
  std::vector<int64_t> rows;        // (sources)
  std::vector<int64_t> tokens;      // (sources) window tokens
  std::vector<int64_t> documents;   // (sources) documents (or windows of documents) packed
  std::vector<int64_t> cut_documents;  // (sources) documents longer than the room left: a window of them
  std::vector<int64_t> length_histogram;  // documents drawn by ⌊log2 tokens⌋ (index 0: 1 token), all sources
};

class MixtureLoader : public BatchSource {
 public:
  // `shards[i]` is sources[i]'s train.bin. Indexes every shard's documents once (one pass over each).
  // Throws fpdt::Error naming the source for: weights that are not finite and positive, a source none of
  // whose documents obey its length rule, a shard without an end-of-document token while its length rule
  // needs documents, min above max, and config errors as DataLoader has them (config.sampling is ignored).
  MixtureLoader(std::vector<ShardReader> shards, std::vector<MixtureSource> sources, DataLoaderConfig config);

  void next(Batch& batch) override;
  DataLoaderState state() const override;
  void restore(const DataLoaderState& state) override;

  const MixtureDraws& draws() const { return draws_; }
  const std::vector<MixtureSource>& sources() const { return sources_; }
  // Documents of source i that its rule admits, and their tokens.
  int64_t admitted_documents(size_t source) const;
  uint64_t admitted_tokens(size_t source) const;

 private:
  struct Document {
    uint64_t begin = 0, tokens = 0;  // in its shard, end-of-document token included
  };
  struct Source {
    ShardReader shard;
    std::vector<Document> documents;    // admitted by the length rule, in shard order
    std::vector<uint64_t> token_ends;   // (documents) running sum of their tokens
  };
  void fill_window(size_t source);
  uint64_t total_tokens() const;

  std::vector<MixtureSource> sources_;
  std::vector<Source> indexed_;
  std::vector<double> cumulative_weight_;  // (sources) normalised, the last one 1
  DataLoaderConfig config_;
  Rng rng_;
  uint64_t batches_served_ = 0;
  std::vector<int32_t> window_;  // (S + 1) scratch
  MixtureDraws draws_;
};

// One ShardReader of each source's train.bin (header checked; the documents index reads every token).
std::vector<ShardReader> open_mixture_shards(const std::vector<MixtureSource>& sources);

}  // namespace fpdt::data
