// What the CPU flash attention's backward files share (flash_attention_backward.cpp: the tasks and the
// fp32 products; _backward_bf16.h: the bf16-pair and AMX products): one task's scratch and the facts
// about its keys that every product reads. Not part of the backend's interface.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fpdt/kernels/cpu/flash_attention.h"
#include "fpdt/kernels/cpu/flash_attention_pairs.h"

namespace fpdt::kernels::cpu::flash {

struct BackwardScratch {
  float* kt;        // [key panel][D][kPanel] Kᵀ of the task's keys × scale·log2 e (bf16: r(k)) (0 past nk)
  float* vt;        // [key panel][D][kPanel] Vᵀ (bf16: r(v)) (0 past nk)
  float* kp;        // [D panel][kBwdKeys][kPanel] K × scale (bf16: r(k)), by panels of kPanel head dims (0 past D)
  float* dkt;       // [key panel][amx_round(D)][kPanel] dKᵀ accumulator (unscaled; rows past D for AMX)
  float* dvt;       // [key panel][amx_round(D)][kPanel] dVᵀ accumulator
  float* sp;        // [key panel][kBwdQueries][kPanel] S, then P
  float* dpp;       // [key panel][kBwdQueries][kPanel] dP, then dS
  float* ds;        // (kBwdQueries, kBwdKeys) dS row-major
  float* dq;        // [D panel][kBwdQueries][kPanel] this pair's dQ tile
  float* lse2;      // (kBwdQueries) lse · log2 e (+inf for a row that saw nothing)
  float* delta;     // (kBwdQueries)
  int32_t* q_docs;  // (kBwdQueries)
  int32_t* k_docs;  // (kBwdKeys), padded to whole panels
  // bf16 dot products and AMX (flash_attention_pairs.h), as bf16 pairs: Kᵀ, Vᵀ [key panel][D pair][kPanel]
  // (AMX: amx_round(⌈D/2⌉) pair rows, 0 past ⌈D/2⌉); K [D panel][key pair][kPanel]; P or dS of one panel
  // [query pair][kPanel] (pw_ds: dS); dS [i][key pair].
  uint32_t *ktw, *vtw, *kpw, *pw, *pw_ds, *dsw;
  // The task's thread flushes subnormal results (panel_gemm_bf16.h): P and dS are rounded without the check.
  bool computed_under_ftz = flushes_subnormal_results();

  BackwardScratch(float* base, int D) { carve(Carver(base), D, this); }
  static size_t floats(int D) { return carve(Carver(nullptr), D, nullptr); }

 private:
  static size_t carve(Carver carve, int D, BackwardScratch* s) {
    const size_t key_panels = kBwdKeys / kPanel;
    float* slices[11];
    const size_t sizes[11] = {
        key_panels * D * kPanel,
        key_panels * D * kPanel,
        static_cast<size_t>(panels(D)) * kBwdKeys * kPanel,
        key_panels * amx_round(D) * kPanel,
        key_panels * amx_round(D) * kPanel,
        key_panels * kBwdQueries * kPanel,
        key_panels * kBwdQueries * kPanel,
        static_cast<size_t>(kBwdQueries) * kBwdKeys,
        static_cast<size_t>(panels(D)) * kBwdQueries * kPanel,
        kBwdQueries,
        kBwdQueries,
    };
    for (int i = 0; i < 11; ++i) slices[i] = carve.take(sizes[i]);
    int32_t* q_docs = carve.take_ints(kBwdQueries);
    int32_t* k_docs = carve.take_ints(kBwdKeys);
    auto words = [&](size_t count) { return reinterpret_cast<uint32_t*>(carve.take(count)); };
    uint32_t* ktw = words(key_panels * amx_round(pairs(D)) * kPanel);
    uint32_t* vtw = words(key_panels * amx_round(pairs(D)) * kPanel);
    uint32_t* kpw = words(static_cast<size_t>(panels(D)) * pairs(kBwdKeys) * kPanel);
    uint32_t* pw = words(static_cast<size_t>(pairs(kBwdQueries)) * kPanel);
    uint32_t* pw_ds = words(static_cast<size_t>(pairs(kBwdQueries)) * kPanel);
    uint32_t* dsw = words(static_cast<size_t>(kBwdQueries) * pairs(kBwdKeys));
    if (s) {
      s->ktw = ktw;
      s->vtw = vtw;
      s->kpw = kpw;
      s->pw = pw;
      s->pw_ds = pw_ds;
      s->dsw = dsw;
      s->kt = slices[0];
      s->vt = slices[1];
      s->kp = slices[2];
      s->dkt = slices[3];
      s->dvt = slices[4];
      s->sp = slices[5];
      s->dpp = slices[6];
      s->ds = slices[7];
      s->dq = slices[8];
      s->lse2 = slices[9];
      s->delta = slices[10];
      s->q_docs = q_docs;
      s->k_docs = k_docs;
    }
    return carve.used();
  }
};

// What a backward task's products read of its keys (b, kv head, keys [kv_lo, kv_lo + nk)) and of the call,
// fixed over its q tiles and heads.
struct TaskKeys {
  const AttentionChunkParams* p;
  int b, kv_head;
  int64_t kv_lo;
  int nk, panels_k;          // its keys, and their key panels
  int64_t k_first, k_last;   // the keys' positions
  bool has_docs;
  int D, d_panels;
  float qk_scale, scale;     // scale·log2 e, and scale
  bool bf16, dots, amx;      // Precision::bf16; its products on bf16 dot products, on AMX tiles
  int D2, key_pairs, query_pairs;
  int D2_tiles, dt_rows;     // AMX's pair rows of Kᵀ, Vᵀ; rows of dKᵀ, dVᵀ
  int kt_words;              // pair rows of a key panel of s.ktw, s.vtw
};

}  // namespace fpdt::kernels::cpu::flash
