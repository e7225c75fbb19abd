#include "distsampler/launch/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace distsampler {
namespace {

struct Launcher {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;  // nullptr when the launcher has none
};

// Innermost first: torchrun under srun, or mpirun under SLURM, sees the outer launcher's too.
constexpr Launcher kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"pmi", "PMI_RANK", "PMI_SIZE", nullptr},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

void check(uint64_t rank, uint64_t world_size, const std::string& rank_name,
           const std::string& size_name) {
  if (world_size == 0) throw std::invalid_argument(size_name + " = 0; allowed: >= 1");
  if (rank >= world_size) {
    throw std::invalid_argument(rank_name + " = " + std::to_string(rank) + "; allowed: < " +
                                size_name + " = " + std::to_string(world_size));
  }
}

const char* process_env(const char* name) { return std::getenv(name); }

}  // namespace

uint64_t parse_env_count(const char* name, const char* text) {
  const std::string s = text;
  bool ok = !s.empty() && s.size() <= 19;
  for (char c : s) ok = ok && c >= '0' && c <= '9';
  if (!ok) {
    throw std::invalid_argument(std::string(name) + " = '" + s +
                                "'; allowed: a decimal integer >= 0 (at most 19 digits)");
  }
  return std::stoull(s);
}

bool slurm_in_step(const EnvLookup& lookup) {
  return lookup("SLURM_STEP_ID") != nullptr || lookup("SLURM_STEP_NUM_TASKS") != nullptr;
}

// SLURM exports SLURM_PROCID and SLURM_NTASKS in the batch script and SLURM_NTASKS in an salloc
// shell too, where they describe the allocation, not this process: only a step started by srun
// sets SLURM_STEP_ID / SLURM_STEP_NUM_TASKS (the batch script's own step has no SLURM_STEP_ID).
void refuse_slurm_outside_step(const EnvLookup& lookup, const std::string& remedy) {
  if (slurm_in_step(lookup)) return;
  const char* ntasks = lookup("SLURM_NTASKS");
  const char* procid = lookup("SLURM_PROCID");
  if (ntasks == nullptr && procid == nullptr) return;
  std::string seen;
  if (procid != nullptr) seen += std::string("SLURM_PROCID = ") + procid;
  if (ntasks != nullptr) seen += std::string(seen.empty() ? "" : ", ") + "SLURM_NTASKS = " + ntasks;
  throw std::invalid_argument(
      seen + " without SLURM_STEP_ID: this process runs in a SLURM allocation (a batch script or "
      "an salloc shell) but not in a job step, so those describe the allocation, not this "
      "process; " + remedy);
}

uint64_t slurm_tasks_on_node(const std::string& tasks_per_node, uint64_t node_id,
                             const char* name) {
  // Comma-separated groups, each COUNT or COUNT(xREPEAT): "3,1", "2(x2)", "2(x3),1".
  auto bad = [&]() {
    return std::invalid_argument(std::string(name) + " = '" + tasks_per_node +
                                 "'; allowed: COUNT or COUNT(xREPEAT), comma-separated, "
                                 "covering the node index " + std::to_string(node_id));
  };
  if (tasks_per_node.empty() || tasks_per_node.front() == ',' || tasks_per_node.back() == ',' ||
      tasks_per_node.find(",,") != std::string::npos) {
    throw bad();
  }
  uint64_t node = 0;
  size_t i = 0;
  while (i <= tasks_per_node.size()) {
    const size_t end = std::min(tasks_per_node.find(',', i), tasks_per_node.size());
    const std::string group = tasks_per_node.substr(i, end - i);
    const size_t paren = group.find('(');
    std::string count_text = group.substr(0, paren);
    std::string repeat_text = "1";
    if (paren != std::string::npos) {
      if (group.size() < paren + 4 || group[paren + 1] != 'x' || group.back() != ')') throw bad();
      repeat_text = group.substr(paren + 2, group.size() - paren - 3);
    }
    uint64_t count = 0;
    uint64_t repeat = 0;
    try {
      count = parse_env_count(name, count_text.c_str());
      repeat = parse_env_count(name, repeat_text.c_str());
    } catch (const std::invalid_argument&) {
      throw bad();
    }
    if (count == 0 || repeat == 0) throw bad();
    if (node_id - node < repeat) return count;
    node += repeat;
    i = end + 1;
  }
  throw bad();
}

std::string slurm_first_host(const std::string& nodelist) {
  // The first entry: up to the first comma outside brackets.
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    depth += nodelist[i] == '[' ? 1 : nodelist[i] == ']' ? -1 : 0;
    if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  const char* space = " \t\n\r\f\v";
  std::string entry = nodelist.substr(0, end);
  entry.erase(0, std::min(entry.find_first_not_of(space), entry.size()));
  entry.erase(entry.find_last_not_of(space) + 1);
  // Each [group] becomes its first number (up to the first '-' or ',').
  std::string host;
  for (size_t i = 0; i < entry.size(); ++i) {
    const size_t close = entry[i] == '[' ? entry.find(']', i) : std::string::npos;
    if (close == std::string::npos) {
      host += entry[i];
      continue;
    }
    const std::string group = entry.substr(i + 1, close - i - 1);
    host += group.substr(0, group.find_first_of("-,"));
    i = close;
  }
  bool ok = !entry.empty() && depth >= 0 && !host.empty();
  for (char c : host) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  }
  if (!ok) {
    throw std::invalid_argument("SLURM node list = '" + nodelist +
                                "'; allowed: host names and bracketed ranges such as "
                                "'node[01-04,07],gpu3'");
  }
  return host;
}

std::vector<std::pair<std::string, std::string>> slurm_torchrun_env(
    const EnvLookup& lookup, const MasterAddress& master_address) {
  std::vector<std::pair<std::string, std::string>> out;
  if (lookup("SLURM_PROCID") == nullptr && lookup("SLURM_NTASKS") == nullptr) return out;
  try {
    refuse_slurm_outside_step(lookup, "start it with srun (or torchrun)");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
  const char* procid = lookup("SLURM_PROCID");
  if (procid == nullptr) {
    throw std::runtime_error("SLURM_STEP_ID is set but SLURM_PROCID is not; srun sets both");
  }
  const char* size_name =
      lookup("SLURM_STEP_NUM_TASKS") != nullptr ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
  if (lookup(size_name) == nullptr) {
    throw std::runtime_error("SLURM_PROCID is set but neither SLURM_STEP_NUM_TASKS nor "
                             "SLURM_NTASKS is; srun sets both");
  }
  const uint64_t rank = parse_env_count("SLURM_PROCID", procid);
  const uint64_t world_size = parse_env_count(size_name, lookup(size_name));
  if (rank >= world_size) {
    throw std::runtime_error("SLURM_PROCID = " + std::to_string(rank) + "; allowed: < " +
                             size_name + " = " + std::to_string(world_size));
  }
  auto add = [&](const char* name, const std::string& value) {
    if (lookup(name) == nullptr) out.emplace_back(name, value);
  };
  add("RANK", std::to_string(rank));
  add("WORLD_SIZE", std::to_string(world_size));
  if (const char* local = lookup("SLURM_LOCALID")) {
    add("LOCAL_RANK", std::to_string(parse_env_count("SLURM_LOCALID", local)));
  }
  if (lookup("MASTER_ADDR") == nullptr) {
    const char* nodelist = lookup("SLURM_STEP_NODELIST");
    if (nodelist == nullptr || *nodelist == '\0') nodelist = lookup("SLURM_JOB_NODELIST");
    if (nodelist == nullptr || *nodelist == '\0') {
      throw std::runtime_error("neither MASTER_ADDR nor SLURM_STEP_NODELIST/SLURM_JOB_NODELIST "
                               "is set; set MASTER_ADDR to the host of rank 0");
    }
    add("MASTER_ADDR", master_address(nodelist));
  }
  if (lookup("MASTER_PORT") == nullptr) {
    const char* job = lookup("SLURM_JOB_ID");
    if (job == nullptr) {
      throw std::runtime_error("neither MASTER_PORT nor SLURM_JOB_ID is set; set MASTER_PORT");
    }
    const char* step = lookup("SLURM_STEP_ID");
    constexpr uint64_t kBase = 12000;
    constexpr uint64_t kSpan = 20000;
    const uint64_t job_id = parse_env_count("SLURM_JOB_ID", job) % kSpan;
    const uint64_t step_id = step != nullptr ? parse_env_count("SLURM_STEP_ID", step) % kSpan : 0;
    add("MASTER_PORT", std::to_string(kBase + (job_id * 131 + step_id) % kSpan));
  }
  return out;
}

std::optional<DistEnv> detect_dist_env(const EnvLookup& lookup) {
  for (const Launcher& l : kLaunchers) {
    const bool slurm = std::string(l.source) == "slurm";
    if (slurm) {
      refuse_slurm_outside_step(
          lookup, "start it with srun (or torchrun or mpirun), or give rank and world size");
    }
    const char* rank = lookup(l.rank);
    // In a step, the step's task count: srun -n 2 inside an allocation of 4 keeps SLURM_NTASKS.
    const char* size_name = slurm && lookup("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
                                                                    : l.size;
    const char* size = lookup(size_name);
    if (rank == nullptr && size == nullptr) continue;
    if (rank == nullptr || size == nullptr) {
      const char* set = rank != nullptr ? l.rank : size_name;
      const char* unset = rank != nullptr ? size_name : l.rank;
      throw std::invalid_argument(std::string(set) + " is set but " + unset + " is not; " +
                                  l.source + " sets both");
    }
    DistEnv env;
    env.rank = parse_env_count(l.rank, rank);
    env.world_size = parse_env_count(size_name, size);
    check(env.rank, env.world_size, l.rank, size_name);
    if (l.local_rank != nullptr) {
      if (const char* local = lookup(l.local_rank)) {
        env.local_rank = parse_env_count(l.local_rank, local);
        if (*env.local_rank > env.rank) {
          throw std::invalid_argument(std::string(l.local_rank) + " = " + local +
                                      "; allowed: <= " + l.rank + " = " + rank);
        }
      }
    }
    env.source = l.source;
    return env;
  }
  return std::nullopt;
}

std::optional<DistEnv> detect_dist_env() { return detect_dist_env(process_env); }

DistEnv resolve_dist_env(std::optional<uint64_t> rank, std::optional<uint64_t> world_size,
                         const EnvLookup& lookup) {
  if (rank.has_value() != world_size.has_value()) {
    throw std::invalid_argument(std::string(rank ? "rank" : "world_size") + " given without " +
                                (rank ? "world_size" : "rank") +
                                "; allowed: both or neither (then the launcher's are used)");
  }
  if (rank) {
    check(*rank, *world_size, "rank", "world_size");
    DistEnv env;
    env.rank = *rank;
    env.world_size = *world_size;
    env.source = "given";
    return env;
  }
  if (std::optional<DistEnv> env = detect_dist_env(lookup)) return *env;
  std::string names;
  for (const Launcher& l : kLaunchers) {
    names += std::string(names.empty() ? "" : ", ") + l.rank + "/" + l.size + " (" + l.source + ")";
  }
  throw std::invalid_argument(
      "rank and world_size: not given, and no launcher variable is set; looked for " + names +
      ". Start the program with torchrun, mpirun or srun, or pass rank and world_size");
}

DistEnv resolve_dist_env(std::optional<uint64_t> rank, std::optional<uint64_t> world_size) {
  return resolve_dist_env(rank, world_size, process_env);
}

}  // namespace distsampler
