#include "distsampler/launch/env.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>

namespace distsampler {
namespace {

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    resolve_dist_env(std::nullopt, std::nullopt, env_of(vars));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(DistEnv, EachLauncher) {
  auto e = detect_dist_env(env_of({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->rank, 3u);
  EXPECT_EQ(e->world_size, 8u);
  EXPECT_EQ(e->local_rank, 1u);
  EXPECT_EQ(e->source, "torchrun");
  e = detect_dist_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  EXPECT_EQ(e->source, "openmpi");
  EXPECT_EQ(e->rank, 1u);
  EXPECT_FALSE(e->local_rank);
  e = detect_dist_env(env_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}));
  EXPECT_EQ(e->source, "pmi");
  e = detect_dist_env(env_of({{"SLURM_PROCID", "5"},
                              {"SLURM_NTASKS", "6"},
                              {"SLURM_LOCALID", "1"},
                              {"SLURM_STEP_ID", "0"}}));
  EXPECT_EQ(e->source, "slurm");
  EXPECT_EQ(e->world_size, 6u);
  EXPECT_EQ(e->local_rank, 1u);
  EXPECT_FALSE(detect_dist_env(env_of({})));
}

TEST(DistEnv, InnermostLauncherWins) {
  // torchrun started by srun: one SLURM task per node, torchrun's ranks inside.
  const auto e = detect_dist_env(
      env_of({{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}));
  EXPECT_EQ(e->source, "torchrun");
  EXPECT_EQ(e->rank, 6u);
}

TEST(DistEnv, ParseEnvCountTakesDecimalDigitsOnly) {
  EXPECT_EQ(parse_env_count("X", "0"), 0u);
  EXPECT_EQ(parse_env_count("X", "9999999999999999999"), 9999999999999999999u);
  for (const char* bad : {"", " 1", "1 ", "+1", "-1", "0x10", "1e3", "10000000000000000000"}) {
    try {
      parse_env_count("SLURM_NODEID", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("SLURM_NODEID = '") + bad +
                                           "'; allowed: a decimal integer >= 0 (at most 19 digits)");
    }
  }
}

TEST(DistEnv, BadVariables) {
  EXPECT_EQ(error_of({{"RANK", "1"}}), "RANK is set but WORLD_SIZE is not; torchrun sets both");
  EXPECT_EQ(error_of({{"RANK", "x1"}, {"WORLD_SIZE", "2"}}),
            "RANK = 'x1'; allowed: a decimal integer >= 0 (at most 19 digits)");
  EXPECT_EQ(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}),
            "RANK = '-1'; allowed: a decimal integer >= 0 (at most 19 digits)");
  EXPECT_EQ(error_of({{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}}),
            "PMI_RANK = 2; allowed: < PMI_SIZE = 2");
  EXPECT_EQ(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}, {"SLURM_STEP_ID", "0"}}),
            "SLURM_NTASKS = 0; allowed: >= 1");
  EXPECT_EQ(error_of({{"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}}),
            "SLURM_NTASKS is set but SLURM_PROCID is not; slurm sets both");
  EXPECT_EQ(error_of({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}}),
            "LOCAL_RANK = 2; allowed: <= RANK = 1");
  EXPECT_EQ(error_of({{"OMPI_COMM_WORLD_SIZE", "4"}}),
            "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not; openmpi sets both");
  const std::string none = error_of({});
  EXPECT_NE(none.find("no launcher variable is set"), std::string::npos) << none;
  EXPECT_NE(none.find("RANK/WORLD_SIZE (torchrun)"), std::string::npos) << none;
  EXPECT_NE(none.find("SLURM_PROCID/SLURM_NTASKS (slurm)"), std::string::npos) << none;
}

// Issue 21, defects 4 and 5: SLURM's variables outside a job step describe the allocation.
TEST(DistEnv, SlurmOutsideAStepIsRefused) {
  // A program run directly in an `sbatch -n 4` script: not rank 0 of 4.
  const std::string batch = error_of({{"SLURM_JOB_ID", "7"},
                                      {"SLURM_PROCID", "0"},
                                      {"SLURM_NTASKS", "4"},
                                      {"SLURM_LOCALID", "0"}});
  EXPECT_NE(batch.find("SLURM_PROCID = 0, SLURM_NTASKS = 4 without SLURM_STEP_ID"),
            std::string::npos)
      << batch;
  EXPECT_NE(batch.find("start it with srun"), std::string::npos) << batch;
  // An `salloc -n 2` shell sets SLURM_NTASKS only; SLURM does not set both there.
  const std::string salloc = error_of({{"SLURM_JOB_ID", "8"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(salloc.find("SLURM_NTASKS = 2 without SLURM_STEP_ID"), std::string::npos) << salloc;
  EXPECT_EQ(salloc.find("sets both"), std::string::npos) << salloc;
  // Given values, or an inner launcher (mpirun in the salloc shell), need no step.
  EXPECT_EQ(resolve_dist_env(1, 4, env_of({{"SLURM_NTASKS", "2"}})).rank, 1u);
  EXPECT_EQ(detect_dist_env(env_of({{"SLURM_NTASKS", "2"},
                                    {"OMPI_COMM_WORLD_RANK", "1"},
                                    {"OMPI_COMM_WORLD_SIZE", "2"}}))
                ->source,
            "openmpi");
}

// The rule's one owner (Python's distsampler.launch calls it too): the caller's remedy ends the
// one line; a step, or no SLURM task variable, passes.
TEST(DistEnv, RefuseSlurmOutsideStep) {
  try {
    refuse_slurm_outside_step(env_of({{"SLURM_PROCID", "1"}}), "do this instead");
    ADD_FAILURE() << "accepted SLURM_PROCID outside a step";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("SLURM_PROCID = 1 without SLURM_STEP_ID: ", 0), 0u) << what;
    EXPECT_EQ(what.substr(what.size() - 17), "; do this instead") << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_NO_THROW(refuse_slurm_outside_step(
      env_of({{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}}), "x"));
  EXPECT_NO_THROW(refuse_slurm_outside_step(env_of({{"SLURM_JOB_ID", "7"}}), "x"));
}

TEST(DistEnv, SlurmStepTaskCount) {
  // srun -n 2 inside an allocation of 4 tasks: the step's count, not the allocation's.
  const auto e = detect_dist_env(env_of({{"SLURM_PROCID", "1"},
                                         {"SLURM_NTASKS", "4"},
                                         {"SLURM_STEP_NUM_TASKS", "2"},
                                         {"SLURM_STEP_ID", "3"}}));
  EXPECT_EQ(e->world_size, 2u);
  EXPECT_EQ(slurm_tasks_on_node("3,1", 0), 3u);
  EXPECT_EQ(slurm_tasks_on_node("3,1", 1), 1u);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2u);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1u);
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4u);
  for (const char* bad : {"", "3,", "x", "2(x0)", "2(3)", "2(x2", "0"}) {
    EXPECT_THROW(slurm_tasks_on_node(bad, 0), std::invalid_argument) << bad;
  }
  EXPECT_THROW(slurm_tasks_on_node("3,1", 2), std::invalid_argument);
}

// distsampler.launch's SLURM route: torchrun's variables from a step's, those set kept.
TEST(DistEnv, SlurmTorchrunEnv) {
  const std::map<std::string, std::string> step = {
      {"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"},
      {"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_LOCALID", "0"},
      {"SLURM_JOB_NODELIST", "node[07-09],gpu1"}, {"SLURM_STEP_NODELIST", "node[08-09]"}};
  const MasterAddress first = [](const std::string& list) { return slurm_first_host(list); };
  auto env = [&](std::map<std::string, std::string> vars) {
    const auto pairs = slurm_torchrun_env(env_of(vars), first);
    return std::map<std::string, std::string>(pairs.begin(), pairs.end());
  };
  auto out = env(step);
  EXPECT_EQ(out["RANK"], "2");
  EXPECT_EQ(out["WORLD_SIZE"], "4");  // the step's tasks
  EXPECT_EQ(out["LOCAL_RANK"], "0");
  EXPECT_EQ(out["MASTER_ADDR"], "node08");
  const uint64_t port = std::stoull(out["MASTER_PORT"]);
  EXPECT_TRUE(port >= 12000 && port < 32000) << port;
  auto other = step;
  other["SLURM_PROCID"] = "0";
  EXPECT_EQ(env(other)["MASTER_PORT"], out["MASTER_PORT"]);
  other["SLURM_STEP_ID"] = "1";
  EXPECT_NE(env(other)["MASTER_PORT"], out["MASTER_PORT"]);
  other = step;
  other["SLURM_JOB_ID"] = "9999999999999999999";  // no overflow
  EXPECT_EQ(env(other)["MASTER_PORT"], std::to_string(12000 + (9999999999999999999ULL % 20000 *
                                                                  131) % 20000));
  other = step;
  other["MASTER_ADDR"] = "head";
  other["RANK"] = "2";
  out = env(other);
  EXPECT_EQ(out.count("MASTER_ADDR") + out.count("RANK"), 0u);
  EXPECT_TRUE(env({{"SLURM_JOB_ID", "7"}}).empty());
  EXPECT_THROW(env({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}),
               std::runtime_error);
  other = step;
  other.erase("SLURM_JOB_ID");
  EXPECT_THROW(env(other), std::runtime_error);
  other = step;
  other["SLURM_PROCID"] = "4";
  EXPECT_THROW(env(other), std::runtime_error);
  other = step;
  other["SLURM_PROCID"] = "x";
  EXPECT_THROW(env(other), std::invalid_argument);
}

TEST(DistEnv, SlurmFirstHost) {
  const std::map<std::string, std::string> cases = {
      {"localhost", "localhost"}, {"a,b", "a"}, {"node[01-04,07],gpu3", "node01"},
      {"gpu3,node[01-04]", "gpu3"}, {"rack[2-3]-n[005-006]", "rack2-n005"}, {"n[7]", "n7"},
      {" n1 ,n2", "n1"}};
  for (const auto& [list, host] : cases) EXPECT_EQ(slurm_first_host(list), host) << list;
  for (const char* bad : {"", "a][", "a[1", "a b", "[]"}) {
    EXPECT_THROW(slurm_first_host(bad), std::invalid_argument) << bad;
  }
}

TEST(DistEnv, GivenValuesWin) {
  const auto e = resolve_dist_env(1, 2, env_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}}));
  EXPECT_EQ(e.rank, 1u);
  EXPECT_EQ(e.world_size, 2u);
  EXPECT_EQ(e.source, "given");
  EXPECT_THROW(resolve_dist_env(1, std::nullopt, env_of({})), std::invalid_argument);
  EXPECT_THROW(resolve_dist_env(2, 2, env_of({})), std::invalid_argument);
  EXPECT_EQ(
      resolve_dist_env(std::nullopt, std::nullopt, env_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}}))
          .world_size,
      4u);
}

}  // namespace
}  // namespace distsampler
