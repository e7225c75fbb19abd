// device_check_avx512.cc: every gather kernel of every Feistel version against operator(), on
// this CPU, with no dependency beyond a C++17 compiler. Built and run by device_check_avx512.sh
// (read its header); exits 1 on any mismatch.
//
// Per version (each row of kFeistelVersions) and level (portable = the SSE2 build on x86-64,
// sse4.1, avx2, avx512): every position of sizes around each power of two up to 2^23 and of 10^7
// (stride 1, several keys), windows at random starts with strides and counts around the
// kernels' blocks, stride 0, and windows of sizes up to 2^63 (the 64-bit position paths). The
// expected values come from the scalar operator() once per case; each kernel the CPU runs is
// compared with them ("match", or "MISMATCH:<cases>" and the first few cases), a level it lacks
// is reported as not available.
// Then ns per index of each kernel at n = 10^7.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "distsampler/feistel.h"
#include "distsampler/hash.h"

namespace {

using distsampler::FeistelPermutation;
using distsampler::detail::SimdLevel;
namespace detail = distsampler::detail;

using distsampler::FeistelVersionRow;
using distsampler::kFeistelVersions;
constexpr uint64_t kCanary = 0xdeadbeefcafef00dull;

struct Tally {
  uint64_t cases = 0;
  uint64_t indices = 0;
  uint64_t mismatched_cases = 0;
};

// tally[version's row of kFeistelVersions][level]
Tally tally[std::size(kFeistelVersions)][4];
size_t version_index(int version) {
  return static_cast<size_t>(&distsampler::check_feistel_version(version) - kFeistelVersions);
}
int level_index(SimdLevel level) { return static_cast<int>(level); }

// Compares every supported kernel's gather(first, stride, count) with operator() on `p`.
void check_case(const FeistelPermutation& p, uint64_t first, uint64_t stride, uint64_t count) {
  std::vector<uint64_t> expected(count);
  for (uint64_t j = 0; j < count; ++j) expected[j] = p(first + j * stride);
  std::vector<uint64_t> out(count + 1);
  for (SimdLevel level : detail::kSimdLevels) {
    if (!detail::simd_level_supported(level)) continue;
    Tally& t = tally[version_index(p.version())][level_index(level)];
    out.assign(count + 1, kCanary);
    p.gather(first, stride, count, out.data(), level);
    ++t.cases;
    t.indices += count;
    uint64_t bad = 0, first_bad = 0;
    for (uint64_t j = 0; j < count; ++j) {
      if (out[j] != expected[j] && bad++ == 0) first_bad = j;
    }
    const bool overrun = out[count] != kCanary;
    if (bad != 0 || overrun) {
      if (t.mismatched_cases++ < 5) {
        std::printf(
            "MISMATCH v%d %-8s n=%llu first=%llu stride=%llu count=%llu: "
            "%llu wrong values (first at j=%llu: got %llu, expected %llu)%s\n",
            p.version(), detail::simd_level_name(level), static_cast<unsigned long long>(p.size()),
            static_cast<unsigned long long>(first), static_cast<unsigned long long>(stride),
            static_cast<unsigned long long>(count), static_cast<unsigned long long>(bad),
            static_cast<unsigned long long>(first_bad),
            static_cast<unsigned long long>(bad ? out[first_bad] : 0),
            static_cast<unsigned long long>(bad ? expected[first_bad] : 0),
            overrun ? "; wrote past the window" : "");
      }
    }
  }
}

// Every position of sizes around powers of two up to 2^23, of 10^7, and of every size to 300.
void check_whole_orders(int version) {
  std::vector<uint64_t> sizes;
  for (uint64_t n = 1; n <= 300; ++n) sizes.push_back(n);
  for (int k = 9; k <= 23; ++k) {
    for (int64_t d : {-1, 0, 1}) sizes.push_back((uint64_t{1} << k) + static_cast<uint64_t>(d));
  }
  sizes.push_back(10000000);
  for (uint64_t n : sizes) {
    // Several keys where it is cheap; version 2's parity swap is on one key bit, so about half of
    // them exercise it.
    const int keys = n <= (uint64_t{1} << 16) ? 4 : 2;
    for (int key = 0; key < keys; ++key) {
      const uint64_t seed = distsampler::mix64(n * 4 + static_cast<uint64_t>(key));
      const FeistelPermutation p(n, seed, static_cast<uint64_t>(key),
                                 FeistelPermutation::kVersionDefaultRounds, version);
      check_case(p, 0, 1, n);
    }
  }
}

// Windows at random starts: counts below, at and above the kernels' blocks, strides, stride 0 at
// the positions of the values 0 and 1 (version 2's parity correction), and sizes up to 2^63.
void check_windows(int version) {
  std::vector<uint64_t> sizes = {1000, 65537, 1000003, 10000000, 100000000};
  for (int k : {31, 32, 33, 40, 47, 59, 60, 61, 62}) {
    for (int64_t d : {-1, 0, 1}) sizes.push_back((uint64_t{1} << k) + static_cast<uint64_t>(d));
  }
  sizes.push_back(1000000000000ull);
  sizes.push_back((uint64_t{1} << 63) - 1);
  sizes.push_back(uint64_t{1} << 63);
  const uint64_t counts[] = {1, 7, 15, 16, 17, 31, 33, 255, 256, 257, 1000, 4097, 65543};
  const uint64_t strides[] = {1, 2, 3, 8, 1000003, (uint64_t{1} << 33) + 1};
  uint64_t x = 0x243f6a8885a308d3ull;
  for (uint64_t n : sizes) {
    for (int key = 0; key < 2; ++key) {
      const FeistelPermutation p(n, n ^ (0x5eed + static_cast<uint64_t>(key)), 3,
                                 FeistelPermutation::kVersionDefaultRounds, version);
      for (uint64_t count : counts) {
        for (uint64_t stride : strides) {
          if ((count - 1) > (n - 1) / stride) continue;
          x = distsampler::mix64(x);
          check_case(p, x % (n - (count - 1) * stride), stride, count);
        }
      }
      for (uint64_t position : {uint64_t{0}, p.inverse(0), p.inverse(1), n - 1}) {
        check_case(p, position, 0, 100);
      }
    }
  }
}

// ns per index of gather with `level` (nan when the CPU lacks it) at n = 10^7, stride 1, in
// windows of 2^16 (512 KB of output, resident in L2), the best of 3 passes over the order.
double ns_per_index(int version, SimdLevel level, bool scalar) {
  const uint64_t n = 10000000, window = 1 << 16;
  const FeistelPermutation p(n, 1, 0, FeistelPermutation::kVersionDefaultRounds, version);
  std::vector<uint64_t> out(window);
  double best = 1e30;
  uint64_t sink = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t first = 0; first < n; first += window) {
      const uint64_t count = first + window <= n ? window : n - first;
      if (scalar) {
        for (uint64_t j = 0; j < count; ++j) out[j] = p(first + j);
      } else {
        p.gather(first, 1, count, out.data(), level);
      }
      sink += out[0];
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s < best) best = s;
  }
  if (sink == 1) std::printf(" ");  // keeps the loop
  return best * 1e9 / static_cast<double>(n);
}

}  // namespace

int main() {
  const auto start = std::chrono::steady_clock::now();
  const detail::CpuFeatures f = detail::cpu_features();
  std::printf("features (as the library detects them): sse4.1 %d, avx2 %d, avx512f %d, "
              "avx512vl %d, avx512bw %d, avx512dq %d\n",
              f.sse41, f.avx2, f.avx512f, f.avx512vl, f.avx512bw, f.avx512dq);
  detail::CpuFeatures all_avx512;
  all_avx512.sse41 = all_avx512.avx2 = all_avx512.avx512f = all_avx512.avx512vl =
      all_avx512.avx512bw = all_avx512.avx512dq = true;
  std::printf("dispatch: this CPU gets %s; a CPU with every AVX-512 feature would get %s "
              "(AVX-512 verified: %s)\n",
              detail::simd_level_name(detail::best_simd_level()),
              detail::simd_level_name(detail::select_simd_level(all_avx512)),
              detail::simd_level_verified(SimdLevel::kAvx512) ? "yes" : "no");
  std::fflush(stdout);

  for (const FeistelVersionRow& row : kFeistelVersions) {
    check_whole_orders(row.value);
    check_windows(row.value);
  }

  bool ok = true, avx512_ran = false, avx512_matched = true;
  std::printf("\n%-3s %-9s %-9s %8s %14s %14s\n", "ver", "kernel", "result", "cases", "indices",
              "ns/index@1e7");
  for (const FeistelVersionRow& row : kFeistelVersions) {
    const int version = row.value;
    for (SimdLevel level : detail::kSimdLevels) {
      const char* name = detail::simd_level_name(level);
      if (!detail::simd_level_supported(level)) {
        std::printf("v%-2d %-9s not available on this CPU\n", version, name);
        continue;
      }
      const Tally& t = tally[version_index(version)][level_index(level)];
      const bool matched = t.mismatched_cases == 0 && t.cases > 0;
      ok = ok && matched;
      if (level == SimdLevel::kAvx512) {
        avx512_ran = true;
        avx512_matched = avx512_matched && matched;
      }
      const std::string result =
          matched ? "match" : "MISMATCH:" + std::to_string(t.mismatched_cases);
      std::printf("v%-2d %-9s %-9s %8llu %14llu %14.2f\n", version, name, result.c_str(),
                  static_cast<unsigned long long>(t.cases),
                  static_cast<unsigned long long>(t.indices), ns_per_index(version, level, false));
      std::fflush(stdout);
    }
    std::printf("v%-2d %-9s %-9s %8s %14s %14.2f\n", version, "operator", "(scalar)", "", "",
                ns_per_index(version, SimdLevel::kPortable, true));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\nchecked in %.1f s\n", seconds);
  if (!avx512_ran) {
    std::printf("AVX-512: not available on this CPU; its kernels were not checked here.\n");
  } else if (avx512_matched) {
    std::printf("AVX-512: both versions' kernels matched operator() on this CPU. %s\n",
                detail::simd_level_verified(SimdLevel::kAvx512)
                    ? "The dispatch chooses them (kAvx512Verified in src/feistel.cc)."
                    : "The dispatch may choose them once this is recorded: kAvx512Verified in "
                      "src/feistel.cc.");
  }
  std::printf("%s\n", ok ? "PASS: every kernel this CPU runs matched operator()"
                         : "FAIL: a kernel differs from operator() (above)");
  return ok ? 0 : 1;
}
