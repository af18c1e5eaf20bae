// `fpdt` with GGUF files: `convert` writes a Hugging Face folder that loads to exactly the file's
// dequantized weights, config and tokenizer, and never overwrites; `inspect` lists a file's metadata,
// model and tensor types; `train --init-from FILE.gguf` starts from the file's weights, as from the
// folder `convert` writes; a file fpdt does not read is one clear line and exit status 1.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "fpdt/data/tokenizer.h"
#include "fpdt/model/gguf.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt_program.h"
#include "model/gguf_golden.h"

namespace fpdt::testing {
namespace {

TEST(GgufPrograms, ConvertWritesAFolderOfTheFilesWeightsConfigAndTokenizerAndNeverOverwrites) {
  TempDir dir;
  const std::string out = dir.file("llama");
  const ProgramResult result = run_fpdt("convert " + gguf_golden("llama.gguf") + " --out " + out);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(std::filesystem::is_regular_file(out + "/" + file)) << file;
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));

  const model::GgufFile file(gguf_golden("llama.gguf"));
  const model::ModelConfig want = model::gguf_model_config(file);
  const model::ModelConfig config = model::load_hf_config(out + "/config.json");
  const auto difference = model::config_difference(want, config);
  EXPECT_FALSE(difference.has_value()) << difference->field << ": " << difference->saved << " vs " << difference->given;
  const model::ParameterLayout layout(config);
  model::ParameterBlock direct(layout, "direct"), folder(layout, "folder");
  model::load_gguf_weights(file, want, layout, direct);
  model::HfCheckpoint(out).load(config, layout, folder);
  EXPECT_EQ(0, std::memcmp(direct.data(), folder.data(), sizeof(float) * static_cast<size_t>(layout.total_numel())));
  const data::Tokenizer tokenizer = data::Tokenizer::load(out);
  EXPECT_EQ(tokenizer.end_of_document_token(), "<|im_end|>");
  EXPECT_EQ(tokenizer.vocab_size(), config.vocab_size);

  // A second conversion to the same folder is refused, and the folder is left as it was.
  const std::string before = file_bytes(out + "/model.safetensors");
  expect_one_clear_error(run_fpdt("convert " + gguf_golden("qwen2.gguf") + " --out " + out), {"[cli]", out, "exists"});
  EXPECT_EQ(file_bytes(out + "/model.safetensors"), before);
}

TEST(GgufPrograms, InspectListsTheMetadataTheModelAndEveryTensorsType) {
  const ProgramResult result = run_fpdt("inspect " + gguf_golden("qwen2.gguf"));
  ASSERT_EQ(result.exit_status, 0) << result.output;
  for (const char* part : {"GGUF version 3", "metadata general.architecture = \"qwen2\"", "tokenizer.ggml.tokens = [400 strings]",
                           "model: qwen2, 2 layers, hidden 32, 4/2 heads, vocab 400", "positions: theta 1e+06",
                           "blk.0.ffn_down.weight", "Q6_K", "[32, 256]"})
    EXPECT_NE(result.output.find(part), std::string::npos) << part << " not in:\n" << result.output;
}

TEST(GgufPrograms, TrainInitFromAGgufFileStartsWhereItsConvertedFolderStarts) {
  TempDir dir;
  ASSERT_EQ(run_fpdt("convert " + gguf_golden("llama.gguf") + " --out " + dir.file("folder")).exit_status, 0);
  const ProgramResult tokenized = run_fpdt("tokenize --tokenizer " + dir.file("folder") + " --out " + dir.file("data") +
                                           " --val-fraction 0.3 " + gguf_golden("multilingual.txt"));
  ASSERT_EQ(tokenized.exit_status, 0) << tokenized.output;
  const std::string common = " --data " + dir.file("data") + " --steps 1 --batch 1 --seq 32 --eval-batches 1 --threads 2 "
                             "--peak-gflops 100 --seed 5 ";
  const ProgramResult from_file = run_fpdt("train --init-from " + gguf_golden("llama.gguf") + " --out " + dir.file("a") + common);
  const ProgramResult from_folder = run_fpdt("train --init-from " + dir.file("folder") + " --out " + dir.file("b") + common);
  ASSERT_EQ(from_file.exit_status, 0) << from_file.output;
  ASSERT_EQ(from_folder.exit_status, 0) << from_folder.output;
  EXPECT_NE(from_file.output.find("weights from " + gguf_golden("llama.gguf")), std::string::npos) << from_file.output;
  // The same weights, data and seed: the same trained step, bit for bit.
  EXPECT_EQ(checkpoint_weights(dir.file("a/step_1")), checkpoint_weights(dir.file("b/step_1")));
  // The GGUF file itself is a tokenizer for `fpdt tokenize` (what a refusal's hint tells to run): the same
  // shards as its converted folder's tokenizer makes.
  const ProgramResult from_gguf = run_fpdt("tokenize --tokenizer " + gguf_golden("llama.gguf") + " --out " +
                                           dir.file("gguf_data") + " --val-fraction 0.3 " + gguf_golden("multilingual.txt"));
  ASSERT_EQ(from_gguf.exit_status, 0) << from_gguf.output;
  for (const char* shard : {"/train.bin", "/val.bin", "/tokenizer.json"})
    EXPECT_EQ(file_bytes(dir.file("gguf_data") + shard), file_bytes(dir.file("data") + shard)) << shard;
}

TEST(GgufPrograms, AFileFpdtDoesNotReadIsOneClearLine) {
  TempDir dir;
  std::string bytes = file_bytes(gguf_golden("llama.gguf"));
  const uint32_t version = 1;
  std::memcpy(bytes.data() + 4, &version, 4);
  write_text_file(dir.file("v1.gguf"), bytes);
  for (const std::string& command : {"inspect " + dir.file("v1.gguf"), "convert " + dir.file("v1.gguf") + " --out " + dir.file("out"),
                                     "train --init-from " + dir.file("v1.gguf") + " --dry-run --steps 1 --seq 32 --batch 1"}) {
    SCOPED_TRACE(command);
    expect_one_clear_error(run_fpdt(command), {"[gguf]", "v1.gguf", "version 1", "hint:"});
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
}

// Issue 45's bad GGUF files (the gguf fuzz target's seeds, tools/make_gguf_fuzz_seeds.py): non-finite F32,
// Q4_1 and Q8_0 weights, overlapping tensors, a norm epsilon of +inf. `convert` wrote a folder of them (exit
// 0) and `train --init-from` ran a step before blaming it; each is now one clear error before anything is
// written: no folder, no run.
TEST(GgufPrograms, Issue45BadFilesAreRefusedByConvertAndTrainBeforeAnythingIsWritten) {
  TempDir dir;
  const std::string seeds = std::string(FPDT_SOURCE_DIR) + "/fuzz/corpus/gguf/";
  std::string text;
  for (int i = 0; i < 200; ++i) text += "In the beginning God created the heaven and the earth.\n";
  write_text_file(dir.file("text.txt"), text);
  const ProgramResult data = run_fpdt("tokenize --tokenizer " + seeds + "llama.gguf --val-fraction 0.5 --out " +
                                      dir.file("data") + " " + dir.file("text.txt"));
  ASSERT_EQ(data.exit_status, 0) << data.output;
  for (const std::string seed : {"nan-inf-f32", "inf-q4_1", "nan-q8_0", "overlap", "inf-norm-eps"}) {
    SCOPED_TRACE(seed);
    const std::string path = seeds + "issue45-" + seed + ".gguf";
    expect_one_clear_error(run_fpdt("convert " + path + " --out " + dir.file("out"), 60), {path, "hint:"});
    EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
    expect_one_clear_error(run_fpdt("train --init-from " + path + " --data " + dir.file("data") +
                                        " --steps 1 --seq 32 --batch 1 --threads 1 --out " + dir.file("run"),
                                    60),
                           {path, "hint:"});
    EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
  }
}

}  // namespace
}  // namespace fpdt::testing
