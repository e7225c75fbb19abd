// node/node_order.h: one torch-order permutation per node, in memory shared by its ranks.
#ifndef DISTSAMPLER_NODE_NODE_ORDER_H_
#define DISTSAMPLER_NODE_NODE_ORDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "distsampler/launch/env.h"
#include "distsampler/order.h"
#include "distsampler/prefetch.h"

namespace distsampler {

// The ranks of one node that share their orders, and the job they belong to.
struct NodeGroup {
  // The same on every rank of the job, different from any other job's: names the segments, so
  // that a dead job's leftovers are never taken for this job's.
  std::string job;
  // The same on the ranks that share, different between them and the job's other ranks (the
  // launcher's node rank: two torchrun agents on one host are two nodes).
  std::string node;
  uint64_t local_rank = 0;
  uint64_t local_world_size = 1;
  // How long a rank waits for local rank 0's permutation before it throws.
  double timeout_seconds = 300;
};

// The node group from the launcher's variables, innermost launcher first:
//   torchrun  LOCAL_RANK, LOCAL_WORLD_SIZE; node GROUP_RANK; job TORCHELASTIC_RUN_ID,
//             MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT
//   openmpi   OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE; node: the host name
//             (OMPI_COMM_WORLD_NODE_RANK is not per node); job OMPI_MCA_ess_base_jobid or
//             PMIX_NAMESPACE
//   slurm     in a job step (slurm_in_step, env.h): SLURM_LOCALID, the count for SLURM_NODEID in
//             SLURM_STEP_TASKS_PER_NODE ("3,1", "2(x2)"); node SLURM_NODEID; job SLURM_JOB_ID,
//             SLURM_STEP_ID
// nullopt when no launcher with a local rank and local world size is found. Throws
// std::invalid_argument naming the variable when a value is not a decimal integer or
// local rank >= local world size. Under MPI, launch/mpi.h's node_group() asks the library instead.
std::optional<NodeGroup> detect_node_group(const EnvLookup& lookup);
std::optional<NodeGroup> detect_node_group();  // the process environment

// make_epoch_order(options, epoch), the same bits, with the shuffled torch order built once per
// node: local rank 0 builds it into an anonymous memory file (memfd_create; a header page holds
// n, seed, epoch, variant and a checksum), sealed against writes, and hands its descriptor to the
// other local ranks over a Unix socket in the abstract namespace; they map it read-only. Nothing
// has a name in /dev/shm or the file system: the kernel frees the memory with the last process
// that holds it, however the job ends (SIGKILL, an exception on one rank), with nothing to clean.
// Local rank 0 keeps serving from a thread for the life of its process. Every local rank must
// ask for the same epochs (as a training loop does). Two node_order_builder samplers of the same
// configuration keep separate permutations: the k-th one created in each process is paired with
// the k-th on the node's other ranks (they must create them in the same order, as the same
// program does); make_node_epoch_order itself is one more such sampler.
//
// Where this is not available (memfd or sockets refused, not enough memory), every rank prints
// one line to stderr and builds its own permutation: same bits, per-rank memory.
// Throws std::runtime_error when local rank 0 has not published the epoch within
// group.timeout_seconds (it died before it ever answered this process, or runs another
// configuration), and at once when its process is gone after having answered this process once;
// otherwise make_epoch_order's errors. Other orders (feistel, unshuffled) are O(1) and built
// locally. A waiting rank polls `cancelled` (when given) and throws OrderCancelled once it
// returns true.
std::shared_ptr<const EpochOrder> make_node_epoch_order(
    const OrderOptions& options, uint64_t epoch, const NodeGroup& group,
    const std::function<bool()>& cancelled = {});

// make_node_epoch_order as a PrefetchingSampler's order builder (prefetch.h).
OrderBuilder node_order_builder(const NodeGroup& group);

// For tests and benchmarks: permutations this process built into shared memory, and those it
// mapped from another rank.
struct NodeOrderCounts {
  uint64_t built = 0;
  uint64_t mapped = 0;
  uint64_t fallbacks = 0;  // built per rank because shared memory was not available
};
NodeOrderCounts node_order_counts();

}  // namespace distsampler

#endif  // DISTSAMPLER_NODE_NODE_ORDER_H_
