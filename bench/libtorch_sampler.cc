// libtorch_sampler: one rank's epoch with libtorch's
// torch::data::samplers::DistributedRandomSampler (Debian's libtorch-dev), timed like
// distsampler_epoch: set_epoch, reset, then next() for the rank's whole share. Prints one JSON
// object on stdout.
//
//   libtorch_sampler N W RANK
#include <torch/data/samplers/distributed.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "peak_memory.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: libtorch_sampler N W RANK\n");
    return 2;
  }
  const size_t n = std::strtoull(argv[1], nullptr, 10);
  const size_t w = std::strtoull(argv[2], nullptr, 10);
  const size_t rank = std::strtoull(argv[3], nullptr, 10);
  torch::data::samplers::DistributedRandomSampler sampler(n, w, rank);
  const auto start = std::chrono::steady_clock::now();
  sampler.set_epoch(1);
  sampler.reset();
  uint64_t count = 0;
  while (auto batch = sampler.next(1 << 16)) count += batch->size();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"seconds\": %.6f, \"count\": %llu, \"peak_kb\": %ld}\n", seconds,
              static_cast<unsigned long long>(count), peak_kb());
  return 0;
}
