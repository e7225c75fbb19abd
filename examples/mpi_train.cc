// mpi_train: data-parallel softmax regression on Fashion-MNIST, gradients averaged with
// MPI_Allreduce, data read through distsampler's sampler and DataLoader. Reproduces the three
// experiments of the classic DistributedSampler story:
//   --variant correct       each rank reads its 1/W share, a new order every epoch
//   --variant no-set-epoch  each rank reads its share, but always epoch 0's order (the forgotten
//                           sampler.set_epoch(e)): every epoch replays the same batches
//   --variant no-sampler    no distributed sampler: every rank shuffles and reads the whole
//                           dataset by itself, so an epoch costs W times the steps
// Run:  mpirun --allow-run-as-root --oversubscribe -np 2 build/bin/mpi_train --variant correct
// Rank 0 writes OUT_DIR/<variant>_np<W>.csv (step, epoch, loss) and ..._summary.csv.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_flags.h"
#include "mpi_main.h"
#include "distsampler/launch/env.h"
#include "distsampler/loader/data_loader.h"
#include "distsampler/loader/idx.h"
#include "distsampler/sampler.h"

namespace {

using examples::kAtLeastOne;
using examples::kDecimal;
using examples::library_check;

using distsampler::Batch;
using distsampler::DataLoader;
using distsampler::InMemoryDataset;

constexpr int kClasses = 10;
constexpr int kPixels = 28 * 28;
constexpr int kParams = kClasses * kPixels + kClasses;  // weights, then biases

struct Flags {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string variant = "correct";
  std::string out_dir = ".";
  std::string order = "torch";
  uint64_t epochs = 3;
  uint64_t batch_size = 64;  // per rank
  uint64_t train_size = 0;   // 0: all 60000
  uint64_t seed = 0;
  unsigned threads = 1;
  double lr = 0.1;
  double min_accuracy = 0;  // exit 1 below it
};

void add_flags(CLI::App& app, Flags& f) {
  app.option_defaults()->always_capture_default()->multi_option_policy(
      CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last one counts
  app.add_option("--data", f.data, "Fashion-MNIST directory (the four idx .gz files)");
  app.add_option("--variant", f.variant, "sampler variant")
      ->check(CLI::IsMember({"correct", "no-set-epoch", "no-sampler"}));
  app.add_option("--out-dir", f.out_dir, "directory for rank 0's CSV files");
  app.add_option("--order", f.order, "sampler order: torch or feistel")
      ->check(library_check([](const std::string& s) { distsampler::parse_order_kind(s); }));
  app.add_option("--epochs", f.epochs, "epochs to train")->transform(kDecimal)->check(kAtLeastOne);
  app.add_option("--batch-size", f.batch_size, "batch size per rank")
      ->transform(kDecimal)
      ->check(kAtLeastOne);
  app.add_option("--train-size", f.train_size, "train on the first N samples (0: all 60000)")
      ->transform(kDecimal);
  app.add_option("--seed", f.seed, "sampler seed")->transform(kDecimal);
  app.add_option("--threads", f.threads, "DataLoader threads per rank")->transform(kDecimal);
  app.add_option("--lr", f.lr, "learning rate");
  app.add_option("--min-accuracy", f.min_accuracy,
                 "exit 1 when the final test accuracy is below this");
}

// The first `n` samples of a dataset (all when n is 0 or too large).
std::shared_ptr<InMemoryDataset> head(InMemoryDataset full, uint64_t n) {
  if (n == 0 || n >= full.size()) return std::make_shared<InMemoryDataset>(std::move(full));
  const uint64_t bytes = full.spec().bytes();
  std::vector<unsigned char> data(full.data().begin(),
                                  full.data().begin() + static_cast<std::ptrdiff_t>(n * bytes));
  std::vector<int64_t> labels(full.labels().begin(),
                              full.labels().begin() + static_cast<std::ptrdiff_t>(n));
  return std::make_shared<InMemoryDataset>(full.spec(), std::move(data), std::move(labels));
}

// Softmax probabilities of one image (pixels scaled to [0, 1]) into p; returns the argmax.
int forward(const std::vector<float>& w, const unsigned char* image, float* p) {
  float x[kPixels];
  for (int k = 0; k < kPixels; ++k) x[k] = image[k] * (1.0f / 255.0f);
  float top = -INFINITY;
  int best = 0;
  for (int c = 0; c < kClasses; ++c) {
    const float* row = w.data() + c * kPixels;
    float z = w[kClasses * kPixels + c];
    for (int k = 0; k < kPixels; ++k) z += row[k] * x[k];
    p[c] = z;
    if (z > top) top = z, best = c;
  }
  float sum = 0;
  for (int c = 0; c < kClasses; ++c) sum += p[c] = std::exp(p[c] - top);
  for (int c = 0; c < kClasses; ++c) p[c] /= sum;
  return best;
}

// Adds the batch's mean cross-entropy gradient to grad[0, kParams) and returns the mean loss.
double accumulate_gradient(const std::vector<float>& w, const Batch& batch,
                           std::vector<double>& grad) {
  double loss = 0;
  const double scale = 1.0 / static_cast<double>(batch.size());
  for (uint64_t j = 0; j < batch.size(); ++j) {
    const unsigned char* image = batch.data.data() + j * batch.sample_bytes;
    float p[kClasses];
    forward(w, image, p);
    const int y = static_cast<int>(batch.labels[j]);
    loss -= std::log(std::max(p[y], 1e-30f));
    for (int c = 0; c < kClasses; ++c) {
      const double d = (p[c] - (c == y ? 1.0 : 0.0)) * scale;
      double* row = grad.data() + c * kPixels;
      for (int k = 0; k < kPixels; ++k) row[k] += d * image[k] * (1.0 / 255.0);
      grad[kClasses * kPixels + c] += d;
    }
  }
  return loss * scale;
}

uint64_t fnv1a(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 2) return NAN;
  double ma = 0, mb = 0;
  for (size_t i = 0; i < n; ++i) ma += a[i], mb += b[i];
  ma /= n, mb /= n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

int run(const Flags& flags) {
  int mpi_rank = 0, mpi_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  // The launcher's variables must agree with MPI's view of the job.
  const distsampler::DistEnv env = distsampler::resolve_dist_env();
  if (env.rank != static_cast<uint64_t>(mpi_rank) ||
      env.world_size != static_cast<uint64_t>(mpi_size)) {
    throw std::runtime_error("launcher (" + env.source + ") says rank " + std::to_string(env.rank) +
                             " of " + std::to_string(env.world_size) + ", MPI says " +
                             std::to_string(mpi_rank) + " of " + std::to_string(mpi_size));
  }
  const uint64_t rank = env.rank, world = env.world_size;

  const auto train = head(distsampler::load_idx_dataset(flags.data + "/train-images-idx3-ubyte.gz",
                                                        flags.data + "/train-labels-idx1-ubyte.gz"),
                          flags.train_size);
  const InMemoryDataset test = distsampler::load_idx_dataset(
      flags.data + "/t10k-images-idx3-ubyte.gz", flags.data + "/t10k-labels-idx1-ubyte.gz");

  distsampler::SamplerOptions options;
  options.size = train->size();
  options.seed = distsampler::Seed(flags.seed);
  options.order = distsampler::parse_order_kind(flags.order);
  if (flags.variant == "no-sampler") {
    // Each process shuffles the whole dataset with its own generator, as DataLoader(shuffle=True)
    // does in separate processes.
    options.world_size = 1;
    options.rank = 0;
    options.seed = distsampler::Seed(flags.seed + 1000003 * rank);
  } else {
    options.world_size = world;
    options.rank = rank;
  }
  const distsampler::DistributedSampler sampler(options);

  std::vector<float> w(kParams, 0.0f);
  std::vector<double> grad(kParams + 1);  // the gradient, then the loss: one allreduce per step
  std::vector<double> step_loss;
  std::vector<std::vector<double>> epoch_losses;
  std::vector<double> accuracy;
  const double t0 = MPI_Wtime();
  for (uint64_t epoch = 0; epoch < flags.epochs; ++epoch) {
    const uint64_t view_epoch = flags.variant == "no-set-epoch" ? 0 : epoch;
    DataLoader loader(train, sampler.epoch(view_epoch),
                      {flags.batch_size, false, flags.threads, 4});
    epoch_losses.emplace_back();
    for (Batch batch; loader.next(batch);) {
      std::fill(grad.begin(), grad.end(), 0.0);
      grad[kParams] = accumulate_gradient(w, batch, grad);
      MPI_Allreduce(MPI_IN_PLACE, grad.data(), kParams + 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      for (int k = 0; k < kParams; ++k) {
        w[k] -= static_cast<float>(flags.lr * grad[k] / static_cast<double>(world));
      }
      step_loss.push_back(grad[kParams] / static_cast<double>(world));
      epoch_losses.back().push_back(step_loss.back());
    }
    // Test accuracy: rank r scores test images r, r + W, ...; the counts are summed.
    uint64_t counts[2] = {0, 0};
    std::vector<unsigned char> image(kPixels);
    for (uint64_t i = rank; i < test.size(); i += world) {
      test.read(i, image.data());
      float p[kClasses];
      counts[0] += forward(w, image.data(), p) == test.label(i) ? 1 : 0;
      ++counts[1];
    }
    MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    accuracy.push_back(static_cast<double>(counts[0]) / static_cast<double>(counts[1]));
    if (rank == 0) {
      std::printf(
          "%s np=%" PRIu64 " epoch %" PRIu64 ": %zu steps, mean loss %.4f, test accuracy %.4f\n",
          flags.variant.c_str(), world, epoch, epoch_losses.back().size(),
          [&] {
            double s = 0;
            for (double l : epoch_losses.back()) s += l;
            return s / std::max<size_t>(1, epoch_losses.back().size());
          }(),
          accuracy.back());
    }
  }
  const double seconds = MPI_Wtime() - t0;

  // Every rank must hold the same weights, bit for bit.
  const uint64_t checksum = fnv1a(w.data(), w.size() * sizeof(float));
  std::vector<uint64_t> all(world);
  MPI_Allgather(&checksum, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  bool identical = true;
  for (uint64_t c : all) identical = identical && c == all[0];

  // Per-step losses of the last two epochs: replayed batches (no-set-epoch) correlate.
  const double replay =
      epoch_losses.size() >= 2
          ? correlation(epoch_losses[epoch_losses.size() - 2], epoch_losses.back())
          : NAN;
  if (rank == 0) {
    const std::string name = flags.out_dir + "/" + flags.variant + "_np" + std::to_string(world);
    std::ofstream csv(name + ".csv");
    csv << "step,epoch,loss\n";
    uint64_t step = 0;
    for (size_t e = 0; e < epoch_losses.size(); ++e) {
      for (double l : epoch_losses[e]) csv << step++ << ',' << e << ',' << l << '\n';
    }
    std::ofstream summary(name + "_summary.csv");
    summary << "variant,world_size,epochs,steps_per_epoch,final_test_accuracy,"
               "epoch_loss_correlation,weights_identical,weights_checksum,seconds\n";
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016" PRIx64, checksum);
    summary << flags.variant << ',' << world << ',' << flags.epochs << ','
            << epoch_losses.front().size() << ',' << accuracy.back() << ',' << replay << ','
            << (identical ? "yes" : "no") << ',' << hex << ',' << seconds << '\n';
    summary << "# test accuracy per epoch:";
    for (double a : accuracy) summary << ' ' << a;
    summary << '\n';
    std::printf("%s np=%" PRIu64
                ": final test accuracy %.4f, consecutive-epoch loss correlation "
                "%.3f, weights identical on all ranks: %s (%s), %.1f s -> %s.csv\n",
                flags.variant.c_str(), world, accuracy.back(), replay, identical ? "yes" : "NO",
                hex, seconds, name.c_str());
  }
  if (!identical) return 3;
  if (accuracy.back() < flags.min_accuracy) {
    if (rank == 0) {
      std::fprintf(stderr, "error: test accuracy %.4f is below --min-accuracy %.4f\n",
                   accuracy.back(), flags.min_accuracy);
    }
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app(
      "Data-parallel softmax regression on Fashion-MNIST under MPI, data read through "
      "distsampler; rank 0 writes OUT_DIR/<variant>_np<W>.csv and ..._summary.csv.",
      "mpi_train");
  app.footer(
      "Variants: correct (each rank reads its share, a new order every epoch), no-set-epoch "
      "(epoch 0's order every epoch), no-sampler (every rank reads the whole dataset).\n"
      "Run: mpirun --allow-run-as-root --oversubscribe -np 2 mpi_train --variant correct");
  add_flags(app, flags);
  return examples::mpi_main(argc, argv, app, [&](int, int) { return run(flags); });
}
