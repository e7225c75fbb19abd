// loader_throughput: samples per second of distsampler's DataLoader over Fashion-MNIST's training
// set with the torch-exact DistributedSampler, epochs advancing, for several thread counts.
// Prints one line per setting: "distsampler threads=T samples_per_s=X batches=B seconds=S".
// Usage: loader_throughput [--data DIR] [--batch-size 64] [--world-size 2] [--rank 0]
//                          [--threads 0,1,2] [--prefetch 4] [--seconds 2]
//                          [--npy IMAGES.npy --npy-labels LABELS.npy]
// With --npy the samples are read from the file by NpyDataset instead of decoded into memory.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "distsampler/loader/data_loader.h"
#include "distsampler/loader/idx.h"
#include "distsampler/loader/npy.h"
#include "distsampler/sampler.h"

int main(int argc, char** argv) {
  std::string data = "/usr/share/datasets/fashion-mnist", threads_list = "0,1,2";
  std::string npy, npy_labels;
  uint64_t batch_size = 64, world_size = 2, rank = 0;
  unsigned prefetch = 4;
  double min_seconds = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--data")
      data = v;
    else if (a == "--batch-size")
      batch_size = std::stoull(v);
    else if (a == "--world-size")
      world_size = std::stoull(v);
    else if (a == "--rank")
      rank = std::stoull(v);
    else if (a == "--threads")
      threads_list = v;
    else if (a == "--prefetch")
      prefetch = static_cast<unsigned>(std::stoul(v));
    else if (a == "--seconds")
      min_seconds = std::stod(v);
    else if (a == "--npy")
      npy = v;
    else if (a == "--npy-labels")
      npy_labels = v;
    else {
      std::fprintf(stderr, "loader_throughput: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  std::shared_ptr<const distsampler::Dataset> dataset;
  if (npy.empty()) {
    dataset = std::make_shared<distsampler::InMemoryDataset>(distsampler::load_idx_dataset(
        data + "/train-images-idx3-ubyte.gz", data + "/train-labels-idx1-ubyte.gz"));
  } else {
    dataset = std::make_shared<distsampler::NpyDataset>(npy, npy_labels);
  }
  distsampler::SamplerOptions options;
  options.size = dataset->size();
  options.world_size = world_size;
  options.rank = rank;
  const distsampler::DistributedSampler sampler(options);

  std::stringstream list(threads_list);
  for (std::string item; std::getline(list, item, ',');) {
    const unsigned threads = static_cast<unsigned>(std::stoul(item));
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    uint64_t samples = 0, batches = 0, checksum = 0;
    double seconds = 0;
    for (uint64_t epoch = 0; seconds < min_seconds; ++epoch) {
      distsampler::DataLoader loader(dataset, sampler.epoch(epoch),
                                     {batch_size, false, threads, prefetch});
      for (distsampler::Batch batch; loader.next(batch);) {
        samples += batch.size();
        ++batches;
        checksum += batch.data[batch.data.size() / 2] + static_cast<uint64_t>(batch.labels[0]);
      }
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
    std::printf(
        "distsampler threads=%u samples_per_s=%.0f batches=%llu seconds=%.3f checksum=%llu\n",
        threads, static_cast<double>(samples) / seconds, static_cast<unsigned long long>(batches),
        seconds, static_cast<unsigned long long>(checksum));
  }
  return 0;
}
