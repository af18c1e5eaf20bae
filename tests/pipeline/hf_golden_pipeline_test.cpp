// Hugging Face models through FPDT: each golden set of tools/make_hf_golden.py (windows, biases,
// RoPE scaling, GPT-2's scaling flags), loaded as `--init-from` loads it, run by the pipeline with
// 4 chunks per rank on P = 2 thread ranks, gives transformers' loss, and the same gradients as the
// unchunked model on those weights.
#include <gtest/gtest.h>

#include <mutex>

#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "model/hf_golden.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

class HfGoldenPipeline : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGoldenPipeline, FourChunksOnTwoRanksGiveTransformersLoss) {
  const testing::GoldenSet golden(GetParam());
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  const double count = model::counted_targets(golden.batch.targets, nullptr, golden.batch.B * golden.batch.T);

  model::Transformer unchunked(golden.config, *backend);
  golden.load(unchunked.layout(), unchunked.params());
  unchunked.forward_backward(golden.batch);

  RunSpec pipeline;
  pipeline.chunks = 4;  // S = 64 on 2 ranks: chunks of C = 16 global tokens, a window of 16 spans two
  double loss_sum = 0.0, forward_loss_sum = 0.0;
  std::vector<float> grads;
  std::mutex mutex;
  comm::run_ranks(2, [&](comm::Communicator& comm) {
    FpdtModel model(golden.config, *backend, comm, pipeline);
    golden.load(model.layout(), model.params());
    double sums[2] = {model.forward(golden.batch).loss_sum, model.forward_backward(golden.batch, 1.0 / count).loss_sum};
    comm.all_reduce_sum(sums, 2);
    comm.all_reduce_sum(model.grads().data(), static_cast<size_t>(model.grads().numel()));
    if (comm.rank() != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    forward_loss_sum = sums[0];
    loss_sum = sums[1];
    grads.assign(model.grads().data(), model.grads().data() + model.grads().numel());
  });
  // Against transformers' fp32 loss and our unchunked model's fp32 gradients: the same maths summed in
  // another order (LSE merges over chunks, the all-reduce over ranks), bounded by what the model's sums are.
  const int64_t tokens = golden.batch.B * golden.batch.T;
  const double loss_bound = testing::fp32_bound(testing::transformer_loss_reordering(golden.config, tokens, golden.batch.T, count));
  const double grad_bound = testing::fp32_bound(testing::transformer_reordering(golden.config, tokens, golden.batch.T, true));
  const double loss_error = std::abs(loss_sum / count - golden.loss) / golden.loss;
  const double forward_loss_error = std::abs(forward_loss_sum / count - golden.loss) / golden.loss;
  EXPECT_LE(loss_error, loss_bound);
  EXPECT_LE(forward_loss_error, loss_bound);
  const double grad_error = testing::relative_error(
      grads, std::vector<float>(unchunked.grads().data(), unchunked.grads().data() + unchunked.grads().numel()));
  EXPECT_LE(grad_error, grad_bound);
  std::printf("[ error    ] %s: loss %.2e, forward loss %.2e (bound %.2e), gradients against the unchunked model %.2e (bound %.2e)\n",
              GetParam().c_str(), loss_error, forward_loss_error, loss_bound, grad_error, grad_bound);
}

INSTANTIATE_TEST_SUITE_P(Sets, HfGoldenPipeline,
                         ::testing::Values("llama", "llama_tied", "qwen2", "mistral", "llama3", "yarn", "gpt2"));

}  // namespace
}  // namespace fpdt::pipeline
