// The DataLoader's pipeline: batch k of the epoch always lives in slot k % prefetch. A worker may
// claim batch k only when k < delivered + prefetch, so a slot is refilled only after the consumer
// took the batch it held; that bounds memory by the prefetch depth and makes the delivered order
// the view's order whatever the threads' timing. The consumer swaps its previous batch's buffers
// into the slot, so steady state allocates nothing.
#include "distsampler/loader/data_loader.h"

#include <algorithm>
#include <utility>

namespace distsampler {
namespace {

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace

SampleReadError::SampleReadError(uint64_t index, uint64_t position, std::exception_ptr cause,
                                 const std::string& what)
    : std::runtime_error(what), index_(index), position_(position), cause_(std::move(cause)) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, RankView view, LoaderOptions options)
    : dataset_(std::move(dataset)), view_(std::move(view)), options_(options) {
  if (!dataset_) throw std::invalid_argument("dataset: null; allowed: a dataset");
  if (options_.batch_size == 0) {
    throw std::invalid_argument("batch_size = 0; allowed: batch_size >= 1");
  }
  if (options_.prefetch == 0 || options_.prefetch > kMaxPrefetch) {
    throw std::invalid_argument(
        "prefetch = " + std::to_string(options_.prefetch) +
        " is out of range; allowed: 1 <= prefetch <= " + std::to_string(kMaxPrefetch));
  }
  if (view_.order().size() != dataset_->size()) {
    throw std::invalid_argument("view: a sampler over " + std::to_string(view_.order().size()) +
                                " samples; allowed: the dataset's size, " +
                                std::to_string(dataset_->size()));
  }
  const uint64_t n = view_.size(), b = options_.batch_size;
  num_batches_ = options_.drop_last ? n / b : n / b + (n % b != 0 ? 1 : 0);
  if (options_.threads == 0) return;
  slots_.resize(options_.prefetch);
  try {
    for (unsigned t = 0; t < options_.threads; ++t) workers_.emplace_back([this] { work(); });
  } catch (...) {
    stop_workers();
    throw;
  }
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  worker_cv_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
}

void DataLoader::fill(uint64_t number, Batch& batch) const {
  const uint64_t first = number * options_.batch_size;
  const uint64_t count = std::min(options_.batch_size, view_.size() - first);
  const uint64_t bytes = dataset_->spec().bytes();
  batch.number = number;
  batch.sample_bytes = bytes;
  batch.indices.resize(count);
  view_.fill(first, count, batch.indices.data());
  batch.data.resize(count * bytes);
  const bool labelled = dataset_->has_labels();
  batch.labels.resize(labelled ? count : 0);
  std::exception_ptr batch_error;
  try {
    dataset_->read_batch(batch.indices.data(), count, batch.data.data(), batch.labels.data());
    return;
  } catch (...) {
    batch_error = std::current_exception();  // find the failing sample one read at a time
  }
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t index = batch.indices[j];
    try {
      dataset_->read(index, batch.data.data() + j * bytes);
      if (labelled) batch.labels[j] = dataset_->label(index);
    } catch (...) {
      const std::exception_ptr cause = std::current_exception();
      throw SampleReadError(index, first + j, cause,
                            "DataLoader: reading dataset index " + std::to_string(index) +
                                " (position " + std::to_string(first + j) + " of the view, batch " +
                                std::to_string(number) + ") failed: " + what_of(cause));
    }
  }
  // read_batch failed although every sample reads alone: report it for the batch's first sample.
  throw SampleReadError(
      batch.indices[0], first, batch_error,
      "DataLoader: reading batch " + std::to_string(number) +
          " failed, although each of its samples reads alone: " + what_of(batch_error));
}

void DataLoader::work() {
  const uint64_t depth = options_.prefetch;
  for (;;) {
    uint64_t number;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      worker_cv_.wait(
          lock, [&] { return stop_ || claimed_ >= num_batches_ || claimed_ < delivered_ + depth; });
      if (stop_ || claimed_ >= num_batches_) return;
      number = claimed_++;
    }
    Slot& slot = slots_[number % depth];
    std::exception_ptr error;
    try {
      fill(number, slot.batch);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slot.error = error;
      slot.ready = true;
    }
    consumer_cv_.notify_one();
  }
}

bool DataLoader::next(Batch& batch) {
  if (failed_) std::rethrow_exception(failed_);
  if (delivered_ >= num_batches_) return false;
  if (workers_.empty()) {
    try {
      fill(delivered_, batch);
    } catch (...) {
      failed_ = std::current_exception();
      throw;
    }
    ++delivered_;
    return true;
  }
  Slot& slot = slots_[delivered_ % options_.prefetch];
  {
    std::unique_lock<std::mutex> lock(mutex_);
    consumer_cv_.wait(lock, [&] { return slot.ready; });
    if (slot.error) {
      failed_ = slot.error;
      std::rethrow_exception(failed_);
    }
  }
  std::swap(batch, slot.batch);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slot.ready = false;
    ++delivered_;
  }
  worker_cv_.notify_all();
  return true;
}

}  // namespace distsampler
