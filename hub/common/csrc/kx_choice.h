// Which compiled code path a bundled kernel's op runs: chosen by measurement, op by op, once per machine.
//
// The widest instruction set is not always the fastest path: a path can lose to a narrower one on
// some hosts (one Zen 4 host ran the attention kernel's AVX-512 path at half its AVX2 speed, a
// compiler fault since fixed in flash_attn_isa.h), and paths of equal width differ by op and
// dtype (on one Zen 5 host GELU float32 ran 1% faster on avx512 than on avx512bf16, attention
// bfloat16 3% faster on avx512bf16, while one choice per repository ran both on one path). So
// each op at each dtype (an OpChoice) times the paths this CPU runs, and its forms where it has
// several (a bfloat16 activation's table lookup or its formula), on a small workload of its own
// at its first use (interleaved rounds on one thread, in CPU time, a few milliseconds), keeps the
// fastest, and writes the choice to a cache file keyed by the CPU, this build of the library and
// the torch library it runs against; later processes read it. A repository may instead keep one
// choice for all its ops (a Workload; quantized_linear does). KERNEL_EXPLORER_ISA=<path> forces
// every op onto a path; set_isa() pins them at run time and reset_isa() lets go; isa() names the
// path most ops run, isa_reason() says why in one line ("avx2: 1.87x [1.80, 1.93] faster than
// avx512bf16 here ...", with the ops that run another path), isa_choices() each op's choice.
//
// The portable path is not timed where a SIMD path runs: it is the fallback for CPUs without one.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

namespace kx {
// Everything here has internal linkage: each kernel library keeps its own choice.
namespace {

constexpr int kIsaCount = 4;
inline const char* isa_name(int i) {
  static const char* names[kIsaCount] = {"avx512bf16", "avx512", "avx2", "portable"};
  return names[i];
}

inline int isa_index(const std::string& name) {
  for (int i = 0; i < kIsaCount; ++i)
    if (name == isa_name(i)) return i;
  return -1;
}

// The paths this build carries and this CPU runs, widest first. avx512bf16 also asks for
// AVX512-VNNI, which every CPU with AVX512-BF16 has (the quantized GEMM uses it on that path).
inline std::vector<int> runnable_isas() {
  std::vector<int> paths;
#if defined(KX_HAVE_AVX512)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512 && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni")) paths.push_back(0);
  if (avx512) paths.push_back(1);
#endif
#if defined(KX_HAVE_AVX2)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) paths.push_back(2);
#endif
  paths.push_back(3);
  return paths;
}

inline std::string runnable_list() {
  std::string out;
  for (int i : runnable_isas()) out += (out.empty() ? "" : ", ") + std::string(isa_name(i));
  return out;
}

// One choice: an op at one dtype ("silu bfloat16"), or, for a repository that registers one
// Workload, all its ops together. Its candidates are the paths this CPU runs, times the op's
// forms where it has several (activation's 16-bit ops: a table lookup or the formula, the same
// bits either way, and which is faster depends on the CPU).
constexpr int kMaxForms = 2;

struct Slot {
  std::string op;                        // "silu bfloat16"; the repository's name for a Workload
  std::function<void()> workload;        // runs the op's representative shape once, on its path
  std::vector<std::string> forms;        // empty: one form
  std::atomic<int> current{-1};          // path index * kMaxForms + form; -1 until chosen
  std::string reason;                    // why it runs: "<candidate>: <comparisons> here (...)"
  // What the measurement (here or in the cache) found, kept across set_isa()/reset_isa().
  int measured = -1;                     // the winning candidate, -1 until known
  std::vector<std::string> comparisons;  // "1.04x [1.01, 1.06] faster than avx512", one per other candidate
  std::string detail;                    // "here (9 interleaved rounds of ...)"
  int best_form[kIsaCount] = {};         // the faster form on each path (what a pinned path runs)
  double form_gap = 0;                   // on the winning path, the other form's time / the winner's
  bool cached = false;                   // read from the cache file, not measured in this process
  int parent = -1;                       // a size class of another op: its path, and a form of its own
};

// Above this gap between an op's two forms (at its own workload's size), its size classes take
// the parent's form without measuring: a race that wide does not flip with the size (the closest
// flip seen: GELU-tanh bfloat16's formula 1.06x faster at 128 tokens, its lookup 1.04x at 512).
constexpr double kSizeFlipsBelow = 1.25;

struct Repo {
  const char* name = "kernel";
  std::vector<Slot*> slots;  // registration order
  int whole = -1;            // the slot a Workload registered (all ops together), if any
  int pinned_isa = -1;       // set_isa(): every op on this path ...
  int pinned_form = -1;      // ... in this form where it has one (-1: the faster form measured)
  std::recursive_mutex mutex;
  std::string cache;         // the cache file in use, once read or written
};

inline Repo& repo() {
  static Repo* r = new Repo;  // never destroyed: ops may run during static destruction
  return *r;
}

inline int add_slot(const char* repo_name, std::string op, std::function<void()> fn, std::vector<std::string> forms) {
  TORCH_CHECK(forms.size() <= kMaxForms, "kx_choice.h: at most ", kMaxForms, " forms per op");
  Repo& r = repo();
  r.name = repo_name;
  auto* s = new Slot;
  s->op = std::move(op);
  s->workload = std::move(fn);
  s->forms = std::move(forms);
  r.slots.push_back(s);
  return static_cast<int>(r.slots.size()) - 1;
}

// A registration unit that keeps one choice for all its ops names its workload once, at global
// scope: `static kx::Workload w("quantized_linear", &fn);` (kx::current_isa_index() reads it).
struct Workload {
  Workload(const char* repo_name, void (*fn)()) { repo().whole = add_slot(repo_name, repo_name, fn, {}); }
};

// One op's own choice, timed on its own workload at its first use:
// `static const kx::OpChoice silu_bf16("activation", "silu bfloat16", [] { ... }, {"lookup", "formula"});`
// The first registered is the repository's main op (isa() names its path when the ops split evenly).
struct OpChoice {
  int slot;
  OpChoice(const char* repo_name, std::string op, std::function<void()> fn, std::vector<std::string> forms = {})
      : slot(add_slot(repo_name, std::move(op), std::move(fn), std::move(forms))) {}
  // A size class of `parent` (large inputs): it runs the parent's path, and measures which of the
  // parent's forms is faster at its own workload's size where the parent found them close.
  OpChoice(const char* repo_name, std::string op, std::function<void()> fn, const OpChoice& parent)
      : slot(add_slot(repo_name, std::move(op), std::move(fn), repo().slots[parent.slot]->forms)) {
    repo().slots[slot]->parent = parent.slot;
  }
};

int current_code(int slot);

inline void anchor() {}

// Deterministic input for a workload (a sine of the index, in [-1, 1]): no draw from torch's global
// generator, whose state a user's seeded program relies on.
inline at::Tensor sample(at::IntArrayRef shape, at::ScalarType dtype = at::kFloat, double scale = 1.0) {
  const int64_t n = c10::multiply_integers(shape);
  return (at::sin(at::arange(n, at::TensorOptions().dtype(at::kFloat)) * 0.618) * scale).reshape(shape).to(dtype);
}

std::string cpu_brand() {
  char brand[49] = {};
#if defined(__x86_64__) || defined(_M_X64)
  unsigned int regs[12] = {};
  if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000004) {
    for (unsigned int i = 0; i < 3; ++i)
      __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    std::memcpy(brand, regs, 48);
  }
#endif
  return brand;
}

// "path size mtime" of the shared library holding `symbol`: this build, or the torch it runs on.
std::string library_identity(const void* symbol) {
  Dl_info info{};
  if (!dladdr(symbol, &info) || !info.dli_fname) return "?";
  struct stat st {};
  if (stat(info.dli_fname, &st) != 0) return info.dli_fname;
  std::ostringstream s;
  s << info.dli_fname << ' ' << st.st_size << ' ' << st.st_mtime;
  return s.str();
}

// The repository's cache file: one line per op, keyed by the CPU, the paths it runs, this build
// and the torch library; empty where no cache folder can be named.
std::filesystem::path cache_file() {
  std::filesystem::path root;
  if (const char* env = std::getenv("KERNEL_EXPLORER_CACHE"); env && *env) {
    root = env;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    root = std::filesystem::path(xdg) / "kernel-explorer";
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    root = std::filesystem::path(home) / ".cache" / "kernel-explorer";
  } else {
    return {};
  }
  std::ostringstream key;
  key << repo().name << "|per-op|" << cpu_brand() << '|';
  for (int i : runnable_isas()) key << isa_name(i) << ',';
  key << '|' << library_identity(reinterpret_cast<void*>(&anchor)) << '|'
      << library_identity(reinterpret_cast<void*>(&at::get_num_threads));
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : key.str()) h = (h ^ ch) * 1099511628211ull;
  char name[17];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(h));
  return root / "isa-choice" / (std::string(repo().name) + "-" + name + ".txt");
}

inline std::string candidate_name(const Slot& s, int code) {
  std::string name = isa_name(code / kMaxForms);
  return s.forms.empty() ? name : name + " " + s.forms[code % kMaxForms];
}

// The slot's candidates: every SIMD path this CPU runs (portable only where there is none), in
// each of its forms.
inline std::vector<int> candidates(const Slot& s) {
  std::vector<int> paths = runnable_isas();
  std::vector<int> out;
  const int forms = std::max<int>(1, static_cast<int>(s.forms.size()));
  if (s.parent >= 0) {  // a size class: the parent's path, in each form
    const int isa = current_code(s.parent) / kMaxForms;
    for (int f = 0; f < forms; ++f) out.push_back(isa * kMaxForms + f);
    return out;
  }
  for (int i : paths)
    if (i != 3 || paths.size() == 1)
      for (int f = 0; f < forms; ++f) out.push_back(i * kMaxForms + f);
  return out;
}

// The cache file's lines by op: "op \t candidate \t best form per path \t comparisons (' | ') \t detail".
std::vector<std::vector<std::string>> cache_lines(const std::filesystem::path& file) {
  std::vector<std::vector<std::string>> lines;
  std::ifstream in(file);
  for (std::string line; in && std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream s(line);
    for (std::string f; std::getline(s, f, '\t');) fields.push_back(f);
    if (fields.size() == 5) lines.push_back(std::move(fields));
  }
  return lines;
}

inline std::vector<std::string> split(const std::string& text, const std::string& sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t next; !text.empty() && (next = text.find(sep, at)) != std::string::npos; at = next + sep.size())
    out.push_back(text.substr(at, next - at));
  if (!text.empty()) out.push_back(text.substr(at));
  return out;
}

inline std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// Reads the slot's entry from the cache into it; false where there is none, or it names a
// candidate this build and CPU do not have (a stale entry: measured again).
bool read_cached(Slot& s) {
  const std::filesystem::path file = cache_file();
  if (file.empty()) return false;
  const std::vector<int> cands = candidates(s);
  for (const auto& f : cache_lines(file)) {
    if (f[0] != s.op) continue;
    for (int code : cands) {
      if (candidate_name(s, code) != f[1]) continue;
      std::vector<std::string> forms = split(f[2], ",");
      for (int i = 0; i < kIsaCount; ++i) {
        const int form = i < static_cast<int>(forms.size()) ? std::atoi(forms[i].c_str()) : 0;
        s.best_form[i] = std::clamp(form, 0, kMaxForms - 1);
      }
      s.form_gap = forms.size() > kIsaCount ? std::atof(forms[kIsaCount].c_str()) : 0;
      s.measured = code;
      s.comparisons = split(f[3], " | ");
      s.detail = f[4];
      s.cached = true;
      repo().cache = file.string();
      return true;
    }
    return false;
  }
  return false;
}

// Writes (or replaces) the slot's line, atomically; a note for the reason where it cannot.
std::string write_cached(const Slot& s) {
  const std::filesystem::path file = cache_file();
  if (file.empty()) return "; not cached (no cache folder: set KERNEL_EXPLORER_CACHE)";
  std::vector<std::vector<std::string>> lines = cache_lines(file);
  lines.erase(std::remove_if(lines.begin(), lines.end(), [&](const auto& f) { return f[0] == s.op; }), lines.end());
  std::string forms;
  for (int i = 0; i < kIsaCount; ++i) forms += (i ? "," : "") + std::to_string(s.best_form[i]);
  forms += "," + std::to_string(s.form_gap);
  lines.push_back({s.op, candidate_name(s, s.measured), forms, join(s.comparisons, " | "), s.detail});
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  const std::filesystem::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  std::ofstream out(tmp);
  for (const auto& f : lines) out << join(f, "\t") << '\n';
  out.close();
  if (!ec && out) std::filesystem::rename(tmp, file, ec);
  if (ec || !out) return "; not cached (" + file.parent_path().string() + " is not writable)";
  repo().cache = file.string();
  return "";
}

// Times every candidate on the slot's workload: one warm-up call each, then interleaved rounds
// (the order rotating, so that no path always runs first) until 7 rounds and 10 ms are done, or 15
// rounds; after 3 rounds a candidate 1.5x slower than the leader even in its best round stops
// running (a bfloat16 formula that calls Sleef's tanh, 8x slower than its table). Keeps the winner
// (lowest median), the per-round ratios' range against every other candidate (from 5 rounds on,
// without the lowest and the highest fifth: rounds preempted or slowed by a neighbour on a shared
// machine), on each path its faster form, and the gap between the forms on the winning path.
//
// On one thread: the paths differ in what a core does with each instruction set, and a parallel
// region's join on a shared, loaded machine waits whole scheduler slices (16 ms for an RMSNorm of
// 20 us on one such host) that would drown the difference.
//
// The clock is this thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared machine a round
// during which the process waits for a core would otherwise count the wait as the path's.
inline double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void measure(Slot& s, const std::vector<int>& cands) {
  using Clock = std::chrono::steady_clock;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { at::set_num_threads(n); }
  } restore{threads};
  const size_t n = cands.size();
  auto once = [&](size_t j) {
    s.current.store(cands[j], std::memory_order_release);
    const double t0 = thread_seconds();
    s.workload();
    return thread_seconds() - t0;
  };
  for (size_t j = 0; j < n; ++j) once(j);
  std::vector<std::vector<double>> times(n);
  std::vector<bool> active(n, true);
  const auto start = Clock::now();
  int rounds = 0;
  while (rounds < 15) {
    for (size_t k = 0; k < n; ++k) {
      const size_t j = (k + rounds) % n;
      if (active[j]) times[j].push_back(once(j));
    }
    ++rounds;
    if (rounds == 3) {  // a candidate whose best round took 1.5x the leader's median drops out
      double lead = 0;
      for (size_t j = 0; j < n; ++j) {
        std::vector<double> t = times[j];
        std::sort(t.begin(), t.end());
        if (lead == 0 || t[1] < lead) lead = t[1];
      }
      for (size_t j = 0; j < n; ++j) active[j] = *std::min_element(times[j].begin(), times[j].end()) < 1.5 * lead;
    }
    if (rounds >= 7 && std::chrono::duration<double>(Clock::now() - start).count() > 0.010) break;
  }
  s.current.store(-1, std::memory_order_release);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  size_t best = 0;
  std::vector<double> med(n);
  for (size_t j = 0; j < n; ++j) {
    med[j] = median(times[j]);
    if (med[j] < med[best]) best = j;
  }
  for (int i = 0; i < kIsaCount; ++i) {
    double fastest = 0;
    for (size_t j = 0; j < n; ++j)
      if (cands[j] / kMaxForms == i && (fastest == 0 || med[j] < fastest)) {
        fastest = med[j];
        s.best_form[i] = cands[j] % kMaxForms;
      }
  }
  s.form_gap = 0;
  for (size_t j = 0; j < n; ++j)
    if (j != best && cands[j] / kMaxForms == cands[best] / kMaxForms) s.form_gap = med[j] / med[best];
  s.comparisons.clear();
  for (size_t j = 0; j < n; ++j) {
    if (j == best) continue;
    std::vector<double> ratio(std::min(times[j].size(), times[best].size()));  // the rounds both ran
    for (size_t r = 0; r < ratio.size(); ++r) ratio[r] = times[j][r] / times[best][r];
    std::sort(ratio.begin(), ratio.end());
    // a round preempted or slowed by a neighbour does not make the range: a fifth of them each side
    const size_t cut = ratio.size() >= 5 ? ratio.size() / 5 : 0;
    const double lo = ratio[cut], hi = ratio[ratio.size() - 1 - cut];
    std::ostringstream c;
    c.precision(2);
    c << std::fixed;
    // "faster" only where every round agrees; otherwise the paths are level within the noise
    if (lo > 1.0) {
      c << median(ratio) << "x [" << lo << ", " << hi << "] faster than " << candidate_name(s, cands[j]);
    } else {
      c << "level with " << candidate_name(s, cands[j]) << " (" << median(ratio) << "x [" << lo << ", " << hi << "])";
    }
    s.comparisons.push_back(c.str());
  }
  std::ostringstream d;
  d.precision(3);
  d << std::fixed << "here (" << times[best].size() << " interleaved rounds of " << s.op
    << "'s workload on one thread, CPU time, median " << med[best] * 1e3
    << " ms; the range is the per-round ratios' without the most extreme fifth each side)";
  s.detail = d.str();
  s.measured = cands[best];
  s.cached = false;
}

inline std::string measured_reason(const Slot& s) {
  std::string out = candidate_name(s, s.measured) + ": " + join(s.comparisons, ", ") + " " + s.detail;
  if (s.cached) out += "; measured once on this machine, cached in " + repo().cache;
  return out;
}

// The path every op runs by the environment or set_isa(), or -1; `who` says which.
int imposed_isa(const char*& who) {
  Repo& r = repo();
  if (r.pinned_isa >= 0) {
    who = "set by set_isa()";
    return r.pinned_isa;
  }
  const char* forced = std::getenv("KERNEL_EXPLORER_ISA");
  if (!forced || !*forced) return -1;
  const std::vector<int> paths = runnable_isas();
  const int i = isa_index(forced);
  TORCH_CHECK(i >= 0 && std::find(paths.begin(), paths.end(), i) != paths.end(), r.name,
              ": KERNEL_EXPLORER_ISA=", forced, " is not a code path this CPU runs; unset it or use one of ",
              runnable_list());
  who = "forced by KERNEL_EXPLORER_ISA";
  return i;
}

// The slot's choice, made once: imposed on every op, cached, measured, or the only candidate.
int choose(int index) {
  Repo& r = repo();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  Slot& s = *r.slots[index];
  if (int c = s.current.load(std::memory_order_acquire); c >= 0) return c;
  auto settle = [&](int code, std::string reason) {
    s.reason = std::move(reason);
    s.current.store(code, std::memory_order_release);
    return code;
  };
  const char* who = nullptr;
  if (const int i = imposed_isa(who); i >= 0) {
    // on an imposed path each op keeps its faster form there, where measured (here or cached)
    int form = 0;
    if (!s.forms.empty()) {
      if (r.pinned_isa >= 0 && r.pinned_form >= 0) {
        form = r.pinned_form;
      } else if (s.measured >= 0 || read_cached(s)) {
        form = s.best_form[i];
      }
    }
    return settle(i * kMaxForms + form, std::string(isa_name(i)) + ": " + who);
  }
  if (s.parent >= 0) {  // a size class follows its parent unless the parent's forms ran close
    const int code = current_code(s.parent);
    const Slot& p = *r.slots[s.parent];
    if (s.forms.empty() || p.measured < 0 || p.form_gap <= 0 || p.form_gap > kSizeFlipsBelow) {
      std::ostringstream why;
      why.precision(2);
      why << std::fixed << candidate_name(s, code) << ": as " << p.op;
      if (p.form_gap > 0) why << " (its other form " << p.form_gap << "x slower there: a gap no size flips)";
      return settle(code, why.str());
    }
  }
  const std::vector<int> cands = candidates(s);
  if (cands.size() == 1 || !s.workload) {
    return settle(cands.front(), candidate_name(s, cands.front()) +
                                     (cands.size() == 1 ? ": the only code path this CPU runs"
                                                        : ": the widest path (not measured)"));
  }
  if (s.measured >= 0 || read_cached(s)) return settle(s.measured, measured_reason(s));
  try {
    measure(s, cands);
  } catch (const std::exception& e) {  // the widest path then, and nothing cached
    const std::string what = e.what();
    return settle(cands.front(), candidate_name(s, cands.front()) + ": the widest path (measuring the paths failed: " +
                                     what.substr(0, what.find('\n')) + ")");
  }
  const std::string note = write_cached(s);
  return settle(s.measured, measured_reason(s) + note);
}

// The running candidate of an op (path index * kMaxForms + form). Inside a parallel region before
// any choice (a worker cannot time the paths), the widest path runs and nothing is decided.
int current_code(int slot) {
  const int c = repo().slots[slot]->current.load(std::memory_order_acquire);
  if (c >= 0) return c;
  if (at::in_parallel_region()) return runnable_isas().front() * kMaxForms;
  return choose(slot);
}

// The path an op runs, and its form (0 where it has one).
inline int current_isa_index(int slot) { return current_code(slot) / kMaxForms; }
inline int current_form(int slot) { return current_code(slot) % kMaxForms; }
inline int current_form(const OpChoice& op) { return current_form(op.slot); }

// The repository-wide choice of a repository registered with one Workload (its first op's otherwise).
inline int current_isa_index() { return current_isa_index(std::max(repo().whole, 0)); }

// The path most ops run (ties: the earliest registered op's), every op's choice made first.
inline int main_isa() {
  Repo& r = repo();
  std::vector<int> isa;  // the ops' paths (size classes run their op's)
  for (size_t j = 0; j < r.slots.size(); ++j) {
    const int code = current_code(static_cast<int>(j));
    if (r.slots[j]->parent < 0) isa.push_back(code / kMaxForms);
  }
  int best = isa.front();
  long best_count = 0;
  for (int i : isa) {
    const long count = std::count(isa.begin(), isa.end(), i);
    if (count > best_count) best = i, best_count = count;
  }
  return best;
}

inline std::string current_isa() { return isa_name(main_isa()); }

// Whether a comparison ("1.04x [...] faster than avx512 lookup", "level with avx2 (...)") is against path i.
inline bool compares_with(const std::string& comparison, int i) {
  for (const char* lead : {"faster than ", "level with "}) {
    const size_t at = comparison.find(lead);
    if (at == std::string::npos) continue;
    const std::string rest = comparison.substr(at + std::strlen(lead));
    const std::string name = isa_name(i);
    if (rest.compare(0, name.size(), name) == 0 && (rest.size() == name.size() || !std::isalnum(rest[name.size()])))
      return true;
  }
  return false;
}

// Why isa() runs, in one line that starts "<isa()>: ": who imposed it, or the measurement (of the
// one op, or of the first op on that path with how many ops run it), then every op that runs
// another path and by how much it beat this one there.
inline std::string isa_reason() {
  const int m = main_isa();
  Repo& r = repo();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  const long ops = std::count_if(r.slots.begin(), r.slots.end(), [](const Slot* s) { return s->parent < 0; });
  if (ops == 1) return r.slots.front()->reason;
  const char* who = nullptr;
  if (imposed_isa(who) >= 0) return std::string(isa_name(m)) + ": " + who;
  std::ostringstream out;
  const Slot* first = nullptr;
  int same = 0;
  bool cached = false;
  for (const Slot* s : r.slots) {
    const int code = s->current.load(std::memory_order_acquire);
    cached = cached || s->cached;
    if (code / kMaxForms != m || s->parent >= 0) continue;
    ++same;
    if (!first) first = s;
  }
  out << isa_name(m) << ": " << same << " of " << ops << " ops run it (" << first->op << ": "
      << (first->measured >= 0 ? join(first->comparisons, ", ") + " " + first->detail : first->reason) << ")";
  for (const Slot* s : r.slots) {
    const int code = s->current.load(std::memory_order_acquire);
    if (code / kMaxForms == m || s->parent >= 0) continue;
    std::vector<std::string> against;
    for (const std::string& c : s->comparisons)
      if (compares_with(c, m)) against.push_back(c);
    out << "; " << s->op << " runs " << candidate_name(*s, code);
    if (!against.empty()) out << " (" << join(against, ", ") << ")";
  }
  if (cached) out << "; measured once on this machine, cached in " << r.cache;
  return out.str();
}

// One line per op: "silu bfloat16: avx512bf16 formula: 1.52x [...] faster than avx512bf16 lookup, ...".
inline std::vector<std::string> isa_choices() {
  main_isa();
  Repo& r = repo();
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  std::vector<std::string> out;
  for (const Slot* s : r.slots) {
    const int code = s->current.load(std::memory_order_acquire);
    std::string reason = s->reason;
    if (!s->forms.empty() && reason.rfind(candidate_name(*s, code), 0) != 0) {
      reason = candidate_name(*s, code) + " (" + reason + ")";  // an imposed path: say the form too
    }
    out.push_back(s->op + ": " + reason);
  }
  return out;
}

inline std::vector<std::string> isa_paths() {
  std::vector<std::string> out;
  for (int i : runnable_isas()) out.emplace_back(isa_name(i));
  return out;
}

inline void unchoose_all() {
  for (Slot* s : repo().slots) s->current.store(-1, std::memory_order_release);
}

// Puts every op on one path (tests, benchmarks, comparing paths); returns the path now active.
// "avx2 formula" also pins the form of the ops that have one; "avx2" leaves each op its faster
// form on that path where measured.
inline std::string set_isa(const std::string& name) {
  const size_t space = name.find(' ');
  const std::string isa = name.substr(0, space);
  const std::string form = space == std::string::npos ? "" : name.substr(space + 1);
  const int i = isa_index(isa);
  TORCH_CHECK(i >= 0, "unknown ISA '", isa,
              "'; use avx512bf16, avx512, avx2 or portable (optionally followed by a form such as 'formula')");
  const std::vector<int> paths = runnable_isas();
  TORCH_CHECK(std::find(paths.begin(), paths.end(), i) != paths.end(), "this CPU or build cannot run the ", isa,
              " code path; use one of ", runnable_list());
  Repo& r = repo();
  int f = -1;
  if (!form.empty()) {
    for (const Slot* s : r.slots)
      for (size_t k = 0; k < s->forms.size(); ++k)
        if (s->forms[k] == form) f = static_cast<int>(k);
    TORCH_CHECK(f >= 0, "no op of ", r.name, " has a form '", form, "'; use set_isa('", isa, "') alone");
  }
  std::lock_guard<std::recursive_mutex> lock(r.mutex);
  r.pinned_isa = i;
  r.pinned_form = f;
  unchoose_all();
  return isa;
}

// Undo set_isa(): back to the paths chosen by KERNEL_EXPLORER_ISA, the cached measurements or new
// ones (the explorer pins a path while a "bundled@avx2" candidate is on, and lets go on off).
inline std::string reset_isa() {
  {
    Repo& r = repo();
    std::lock_guard<std::recursive_mutex> lock(r.mutex);
    r.pinned_isa = r.pinned_form = -1;
    unchoose_all();
  }
  return current_isa();
}

}  // namespace
}  // namespace kx
