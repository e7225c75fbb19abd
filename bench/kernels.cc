// Google Benchmark of the kernels behind an epoch: Feistel gather per index (every SIMD kernel,
// against a plain loop writing the same number of uint64s), random-access latency, torch-exact
// materialization and the CLI's binary output path. Not part of the tests; see bench/README.md.
#include <benchmark/benchmark.h>

#include <initializer_list>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "cli.h"
#include "distsampler/feistel.h"
#include "distsampler/hash.h"
#include "distsampler/sampler.h"
#include "distsampler/torch_random.h"

namespace distsampler {
namespace {

constexpr uint64_t kWindow = 1 << 16;  // indices per call: 512 KB of output, resident in L2

// The baseline: the cheapest loop that writes kWindow uint64s, the floor for any order.
void BM_PlainWrite(benchmark::State& state) {
  std::vector<uint64_t> out(kWindow);
  uint64_t first = 0;
  for (auto _ : state) {
    for (uint64_t j = 0; j < kWindow; ++j) out[j] = first + j * 8;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
    first += kWindow;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kWindow));
}
BENCHMARK(BM_PlainWrite);

// Materializing a window of one rank's positions: gather(first, stride = W, kWindow).
// Arguments: SIMD level, n, stride. BM_FeistelGather is version 1 (the rows of earlier runs),
// BM_FeistelGatherV2 version 2, the default.
void feistel_gather(benchmark::State& state, int version) {
  const auto level = static_cast<detail::SimdLevel>(state.range(0));
  if (!detail::simd_level_supported(level)) {
    state.SkipWithError("SIMD level not supported on this CPU");
    return;
  }
  const uint64_t n = static_cast<uint64_t>(state.range(1));
  const uint64_t stride = static_cast<uint64_t>(state.range(2));
  const FeistelPermutation p(n, 0, 0, FeistelPermutation::kVersionDefaultRounds, version);
  std::vector<uint64_t> out(kWindow);
  uint64_t first = 0;
  for (auto _ : state) {
    if (first + kWindow * stride > n) first = 0;
    p.gather(first, stride, kWindow, out.data(), level);
    benchmark::DoNotOptimize(out.data());
    first += kWindow * stride;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kWindow));
}
void BM_FeistelGather(benchmark::State& state) { feistel_gather(state, 1); }
void BM_FeistelGatherV2(benchmark::State& state) { feistel_gather(state, 2); }
// Levels: 0 portable, 1 AVX2, 2 AVX-512, and for version 2 also 3, the portable kernel built for
// SSE4.1 (version 1 runs its portable kernel there).
void gather_levels(benchmark::internal::Benchmark* b, std::initializer_list<int> levels) {
  for (int level : levels) {
    for (int64_t n :
         {int64_t{1} << 27, int64_t{100000000}, (int64_t{1} << 26) + 1, int64_t{1000000000000}}) {
      b->Args({level, n, 1});
    }
    b->Args({level, 100000000, 8});
  }
}
BENCHMARK(BM_FeistelGather)->Apply([](benchmark::internal::Benchmark* b) {
  gather_levels(b, {0, 1, 2});
});
BENCHMARK(BM_FeistelGatherV2)->Apply([](benchmark::internal::Benchmark* b) {
  gather_levels(b, {0, 3, 1, 2});
});

// The cost of a round: version 2 at n = 10^8, stride 1, with 2 to 8 rounds (the default), per
// kernel. Arguments: SIMD level, rounds.
void BM_FeistelGatherV2Rounds(benchmark::State& state) {
  const auto level = static_cast<detail::SimdLevel>(state.range(0));
  if (!detail::simd_level_supported(level)) {
    state.SkipWithError("SIMD level not supported on this CPU");
    return;
  }
  const uint64_t n = 100000000;
  const FeistelPermutation p(n, 0, 0, static_cast<int>(state.range(1)),
                             FeistelPermutation::kVersion2);
  std::vector<uint64_t> out(kWindow);
  uint64_t first = 0;
  for (auto _ : state) {
    if (first + kWindow > n) first = 0;
    p.gather(first, 1, kWindow, out.data(), level);
    benchmark::DoNotOptimize(out.data());
    first += kWindow;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kWindow));
}
BENCHMARK(BM_FeistelGatherV2Rounds)->ArgsProduct({{0, 3, 1, 2}, {2, 4, 6, 8}});

// Latency of one position: each call's input depends on the previous output.
void feistel_random_access(benchmark::State& state, int version) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  const FeistelPermutation p(n, 0, 0, FeistelPermutation::kVersionDefaultRounds, version);
  uint64_t x = n / 3;
  for (auto _ : state) {
    x = p(x);
    benchmark::DoNotOptimize(x);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
void BM_FeistelRandomAccess(benchmark::State& state) { feistel_random_access(state, 1); }
void BM_FeistelRandomAccessV2(benchmark::State& state) { feistel_random_access(state, 2); }
BENCHMARK(BM_FeistelRandomAccess)->Arg(100000000)->Arg(int64_t{1} << 40);
BENCHMARK(BM_FeistelRandomAccessV2)->Arg(100000000)->Arg(int64_t{1} << 40);

// The same through the sampler: rank 3 of 8, view[i] at pseudorandom i (virtual call, partition).
void BM_RankViewRandomAccess(benchmark::State& state) {
  SamplerOptions options;
  options.size = static_cast<uint64_t>(state.range(0));
  options.world_size = 8;
  options.rank = 3;
  options.order = OrderKind::kFeistel;
  const RankView view = DistributedSampler(options).epoch(0);
  uint64_t i = 0;
  uint64_t sum = 0;
  for (auto _ : state) {
    i = mix64(i + sum) % view.size();
    sum += view[i];
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_RankViewRandomAccess)->Arg(100000000);

// torch.randperm(n) materialized, as the torch order does on every rank.
void BM_TorchRandperm(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  std::vector<uint32_t> perm(n);
  for (auto _ : state) {
    torch_randperm(n, 0, RandpermVariant::kClassic, perm.data());
    benchmark::DoNotOptimize(perm.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_TorchRandperm)->Arg(1000000)->Arg(10000000)->Unit(benchmark::kMillisecond);

// The torch order's rank gather alone, the permutation already built (built once, outside the
// timing): rank 3 of W = 8 reads its positions 3, 11, 19, ... in windows through RankView::fill,
// as the Python sampler and the CLI do. Arguments: n, W.
void BM_TorchGather(benchmark::State& state) {
  SamplerOptions options;
  options.size = static_cast<uint64_t>(state.range(0));
  options.world_size = static_cast<uint64_t>(state.range(1));
  options.rank = 3;
  options.randperm = RandpermVariant::kClassic;
  const RankView view = DistributedSampler(options).epoch(0);
  std::vector<uint64_t> out(kWindow);
  uint64_t first = 0;
  for (auto _ : state) {
    if (first + kWindow > view.size()) first = 0;
    view.fill(first, kWindow, out.data());
    benchmark::DoNotOptimize(out.data());
    first += kWindow;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kWindow));
}
BENCHMARK(BM_TorchGather)->Args({100000000, 8})->Args({100000000, 64});

// The CLI's `indices --format binary` path, in process, into a stream that drops the bytes.
class NullBuffer : public std::streambuf {
 protected:
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
  int overflow(int c) override { return c; }
};

void BM_CliBinary(benchmark::State& state) {
  const std::string order = state.range(0) == 0 ? "feistel" : "torch";
  const std::string count = "2000000";
  NullBuffer buffer;
  std::ostream out(&buffer);
  std::ostream err(&buffer);
  const std::vector<std::string> args = {"indices",      "--order",  order,    "--size", "16000000",
                                         "--world-size", "8",        "--rank", "0",      "--count",
                                         count,          "--format", "binary"};
  for (auto _ : state) {
    if (cli::run(args, out, err) != 0) state.SkipWithError("distsampler indices failed");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * std::stoll(count));
  state.SetLabel(order);
}
BENCHMARK(BM_CliBinary)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace distsampler

BENCHMARK_MAIN();
