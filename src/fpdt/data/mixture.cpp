// Data mixtures (see mixture.h): the spelling, the documents index and the draw.
#include "fpdt/data/mixture.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "fpdt/base/error.h"
#include "fpdt/base/options.h"

namespace fpdt::data {

namespace {

constexpr const char* kModule = "data";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

// Documents of a shard, in order: runs of tokens each ended by `end_of_document` (its EOS belongs to it),
// the tail after the last EOS one more; a shard without an EOS (−1) is one document.
template <class Visit>
void for_each_document(const ShardReader& shard, int64_t end_of_document, Visit visit) {
  constexpr uint64_t kBlock = uint64_t{1} << 20;
  std::vector<int32_t> block(static_cast<size_t>(std::min(kBlock, std::max<uint64_t>(shard.token_count(), 1))));
  uint64_t begin = 0;
  for (uint64_t at = 0; at < shard.token_count() && end_of_document >= 0; at += block.size()) {
    const uint64_t count = std::min<uint64_t>(block.size(), shard.token_count() - at);
    shard.read(at, count, block.data());
    for (uint64_t i = 0; i < count; ++i) {
      if (block[static_cast<size_t>(i)] != end_of_document) continue;
      visit(begin, at + i + 1 - begin);
      begin = at + i + 1;
    }
  }
  if (begin < shard.token_count()) visit(begin, shard.token_count() - begin);
}

}  // namespace

std::vector<MixtureSource> parse_mixture(const std::string& spec) {
  const std::string hint = "write --mixture DIR:WEIGHT[:MIN[:MAX]],... e.g. data/long:0.6:8K,data/short:0.4:0:2K";
  std::vector<MixtureSource> sources;
  for (const std::string& item : split(spec, ',')) {
    const std::vector<std::string> parts = split(item, ':');
    if (parts.size() < 2 || parts.size() > 4 || parts[0].empty())
      throw Error(kModule, "--mixture source '" + item + "' is not DIR:WEIGHT[:MIN[:MAX]]", hint);
    MixtureSource source;
    source.dir = parts[0];
    const auto weight = parse_number(parts[1], Unit::plain);
    if (!weight || !(*weight > 0))
      throw Error(kModule, "--mixture source " + source.dir + ": weight '" + parts[1] + "' is not a positive number", hint);
    source.weight = static_cast<double>(*weight);
    for (size_t bound = 2; bound < parts.size(); ++bound) {
      const auto tokens = parse_number(parts[bound], Unit::tokens);
      if (!tokens || *tokens < 0 || *tokens != std::floor(*tokens) || *tokens > 1e15L)
        throw Error(kModule,
                    "--mixture source " + source.dir + ": " + (bound == 2 ? "MIN" : "MAX") + " '" + parts[bound] +
                        "' is not a whole number of tokens",
                    hint);
      (bound == 2 ? source.min_doc_tokens : source.max_doc_tokens) = static_cast<int64_t>(*tokens);
    }
    if (source.max_doc_tokens > 0 && source.min_doc_tokens > source.max_doc_tokens)
      throw Error(kModule,
                  "--mixture source " + source.dir + ": documents of at least " + std::to_string(source.min_doc_tokens) +
                      " and at most " + std::to_string(source.max_doc_tokens) + " tokens: there are none",
                  "give MIN at most MAX (0: no bound)");
    sources.push_back(std::move(source));
  }
  return sources;
}

std::string mixture_spelling(const std::vector<MixtureSource>& sources) {
  std::string text;
  for (const MixtureSource& source : sources) {
    if (!text.empty()) text += ',';
    char weight[32];
    std::snprintf(weight, sizeof weight, "%.17g", source.weight);
    text += source.dir + ':' + weight;
    if (source.min_doc_tokens > 0 || source.max_doc_tokens > 0) text += ':' + std::to_string(source.min_doc_tokens);
    if (source.max_doc_tokens > 0) text += ':' + std::to_string(source.max_doc_tokens);
  }
  return text;
}

std::vector<ShardReader> open_mixture_shards(const std::vector<MixtureSource>& sources) {
  std::vector<ShardReader> shards;
  shards.reserve(sources.size());
  for (const MixtureSource& source : sources)
    shards.emplace_back(source.dir + "/train.bin", ShardCheck::header);
  return shards;
}

MixtureLoader::MixtureLoader(std::vector<ShardReader> shards, std::vector<MixtureSource> sources, DataLoaderConfig config)
    : sources_(std::move(sources)), config_(config), rng_(config.seed) {
  FPDT_CHECK(!sources_.empty() && shards.size() == sources_.size(), kModule,
             "a mixture needs one shard per source, got " + std::to_string(shards.size()) + " for " +
                 std::to_string(sources_.size()) + " sources",
             "");
  config_.sampling = Sampling::mixture;
  double weight_sum = 0.0;
  for (size_t i = 0; i < sources_.size(); ++i) {
    const MixtureSource& rule = sources_[i];
    FPDT_CHECK(std::isfinite(rule.weight) && rule.weight > 0, kModule,
               "mixture source " + rule.dir + " has weight " + std::to_string(rule.weight) + "; weights are positive",
               "give each source a weight above 0");
    DataLoaderConfig checked = config;
    check_row_config(checked, shards[i]);  // every source's ids and end-of-document token fit the rows
    if (i == 0) config_ = checked, config_.sampling = Sampling::mixture;
    FPDT_CHECK(checked.end_of_document == config_.end_of_document, kModule,
               "mixture source " + rule.dir + " ends its documents with token " + std::to_string(checked.end_of_document) +
                   ", source " + sources_[0].dir + " with " + std::to_string(config_.end_of_document),
               "tokenize every source with the same tokenizer");
    const uint32_t recorded = shards[i].tokenizer().end_of_document_id;
    const int64_t end_of_document = config_.end_of_document >= 0 ? config_.end_of_document
                                    : recorded == kNoEndOfDocument ? -1
                                                                   : static_cast<int64_t>(recorded);
    Source source{std::move(shards[i]), {}, {}};
    uint64_t admitted = 0;
    int64_t seen = 0;
    for_each_document(source.shard, end_of_document, [&](uint64_t begin, uint64_t tokens) {
      ++seen;
      const bool long_enough = rule.min_doc_tokens == 0 || tokens >= static_cast<uint64_t>(rule.min_doc_tokens);
      const bool short_enough = rule.max_doc_tokens == 0 || tokens <= static_cast<uint64_t>(rule.max_doc_tokens);
      if (!long_enough || !short_enough || tokens < 2) return;  // a 1-token document predicts nothing
      source.documents.push_back({begin, tokens});
      admitted += tokens;
      source.token_ends.push_back(admitted);
    });
    const int64_t shortest = std::max<int64_t>(rule.min_doc_tokens, 2);
    const std::string rule_text = rule.max_doc_tokens > 0 ? "between " + std::to_string(shortest) + " and " +
                                                                std::to_string(rule.max_doc_tokens) + " tokens"
                                                          : "at least " + std::to_string(shortest) + " tokens";
    FPDT_CHECK(!source.documents.empty(), kModule,
               "mixture source " + rule.dir + ": none of its " + std::to_string(seen) + " documents has " + rule_text +
                   (end_of_document < 0 ? " (its shard records no end-of-document token: it is one document)" : ""),
               "relax the source's MIN/MAX, or tokenize documents that obey it");
    indexed_.push_back(std::move(source));
    weight_sum += rule.weight;
  }
  double running = 0.0;
  for (const MixtureSource& rule : sources_) cumulative_weight_.push_back(running += rule.weight / weight_sum);
  cumulative_weight_.back() = 1.0;
  window_.resize(static_cast<size_t>(config_.seq_tokens) + 1);
  const size_t n = sources_.size();
  draws_ = {std::vector<int64_t>(n), std::vector<int64_t>(n), std::vector<int64_t>(n), std::vector<int64_t>(n),
            std::vector<int64_t>(64)};
}

int64_t MixtureLoader::admitted_documents(size_t source) const {
  return static_cast<int64_t>(indexed_.at(source).documents.size());
}

uint64_t MixtureLoader::admitted_tokens(size_t source) const { return indexed_.at(source).token_ends.back(); }

uint64_t MixtureLoader::total_tokens() const {
  uint64_t total = 0;
  for (const Source& source : indexed_) total += source.shard.token_count();
  return total;
}

// window_ (S + 1) ← documents of `source`, packed: each drawn ∝ its tokens, the last one cut to the room left
// at a uniform offset.
void MixtureLoader::fill_window(size_t source_index) {
  const Source& source = indexed_[source_index];
  const uint64_t window_tokens = window_.size();
  uint64_t filled = 0;
  while (filled < window_tokens) {
    const uint64_t token = rng_.below(source.token_ends.back());
    const size_t index = static_cast<size_t>(
        std::upper_bound(source.token_ends.begin(), source.token_ends.end(), token) - source.token_ends.begin());
    const Document& document = source.documents[index];
    const uint64_t room = window_tokens - filled;
    uint64_t begin = document.begin, tokens = document.tokens;
    if (tokens > room) {
      begin += rng_.below(tokens - room + 1);
      tokens = room;
      ++draws_.cut_documents[source_index];
    }
    source.shard.read(begin, tokens, window_.data() + filled);
    filled += tokens;
    ++draws_.documents[source_index];
    ++draws_.length_histogram[static_cast<size_t>(std::bit_width(document.tokens) - 1)];
  }
}

void MixtureLoader::next(Batch& batch) {
  start_batch(batch, config_);
  for (int64_t row = 0; row < config_.batch_size; ++row) {
    const double pick = rng_.uniform();
    const size_t source = static_cast<size_t>(
        std::upper_bound(cumulative_weight_.begin(), cumulative_weight_.end() - 1, pick) - cumulative_weight_.begin());
    fill_window(source);
    ++draws_.rows[source];
    draws_.tokens[source] += static_cast<int64_t>(window_.size());
    fill_row(batch, row, window_, -1, config_);  // a row of several documents has no one offset
  }
  ++batches_served_;
}

DataLoaderState MixtureLoader::state() const {
  DataLoaderState state{};
  const uint64_t* words = rng_.state();
  std::copy(words, words + 4, state.rng_state);
  state.batches_served = batches_served_;
  state.shard_tokens = total_tokens();
  state.batch_size = config_.batch_size;
  state.seq_tokens = config_.seq_tokens;
  state.sampling = static_cast<uint32_t>(Sampling::mixture);
  return state;
}

void MixtureLoader::restore(const DataLoaderState& state) {
  check_same_cursor(state, this->state(), "the mixture " + mixture_spelling(sources_));
  rng_.set_state(state.rng_state);
  batches_served_ = state.batches_served;
}

}  // namespace fpdt::data
