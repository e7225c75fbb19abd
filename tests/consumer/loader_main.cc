// Batches an in-memory dataset with distsampler::loader and checks them against the view.
#include <distsampler/loader/data_loader.h>

#include <cstdio>
#include <memory>
#include <vector>

int main() {
  std::vector<unsigned char> bytes(16);
  for (unsigned i = 0; i < 16; ++i) bytes[i] = static_cast<unsigned char>(i);
  const auto dataset = std::make_shared<distsampler::InMemoryDataset>(
      distsampler::SampleSpec{{}, distsampler::DType::kUInt8}, bytes);
  distsampler::SamplerOptions options;
  options.size = 16;
  options.world_size = 2;
  const distsampler::DistributedSampler sampler(options);
  distsampler::DataLoader loader(dataset, sampler.epoch(0), {3, false, 2, 2});
  std::vector<uint64_t> got;
  for (distsampler::Batch batch; loader.next(batch);)
    got.insert(got.end(), batch.data.begin(), batch.data.end());
  const std::vector<uint64_t> want = {12, 9, 11, 13, 2, 15, 4, 7};
  std::printf("distsampler::loader: %s\n", got == want ? "ok" : "WRONG");
  return got == want ? 0 : 1;
}
