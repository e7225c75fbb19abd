#include "distsampler/dist/mpi.h"

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

}  // namespace distsampler
