#include "distsampler/loader/data_loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distsampler/sampler.h"

namespace distsampler {
namespace {

// Sample i is 3 int32 values {i, 2i + 1, i ^ 0xABCD}, label i % 7.
std::shared_ptr<InMemoryDataset> make_dataset(uint64_t n) {
  std::vector<unsigned char> data(n * 12);
  std::vector<int64_t> labels(n);
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t v[3] = {static_cast<int32_t>(i), static_cast<int32_t>(2 * i + 1),
                          static_cast<int32_t>(i ^ 0xABCD)};
    std::memcpy(data.data() + 12 * i, v, 12);
    labels[i] = static_cast<int64_t>(i % 7);
  }
  return std::make_shared<InMemoryDataset>(SampleSpec{{3}, DType::kInt32}, std::move(data),
                                           std::move(labels));
}

RankView view_of(uint64_t n, uint64_t world_size, uint64_t rank, OrderKind order, uint64_t epoch,
                 bool shuffle = true) {
  SamplerOptions o;
  o.size = n;
  o.world_size = world_size;
  o.rank = rank;
  o.order = order;
  o.shuffle = shuffle;
  return DistributedSampler(o).epoch(epoch);
}

// Forwards to an InMemoryDataset; subclasses hook read().
class Wrapped : public Dataset {
 public:
  explicit Wrapped(uint64_t n) : inner_(make_dataset(n)) {}
  uint64_t size() const override { return inner_->size(); }
  const SampleSpec& spec() const override { return inner_->spec(); }
  bool has_labels() const override { return true; }
  void read(uint64_t i, void* out) const override { inner_->read(i, out); }
  int64_t label(uint64_t i) const override { return inner_->label(i); }

 private:
  std::shared_ptr<InMemoryDataset> inner_;
};

TEST(DataLoader, OrderAndBytesEqualTheViewForAnyThreadCount) {
  const uint64_t n = 1001;
  const auto ds = make_dataset(n);
  for (OrderKind order : {OrderKind::kTorch, OrderKind::kFeistel}) {
    const RankView view = view_of(n, 3, 1, order, 5);
    const std::vector<uint64_t> want(view.begin(), view.end());
    for (bool drop_last : {false, true}) {
      for (unsigned threads : {0u, 1u, 2u, 4u}) {
        for (unsigned prefetch : {1u, 3u}) {
          SCOPED_TRACE(std::string(to_string(order)) + " drop_last=" + std::to_string(drop_last) +
                       " threads=" + std::to_string(threads) +
                       " prefetch=" + std::to_string(prefetch));
          DataLoader loader(ds, view, {16, drop_last, threads, prefetch});
          const uint64_t full = want.size() / 16, rest = want.size() % 16;
          EXPECT_EQ(loader.num_batches(), full + (drop_last || rest == 0 ? 0 : 1));
          std::vector<uint64_t> got;
          uint64_t batches = 0;
          for (Batch b; loader.next(b); ++batches) {
            ASSERT_EQ(b.number, batches);
            ASSERT_EQ(b.size(), batches < full ? 16u : rest);
            ASSERT_EQ(b.sample_bytes, 12u);
            ASSERT_EQ(b.data.size(), b.size() * 12);
            ASSERT_EQ(b.labels.size(), b.size());
            for (uint64_t j = 0; j < b.size(); ++j) {
              const uint64_t index = b.indices[j];
              std::vector<unsigned char> sample(12);
              ds->read(index, sample.data());
              ASSERT_EQ(std::memcmp(b.data.data() + 12 * j, sample.data(), 12), 0);
              ASSERT_EQ(b.as<int32_t>()[3 * j], static_cast<int32_t>(index));
              ASSERT_EQ(b.labels[j], static_cast<int64_t>(index % 7));
              got.push_back(index);
            }
          }
          EXPECT_EQ(batches, loader.num_batches());
          Batch after;
          EXPECT_FALSE(loader.next(after));
          const std::vector<uint64_t> expected(
              want.begin(),
              want.begin() + static_cast<std::ptrdiff_t>(batches > 0 ? got.size() : 0));
          EXPECT_EQ(got, expected);
          EXPECT_EQ(got.size(), drop_last ? full * 16 : want.size());
        }
      }
    }
  }
}

TEST(DataLoader, EmptyViewAndValidation) {
  const auto ds = make_dataset(10);
  SamplerOptions o;
  o.size = 10;
  const DistributedSampler sampler(o);
  DataLoader empty(ds, sampler.epoch(0, 10), {4, false, 2, 2});
  Batch b;
  EXPECT_EQ(empty.num_batches(), 0u);
  EXPECT_FALSE(empty.next(b));
  EXPECT_THROW(DataLoader(nullptr, sampler.epoch(0), {}), std::invalid_argument);
  EXPECT_THROW(DataLoader(ds, sampler.epoch(0), {0, false, 1, 1}), std::invalid_argument);
  EXPECT_THROW(DataLoader(ds, sampler.epoch(0), {1, false, 1, 0}), std::invalid_argument);
  // prefetch is at most 2^16 (kMaxPrefetch): UINT_MAX was std::bad_alloc.
  for (unsigned prefetch : {65537u, 4294967295u}) {
    try {
      DataLoader(ds, sampler.epoch(0), {1, false, 1, prefetch});
      FAIL() << "no throw";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "prefetch = " + std::to_string(prefetch) +
                                           " is out of range; allowed: 1 <= prefetch <= 65536");
    }
  }
  DataLoader deepest(ds, sampler.epoch(0), {1, false, 1, 65536});
  EXPECT_EQ(deepest.num_batches(), 10u);
  try {
    DataLoader(make_dataset(11), sampler.epoch(0), {});
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "view: a sampler over 10 samples; allowed: the dataset's size, 11");
  }
}

class Failing : public Wrapped {
 public:
  Failing(uint64_t n, uint64_t bad) : Wrapped(n), bad_(bad) {}
  void read(uint64_t i, void* out) const override {
    if (i == bad_) throw std::runtime_error("disk on fire");
    Wrapped::read(i, out);
  }

 private:
  uint64_t bad_;
};

TEST(DataLoader, WorkerExceptionReachesTheConsumerWithTheIndex) {
  const uint64_t n = 500;
  const RankView view = view_of(n, 2, 0, OrderKind::kTorch, 3);
  const uint64_t position = 123;
  const uint64_t bad = view[position];
  const auto ds = std::make_shared<Failing>(n, bad);
  for (unsigned threads : {0u, 1u, 2u, 4u}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    DataLoader loader(ds, view, {10, false, threads, 3});
    Batch b;
    for (uint64_t k = 0; k < position / 10; ++k) ASSERT_TRUE(loader.next(b));  // before it: fine
    for (int again = 0; again < 2; ++again) {  // and the error sticks
      try {
        loader.next(b);
        FAIL() << "no throw";
      } catch (const SampleReadError& e) {
        EXPECT_EQ(e.index(), bad);
        EXPECT_EQ(e.position(), position);
        const std::string what = e.what();
        EXPECT_NE(what.find("dataset index " + std::to_string(bad)), std::string::npos) << what;
        EXPECT_NE(what.find("position 123"), std::string::npos) << what;
        EXPECT_NE(what.find("disk on fire"), std::string::npos) << what;
        EXPECT_THROW(std::rethrow_exception(e.cause()), std::runtime_error);
      }
    }
  }
}

// Reads take time and are counted; lets a test see how far the workers run ahead.
class Counting : public Wrapped {
 public:
  explicit Counting(uint64_t n) : Wrapped(n) {}
  void read(uint64_t i, void* out) const override {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    reads.fetch_add(1);
    const uint64_t batch = i / batch_size, taken = consumed.load();
    if (batch > taken + max_lead.load()) max_lead.store(batch - taken);
    Wrapped::read(i, out);
  }
  uint64_t batch_size = 1;
  mutable std::atomic<uint64_t> reads{0};
  mutable std::atomic<uint64_t> consumed{0};
  mutable std::atomic<uint64_t> max_lead{0};
};

TEST(DataLoader, ReadAheadIsBoundedByPrefetch) {
  const uint64_t n = 4000, b = 8;
  for (unsigned threads : {1u, 4u}) {
    for (unsigned prefetch : {1u, 2u, 5u}) {
      SCOPED_TRACE("threads=" + std::to_string(threads) + " prefetch=" + std::to_string(prefetch));
      const auto ds = std::make_shared<Counting>(n);
      ds->batch_size = b;
      // shuffle off: batch k reads indices [k b, (k + 1) b), so a read names its batch.
      DataLoader loader(ds, view_of(n, 1, 0, OrderKind::kTorch, 0, false),
                        {b, false, threads, prefetch});
      Batch batch;
      for (int k = 0; k < 30 && loader.next(batch); ++k) {
        ds->consumed.store(static_cast<uint64_t>(k) + 1);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow consumer
      }
      // Batches being read are at most `prefetch` ahead of the ones handed out (the consumer may
      // hold one more, handed out but not yet counted here).
      EXPECT_LE(ds->max_lead.load(), prefetch);
    }
  }
}

TEST(DataLoader, DestroyingMidEpochStopsTheWorkers) {
  const uint64_t n = 100000, b = 64;
  for (unsigned threads : {1u, 2u, 4u}) {
    const auto ds = std::make_shared<Counting>(n);
    {
      DataLoader loader(ds, view_of(n, 2, 1, OrderKind::kFeistel, 1), {b, false, threads, 2});
      Batch batch;
      ASSERT_TRUE(loader.next(batch));
      ASSERT_TRUE(loader.next(batch));
    }
    const uint64_t after = ds->reads.load();
    // Two batches taken, at most `prefetch` more claimed before the stop, none after it.
    EXPECT_LE(after, (2 + 2) * b);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(ds->reads.load(), after);
  }
  // Destroyed before the first next(), and after an error.
  const auto ds = std::make_shared<Counting>(n);
  { DataLoader loader(ds, view_of(n, 1, 0, OrderKind::kFeistel, 0), {b, false, 4, 3}); }
  const auto failing = std::make_shared<Failing>(n, 7);
  {
    DataLoader loader(failing, view_of(n, 1, 0, OrderKind::kTorch, 0, false), {b, false, 4, 3});
    Batch batch;
    EXPECT_THROW(loader.next(batch), SampleReadError);
  }
}

}  // namespace
}  // namespace distsampler
