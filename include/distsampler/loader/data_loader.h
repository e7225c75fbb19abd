// data_loader.h: batches of a rank's view of an epoch, read by worker threads, delivered in order.
#ifndef DISTSAMPLER_LOADER_DATA_LOADER_H_
#define DISTSAMPLER_LOADER_DATA_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distsampler/loader/dataset.h"
#include "distsampler/sampler.h"

namespace distsampler {

// The deepest prefetch a DataLoader accepts: the slots are allocated up front, and a depth beyond
// this buys no throughput, only memory.
inline constexpr unsigned kMaxPrefetch = 1u << 16;

// PyTorch's DataLoader knobs, by their PyTorch names where there is one.
struct LoaderOptions {
  uint64_t batch_size = 1;  // >= 1
  bool drop_last = false;   // drop the last batch when it is short
  // Worker threads (num_workers). 0 reads each batch in the calling thread inside next().
  unsigned threads = 0;
  // Batches read ahead of the consumer (prefetch depth), 1 <= prefetch <= kMaxPrefetch. At most
  // `prefetch` batch buffers exist besides the one the consumer holds, whatever the number of
  // threads.
  unsigned prefetch = 2;
};

// One batch: samples collated into one contiguous buffer, sample j at data[j * sample_bytes].
struct Batch {
  uint64_t number = 0;            // the batch's position in the epoch, 0, 1, 2, ...
  uint64_t sample_bytes = 0;      // the dataset's spec().bytes()
  std::vector<uint64_t> indices;  // dataset indices, in the view's order
  std::vector<unsigned char> data;
  std::vector<int64_t> labels;  // empty when the dataset has no labels

  uint64_t size() const { return indices.size(); }
  template <class T>
  const T* as() const {
    return reinterpret_cast<const T*>(data.data());
  }
};

// A worker failed to read a sample: names the dataset index and its position in the view, and
// carries the original exception (cause()).
class SampleReadError : public std::runtime_error {
 public:
  SampleReadError(uint64_t index, uint64_t position, std::exception_ptr cause,
                  const std::string& what);
  uint64_t index() const { return index_; }
  uint64_t position() const { return position_; }
  std::exception_ptr cause() const { return cause_; }

 private:
  uint64_t index_;
  uint64_t position_;
  std::exception_ptr cause_;
};

// Batches view[0, B), view[B, 2B), ... of one epoch, in that order whatever the number of threads:
// batch k is always the same indices and the same bytes. Workers claim batches in order and each
// fills one batch alone; the consumer takes them in order. When a sample read throws, the batches
// before it are delivered and then next() throws SampleReadError, and again on every later call.
// Destroying the loader mid-epoch stops the workers after the batch each is reading.
//
//   DataLoader loader(dataset, sampler.epoch(e), {.batch_size = 64, .threads = 2});
//   for (Batch batch; loader.next(batch);) train(batch);
class DataLoader {
 public:
  // Throws std::invalid_argument for a null dataset, batch_size 0, prefetch outside
  // [1, kMaxPrefetch], or a view whose dataset size differs from dataset->size().
  DataLoader(std::shared_ptr<const Dataset> dataset, RankView view, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  uint64_t num_batches() const { return num_batches_; }
  // Moves the next batch into `batch` (whose buffers are recycled for later batches) and returns
  // true, or returns false after the last batch.
  bool next(Batch& batch);

 private:
  struct Slot {
    Batch batch;
    bool ready = false;
    std::exception_ptr error;
  };
  void fill(uint64_t number, Batch& batch) const;
  void work();
  void stop_workers();

  std::shared_ptr<const Dataset> dataset_;
  RankView view_;
  LoaderOptions options_;
  uint64_t num_batches_;
  uint64_t delivered_ = 0;  // batches taken by the consumer
  std::exception_ptr failed_;

  std::mutex mutex_;
  std::condition_variable worker_cv_;    // a slot became free, or stop
  std::condition_variable consumer_cv_;  // a slot became ready
  std::vector<Slot> slots_;              // batch k lives in slots_[k % prefetch]
  uint64_t claimed_ = 0;                 // batches claimed by workers
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_LOADER_DATA_LOADER_H_
