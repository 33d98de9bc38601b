// Which compiled code path a bundled kernel runs: chosen by measurement, once per machine.
//
// The widest instruction set is not always the fastest path: a path can lose to a narrower one on
// some hosts (one Zen 4 host ran the attention kernel's AVX-512 path at half its AVX2 speed, a
// compiler fault since fixed in flash_attn_isa.h), and paths of equal width differ by op and dtype.
// So at first use each repository times the paths this CPU runs on a workload of its own (a few
// representative shapes, interleaved rounds on one thread, in CPU time, about 0.1 s), keeps the
// fastest, and writes the choice to a cache file keyed by the CPU, this build of the library and
// the torch library it runs against; later processes read it. KERNEL_EXPLORER_ISA=<path> forces a
// path; set_isa() switches one at run time; isa_reason() says why the path runs ("avx2: 1.87x
// [1.80, 1.93] faster than avx512bf16 here ...").
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
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
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

struct Choice {
  std::atomic<int> current{-1};  // index of the running path; -1 until chosen
  std::mutex mutex;
  std::string reason;
  const char* repo = "kernel";
  void (*workload)() = nullptr;  // runs the repository's representative shapes once
};

inline Choice& choice() {
  static Choice* c = new Choice;  // never destroyed: ops may run during static destruction
  return *c;
}

// A registration unit names its workload once, at global scope: `static kx::Workload w("rmsnorm", &fn);`
struct Workload {
  Workload(const char* repo, void (*fn)()) {
    choice().repo = repo;
    choice().workload = fn;
  }
};

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

std::filesystem::path cache_file(const std::string& key) {
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
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : key) h = (h ^ ch) * 1099511628211ull;
  char name[17];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(h));
  return root / "isa-choice" / (std::string(choice().repo) + "-" + name + ".txt");
}

std::string cache_key(const std::vector<int>& candidates) {
  std::ostringstream s;
  s << choice().repo << '|' << cpu_brand() << '|';
  for (int i : candidates) s << isa_name(i) << ',';
  s << '|' << library_identity(reinterpret_cast<void*>(&anchor)) << '|'
    << library_identity(reinterpret_cast<void*>(&at::get_num_threads));
  return s.str();
}

// Times every candidate on the workload: one warm-up call each, then interleaved rounds (the
// order rotating, so that no path always runs first) until 3 rounds and 0.12 s are done, or 9
// rounds. Returns the winner (lowest median) and the reason, with the per-round ratios' range
// (from 5 rounds on, without the lowest and the highest: a round preempted on a shared machine).
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

int measure(const std::vector<int>& candidates, std::string& reason) {
  using Clock = std::chrono::steady_clock;
  Choice& c = choice();
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { at::set_num_threads(n); }
  } restore{threads};
  const size_t n = candidates.size();
  auto once = [&](size_t j) {
    c.current.store(candidates[j], std::memory_order_release);
    const double t0 = thread_seconds();
    c.workload();
    return thread_seconds() - t0;
  };
  for (size_t j = 0; j < n; ++j) once(j);
  std::vector<std::vector<double>> times(n);
  const auto start = Clock::now();
  int rounds = 0;
  while (rounds < 9) {
    for (size_t k = 0; k < n; ++k) {
      const size_t j = (k + rounds) % n;
      times[j].push_back(once(j));
    }
    ++rounds;
    if (rounds >= 3 && std::chrono::duration<double>(Clock::now() - start).count() > 0.12) break;
  }
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
  std::ostringstream s;
  s.precision(2);
  s << std::fixed << isa_name(candidates[best]) << ":";
  const char* sep = " ";
  for (size_t j = 0; j < n; ++j) {
    if (j == best) continue;
    std::vector<double> ratio(times[j].size());
    for (size_t r = 0; r < ratio.size(); ++r) ratio[r] = times[j][r] / times[best][r];
    std::sort(ratio.begin(), ratio.end());
    const size_t cut = ratio.size() >= 5 ? 1 : 0;  // one preempted round does not make the range
    const double* lo = &ratio[cut];
    const double* hi = &ratio[ratio.size() - 1 - cut];
    // "faster" only where every round agrees; otherwise the paths are level within the noise
    if (*lo > 1.0) {
      s << sep << median(ratio) << "x [" << *lo << ", " << *hi << "] faster than " << isa_name(candidates[j]);
    } else {
      s << sep << "level with " << isa_name(candidates[j]) << " (" << median(ratio) << "x [" << *lo << ", " << *hi
        << "])";
    }
    sep = ", ";
  }
  s << " here (" << rounds << " interleaved rounds of " << c.repo << "'s workload on one thread, CPU time, median "
    << med[best] * 1e3 << " ms; the range is the per-round ratios' without the most extreme each side)";
  reason = s.str();
  return candidates[best];
}

// The choice, made once: forced, cached, measured, or the only path.
int choose() {
  Choice& c = choice();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (int i = c.current.load(std::memory_order_acquire); i >= 0) return i;
  const std::vector<int> paths = runnable_isas();
  int chosen = paths.front();
  if (const char* forced = std::getenv("KERNEL_EXPLORER_ISA"); forced && *forced) {
    const int i = isa_index(forced);
    TORCH_CHECK(i >= 0 && std::find(paths.begin(), paths.end(), i) != paths.end(), c.repo,
                ": KERNEL_EXPLORER_ISA=", forced, " is not a code path this CPU runs; unset it or use one of ",
                runnable_list());
    c.reason = std::string(forced) + ": forced by KERNEL_EXPLORER_ISA";
    c.current.store(i, std::memory_order_release);
    return i;
  }
  std::vector<int> candidates;
  for (int i : paths)
    if (i != 3 || paths.size() == 1) candidates.push_back(i);
  if (candidates.size() == 1 || !c.workload) {
    c.reason = std::string(isa_name(chosen)) +
               (candidates.size() == 1 ? ": the only code path this CPU runs" : ": the widest path (not measured)");
    c.current.store(chosen, std::memory_order_release);
    return chosen;
  }
  const std::filesystem::path file = cache_file(cache_key(candidates));
  if (!file.empty()) {
    std::ifstream in(file);
    std::string name, reason;
    if (in && std::getline(in, name) && std::getline(in, reason)) {
      const int i = isa_index(name);
      if (std::find(candidates.begin(), candidates.end(), i) != candidates.end()) {
        c.reason = reason + "; measured once on this machine, cached in " + file.string();
        c.current.store(i, std::memory_order_release);
        return i;
      }
    }
  }
  std::string reason;
  try {
    chosen = measure(candidates, reason);
  } catch (const std::exception& e) {  // the widest path then, and nothing cached
    c.reason = std::string(isa_name(chosen)) + ": the widest path (measuring the paths failed: " +
               std::string(e.what()).substr(0, std::string(e.what()).find('\n')) + ")";
    c.current.store(chosen, std::memory_order_release);
    return chosen;
  }
  c.reason = reason;
  if (!file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    const std::filesystem::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
    std::ofstream out(tmp);
    if (!ec && out && (out << isa_name(chosen) << '\n' << reason << '\n') && (out.close(), true)) {
      std::filesystem::rename(tmp, file, ec);
    }
    if (ec || !out) c.reason += "; not cached (" + file.parent_path().string() + " is not writable)";
  }
  c.current.store(chosen, std::memory_order_release);
  return chosen;
}

// The running path's index. Inside a parallel region before any choice (a worker cannot time the
// paths), the widest path runs and nothing is decided.
inline int current_isa_index() {
  const int i = choice().current.load(std::memory_order_acquire);
  if (i >= 0) return i;
  if (at::in_parallel_region()) return runnable_isas().front();
  return choose();
}

inline std::string current_isa() { return isa_name(current_isa_index()); }

inline std::string isa_reason() {
  current_isa_index();
  std::lock_guard<std::mutex> lock(choice().mutex);
  return choice().reason;
}

inline std::vector<std::string> isa_paths() {
  std::vector<std::string> out;
  for (int i : runnable_isas()) out.emplace_back(isa_name(i));
  return out;
}

// Switch the code path (tests, benchmarks, comparing paths); returns the one now active.
inline std::string set_isa(const std::string& isa) {
  const int i = isa_index(isa);
  TORCH_CHECK(i >= 0, "unknown ISA '", isa, "'; use avx512bf16, avx512, avx2 or portable");
  const std::vector<int> paths = runnable_isas();
  TORCH_CHECK(std::find(paths.begin(), paths.end(), i) != paths.end(), "this CPU or build cannot run the ", isa,
              " code path; use one of ", runnable_list());
  Choice& c = choice();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.reason = isa + ": set by set_isa()";
  c.current.store(i, std::memory_order_release);
  return isa;
}

// Undo set_isa(): back to the path chosen by KERNEL_EXPLORER_ISA, the cached measurement or a new
// one (the explorer pins a path while a "bundled@avx2" candidate is on, and lets go on off).
inline std::string reset_isa() {
  {
    Choice& c = choice();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.current.store(-1, std::memory_order_release);
    c.reason.clear();
  }
  return current_isa();
}

}  // namespace
}  // namespace kx
