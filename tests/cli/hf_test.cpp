// `fpdt` with Hugging Face folders: `train --init-from` starts from the folder's weights and writes
// the RoPE overrides of a context extension, the generation token ids and generation_config.json into
// its checkpoints; `train --resume` of such a run takes its model from the checkpoint; `inspect` reads
// any such folder; a refused config field of each model type, a token id outside the vocabulary, or
// --init-from with --resume or --model, is one clear line and exit status 1.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fpdt/model/hf_checkpoint.h"
#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

std::string golden(const std::string& set) { return std::string(FPDT_SOURCE_DIR) + "/tests/golden/" + set; }

// A folder with `set`'s config.json changed by `edit` (no weights: the config fails first).
template <typename Edit>
std::string edited_config(const TempDir& dir, const std::string& set, Edit edit) {
  nlohmann::json config = nlohmann::json::parse(std::ifstream(golden(set) + "/config.json"));
  edit(config);
  const std::string folder = dir.file(set);
  std::filesystem::create_directories(folder);
  write_text_file(folder + "/config.json", config.dump(2));
  return folder;
}

TEST(HfPrograms, ARefusedFieldOfEachTypeIsOneLineAndExitStatusOne) {
  TempDir dir;
  const std::pair<const char*, const char*> refused[] = {
      {"llama", "attention_bias"}, {"mistral", "layer_types"}, {"qwen2", "use_mrope"}, {"gpt2", "add_cross_attention"}};
  for (const auto& [set, field] : refused) {
    SCOPED_TRACE(set);
    const char* key = field;  // clang 14 cannot capture a structured binding
    const std::string folder = edited_config(dir, set, [&](nlohmann::json& config) {
      config[key] = std::string(key) == "layer_types" ? nlohmann::json::array({"full_attention"}) : nlohmann::json(true);
    });
    expect_one_clear_error(run_fpdt("inspect " + folder), {"[model]", "field '" + std::string(field) + "'", "refused"});
    expect_one_clear_error(run_fpdt("train --init-from " + folder + " --dry-run --steps 1 --seq 64 --batch 1"),
                           {"[model]", "field '" + std::string(field) + "'"});
  }
  // rope_type "default" changes nothing: accepted.
  const std::string folder = edited_config(dir, "llama", [](nlohmann::json& config) {
    config["rope_scaling"] = {{"rope_type", "default"}};
  });
  std::filesystem::copy(golden("llama"), folder,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::skip_existing);
  const ProgramResult inspected = run_fpdt("inspect " + folder);
  EXPECT_EQ(inspected.exit_status, 0) << inspected.output;
  EXPECT_NE(inspected.output.find("positions: theta 10000;"), std::string::npos) << inspected.output;
}

// Metadata transformers ignores (an upload's unsloth_version, auto_map's remote code) loads, and is
// listed by inspect and by train's config table; a refused field beside it is still one clear line.
TEST(HfPrograms, FieldsTransformersIgnoresAreListedByInspectAndTrain) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const std::string folder = edited_config(dir, "llama", [](nlohmann::json& config) {
    config["unsloth_version"] = "2024.9";
    config["auto_map"] = {{"AutoModelForCausalLM", "modeling_x.X"}};
  });
  std::filesystem::copy(golden("llama"), folder,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::skip_existing);
  const ProgramResult inspected = run_fpdt("inspect " + folder);
  ASSERT_EQ(inspected.exit_status, 0) << inspected.output;
  expect_contains(inspected.output, {"ignored config fields: auto_map, unsloth_version", "which is not run"});
  const ProgramResult trained =
      run_fpdt("train --init-from " + folder + " --data " + setup.data_dir + " --out " + dir.file("run") +
               " --steps 1 --batch 1 --seq 32 --eval-batches 1 --threads 1 --peak-gflops 100");
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  expect_contains(trained.output, {"ignored config fields", "auto_map, unsloth_version"});
  // The checkpoint states what fpdt read, not what it ignored.
  const nlohmann::json saved = nlohmann::json::parse(std::ifstream(dir.file("run/step_1/config.json")));
  EXPECT_FALSE(saved.contains("unsloth_version"));
  EXPECT_FALSE(saved.contains("auto_map"));

  const std::string refused = edited_config(dir, "qwen2", [](nlohmann::json& config) {
    config["unsloth_version"] = "2024.9";
    config["use_mrope"] = true;
    config["quantization_config"] = {{"quant_method", "gptq"}};
  });
  expect_one_clear_error(run_fpdt("inspect " + refused), {"[model]", "field 'use_mrope'", "field 'quantization_config'"});
}

TEST(HfPrograms, InitFromTrainsFromTheFolderAndSavesTheRopeOverrides) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());  // byte-tokenized text; the golden models' vocabulary is the bytes'
  const std::string common = " --data " + setup.data_dir + " --steps 1 --batch 1 --seq 32 --eval-batches 1 --threads 2 "
                             "--peak-gflops 100 --lr 1e-9 --min-lr 0 --warmup 1 ";
  const ProgramResult result = run_fpdt("train --init-from " + golden("llama_tied") + " --out " + dir.file("run") + common +
                                        "--rope-theta 20000 --rope-scaling '{\"rope_type\": \"linear\", \"factor\": 2}'");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("theta 20000, linear x2"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("weights from " + golden("llama_tied")), std::string::npos) << result.output;

  // The checkpoint's config.json carries the overrides (both RoPE layouts) ...
  const nlohmann::json saved = nlohmann::json::parse(std::ifstream(dir.file("run/step_1/config.json")));
  EXPECT_EQ(saved["rope_theta"], 20000.0);
  EXPECT_EQ(saved["rope_parameters"]["rope_theta"], 20000.0);
  EXPECT_EQ(saved["rope_parameters"]["rope_type"], "linear");
  EXPECT_EQ(saved["rope_scaling"]["factor"], 2.0);
  // ... and its weights are the folder's after one step of lr 1e-9: AdamW moves each by ≤ ~1e-9
  // (lr · (1 + weight decay)); a random initialisation would differ by ~0.1.
  const model::ModelConfig config = model::load_hf_config(dir.file("run/step_1/config.json"));
  const model::ParameterLayout layout(config);
  model::ParameterBlock start(layout, "start"), after(layout, "after");
  model::HfCheckpoint(golden("llama_tied")).load(config, layout, start);
  model::HfCheckpoint(dir.file("run/step_1")).load(config, layout, after);
  double largest = 0.0;
  for (int64_t i = 0; i < start.numel(); ++i) largest = std::max(largest, std::abs(double{start.data()[i]} - after.data()[i]));
  EXPECT_LE(largest, 1e-7);

  expect_one_clear_error(run_fpdt("train --init-from " + golden("llama_tied") + " --out " + dir.file("run") + common + "--resume"),
                         {"[train]", "--init-from and --resume cannot be combined"});
  expect_one_clear_error(run_fpdt("train --init-from " + golden("llama_tied") + " --model llama-tiny --out " + dir.file("r2") + common),
                         {"[train]", "--model llama-tiny would be a second one"});
  expect_one_clear_error(run_fpdt("train --init-from " + golden("gpt2") + " --rope-theta 5 --out " + dir.file("r3") + common),
                         {"[model]", "has learned positions, not RoPE"});
}

// A copy of the golden llama_tied folder (vocabulary 257) whose config.json states Llama 3.1's kind of
// generation ids — one bos id, a list of eos ids, a null pad id — and which has a generation_config.json.
std::string folder_with_token_ids(const TempDir& dir) {
  const std::string folder = edited_config(dir, "llama_tied", [](nlohmann::json& config) {
    config["bos_token_id"] = 200;
    config["eos_token_id"] = {201, 202, 256};
    config["pad_token_id"] = nullptr;
  });
  std::filesystem::copy_file(golden("llama_tied") + "/model.safetensors", folder + "/model.safetensors");
  write_text_file(folder + "/generation_config.json",
                  "{\n  \"bos_token_id\": 200,\n  \"eos_token_id\": [201, 202, 256],\n  \"temperature\": 0.6\n}\n");
  return folder;
}

TEST(HfPrograms, InitFromCheckpointsKeepTheGenerationTokenIdsAndGenerationConfig) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const std::string folder = folder_with_token_ids(dir);
  const ProgramResult result = run_fpdt("train --init-from " + folder + " --out " + dir.file("run") + " --data " +
                                        setup.data_dir + " --steps 1 --batch 1 --seq 32 --eval-batches 1 --threads 2 "
                                        "--peak-gflops 100");
  ASSERT_EQ(result.exit_status, 0) << result.output;
  const nlohmann::json saved = nlohmann::json::parse(std::ifstream(dir.file("run/step_1/config.json")));
  EXPECT_EQ(saved["bos_token_id"], 200);
  EXPECT_EQ(saved["eos_token_id"], nlohmann::json::array({201, 202, 256}));
  EXPECT_TRUE(saved.contains("pad_token_id") && saved["pad_token_id"].is_null()) << saved.dump();
  EXPECT_EQ(file_bytes(dir.file("run/step_1/generation_config.json")), file_bytes(folder + "/generation_config.json"));

  // An id outside the vocabulary (257) is refused before anything runs, naming the field and the file.
  const std::string bad = edited_config(dir, "llama", [](nlohmann::json& config) { config["eos_token_id"] = 128001; });
  expect_one_clear_error(run_fpdt("train --init-from " + bad + " --dry-run --steps 1 --seq 64 --batch 1"),
                         {"[model]", bad + "/config.json", "field 'eos_token_id' = 128001", "vocabulary [0, 257)"});
}

TEST(HfPrograms, ResumeOfAnInitFromRunTakesTheModelFromItsCheckpointAndIsBitwiseTheUninterruptedRun) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const std::string folder = folder_with_token_ids(dir);
  const std::string common = " --data " + setup.data_dir +
                             " --steps 4 --batch 1 --seq 32 --eval-every 0 --eval-batches 1 --save-every 2 --threads 2 "
                             "--peak-gflops 100 --lr 1e-3 --warmup 1 ";
  // RoPE overrides that the resumed run must take from the checkpoint, not from the folder's config.json.
  const std::string rope = "--rope-theta 20000 --rope-scaling '{\"rope_type\": \"linear\", \"factor\": 2}' ";
  const std::string straight = dir.file("straight"), stopped = dir.file("stopped");
  const ProgramResult full = run_fpdt("train --init-from " + folder + " --out " + straight + common + rope);
  ASSERT_EQ(full.exit_status, 0) << full.output;
  const ProgramResult first =
      run_fpdt("train --init-from " + folder + " --out " + stopped + common + rope + "--stop-after 2");
  ASSERT_EQ(first.exit_status, 0) << first.output;
  ASSERT_EQ(logged_steps(stopped + "/metrics.jsonl").size(), 2u);

  // Another model or RoPE than the checkpoint's is refused, naming the first config.json field that differs.
  expect_one_clear_error(run_fpdt("train --resume --out " + stopped + common + "--rope-theta 30000"),
                         {"[checkpoint]", "another configuration", "rope_parameters", "20000", "30000"});
  expect_one_clear_error(run_fpdt("train --resume --out " + stopped + common + "--model llama-tiny"),
                         {"[checkpoint]", "another configuration", "hidden_size = 288"});

  // No --model, no --rope-*: the run's own model.
  const ProgramResult resumed = run_fpdt("train --resume --out " + stopped + common);
  ASSERT_EQ(resumed.exit_status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("model: " + stopped + "/step_2/config.json"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("theta 20000, linear x2"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 2"), std::string::npos) << resumed.output;
  const auto want = logged_steps(straight + "/metrics.jsonl");
  const auto got = logged_steps(stopped + "/metrics.jsonl");
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "step " << i + 1;  // bitwise
  for (const char* file :
       {"model.safetensors", "optimizer-0-of-1.safetensors", "config.json", "generation_config.json"})
    EXPECT_EQ(file_bytes(stopped + "/step_4/" + file), file_bytes(straight + "/step_4/" + file)) << file;
}

}  // namespace
}  // namespace fpdt::testing
