// PrefetchingSampler: one background worker thread, and a count of the orders alive.
//
// Every order this sampler hands out is wrapped in a shared_ptr whose deleter decrements the
// count (the state outlives the sampler through those deleters); an order built in the background
// counts from the moment it exists. The background thread first waits until at most one order is
// alive (the one being read), so that building the next never makes three. A released order is
// freed by that thread too (a permutation of 10^8 takes 30-60 ms to give back to the system,
// which would otherwise land on the epoch boundary), before it builds anything.
//
// Fork: a child gets a copy of the state but not the worker thread (PyTorch's DataLoader forks
// its workers from the process that holds the sampler). pthread_atfork holds every state's mutex
// across fork(), so none is copied locked by a thread the child lacks, and the child forgets the
// worker it does not have: a requested or running build becomes kIdle (the child builds the epoch
// itself when asked, then starts its own worker), and the thread object is neither joined nor
// detached there (glibc would wait for the parent's thread forever). Nor is the condition variable
// the parent's threads wait on destroyed there (glibc would wait for those waiters): the child
// makes its own.
#include "distsampler/prefetch.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "distsampler/order.h"

namespace distsampler {
namespace detail {

// One worker thread per sampler, started at the first prefetch and kept: an epoch boundary
// neither creates nor joins a thread (on a loaded machine either can take milliseconds).
struct PrefetchState {
  enum class Status { kIdle, kRequested, kRunning, kDone };

  PrefetchState(OrderOptions o, OrderBuilder b);
  ~PrefetchState();
  PrefetchState(const PrefetchState&) = delete;
  PrefetchState& operator=(const PrefetchState&) = delete;

  // In the child of a fork, with `mutex` held: the worker stayed in the parent.
  void forget_worker();

  const OrderOptions options;
  OrderBuilder build;
  std::atomic<bool> abandon{false};  // the running build's epoch is not wanted any more
  std::mutex mutex;
  // Made anew in a forked child (forget_worker): the parent's may have waiters the child lacks,
  // and destroying a condition variable waits for its waiters (glibc), for ever there.
  std::unique_ptr<std::condition_variable> changed_cv = std::make_unique<std::condition_variable>();
  std::condition_variable& changed() { return *changed_cv; }
  uint64_t live = 0;  // orders alive: handed out and not released, or built and not handed out
  std::unique_ptr<std::thread> worker;  // null until the first prefetch, and in a forked child
  bool stop = false;
  Status status = Status::kIdle;
  uint64_t epoch = 0;   // of the request (kRequested) or of the build (kRunning, kDone)
  bool cancel = false;  // a kRequested build waiting for a release is given up
  std::shared_ptr<const EpochOrder> built;
  std::exception_ptr error;
  std::vector<std::shared_ptr<const EpochOrder>> graveyard;  // released, to be freed by the worker
};

namespace {

// Every live state, for the fork handlers. Lock order: the registry, then a state's mutex; no
// state's mutex is held while the registry is taken.
struct ForkRegistry {
  std::mutex mutex;
  std::set<PrefetchState*> states;
};
ForkRegistry& fork_registry() {
  static ForkRegistry* registry = new ForkRegistry();  // never destroyed: handlers outlive statics
  return *registry;
}
void before_fork() {
  fork_registry().mutex.lock();
  for (PrefetchState* state : fork_registry().states) state->mutex.lock();
}
void after_fork_in_parent() {
  for (PrefetchState* state : fork_registry().states) state->mutex.unlock();
  fork_registry().mutex.unlock();
}
void after_fork_in_child() {
  for (PrefetchState* state : fork_registry().states) {
    state->forget_worker();
    state->mutex.unlock();
  }
  fork_registry().mutex.unlock();
}

}  // namespace

PrefetchState::PrefetchState(OrderOptions o, OrderBuilder b)
    : options(std::move(o)), build(std::move(b)) {
  if (!build) {
    build = [](const OrderOptions& options, uint64_t epoch, const std::function<bool()>&) {
      return make_epoch_order(options, epoch);
    };
  }
  static std::once_flag registered;
  std::call_once(registered,
                 [] { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  std::lock_guard<std::mutex> lock(fork_registry().mutex);
  fork_registry().states.insert(this);
}

PrefetchState::~PrefetchState() {
  std::lock_guard<std::mutex> lock(fork_registry().mutex);
  fork_registry().states.erase(this);
}

void PrefetchState::forget_worker() {
  // The parent's threads may wait on the variable: the child's copy is never destroyed (a few
  // bytes a fork), and the child waits on its own.
  (void)changed_cv.release();
  changed_cv = std::make_unique<std::condition_variable>();
  if (!worker) return;
  // The parent's thread: no join, no detach, no destructor (a joinable std::thread terminates).
  (void)worker.release();
  // The parent's build never finishes here; epoch() builds what it needs itself. What the worker
  // was freeing or building is lost to the child (copy-on-write pages it never touches again).
  if (status == Status::kRequested || status == Status::kRunning) status = Status::kIdle;
  cancel = false;
  abandon = false;
}

}  // namespace detail

namespace {

using detail::PrefetchState;
using Status = PrefetchState::Status;

// `order` as handed out: releasing its last reference decrements state->live. `already_counted`
// says whether the order is in the count already (a background build counts when it finishes).
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
        std::unique_lock<std::mutex> lock(state->mutex);
        if (!state->stop && state->worker) {
          // Freeing 400 MB takes tens of milliseconds: the worker does it, not the reader
          // whose previous epoch ended at the boundary, and before it builds anything.
          state->graveyard.push_back(std::move(order));
          --state->live;
          state->changed().notify_all();
          return;
        }
        lock.unlock();
        order.reset();  // frees the permutation before the count says it is gone
        lock.lock();
        --state->live;
        state->changed().notify_all();
      });
}

// Frees the released orders; called with the lock held, returns with it held.
void bury(PrefetchState* state, std::unique_lock<std::mutex>& lock) {
  std::vector<std::shared_ptr<const EpochOrder>> dead;
  dead.swap(state->graveyard);
  lock.unlock();
  dead.clear();  // each order's last reference: the permutations are freed here
  lock.lock();
}

void worker_loop(PrefetchState* state) {
  std::unique_lock<std::mutex> lock(state->mutex);
  while (true) {
    state->changed().wait(lock, [&] {
      return state->stop || state->status == Status::kRequested || !state->graveyard.empty();
    });
    if (!state->graveyard.empty()) {
      bury(state, lock);
      continue;
    }
    if (state->stop) return;
    // At most one order alive (the one being read) before building another.
    state->changed().wait(lock, [&] {
      return state->stop || state->cancel || state->live <= 1 || !state->graveyard.empty();
    });
    if (!state->graveyard.empty()) {
      bury(state, lock);
      continue;
    }
    if (state->stop) return;
    if (state->cancel) {
      state->cancel = false;
      state->status = Status::kIdle;
      state->changed().notify_all();
      continue;
    }
    state->status = Status::kRunning;
    const uint64_t epoch = state->epoch;
    lock.unlock();
    std::shared_ptr<const EpochOrder> order;
    std::exception_ptr error;
    try {
      order = state->build(state->options, epoch,
                           [state] { return state->abandon.load(std::memory_order_relaxed); });
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    state->built = std::move(order);
    state->error = error;
    if (state->built) ++state->live;
    state->status = Status::kDone;
    state->changed().notify_all();
  }
}

}  // namespace

PrefetchingSampler::PrefetchingSampler(const SamplerOptions& options, bool prefetch,
                                       OrderBuilder build)
    : sampler_(options),
      prefetch_(prefetch && options.shuffle && options.order == OrderKind::kTorch),
      state_(std::make_shared<PrefetchState>(options.order_options(), std::move(build))) {}

PrefetchingSampler::~PrefetchingSampler() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
    state_->abandon = true;
    state_->changed().notify_all();
  }
  if (state_->worker) state_->worker->join();  // waits for a running build
  std::unique_lock<std::mutex> lock(state_->mutex);
  bury(state_.get(), lock);
  if (state_->built) {
    state_->built.reset();
    --state_->live;
  }
}

uint64_t PrefetchingSampler::live_orders() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->live;
}

RankView PrefetchingSampler::epoch(uint64_t epoch, uint64_t start) {
  Partition resumed = sampler_.partition();
  resumed.start = start;
  resumed.validate();
  const auto never = [] { return false; };
  if (!prefetch_) return RankView(state_->build(state_->options, epoch, never), resumed, epoch);

  std::shared_ptr<const EpochOrder> order;
  std::shared_ptr<const EpochOrder> discarded;  // freed after the lock is released
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(state_->mutex);
    if (state_->status == Status::kRequested) {
      // Still waiting for a release: give it up and build here (never wait on the reader).
      state_->cancel = true;
      state_->changed().notify_all();
      state_->changed().wait(lock, [&] { return state_->status != Status::kRequested; });
      state_->cancel = false;
    }
    if (state_->status == Status::kRunning) {
      // A build that waits on another process for an epoch not asked for gives up.
      if (state_->epoch != epoch) state_->abandon = true;
      state_->changed().wait(lock, [&] { return state_->status == Status::kDone; });
    }
    if (state_->status == Status::kDone) {
      if (state_->epoch == epoch) {
        error = state_->error;
        if (state_->built) {
          order = counted(std::move(state_->built), state_, true);
          ++hits_;
        }
      } else if (state_->built) {
        discarded = std::move(state_->built);  // another epoch's
        --state_->live;
      }
      state_->error = nullptr;
    }
    state_->status = Status::kIdle;
    state_->abandon = false;
  }
  discarded.reset();
  if (error) std::rethrow_exception(error);
  if (!order) order = counted(state_->build(state_->options, epoch, never), state_, false);
  RankView view(order, resumed, epoch);

  if (epoch != UINT64_MAX) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->epoch = epoch + 1;
    state_->status = Status::kRequested;
    if (!state_->worker) state_->worker = std::make_unique<std::thread>(worker_loop, state_.get());
    state_->changed().notify_all();
  }
  return view;
}

}  // namespace distsampler
