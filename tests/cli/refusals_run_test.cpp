// Runs and resumes that fpdt must refuse (or get right) rather than train nonsense: a resume into step
// folders without `latest`, into another model's run (a given --model, a model far too large to lay
// out), to fewer --steps than the run has done or exactly as many; an --init-from model paired with
// shards of another tokenizer; a warmup longer than the run; NaN weights in an --init-from folder;
// --eval-batches 0 without val.bin; an --overwrite that cannot start; a decay that ends before the warmup;
// the ETA and peaks of a huge run stopped after a step; the help's word for 0 and the
// checkpoints kept; a rank with fewer cores than --threads; tasks of Slurm's srun without a PMI. Each refusal is one clear "[module] ...;
// hint: ..." line and exit status 1, never "[internal]", and a refused --resume or --overwrite leaves every
// file of the run folder as it was.
#include <gtest/gtest.h>

#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "fpdt/tensor/safetensors.h"
#include "fpdt_program.h"

namespace fpdt::testing {
namespace {

namespace fs = std::filesystem;

std::string golden(const std::string& set) { return std::string(FPDT_SOURCE_DIR) + "/tests/golden/" + set; }
std::string tokenizer_fixture(const std::string& name) {
  return std::string(FPDT_SOURCE_DIR) + "/tests/data/fixtures/tokenizers/" + name;
}

// Every entry under `dir` by relative path: a file's bytes (so its size too), "<folder>" for a folder.
std::map<std::string, std::string> folder_contents(const std::string& dir) {
  std::map<std::string, std::string> contents;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir)) {
    const std::string name = fs::relative(entry.path(), dir).string();
    contents[name] = entry.is_directory() ? "<folder>" : file_bytes(entry.path().string());
  }
  return contents;
}

void expect_no_internal_error(const ProgramResult& result) {
  EXPECT_EQ(result.output.find("[internal]"), std::string::npos) << result.output;
}

void expect_refused(const ProgramResult& result, std::initializer_list<std::string> parts) {
  expect_one_clear_error(result, parts);
  expect_no_internal_error(result);
}

// A run of two steps with a checkpoint at each (step_1, step_2, latest → step_2).
class RefusedRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    setup_ = std::make_unique<TinySetup>(dir_, fresh_seed());
    run_ = dir_.file("run");
    std::vector<std::string> args = setup_->train_args(run_, 2);
    args.insert(args.end(), {"--save-every", "1"});
    const ProgramResult first = run_fpdt(join_args(args));
    ASSERT_EQ(first.exit_status, 0) << first.output;
    ASSERT_TRUE(fs::is_directory(run_ + "/step_1") && fs::is_directory(run_ + "/step_2")) << first.output;
  }
  // `fpdt train ... --steps <steps> --resume <more>` on the run; a time limit so that a resume that
  // began laying out a large model fails the test instead of stalling it.
  ProgramResult resume(int64_t steps, const std::string& more = "") const {
    std::vector<std::string> args = setup_->train_args(run_, steps);
    args.push_back("--resume");
    return run_fpdt(join_args(args) + more, 120);
  }
  // The refused command leaves the run folder as it was, file by file.
  void expect_refused_keeping_run(const ProgramResult& result, std::initializer_list<std::string> parts,
                             const std::map<std::string, std::string>& before) const {
    expect_refused(result, parts);
    EXPECT_EQ(folder_contents(run_), before) << "the refused resume changed " << run_;
  }
  // `fpdt train ... --overwrite <more>` of a fresh run of the same kind into the run folder.
  ProgramResult overwrite(const std::string& more) const {
    std::vector<std::string> args = setup_->train_args(run_, 2);
    args.push_back("--overwrite");
    return run_fpdt(join_args(args) + more, 120);
  }
  // A copy of the run's step_2 as a Hugging Face folder whose middle tensor starts with a NaN and an Inf;
  // returns that tensor's name.
  std::string make_nan_model(const std::string& folder) const {
    fs::copy(run_ + "/step_2", folder);
    const std::string path = folder + "/model.safetensors";
    SafetensorsReader reader(path);
    const std::string damaged_tensor = reader.names()[reader.names().size() / 2];
    const SafetensorsEntry& entry = reader.entry(damaged_tensor);
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_bytes = 0;
    file.read(reinterpret_cast<char*>(&header_bytes), 8);
    const float values[2] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()};
    file.seekp(static_cast<std::streamoff>(8 + header_bytes + entry.begin_bytes));
    file.write(reinterpret_cast<const char*>(values), sizeof values);
    return damaged_tensor;
  }
  TempDir dir_;
  std::unique_ptr<TinySetup> setup_;
  std::string run_;
};

TEST_F(RefusedRuns, ResumeOfStepFoldersWithoutLatestIsRefused) {
  fs::remove(run_ + "/latest");
  const auto before = folder_contents(run_);
  expect_refused_keeping_run(resume(4), {"[train]", "cannot resume the run in " + run_, "step_1, step_2",
                                    "no 'latest'", "hint:", "echo step_2 > " + run_ + "/latest", "--overwrite"},
                        before);
  // Also when the model comes from the run (no --model given).
  expect_refused_keeping_run(run_fpdt("train --resume --steps 4 --data " + setup_->data_dir + " --out " + run_, 120),
                        {"[train]", "no 'latest'"}, before);
}

TEST_F(RefusedRuns, ResumeWithAnotherGivenModelIsRefusedNamingTheField) {
  const auto before = folder_contents(run_);
  // llama-demo is the default model: given explicitly, it still counts.
  expect_refused_keeping_run(resume(4, " --model llama-demo"),
                        {"[checkpoint]", "step_2 holds a model of another configuration", "hidden_size = 32",
                         "this run's model 256", "hint: leave out --model"},
                        before);
}

TEST_F(RefusedRuns, ResumeWithAHugeModelIsRefusedBeforeAnythingIsLaidOut) {
  const auto before = folder_contents(run_);
  const ProgramResult result = resume(4, " --model llama3-8b");
  expect_refused_keeping_run(result, {"[checkpoint]", "another configuration", "vocab_size = 257", "128256"}, before);
  EXPECT_EQ(result.output.find("GiB"), std::string::npos) << result.output;  // no allocation was tried
  EXPECT_EQ(result.output.find("| model "), std::string::npos) << result.output;  // nor the table printed
}

// A run's precision is its own, as its sequence and batch are: a resume in the other one is refused.
TEST_F(RefusedRuns, ResumeInAnotherPrecisionIsRefused) {
  const auto before = folder_contents(run_);
  expect_refused_keeping_run(resume(4, " --precision bf16"),
                             {"[train]", "cannot resume " + run_ + "/step_2 in --precision bf16: it was trained in \"fp32\"",
                              "hint: resume with --precision fp32, or start a new --out directory"},
                             before);
}

TEST_F(RefusedRuns, ResumeToFewerStepsThanDoneIsRefusedAndToAsManyHasNothingToDo) {
  const auto before = folder_contents(run_);
  expect_refused_keeping_run(resume(1), {"[train]", "cannot resume the run in " + run_ + " to --steps 1",
                                    "step_2, is at step 2 already", "hint: give --steps above 2"},
                        before);
  const ProgramResult complete = resume(2);
  EXPECT_EQ(complete.exit_status, 0) << complete.output;
  EXPECT_NE(complete.output.find("is complete: its latest checkpoint, " + run_ + "/step_2, is step 2 of --steps 2; "
                                 "nothing to train"),
            std::string::npos)
      << complete.output;
  EXPECT_EQ(complete.output.find("training loss"), std::string::npos) << complete.output;
  expect_no_internal_error(complete);
  EXPECT_EQ(folder_contents(run_), before) << "a resume with nothing to train changed " << run_;
}

// A run refused after its folder was made (here: its model states beyond --compute-mem) leaves no empty
// folder behind; a folder that was there before stays.
TEST_F(RefusedRuns, ARefusedRunLeavesNoFolderItMade) {
  std::vector<std::string> args = setup_->train_args(dir_.file("made"), 2);
  args.insert(args.end(), {"--compute-mem", "1KiB"});
  expect_refused(run_fpdt(join_args(args)), {"[memory]", "compute tier", "1.00 KiB limit"});
  EXPECT_FALSE(fs::exists(dir_.file("made")));
  fs::create_directories(dir_.file("there"));
  args = setup_->train_args(dir_.file("there"), 2);
  args.insert(args.end(), {"--compute-mem", "1KiB"});
  expect_refused(run_fpdt(join_args(args)), {"[memory]", "compute tier"});
  EXPECT_TRUE(fs::exists(dir_.file("there")));
}

// A sample the run could not make at its end (--sample-tokens 99999999999: a KV cache of hundreds of TiB;
// an empty prompt) is refused before the first step, naming the option — it trained, saved, then failed
// (issue 45 case 7). An --overwrite so refused leaves the previous run as it was.
TEST_F(RefusedRuns, ASampleTheRunCannotMakeIsRefusedBeforeTheFirstStep) {
  std::vector<std::string> args = setup_->train_args(dir_.file("sampled"), 2);
  args.insert(args.end(), {"--sample-tokens", "99999999999"});
  expect_refused(run_fpdt(join_args(args), 120),
                 {"[generation]", "--sample-tokens 99999999999: the KV cache of a prompt of",
                  "hint: lower --sample-tokens"});
  EXPECT_FALSE(fs::exists(dir_.file("sampled")));
  args = setup_->train_args(dir_.file("sampled"), 2);
  args.insert(args.end(), {"--sample-tokens", "4", "--prompt", ""});
  expect_refused(run_fpdt(join_args(args), 120), {"[train]", "the sample's --prompt is empty", "hint:"});
  EXPECT_FALSE(fs::exists(dir_.file("sampled")));
  const std::map<std::string, std::string> before = folder_contents(run_);
  expect_refused_keeping_run(overwrite(" --sample-tokens 99999999999"), {"--sample-tokens 99999999999"}, before);
}

TEST_F(RefusedRuns, SrunTasksWithoutAProcessManagementInterfaceAreRefused) {
  // `srun -n 2 --mpi=none fpdt train`: each task sees its step's size and no PMI to find the others; alone,
  // each would train the whole run into the same folder. One task is a plain run.
  const std::string clean_env = "env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u MV2_COMM_WORLD_SIZE -u PMIX_RANK ";
  const std::vector<std::string> args = setup_->train_args(dir_.file("srun"), 2);
  expect_refused(run_command(clean_env + "SLURM_STEP_NUM_TASKS=2 " + fpdt_binary() + " " + join_args(args)),
                 {"[comm]", "srun started 2 tasks without a process-management interface", "hint: srun --mpi=pmix"});
  EXPECT_FALSE(fs::exists(dir_.file("srun")));
  const ProgramResult one = run_command(clean_env + "SLURM_STEP_NUM_TASKS=1 " + fpdt_binary() + " " + join_args(args));
  EXPECT_EQ(one.exit_status, 0) << one.output;
}

TEST_F(RefusedRuns, WarmupLongerThanTheRunIsRefused) {
  std::vector<std::string> args = setup_->train_args(dir_.file("warm"), 2);
  args.insert(args.end(), {"--warmup", "1000"});
  // lr 1e-3 over 1000 warmup steps: step 2 at 1e-3 · 2/1000 = 2e-6.
  expect_refused(run_fpdt(join_args(args)), {"[train]", "--warmup 1000 is longer than the run's --steps 2",
                                             "never reach --lr 0.001 (step 2 at 2e-06)", "hint:"});
  EXPECT_FALSE(fs::exists(dir_.file("warm")));
  // A warmup as long as the run reaches --lr at its last step: accepted.
  args.back() = "2";
  const ProgramResult accepted = run_fpdt(join_args(args));
  EXPECT_EQ(accepted.exit_status, 0) << accepted.output;
}

TEST_F(RefusedRuns, DecayEndingBeforeTheWarmupIsRefused) {
  std::vector<std::string> args = setup_->train_args(dir_.file("decay"), 4);
  args.insert(args.end(), {"--warmup", "3", "--decay-steps", "2"});
  expect_refused(run_fpdt(join_args(args)), {"[train]", "--decay-steps 2 is not beyond --warmup 3", "never decay",
                                             "hint: give --decay-steps above --warmup"});
  args.back() = "3";
  expect_refused(run_fpdt(join_args(args)), {"[train]", "--decay-steps 3 is not beyond --warmup 3"});
  EXPECT_FALSE(fs::exists(dir_.file("decay")));
  args.back() = "4";
  const ProgramResult accepted = run_fpdt(join_args(args));
  EXPECT_EQ(accepted.exit_status, 0) << accepted.output;
}

// A run of --steps no one waits for, stopped after one (--stop-after): its ETA is a bound, not a wrapped
// int ("-35791394m-8s"), and its report holds the step's peaks (they were 0).
TEST_F(RefusedRuns, StopAfterReportsThePeaksAndAHugeRunItsEta) {
  std::vector<std::string> args = setup_->train_args(dir_.file("long"), 2);
  args[std::find(args.begin(), args.end(), "--steps") - args.begin() + 1] = "4611686018427387904";
  args.insert(args.end(), {"--stop-after", "1"});
  const ProgramResult result = run_fpdt(join_args(args), 120);
  ASSERT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("step     1/4611686018427387904"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("| ETA over 30,000 years"), std::string::npos) << result.output;
  const nlohmann::json report = nlohmann::json::parse(result.output.substr(result.output.rfind("\n{") + 1));
  EXPECT_GT(report["compute_peak_bytes"].get<int64_t>(), 0) << result.output;
  EXPECT_GT(report["peak_rss_bytes"].get<int64_t>(), 0) << result.output;
}

TEST_F(RefusedRuns, NoValidationNeedsNoValBin) {
  const std::string data = dir_.file("train_only");
  fs::create_directories(data);
  for (const char* file : {"train.bin", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(setup_->data_dir + "/" + file, data + "/" + file);
  std::vector<std::string> args = setup_->train_args(dir_.file("noval"), 2);
  args.insert(args.end(), {"--data", data, "--eval-batches", "0"});
  const ProgramResult result = run_fpdt(join_args(args));
  EXPECT_EQ(result.exit_status, 0) << result.output;
  EXPECT_NE(result.output.find("steps 1..2: training loss"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("validation loss"), std::string::npos) << result.output;
  EXPECT_TRUE(fs::is_directory(dir_.file("noval/step_2")));
  // With validation, the missing val.bin is the error.
  args.back() = "1";
  args.insert(args.end(), {"--out", dir_.file("val")});
  expect_refused(run_fpdt(join_args(args)), {"val.bin"});
}

// --init-from folders: the golden Llama (vocabulary 257, no tokenizer.json: the byte tokenizer's),
// a config of vocabulary 32000 without a tokenizer, and one with the GPT-2 fixture's tokenizer.json.
// Every check comes before the weights are read, so the last two need no weights.
TEST_F(RefusedRuns, InitFromShardsOfAnotherTokenizerIsRefusedNamingBoth) {
  const std::string common = " --steps 1 --batch 1 --seq 32 --eval-batches 1 --threads 2 --peak-gflops 100 --lr 1e-9 --min-lr 0";
  // Shards of the GPT-2 fixture tokenizer for the byte-level golden model.
  write_text_file(dir_.file("text.txt"), std::string(3000, 'a') + " In the beginning God created the heaven.\n");
  const ProgramResult bpe = run_fpdt("tokenize --tokenizer " + tokenizer_fixture("gpt2") + " --val-fraction 0.5 --out " +
                                     dir_.file("bpe") + " " + dir_.file("text.txt"));
  ASSERT_EQ(bpe.exit_status, 0) << bpe.output;
  expect_refused(run_fpdt("train --init-from " + golden("llama") + " --data " + dir_.file("bpe") + " --out " +
                          dir_.file("a") + common),
                 {"[train]", dir_.file("bpe/train.bin") + " was made by tokenizer 0x", "(vocabulary 500)",
                  golden("llama") + "'s model was trained with tokenizer 0x", "(vocabulary 257)",
                  "hint: tokenize the text with the model's own tokenizer"});
  EXPECT_FALSE(fs::exists(dir_.file("a")));

  nlohmann::json config = nlohmann::json::parse(std::ifstream(golden("llama") + "/config.json"));
  config["vocab_size"] = 32000;
  fs::create_directories(dir_.file("big"));
  write_text_file(dir_.file("big/config.json"), config.dump());
  expect_refused(run_fpdt("train --init-from " + dir_.file("big") + " --data " + setup_->data_dir + " --out " +
                          dir_.file("b") + common),
                 {"[train]", dir_.file("big") + " holds no tokenizer.json", "(vocabulary 32000)",
                  setup_->data_dir + "/train.bin", "vocabulary 257", "hint: put the model's tokenizer.json into"});

  config["vocab_size"] = 500;
  fs::create_directories(dir_.file("gpt2"));
  write_text_file(dir_.file("gpt2/config.json"), config.dump());
  fs::copy_file(tokenizer_fixture("gpt2/tokenizer.json"), dir_.file("gpt2/tokenizer.json"));
  expect_refused(run_fpdt("train --init-from " + dir_.file("gpt2") + " --data " + setup_->data_dir + " --out " +
                          dir_.file("c") + common),
                 {"[train]", setup_->data_dir + "/train.bin was made by tokenizer 0x", "(vocabulary 257)",
                  dir_.file("gpt2") + "'s model was trained with tokenizer 0x", "(vocabulary 500)"});
  // The same model folder with its own shards passes the check (and fails later, for want of weights).
  const ProgramResult own = run_fpdt("train --init-from " + dir_.file("gpt2") + " --data " + dir_.file("bpe") +
                                     " --out " + dir_.file("d") + common);
  expect_refused(own, {"[model]", "holds no model.safetensors"});
}

TEST_F(RefusedRuns, NanWeightsOfAnInitFromFolderAreRefusedAtLoadNamingTheTensor) {
  const std::string folder = dir_.file("nan_model");
  const std::string path = folder + "/model.safetensors";
  const std::string damaged_tensor = make_nan_model(folder);
  const ProgramResult result = run_fpdt("train --init-from " + folder + " --data " + setup_->data_dir + " --out " +
                                        dir_.file("nan_run") + " --steps 1 --batch 1 --seq 32 --threads 2 --peak-gflops 100");
  expect_refused(result, {"[model]", path + ": tensor '" + damaged_tensor + "' holds 1 NaN and 1 Inf", "hint:"});
  EXPECT_EQ(result.output.find("step "), std::string::npos) << result.output;  // no step ran
  EXPECT_EQ(result.output.find("not finite"), std::string::npos) << result.output;
  // `sample` reads the folder the same way.
  expect_refused(run_fpdt("sample --checkpoint " + folder + " --tokens 2"), {"[model]", damaged_tensor, "NaN"});
}

// --overwrite deletes the previous run only once the new one can start: a compute budget too small for
// the model states, an --init-from folder with NaN weights and a --trace path that is a folder are each
// refused with the run folder as it was (an offload folder on a read-only file system: below).
TEST_F(RefusedRuns, OverwriteThatIsRefusedLeavesThePreviousRun) {
  const auto before = folder_contents(run_);
  expect_refused_keeping_run(overwrite(" --compute-mem 1KiB"),
                             {"[memory]", "compute tier", "model states", "1.00 KiB limit", "hint:"}, before);
  const std::string damaged_tensor = make_nan_model(dir_.file("nan_model"));
  expect_refused_keeping_run(run_fpdt("train --init-from " + dir_.file("nan_model") + " --data " + setup_->data_dir +
                                          " --out " + run_ + " --overwrite --steps 1 --batch 1 --seq 32 --threads 2 "
                                          "--peak-gflops 100",
                                      120),
                             {"[model]", "tensor '" + damaged_tensor + "' holds 1 NaN and 1 Inf"}, before);
  fs::create_directory(dir_.file("traces"));
  expect_refused_keeping_run(overwrite(" --trace " + dir_.file("traces")),
                             {"[train]", "--trace " + dir_.file("traces") + " is a folder",
                              "hint: give a file name, e.g. --trace " + dir_.file("traces") + "/trace.json"},
                             before);
  expect_refused_keeping_run(overwrite(" --trace " + dir_.file("nowhere/trace.json")),
                             {"[train]", "its folder " + dir_.file("nowhere") + " does not exist"}, before);
  // The same overwrite with nothing to refuse replaces the run.
  const ProgramResult replaced = overwrite(" --trace " + dir_.file("traces/trace.json"));
  EXPECT_EQ(replaced.exit_status, 0) << replaced.output;
  EXPECT_NE(replaced.output.find("--overwrite: deleted the previous run"), std::string::npos) << replaced.output;
  EXPECT_TRUE(fs::is_regular_file(dir_.file("traces/trace.json")));
}

TEST_F(RefusedRuns, OverwriteWithAnOffloadFolderOnAReadOnlyFileSystemLeavesThePreviousRun) {
  // Not root: no mount namespace can be made. CI runs as root, where this test must run, not skip.
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a read-only tmpfs in a mount namespace";
  const auto before = folder_contents(run_);
  fs::create_directory(dir_.file("ro"));
  std::vector<std::string> args = setup_->train_args(run_, 2);
  args.insert(args.end(), {"--overwrite", "--offload", "disk:" + dir_.file("ro")});
  const ProgramResult result =
      run_on_read_only_folder(dir_.file("ro"), "timeout -s KILL 120 " + fpdt_binary() + " " + join_args(args));
  ASSERT_EQ(result.output.find("MOUNT-FAILED"), std::string::npos) << result.output;
  expect_refused_keeping_run(result, {"[offload]", "cannot create an offload file in " + dir_.file("ro"),
                                      "Read-only file system"},
                             before);
}

// What 0 means and how many checkpoints are kept, in every command's help.
// --batch's default (8, the demo model's) with a model from --init-from is said, with the way to one
// sequence (it planned 8 x 64K tokens without a word: issue 45 case 7); a --batch given is not remarked on.
TEST(RefusalsDefaults, InitFromWithTheDefaultBatchSaysSo) {
  const std::string llama = std::string(FPDT_SOURCE_DIR) + "/tests/golden/llama";
  const ProgramResult defaulted = run_fpdt("train --init-from " + llama + " --seq 1K --threads 1 --dry-run", 120);
  ASSERT_EQ(defaulted.exit_status, 0) << defaulted.output;
  EXPECT_NE(defaulted.output.find("note: --batch 8 (the default, sized for the demo model): 8 sequences of 1024 "
                                  "tokens a micro-batch; give --batch 1"),
            std::string::npos)
      << defaulted.output;
  const ProgramResult given =
      run_fpdt("train --init-from " + llama + " --seq 1K --threads 1 --batch 8 --dry-run", 120);
  ASSERT_EQ(given.exit_status, 0) << given.output;
  EXPECT_EQ(given.output.find("note: --batch"), std::string::npos) << given.output;
}

TEST(RefusalsHelp, HelpSaysWhatZeroMeansAndWhatIsKept) {
  const ProgramResult train = run_fpdt("train --help");
  EXPECT_EQ(train.exit_status, 0) << train.output;
  expect_contains(train.output, {"--threads N", "(0: all cores) [0]", "(the newest two are kept)",
                                 "--save-every N", "only the newest two checkpoints are kept (0: only at the end) [100]",
                                 "--stop-after N", "(0: off) [0]", "--eval-batches N", "(0: no validation"});
  const ProgramResult sample = run_fpdt("sample --help");
  expect_contains(sample.output, {"--top-k K", "(0: all)", "--threads N", "(0: all cores)"});
  const ProgramResult eval = run_fpdt("eval --help");
  expect_contains(eval.output, {"--sequences N", "(0: all)", "--threads N", "(0: all cores)"});
  const ProgramResult plan = run_fpdt("plan --help");
  expect_contains(plan.output, {"--heads N", "(0: the model's)"});
}

// The cores this process may run on.
cpu_set_t own_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  return set;
}

// Run under an affinity of one core (as `taskset -c N` would start it), a run of --threads 2 says so
// in its table, with the fix; with --threads 1 it does not.
TEST(RefusalsCores, FewerCoresThanThreadsAreSaidInTheTable) {
  TempDir dir;
  const TinySetup setup(dir, fresh_seed());
  const cpu_set_t all = own_affinity();
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);  // the child inherits it
  std::vector<std::string> args = setup.train_args(dir.file("two"), 1);  // --threads 2
  const ProgramResult two = run_fpdt(join_args(args));
  args = setup.train_args(dir.file("one"), 1);
  args.insert(args.end(), {"--threads", "1"});
  const ProgramResult one_thread = run_fpdt(join_args(args));
  ASSERT_EQ(::sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(two.exit_status, 0) << two.output;
  expect_contains(two.output, {"| cores per rank         | 1 (CPU affinity): fewer than 2 threads",
                               "widen taskset/numactl/cpuset, or --threads 1"});
  expect_no_internal_error(two);
  EXPECT_EQ(one_thread.exit_status, 0) << one_thread.output;
  expect_contains(one_thread.output, {"| cores per rank         | 1 (CPU affinity) "});
  EXPECT_EQ(one_thread.output.find("fewer than"), std::string::npos) << one_thread.output;
  // Given every core it has, the table says how many (and nothing about too few).
  const ProgramResult free_run = run_fpdt(join_args(setup.train_args(dir.file("free"), 1)) + " --threads 1");
  expect_contains(free_run.output, {"| cores per rank         | " + std::to_string(CPU_COUNT(&all)) + " (CPU affinity)"});
}

}  // namespace
}  // namespace fpdt::testing
