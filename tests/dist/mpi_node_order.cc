// The node-shared torch order under mpirun (launch/mpi.h's node_group, node/node_order.h): every
// rank reads 3 epochs through a prefetching sampler whose permutation local rank 0 builds in
// shared memory, checks them against the per-rank build bit for bit, and rank 0 checks that each
// node of several ranks built every epoch once (plus at most one prefetched) and that no rank
// fell back. The
// environment's node group (OMPI_COMM_WORLD_LOCAL_*) must agree with MPI's. Exit code 0 when
// all of that holds on every rank.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "distsampler/launch/mpi.h"
#include "distsampler/node/node_order.h"
#include "distsampler/prefetch.h"
#include "distsampler/sampler.h"

int main(int argc, char** argv) {
  using namespace distsampler;
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  constexpr uint64_t kEpochs = 3;
  int ok = 1;
  const NodeGroup group = node_group(MPI_COMM_WORLD, 60);
  if (const auto env = detect_node_group()) {
    if (env->local_rank != group.local_rank || env->local_world_size != group.local_world_size) {
      std::fprintf(stderr, "rank %d: environment and MPI disagree on the node group\n", rank);
      ok = 0;
    }
  }
  SamplerOptions options;
  options.size = 1000003;
  options.world_size = static_cast<uint64_t>(size);
  options.rank = static_cast<uint64_t>(rank);
  options.seed = Seed(11);
  {
    PrefetchingSampler shared(options, true, node_order_builder(group));
    const DistributedSampler plain(options);
    for (uint64_t epoch = 0; epoch < kEpochs; ++epoch) {
      const RankView got = shared.epoch(epoch);
      const RankView want = plain.epoch(epoch);
      std::vector<uint64_t> a(got.size()), b(want.size());
      got.fill(0, a.size(), a.data());
      want.fill(0, b.size(), b.data());
      if (a != b) {
        std::fprintf(stderr, "rank %d epoch %d: indices differ\n", rank, static_cast<int>(epoch));
        ok = 0;
      }
    }
  }
  const NodeOrderCounts c = node_order_counts();
  // A rank alone on its node (srun -N2 -n4 may place 3 + 1) builds its own, as without sharing.
  const bool counts_ok = group.local_world_size == 1 ? c.built == 0 && c.mapped == 0
                         : group.local_rank == 0
                             ? kEpochs <= c.built && c.built <= kEpochs + 1 && c.mapped == 0
                             : c.built == 0 && c.mapped >= kEpochs;
  if (!counts_ok || c.fallbacks != 0) {
    std::fprintf(stderr, "rank %d (local %d of %d): built %d, mapped %d, fallbacks %d\n", rank,
                 static_cast<int>(group.local_rank), static_cast<int>(group.local_world_size),
                 static_cast<int>(c.built), static_cast<int>(c.mapped),
                 static_cast<int>(c.fallbacks));
    ok = 0;
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0 && all_ok) {
    std::printf("ok: %d ranks, %d per node, %d epochs, one build per node and epoch\n", size,
                static_cast<int>(group.local_world_size), static_cast<int>(kEpochs));
  }
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
