#include "distsampler/prefetch.h"
#include "skip_log.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace distsampler {
namespace {

SamplerOptions torch_options(uint64_t size, uint64_t world_size, uint64_t rank) {
  SamplerOptions o;
  o.size = size;
  o.world_size = world_size;
  o.rank = rank;
  o.seed = 7;
  return o;
}

std::vector<uint64_t> all(const RankView& view) { return {view.begin(), view.end()}; }

// Waits (up to 20 s) until `sampler` has `count` orders alive: a background build finished.
bool wait_for_live(const PrefetchingSampler& sampler, uint64_t count) {
  for (int i = 0; i < 2000; ++i) {
    if (sampler.live_orders() == count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Prefetch, ViewsAreTheSamplersBitForBitAndConsecutiveEpochsAreBuiltAhead) {
  const SamplerOptions options = torch_options(10007, 3, 1);
  const DistributedSampler plain(options);
  PrefetchingSampler sampler(options);
  ASSERT_TRUE(sampler.prefetching());
  for (uint64_t epoch = 0; epoch < 6; ++epoch) {
    const uint64_t start = epoch % 2 == 0 ? 0 : 1234;
    {
      const RankView view = sampler.epoch(epoch, start);
      EXPECT_EQ(all(view), all(plain.epoch(epoch, start))) << epoch;
      // The view being read and, once built, the next epoch's order: never more.
      ASSERT_TRUE(wait_for_live(sampler, 2)) << epoch;
    }
    EXPECT_EQ(sampler.live_orders(), 1u);  // the view released: the prefetched order alone
  }
  EXPECT_EQ(sampler.hits(), 5u);  // every epoch after the first came from the background
}

TEST(Prefetch, TheBackgroundBuildWaitsWhileTwoOrdersAreAlive) {
  PrefetchingSampler sampler(torch_options(5000, 2, 0));
  auto first = std::make_unique<RankView>(sampler.epoch(0));
  ASSERT_TRUE(wait_for_live(sampler, 2));
  const RankView second = sampler.epoch(1);  // epoch 0's view still held by the reader
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(sampler.live_orders(), 2u);  // epoch 2 is not built while 0 and 1 are alive
  first.reset();
  EXPECT_TRUE(wait_for_live(sampler, 2));  // 0 gone: 1 and the prefetched 2
  EXPECT_EQ(all(sampler.epoch(2)), all(DistributedSampler(torch_options(5000, 2, 0)).epoch(2)));
}

TEST(Prefetch, AnotherEpochThanTheGuessIsBuiltOnDemand) {
  const SamplerOptions options = torch_options(3001, 4, 3);
  PrefetchingSampler sampler(options);
  sampler.epoch(0);
  ASSERT_TRUE(wait_for_live(sampler, 1));  // the view of 0 is gone; 1 is built
  EXPECT_EQ(all(sampler.epoch(5)), all(DistributedSampler(options).epoch(5)));
  EXPECT_EQ(sampler.hits(), 0u);
  // Asking for an epoch while its build still waits for a release: built here, no deadlock.
  const RankView nine = sampler.epoch(9);
  ASSERT_TRUE(wait_for_live(sampler, 2));
  const RankView ten = sampler.epoch(10);  // 9 and 10 alive: the build of 11 waits
  EXPECT_EQ(all(sampler.epoch(11)), all(DistributedSampler(options).epoch(11)));
  EXPECT_EQ(sampler.hits(), 1u);  // 10 only
}

TEST(Prefetch, ErrorsComeFromTheCallThatAsksForTheEpoch) {
  SamplerOptions options = torch_options(100, 1, 0);
  options.seed = Seed::parse("18446744073709551613");  // 2^64 - 3: epoch 3 overflows
  PrefetchingSampler sampler(options);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) sampler.epoch(epoch);
  ASSERT_TRUE(wait_for_live(sampler, 0));  // the failed build of 3 holds nothing
  EXPECT_THROW(sampler.epoch(3), std::out_of_range);
  EXPECT_EQ(all(sampler.epoch(0)), all(DistributedSampler(options).epoch(0)));
  EXPECT_THROW(sampler.epoch(0, (uint64_t{1} << 63) + 1), std::invalid_argument);
}

TEST(Prefetch, OtherOrdersAndDisabledPrefetchPassThrough) {
  SamplerOptions feistel = torch_options(1000, 2, 1);
  feistel.order = OrderKind::kFeistel;
  SamplerOptions unshuffled = torch_options(1000, 2, 1);
  unshuffled.shuffle = false;
  for (const auto& [options, prefetch] : std::vector<std::pair<SamplerOptions, bool>>{
           {feistel, true}, {unshuffled, true}, {torch_options(1000, 2, 1), false}}) {
    PrefetchingSampler sampler(options, prefetch);
    EXPECT_FALSE(sampler.prefetching());
    EXPECT_EQ(all(sampler.epoch(4)), all(DistributedSampler(options).epoch(4)));
    EXPECT_EQ(sampler.live_orders(), 0u);
  }
}

TEST(Prefetch, ViewsOutliveTheSamplerAndDestructionDoesNotHang) {
  std::vector<uint64_t> expected = all(DistributedSampler(torch_options(2000, 1, 0)).epoch(1));
  RankView kept = DistributedSampler(torch_options(1, 1, 0)).epoch(0);
  {
    PrefetchingSampler sampler(torch_options(2000, 1, 0));
    const RankView a = sampler.epoch(0);
    kept = sampler.epoch(1);  // 0 still alive: the build of 2 waits, and is cancelled below
  }
  EXPECT_EQ(all(kept), expected);
}

// ThreadSanitizer kills the child of a multithreaded fork once it starts a thread, as these
// children must (their own prefetch worker): ASan and ctest run those tests.
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

// Runs body() in a forked child; "exit 0" when it returned true within `seconds`. A child that
// hangs is killed, so that a regression fails instead of hanging the test.
std::string in_child(const std::function<bool()>& body, int seconds = 20) {
  std::fflush(nullptr);  // no buffered output duplicated into the child
  const pid_t pid = fork();
  if (pid == 0) {
    bool ok = false;
    try {
      ok = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    _exit(ok ? 0 : 1);
  }
  if (pid < 0) return "fork failed";
  int status = 0;
  for (int waited = 0; waited < seconds * 100; ++waited) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                               : "killed by signal " + std::to_string(WTERMSIG(status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return "hung for " + std::to_string(seconds) + " s (killed)";
}

// An OrderBuilder whose first build of `epoch` in the process that made it waits until open():
// the test then knows the background build is running. Other builds (and the child's) are plain.
class GatedBuilder {
 public:
  explicit GatedBuilder(uint64_t epoch) : gate_(std::make_shared<Gate>()), epoch_(epoch) {}
  OrderBuilder builder() const {
    return [gate = gate_, epoch = epoch_, parent = getpid()](
               const OrderOptions& options, uint64_t e, const std::function<bool()>&) {
      if (e == epoch && getpid() == parent) {
        std::unique_lock<std::mutex> lock(gate->mutex);
        if (!gate->entered) {
          gate->entered = true;
          gate->changed.notify_all();
          gate->changed.wait(lock, [&] { return gate->open; });
        }
      }
      return make_epoch_order(options, e);
    };
  }
  bool wait_until_running() const {
    std::unique_lock<std::mutex> lock(gate_->mutex);
    return gate_->changed.wait_for(lock, std::chrono::seconds(20), [&] { return gate_->entered; });
  }
  void open() const {
    std::lock_guard<std::mutex> lock(gate_->mutex);
    gate_->open = true;
    gate_->changed.notify_all();
  }

 private:
  struct Gate {
    std::mutex mutex;
    std::condition_variable changed;
    bool entered = false;
    bool open = false;
  };
  std::shared_ptr<Gate> gate_;
  uint64_t epoch_;
};

// Issue 28: a DataLoader worker forked while the background build runs has the sampler's state
// (kRunning) but not its thread. It builds the epoch itself, prefetches on its own worker, and
// its sampler is destroyed without joining the parent's thread.
TEST(Prefetch, AChildForkedWhileABuildRunsBuildsTheEpochItself) {
  if (kThreadSanitizer)
    DISTSAMPLER_SKIP("ThreadSanitizer does not let a forked child start threads");
  const SamplerOptions options = torch_options(5003, 2, 1);
  const DistributedSampler plain(options);
  const GatedBuilder gate(1);
  PrefetchingSampler sampler(options, true, gate.builder());
  const RankView zero = sampler.epoch(0);  // the worker starts epoch 1 and waits at the gate
  ASSERT_TRUE(gate.wait_until_running());
  const std::string child = in_child([&] {
    bool ok = all(sampler.epoch(1)) == all(plain.epoch(1)) && sampler.hits() == 0;
    ok = ok && wait_for_live(sampler, 2);  // the view of 0 and 2, built by the child's worker
    return ok && all(sampler.epoch(2)) == all(plain.epoch(2)) && sampler.hits() == 1;
  });
  EXPECT_EQ(child, "exit 0");
  gate.open();
  EXPECT_EQ(all(sampler.epoch(1)), all(plain.epoch(1)));
  EXPECT_EQ(sampler.hits(), 1u);  // the parent's own build, unaffected
}

// The same with the build requested but waiting for a release (two orders alive), and the
// child's sampler destroyed in the child (the parent's worker is neither joined nor detached).
TEST(Prefetch, AChildForkedWhileABuildIsRequestedBuildsTheEpochItself) {
  if (kThreadSanitizer)
    DISTSAMPLER_SKIP("ThreadSanitizer does not let a forked child start threads");
  const SamplerOptions options = torch_options(4001, 3, 2);
  const DistributedSampler plain(options);
  auto sampler = std::make_unique<PrefetchingSampler>(options);
  const RankView zero = sampler->epoch(0);
  const RankView one = sampler->epoch(1);  // 0 and 1 alive: the build of 2 waits
  const std::string child = in_child([&] {
    const bool ok = all(sampler->epoch(2)) == all(plain.epoch(2));
    sampler.reset();
    return ok;
  });
  EXPECT_EQ(child, "exit 0");
  EXPECT_EQ(all(sampler->epoch(2)), all(plain.epoch(2)));
}

}  // namespace
}  // namespace distsampler
