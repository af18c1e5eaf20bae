// The `fpdt` program: train | sample | tokenize | inspect. Each subcommand declares its options in
// one table (options.h). Errors are fpdt::Error: printed once, by the failing rank, exit status 1.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fpdt/base/error.h"
#include "fpdt/base/log.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/model/transformer.h"
#include "fpdt/tensor/safetensors.h"
#include "fpdt/train/checkpoint.h"
#include "fpdt/train/sampler.h"
#include "fpdt/train/shard.h"
#include "fpdt/train/tokenizer.h"
#include "fpdt/train/trainer.h"
#include "options.h"
#include "plan_command.h"

namespace fpdt::cli {
namespace {

namespace fs = std::filesystem;

int command_train(int argc, char** argv, comm::Communicator& world) {
  const train::TrainSettings d;
  OptionTable options("train", "Train a model on token shards (from `fpdt tokenize`), with checkpoints and metrics.");
  options.add("model", "NAME|config.json", d.model, "model preset or Hugging Face config.json")
      .add("data", "DIR", d.data_dir, "folder with train.bin and val.bin")
      .add("out", "DIR", d.out_dir, "run folder: checkpoints, metrics.jsonl")
      .add("backend", "cpu|reference", d.backend, "kernel backend")
      .add("steps", "N", std::to_string(d.steps), "optimizer steps")
      .add("batch", "B", std::to_string(d.batch_size), "sequences per micro-batch")
      .add("seq", "S", std::to_string(d.seq_tokens), "tokens per sequence")
      .add("grad-accum", "N", std::to_string(d.grad_accum), "micro-batches per step")
      .add("lr", "LR", "3e-3", "peak learning rate")
      .add("min-lr", "LR", "3e-4", "learning rate at the end of the cosine decay")
      .add("warmup", "N", "20", "linear warmup steps")
      .add("decay-steps", "N", "0", "cosine decay ends at this step (0: --steps)")
      .add("weight-decay", "W", "0.1", "AdamW decoupled weight decay (matrices and embeddings only)")
      .add("beta1", "B1", "0.9", "AdamW beta1")
      .add("beta2", "B2", "0.95", "AdamW beta2")
      .add("grad-clip", "NORM", "1.0", "max global gradient norm (0: off)")
      .add("eval-every", "N", std::to_string(d.eval_every), "validate every N steps (0: at the end only)")
      .add("eval-batches", "N", std::to_string(d.eval_batches), "validation batches per evaluation")
      .add("save-every", "N", std::to_string(d.save_every), "checkpoint every N steps (0: at the end only)")
      .add("sample-tokens", "N", "0", "generate N tokens at the end")
      .add("prompt", "TEXT", "\\n", "prompt for the sample at the end")
      .flag("resume", "continue from <out>/latest when it exists")
      .add("seed", "N", std::to_string(d.seed), "seed of initialisation and data order")
      .add("threads", "N", "0", "threads (0: all cores)")
      .add("peak-gflops", "G", "0", "peak GFLOP/s for MFU (0: measure)")
      .add("compute-mem", "BYTES", "0", "compute-tier budget, e.g. 2GiB (0: unlimited)")
      .add("sp", "P", "1", "sequence-parallel ranks per sequence (Ulysses)")
      .add("dp", "N", "1", "data-parallel replicas (world = sp x dp ranks)")
      .add("comm-timeout", "SECONDS", "600", "end the job when a rank shows no sign of life for this long")
      .add("mode", "fpdt|ulysses", d.mode, "fpdt: chunked pipeline; ulysses: one chunk, nothing offloaded")
      .add("chunk-tokens", "C", "0", "global tokens per chunk (a multiple of --sp; 0: use --chunks)")
      .add("chunks", "U", "1", "chunks per sequence, when --chunk-tokens is 0")
      .add("offload", "none|ram|disk:DIR", d.offload, "where chunks rest between uses")
      .add("recompute", "none|layer", d.recompute, "layer: keep only layer inputs and re-run each layer")
      .add("offload-mem", "BYTES", "0", "offload-tier budget (0: unlimited)")
      .flag("dry-run", "lay out one step's memory (no arithmetic, no data), print the tier peaks and exit")
      .add("trace", "FILE", "", "write a Chrome trace (compute, copy, communication spans) to FILE")
      .add("stop-after", "N", "0", "exit after N steps of this process, as a preempted job would (0: off)");
  if (!options.parse(argc, argv)) return 0;
  comm::set_deadline_seconds(options.real("comm-timeout"));
  train::TrainSettings s;
  s.model = options.str("model");
  s.data_dir = options.str("data");
  s.out_dir = options.str("out");
  s.backend = options.str("backend");
  s.steps = options.integer("steps");
  s.batch_size = options.integer("batch");
  s.seq_tokens = options.integer("seq");
  s.grad_accum = options.integer("grad-accum");
  s.optimizer.lr = options.real("lr");
  s.optimizer.min_lr = options.real("min-lr");
  s.optimizer.warmup_steps = options.integer("warmup");
  s.optimizer.decay_steps = options.integer("decay-steps") > 0 ? options.integer("decay-steps") : s.steps;
  s.optimizer.weight_decay = options.real("weight-decay");
  s.optimizer.beta1 = options.real("beta1");
  s.optimizer.beta2 = options.real("beta2");
  s.optimizer.grad_clip = options.real("grad-clip");
  s.eval_every = options.integer("eval-every");
  s.eval_batches = options.integer("eval-batches");
  s.save_every = options.integer("save-every");
  s.sample_tokens = options.integer("sample-tokens");
  s.sample_prompt = options.str("prompt") == "\\n" ? "\n" : options.str("prompt");
  s.resume = options.enabled("resume");
  s.seed = static_cast<uint64_t>(options.integer("seed"));
  s.threads = static_cast<int>(options.integer("threads"));
  s.peak_gflops = options.real("peak-gflops");
  s.compute_mem_bytes = options.bytes("compute-mem");
  s.stop_after_steps = options.integer("stop-after");
  s.sp = static_cast<int>(options.integer("sp"));
  s.dp = static_cast<int>(options.integer("dp"));
  s.mode = options.str("mode");
  s.chunk_tokens = options.integer("chunk-tokens");
  s.chunks = static_cast<int>(options.integer("chunks"));
  s.offload = options.str("offload");
  s.recompute = options.str("recompute");
  s.offload_mem_bytes = options.bytes("offload-mem");
  s.dry_run = options.enabled("dry-run");
  s.trace_path = options.str("trace");

  const train::TrainResult result = train::train(s, world);
  if (s.dry_run) {
    // One JSON line per rank 0 for scripts (bench/fpdt_memory.sh), after the human-readable one.
    log::info("dry run: S = " + std::to_string(s.seq_tokens) + ": compute peak " +
              format_bytes(static_cast<double>(result.compute_peak_bytes)) + ", offload peak " +
              format_bytes(static_cast<double>(result.offload_peak_bytes)) + " per rank");
    log::info(nlohmann::json{{"dry_run", true},
                             {"seq", s.seq_tokens},
                             {"compute_peak_bytes", result.compute_peak_bytes},
                             {"offload_peak_bytes", result.offload_peak_bytes}}
                  .dump());
    return 0;
  }
  char line[200];
  if (result.first_val_loss >= 0) {
    std::snprintf(line, sizeof line, "start: validation loss %.4f nats/token", result.first_val_loss);
    log::info(line);
  }
  std::snprintf(line, sizeof line, "steps %lld..%lld: training loss %.4f -> %.4f", static_cast<long long>(result.first_step),
                static_cast<long long>(result.last_step), result.first_loss, result.last_loss);
  log::info(line);
  if (result.last_val_loss >= 0) {
    std::snprintf(line, sizeof line, "end: validation loss %.4f nats/token", result.last_val_loss);
    log::info(line);
  }
  log::info(nlohmann::json{{"compute_peak_bytes", result.compute_peak_bytes},
                           {"offload_peak_bytes", result.offload_peak_bytes},
                           {"peak_rss_bytes", result.peak_rss_bytes},
                           {"last_step", result.last_step},
                           {"last_loss", result.last_loss}}
                .dump());
  if (!result.sample.empty()) log::info("sample:\n" + result.sample);
  return 0;
}

// A run folder (with `latest`) or a step folder → the step folder.
std::string checkpoint_folder(const std::string& path) {
  if (fs::exists(fs::path(path) / "latest")) return train::latest_checkpoint(path);
  if (fs::exists(fs::path(path) / "config.json")) return path;
  throw Error("cli", path + " is neither a run folder (with 'latest') nor a checkpoint folder (with config.json)",
              "pass the --out folder of a training run or one of its step_<N> folders");
}

int command_sample(int argc, char** argv) {
  OptionTable options("sample", "Generate text from a checkpoint with top-k sampling.");
  options.add("checkpoint", "DIR", "runs/demo", "run folder or step folder")
      .add("prompt", "TEXT", "And God said", "prompt text")
      .add("tokens", "N", "300", "tokens to generate")
      .add("context", "N", "256", "context window in tokens")
      .add("temperature", "T", "0.8", "softmax temperature")
      .add("top-k", "K", "40", "sample among the K most likely tokens (0: all)")
      .add("seed", "N", "1", "sampling seed")
      .add("threads", "N", "0", "threads (0: all cores)");
  if (!options.parse(argc, argv)) return 0;
  train::set_threads(static_cast<int>(options.integer("threads")));
  const std::string folder = checkpoint_folder(options.str("checkpoint"));
  const model::ModelConfig config = model::load_hf_config(folder + "/config.json");
  auto backend = kernels::make_backend("cpu");
  model::Transformer model(config, *backend);
  model::load_hf_safetensors(config, model.layout(), model.params(), folder + "/model.safetensors");
  train::ByteTokenizer tokenizer;
  train::SampleSettings settings;
  settings.new_tokens = options.integer("tokens");
  settings.context_tokens = options.integer("context");
  settings.temperature = options.real("temperature");
  settings.top_k = static_cast<int>(options.integer("top-k"));
  Rng rng(static_cast<uint64_t>(options.integer("seed")));
  const auto tokens = train::generate(model, tokenizer.encode(options.str("prompt")), settings, rng);
  std::printf("%s\n", tokenizer.render(tokens).c_str());
  return 0;
}

int command_tokenize(int argc, char** argv) {
  OptionTable options("tokenize", "Tokenize text or FASTA files (bytes) into train.bin and val.bin shards.",
                      "FILE...");
  options.add("out", "DIR", "data/corpus", "output folder (created if missing)")
      .add("val-fraction", "F", "0.05", "fraction of tokens, taken from the end, for validation");
  if (!options.parse(argc, argv)) return 0;
  if (options.positional().empty())
    throw Error("cli", "no input files for fpdt tokenize", "fpdt tokenize --out DIR FILE...");
  fs::create_directories(options.str("out"));
  const train::TokenizeSummary summary =
      train::tokenize_files(options.positional(), options.str("out"), options.real("val-fraction"));
  std::printf("%s: %llu tokens\n%s: %llu tokens\n(%llu documents, vocabulary %d)\n", summary.train_path.c_str(),
              static_cast<unsigned long long>(summary.train_tokens), summary.val_path.c_str(),
              static_cast<unsigned long long>(summary.val_tokens), static_cast<unsigned long long>(summary.documents),
              summary.vocab_size);
  return 0;
}

void print_safetensors(const std::string& path) {
  SafetensorsReader reader(path);
  std::printf("%s\n", path.c_str());
  for (const auto& [key, value] : reader.metadata()) std::printf("  metadata %s = %s\n", key.c_str(), value.c_str());
  int64_t total = 0;
  for (const std::string& name : reader.names()) {
    const SafetensorsEntry& entry = reader.entry(name);
    total += shape_numel(entry.shape);
    std::printf("  %-56s %-5s %s\n", name.c_str(), dtype_name(entry.dtype).c_str(), shape_string(entry.shape).c_str());
  }
  std::printf("  %zu tensors, %lld elements\n", reader.names().size(), static_cast<long long>(total));
}

int command_inspect(int argc, char** argv) {
  OptionTable options("inspect", "Show what a checkpoint, safetensors file or token shard holds.", "PATH");
  if (!options.parse(argc, argv)) return 0;
  if (options.positional().size() != 1) throw Error("cli", "fpdt inspect takes one path", "fpdt inspect PATH");
  const std::string path = options.positional()[0];
  if (fs::is_directory(path)) {
    const std::string folder = checkpoint_folder(path);
    const model::ModelConfig config = model::load_hf_config(folder + "/config.json");
    std::printf("checkpoint %s\n", folder.c_str());
    std::ifstream state_file(folder + "/trainer_state.json");
    if (state_file) {
      std::stringstream text;
      text << state_file.rdbuf();
      std::printf("trainer state:\n%s", text.str().c_str());
    }
    std::printf("model: %s, %d layers, hidden %d, %d/%d heads, vocab %d, %lld parameters\n",
                config.family == model::Family::llama ? "llama" : "gpt", config.layers, config.hidden, config.heads,
                config.kv_heads, config.vocab_size, static_cast<long long>(config.parameter_count()));
    print_safetensors(folder + "/model.safetensors");
    if (fs::exists(folder + "/optimizer.safetensors")) print_safetensors(folder + "/optimizer.safetensors");
    return 0;
  }
  if (path.ends_with(".safetensors")) {
    print_safetensors(path);
    return 0;
  }
  const train::ShardReader shard(path);
  std::printf("%s: token shard version %u, %llu tokens of %u bytes, vocabulary %u\n", path.c_str(),
              shard.header().version, static_cast<unsigned long long>(shard.token_count()), shard.token_width_bytes(),
              shard.vocab_size());
  return 0;
}

int usage(FILE* out) {
  std::fprintf(out,
               "usage: fpdt COMMAND [options]   (fpdt COMMAND --help for its options)\n\n"
               "commands:\n"
               "  train      train a model on token shards, with checkpoints and metrics\n"
               "  sample     generate text from a checkpoint\n"
               "  tokenize   turn text or FASTA files into token shards\n"
               "  inspect    show what a checkpoint, safetensors file or shard holds\n"
               "  plan       predict memory, time and the longest trainable sequence of a configuration\n");
  return out == stdout ? 0 : 2;
}

}  // namespace
}  // namespace fpdt::cli

int main(int argc, char** argv) {
  using namespace fpdt::cli;
  std::unique_ptr<fpdt::comm::Communicator> world;
  try {
    // Under mpirun this is the MPI world (and sets the rank for logging); otherwise one local rank.
    world = fpdt::comm::make_world(&argc, &argv);
  } catch (const fpdt::Error& error) {
    fpdt::log::error(error.what());
    return 1;
  }
  if (argc < 2) return usage(stderr);
  const std::string command = argv[1];
  try {
    if (command == "train") return command_train(argc - 2, argv + 2, *world);
    if (command == "sample") return command_sample(argc - 2, argv + 2);
    if (command == "tokenize") return command_tokenize(argc - 2, argv + 2);
    if (command == "inspect") return command_inspect(argc - 2, argv + 2);
    if (command == "plan") return command_plan(argc - 2, argv + 2);
    if (command == "--help" || command == "-h" || command == "help") return usage(stdout);
    fpdt::log::error("[cli] unknown command '" + command + "'; hint: fpdt --help lists the commands");
    return 2;
  } catch (const fpdt::Error& error) {
    // One rank failing ends every rank at once (the others may wait in a collective): abort prints
    // "rank R: <error>" and takes the job down.
    if (world->size() > 1) world->abort(error.what());
    fpdt::log::error(error.what());
    return 1;
  } catch (const std::exception& error) {
    if (world->size() > 1) world->abort(std::string("[internal] ") + error.what());
    fpdt::log::error(std::string("[internal] ") + error.what());
    return 1;
  }
}
