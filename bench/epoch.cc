// distsampler_epoch: one workload of bench/compare.py, timed inside this process so that its
// peak memory can be read by the caller. Prints one JSON object on stdout.
//
//   distsampler_epoch epoch ORDER N W RANK   one rank's epoch 0 (ORDER: feistel | torch), streamed
//                                            through RankView::fill in chunks, as a loader would
//   distsampler_epoch randperm N             torch.randperm(n) with seed 0 (classic variant, as
//                                            Debian's PyTorch 1.13, and every PyTorch below
//                                            214,748,364), the torch order's build of an epoch
//
// "digest" is sum((j % 1000 + 1) * value_j) mod 2^64 over the output, which compare.py computes
// for PyTorch's output too: equal digests show the torch-exact results are the same bits.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "distsampler/order.h"
#include "distsampler/sampler.h"
#include "distsampler/torch_random.h"
#include "peak_memory.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

uint64_t parse(const char* text) { return std::strtoull(text, nullptr, 10); }

int run_epoch(const std::string& order, uint64_t n, uint64_t w, uint64_t rank) {
  distsampler::SamplerOptions options;
  options.size = n;
  options.world_size = w;
  options.rank = rank;
  options.order = distsampler::parse_order_kind(order);
  options.randperm = distsampler::RandpermVariant::kClassic;
  const distsampler::DistributedSampler sampler(options);
  constexpr uint64_t kChunk = 1 << 16;
  std::vector<uint64_t> chunk(kChunk);
  const auto start = Clock::now();
  const distsampler::RankView view = sampler.epoch(0);
  uint64_t digest = 0;
  uint64_t weight = 1;  // j % 1000 + 1, without a division per index
  for (uint64_t done = 0; done < view.size(); done += kChunk) {
    const uint64_t count = std::min(kChunk, view.size() - done);
    view.fill(done, count, chunk.data());
    for (uint64_t j = 0; j < count; ++j) {
      digest += weight * chunk[j];
      weight = weight == 1000 ? 1 : weight + 1;
    }
  }
  const double seconds = seconds_since(start);
  std::printf("{\"seconds\": %.6f, \"count\": %llu, \"digest\": %llu, \"peak_kb\": %ld}\n", seconds,
              static_cast<unsigned long long>(view.size()), static_cast<unsigned long long>(digest),
              peak_kb());
  return 0;
}

// The torch order's permutation as the library builds it for an epoch (make_epoch_order: the
// allocation included, as torch.randperm's own allocation is in its time, and untouched before
// the build, so the build's 2 MiB page hint applies), then a digest over every position.
int run_randperm(uint64_t n) {
  distsampler::OrderOptions options;
  options.size = n;
  options.kind = distsampler::OrderKind::kTorch;
  options.randperm = distsampler::RandpermVariant::kClassic;
  const auto start = Clock::now();
  const std::shared_ptr<const distsampler::EpochOrder> order =
      distsampler::make_epoch_order(options, 0);
  const double seconds = seconds_since(start);
  constexpr uint64_t kChunk = 1 << 16;
  std::vector<uint64_t> chunk(kChunk);
  uint64_t digest = 0;
  for (uint64_t done = 0; done < n; done += kChunk) {
    const uint64_t count = std::min(kChunk, n - done);
    order->gather(done, 1, count, chunk.data());
    for (uint64_t j = 0; j < count; ++j) digest += ((done + j) % 1000 + 1) * chunk[j];
  }
  std::printf("{\"seconds\": %.6f, \"count\": %llu, \"digest\": %llu, \"peak_kb\": %ld}\n", seconds,
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(digest),
              peak_kb());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "epoch" && argc == 6) {
    return run_epoch(argv[2], parse(argv[3]), parse(argv[4]), parse(argv[5]));
  }
  if (mode == "randperm" && argc == 3) {
    const uint64_t n = parse(argv[2]);
    return run_randperm(n);
  }
  std::fprintf(stderr,
               "usage: distsampler_epoch epoch feistel|torch N W RANK\n"
               "       distsampler_epoch randperm N\n");
  return 2;
}
