// Hardware for `fpdt plan`, per rank: compute memory, the runtime's share of it, the offload tiers
// (host RAM, disk), the host link, peak FLOP/s and the network. Presets hold vendor numbers derated
// once to sustained values; each derating is stated in docs/memory.md ("Constants"), and every field
// can be overridden from the command line. Nothing here is tuned per model or per table row.
#pragma once

#include <string>
#include <vector>

#include "fpdt/pipeline/run_spec.h"

namespace fpdt::plan {

struct Hardware {
  std::string name;
  double compute_bytes = 0;           // compute tier of one rank: GPU memory (CPU: the RAM budget)
  double reserved_bytes = 0;          // of compute_bytes, held by the runtime, not by tensors (CUDA
                                      // context, NCCL and cuBLAS buffers; CPU: the OS and the program)
  double host_bytes = 0;              // RAM offload tier of one rank: its share of the node's host RAM
  bool host_shares_compute = false;   // CPU: compute and RAM offload tiers are one pool of RAM
  bool this_machine = false;          // the preset is the machine fpdt runs on: its rates can be measured
  double disk_bytes = 0;              // disk offload tier of one rank
  double host_link_bytes_per_s = 0;   // compute ↔ RAM offload, per direction, sustained
  double disk_bytes_per_s = 0;        // compute ↔ disk offload, per direction, sustained
  double peak_flops_bf16 = 0;         // dense peak of one rank
  double peak_flops_fp32 = 0;
  double compute_efficiency = 0;      // sustained fraction of peak in large GEMMs and flash attention
  std::string rates_measured;         // where the peak and the fraction were measured on this machine
                                      // (fpdt plan --hardware cpu), as the report says; empty: stated
  double intra_node_bytes_per_s = 0;  // all-to-all bandwidth per rank, inside a node
  double inter_node_bytes_per_s = 0;  // per rank, to other nodes
  int ranks_per_node = 1;
  pipeline::Precision default_precision = pipeline::Precision::bf16;

  double peak_flops(pipeline::Precision precision) const {
    return precision == pipeline::Precision::bf16 ? peak_flops_bf16 : peak_flops_fp32;
  }
};

// "A100-80GB", "H100-80GB", "H200-141GB", "cpu" (case-insensitive). Throws fpdt::Error listing the
// presets for an unknown name.
Hardware hardware_preset(const std::string& name);
std::vector<std::string> hardware_preset_names();

}  // namespace fpdt::plan
