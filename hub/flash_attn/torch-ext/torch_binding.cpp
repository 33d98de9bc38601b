// Registers the attention op under the kernel's metadata id, checks its inputs, cuts the call
// into tasks (sequence x KV head x query block x key split) and runs them on torch's threads.
#include "registration.h"

#include "flash_attn_table.h"
#include "kx_dispatch.h"
#include "kx_limits.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

KX_ISA_TABLE(kx::AttnTable, kx_flash_attn_table)

namespace {

constexpr int64_t kMinKeysPerSplit = 256;
constexpr int64_t kMinTokensPerBlock = 8;

std::vector<int64_t> offsets(const at::Tensor& cu, int64_t total, const char* name) {
  TORCH_CHECK(cu.dim() == 1 && cu.numel() >= 2, "flash_attn_varlen_func: ", name,
              " must be a 1-D tensor of batch + 1 cumulative lengths, got shape ", cu.sizes());
  TORCH_CHECK(!at::isFloatingType(cu.scalar_type()), "flash_attn_varlen_func: ", name,
              " must be an integer tensor (int32), got ", cu.scalar_type());
  at::Tensor c = cu.to(at::kCPU, at::kLong).contiguous();
  std::vector<int64_t> v(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  TORCH_CHECK(v.front() == 0 && v.back() <= total, "flash_attn_varlen_func: ", name, " must start at 0 and end at ",
              "most at the ", total, " tokens given, got ", v.front(), " ... ", v.back());
  for (size_t i = 1; i < v.size(); ++i) {
    TORCH_CHECK(v[i] >= v[i - 1], "flash_attn_varlen_func: ", name, " must be non-decreasing");
  }
  return v;
}

// A q/k/v tensor's sizes and strides in the op's order, (batch, seqlen, heads, head_dim) or
// varlen's (total, heads, head_dim), read without making a view: heads_first tensors are (batch,
// heads, seqlen, head_dim), whose dims 1 and 2 swap here (a transpose per input, a TensorImpl
// each, was 0.5 us of a 4.6 us one-token call).
struct Dims {
  at::Tensor t;
  bool swap;
  int64_t size(int64_t i) const { return t.size(physical(i)); }
  int64_t stride(int64_t i) const { return t.stride(physical(i)); }
  std::vector<int64_t> sizes() const {
    std::vector<int64_t> all(static_cast<size_t>(t.dim()));
    for (int64_t i = 0; i < t.dim(); ++i) all[static_cast<size_t>(i)] = size(i);
    return all;
  }

 private:
  int64_t physical(int64_t i) const {
    if (i < 0) i += t.dim();
    return swap && (i == 1 || i == 2) ? 3 - i : i;
  }
};

// out = softmax(scale * q k^T [+ causal mask]) v, per sequence and head; returns (out, lse).
// Dense: q (batch, seqlen_q, heads, d), k/v (batch, seqlen_k, kv_heads, d), optional seqused_k
// (batch,) keys per sequence. Varlen: q (total_q, heads, d), k/v (total_k, kv_heads, d) with
// cu_seqlens_q/k (batch + 1,). lse is (batch, heads, seqlen_q) or (heads, total_q), float32.
// Each dtype, in prefill and in decode (one query token per sequence), has its own path choice
// (kx_choice.h), made on its own workload below.
const kx::OpChoice& op_for(int code, bool decode);

std::tuple<at::Tensor, at::Tensor> fwd(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                       const std::optional<at::Tensor>& cu_q, const std::optional<at::Tensor>& cu_k,
                                       const std::optional<at::Tensor>& seqused_k, double scale, bool causal,
                                       bool heads_first = false, const std::optional<at::Tensor>& key_mask = std::nullopt) {
  // heads_first: dense q/k/v as (batch, heads, seqlen, head_dim), Transformers' attention-interface
  // layout, read through Dims (no views made). The output is (batch, seqlen_q, heads, head_dim)
  // either way.
  TORCH_CHECK(!heads_first || (!cu_q.has_value() && q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4),
              "flash_attn: heads_first takes dense (batch, heads, seqlen, head_dim) tensors, got q ", q_in.sizes());
  const int dc = kx::dtype_code(q_in, "flash_attn");
  TORCH_CHECK(k_in.scalar_type() == q_in.scalar_type() && v_in.scalar_type() == q_in.scalar_type(),
              "flash_attn: q, k and v must share a dtype, got ", q_in.scalar_type(), ", ", k_in.scalar_type(), ", ",
              v_in.scalar_type());
  TORCH_CHECK(k_in.device().is_cpu() && v_in.device().is_cpu(), "flash_attn: k and v must be CPU tensors");
  const bool varlen = cu_q.has_value();
  TORCH_CHECK(varlen == cu_k.has_value(), "flash_attn: give both cu_seqlens_q and cu_seqlens_k, or neither");
  const int64_t dims = varlen ? 3 : 4;
  TORCH_CHECK(q_in.dim() == dims && k_in.dim() == dims && v_in.dim() == dims, "flash_attn: expected ",
              varlen ? "q (total_q, heads, head_dim), k/v (total_k, kv_heads, head_dim)"
                     : "q (batch, seqlen_q, heads, head_dim), k/v (batch, seqlen_k, kv_heads, head_dim)",
              ", got q ", q_in.sizes(), ", k ", k_in.sizes(), ", v ", v_in.sizes());
  TORCH_CHECK(k_in.sizes() == v_in.sizes(), "flash_attn: k and v must have the same shape, got ", k_in.sizes(),
              " and ", v_in.sizes());
  // Any token and head strides; head_dim must be contiguous.
  auto last_contig = [](const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); };
  const Dims q{last_contig(q_in), heads_first}, k{last_contig(k_in), heads_first}, v{last_contig(v_in), heads_first};
  const int64_t H = q.size(-2), Hk = k.size(-2), D = q.size(-1);
  TORCH_CHECK(k.size(-1) == D, "flash_attn: q and k/v must have the same head_dim, got ", D, " and ", k.size(-1));
  TORCH_CHECK(D >= 1 && D <= 256, "flash_attn: head_dim must be in [1, 256], got ", D);
  TORCH_CHECK(Hk >= 1 && H % Hk == 0, "flash_attn: the number of query heads (", H,
              ") must be a multiple of the number of KV heads (", Hk, ")");
  if (!varlen) {
    TORCH_CHECK(k.size(0) == q.size(0), "flash_attn: q and k/v must have the same batch size, got ", q.size(0),
                " and ", k.size(0));
  }

  at::Tensor out = kx::empty_output(q.sizes(), q.t.scalar_type());
  const int64_t B = varlen ? cu_q->numel() - 1 : q.size(0);
  std::vector<int64_t> cq, ck, used;
  if (varlen) {
    cq = offsets(*cu_q, q.size(0), "cu_seqlens_q");
    ck = offsets(*cu_k, k.size(0), "cu_seqlens_k");
    TORCH_CHECK(cq.size() == ck.size(), "flash_attn_varlen_func: cu_seqlens_q and cu_seqlens_k must have the ",
                "same length (batch + 1), got ", cq.size(), " and ", ck.size());
  }
  if (seqused_k.has_value()) {
    TORCH_CHECK(!varlen && seqused_k->dim() == 1 && seqused_k->numel() == B,
                "flash_attn: cache_seqlens must have one length per batch entry (", B, "), got shape ",
                seqused_k->sizes());
    at::Tensor u = seqused_k->to(at::kCPU, at::kLong).contiguous();
    used.assign(u.data_ptr<int64_t>(), u.data_ptr<int64_t>() + B);
    for (int64_t n : used) {
      TORCH_CHECK(n >= 0 && n <= k.size(1), "flash_attn_with_kvcache: cache_seqlens must lie in [0, ",
                  k.size(1), "], got ", n);
    }
  }
  // key_mask (batch, seqlen_k) bool: false hides that key from every query row of its sequence (a
  // padding mask, or a static cache's unused tail). Keys past a sequence's last visible one are
  // not read at all (`visible`): a decode step against a long static cache costs what its filled
  // part costs, and whatever its tail holds cannot reach the output. The causal alignment still
  // counts every key.
  at::Tensor km;
  std::vector<int64_t> visible;
  if (key_mask.has_value()) {
    TORCH_CHECK(!varlen && key_mask->scalar_type() == at::kBool && key_mask->dim() == 2 &&
                    key_mask->size(0) == B && key_mask->size(1) == k.size(1),
                "flash_attn: key_mask must be a dense call's (batch, seqlen_k) = (", B, ", ", k.size(1),
                ") bool tensor, got ", key_mask->scalar_type(), " ", key_mask->sizes());
    km = key_mask->to(at::kCPU).contiguous();
    const bool* m = km.data_ptr<bool>();
    for (int64_t b = 0; b < B; ++b) {
      int64_t last = used.empty() ? k.size(1) : used[b];
      while (last > 0 && !m[b * k.size(1) + last - 1]) --last;
      visible.push_back(last);
    }
  }
  at::Tensor lse = varlen ? at::empty({H, q.size(0)}, q.t.options().dtype(at::kFloat))
                          : at::empty({B, H, q.size(1)}, q.t.options().dtype(at::kFloat));
  if (q.t.numel() == 0) return {out, lse};

  kx::AttnProblem p{};
  p.q = q.t.data_ptr(), p.k = k.t.data_ptr(), p.v = v.t.data_ptr(), p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  const int tok = varlen ? 0 : 1;
  p.q_tok = q.stride(tok), p.q_head = q.stride(-2), p.k_tok = k.stride(tok), p.k_head = k.stride(-2);
  p.v_tok = v.stride(tok), p.v_head = v.stride(-2), p.out_tok = out.stride(tok), p.out_head = out.stride(-2);
  p.lse_tok = 1, p.lse_head = varlen ? q.size(0) : q.size(1);
  p.head_dim = D, p.group = H / Hk, p.scale = static_cast<float>(scale), p.causal = causal;

  const bool decode = varlen ? q.size(0) <= B : q.size(1) == 1;
  const kx::AttnTable& tab = table(op_for(dc, decode));
  // Each sequence's query tokens and the keys its rows may read: [0, lk), or up to the last
  // visible key.
  std::vector<int64_t> lqs(B), lks(B), ends(B);
  int64_t max_lq = 0, max_lk = 0;
  for (int64_t b = 0; b < B; ++b) {
    lqs[b] = varlen ? cq[b + 1] - cq[b] : q.size(1);
    lks[b] = varlen ? ck[b + 1] - ck[b] : (used.empty() ? k.size(1) : used[b]);
    ends[b] = visible.empty() ? lks[b] : visible[b];
    max_lq = std::max(max_lq, lqs[b]), max_lk = std::max(max_lk, ends[b]);
  }
  const int64_t threads = at::get_num_threads();
  // A small call runs on the calling thread: waking the pool costs more than it saves, and with
  // another process on a core it waits for that core's scheduler slice.
  const int64_t serial_below = decode ? kx::kSerialBelow : tab.prefill_serial_below;
  const bool serial = q.t.numel() * std::max<int64_t>(max_lk, 1) < serial_below;
  int64_t nq_block = std::max<int64_t>(1, tab.rows_per_task / p.group);
  // A short parallel prefill has fewer (sequence, KV head) pairs than twice the threads (SmolLM2
  // at 24-64 tokens: 3 KV heads of one block each, two threads): its query tokens are cut into
  // smaller blocks so that the threads share it evenly (the costliest blocks go first, below).
  if (!serial && B * Hk < 2 * threads && max_lq > kMinTokensPerBlock) {
    const int64_t blocks = (2 * threads + B * Hk - 1) / (B * Hk);  // per (sequence, KV head)
    nq_block = std::min(nq_block, std::max(kMinTokensPerBlock, (max_lq + blocks - 1) / blocks));
  }
  // Base tasks (sequence, KV head, query block), then key splits where they are too few to keep
  // every thread busy (decode: one query token against a long cache).
  std::vector<kx::AttnTask> base;
  std::vector<int64_t> group;  // (sequence, KV head) of each base task, in build order
  for (int64_t b = 0; b < B; ++b) {
    kx::AttnTask t{};
    t.lq = lqs[b], t.lk = lks[b];
    t.q_off = varlen ? cq[b] * q.stride(0) : b * q.stride(0);
    t.k_off = varlen ? ck[b] * k.stride(0) : b * k.stride(0);
    t.v_off = varlen ? ck[b] * v.stride(0) : b * v.stride(0);
    t.out_off = varlen ? cq[b] * out.stride(0) : b * out.stride(0);
    t.lse_off = varlen ? cq[b] : b * H * q.size(1);
    t.key_mask = km.defined() ? km.data_ptr<bool>() + b * k.size(1) : nullptr;
    for (int64_t hk = 0; hk < Hk; ++hk) {
      for (int64_t q0 = 0; q0 < t.lq; q0 += nq_block) {
        t.kv_head = hk, t.q0 = q0, t.nq = std::min(nq_block, t.lq - q0);
        t.k_begin = 0, t.k_end = ends[b];
        base.push_back(t);
        group.push_back(b * Hk + hk);
      }
    }
  }
  int64_t splits = 1;
  if (!serial && static_cast<int64_t>(base.size()) < 2 * threads) {
    splits = std::min((2 * threads + static_cast<int64_t>(base.size()) - 1) / static_cast<int64_t>(base.size()),
                      std::max<int64_t>(1, max_lk / kMinKeysPerSplit));
  }
  std::vector<kx::AttnTask> tasks;
  for (size_t i = 0; i < base.size(); ++i) {
    const kx::AttnTask& t = base[i];
    const int64_t end = t.k_end;  // the base task's keys: [0, lk), or up to the last visible one
    const int64_t per = splits == 1 ? end : (end + splits - 1) / splits;
    for (int64_t s = 0; s < splits; ++s) {
      kx::AttnTask u = t;
      u.k_begin = std::min(end, s * per), u.k_end = splits == 1 ? end : std::min(end, (s + 1) * per);
      tasks.push_back(u);
    }
  }
  // Taken from a shared counter: one KV head after the other (its K and V stay in L2 across its
  // tasks), and within it the costliest first (causal blocks late in a sequence see the most
  // keys), so that the threads finish together on the cheap blocks.
  std::vector<int64_t> order(tasks.size());
  std::vector<double> cost(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    const kx::AttnTask& t = tasks[i];
    int64_t kend = causal ? std::min(t.k_end, t.q0 + t.nq + t.lk - t.lq) : t.k_end;
    cost[i] = static_cast<double>(t.nq) * static_cast<double>(std::max<int64_t>(0, kend - t.k_begin) + 16);
    order[i] = static_cast<int64_t>(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const int64_t ga = group[a / splits], gb = group[b / splits];
    return ga != gb ? ga < gb : cost[a] > cost[b];
  });

  const int64_t rows = nq_block * p.group;
  at::Tensor scratch;
  std::vector<kx::AttnPartial> parts;
  if (splits > 1) {
    const int64_t per_task = rows * D + 2 * rows;
    scratch = at::empty({static_cast<int64_t>(tasks.size()) * per_task}, q.t.options().dtype(at::kFloat));
    float* base_ptr = scratch.data_ptr<float>();
    for (size_t i = 0; i < tasks.size(); ++i) {
      float* at = base_ptr + static_cast<int64_t>(i) * per_task;
      parts.push_back({at, at + rows * D, at + rows * D + rows});
    }
  }
  auto fn = tab.task[dc];
  auto mg = tab.merge[dc];
  // The last split of a base task to finish merges them, on its own thread: no second region.
  std::vector<std::atomic<int64_t>> remaining(splits > 1 ? base.size() : 0);
  for (auto& r : remaining) r.store(splits);
  std::atomic<int64_t> next{0};
  const int64_t n = static_cast<int64_t>(tasks.size());
  auto worker = [&](int64_t, int64_t) {
    for (int64_t i; (i = next.fetch_add(1)) < n;) {
      const int64_t id = order[i];
      if (splits == 1) {
        fn(p, tasks[id], nullptr);
        continue;
      }
      fn(p, tasks[id], &parts[id]);
      const int64_t b = id / splits;
      if (remaining[b].fetch_sub(1) == 1) mg(p, base[b], &parts[b * splits], splits);
    }
  };
  if (n == 1 || serial) {
    worker(0, 1);
  } else {
    at::parallel_for(0, std::min(threads, n), 1, worker);
  }
  return {out, lse};
}

// What the measured dispatch times (kx_choice.h), per dtype: SmolLM2's attention (9 query heads,
// 3 KV heads, head_dim 64), a causal prefill of 256 tokens, and 4 decode steps against 512 cached.
template <int Code>
void prefill() {
  static const at::ScalarType t = kx::dtype_of(Code);
  static const at::Tensor q = kx::sample({1, 256, 9, 64}, t), k = kx::sample({1, 256, 3, 64}, t, 2.0),
                          v = kx::sample({1, 256, 3, 64}, t, 0.5);
  fwd(q, k, v, std::nullopt, std::nullopt, std::nullopt, 0.125, true);
}
template <int Code>
void decode() {
  static const at::ScalarType t = kx::dtype_of(Code);
  static const at::Tensor q = kx::sample({1, 1, 9, 64}, t), k = kx::sample({1, 512, 3, 64}, t, 2.0),
                          v = kx::sample({1, 512, 3, 64}, t, 0.5);
  for (int i = 0; i < 4; ++i) fwd(q, k, v, std::nullopt, std::nullopt, std::nullopt, 0.125, true);
}
const kx::OpChoice by_dtype[3][2] = {
    {{"flash_attn", "attention prefill float32", &prefill<0>}, {"flash_attn", "attention decode float32", &decode<0>}},
    {{"flash_attn", "attention prefill bfloat16", &prefill<1>},
     {"flash_attn", "attention decode bfloat16", &decode<1>}},
    {{"flash_attn", "attention prefill float16", &prefill<2>},
     {"flash_attn", "attention decode float16", &decode<2>}}};
const kx::OpChoice& op_for(int code, bool decode) { return by_dtype[code][decode]; }

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def(
      "fwd(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? seqused_k, "
      "float softmax_scale, bool causal, bool heads_first=False, Tensor? key_mask=None) -> (Tensor, Tensor)");
  m.def("isa() -> str", &kx::current_isa);
  m.def("set_isa(str isa) -> str", &kx::set_isa);
  m.def("reset_isa() -> str", &kx::reset_isa);
  m.def("isa_reason() -> str", &kx::isa_reason);
  m.def("isa_paths() -> str[]", &kx::isa_paths);
  m.def("isa_choices() -> str[]", &kx::isa_choices);
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, m) { m.impl("fwd", &fwd); }

namespace {

// Autograd kernel, in C++ because a Python one (torch.library.register_autograd) costs about
// 9 us per call, a third of a decode step. The forward runs below autograd; when an input
// requires grad (a model called outside torch.no_grad()) the output gets a node that raises on
// backward: the kernel is forward only.
void fwd_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, op.schema().arguments().size());
  std::vector<at::Tensor> inputs = {args[0].toTensor(), args[1].toTensor(), args[2].toTensor()};
  const bool track = at::GradMode::is_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const at::Tensor& t) {
                       return t.requires_grad();
                     });
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  if (track) {
    auto node = c10::make_intrusive<torch::autograd::Error>(
        "flash_attn (CPU): this kernel is forward only (no backward); train with attn_implementation='sdpa' or "
        "'eager'");
    node->set_next_edges(torch::autograd::collect_next_edges(inputs));
    torch::autograd::set_history((*stack)[stack->size() - 2].toTensor(), node);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, Autograd, m) {
  m.impl("fwd", torch::CppFunction::makeFromBoxedFunction<&fwd_autograd>());
}

// The fake (meta) kernel is registered from Python, in the package's _registrations.py.

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
