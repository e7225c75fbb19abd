// launch/mpi.h: configuration agreement over MPI before the first batch.
#ifndef DISTSAMPLER_LAUNCH_MPI_H_
#define DISTSAMPLER_LAUNCH_MPI_H_

#include <mpi.h>

#include <stdexcept>

#include "distsampler/node/node_order.h"
#include "distsampler/state.h"

namespace distsampler {

// Thrown on every rank when the ranks' fingerprints differ.
struct ConfigurationMismatch : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Collective over `comm`: every rank contributes its fingerprint (MPI_Allgather of the 60-byte
// state encoding) and every rank compares all of them. When they differ (one rank started with
// another seed or dataset size, say), every rank throws ConfigurationMismatch with the same
// message, one line per differing field naming its values and the ranks holding them
// (describe_disagreement). Call it before the first batch, so that no rank trains on an order
// the others do not share. MPI errors are thrown as std::runtime_error.
void agree_on_configuration(MPI_Comm comm, const Fingerprint& mine);

// Collective over `comm`: this rank's node group for make_node_epoch_order (node/node_order.h),
// from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): local rank and size among the ranks of comm
// that share memory with it, the node named by the lowest rank of comm among them, and a job
// token that rank 0 of comm draws (host name, process id, clock) and broadcasts, so that no
// other job's segments are ever taken for this one's. MPI errors are thrown as
// std::runtime_error.
NodeGroup node_group(MPI_Comm comm, double timeout_seconds = 300);

}  // namespace distsampler

#endif  // DISTSAMPLER_LAUNCH_MPI_H_
