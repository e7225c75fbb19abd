#include "distsampler/node/node_order.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "distsampler/prefetch.h"
#include "distsampler/sampler.h"
#include "skip_log.h"

namespace distsampler {
namespace {

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

OrderOptions torch_options(uint64_t n, int64_t seed = 7) {
  OrderOptions o;
  o.size = n;
  o.seed = Seed(seed);
  return o;
}

// The job names the test and the gtest process (forked local ranks share its pid in the name).
const pid_t kTestProcess = getpid();

NodeGroup group_of(const std::string& job, uint64_t local_rank, uint64_t local_world_size) {
  NodeGroup g;
  g.job = job + "-" + std::to_string(kTestProcess);
  g.node = "test-node";
  g.local_rank = local_rank;
  g.local_world_size = local_world_size;
  g.timeout_seconds = 30;
  return g;
}

std::vector<uint64_t> all_of(const EpochOrder& order) {
  std::vector<uint64_t> out(order.size());
  order.gather(0, 1, order.size(), out.data());
  return out;
}

// Whether make_epoch_order could hold `bytes` (physical memory above it).
bool make_epoch_order_fits(uint64_t bytes) {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 &&
         static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) >= bytes;
}

// Names in /dev/shm that a node-shared order could have left. None is created since segments
// are anonymous memory files; /dev/shm is shared with every job on the machine, so only the
// kill test, whose ranks die before they can clean anything, looks there, and counts only names
// that appear during it (another job's, there before or removed meanwhile, never count). The
// other tests check what this process itself still maps.
std::set<std::string> shm_names() {
  std::set<std::string> names;
  if (DIR* dir = opendir("/dev/shm")) {
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.rfind("distsampler-", 0) == 0) names.insert(name);
    }
    closedir(dir);
  }
  return names;
}
size_t new_names(const std::set<std::string>& before) {
  size_t count = 0;
  for (const std::string& name : shm_names()) count += before.count(name) == 0;
  return count;
}

// Descriptors and mappings of node-shared segments this process still holds.
int held_segments() {
  int count = 0;
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return -1;
  char line[4096];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    count += std::strstr(line, "distsampler-order") != nullptr;
  }
  std::fclose(maps);
  return count;
}

// Runs body(local_rank) in `ranks` processes (this one is local rank 0); true when every child
// exited 0.
template <typename Body>
bool on_local_ranks(uint64_t ranks, Body body) {
  std::vector<pid_t> children;
  std::fflush(nullptr);  // no buffered output duplicated into the children
  for (uint64_t r = 1; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      bool ok = false;
      try {
        ok = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "local rank %d: %s\n", static_cast<int>(r), e.what());
      }
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  bool ok = body(0);
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

TEST(NodeOrder, DetectsTorchrunAndOpenMpi) {
  auto g = detect_node_group(env_of({{"LOCAL_RANK", "1"},
                                     {"LOCAL_WORLD_SIZE", "4"},
                                     {"GROUP_RANK", "2"},
                                     {"TORCHELASTIC_RUN_ID", "abc"},
                                     {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->local_rank, 1u);
  EXPECT_EQ(g->local_world_size, 4u);
  EXPECT_NE(g->job.find("abc"), std::string::npos);
  EXPECT_NE(g->node.find("/2"), std::string::npos);
  auto other_node = detect_node_group(
      env_of({{"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}, {"GROUP_RANK", "3"}}));
  EXPECT_NE(other_node->node, g->node);

  g = detect_node_group(
      env_of({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->local_world_size, 2u);
  EXPECT_FALSE(detect_node_group(env_of({{"LOCAL_RANK", "0"}})));
  EXPECT_THROW(detect_node_group(env_of({{"LOCAL_RANK", "4"}, {"LOCAL_WORLD_SIZE", "4"}})),
               std::invalid_argument);
  EXPECT_THROW(detect_node_group(env_of({{"LOCAL_RANK", "x"}, {"LOCAL_WORLD_SIZE", "4"}})),
               std::invalid_argument);
}

TEST(NodeOrder, DetectsASlurmStep) {
  // srun -N2 -n4 with 3 tasks on node 0 and 1 on node 1: the task on node 1.
  std::map<std::string, std::string> step = {{"SLURM_JOB_ID", "42"},
                                             {"SLURM_STEP_ID", "0"},
                                             {"SLURM_PROCID", "3"},
                                             {"SLURM_NTASKS", "4"},
                                             {"SLURM_STEP_NUM_TASKS", "4"},
                                             {"SLURM_LOCALID", "0"},
                                             {"SLURM_NODEID", "1"},
                                             {"SLURM_STEP_TASKS_PER_NODE", "3,1"}};
  auto g = detect_node_group(env_of(step));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->local_rank, 0u);
  EXPECT_EQ(g->local_world_size, 1u);
  step["SLURM_NODEID"] = "0";
  step["SLURM_LOCALID"] = "2";
  const auto node0 = detect_node_group(env_of(step));
  ASSERT_TRUE(node0);
  EXPECT_EQ(node0->local_rank, 2u);
  EXPECT_EQ(node0->local_world_size, 3u);
  EXPECT_NE(node0->node, g->node);
  EXPECT_EQ(node0->job, g->job);
  step["SLURM_STEP_ID"] = "1";  // the job's next step: other segments
  EXPECT_NE(detect_node_group(env_of(step))->job, g->job);
  step["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  step["SLURM_LOCALID"] = "1";
  EXPECT_EQ(detect_node_group(env_of(step))->local_world_size, 2u);
  // The batch script, outside any step: its SLURM_LOCALID is not a node group.
  step.erase("SLURM_STEP_ID");
  step.erase("SLURM_STEP_NUM_TASKS");
  step.erase("SLURM_STEP_TASKS_PER_NODE");
  step["SLURM_TASKS_PER_NODE"] = "4";
  EXPECT_FALSE(detect_node_group(env_of(step)));
}

TEST(NodeOrder, FourLocalRanksGetTheSameBitsFromOneBuildPerEpoch) {
  const OrderOptions options = torch_options(100003);
  const bool ok = on_local_ranks(4, [&](uint64_t r) {
    const NodeGroup group = group_of("four", r, 4);
    const NodeOrderCounts start = node_order_counts();
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      const auto shared = make_node_epoch_order(options, epoch, group);
      if (all_of(*shared) != all_of(*make_epoch_order(options, epoch))) return false;
      if (shared->at(5) != make_epoch_order(options, epoch)->at(5)) return false;
    }
    const NodeOrderCounts end = node_order_counts();
    return end.built - start.built == (r == 0 ? 3u : 0u) &&
           end.mapped - start.mapped == (r == 0 ? 0u : 3u) && end.fallbacks == start.fallbacks;
  });
  EXPECT_TRUE(ok);
  EXPECT_EQ(held_segments(), 0);  // the orders are gone, and their memory with them
}

TEST(NodeOrder, PrefetchingSamplersShareTheNextEpoch) {
  const bool ok = on_local_ranks(3, [&](uint64_t r) {
    SamplerOptions o;
    o.size = 50000;
    o.world_size = 6;
    o.rank = r * 2;
    o.seed = Seed(3);
    const NodeGroup group = group_of("prefetch", r, 3);
    const DistributedSampler plain(o);
    {
      PrefetchingSampler sampler(o, true, node_order_builder(group));
      for (uint64_t epoch = 0; epoch < 4; ++epoch) {
        const RankView view = sampler.epoch(epoch);
        const RankView want = plain.epoch(epoch);
        std::vector<uint64_t> a(view.size()), b(want.size());
        view.fill(0, a.size(), a.data());
        want.fill(0, b.size(), b.data());
        if (a != b) {
          std::fprintf(stderr, "local rank %d epoch %d: indices differ\n", static_cast<int>(r),
                       static_cast<int>(epoch));
          return false;
        }
      }
    }  // rank 0 may exit before building epoch 4, which the others then stop waiting for
    return true;
  });
  EXPECT_TRUE(ok);
  EXPECT_EQ(held_segments(), 0);  // epoch 4's, never asked for, went with the sampler
}

TEST(NodeOrder, AReaderWithoutABuilderTimesOutWithAClearError) {
  NodeGroup group = group_of("lonely", 1, 2);
  group.timeout_seconds = 0.2;
  try {
    make_node_epoch_order(torch_options(1000), 0, group);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("did not publish epoch 0"), std::string::npos) << e.what();
  }
  group.timeout_seconds = 60;
  EXPECT_THROW(make_node_epoch_order(torch_options(1000), 0, group, [] { return true; }),
               OrderCancelled);
}

TEST(NodeOrder, ABuilderReplacesALeftoverOfTheSameName) {
  const OrderOptions options = torch_options(4096);
  const NodeGroup builder = group_of("leftover", 0, 2);
  NodeGroup reader = builder;
  reader.local_rank = 1;
  auto first = make_node_epoch_order(options, 1, builder);  // never mapped by rank 1: pending
  auto second = make_node_epoch_order(options, 1, builder);
  auto mapped = make_node_epoch_order(options, 1, reader);
  EXPECT_EQ(all_of(*mapped), all_of(*make_epoch_order(options, 1)));
  EXPECT_EQ(all_of(*first), all_of(*second));
}

// 2^33 positions of 8 bytes: 64 GiB, more than this machine's memory. Local rank 0 warns and
// publishes a failed segment, local rank 1 sees it and falls back too; each then builds its own
// permutation, which here is refused as too large for memory (length_error), as without sharing.
TEST(NodeOrder, NoRoomInSharedMemoryFallsBackToThePerRankBuildOnEveryRank) {
  const OrderOptions options = torch_options(uint64_t{1} << 33);
  const uint64_t bytes = (uint64_t{1} << 33) * 8;
  if (make_epoch_order_fits(bytes))
    DISTSAMPLER_SKIP("this machine could build 64 GiB: no failure to fall back from");
  const bool ok = on_local_ranks(2, [&](uint64_t r) {
    const NodeOrderCounts start = node_order_counts();
    try {
      make_node_epoch_order(options, 0, group_of("full", r, 2));
      return false;
    } catch (const std::length_error&) {
    }
    return node_order_counts().fallbacks == start.fallbacks + 1;
  });
  EXPECT_TRUE(ok);
  EXPECT_EQ(held_segments(), 0);
}

// Defect 6 of issue 21: two samplers of one configuration (a training loader and an evaluation
// pass over the training set) on every local rank, used in turn, each with its own permutation.
TEST(NodeOrder, TwoSamplersOfOneConfigurationKeepTheirOwnSegments) {
  const bool ok = on_local_ranks(2, [&](uint64_t r) {
    SamplerOptions o;
    o.size = 30011;
    o.world_size = 2;
    o.rank = r;
    o.seed = Seed(9);
    const NodeGroup group = group_of("twins", r, 2);
    const DistributedSampler plain(o);
    const NodeOrderCounts start = node_order_counts();
    {
      PrefetchingSampler train(o, false, node_order_builder(group));
      PrefetchingSampler eval(o, false, node_order_builder(group));
      for (uint64_t epoch = 0; epoch < 3; ++epoch) {
        for (PrefetchingSampler* s : {&train, &eval, &eval}) {
          const RankView view = s->epoch(epoch);
          const RankView want = plain.epoch(epoch);
          std::vector<uint64_t> a(view.size()), b(want.size());
          view.fill(0, a.size(), a.data());
          want.fill(0, b.size(), b.data());
          if (a != b) return false;
        }
      }
    }
    const NodeOrderCounts end = node_order_counts();
    // Without prefetching every epoch() call builds: 3 calls x 3 epochs.
    return end.fallbacks == start.fallbacks &&
           (r == 0 ? end.built - start.built : end.mapped - start.mapped) == 9u;
  });
  EXPECT_TRUE(ok);
}

// Defect 7 of issue 21: however the ranks end, nothing is left in /dev/shm. Local rank 0 is
// killed with SIGKILL while it builds a large permutation (the reader waits for it), then a
// finished build's builder is stopped with SIGTERM (as torchrun stops the other ranks after an
// exception on one) before its reader ever asked.
TEST(NodeOrder, KilledRanksLeaveNothingInSharedMemory) {
  const auto before = shm_names();
  const OrderOptions big = torch_options(40000000);
  for (int signal : {SIGKILL, SIGTERM}) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    std::fflush(nullptr);
    std::vector<pid_t> ranks;
    for (uint64_t r = 0; r < 2; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        const NodeGroup group = group_of(signal == SIGKILL ? "killed" : "stopped", r, 2);
        if (r == 1 && signal == SIGTERM) pause();  // never asks: dies with the job
        if (r == 0 && signal == SIGTERM) {
          auto order = make_node_epoch_order(torch_options(1000), 0, group);
          (void)!write(ready[1], "x", 1);
          pause();
        }
        (void)!write(ready[1], "x", 1);  // started: rank 0 builds, rank 1 waits
        make_node_epoch_order(big, 0, group);
        _exit(0);
      }
      ranks.push_back(pid);
    }
    char byte;
    for (int i = 0; i < (signal == SIGKILL ? 2 : 1); ++i) ASSERT_EQ(read(ready[0], &byte, 1), 1);
    // Into the build (about a second for 4 * 10^7 positions): where it is does not matter, only
    // that it is not finished; a finished one is no worse a test.
    usleep(100000);
    for (pid_t pid : ranks) kill(pid, signal);
    for (pid_t pid : ranks) waitpid(pid, nullptr, 0);
    close(ready[0]);
    close(ready[1]);
  }
  EXPECT_EQ(new_names(before), 0u);
}

// A fork of local rank 0's process (the serving thread stays behind in the parent) builds its
// own, with the fallback warning, instead of publishing where nothing answers.
TEST(NodeOrder, AForkedBuilderFallsBack) {
  const OrderOptions options = torch_options(5000);
  const NodeGroup group = group_of("forked", 0, 2);
  make_node_epoch_order(options, 0, group);  // this process serves the node now
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const NodeOrderCounts start = node_order_counts();
    const auto order = make_node_epoch_order(options, 1, group);
    const bool ok = all_of(*order) == all_of(*make_epoch_order(options, 1)) &&
                    node_order_counts().fallbacks == start.fallbacks + 1 &&
                    node_order_counts().built == start.built;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Issue 28: the server counts each reader once per publication. Reader 1 asking twice for
// epoch 0 used to count as both readers, so the descriptor was dropped (two newer epochs
// published) before reader 2 had it, and reader 2 waited for its timeout.
TEST(NodeOrder, AReaderAskingTwiceDoesNotStandInForAnother) {
  const OrderOptions options = torch_options(4096);
  const NodeGroup builder = group_of("twice", 0, 3);
  NodeGroup first = builder;
  first.local_rank = 1;
  NodeGroup second = builder;
  second.local_rank = 2;
  second.timeout_seconds = 5;
  const auto zero = make_node_epoch_order(options, 0, builder);
  make_node_epoch_order(options, 0, first);
  make_node_epoch_order(options, 0, first);  // again: a retried or discarded fetch
  make_node_epoch_order(options, 1, builder);
  make_node_epoch_order(options, 2, builder);  // epoch 0 goes once every reader has it
  EXPECT_EQ(all_of(*make_node_epoch_order(options, 0, second)), all_of(*zero));
}

// Issue 28: local rank 0's process dies (SIGKILL) before it publishes epoch 1. A reader that had
// epoch 0 from it gets an error naming that at once, not after its 60 s timeout.
TEST(NodeOrder, AReaderLearnsAtOnceThatLocalRank0IsGone) {
  const OrderOptions options = torch_options(4096);
  NodeGroup reader = group_of("gone", 1, 2);
  reader.timeout_seconds = 60;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    make_node_epoch_order(options, 0, group_of("gone", 0, 2));
    (void)!write(ready[1], "x", 1);
    pause();  // killed before it builds epoch 1
    _exit(0);
  }
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  close(ready[1]);
  EXPECT_EQ(all_of(*make_node_epoch_order(options, 0, reader)),
            all_of(*make_epoch_order(options, 0)));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    make_node_epoch_order(options, 1, reader);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("stopped serving before it published epoch 1"),
              std::string::npos)
        << e.what();
  }
  // Well before the timeout (a loaded machine gets 30 s of slack).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30);
}

TEST(NodeOrder, OtherOrdersAndSingleRankNodesAreLocal) {
  OrderOptions feistel = torch_options(1000);
  feistel.kind = OrderKind::kFeistel;
  const NodeOrderCounts start = node_order_counts();
  const NodeGroup reader = group_of("local", 1, 2);  // would wait, were the order shared
  EXPECT_EQ(all_of(*make_node_epoch_order(feistel, 0, reader)),
            all_of(*make_epoch_order(feistel, 0)));
  EXPECT_EQ(all_of(*make_node_epoch_order(torch_options(1000), 0, group_of("one", 0, 1))),
            all_of(*make_epoch_order(torch_options(1000), 0)));
  EXPECT_EQ(node_order_counts().built, start.built);
}

}  // namespace
}  // namespace distsampler
