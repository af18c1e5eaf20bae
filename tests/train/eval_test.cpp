// `fpdt eval`'s measurements: the loss by context position equals the training forward's per-token
// losses of the same model on the same tokens (chunked and unchunked, P = 1 and 2 thread ranks, every
// model type, byte and BPE tokenizers); the passkey grid's answers are the training forward's greedy
// predictions; the prompt layout is golden; the forward-only layout keeps only what a forward needs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <set>
#include <tuple>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/data/data_loader.h"
#include "fpdt/data/shard.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/model/transformer.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/train/eval.h"
#include "fpdt/train/trainer.h"
#include "testing.h"

namespace fpdt::train {
namespace {

using testing::TempDir;

const std::string kSource = FPDT_SOURCE_DIR;

const data::Tokenizer& byte_tokenizer() {
  static const data::Tokenizer bytes = data::Tokenizer::bytes();
  return bytes;
}

// A model folder: a Hugging Face golden set (tests/golden/<name>, byte vocabulary) or one written here.
struct Checkpoint {
  std::string folder;
  model::ModelConfig config;
  const data::Tokenizer* tokenizer = &byte_tokenizer();
};

Checkpoint golden_checkpoint(const std::string& name) {
  Checkpoint checkpoint;
  checkpoint.folder = kSource + "/tests/golden/" + name;
  checkpoint.config = model::load_hf_config(checkpoint.folder + "/config.json");
  return checkpoint;
}

// A small Llama with weights N(0, 0.3²) — far from uniform predictions, so positions differ — saved as a
// checkpoint folder with `tokenizer`.
Checkpoint written_checkpoint(const TempDir& dir, const data::Tokenizer& tokenizer, uint64_t seed) {
  Checkpoint checkpoint;
  checkpoint.folder = dir.file("model");
  checkpoint.tokenizer = &tokenizer;
  model::ModelConfig& config = checkpoint.config;
  config = model::preset("llama-tiny");
  config.name = "eval-test";
  config.vocab_size = tokenizer.vocab_size();
  config.hidden = 32;
  config.heads = 4;
  config.kv_heads = 2;
  config.head_dim = 8;
  config.rotary_dim = 8;
  config.ffn_hidden = 48;
  config.layers = 2;
  std::filesystem::create_directories(checkpoint.folder);
  const model::ParameterLayout layout(config);
  model::ParameterBlock params(layout, "test weights");
  Rng rng(seed);
  for (int64_t i = 0; i < params.numel(); ++i) params.data()[i] = static_cast<float>(0.3 * rng.normal());
  model::save_hf_safetensors(config, layout, params, checkpoint.folder + "/model.safetensors");
  testing::write_text_file(checkpoint.folder + "/config.json", model::to_hf_config_json(config));
  tokenizer.save(checkpoint.folder);
  return checkpoint;
}

// <dir>/data/val.bin: `tokens` random ids of the tokenizer, recorded as made by it.
std::string random_shard(const TempDir& dir, const data::Tokenizer& tokenizer, int64_t tokens, Rng& rng) {
  const std::string data = dir.file("data");
  std::filesystem::create_directories(data);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(tokenizer.vocab_size())));
  data::write_shard(data + "/val.bin", ids, static_cast<uint32_t>(tokenizer.vocab_size()),
              data::ShardTokenizer{tokenizer.fingerprint(), static_cast<uint32_t>(tokenizer.end_of_document_id())});
  return data;
}

EvalSettings settings_for(const Checkpoint& checkpoint, const std::string& data, const std::string& out, int64_t S,
                          int ranks, int chunks) {
  EvalSettings s;
  s.checkpoint = checkpoint.folder;
  s.data_dir = data;
  s.out_dir = out;
  s.run.seq_tokens = S;
  s.run.batch_size = 2;
  s.run.sp = ranks;
  s.run.chunks = chunks;
  s.run.threads = 1;
  s.passkey_trials = 0;
  return s;
}

EvalResult evaluate_on_ranks(const EvalSettings& settings) {
  EvalResult result;
  std::mutex mutex;
  comm::run_ranks(settings.run.sp, [&](comm::Communicator& comm) {
    EvalResult mine = evaluate(settings, comm);
    if (comm.rank() != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    result = std::move(mine);
  });
  return result;
}

// The training forward's per-token losses and greedy predictions ((rows, S) each) of the pipeline with
// the same chunks on the same ranks, from forward_backward (the pass a training step runs).
struct TokenResults {
  std::vector<float> losses;
  std::vector<int32_t> predictions;
};
TokenResults training_forward(const Checkpoint& checkpoint, const model::Batch& batch, int ranks, int chunks) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  const size_t n = static_cast<size_t>(batch.B * batch.T);
  TokenResults results{std::vector<float>(n, 0.0f), std::vector<int32_t>(n, 0)};
  std::mutex mutex;
  comm::run_ranks(ranks, [&](comm::Communicator& comm) {
    // As settings_for's eval: a GEMM's cut over the team (and so its rounding) follows the count.
    machine::set_threads(1);
    pipeline::RunSpec pipeline;
    pipeline.chunks = chunks;
    pipeline::FpdtModel model(checkpoint.config, *backend, comm, pipeline);
    model::HfCheckpoint(checkpoint.folder).load(checkpoint.config, model.layout(), model.params());
    std::vector<float> losses(n, 0.0f);
    std::vector<int32_t> predictions(n, -1);
    model.forward_backward(batch, 1.0, pipeline::TokenOutputs{losses.data(), predictions.data()});
    std::lock_guard<std::mutex> lock(mutex);  // each position is written by the rank holding it
    for (size_t i = 0; i < n; ++i)
      if (predictions[i] >= 0) {
        results.losses[i] = losses[i];
        results.predictions[i] = predictions[i];
      }
  });
  return results;
}

// Per-token losses of the whole-sequence model (model/transformer.h, one rank, no chunks), from its
// logits in float64.
std::vector<double> unchunked_losses(const Checkpoint& checkpoint, const model::Batch& batch) {
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  model::Transformer model(checkpoint.config, *backend);
  model::HfCheckpoint(checkpoint.folder).load(checkpoint.config, model.layout(), model.params());
  const int V = checkpoint.config.vocab_size;
  std::vector<float> logits(static_cast<size_t>(batch.B * batch.T * V));
  model.forward(batch, logits.data());
  std::vector<double> losses(static_cast<size_t>(batch.B * batch.T), 0.0);
  for (size_t i = 0; i < losses.size(); ++i) {
    const float* row = logits.data() + i * static_cast<size_t>(V);
    double max = row[0], sum = 0.0;
    for (int v = 0; v < V; ++v) max = std::max(max, static_cast<double>(row[v]));
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - max);
    losses[i] = max + std::log(sum) - row[batch.targets[i]];
  }
  return losses;
}

// The sequences `evaluate` reads: windows k·S .. k·S + S of val.bin, as one batch.
struct Sequences {
  std::vector<int32_t> inputs, targets;
  model::Batch batch;
  Sequences(const std::string& data, int64_t S, int64_t count) {
    const data::ShardReader shard(data + "/val.bin");
    std::vector<int32_t> window(static_cast<size_t>(S + 1));
    inputs.resize(static_cast<size_t>(count * S));
    targets.resize(inputs.size());
    for (int64_t k = 0; k < count; ++k) {
      shard.read(static_cast<uint64_t>(k * S), static_cast<uint64_t>(S + 1), window.data());
      data::fill_inputs(inputs.data() + k * S, S, window, 0);
      data::fill_targets(targets.data() + k * S, S, window);
    }
    batch = model::Batch{static_cast<int>(count), S, inputs.data(), targets.data(), nullptr};
  }
  // Rows [first, first + rows) as a batch.
  model::Batch rows(int64_t first, int64_t rows) const {
    return model::Batch{static_cast<int>(rows), batch.T, inputs.data() + first * batch.T,
                        targets.data() + first * batch.T, nullptr};
  }
};

// The bucket means of per-token losses (count sequences of S).
template <typename T>
std::vector<double> bucket_means(const std::vector<T>& losses, int64_t S, int64_t count) {
  std::vector<double> means;
  for (const PositionBucket& bucket : position_buckets(S)) {
    double sum = 0.0;
    for (int64_t k = 0; k < count; ++k)
      for (int64_t context = bucket.first; context <= bucket.last; ++context)
        sum += static_cast<double>(losses[static_cast<size_t>(k * S + context - 1)]);
    means.push_back(sum / static_cast<double>(count * (bucket.last - bucket.first + 1)));
  }
  return means;
}

// Checks eval's loss buckets on (ranks, chunks) against the training forward's per-token losses of the
// same pipeline, and against the whole-sequence model.
void check_loss_by_position(const Checkpoint& checkpoint, const std::string& data, const TempDir& dir, int64_t S,
                            int64_t count) {
  const Sequences sequences(data, S, count);
  const std::vector<double> unchunked = bucket_means(unchunked_losses(checkpoint, sequences.batch), S, count);
  for (const int ranks : {1, 2})
    for (const int chunks : {1, 4}) {
      SCOPED_TRACE("P = " + std::to_string(ranks) + ", u = " + std::to_string(chunks));
      const EvalResult result = evaluate_on_ranks(settings_for(checkpoint, data, dir.file("out"), S, ranks, chunks));
      ASSERT_EQ(result.sequences, count);
      // The training forward runs the sequences B = 2 at a time, as eval does.
      std::vector<float> training(static_cast<size_t>(count * S));
      for (int64_t first = 0; first < count; first += 2) {
        const int64_t rows = std::min<int64_t>(2, count - first);
        const TokenResults part = training_forward(checkpoint, sequences.rows(first, rows), ranks, chunks);
        std::copy(part.losses.begin(), part.losses.end(), training.begin() + first * S);
      }
      const std::vector<double> want = bucket_means(training, S, count);
      ASSERT_EQ(result.buckets.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_EQ(result.buckets[k].tokens, static_cast<double>(count * (result.buckets[k].positions.last -
                                                                         result.buckets[k].positions.first + 1)));
        // The same arithmetic as the training forward (its per-token losses are eval's, bitwise); only the
        // float64 sums over tokens and ranks run in another order: 1e-6 (the bar) is far above that.
        EXPECT_NEAR(result.buckets[k].mean(), want[k], 1e-6) << "bucket " << k;
        // Against the whole-sequence model: fp32 rounding of another summation order (chunked LSE merges,
        // the all-to-all re-layout), in a mean over the bucket's tokens.
        const double bound = testing::fp32_bound(
            testing::transformer_loss_reordering(checkpoint.config, count * S, S, result.buckets[k].tokens));
        EXPECT_NEAR(result.buckets[k].mean(), unchunked[k], bound * unchunked[k]) << "bucket " << k;
      }
      // Each sequence's own buckets: its tokens' losses alone (the gates' spread over sequences), 1e-6 as above.
      ASSERT_EQ(result.sequence_buckets.size(), static_cast<size_t>(count));
      for (int64_t n = 0; n < count; ++n) {
        const std::vector<float> own(training.begin() + n * S, training.begin() + (n + 1) * S);
        const std::vector<double> own_want = bucket_means(own, S, 1);
        for (size_t k = 0; k < own_want.size(); ++k)
          EXPECT_NEAR(result.sequence_buckets[n][k].mean(), own_want[k], 1e-6) << "sequence " << n << ", bucket " << k;
      }
    }
}

TEST(PositionBuckets, PowersOfTwoUpToTheSequence) {
  auto text = [](int64_t S) {
    std::string out;
    for (const PositionBucket& b : position_buckets(S)) out += std::to_string(b.first) + "-" + std::to_string(b.last) + " ";
    return out;
  };
  EXPECT_EQ(text(1), "1-1 ");
  EXPECT_EQ(text(2), "1-2 ");
  EXPECT_EQ(text(10), "1-1 2-3 4-7 8-10 ");
  EXPECT_EQ(text(16), "1-1 2-3 4-7 8-16 ");  // S itself joins the last bucket
  EXPECT_EQ(text(17), "1-1 2-3 4-7 8-15 16-17 ");
  EXPECT_EQ(position_buckets(int64_t{1} << 20).size(), 20u);
}

TEST(Eval, LossByPositionEqualsTrainingForwardLlama) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  TempDir dir;
  const Checkpoint checkpoint = written_checkpoint(dir, byte_tokenizer(), seed);
  // S = 61: chunks of 16 (P = 1) or 8 per rank (P = 2) leave padding; 3 sequences: the last batch has 1.
  const std::string data = random_shard(dir, *checkpoint.tokenizer, 3 * 61 + 7, rng);
  check_loss_by_position(checkpoint, data, dir, 61, 3);
}

TEST(Eval, LossByPositionEqualsTrainingForwardEveryModelType) {
  const uint64_t seed = testing::fresh_seed();
  for (const char* name : {"llama_tied", "mistral", "qwen2", "gpt2", "yarn"}) {
    SCOPED_TRACE(name);
    Rng rng(seed);
    TempDir dir;
    const Checkpoint checkpoint = golden_checkpoint(name);
    // S = 48: within GPT-2's 64 learned positions, past Mistral's window of 16.
    const std::string data = random_shard(dir, *checkpoint.tokenizer, 2 * 48 + 1, rng);
    check_loss_by_position(checkpoint, data, dir, 48, 2);
  }
}

TEST(Eval, LossByPositionEqualsTrainingForwardBpe) {
  const uint64_t seed = testing::fresh_seed();
  Rng rng(seed);
  TempDir dir;
  const data::Tokenizer bpe = data::Tokenizer::load(kSource + "/tests/data/fixtures/tokenizers/gpt2");
  const Checkpoint checkpoint = written_checkpoint(dir, bpe, seed);
  const std::string data = random_shard(dir, bpe, 2 * 40 + 1, rng);
  check_loss_by_position(checkpoint, data, dir, 40, 2);
}

// The grid's answers: right iff every answer token is the training forward's greedy prediction, the
// answer loss is the mean of its tokens' losses, and the greedy answer is its predictions up to the first
// wrong one; P = 2 ranks, 2 chunks, byte and BPE tokenizers.
TEST(Eval, PasskeyAnswersAreTheGreedyPredictions) {
  const uint64_t seed = testing::fresh_seed();
  for (const bool bpe : {false, true}) {
    SCOPED_TRACE(bpe ? "bpe" : "bytes");
    Rng rng(seed);
    TempDir dir;
    const data::Tokenizer bpe_tokenizer = data::Tokenizer::load(kSource + "/tests/data/fixtures/tokenizers/gpt2");
    const data::Tokenizer& tokenizer = bpe ? bpe_tokenizer : byte_tokenizer();
    const Checkpoint checkpoint = written_checkpoint(dir, tokenizer, seed);
    const std::string data = random_shard(dir, tokenizer, 400, rng);
    const int64_t fixed = passkey_fixed_tokens(tokenizer, "12345");
    EvalSettings s = settings_for(checkpoint, data, dir.file("out"), fixed + 90, 2, 2);
    s.passkey_trials = 2;
    s.passkey_depths = 3;
    s.passkey_lengths = std::to_string(fixed + 40) + "," + std::to_string(fixed + 90);
    s.seed = seed;
    const EvalResult result = evaluate_on_ranks(s);
    ASSERT_EQ(result.passkey.size(), 6u);

    // The same prompts (the numbers come from the seed in grid order), through the training forward.
    Rng numbers(seed);
    size_t cell_index = 0;
    for (const int64_t L : {fixed + 40, fixed + 90})
      for (const double depth : {0.0, 0.5, 1.0}) {
        const PasskeyCell& cell = result.passkey[cell_index++];
        EXPECT_EQ(cell.length_tokens, L);
        EXPECT_EQ(cell.depth, depth);
        int64_t correct = 0;
        double answer_loss = 0.0;
        ASSERT_EQ(cell.answers.size(), 2u);
        for (int trial = 0; trial < 2; ++trial) {
          const std::string number = std::to_string(10000 + numbers.below(90000));
          const PasskeyPrompt prompt = make_passkey_prompt(tokenizer, L, depth, number);
          std::vector<int32_t> targets(static_cast<size_t>(L), data::kIgnoreIndex);
          for (int64_t p = prompt.answer_begin - 1; p + 1 < L; ++p) targets[p] = prompt.tokens[p + 1];
          const TokenResults got = training_forward(
              checkpoint, model::Batch{1, L, prompt.tokens.data(), targets.data(), nullptr}, 2, 2);
          bool right = true;
          double loss = 0.0;
          std::vector<int32_t> greedy;  // the predictions up to the first wrong one
          for (int64_t p = prompt.answer_begin - 1; p + 1 < L; ++p) {
            if (right) greedy.push_back(got.predictions[p]);
            right = right && got.predictions[p] == targets[p];
            loss += got.losses[p];
          }
          correct += right ? 1 : 0;
          EXPECT_EQ(cell.answers[trial].number, number);
          EXPECT_EQ(cell.answers[trial].right, right);
          EXPECT_EQ(cell.answers[trial].greedy, tokenizer.render(greedy)) << "L " << L << " depth " << depth;
          answer_loss += loss / static_cast<double>(L - prompt.answer_begin) / 2;
        }
        EXPECT_EQ(cell.correct, correct) << "L " << L << " depth " << depth;
        // Bitwise the same per-token losses summed in another order: 1e-6.
        EXPECT_NEAR(cell.answer_loss, answer_loss, 1e-6) << "L " << L << " depth " << depth;
      }
  }
}

// Golden: the byte tokenizer's prompts as text and a BPE tokenizer's as ids; and the layout's rules.
TEST(Eval, PasskeyPromptLayoutGolden) {
  const data::Tokenizer& bytes = byte_tokenizer();
  const data::Tokenizer bpe = data::Tokenizer::load(kSource + "/tests/data/fixtures/tokenizers/gpt2");
  std::string text;
  for (const auto& [tokenizer, name, length] :
       {std::tuple{&bytes, "bytes", int64_t{800}}, std::tuple{&bpe, "gpt2 fixture", int64_t{300}}})
    for (const double depth : {0.0, 0.3, 1.0}) {
      const std::string number = "48213";
      const PasskeyPrompt prompt = make_passkey_prompt(*tokenizer, length, depth, number);
      ASSERT_EQ(static_cast<int64_t>(prompt.tokens.size()), length);
      // The needle and the answer are where the prompt says, as the tokenizer encodes them.
      const std::vector<int32_t> answer = tokenizer->encode(" " + number);
      EXPECT_TRUE(std::equal(answer.begin(), answer.end(), prompt.tokens.begin() + prompt.answer_begin));
      EXPECT_EQ(prompt.answer_begin + static_cast<int64_t>(answer.size()), length);
      const std::vector<int32_t> needle = tokenizer->encode("The secret number is " + number);
      EXPECT_TRUE(std::equal(needle.begin(), needle.end(), prompt.tokens.begin() + prompt.needle_begin));
      text += std::string("---- ") + name + ", length " + std::to_string(length) + ", depth " +
              std::to_string(depth).substr(0, 4) + ": needle at " + std::to_string(prompt.needle_begin) +
              ", answer at " + std::to_string(prompt.answer_begin) + "\n";
      if (tokenizer == &bytes) {
        text += tokenizer->decode(prompt.tokens) + "\n";
      } else {
        for (const int32_t id : prompt.tokens) text += std::to_string(id) + " ";
        text += "\n";
      }
    }
  testing::expect_golden(kSource + "/tests/train/golden/passkey_prompts.txt", text);

  const std::string message = testing::error_message([&] { make_passkey_prompt(bytes, 50, 0.5, "48213"); });
  testing::expect_contains(message, {"[eval]", "50 tokens is shorter than its fixed parts", "at least"});
}

// What a forward-only layout keeps (memory_layout.h): exactly the buffers and store arrays the forward
// schedule names, at their training sizes; two layers' inputs and one layer's k and v, whatever L is.
TEST(Eval, ForwardOnlyLayoutKeepsWhatAForwardNeeds) {
  const model::ModelConfig config = model::preset("llama-demo");
  const int64_t S = 16384, h = config.hidden, kv = config.kv_dim();
  const pipeline::ChunkPlan plan = pipeline::make_chunk_plan(S, 1, 0, 4096, 0);
  const pipeline::HeadSharding sharding = pipeline::make_head_sharding(config.heads, config.kv_heads, 1, 0);
  const pipeline::LayoutShape training = pipeline::layout_shape(config, sharding, plan, 1, config.layers, 4);
  const pipeline::LayoutShape forward = pipeline::layout_shape(config, sharding, plan, 1, config.layers, 4, false, false);
  const pipeline::Schedule schedule =
      pipeline::make_schedule(plan, pipeline::Pass::forward, pipeline::Recompute::none,
                              std::vector<pipeline::BlockMask>(static_cast<size_t>(config.layers),
                                                               pipeline::BlockMask(plan.chunks)));
  std::set<pipeline::Buf> used_buffers;
  std::set<pipeline::Array> used_arrays;
  for (const pipeline::Program& program : schedule.programs)
    for (const pipeline::Step& step : program.steps) {
      for (const pipeline::Buf buffer : step.buffers)
        if (buffer != pipeline::Buf::none) used_buffers.insert(buffer);
      if (step.op == pipeline::Op::fetch || step.op == pipeline::Op::write) used_arrays.insert(step.array);
    }
  // Buffers a step reads implicitly (inputs, the head's scratch, the exchange's) are the forward's too.
  for (const pipeline::Buf buffer :
       {pipeline::Buf::tokens, pipeline::Buf::targets, pipeline::Buf::loss_mask, pipeline::Buf::positions,
        pipeline::Buf::position_ids, pipeline::Buf::q_docs, pipeline::Buf::kv_docs, pipeline::Buf::norm,
        pipeline::Buf::norm_mean, pipeline::Buf::norm_rstd, pipeline::Buf::mlp_norm, pipeline::Buf::mlp_mean,
        pipeline::Buf::mlp_rstd, pipeline::Buf::gate, pipeline::Buf::up, pipeline::Buf::act, pipeline::Buf::pack,
        pipeline::Buf::exchange_rows, pipeline::Buf::logits, pipeline::Buf::losses, pipeline::Buf::logits_lse,
        pipeline::Buf::loss_sums})
    used_buffers.insert(buffer);
  const auto training_buffers = pipeline::chunk_buffers(training), forward_buffers = pipeline::chunk_buffers(forward);
  for (size_t b = 0; b < forward_buffers.size(); ++b)
    EXPECT_EQ(forward_buffers[b].elements, used_buffers.count(forward_buffers[b].id) ? training_buffers[b].elements : 0)
        << forward_buffers[b].name;
  const auto arrays = pipeline::store_arrays(forward);
  for (const pipeline::ArraySpec& array : arrays)
    EXPECT_EQ(array.layers > 0, used_arrays.count(array.id) > 0) << array.name;
  EXPECT_EQ(arrays[static_cast<size_t>(pipeline::Array::x)].layers, 2);
  EXPECT_EQ(arrays[static_cast<size_t>(pipeline::Array::k)].layers, 1);
  EXPECT_EQ(pipeline::store_bytes(forward), static_cast<size_t>(S * (2 * h + 2 * kv) * 4));
}

}  // namespace
}  // namespace fpdt::train
