// PrefetchingSampler: one background thread per prefetched epoch, and a count of the orders alive.
//
// Every order this sampler hands out is wrapped in a shared_ptr whose deleter decrements the
// count (the state outlives the sampler through those deleters); an order built in the background
// counts from the moment it exists. The background thread first waits until at most one order is
// alive (the one being read), so that building the next never makes three.
#include "distsampler/prefetch.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "distsampler/order.h"

namespace distsampler {
namespace detail {

struct PrefetchState {
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t live = 0;  // orders alive: handed out and not released, or built and not handed out
  // The pending background build (valid while `thread` is joinable).
  std::thread thread;
  uint64_t epoch = 0;
  bool cancel = false;   // set by the caller: give up if the build has not started
  bool running = false;  // building now (cannot be interrupted)
  bool done = false;     // finished: `built` or `error` holds the result, or it was cancelled
  std::shared_ptr<const EpochOrder> built;
  std::exception_ptr error;
};

}  // namespace detail

namespace {

using detail::PrefetchState;

// `order` as handed out: releasing its last reference decrements state->live. `counted` says
// whether the order is already in the count (a background build is counted when it finishes).
std::shared_ptr<const EpochOrder> counted(std::shared_ptr<const EpochOrder> order,
                                          const std::shared_ptr<PrefetchState>& state,
                                          bool already_counted) {
  if (!already_counted) {
    std::lock_guard<std::mutex> lock(state->mutex);
    ++state->live;
  }
  const EpochOrder* raw = order.get();
  return std::shared_ptr<const EpochOrder>(
      raw, [order = std::move(order), state](const EpochOrder*) mutable {
        order.reset();  // frees the permutation before the count says it is gone
        std::lock_guard<std::mutex> lock(state->mutex);
        --state->live;
        state->changed.notify_all();
      });
}

void build_in_background(std::shared_ptr<PrefetchState> state, OrderOptions options,
                         uint64_t epoch) {
  std::unique_lock<std::mutex> lock(state->mutex);
  state->changed.wait(lock, [&] { return state->cancel || state->live <= 1; });
  if (state->cancel) {
    state->done = true;
    state->changed.notify_all();
    return;
  }
  state->running = true;
  lock.unlock();
  std::shared_ptr<const EpochOrder> order;
  std::exception_ptr error;
  try {
    order = make_epoch_order(options, epoch);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  state->running = false;
  state->done = true;
  state->built = std::move(order);
  state->error = error;
  if (state->built) ++state->live;
  state->changed.notify_all();
}

}  // namespace

PrefetchingSampler::PrefetchingSampler(const SamplerOptions& options, bool prefetch)
    : sampler_(options),
      prefetch_(prefetch && options.shuffle && options.order == OrderKind::kTorch),
      state_(std::make_shared<PrefetchState>()) {}

PrefetchingSampler::~PrefetchingSampler() { cancel_pending(); }

uint64_t PrefetchingSampler::live_orders() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->live;
}

void PrefetchingSampler::cancel_pending() {
  if (!state_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->cancel = true;
    state_->changed.notify_all();
  }
  state_->thread.join();
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->built) {
    state_->built.reset();
    --state_->live;
  }
  state_->error = nullptr;
}

RankView PrefetchingSampler::epoch(uint64_t epoch, uint64_t start) {
  if (!prefetch_) return sampler_.epoch(epoch, start);
  Partition resumed = sampler_.partition();
  resumed.start = start;
  resumed.validate();

  std::shared_ptr<const EpochOrder> order;
  if (state_->thread.joinable()) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (state_->epoch == epoch && (state_->running || state_->done)) {
      // Ours, started or finished: wait for it (GIL released by the binding).
      state_->changed.wait(lock, [&] { return state_->done; });
      lock.unlock();
      state_->thread.join();
      lock.lock();
      if (state_->error) {
        std::exception_ptr error = state_->error;
        state_->error = nullptr;
        std::rethrow_exception(error);
      }
      order = counted(std::move(state_->built), state_, true);
      state_->built.reset();
      ++hits_;
    } else {
      lock.unlock();
      cancel_pending();  // another epoch, or still waiting for a release: build it here
    }
  }
  if (!order)
    order = counted(make_epoch_order(sampler_.options().order_options(), epoch), state_, false);
  RankView view(order, resumed, epoch);

  if (epoch != UINT64_MAX) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->epoch = epoch + 1;
    state_->cancel = state_->running = state_->done = false;
    state_->built.reset();
    state_->error = nullptr;
    state_->thread =
        std::thread(build_in_background, state_, sampler_.options().order_options(), epoch + 1);
  }
  return view;
}

}  // namespace distsampler
