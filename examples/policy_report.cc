// policy_report: measures what the sampling policies promise, on real data where it matters.
//   1. length-bucketed batches vs random batches: padding waste on the line and paragraph
//      lengths of the license texts every Debian system ships (/usr/share/common-licenses,
//      package base-files);
//   2. shard-aware order: distinct shards per 1000 consecutive samples of a rank, and how close
//      the order is to a full shuffle;
//   3. blending: the largest quota error over a prefix of 10^7 samples.
// Usage: policy_report [DIR]   (DIR defaults to /usr/share/common-licenses; --help)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "distsampler/distsampler.h"

namespace ds = distsampler;

namespace {

// Lengths of non-empty lines (bytes) and of paragraphs (words between blank lines), files in
// name order so the corpus is read the same way everywhere.
void read_corpus(const std::string& dir, std::vector<uint64_t>* lines,
                 std::vector<uint64_t>* paragraphs) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::ifstream in(path);
    std::string line;
    uint64_t words = 0;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) {
        if (words > 0) paragraphs->push_back(words);
        words = 0;
        continue;
      }
      lines->push_back(line.size());
      bool in_word = false;
      for (char c : line) {
        const bool space = c == ' ' || c == '\t';
        if (!space && !in_word) ++words;
        in_word = !space;
      }
    }
    if (words > 0) paragraphs->push_back(words);
  }
}

// Padding waste of the batches of `order`: padded slots / all slots, each batch padded to its
// longest sequence.
double waste(const ds::EpochOrder& order, const std::vector<uint64_t>& lengths, uint64_t batch) {
  uint64_t padded = 0;
  uint64_t real = 0;
  for (uint64_t first = 0; first < order.size(); first += batch) {
    const uint64_t end = std::min(order.size(), first + batch);
    uint64_t longest = 0;
    for (uint64_t p = first; p < end; ++p) {
      longest = std::max(longest, lengths[order.at(p)]);
      real += lengths[order.at(p)];
    }
    padded += longest * (end - first);
  }
  return 1.0 - static_cast<double>(real) / static_cast<double>(padded);
}

void report_buckets(const char* name, const std::vector<uint64_t>& lengths) {
  std::printf("\n%s: %zu sequences, lengths %llu..%llu\n", name, lengths.size(),
              static_cast<unsigned long long>(*std::min_element(lengths.begin(), lengths.end())),
              static_cast<unsigned long long>(*std::max_element(lengths.begin(), lengths.end())));
  std::printf("  batch  random-waste  bucketed-waste(window 16 / 64 batches)\n");
  for (uint64_t batch : {8, 32}) {
    ds::OrderOptions random;
    random.size = lengths.size();
    random.kind = ds::OrderKind::kFeistel;
    double random_waste = 0;
    double bucket16 = 0;
    double bucket64 = 0;
    const uint64_t epochs = 5;
    for (uint64_t e = 0; e < epochs; ++e) {
      random_waste += waste(*ds::make_epoch_order(random, e), lengths, batch) / epochs;
      ds::BucketOptions b;
      b.lengths = lengths;
      b.batch_size = batch;
      b.window_batches = 16;
      bucket16 += waste(*ds::make_bucketed_order(b, e), lengths, batch) / epochs;
      b.window_batches = 64;
      bucket64 += waste(*ds::make_bucketed_order(b, e), lengths, batch) / epochs;
    }
    std::printf("  %5llu  %11.1f%%  %8.1f%% / %.1f%%\n", static_cast<unsigned long long>(batch),
                100 * random_waste, 100 * bucket16, 100 * bucket64);
  }
}

// Spearman correlation between order position and dataset index (the order is a permutation, so
// ranks are the values), mean |position - index| / n (1/3 for a uniform shuffle), and mean
// |pos(i + 1) - pos(i)| / n over neighbouring dataset indices (1/3 for a uniform shuffle; small
// when neighbours in storage stay neighbours in the order).
void shuffle_quality(const ds::EpochOrder& order, double* spearman, double* displacement,
                     double* neighbours) {
  const uint64_t size = order.size();
  const double n = static_cast<double>(size);
  double d2 = 0;
  double d1 = 0;
  std::vector<uint64_t> position(size);
  for (uint64_t p = 0; p < size; ++p) {
    const uint64_t index = order.at(p);
    position[index] = p;
    const double d = static_cast<double>(p) - static_cast<double>(index);
    d2 += d * d;
    d1 += std::fabs(d);
  }
  double gap = 0;
  for (uint64_t i = 0; i + 1 < size; ++i) {
    gap += std::fabs(static_cast<double>(position[i + 1]) - static_cast<double>(position[i]));
  }
  *spearman = 1 - 6 * d2 / (n * (n * n - 1));
  *displacement = d1 / n / n;
  *neighbours = gap / (n - 1) / n;
}

void report_shards() {
  ds::ShardOptions o;
  for (uint64_t s = 0; s < 1000; ++s) o.shard_sizes.push_back(500 + (s * 7919) % 1001);
  uint64_t n = 0;
  for (uint64_t x : o.shard_sizes) n += x;
  std::vector<uint64_t> owner;
  for (uint64_t s = 0; s < o.shard_sizes.size(); ++s)
    owner.insert(owner.end(), o.shard_sizes[s], s);
  const uint64_t w = 8;
  std::printf("\nshard-aware order: %llu samples in 1000 shards of 500..1500, rank 0 of W = 8\n",
              static_cast<unsigned long long>(n));
  std::printf(
      "  order            shards/1000 samples  spearman(pos,index)  mean|pos-index|/n  "
      "neighbour gap/n\n");
  auto row = [&](const char* name, std::shared_ptr<const ds::EpochOrder> order) {
    const ds::RankView v(order, ds::Partition{n, w, 0, false, 0}, 0);
    double distinct = 0;
    uint64_t blocks = 0;
    for (uint64_t first = 0; first + 1000 <= v.size(); first += 1000, ++blocks) {
      std::set<uint64_t> seen;
      for (uint64_t i = first; i < first + 1000; ++i) seen.insert(owner[v[i]]);
      distinct += static_cast<double>(seen.size());
    }
    double spearman = 0;
    double displacement = 0;
    double neighbours = 0;
    shuffle_quality(*order, &spearman, &displacement, &neighbours);
    std::printf("  %-15s  %19.1f  %19.4f  %17.4f  %19.4f\n", name, distinct / blocks, spearman,
                displacement, neighbours);
  };
  ds::OrderOptions full;
  full.size = n;
  full.kind = ds::OrderKind::kFeistel;
  row("full shuffle", ds::make_epoch_order(full, 0));
  for (uint64_t window : {1, 4, 16, 64}) {
    o.window = window;
    const std::string name = "window " + std::to_string(window);
    row(name.c_str(), ds::make_shard_order(o, 0));
  }
}

void report_blend() {
  const std::vector<double> weights = {0.5, 0.25, 0.15, 0.07, 0.03};
  const ds::QuotaSchedule q(weights);
  std::vector<uint64_t> counts(weights.size());
  double worst = 0;
  const uint64_t length = 10'000'000;
  for (uint64_t i = 0; i < length; ++i) {
    ++counts[q.at(i).dataset];
    for (uint64_t k = 0; k < weights.size(); ++k) {
      worst = std::max(worst, std::fabs(static_cast<double>(counts[k]) -
                                        static_cast<double>(i + 1) * q.weights()[k]));
    }
  }
  std::printf(
      "\nblend of 5 datasets, weights 0.5 0.25 0.15 0.07 0.03: proven bound %.4f, largest "
      "quota error over 10^7 prefixes %.4f\n",
      q.error_bound(), worst);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/usr/share/common-licenses";
  CLI::App app(
      "Measures what the sampling policies promise: padding waste of length-bucketed batches on "
      "the text files of DIR, shard-aware order, blending quotas.",
      "policy_report");
  app.add_option("DIR", dir, "directory of text files (Debian's license texts by default)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::fprintf(stderr, "policy_report: error: %s (see --help)\n", message.c_str());
    return 2;
  }
  std::vector<uint64_t> lines;
  std::vector<uint64_t> paragraphs;
  try {
    read_corpus(dir, &lines, &paragraphs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "policy_report: cannot read %s: %s\n", dir.c_str(), e.what());
    return 2;
  }
  if (lines.empty() || paragraphs.empty()) {
    std::fprintf(stderr, "policy_report: no text under %s\n", dir.c_str());
    return 2;
  }
  std::printf("padding waste, corpus %s (mean over 5 epochs)\n", dir.c_str());
  report_buckets("non-empty lines (bytes)", lines);
  report_buckets("paragraphs (words)", paragraphs);
  report_shards();
  report_blend();
  return 0;
}
