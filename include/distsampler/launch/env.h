// env.h: this process's rank and world size, from the launcher's environment variables.
#ifndef DISTSAMPLER_LAUNCH_ENV_H_
#define DISTSAMPLER_LAUNCH_ENV_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace distsampler {

// Where a process sits in the job.
struct DistEnv {
  uint64_t rank = 0;
  uint64_t world_size = 1;
  std::optional<uint64_t> local_rank;  // rank within the node, when the launcher says
  std::string source;                  // "given", "torchrun", "openmpi", "pmi" or "slurm"
};

// Looks up an environment variable; nullptr when unset. Tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;

// Reads the launcher's variables, innermost launcher first (a torchrun started by srun sees both):
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK
//   openmpi   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   pmi       PMI_RANK, PMI_SIZE (MPICH, Intel MPI)
//   slurm     SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID, in a job
//             step only (SLURM_STEP_ID or SLURM_STEP_NUM_TASKS set, as srun does)
// Returns nullopt when none is set. Throws std::invalid_argument when SLURM_PROCID or SLURM_NTASKS
// is set outside a job step (a program run in a batch script or an salloc shell without srun:
// those variables describe the allocation, and rank 0 of SLURM_NTASKS would read a part only),
// and naming the variable and its value when a launcher's variables are partial (a rank without
// a size), not a decimal integer, or inconsistent (rank >= world size, world size 0).
std::optional<DistEnv> detect_dist_env(const EnvLookup& lookup);
std::optional<DistEnv> detect_dist_env();  // the process environment

// A launcher variable's value as a count (a rank, a size, a node id): decimal digits only, at
// most 19. Throws std::invalid_argument naming `name`, the value and what is allowed otherwise.
uint64_t parse_env_count(const char* name, const char* text);

// Whether SLURM's variables describe a job step this process is a task of (srun sets
// SLURM_STEP_ID and SLURM_STEP_NUM_TASKS; a batch script or an salloc shell has neither).
bool slurm_in_step(const EnvLookup& lookup);

// Throws std::invalid_argument when SLURM_PROCID or SLURM_NTASKS is set outside a job step
// (!slurm_in_step): in a batch script or an salloc shell without srun they describe the
// allocation, not this process. One line naming the values set, ending in `remedy` (what the
// caller's user can do instead). The one owner of this rule and its text: detect_dist_env and
// Python's distsampler.launch (through the extension) call it.
void refuse_slurm_outside_step(const EnvLookup& lookup, const std::string& remedy);

// The tasks on node `node_id` from SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE's compressed
// form ("3,1": 3 on node 0, 1 on node 1; "2(x3),1": 2 on nodes 0-2, 1 on node 3). Throws
// std::invalid_argument naming `name` and the value when it is malformed or has no such node.
uint64_t slurm_tasks_on_node(const std::string& tasks_per_node, uint64_t node_id,
                             const char* name = "SLURM_STEP_TASKS_PER_NODE");

// The first host of a SLURM host list, what `scontrol show hostnames` prints first
// ("node[01-04,07],gpu3" -> "node01", "rack[2-3]-n[005-006]" -> "rack2-n005"): each bracket group
// gives its first number, zero padding kept. Throws std::invalid_argument naming the list when it
// is not host names and bracketed ranges.
std::string slurm_first_host(const std::string& nodelist);

// The address of the master for a SLURM node list (distsampler.launch asks scontrol).
using MasterAddress = std::function<std::string(const std::string& nodelist)>;

// torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) from a SLURM job
// step's, without those `lookup` already has; empty when neither SLURM_PROCID nor SLURM_NTASKS is
// set. WORLD_SIZE is the step's SLURM_STEP_NUM_TASKS, else SLURM_NTASKS; LOCAL_RANK
// SLURM_LOCALID when set; MASTER_ADDR `master_address` of SLURM_STEP_NODELIST, else
// SLURM_JOB_NODELIST; MASTER_PORT in [12000, 32000) (below Linux's ephemeral range) from
// SLURM_JOB_ID and SLURM_STEP_ID: the same on every task of a step, another for the job's other
// steps. Throws std::runtime_error (one line) outside a step (refuse_slurm_outside_step) or when a
// variable it needs is unset, std::invalid_argument for a value that is not a count.
std::vector<std::pair<std::string, std::string>> slurm_torchrun_env(
    const EnvLookup& lookup, const MasterAddress& master_address);

// The rank and world size to use: `rank` and `world_size` when both are given (validated),
// otherwise the launcher's (given values win over the environment). Throws std::invalid_argument
// when only one is given, when rank >= world_size, when the launcher's variables are bad (as
// detect_dist_env), or when neither is given and no launcher variable is set (the message lists
// the variables looked for).
DistEnv resolve_dist_env(std::optional<uint64_t> rank, std::optional<uint64_t> world_size,
                         const EnvLookup& lookup);
DistEnv resolve_dist_env(std::optional<uint64_t> rank = std::nullopt,
                         std::optional<uint64_t> world_size = std::nullopt);

}  // namespace distsampler

#endif  // DISTSAMPLER_LAUNCH_ENV_H_
