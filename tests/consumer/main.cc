// Prints rank 0's epoch-0 indices of PyTorch's example (16 samples, 2 ranks) and checks them.
#include <distsampler/distsampler.h>

#include <cstdio>
#include <vector>

int main() {
  distsampler::SamplerOptions options;
  options.size = 16;
  options.world_size = 2;
  const distsampler::DistributedSampler sampler(options);
  const distsampler::RankView view = sampler.epoch(0);
  const std::vector<uint64_t> got(view.begin(), view.end());
  const std::vector<uint64_t> want = {12, 9, 11, 13, 2, 15, 4, 7};
  std::printf("distsampler %s: %s\n", DISTSAMPLER_VERSION_STRING, got == want ? "ok" : "WRONG");
  return got == want ? 0 : 1;
}
