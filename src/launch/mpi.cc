#include "distsampler/launch/mpi.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace distsampler {

void agree_on_configuration(MPI_Comm comm, const Fingerprint& mine) {
  int size = 0;
  if (MPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    throw std::runtime_error("agree_on_configuration: MPI_Comm_size failed");
  }
  const std::string bytes = encode_state(SamplerState{mine, 0, 0});
  std::vector<char> all(bytes.size() * static_cast<size_t>(size));
  if (MPI_Allgather(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, all.data(),
                    static_cast<int>(bytes.size()), MPI_BYTE, comm) != MPI_SUCCESS) {
    throw std::runtime_error("agree_on_configuration: MPI_Allgather failed");
  }
  std::vector<Fingerprint> per_rank;
  for (int r = 0; r < size; ++r) {
    per_rank.push_back(
        decode_state(std::string_view(all.data() + r * bytes.size(), bytes.size())).config);
  }
  const std::string message = describe_disagreement(per_rank);
  if (!message.empty()) {
    throw ConfigurationMismatch(
        "the sampler configuration differs across ranks, refusing to "
        "start: " +
        message);
  }
}

NodeGroup node_group(MPI_Comm comm, double timeout_seconds) {
  auto check = [](int code, const char* what) {
    if (code != MPI_SUCCESS)
      throw std::runtime_error(std::string("node_group: ") + what + " failed");
  };
  int rank = 0;
  check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  MPI_Comm local;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
  int local_rank = 0;
  int local_size = 1;
  int lowest = rank;
  const bool ok = MPI_Comm_rank(local, &local_rank) == MPI_SUCCESS &&
                  MPI_Comm_size(local, &local_size) == MPI_SUCCESS &&
                  MPI_Allreduce(&rank, &lowest, 1, MPI_INT, MPI_MIN, local) == MPI_SUCCESS;
  MPI_Comm_free(&local);
  if (!ok) throw std::runtime_error("node_group: querying the shared-memory communicator failed");
  // The job token: not an output path, any value unique to this run will do.
  char token[128] = {};
  if (rank == 0) {
    char host[64] = {};
    gethostname(host, sizeof host - 1);
    const auto now = std::chrono::system_clock::now().time_since_epoch().count();
    std::snprintf(token, sizeof token, "mpi:%s:%ld:%lld", host, static_cast<long>(getpid()),
                  static_cast<long long>(now));
  }
  check(MPI_Bcast(token, sizeof token, MPI_CHAR, 0, comm), "MPI_Bcast");
  NodeGroup group;
  group.job = std::string(token, strnlen(token, sizeof token));
  group.node = "mpi-rank-" + std::to_string(lowest);
  group.local_rank = static_cast<uint64_t>(local_rank);
  group.local_world_size = static_cast<uint64_t>(local_size);
  group.timeout_seconds = timeout_seconds;
  return group;
}

}  // namespace distsampler
