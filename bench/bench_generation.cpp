// Benchmark of generation through the FPDT pipeline (pipeline/generation.cpp): a prompt of S tokens
// prefilled into the KV cache, then N tokens decoded, against (a) the same pipeline's forward over the
// same S in the same chunks (what eval and training's forward run) and (b) the memory-bandwidth bound of a
// decoded token: the bytes it must read — the KV cache once (every layer's cached k and v up to it, in the
// store's element size) and the weights once (their bf16 working copy in bf16) — over the bandwidth of the
// tier they are read from, measured here in the same process: RAM by a parallel sum over 1 GiB, the disk
// tier by O_DIRECT reads of a 1 GiB file in the offload directory. Random weights (the speed does not depend
// on them); the model a preset or config.json, optionally cut to fewer layers (the cache's bytes per token
// and the work per token scale with them, their ratio does not).
// The LAST line printed is one JSON object.
//   build/bench/bench_generation --model smollm2.json --layers 4 --seq 16384 --chunk-tokens 4096
//       --offload ram --precision bf16 --tokens 16 --threads 2 [--no-forward]
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/random.h"
#include "fpdt/base/timer.h"
#include "fpdt/comm/communicator.h"
#include "fpdt/kernels/backend.h"
#include "fpdt/kernels/cpu/blas_core.h"
#include "fpdt/model/config.h"
#include "fpdt/pipeline/fpdt_model.h"
#include "fpdt/tensor/memory.h"

namespace {

using namespace fpdt;

struct Options {
  std::string model = "llama-demo";
  int layers = 0;  // 0: the model's
  int64_t seq = 16384, chunk_tokens = 4096, tokens = 16;
  std::string offload = "ram", precision = "fp32";
  int threads = 2;
  bool forward = true;  // --no-forward: the prefill and decode only (a long S's forward costs as much again)
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("bench", arg + " needs a value", "");
      return argv[++i];
    };
    if (arg == "--model") o.model = value();
    else if (arg == "--layers") o.layers = std::atoi(value().c_str());
    else if (arg == "--seq") o.seq = std::atoll(value().c_str());
    else if (arg == "--chunk-tokens") o.chunk_tokens = std::atoll(value().c_str());
    else if (arg == "--tokens") o.tokens = std::atoll(value().c_str());
    else if (arg == "--offload") o.offload = value();
    else if (arg == "--precision") o.precision = value();
    else if (arg == "--threads") o.threads = std::atoi(value().c_str());
    else if (arg == "--no-forward") o.forward = false;
    else throw Error("bench", "unknown option " + arg, "see the top of bench/bench_generation.cpp");
  }
  return o;
}

// RAM read bandwidth, bytes/s: the best of 3 parallel sums over 1 GiB of floats.
double ram_read_bandwidth() {
  const size_t n = size_t{1} << 28;
  std::vector<float> data(n, 1.0f);
  double best = 0.0;
  for (int round = 0; round < 3; ++round) {
    const Timer timer;
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; ++i) sum += data[i];
    const double seconds = timer.seconds();
    if (sum != static_cast<double>(n)) throw Error("bench", "the bandwidth sum is wrong", "");
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds);
  }
  return best;
}

// The disk tier's read bandwidth, bytes/s: O_DIRECT reads of 4 MiB over a 1 GiB file written in `directory`
// (unlinked at once, as the store's file is), the best of 2.
double disk_read_bandwidth(const std::string& directory) {
  const size_t block = size_t{4} << 20, blocks = 256;
  const std::string path = directory + "/fpdt_bench_bandwidth";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0) throw Error("bench", "cannot create " + path + " with O_DIRECT", "give --offload disk:DIR on a local disk");
  ::unlink(path.c_str());
  void* buffer = nullptr;
  if (posix_memalign(&buffer, 4096, block) != 0) throw Error("bench", "out of memory", "");
  std::memset(buffer, 1, block);
  for (size_t b = 0; b < blocks; ++b)
    if (::pwrite(fd, buffer, block, static_cast<off_t>(b * block)) != static_cast<ssize_t>(block))
      throw Error("bench", "cannot write " + path, "");
  ::fsync(fd);
  double best = 0.0;
  for (int round = 0; round < 2; ++round) {
    const Timer timer;
    for (size_t b = 0; b < blocks; ++b)
      if (::pread(fd, buffer, block, static_cast<off_t>(b * block)) != static_cast<ssize_t>(block))
        throw Error("bench", "cannot read " + path, "");
    best = std::max(best, static_cast<double>(block * blocks) / timer.seconds());
  }
  ::close(fd);
  std::free(buffer);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  kernels::cpu::restart_with_matching_blas_core(argv);
  try {
    const Options o = parse(argc, argv);
    omp_set_num_threads(o.threads);
    model::ModelConfig config = model::resolve_model(o.model);
    if (o.layers > 0) {
      config.layers = o.layers;
      config.sliding_layers.clear();
    }
    pipeline::RunSpec run;
    run.chunk_tokens = o.chunk_tokens;
    run.offload = pipeline::parse_offload(o.offload);
    run.precision = pipeline::parse_precision(o.precision);
    run.forward_only = true;
    auto backend = kernels::make_backend(kernels::BackendKind::cpu);
    auto local = comm::make_local();
    pipeline::FpdtModel model(config, *backend, *local, run);
    Rng rng(7);
    std::vector<int32_t> prompt(static_cast<size_t>(o.seq));
    for (int32_t& token : prompt) token = static_cast<int32_t>(rng.below(static_cast<uint64_t>(config.vocab_size)));
    std::printf("bench_generation: %s, %d layers, S %lld, chunks of %lld, offload %s, %s, %lld tokens, %d threads\n",
                config.name.c_str(), config.layers, static_cast<long long>(o.seq), static_cast<long long>(o.chunk_tokens),
                o.offload.c_str(), o.precision.c_str(), static_cast<long long>(o.tokens), o.threads);

    // The forward over the same S in the same chunks (the model laid out for it, then for the generation).
    double forward_seconds = 0.0;
    if (o.forward) {
      const Timer forward_timer;
      model.forward(model::Batch{1, o.seq, prompt.data(), nullptr, nullptr});
      forward_seconds = forward_timer.seconds();
    }

    std::vector<float> logits(static_cast<size_t>(config.vocab_size));
    const Timer prefill_timer;
    model.prefill(prompt, o.tokens, logits.data());
    const double prefill_seconds = prefill_timer.seconds();
    const Timer decode_timer;
    uint64_t store_read = 0;
    for (int64_t i = 0; i < o.tokens; ++i) {
      model.decode(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()), logits.data());
      store_read += model.traffic().read_bytes;
    }
    const double decode_seconds = decode_timer.seconds();

    // What a decoded token must read once: its cache (L layers of k and v, Hkv·D each, up to it), the weights.
    const double element = run.precision == kernels::Precision::bf16 ? 2.0 : 4.0;
    const double positions = static_cast<double>(o.seq) + static_cast<double>(o.tokens + 1) / 2.0;  // on average
    const double kv_bytes = positions * config.layers * 2.0 * config.kv_dim() * element;
    const double weight_bytes = static_cast<double>(model.layout().total_numel()) * element;
    const double ram = ram_read_bandwidth();
    const bool disk = run.offload.kind == kernels::OffloadKind::disk;
    const double disk_bandwidth = disk ? disk_read_bandwidth(run.offload.directory) : 0.0;
    const double bound_seconds = kv_bytes / (disk ? disk_bandwidth : ram) + weight_bytes / ram;
    const double per_token = decode_seconds / static_cast<double>(o.tokens);
    std::printf("forward %.2f s (%.0f tokens/s), prefill %.2f s (%.0f tokens/s, %.2f of the forward's rate)\n",
                forward_seconds, o.seq / forward_seconds, prefill_seconds, o.seq / prefill_seconds,
                forward_seconds / prefill_seconds);  // without the forward: 0 tokens/s and a ratio of 0
    std::printf("decode %.1f ms/token (%.2f tokens/s); bound %.1f ms (%.0f MB of cache at %.1f GB/s%s, %.0f MB of "
                "weights at %.1f GB/s RAM): %.2f of the bound\n",
                per_token * 1e3, 1.0 / per_token, bound_seconds * 1e3, kv_bytes / 1e6,
                (disk ? disk_bandwidth : ram) / 1e9, disk ? " disk" : " RAM", weight_bytes / 1e6, ram / 1e9,
                bound_seconds / per_token);
    nlohmann::ordered_json json{{"model", config.name},
                                {"layers", config.layers},
                                {"seq", o.seq},
                                {"chunk_tokens", o.chunk_tokens},
                                {"offload", o.offload},
                                {"precision", o.precision},
                                {"threads", o.threads},
                                {"forward_tokens_per_s", o.seq / forward_seconds},
                                {"prefill_tokens_per_s", o.seq / prefill_seconds},
                                {"prefill_over_forward", forward_seconds / prefill_seconds},
                                {"decode_tokens_per_s", 1.0 / per_token},
                                {"decode_ms_per_token", per_token * 1e3},
                                {"cache_bytes_per_token", kv_bytes},
                                {"store_bytes_read_per_token", static_cast<double>(store_read) / o.tokens},
                                {"weight_bytes", weight_bytes},
                                {"ram_read_gb_per_s", ram / 1e9},
                                {"disk_read_gb_per_s", disk_bandwidth / 1e9},
                                {"bound_ms_per_token", bound_seconds * 1e3},
                                {"fraction_of_bound", bound_seconds / per_token},
                                {"compute_peak_bytes", MemoryTiers::instance().usage(Tier::compute).peak_bytes},
                                {"offload_peak_bytes", MemoryTiers::instance().usage(Tier::offload).peak_bytes}};
    std::printf("%s\n", json.dump().c_str());
    return 0;
  } catch (const Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
