// The `fpdt` program's commands end to end: --help of each lists its options; tokenize → train →
// inspect → sample on a tiny model; and what a Hugging Face loader needs is in the checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "fpdt/data/tokenizer.h"
#include "fpdt/kernels/cpu/blas_core.h"

#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Commands, EachCommandHasHelpListingItsOptions) {
  const ProgramResult top = run_fpdt("--help");
  EXPECT_EQ(top.exit_status, 0);
  for (const char* command : {"train", "sample", "tokenize", "inspect"}) {
    EXPECT_NE(top.output.find(command), std::string::npos) << top.output;
    const ProgramResult help = run_fpdt(std::string(command) + " --help");
    EXPECT_EQ(help.exit_status, 0) << help.output;
    EXPECT_NE(help.output.find("usage: fpdt " + std::string(command)), std::string::npos) << help.output;
  }
  EXPECT_NE(run_fpdt("train --help").output.find("--resume"), std::string::npos);
  EXPECT_EQ(run_fpdt("frobnicate").exit_status, 2);
}

TEST(Commands, TrainInspectAndSampleATinyModel) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  std::vector<std::string> args = setup.train_args(dir.file("run"), 6);
  args.insert(args.end(), {"--sample-tokens", "20", "--prompt", "the"});
  const ProgramResult trained = run_fpdt(join_args(args));
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  for (const char* expected : {"| model", "validation loss before training", "step     6/6", "end: validation loss",
                               "sample:", "mem "})
    EXPECT_NE(trained.output.find(expected), std::string::npos) << expected << " in\n" << trained.output;

  const ProgramResult inspected = run_fpdt("inspect " + dir.file("run"));
  EXPECT_EQ(inspected.exit_status, 0) << inspected.output;
  for (const char* expected : {"step_6", "\"step\": 6", "model.layers.1.mlp.down_proj.weight", "optimizer-0-of-1.safetensors", "m.1"})
    EXPECT_NE(inspected.output.find(expected), std::string::npos) << expected << " in\n" << inspected.output;
  const ProgramResult shard = run_fpdt("inspect " + setup.data_dir + "/train.bin");
  EXPECT_NE(shard.output.find("token shard version 2"), std::string::npos) << shard.output;
  EXPECT_NE(shard.output.find("separator id 256"), std::string::npos) << shard.output;
  // The checkpoint carries the (byte) tokenizer the shards were made with.
  EXPECT_TRUE(std::filesystem::exists(dir.file("run/step_6/tokenizer.json")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("run/step_6/tokenizer_config.json")));

  const ProgramResult sampled =
      run_fpdt("sample --checkpoint " + dir.file("run") + " --prompt 'the light' --tokens 16");
  EXPECT_EQ(sampled.exit_status, 0) << sampled.output;
  EXPECT_EQ(sampled.output.rfind("the light", 0), 0u) << sampled.output;  // the prompt, then 16 bytes

  // The memory of a generation with its KV cache offloaded: the dry run's peaks are the real run's, to the byte.
  auto peaks = [](const ProgramResult& result) {
    const size_t report = result.output.rfind("\n{\"prompt_tokens\"");
    EXPECT_NE(report, std::string::npos) << result.output;
    const nlohmann::json json = nlohmann::json::parse(result.output.substr(report + 1));
    return std::pair{json["compute_peak_bytes"].get<size_t>(), json["offload_peak_bytes"].get<size_t>()};
  };
  const std::string offloaded = "sample --checkpoint " + dir.file("run") +
                                " --prompt 'the light and the dark' --tokens 40 --ignore-end-of-turn --chunk-tokens 8"
                                " --offload ram";
  const ProgramResult real = run_fpdt(offloaded), dry = run_fpdt(offloaded + " --dry-run");
  ASSERT_EQ(real.exit_status, 0) << real.output;
  ASSERT_EQ(dry.exit_status, 0) << dry.output;
  EXPECT_GT(peaks(real).second, 0u);
  EXPECT_EQ(peaks(dry), peaks(real));

  // The prompt from a file or standard input: the same greedy continuation as from --prompt.
  {
    std::ofstream file(dir.file("prompt.txt"));
    file << "the light";
  }
  const std::string greedy = " --tokens 12 --greedy --ignore-end-of-turn --ids";
  const ProgramResult inline_prompt = run_fpdt("sample --checkpoint " + dir.file("run") + " --prompt 'the light'" + greedy);
  const ProgramResult from_file = run_fpdt("sample --checkpoint " + dir.file("run") + " --prompt-file " +
                                           dir.file("prompt.txt") + greedy);
  const ProgramResult from_stdin = run_command(fpdt_binary() + " sample --checkpoint " + dir.file("run") +
                                               " --prompt-file -" + greedy + " < " + dir.file("prompt.txt"));
  auto ids = [](const ProgramResult& result) {
    const size_t at = result.output.find("\nids:");
    EXPECT_NE(at, std::string::npos) << result.output;
    return result.output.substr(at, result.output.find('\n', at + 1) - at);
  };
  EXPECT_EQ(ids(from_file), ids(inline_prompt));
  EXPECT_EQ(ids(from_stdin), ids(inline_prompt));
  const ProgramResult missing = run_fpdt("sample --checkpoint " + dir.file("run") + " --prompt-file " + dir.file("missing.txt"));
  EXPECT_EQ(missing.exit_status, 1) << missing.output;
  for (const char* part : {"[sample]", "missing.txt", "hint: give a readable text file to --prompt-file"})
    EXPECT_NE(missing.output.find(part), std::string::npos) << part << " in\n" << missing.output;
}

// The process runs OpenBLAS kernels that use the CPU's widest vectors: fpdt restarts itself with
// OPENBLAS_CORETYPE set when OpenBLAS took an older set (blas_core.h), and says so in the config table;
// a kernel set the user chose is kept, and said to be theirs.
TEST(Commands, RunsTheBlasKernelsOfTheCpuUnlessTheUserChoseOthers) {
  const TempDir dir;
  const std::string dry_run = "train --model llama-tiny --seq 64 --dry-run --peak-gflops 1 --threads 1 --out ";
  const ProgramResult chosen = run_fpdt(dry_run + dir.file("chosen"));
  ASSERT_EQ(chosen.exit_status, 0) << chosen.output;
  const size_t row = chosen.output.find("| BLAS kernels");
  ASSERT_NE(row, std::string::npos) << chosen.output;
  const size_t name = chosen.output.find_first_not_of(" |", row + 14);
  const std::string core = chosen.output.substr(name, chosen.output.find_first_of(" |", name) - name);
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && kernels::cpu::blas_kernels_selectable()) {
    EXPECT_GE(kernels::cpu::blas_core_isa(core), kernels::cpu::cpu_isa()) << core << " in\n" << chosen.output;
  }

  // The user's set, in a plain environment and in one inherited from a restarted fpdt (the restart's record
  // of its choice, blas_core.cpp, which this test program also carries on a CPU where it restarted itself).
  for (const std::string inherited : {"", "FPDT_BLAS_CORE_REPLACED=Prescott FPDT_BLAS_CORE_CHOSEN=SkylakeX "}) {
    const std::string out = dir.file(inherited.empty() ? "users" : "users_inherited");
    const ProgramResult users =
        run_command(inherited + "OPENBLAS_CORETYPE=Prescott " + fpdt_binary() + " " + dry_run + out);
    ASSERT_EQ(users.exit_status, 0) << users.output;
    EXPECT_NE(users.output.find("| BLAS kernels           | Prescott (OPENBLAS_CORETYPE)"), std::string::npos)
        << inherited << "\n" << users.output;
  }
}

// `train --dry-run --schedule` prints the step's FPDT schedule, and the table says the chunk plan and
// its padding (S = 100 in chunks of 48: 3 chunks, 44 tokens of padding).
TEST(Commands, DryRunPrintsTheScheduleAndThePadding) {
  const TempDir dir;
  const ProgramResult run = run_fpdt("train --model llama-tiny --seq 100 --chunk-tokens 48 --recompute layer --dry-run "
                                     "--schedule --peak-gflops 1 --threads 1 --out " + dir.file("run"));
  ASSERT_EQ(run.exit_status, 0) << run.output;
  for (const char* expected : {"3 x 48 tokens (48 per rank), padding 44", "FPDT schedule: S 100 tokens (padded to 144)",
                               "recompute layer", "program layer backward", "attention block backward 2,1"})
    EXPECT_NE(run.output.find(expected), std::string::npos) << expected << " in\n" << run.output;
}

// `train --dry-run` lays out what a real step allocates and moves: a step's tier peaks and offload traffic
// (metrics.jsonl) equal the dry run's to the byte, in fp32 and in bf16 (whose store holds the activations
// and dO as bf16 words, with bf16 twins in the arena), offloaded to RAM, with and without recompute; and
// the bf16 store is the smaller.
TEST(Commands, DryRunIsTheRealStepToTheByteInBothPrecisions) {
  const TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  for (const std::string recompute : {"none", "layer"}) {
    int64_t store_fp32 = 0, store_bf16 = 0;
    for (const std::string precision : {"fp32", "bf16"}) {
      SCOPED_TRACE(precision + ", recompute " + recompute);
      const std::string name = precision + "_" + recompute;
      // S = 512 (the last --seq counts): chunks of 2 × 128 rows, so that most store slots are more than one
      // 4 KiB transfer block and the precisions' stores differ.
      auto args = [&](const std::string& out) {
        std::vector<std::string> words = setup.train_args(dir.file(out), 1);
        words.insert(words.end(), {"--chunks", "4", "--offload", "ram", "--recompute", recompute, "--precision",
                                   precision, "--eval-batches", "0", "--seq", "512"});
        return join_args(words);
      };
      const ProgramResult real = run_fpdt(args("run_" + name));
      ASSERT_EQ(real.exit_status, 0) << real.output;
      const std::vector<nlohmann::json> steps = metrics_lines(dir.file("run_" + name) + "/metrics.jsonl");
      ASSERT_EQ(steps.size(), 1u) << real.output;
      const ProgramResult dry = run_fpdt(args("dry_" + name) + " --dry-run");
      ASSERT_EQ(dry.exit_status, 0) << dry.output;
      const nlohmann::json laid_out = nlohmann::json::parse(dry.output.substr(dry.output.rfind("\n{") + 1));
      for (const char* field : {"compute_peak_bytes", "offload_peak_bytes", "offload_read_bytes", "offload_written_bytes"})
        EXPECT_EQ(steps[0].at(field).get<int64_t>(), laid_out.at(field).get<int64_t>()) << field;
      (precision == "fp32" ? store_fp32 : store_bf16) = laid_out.at("offload_peak_bytes").get<int64_t>();
    }
    EXPECT_LT(store_bf16, store_fp32) << "recompute " << recompute;
  }
}

TEST(Commands, TrainsOnVersionOneByteShards) {
  // Shards from before shards recorded their tokenizer (version 1, no tokenizer.json beside them) are
  // byte-tokenizer shards: training runs, and the checkpoint carries the byte tokenizer.
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  for (const char* name : {"train.bin", "val.bin"}) {
    const std::string path = setup.data_dir + "/" + name;
    std::string bytes = read_file(path);
    std::string v1 = bytes.substr(0, 28) + std::string(4, '\0') + bytes.substr(48);
    v1[8] = 1;  // version
    write_text_file(path, v1);
  }
  std::filesystem::remove(setup.data_dir + "/tokenizer.json");
  std::filesystem::remove(setup.data_dir + "/tokenizer_config.json");
  const ProgramResult trained = run_fpdt(join_args(setup.train_args(dir.file("run"), 2)));
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  EXPECT_EQ(read_file(dir.file("run/step_2/tokenizer.json")), data::Tokenizer::bytes().tokenizer_json());
  const std::string inspected = run_fpdt("inspect " + setup.data_dir + "/train.bin").output;
  EXPECT_NE(inspected.find("token shard version 1,"), std::string::npos) << inspected;
  EXPECT_NE(inspected.find("tokenizer not recorded"), std::string::npos) << inspected;
}

TEST(Commands, TokenizeTrainAndSampleWithAHuggingFaceTokenizer) {
  // The Llama-3-style fixture tokenizer (501 ids): shards record it, the checkpoint carries it, and
  // sample encodes the prompt and decodes the ids with it (printed with --ids).
  TempDir dir;
  const std::string tokenizer = std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tokenizers/llama3";
  write_text_file(dir.file("model.json"), R"({"model_type": "llama", "vocab_size": 512, "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})");
  std::string text;
  for (int i = 0; i < 400; ++i) text += "In the beginning God created the heaven and the earth. ";
  write_text_file(dir.file("a.txt"), text);
  write_text_file(dir.file("b.txt"), "Le cœur a ses raisons que la raison ne connaît point. " + text);
  const ProgramResult tokenized = run_fpdt("tokenize --tokenizer " + tokenizer + " --out " + dir.file("data") + " " +
                                           dir.file("a.txt") + " " + dir.file("b.txt"));
  ASSERT_EQ(tokenized.exit_status, 0) << tokenized.output;
  EXPECT_NE(tokenized.output.find("(2 documents, vocabulary 501, separator '<|end_of_text|>' = 1,"), std::string::npos)
      << tokenized.output;
  const ProgramResult trained = run_fpdt("train --model " + dir.file("model.json") + " --data " + dir.file("data") +
                                         " --out " + dir.file("run") + " --steps 2 --batch 2 --seq 32 --eval-batches 1"
                                         " --threads 2 --peak-gflops 100 --sample-tokens 4 --prompt 'In the'");
  ASSERT_EQ(trained.exit_status, 0) << trained.output;
  EXPECT_NE(trained.output.find("sample:\nIn the"), std::string::npos) << trained.output;
  EXPECT_EQ(read_file(dir.file("run/step_2/tokenizer.json")), read_file(tokenizer + "/tokenizer.json"));
  const ProgramResult sampled = run_fpdt("sample --checkpoint " + dir.file("run") +
                                         " --prompt 'In the beginning God' --tokens 12 --ignore-end-of-turn --ids");
  ASSERT_EQ(sampled.exit_status, 0) << sampled.output;
  EXPECT_EQ(sampled.output.rfind("In the beginning God", 0), 0u) << sampled.output;
  const size_t ids_at = sampled.output.find("\nids:");
  ASSERT_NE(ids_at, std::string::npos) << sampled.output;
  int count = 0;
  const size_t ids_end = sampled.output.find('\n', ids_at + 1);  // the report follows the ids' line
  for (size_t i = ids_at + 5; i < std::min(ids_end, sampled.output.size()); ++i) count += sampled.output[i] == ' ';
  const size_t prompt_ids = data::Tokenizer::load(tokenizer).encode("In the beginning God").size();
  EXPECT_EQ(count, static_cast<int>(prompt_ids) + 12) << sampled.output;
}

}  // namespace
}  // namespace fpdt::testing
