// One torch-order permutation per node: local rank 0 builds, the others map (node/node_order.h).
//
// A segment has no name: local rank 0 builds the permutation into an anonymous memory file
// (memfd_create), one 4 KiB header page (the configuration and a checksum) then the permutation
// as build_torch_order writes it, seals it against writes and keeps the descriptor. The other
// local ranks fetch the descriptor from it over a Unix socket (SCM_RIGHTS) and map it read-only.
// The kernel frees the memory with the last descriptor or mapping, so nothing outlives the
// processes however they end (SIGKILL during a build, an exception on one rank): there is no
// /dev/shm name to leak and no cleanup to run. The socket's address is in Linux's abstract
// namespace (no file either) and names the job and the node; a request names the configuration,
// the sampler instance (the k-th node-shared sampler of that configuration in the process: two
// samplers of one configuration keep separate permutations, never each other's) and the epoch.
//
// Local rank 0 runs one server thread per (job, node) for the life of the process; it answers
// "not yet", "failed" (the readers fall back) or the descriptor, and drops a descriptor once every
// other local rank has fetched it (counted per reader: one that asks twice is still one) and its
// instance has kKeptEpochs newer ones, or when its sampler is destroyed and every reader has it
// (or the group's timeout has passed since). Readers poll with growing sleeps, check every header
// field against their own configuration and the checksum, and map it read-only; a reader that
// has had an answer from the server and then finds nothing listening throws at once (the server
// lives as long as local rank 0's process, so that process is gone and nothing will come).
//
// This file: the launcher's node group and the public entry points; the segment:
// node_order_segment.cc, local rank 0's builder and server: node_order_server.cc, the readers:
// node_order_reader.cc (their shared declarations: node_order_internal.h).
#include "distsampler/node/node_order.h"

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "distsampler/launch/env.h"
#include "node_order_internal.h"

namespace distsampler {
namespace {

// The k-th node-shared sampler of a configuration in this process gets instance k: the ranks of
// a node create their samplers in the same order, so the instances agree without a message.
// Counted per local rank too, for a process that plays several (tests).
uint64_t claim_instance(const NodeGroup& group, uint64_t config) {
  using Key = std::tuple<std::string, std::string, uint64_t, uint64_t>;
  static std::mutex* mutex = new std::mutex();
  static auto* next = new std::map<Key, uint64_t>();
  std::lock_guard<std::mutex> lock(*mutex);
  return (*next)[Key{group.job, group.node, group.local_rank, config}]++;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

const char* process_env(const char* name) { return std::getenv(name); }

}  // namespace

std::optional<NodeGroup> detect_node_group(const EnvLookup& lookup) {
  auto value = [&](const char* name) -> std::string {
    const char* v = lookup(name);
    return v != nullptr ? v : "";
  };
  NodeGroup group;
  if (lookup("LOCAL_RANK") != nullptr && lookup("LOCAL_WORLD_SIZE") != nullptr) {
    group.local_rank = parse_env_count("LOCAL_RANK", lookup("LOCAL_RANK"));
    group.local_world_size = parse_env_count("LOCAL_WORLD_SIZE", lookup("LOCAL_WORLD_SIZE"));
    group.job = "torchrun:" + value("TORCHELASTIC_RUN_ID") + "@" + value("MASTER_ADDR") + ":" +
                value("MASTER_PORT") + "#" + value("TORCHELASTIC_RESTART_COUNT");
    group.node = host_name() + "/" + value("GROUP_RANK");
  } else if (lookup("OMPI_COMM_WORLD_LOCAL_RANK") != nullptr &&
             lookup("OMPI_COMM_WORLD_LOCAL_SIZE") != nullptr) {
    group.local_rank =
        parse_env_count("OMPI_COMM_WORLD_LOCAL_RANK", lookup("OMPI_COMM_WORLD_LOCAL_RANK"));
    group.local_world_size =
        parse_env_count("OMPI_COMM_WORLD_LOCAL_SIZE", lookup("OMPI_COMM_WORLD_LOCAL_SIZE"));
    group.job = "openmpi:" + value("OMPI_MCA_ess_base_jobid") + value("PMIX_NAMESPACE");
    group.node = host_name();
  } else if (slurm_in_step(lookup) && lookup("SLURM_LOCALID") != nullptr &&
             lookup("SLURM_NODEID") != nullptr) {
    // A step's tasks on this node: SLURM_NODEID indexes the step's compressed tasks per node
    // ("3,1", "2(x2)"). Two slurmd on one host are two nodes, as SLURM sees them.
    const char* per_node_name = lookup("SLURM_STEP_TASKS_PER_NODE") != nullptr
                                    ? "SLURM_STEP_TASKS_PER_NODE"
                                    : "SLURM_TASKS_PER_NODE";
    if (lookup(per_node_name) == nullptr) return std::nullopt;
    const uint64_t node_id = parse_env_count("SLURM_NODEID", lookup("SLURM_NODEID"));
    group.local_rank = parse_env_count("SLURM_LOCALID", lookup("SLURM_LOCALID"));
    group.local_world_size = slurm_tasks_on_node(value(per_node_name), node_id, per_node_name);
    group.job = "slurm:" + value("SLURM_JOB_ID") + "." + value("SLURM_STEP_ID") + "@" +
                value("SLURM_CLUSTER_NAME");
    group.node = host_name() + "/" + std::to_string(node_id);
  } else {
    return std::nullopt;
  }
  if (group.local_world_size == 0 || group.local_rank >= group.local_world_size) {
    throw std::invalid_argument(
        "local rank = " + std::to_string(group.local_rank) +
        "; allowed: < local world size = " + std::to_string(group.local_world_size));
  }
  return group;
}

std::optional<NodeGroup> detect_node_group() { return detect_node_group(process_env); }

namespace {

using detail::node::Request;

// One sampler's share of the node: its instance, claimed at its first build.
struct NodeBuilder {
  NodeGroup group;
  std::mutex mutex;
  std::map<uint64_t, uint64_t> instances;  // config -> instance
  ~NodeBuilder() {
    if (group.local_rank != 0) return;
    for (const auto& [config, instance] : instances) {
      detail::node::release_instance(group, config, instance);
    }
  }
};

std::shared_ptr<const EpochOrder> node_epoch_order(const OrderOptions& options, uint64_t epoch,
                                                   const NodeGroup& group,
                                                   const std::function<bool()>& cancelled,
                                                   NodeBuilder* builder) {
  validate(options);
  if (!options.shuffle || options.kind != OrderKind::kTorch || group.local_world_size <= 1) {
    return make_epoch_order(options, epoch);
  }
  detail::node::expected_identity(options, epoch);  // throws on seed + epoch overflow
  Request request{detail::node::config_key(options), detail::node::kDirect, epoch,
                  group.local_rank};
  if (builder != nullptr) {
    std::lock_guard<std::mutex> lock(builder->mutex);
    auto it = builder->instances.find(request.config);
    if (it == builder->instances.end()) {
      it = builder->instances.emplace(request.config, claim_instance(group, request.config)).first;
    }
    request.instance = it->second;
  }
  std::shared_ptr<const EpochOrder> order =
      group.local_rank == 0 ? detail::node::build_shared(options, epoch, group, request)
                            : detail::node::map_shared(options, epoch, group, request, cancelled);
  return order ? order : make_epoch_order(options, epoch);
}

}  // namespace

std::shared_ptr<const EpochOrder> make_node_epoch_order(const OrderOptions& options, uint64_t epoch,
                                                        const NodeGroup& group,
                                                        const std::function<bool()>& cancelled) {
  return node_epoch_order(options, epoch, group, cancelled, nullptr);
}

OrderBuilder node_order_builder(const NodeGroup& group) {
  auto builder = std::make_shared<NodeBuilder>();
  builder->group = group;
  return [builder](const OrderOptions& options, uint64_t epoch,
                   const std::function<bool()>& cancelled) {
    return node_epoch_order(options, epoch, builder->group, cancelled, builder.get());
  };
}

NodeOrderCounts node_order_counts() {
  return NodeOrderCounts{detail::node::g_built.load(), detail::node::g_mapped.load(),
                         detail::node::g_fallbacks.load()};
}

}  // namespace distsampler
