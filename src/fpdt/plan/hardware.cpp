// Hardware presets (see hardware.h). Each number's source and derating is in docs/memory.md.
#include "fpdt/plan/hardware.h"

#include <algorithm>
#include <cctype>

#include "fpdt/base/error.h"

namespace fpdt::plan {

namespace {

constexpr double kGiB = 1073741824.0;
constexpr double kMiB = 1048576.0;

// An HGX/DGX-class node of 8 GPUs: NVLink inside, one 200 Gb/s (A100) or 400 Gb/s (H100/H200)
// InfiniBand port per GPU across nodes. Host RAM and local NVMe are split evenly over the 8 ranks.
std::vector<Hardware> presets() {
  Hardware a100;
  a100.name = "A100-80GB";
  a100.compute_bytes = 80 * kGiB;
  a100.reserved_bytes = 2 * kGiB;
  a100.host_bytes = 128 * kGiB;           // 1 TiB per 8-GPU node
  a100.disk_bytes = 1024 * kGiB;          // 8 TiB NVMe per node
  a100.host_link_bytes_per_s = 25e9;      // PCIe 4.0 x16: 31.5 GB/s raw, ~25 GB/s pinned copies
  a100.disk_bytes_per_s = 3e9;            // ~24 GB/s of NVMe per node
  a100.peak_flops_bf16 = 312e12;
  a100.peak_flops_fp32 = 19.5e12;
  a100.compute_efficiency = 0.6;
  a100.intra_node_bytes_per_s = 200e9;    // NVLink 3: 300 GB/s per direction, ~2/3 in all-to-all
  a100.inter_node_bytes_per_s = 20e9;     // HDR 200 Gb/s = 25 GB/s, ~80 %
  a100.ranks_per_node = 8;
  a100.default_precision = pipeline::Precision::bf16;

  Hardware h100 = a100;
  h100.name = "H100-80GB";
  h100.host_bytes = 256 * kGiB;           // 2 TiB per 8-GPU node (DGX H100)
  h100.host_link_bytes_per_s = 50e9;      // PCIe 5.0 x16: 63 GB/s raw
  h100.disk_bytes_per_s = 6e9;
  h100.peak_flops_bf16 = 989e12;
  h100.peak_flops_fp32 = 67e12;
  h100.intra_node_bytes_per_s = 300e9;    // NVLink 4: 450 GB/s per direction
  h100.inter_node_bytes_per_s = 40e9;     // NDR 400 Gb/s = 50 GB/s

  Hardware h200 = h100;
  h200.name = "H200-141GB";
  h200.compute_bytes = 143771 * kMiB;     // what the driver reports for the 141 GB part

  Hardware cpu;
  cpu.name = "cpu";                       // this project's machines: 2 cores (AVX-512), 24 GiB RAM
  cpu.compute_bytes = 24 * kGiB;
  cpu.reserved_bytes = 2 * kGiB;          // the OS and the program itself
  cpu.host_bytes = 24 * kGiB;             // the same RAM
  cpu.host_shares_compute = true;
  cpu.this_machine = true;
  cpu.disk_bytes = 64 * kGiB;
  cpu.host_link_bytes_per_s = 10e9;       // memcpy between two RAM buffers, 2 cores
  cpu.disk_bytes_per_s = 1e9;
  // The rates of a 2-core AVX-512 VM, as fpdt measures them (bench/RESULTS.md, GEMM libraries): the FMA
  // peak 413–543 GFLOP/s, and AVX512-BF16 dot products at twice it where they are double-rate (AMD Zen
  // 4/5; Intel's AMX tiles run far above, its GEMMs not). `fpdt plan --hardware cpu` measures this
  // machine's instead (plan_command.cpp); these are what the library's callers get.
  cpu.peak_flops_bf16 = 840e9;
  cpu.peak_flops_fp32 = 420e9;            // 2 cores · 2 FMA · 16 lanes · 2 flops · ~3.3 GHz
  cpu.compute_efficiency = 0.5;
  cpu.intra_node_bytes_per_s = 10e9;      // ranks are threads of one process: a memcpy
  cpu.inter_node_bytes_per_s = 10e9;
  cpu.ranks_per_node = 1 << 20;
  cpu.default_precision = pipeline::Precision::fp32;
  return {a100, h100, h200, cpu};
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return text;
}

}  // namespace

std::vector<std::string> hardware_preset_names() {
  std::vector<std::string> names;
  for (const Hardware& preset : presets()) names.push_back(preset.name);
  return names;
}

Hardware hardware_preset(const std::string& name) {
  for (const Hardware& preset : presets())
    if (lower(preset.name) == lower(name)) return preset;
  std::string known;
  for (const std::string& preset : hardware_preset_names()) known.append(known.empty() ? "" : ", ").append(preset);
  std::string what = "unknown hardware preset '";
  what.append(name).append("'");
  std::string hint = "use one of ";
  hint.append(known).append(", and --compute-mem, --host-mem, ... to change its numbers");
  throw Error("plan", what, hint);
}

}  // namespace fpdt::plan
