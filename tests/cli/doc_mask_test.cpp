// --doc-mask end to end in the trainer: on shards of many documents (`fpdt tokenize` puts the
// end-of-document token between them), a run with --doc-mask --doc-positions restart — sp 2 over thread
// ranks, offloaded to disk, recomputed — has the validation loss before training and the first step's
// loss of the unchunked model on the same rows with their documents and restarted positions (which
// tests/train/packed_documents_test.cpp holds to the documents run one by one). The options' bad
// inputs each get one clear error.
#include <gtest/gtest.h>

#include <mutex>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/data/data_loader.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/transformer.h"
#include "fpdt/train/trainer.h"
#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

// 60 documents of 10–150 bytes of words, tokenized into <dir>/data (byte tokenizer: <|eod|> = 256).
std::string write_documents(const TempDir& dir, Rng& rng) {
  const char* words[] = {"in", "the", "beginning", "was", "word", "and", "light", "darkness"};
  std::string inputs;
  for (int d = 0; d < 60; ++d) {
    std::string text;
    const size_t length = 10 + rng.below(140);
    while (text.size() < length) text += std::string(words[rng.below(8)]) + " ";
    const std::string path = dir.file("doc" + std::to_string(d) + ".txt");
    write_text_file(path, text);
    inputs += " " + path;
  }
  const ProgramResult tokenized = run_fpdt("tokenize --out " + dir.file("data") + " --val-fraction 0.25" + inputs);
  EXPECT_EQ(tokenized.exit_status, 0) << tokenized.output;
  return dir.file("data");
}

// The mean loss of `batches` batches of `loader` on the unchunked model, each row with its documents and
// restarted positions.
double unchunked_loss(model::Transformer& model, data::DataLoader& loader, int batches) {
  double loss_sum = 0.0, count = 0.0;
  for (int i = 0; i < batches; ++i) {
    const data::Batch rows = loader.next();
    model::Batch batch{static_cast<int>(rows.batch_size), rows.seq_tokens, rows.inputs.data(), rows.targets.data(),
                       nullptr};
    batch.doc_ids = rows.doc_ids.data();
    batch.positions = rows.positions.data();
    const model::LossStats stats = model.forward(batch);
    loss_sum += stats.loss_sum;
    count += stats.count;
  }
  return loss_sum / count;
}

TEST(DocMask, TrainerLossesAreThoseOfTheDocuments) {
  TempDir dir;
  Rng rng(fresh_seed());
  train::TrainSettings s;
  s.run.model = "gpt-tiny";  // learned positions: restarting them changes the loss
  s.data_dir = write_documents(dir, rng);
  s.out_dir = dir.file("run");
  s.steps = 1;
  s.run.batch_size = 2;
  s.run.seq_tokens = 90;  // ~ 1–9 documents a row, not a multiple of the chunks: padded
  s.eval_batches = 2;
  s.save_every = 0;
  s.run.threads = 1;
  s.peak_gflops = 100;
  s.run.sp = 2;
  s.run.chunks = 3;
  s.run.offload = pipeline::parse_offload("disk");  // in the run folder
  s.run.recompute = pipeline::Recompute::layer;
  s.run.doc_mask = true;
  s.run.doc_positions = pipeline::DocPositions::restart;
  train::TrainResult result;
  std::mutex mutex;
  comm::run_ranks(2, [&](comm::Communicator& world) {
    const train::TrainResult rank_result = train::train(s, world);
    std::lock_guard<std::mutex> lock(mutex);
    if (world.rank() == 0) result = rank_result;
  });

  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  model::Transformer model(model::preset("gpt-tiny"), *backend, s.seed);
  const data::DataLoaderConfig rows{.batch_size = 2, .seq_tokens = 90, .seed = s.seed, .documents = true,
                                     .restart_positions = true, .end_of_document = data::kEndOfDocumentId};
  data::DataLoaderConfig val_rows = rows;
  val_rows.sampling = data::Sampling::sequential;
  data::DataLoader train_loader(data::ShardReader(s.data_dir + "/train.bin"), rows);
  data::DataLoader val_loader(data::ShardReader(s.data_dir + "/val.bin"), val_rows);
  const double want_val = unchunked_loss(model, val_loader, 2), want_step = unchunked_loss(model, train_loader, 1);
  // Chunked, sharded, offloaded and recomputed vs unchunked: fp32 rounding of another summation order,
  // 1e-5 relative (the bar).
  std::printf("[ error    ] validation %.2e, first step %.2e\n",
              std::abs(result.first_val_loss - want_val) / want_val, std::abs(result.first_loss - want_step) / want_step);
  EXPECT_NEAR(result.first_val_loss, want_val, 1e-5 * want_val);
  EXPECT_NEAR(result.first_loss, want_step, 1e-5 * want_step);
}

TEST(DocMask, BadInputGetsOneClearError) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  std::vector<std::string> args = setup.train_args(dir.file("run"), 1);
  const std::string base = join_args(args);
  expect_one_clear_error(run_fpdt(base + "--doc-positions restart"),
                         {"[train]", "--doc-positions restart", "documents are off", "hint: add --doc-mask"});
  expect_one_clear_error(run_fpdt(base + "--doc-mask --doc-positions everywhere"), {"--doc-positions", "everywhere"});

  // Shards whose tokenizer is recorded but whose end-of-document token is not: documents cannot be found.
  const std::string data = dir.file("no_end");
  std::filesystem::create_directories(data);
  const std::vector<int32_t> tokens(400, 'a');
  const data::ShardTokenizer no_end{data::Tokenizer::bytes().fingerprint(), data::kNoEndOfDocument};
  data::write_shard(data + "/train.bin", tokens, 257, no_end);
  data::write_shard(data + "/val.bin", tokens, 257, no_end);
  args[4] = data;  // --data
  expect_one_clear_error(run_fpdt(join_args(args) + "--doc-mask"),
                         {"[train]", data + "/train.bin", "records no token between its documents"});
}

}  // namespace
}  // namespace fpdt::testing
