// The function table each per-ISA unit exports; the registration unit picks one at run time.
//
// The registration unit cuts an attention call into tasks: one sequence, one KV head (with the
// G query heads that share it, so K and V are read once for all of them), a block of query
// tokens and a range of keys. A task's rows are r = token * G + g (query head hk * G + g).
#pragma once
#include <cstdint>

namespace kx {

struct AttnProblem {
  const void* q;
  const void* k;
  const void* v;
  void* out;   // q's dtype, contiguous, rows (token, head)
  float* lse;  // log-sum-exp of the scaled scores, per (head, token)
  // Element strides: per token and per head (head_dim is contiguous).
  int64_t q_tok, q_head, k_tok, k_head, v_tok, v_head, out_tok, out_head, lse_tok, lse_head;
  int64_t head_dim;
  int64_t group;  // query heads per KV head
  float scale;
  bool causal;  // bottom-right aligned: token t sees keys <= t + (lk - lq)
};

struct AttnTask {
  // Element offsets of the sequence's first token (head 0) in q, k, v, out and lse.
  int64_t q_off, k_off, v_off, out_off, lse_off;
  int64_t kv_head;
  int64_t q0, nq;            // query tokens [q0, q0 + nq) of the sequence
  int64_t lq, lk;            // the sequence's query and key lengths
  int64_t k_begin, k_end;    // the key range of this task (a split of [0, lk))
  const bool* key_mask;      // the sequence's keys, false where masked (a padding or static-cache
                             // mask, for every query row); nullptr: every key visible
};

// A task's unnormalised result, when its keys are split over several tasks: o is rows x head_dim
// (sum of p * v), m the running maximum and l the sum of p per row.
struct AttnPartial {
  float* o;
  float* m;
  float* l;
};

// Runs one task. With partial == nullptr it writes the normalised rows into out and lse.
using AttnTaskFn = void (*)(const AttnProblem& p, const AttnTask& t, const AttnPartial* partial);
// Combines the partials of the n tasks that split one (query block, KV head) over keys.
using AttnMergeFn = void (*)(const AttnProblem& p, const AttnTask& t, const AttnPartial* parts, int64_t n);

struct AttnTable {
  AttnTaskFn task[3];  // by dtype code f32, bf16, f16
  AttnMergeFn merge[3];
  int64_t rows_per_task;  // the query rows (tokens x group) a prefill task is sized for
  int64_t prefill_serial_below;  // q elements x keys under which a prefill runs on the calling thread
};

}  // namespace kx
