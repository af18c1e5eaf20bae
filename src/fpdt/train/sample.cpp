// `fpdt sample` (see sample.h): the options, the checkpoint into a forward-only FPDT pipeline, the
// generation.
#include "fpdt/train/sample.h"

#include <algorithm>
#include <iostream>
#include <iterator>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/machine/process.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/pipeline/run_options.h"
#include "fpdt/tensor/memory.h"
#include "fpdt/train/checkpoint.h"
#include "fpdt/train/rank_agreement.h"
#include "fpdt/train/settings.h"

namespace fpdt::train {

namespace {
constexpr const char* kModule = "sample";

std::string read_prompt(const SampleCommand& s) {
  if (s.prompt_file.empty()) return s.prompt;
  if (s.prompt_file != "-") return read_text_file(s.prompt_file, kModule, "give a readable text file to --prompt-file");
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}
}  // namespace

void declare_sample_options(OptionSet& set, SampleCommand& s) {
  namespace run = pipeline::options;
  set.add("checkpoint", "DIR", "run folder (its latest step), step folder or Hugging Face model folder", s.checkpoint);
  set.add("prompt", "TEXT", "prompt text", s.prompt);
  set.add("prompt-file", "FILE", "read the prompt from FILE instead ('-': standard input)", s.prompt_file);
  set.add("tokens", "N", "tokens to generate (at most: an end-of-turn id ends it sooner)", s.sampling.new_tokens)
      .at_least(0);
  set.add("greedy", "", "take the most likely token each time (no sampling)", s.sampling.greedy);
  set.add("temperature", "T", "softmax temperature of sampling", s.sampling.temperature).above(0);
  set.add("top-k", "K", "sample among the K most likely tokens", s.sampling.top_k).at_least(0).zero_means("all");
  set.add("top-p", "P", "and among the fewest of those whose probabilities sum to P", s.sampling.top_p)
      .above(0)
      .at_most(1);
  set.add("ignore-end-of-turn", "", "generate --tokens tokens whatever the model's end-of-turn ids",
          s.ignore_end_of_turn);
  set.add("seed", "N", "sampling seed", s.seed);
  run::rope(set, s.rope_theta, s.rope_scaling);
  run::forward_run(set, s.run, "cut the prompt into --chunks");
  set.add("ids", "", "also print the token ids (prompt and generated) on a last line", s.print_ids);
  set.add("dry-run", "", "lay out the generation of the prompt and --tokens (no weights, no arithmetic), print the "
                         "tier peaks and exit", s.dry_run);
}

SampleResult sample(const SampleCommand& settings, comm::Communicator& world) {
  SampleCommand s = settings;
  check_as_options(kModule, s, declare_sample_options);
  check_ranks_agree(world, kModule, options_json(kModule, settings, declare_sample_options));
  if (s.run.sp != world.size())
    throw Error(kModule, "--sp " + std::to_string(s.run.sp) + " ranks, but the job has " + std::to_string(world.size()),
                "launch --sp ranks (mpirun -np P fpdt sample --sp P ...)");
  const std::string folder = checkpoint_folder(s.checkpoint);
  model::ModelConfig config = model::load_hf_config(path_in(folder, "config.json"));
  model::override_rope(config, s.rope_theta, s.rope_scaling);
  const data::Tokenizer tokenizer = checkpoint_tokenizer(folder, config.vocab_size);
  SampleResult result;
  // Rank 0's prompt (under mpirun only it has standard input; a file may be on its node alone), everyone's.
  if (world.rank() == 0) result.prompt = tokenizer.encode(read_prompt(s));
  uint64_t prompt_tokens = result.prompt.size();
  world.broadcast(&prompt_tokens, sizeof prompt_tokens, 0);
  result.prompt.resize(static_cast<size_t>(prompt_tokens));
  world.broadcast(result.prompt.data(), sizeof(int32_t) * result.prompt.size(), 0);
  if (result.prompt.empty())
    throw Error(kModule, "the prompt is empty", "give at least one token of prompt (--prompt or --prompt-file)");
  // The generation's own bound, said before the model is laid out for the prompt (whose refusal names
  // --seq, which sample does not have): the prompt and the new tokens but the last take a position each.
  const int64_t new_positions = std::max<int64_t>(s.sampling.new_tokens - 1, 0);
  if (config.learned_positions() && (static_cast<int64_t>(result.prompt.size()) > config.max_positions ||
                                     new_positions > config.max_positions - static_cast<int64_t>(result.prompt.size())))
    throw Error(kModule,
                "a prompt of " + std::to_string(result.prompt.size()) + " tokens and --tokens " +
                    std::to_string(s.sampling.new_tokens) + " need more than the " +
                    std::to_string(config.max_positions) + " learned positions of model '" + config.name + "'",
                "shorten the prompt or lower --tokens");
  if (!s.ignore_end_of_turn) s.sampling.stop_ids = stop_ids(folder, config);
  s.run.seq_tokens = static_cast<int64_t>(result.prompt.size());
  s.run.forward_only = true;
  s.run.offload = pipeline::with_run_folder(s.run.offload, folder);
  check_runnable(kModule, s.run);

  machine::set_threads(s.run.threads);
  if (s.run.compute_mem_bytes > 0)
    MemoryTiers::instance().set_limit(Tier::compute, static_cast<size_t>(s.run.compute_mem_bytes));
  auto backend = kernels::make_backend(s.run.backend);
  pipeline::FpdtModel model(config, *backend, world, s.run);
  auto peaks = [&] {
    result.compute_peak_bytes = MemoryTiers::instance().usage(Tier::compute).peak_bytes;
    result.offload_peak_bytes = MemoryTiers::instance().usage(Tier::offload).peak_bytes;
    result.peak_rss_bytes = machine::peak_rss_bytes();
  };
  if (s.dry_run) {
    model.dry_run_generation(s.run.seq_tokens, std::max<int64_t>(s.sampling.new_tokens - 1, 0));
    peaks();
    return result;
  }
  load_weights(folder, config, model.states());
  result.description = folder + ": " + config.name + " (" + model::describe_rope(config) + "), prompt of " +
                       std::to_string(result.prompt.size()) + " tokens, offload " + pipeline::spelling(s.run.offload) +
                       ", " + pipeline::spelling(s.run.precision) + ", " + std::to_string(world.size()) + " rank(s)";
  Rng rng(s.seed);
  result.generation = generate(model, result.prompt, s.sampling, rng);
  std::vector<int32_t> tokens = result.prompt;
  tokens.insert(tokens.end(), result.generation.tokens.begin(), result.generation.tokens.end());
  result.text = tokenizer.render(tokens);
  peaks();
  return result;
}

}  // namespace fpdt::train
