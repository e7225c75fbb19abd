// libtorch_train: data-parallel training of a small libtorch MLP on Fashion-MNIST under mpirun,
// the data read through torch::data::make_data_loader with distsampler's libtorch sampler
// (PyTorch's DistributedSampler order), gradients averaged across ranks with MPI_Allreduce.
// Every rank must end with the same weights, bit for bit: the program exits 3 otherwise.
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bin/libtorch_train
//   build/bin/libtorch_train --help
#include <mpi.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_flags.h"
#include "mpi_main.h"
#include "distsampler/launch/env.h"
#include "distsampler/libtorch/sampler.h"
#include "distsampler/loader/idx.h"

namespace {

using examples::kAtLeastOne;
using examples::kDecimal;
using examples::library_check;

struct Flags {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string order = "torch";
  std::string seed = "0";
  uint64_t epochs = 3;
  uint64_t batch_size = 64;     // per rank
  uint64_t train_size = 12000;  // the first images of the training set; 0: all 60000
  uint64_t hidden = 64;
  uint64_t workers = 0;  // DataLoader worker threads per rank
  uint64_t threads = 1;  // torch intra-op threads per rank
  double lr = 0.1;
  double min_accuracy = 0;  // exit 1 below it
};

void add_flags(CLI::App& app, Flags& f) {
  app.option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last one counts
  app.add_option("--data", f.data, "Fashion-MNIST directory (the four idx .gz files)");
  app.add_option("--order", f.order, "sampler order: torch (PyTorch's) or feistel")
      ->check(library_check([](const std::string& s) { distsampler::parse_order_kind(s); }));
  app.add_option("--seed", f.seed, "sampler and initialization seed, in [-2^63, 2^64)")
      ->check(library_check([](const std::string& s) { distsampler::Seed::parse(s); }));
  app.add_option("--epochs", f.epochs, "epochs to train")->transform(kDecimal)->check(kAtLeastOne);
  app.add_option("--batch-size", f.batch_size, "batch size per rank")
      ->transform(kDecimal)
      ->check(kAtLeastOne);
  app.add_option("--train-size", f.train_size, "train on the first N images (0: all 60000)")
      ->transform(kDecimal);
  app.add_option("--hidden", f.hidden, "hidden units")->transform(kDecimal)->check(kAtLeastOne);
  app.add_option("--workers", f.workers, "torch DataLoader worker threads per rank")
      ->transform(kDecimal);
  app.add_option("--threads", f.threads, "torch intra-op threads per rank")
      ->transform(kDecimal)
      ->check(kAtLeastOne);
  app.add_option("--lr", f.lr, "SGD learning rate");
  app.add_option("--min-accuracy", f.min_accuracy,
                 "exit 1 when the final test accuracy is below this");
}

// Images scaled to [0, 1] as a float [n, 784] tensor, labels as int64 [n].
struct Tensors {
  torch::Tensor images, labels;
};

Tensors load(const std::string& images, const std::string& labels, uint64_t limit) {
  const distsampler::InMemoryDataset raw = distsampler::load_idx_dataset(images, labels);
  const int64_t n = static_cast<int64_t>(limit == 0 ? raw.size() : std::min(limit, raw.size()));
  const int64_t pixels = static_cast<int64_t>(raw.spec().elements());
  torch::Tensor bytes =
      torch::from_blob(const_cast<unsigned char*>(raw.data().data()), {n, pixels}, torch::kUInt8);
  torch::Tensor y = torch::from_blob(const_cast<int64_t*>(raw.labels().data()), {n}, torch::kInt64);
  return {bytes.to(torch::kFloat32).div_(255.0), y.clone()};
}

// Sample i is (image i, label i); torch::data::transforms::Stack<> makes the batches.
struct FashionMnist : torch::data::datasets::Dataset<FashionMnist> {
  explicit FashionMnist(Tensors t) : t(std::move(t)) {}
  torch::data::Example<> get(size_t i) override {
    return {t.images[static_cast<int64_t>(i)], t.labels[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return t.images.size(0); }
  Tensors t;
};

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

int run(const Flags& flags) {
  int mpi_rank = 0, mpi_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  const uint64_t rank = static_cast<uint64_t>(mpi_rank), world = static_cast<uint64_t>(mpi_size);
  // When a launcher set its variables they must agree with MPI's view of the job.
  if (const auto env = distsampler::detect_dist_env()) {
    if (env->rank != rank || env->world_size != world) {
      throw std::runtime_error("launcher (" + env->source + ") says rank " +
                               std::to_string(env->rank) + " of " +
                               std::to_string(env->world_size) + ", MPI says " +
                               std::to_string(rank) + " of " + std::to_string(world));
    }
  }
  torch::set_num_threads(static_cast<int>(flags.threads));

  const Tensors train = load(flags.data + "/train-images-idx3-ubyte.gz",
                             flags.data + "/train-labels-idx1-ubyte.gz", flags.train_size);
  const Tensors test =
      load(flags.data + "/t10k-images-idx3-ubyte.gz", flags.data + "/t10k-labels-idx1-ubyte.gz", 0);

  distsampler::SamplerOptions options;
  options.size = static_cast<uint64_t>(train.images.size(0));
  options.world_size = world;
  options.rank = rank;
  options.seed = distsampler::Seed::parse(flags.seed);
  options.order = distsampler::parse_order_kind(flags.order);
  options.randperm = distsampler::libtorch::kLibtorchRandperm;
  distsampler::libtorch::DistributedSampler sampler(options);
  // The loader holds a copy of the sampler; copies share one state, so set_epoch below reaches it.
  auto loader = torch::data::make_data_loader(
      FashionMnist(train).map(torch::data::transforms::Stack<>()), sampler,
      torch::data::DataLoaderOptions().batch_size(flags.batch_size).workers(flags.workers));

  torch::manual_seed(options.seed.bits());
  const auto hidden = static_cast<int64_t>(flags.hidden);
  torch::nn::Sequential model(torch::nn::Linear(train.images.size(1), hidden), torch::nn::ReLU(),
                              torch::nn::Linear(hidden, 10));
  // Every rank starts from rank 0's weights, as DistributedDataParallel does.
  for (torch::Tensor& p : model->parameters()) {
    MPI_Bcast(p.data_ptr<float>(), static_cast<int>(p.numel()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(flags.lr));

  double accuracy = 0;
  const double t0 = MPI_Wtime();
  for (uint64_t epoch = 0; epoch < flags.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    model->train();
    double sums[2] = {0, 0};  // loss summed over steps, steps
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      torch::Tensor loss =
          torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      loss.backward();
      for (torch::Tensor& p : model->parameters()) {
        torch::Tensor g = p.grad();
        MPI_Allreduce(MPI_IN_PLACE, g.data_ptr<float>(), static_cast<int>(g.numel()), MPI_FLOAT,
                      MPI_SUM, MPI_COMM_WORLD);
        g.div_(static_cast<double>(world));
      }
      optimizer.step();
      sums[0] += loss.item<double>(), sums[1] += 1;
    }
    MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);

    // Test accuracy: rank r scores test images r, r + W, ...; the counts are summed.
    torch::NoGradGuard no_grad;
    model->eval();
    const torch::Tensor mine = torch::arange(mpi_rank, test.images.size(0), mpi_size);
    const torch::Tensor predicted = model->forward(test.images.index_select(0, mine)).argmax(1);
    int64_t counts[2] = {predicted.eq(test.labels.index_select(0, mine)).sum().item<int64_t>(),
                         mine.size(0)};
    MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    accuracy = static_cast<double>(counts[0]) / static_cast<double>(counts[1]);
    if (rank == 0) {
      std::printf("epoch %" PRIu64 ": %.0f steps per rank, mean loss %.4f, test accuracy %.4f\n",
                  epoch, sums[1] / static_cast<double>(world), sums[0] / sums[1], accuracy);
    }
  }

  // Every rank must hold the same weights, bit for bit.
  uint64_t checksum = 0xcbf29ce484222325ULL;
  for (const torch::Tensor& p : model->parameters()) {
    const torch::Tensor c = p.detach().contiguous();
    checksum = fnv1a(c.data_ptr<float>(), static_cast<size_t>(c.numel()) * sizeof(float), checksum);
  }
  std::vector<uint64_t> all(world);
  MPI_Allgather(&checksum, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  bool identical = true;
  for (uint64_t c : all) identical = identical && c == all[0];
  if (rank == 0) {
    std::printf("np=%" PRIu64 ", %" PRIu64
                " training images, %.1f s: final test accuracy %.4f, "
                "weights identical on all ranks: %s (%016" PRIx64 ")\n",
                world, options.size, MPI_Wtime() - t0, accuracy, identical ? "yes" : "NO",
                checksum);
  }
  if (!identical) return 3;
  if (accuracy < flags.min_accuracy) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "libtorch_train: error: test accuracy %.4f is below --min-accuracy %.4f\n",
                   accuracy, flags.min_accuracy);
    }
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app(
      "Data-parallel training of a libtorch MLP on Fashion-MNIST, the data read through "
      "torch::data::make_data_loader with distsampler's libtorch sampler, gradients averaged "
      "with MPI_Allreduce; exits 3 unless every rank ends with identical weights.",
      "libtorch_train");
  app.footer("Run: mpirun --allow-run-as-root --oversubscribe -np 2 libtorch_train");
  add_flags(app, flags);
  return examples::mpi_main(argc, argv, app, [&](int, int) { return run(flags); });
}
