// The `fpdt` program: train | eval | extend | sample | tokenize | inspect | convert | plan. Each subcommand declares its options
// once, bound to the fields they set (base/options.h; train's in train/settings.h, the ones commands
// share in pipeline/run_options.h). Errors are fpdt::Error: printed once, by the failing rank, exit status 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/log.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/data/shard.h"
#include "fpdt/data/gguf_tokenizer.h"
#include "fpdt/data/tokenize_files.h"
#include "fpdt/data/tokenizer.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/machine/process.h"
#include "fpdt/model/gguf.h"
#include "fpdt/model/gguf_types.h"
#include "fpdt/model/hf_checkpoint.h"
#include "fpdt/model/transformer.h"
#include "fpdt/tensor/safetensors.h"
#include "fpdt/train/checkpoint.h"
#include "fpdt/train/trainer.h"
#include "fpdt/base/options.h"
#include "fpdt/pipeline/run_options.h"
#include "convert_command.h"
#include "eval_command.h"
#include "extend_command.h"
#include "sample_command.h"
#include "plan_command.h"

namespace fpdt::cli {
namespace {

namespace fs = std::filesystem;

int command_train(int argc, char** argv, comm::Communicator& world) {
  train::TrainSettings s;
  OptionSet options("train", "Train a model on token shards (from `fpdt tokenize`), with checkpoints and metrics.");
  train::declare_train_options(options, s);
  if (!options.parse(argc, argv)) return 0;
  comm::set_deadline_seconds(s.comm_timeout_seconds);
  // --batch's default is the demo model's; a model from --init-from would take as many of its sequences
  // without a word (a SmolLM2 dry run at 64K: 8 x 64K tokens, 42 GiB offloaded instead of 5.3).
  if (!s.init_from.empty() && !options.given("batch") && !options.given("resume") && world.rank() == 0)
    log::info("note: --batch " + std::to_string(s.run.batch_size) + " (the default, sized for the demo model): " +
              std::to_string(s.run.batch_size) + " sequences of " + std::to_string(s.run.seq_tokens) +
              " tokens a micro-batch; give --batch 1 to train on one sequence at a time");
  // A test hook, not an option (see train::FaultInjection).
  if (const char* fault = std::getenv("FPDT_TEST_FAULT")) s.fault = train::parse_fault_injection(fault);

  const train::TrainResult result = train::train(s, world);
  if (s.dry_run) {
    // The layout by component, the peaks, then one JSON line per rank 0 for scripts
    // (bench/fpdt_memory.sh).
    log::info("memory of one step, rank 0 of " + std::to_string(s.run.sp * s.run.dp) + " (ZeRO stage " + std::to_string(s.run.zero) +
              "):");
    nlohmann::json components = nlohmann::json::array();
    for (const train::MemoryComponent& component : result.memory) {
      char line[160];
      std::snprintf(line, sizeof line, "  %-44s %-28s %-8s %12s", component.name.c_str(), component.kind.c_str(),
                    tier_name(component.tier), format_bytes(static_cast<double>(component.bytes)).c_str());
      log::info(line);
      components.push_back(
          {{"name", component.name}, {"kind", component.kind}, {"tier", tier_name(component.tier)}, {"bytes", component.bytes}});
    }
    nlohmann::json sp_ranks = nlohmann::json::array();
    if (result.sp_ranks.size() > 1) {
      const train::TrainResult::SpRank& first = result.sp_ranks.front();
      int q_heads = 0;
      for (const train::TrainResult::SpRank& rank : result.sp_ranks) q_heads += rank.layout.q_heads;
      char line[200];
      std::snprintf(line, sizeof line,
                    "per sequence-parallel rank: %d attention heads over %zu ranks, attention imbalance %.3f "
                    "(the most heads of a rank over the mean):",
                    q_heads, result.sp_ranks.size(),
                    static_cast<double>(first.layout.q_heads) * static_cast<double>(result.sp_ranks.size()) / q_heads);
      log::info(line);
      for (const train::TrainResult::SpRank& rank : result.sp_ranks) {
        std::snprintf(line, sizeof line, "  rank %-3d %3d q heads, %3d kv slots: chunk arena %10s, store %10s; peaks %s compute, %s offload",
                      rank.layout.rank, rank.layout.q_heads, rank.layout.kv_slots,
                      format_bytes(static_cast<double>(rank.layout.arena_bytes)).c_str(),
                      format_bytes(static_cast<double>(rank.layout.store_bytes)).c_str(),
                      format_bytes(static_cast<double>(rank.compute_peak_bytes)).c_str(),
                      format_bytes(static_cast<double>(rank.offload_peak_bytes)).c_str());
        log::info(line);
        sp_ranks.push_back({{"rank", rank.layout.rank},
                            {"q_heads", rank.layout.q_heads},
                            {"kv_slots", rank.layout.kv_slots},
                            {"arena_bytes", rank.layout.arena_bytes},
                            {"store_bytes", rank.layout.store_bytes},
                            {"compute_peak_bytes", rank.compute_peak_bytes},
                            {"offload_peak_bytes", rank.offload_peak_bytes}});
      }
    }
    log::info("dry run: S = " + std::to_string(s.run.seq_tokens) + ": compute peak " +
              format_bytes(static_cast<double>(result.compute_peak_bytes)) + ", offload peak " +
              format_bytes(static_cast<double>(result.offload_peak_bytes)) + " per rank; peak RSS " +
              format_bytes(static_cast<double>(result.peak_rss_bytes)));
    const pipeline::OffloadTraffic& traffic = result.offload_per_step;
    const double tokens =
        static_cast<double>(s.run.seq_tokens) * static_cast<double>(s.run.batch_size) * static_cast<double>(s.grad_accum);
    if (traffic.overflow)
      log::info("dry run: offload traffic per step beyond 16 EiB per rank (more bytes than 64 bits count)");
    else
      log::info("dry run: offload traffic per step " + format_bytes(static_cast<double>(traffic.read_bytes)) +
                " read + " + format_bytes(static_cast<double>(traffic.written_bytes)) + " written per rank (" +
                format_bytes((static_cast<double>(traffic.read_bytes) + static_cast<double>(traffic.written_bytes)) /
                             tokens) +
                " per token)" + (s.run.doc_mask ? "; document masks, which depend on the data, skip more" : ""));
    const nlohmann::json no_count;  // null: beyond 64 bits
    log::info(nlohmann::json{{"dry_run", true},
                             {"seq", s.run.seq_tokens},
                             {"compute_peak_bytes", result.compute_peak_bytes},
                             {"offload_peak_bytes", result.offload_peak_bytes},
                             {"offload_read_bytes", traffic.overflow ? no_count : nlohmann::json(traffic.read_bytes)},
                             {"offload_written_bytes", traffic.overflow ? no_count : nlohmann::json(traffic.written_bytes)},
                             {"state_compute_bytes", result.state_compute_bytes},
                             {"state_offload_bytes", result.state_offload_bytes},
                             {"peak_rss_bytes", result.peak_rss_bytes},
                             {"components", components},
                             {"sp_ranks", sp_ranks}}
                  .dump());
    return 0;
  }
  if (result.already_complete) return 0;  // the trainer said so
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
                           {"state_compute_bytes", result.state_compute_bytes},
                           {"state_offload_bytes", result.state_offload_bytes},
                           {"peak_rss_bytes", result.peak_rss_bytes},
                           {"last_step", result.last_step},
                           {"last_loss", result.last_loss},
                           {"skipped_steps", result.skipped_steps},
                           {"preempted", result.preempted_by != 0}}
                .dump());
  if (!result.sample.empty()) log::info("sample:\n" + result.sample);
  return result.preempted_by != 0 ? train::kPreemptedExitStatus : 0;
}

int command_tokenize(int argc, char** argv) {
  std::string out = "data/corpus";
  std::string tokenizer_path = "bytes", end_of_document;
  double val_fraction = 0.05;
  bool overwrite = false;
  OptionSet options("tokenize", "Tokenize text or FASTA files into train.bin and val.bin shards (+ the tokenizer's files).",
                    "FILE...");
  options.add("out", "DIR", "output folder (created if missing)", out);
  options.add("val-fraction", "F", "fraction of tokens, taken from the end, for validation", val_fraction)
      .at_least(0)
      .below(1);
  options.add("tokenizer", "bytes|PATH",
              "bytes, a Hugging Face tokenizer.json (or a folder with one), or a GGUF file (its tokenizer metadata)",
              tokenizer_path);
  options.add("eos-token", "TOKEN", "token between documents (default: the tokenizer's eos_token)", end_of_document);
  options.add("overwrite", "", "replace the shards (and other tokenizer files) that --out already holds", overwrite);
  if (!options.parse(argc, argv)) return 0;
  if (options.positional().empty())
    throw Error("cli", "no input files for fpdt tokenize", "fpdt tokenize --out DIR FILE...");
  if (tokenizer_path == "bytes" && !end_of_document.empty())
    throw Error("cli", "--eos-token applies to a tokenizer.json; the byte tokenizer ends documents with <|eod|>",
                "drop --eos-token, or pass --tokenizer PATH");
  const bool gguf = model::is_gguf_path(tokenizer_path);
  if (gguf && !end_of_document.empty())
    throw Error("cli", "--eos-token applies to a tokenizer.json; a GGUF file's tokenizer ends documents with its eos token",
                "drop --eos-token");
  const data::Tokenizer tokenizer = tokenizer_path == "bytes" ? data::Tokenizer::bytes()
                                    : gguf                   ? data::gguf_tokenizer(model::GgufFile(tokenizer_path))
                                                             : data::Tokenizer::load(tokenizer_path, end_of_document);
  create_folder(out, "tokenize", "output folder");
  const data::TokenizeSummary summary =
      data::tokenize_files(options.positional(), out, val_fraction, tokenizer, overwrite);
  std::printf("%s: %llu tokens\n%s: %llu tokens\n(%llu documents, vocabulary %d, separator '%s' = %d, tokenizer %s)\n",
              summary.train_path.c_str(), static_cast<unsigned long long>(summary.train_tokens),
              summary.val_path.c_str(), static_cast<unsigned long long>(summary.val_tokens),
              static_cast<unsigned long long>(summary.documents), summary.vocab_size,
              tokenizer.end_of_document_token().c_str(), tokenizer.end_of_document_id(),
              data::fingerprint_string(tokenizer.fingerprint()).c_str());
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

// A model's summary, as `inspect` prints it for a checkpoint and a GGUF file alike.
void print_model_summary(const model::ModelConfig& config) {
  std::printf("model: %s, %d layers, hidden %d, %d/%d heads, vocab %d, %lld parameters\n",
              model::model_type_name(config.type).c_str(), config.layers, config.hidden, config.heads, config.kv_heads,
              config.vocab_size, static_cast<long long>(config.parameter_count()));
  std::printf("positions: %s; attention window: %s\n", model::describe_rope(config).c_str(),
              model::describe_window(config).c_str());
}

// A GGUF file: its metadata (arrays summarised), the model it describes and its tensors with their types.
void print_gguf(const std::string& path) {
  const model::GgufFile file(path);
  std::printf("%s: GGUF version %u, %zu metadata entries, %zu tensors\n", path.c_str(), file.version(),
              file.metadata().size(), file.tensors().size());
  for (const auto& [key, value] : file.metadata()) std::printf("  metadata %s = %s\n", key.c_str(), value.describe().c_str());
  const model::ModelConfig config = model::gguf_model_config(file);
  print_model_summary(config);
  std::map<std::string, int> types;
  int64_t total = 0;
  for (const model::GgufTensorInfo& tensor : file.tensors()) {
    const std::string type = model::ggml_type_name(tensor.type).value_or("?");
    ++types[type];
    total += shape_numel(tensor.shape);
    std::printf("  %-40s %-5s %s\n", tensor.name.c_str(), type.c_str(), shape_string(tensor.shape).c_str());
  }
  std::string summary;
  for (const auto& [type, count] : types) summary += (summary.empty() ? "" : ", ") + std::to_string(count) + " " + type;
  std::printf("  %zu tensors (%s), %lld elements\n", file.tensors().size(), summary.c_str(), static_cast<long long>(total));
}

int command_inspect(int argc, char** argv) {
  OptionSet options("inspect", "Show what a checkpoint, safetensors file, GGUF file or token shard holds.", "PATH");
  if (!options.parse(argc, argv)) return 0;
  if (options.positional().size() != 1) throw Error("cli", "fpdt inspect takes one path", "fpdt inspect PATH");
  const std::string path = options.positional()[0];
  // Reading a FIFO or a device would wait for a writer that may never come.
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) throw Error("cli", "cannot open " + path + ": no such file or folder", "check the path");
  if (!fs::is_directory(status) && !fs::is_regular_file(status))
    throw Error("cli", path + " is neither a file nor a folder (a pipe, socket or device)",
                "give a checkpoint folder, a .safetensors or .gguf file or a token shard");
  if (fs::is_directory(status)) {
    const std::string folder = train::checkpoint_folder(path);
    const model::ModelConfig config = model::load_hf_config(path_in(folder, "config.json"));
    std::printf("checkpoint %s\n", folder.c_str());
    const std::string state_path = path_in(folder, "trainer_state.json");
    if (fs::exists(state_path))
      std::printf("trainer state:\n%s",
                  read_text_file(state_path, "cli", "the checkpoint's trainer state must be a file").c_str());
    print_model_summary(config);
    std::printf("ignored config fields: %s\n", model::describe_ignored(config).c_str());
    for (const std::string& file : model::HfCheckpoint(folder).files()) print_safetensors(file);
    for (const std::string& file : train::optimizer_files(folder)) print_safetensors(file);
    return 0;
  }
  if (model::is_gguf_path(path)) {
    print_gguf(path);
    return 0;
  }
  if (path.ends_with(".safetensors")) {
    print_safetensors(path);
    return 0;
  }
  const data::ShardReader shard(path);
  std::printf("%s: token shard version %u, %llu tokens of %u bytes, vocabulary %u, tokenizer %s, separator id %s\n",
              path.c_str(), shard.header().version, static_cast<unsigned long long>(shard.token_count()),
              shard.token_width_bytes(), shard.vocab_size(),
              shard.tokenizer().fingerprint == 0 ? "not recorded"
                                                 : data::fingerprint_string(shard.tokenizer().fingerprint).c_str(),
              shard.tokenizer().end_of_document_id == data::kNoEndOfDocument
                  ? "none"
                  : std::to_string(shard.tokenizer().end_of_document_id).c_str());
  return 0;
}

int usage(FILE* out) {
  std::fprintf(out,
               "usage: fpdt COMMAND [options]   (fpdt COMMAND --help for its options)\n\n"
               "commands:\n"
               "  train      train a model on token shards, with checkpoints and metrics\n"
               "  eval       loss by context position and passkey retrieval of a checkpoint on long sequences\n"
               "  sample     generate text from a checkpoint\n"
               "  extend     extend a model's context by a recipe's stages, gated and reported\n"
               "  tokenize   turn text or FASTA files into token shards\n"
               "  inspect    show what a checkpoint, safetensors or GGUF file or shard holds\n"
               "  convert    turn a GGUF file into a Hugging Face model folder\n"
               "  plan       predict memory, time and the longest trainable sequence of a configuration\n");
  return out == stdout ? 0 : 2;
}

}  // namespace
}  // namespace fpdt::cli

int main(int argc, char** argv) {
  using namespace fpdt::cli;
  // Before MPI or any thread starts: may re-execute this program with OPENBLAS_CORETYPE set.
  fpdt::kernels::cpu::restart_with_matching_blas_core(argv);
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
    if (command == "eval") return command_eval(argc - 2, argv + 2, *world);
    if (command == "extend") return command_extend(argc - 2, argv + 2, *world);
    if (command == "sample") return command_sample(argc - 2, argv + 2, *world);
    if (command == "tokenize") return command_tokenize(argc - 2, argv + 2);
    if (command == "inspect") return command_inspect(argc - 2, argv + 2);
    if (command == "convert") return command_convert(argc - 2, argv + 2);
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
