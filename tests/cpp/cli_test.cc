#include "cli.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/hash.h"
#include "distsampler/sampler.h"
#include "distsampler/version.h"

namespace distsampler {
namespace {

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result run(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = cli::run(args, out, err);
  return {code, out.str(), err.str()};
}

std::string lines(const std::vector<uint64_t>& values) {
  std::string s;
  for (uint64_t v : values) s += std::to_string(v) + "\n";
  return s;
}

TEST(Cli, IndicesPrintsOneIndexPerLineAndNothingElse) {
  const Result r = run({"indices", "--size", "16", "--world-size", "2", "--rank", "0"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, lines({12, 9, 11, 13, 2, 15, 4, 7}));
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(run({"indices", "--size=16", "--world-size=2", "--rank=0", "--epoch=1"}).out,
            lines({5, 6, 11, 7, 1, 9, 10, 13}));
  EXPECT_EQ(run({"indices", "--size", "10", "--world-size", "3", "--rank", "0", "--drop-last"}).out,
            lines({4, 5, 0}));
  EXPECT_EQ(run({"indices", "--size", "5", "--world-size", "2", "--rank", "1", "--no-shuffle"}).out,
            lines({1, 3, 0}));
}

TEST(Cli, EvaluationModes) {
  // n = 10, W = 3, seed 0 (torch): rank 1 reads 1 3 8 and then 4, a wrapped-around repeat.
  EXPECT_EQ(run({"indices", "--size", "10", "--world-size", "3", "--rank", "1", "--uneven"}).out,
            lines({1, 3, 8}));
  EXPECT_EQ(run({"indices", "--size", "10", "--world-size", "3", "--rank", "1", "--mask"}).out,
            "1 0\n3 0\n8 0\n4 1\n");
  EXPECT_EQ(run({"indices", "--size", "10", "--world-size", "3", "--rank", "0", "--mask"}).out,
            "4 0\n5 0\n0 0\n2 0\n");
  EXPECT_EQ(run({"indices", "--size", "10", "--world-size", "3", "--rank", "1", "--uneven",
                 "--drop-last"})
                .code,
            cli::kExitUsage);
  EXPECT_EQ(run({"indices", "--size", "10", "--world-size", "3", "--rank", "1", "--mask",
                 "--format", "binary"})
                .code,
            cli::kExitUsage);
}

// Indices of 19 digits make "INDEX PAD\n" 22 bytes, longer than an unmasked line of 20 digits.
TEST(Cli, MaskWithNineteenDigitIndices) {
  SamplerOptions o;
  o.size = uint64_t{1} << 63;
  o.order = OrderKind::kFeistel;
  const RankView v = DistributedSampler(o).epoch(0);
  const Result r = run({"indices", "--order", "feistel", "--size", "9223372036854775808",
                        "--world-size", "1", "--rank", "0", "--count", "3000", "--mask"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::string expected;
  for (uint64_t j = 0; j < 3000; ++j) expected += std::to_string(v[j]) + " 0\n";
  EXPECT_EQ(r.out, expected);
}

TEST(Cli, SeedsCoverPyTorchsRange) {
  for (const char* seed : {"-9223372036854775808", "18446744073709551615", "-5"}) {
    SamplerOptions o;
    o.size = 50;
    o.world_size = 3;
    o.rank = 2;
    o.seed = Seed::parse(seed);
    const RankView v = DistributedSampler(o).epoch(0);
    EXPECT_EQ(
        run({"indices", "--size", "50", "--world-size", "3", "--rank", "2", "--seed", seed}).out,
        lines(std::vector<uint64_t>(v.begin(), v.end())));
  }
}

TEST(Cli, WindowAndBinaryFormat) {
  SamplerOptions o;
  o.size = 1000000000000000ull;
  o.world_size = 8;
  o.rank = 3;
  o.order = OrderKind::kFeistel;
  const RankView v = DistributedSampler(o).epoch(0);
  const Result text =
      run({"indices", "--order", "feistel", "--size", "1000000000000000", "--world-size", "8",
           "--rank", "3", "--start", "100000000000", "--count", "5"});
  ASSERT_EQ(text.code, 0) << text.err;
  std::vector<uint64_t> expected;
  for (uint64_t j = 0; j < 5; ++j) expected.push_back(v[100000000000ull + j]);
  EXPECT_EQ(text.out, lines(expected));

  const Result binary =
      run({"indices", "--order", "feistel", "--size", "1000000000000000", "--world-size", "8",
           "--rank", "3", "--start", "100000000000", "--count", "5", "--format", "binary"});
  ASSERT_EQ(binary.out.size(), 40u);
  for (size_t j = 0; j < 5; ++j) {
    uint64_t value = 0;
    for (int b = 7; b >= 0; --b)
      value = (value << 8) | static_cast<unsigned char>(binary.out[8 * j + b]);
    EXPECT_EQ(value, expected[j]);
  }
}

TEST(Cli, EveryBadInputIsOneLineOnStderrAndExitTwo) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"frobnicate"},
      {"indices"},
      {"indices", "--size", "10", "--world-size", "2"},
      {"indices", "--size", "10", "--world-size", "0", "--rank", "0"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "2"},
      {"indices", "--size", "-1", "--world-size", "2", "--rank", "0"},
      {"indices", "--size", "ten", "--world-size", "2", "--rank", "0"},
      {"indices", "--size", "18446744073709551616", "--world-size", "2", "--rank", "0"},
      {"indices", "--size", "9223372036854775809", "--world-size", "2", "--rank", "0", "--order",
       "feistel"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--seed", "1.5"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--seed",
       "18446744073709551616"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--order", "random"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--format", "csv"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--randperm", "new"},
      // A variant of the torch order's randperm means nothing to the feistel order (issue 12).
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--order", "feistel",
       "--randperm", "classic"},
      // The Feistel version: 1 or 2, and only with the feistel order.
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--feistel-version", "2"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--order", "feistel",
       "--feistel-version", "3"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--order", "feistel",
       "--feistel-version", "0"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--start", "6"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--start", "2", "--count",
       "4"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--bogus", "1"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--size", "3"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--epoch"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--drop-last=yes"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "stray"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--seed",
       "18446744073709551615", "--epoch", "1"},
      {"indices", "--size", "4611686018427387904", "--world-size", "2", "--rank", "0"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--seed", "1\n2"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--consumed",
       "9223372036854775809"},
      // Caught before the first epoch is printed, not when epoch 1 is reached.
      {"audit", "--size", "10", "--world-size", "2", "--epochs", "2", "--seed",
       "18446744073709551615"},
      {"demo", "--order", "nope"},
      {"demo", "--extra", "1"},
      {"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--mask="},
  };
  for (const auto& args : bad) {
    const Result r = run(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << joined;
    EXPECT_EQ(r.out, "") << joined;
    if (args.empty()) continue;  // bare `distsampler` prints the usage text
    ASSERT_FALSE(r.err.empty()) << joined;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << joined << ": " << r.err;
  }
}

TEST(Cli, ErrorsNameTheFlagAndTheAllowedValues) {
  EXPECT_NE(run({"indices", "--size", "10", "--world-size", "2", "--rank", "5"})
                .err.find("rank = 5 is out of range; allowed: 0 <= rank < world_size = 2"),
            std::string::npos);
  EXPECT_NE(run({"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--order", "x"})
                .err.find("allowed: torch, feistel"),
            std::string::npos);
  // --consumed, not the sampler's parameter "start" (the CLI's --start is another flag).
  EXPECT_NE(run({"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--consumed",
                 "10000000000000000000"})
                .err.find("--consumed = 10000000000000000000 is too large; allowed: 0 <= consumed "
                          "<= 2^63"),
            std::string::npos);
  // A flag no command declares is unknown, wherever it stands, not a flag lacking its value.
  EXPECT_NE(run({"indices", "--size", "10", "--world-size", "2", "--rank", "0", "--shuffle"})
                .err.find("unknown flag '--shuffle'"),
            std::string::npos);
  EXPECT_NE(run({"indices", "--size", "10", "--world-size", "2", "--shuffle", "--rank", "0"})
                .err.find("unknown flag '--shuffle'"),
            std::string::npos);
  EXPECT_NE(run({"indices", "--size", "10", "--rank", "0", "--world-size"})
                .err.find("flag --world-size needs a value"),
            std::string::npos);
}

TEST(Cli, HelpEverywhere) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--help"},
                                        {"help"},
                                        {"indices", "--help"},
                                        {"demo", "--help"},
                                        {"indices", "--size", "3", "-h"}}) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("usage: distsampler"), std::string::npos);
  }
}

TEST(Cli, VersionIsTheLibrarysVersion) {
  const Result r = run({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "distsampler " DISTSAMPLER_VERSION_STRING "\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(std::string(DISTSAMPLER_VERSION_STRING),
            std::to_string(DISTSAMPLER_VERSION_MAJOR) + "." +
                std::to_string(DISTSAMPLER_VERSION_MINOR) + "." +
                std::to_string(DISTSAMPLER_VERSION_PATCH));
  EXPECT_NE(run({}).err.find("--version"), std::string::npos);  // listed in the help
  const Result extra = run({"--version", "--size", "3"});
  EXPECT_EQ(extra.code, 2);
  EXPECT_EQ(extra.out, "");
}

// Runs the CLI with its output on file descriptor fd, as main() does.
Result run_to_fd(int fd, const std::vector<std::string>& args) {
  cli::FdStreamBuf buf(fd);
  std::ostream out(&buf);
  std::ostringstream err;
  const int code = cli::run(args, out, err);
  return {code, "", err.str()};
}

// A failed write is one line on stderr naming the cause and exit 3, for every command that prints:
// a full disk (ENOSPC), and a reader that left with SIGPIPE ignored (EPIPE).
TEST(Cli, AFailedWriteIsOneLineNamingTheCause) {
  const std::vector<std::vector<std::string>> commands = {
      {"indices", "--size", "100", "--world-size", "1", "--rank", "0"},
      {"indices", "--order", "feistel", "--size", "10000000", "--world-size", "1", "--rank", "0"},
      {"audit", "--size", "100", "--world-size", "2"},
      {"demo"},
      {"--version"},
      {"help"}};
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(full, 0);
  for (const auto& args : commands) {
    const Result r = run_to_fd(full, args);
    EXPECT_EQ(r.code, cli::kExitOutput) << args[0];
    EXPECT_EQ(r.err, "distsampler " + args[0] +
                         ": cannot write the output: " + std::strerror(ENOSPC) + "\n");
  }
  ::close(full);

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  const auto previous = std::signal(SIGPIPE, SIG_IGN);
  const Result r = run_to_fd(fds[1], commands[1]);
  std::signal(SIGPIPE, previous);
  ::close(fds[1]);
  EXPECT_EQ(r.code, cli::kExitOutput);
  EXPECT_EQ(r.err, "distsampler indices: cannot write the output: " +
                       std::string(std::strerror(EPIPE)) + "\n");
}

TEST(Cli, DemoShowsTheRepeatedOrderAndTheFix) {
  const Result r = run({"demo"});
  ASSERT_EQ(r.code, 0) << r.err;
  // Experiment 1 (a): epoch 1 repeats epoch 0 when the epoch never advances.
  const size_t a = r.out.find("(a) The epoch never advances");
  const size_t b = r.out.find("(b) The epoch advances");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  const std::string stale = r.out.substr(a, b - a);
  EXPECT_NE(stale.find("rank 0: [12, 9] [11, 13] [2, 15] [4, 7]   <- same as epoch 0"),
            std::string::npos)
      << stale;
  EXPECT_NE(stale.find("Every epoch replays"), std::string::npos);
  const std::string fresh = r.out.substr(b, r.out.find("Experiment 2") - b);
  EXPECT_NE(fresh.find("rank 0: [5, 6] [11, 7] [1, 9] [10, 13]   <- new order"), std::string::npos)
      << fresh;
  EXPECT_NE(fresh.find("all 16 samples exactly once"), std::string::npos);
  EXPECT_NE(r.out.find("Per epoch the ranks read 8 samples in all"), std::string::npos);
  EXPECT_NE(r.out.find("Per epoch the ranks read 16 samples in all"), std::string::npos);
  EXPECT_EQ(run({"demo", "--order", "feistel"}).code, 0);
}

TEST(Cli, IndicesResumeAtConsumedFollowsTheElasticRule) {
  // Rank r of W resumed at C reads global positions C + r, C + r + W, ... of the W = 1 order.
  const std::string order =
      run({"indices", "--size", "10", "--world-size", "1", "--rank", "0"}).out;
  std::vector<std::string> o;
  std::istringstream in(order);
  for (std::string line; std::getline(in, line);) o.push_back(line + "\n");
  ASSERT_EQ(o.size(), 10u);
  EXPECT_EQ(
      run({"indices", "--size", "10", "--world-size", "3", "--rank", "1", "--consumed", "3"}).out,
      o[4] + o[7] + o[0]);  // positions 4, 7, 10 -> 0 (wrap)
  EXPECT_EQ(run({"indices", "--size", "10", "--world-size", "3", "--rank", "1", "--consumed", "3",
                 "--drop-last"})
                .out,
            o[4] + o[7]);
  EXPECT_EQ(
      run({"indices", "--size", "10", "--world-size", "3", "--rank", "1", "--consumed", "10"}).out,
      "");
  EXPECT_EQ(run({"indices", "--size", "10", "--world-size", "3", "--rank", "0", "--consumed",
                 "99999999999999999999"})
                .code,
            2);
}

// Issue 21, defect 8: a resume point past the epoch's end is a miscount, refused as audit does.
TEST(Cli, IndicesRefusesAConsumedPastTheEnd) {
  const Result past =
      run({"indices", "--size", "10", "--world-size", "4", "--rank", "0", "--consumed", "13"});
  EXPECT_EQ(past.code, 2);
  EXPECT_EQ(past.out, "");
  EXPECT_EQ(past.err,
            "distsampler indices: --consumed = 13 is out of range; allowed: 0 <= consumed <= 12, "
            "the positions the job reads\n");
  // At the end: nothing left, as audit allows.
  const Result end =
      run({"indices", "--size", "10", "--world-size", "4", "--rank", "0", "--consumed", "12"});
  EXPECT_EQ(end.code, 0);
  EXPECT_EQ(end.out, "");
}

// Issue 21, defect 1: `srun distsampler indices --from-env` takes the launcher's rank and size.
TEST(Cli, IndicesFromTheLaunchersEnvironment) {
  const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
                         "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
                         "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"};
  for (const char* name : names) unsetenv(name);
  const std::string want =
      run({"indices", "--size", "16", "--world-size", "4", "--rank", "3"}).out;
  struct Case {
    std::vector<std::pair<const char*, const char*>> vars;
  };
  const Case launchers[] = {
      {{{"RANK", "3"}, {"WORLD_SIZE", "4"}}},
      {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}}},
      {{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_TASKS", "4"},
        {"SLURM_STEP_ID", "0"}}},
  };
  for (const Case& c : launchers) {
    for (const auto& [name, value] : c.vars) setenv(name, value, 1);
    const Result r = run({"indices", "--size", "16", "--from-env"});
    EXPECT_EQ(r.code, 0) << c.vars[0].first << ": " << r.err;
    EXPECT_EQ(r.out, want) << c.vars[0].first;
    for (const auto& [name, value] : c.vars) unsetenv(name);
  }
  // A program in an `sbatch -n 4` script, without srun: refused in one line.
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  const Result batch = run({"indices", "--size", "16", "--from-env"});
  EXPECT_EQ(batch.code, 2);
  EXPECT_EQ(batch.out, "");
  EXPECT_EQ(batch.err.find('\n'), batch.err.size() - 1) << batch.err;
  EXPECT_NE(batch.err.find("SLURM_PROCID = 0, SLURM_NTASKS = 4 without SLURM_STEP_ID"),
            std::string::npos)
      << batch.err;
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  const Result none = run({"indices", "--size", "16", "--from-env"});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no launcher variable is set"), std::string::npos) << none.err;
  EXPECT_NE(run({"indices", "--size", "16", "--from-env", "--rank", "0"})
                .err.find("--from-env with --world-size or --rank"),
            std::string::npos);
  EXPECT_NE(run({"indices", "--size", "16"}).err.find("missing required flag --world-size; or "
                                                      "--from-env"),
            std::string::npos);
}

Result audit(uint64_t n, uint64_t w, uint64_t consumed, uint64_t w2, bool feistel, bool drop_last,
             const std::string& broken = "") {
  std::vector<std::string> args = {"audit",
                                   "--size",
                                   std::to_string(n),
                                   "--world-size",
                                   std::to_string(w),
                                   "--consumed",
                                   std::to_string(consumed),
                                   "--resume-world-size",
                                   std::to_string(w2),
                                   "--order",
                                   feistel ? "feistel" : "torch",
                                   "--seed",
                                   std::to_string(n * 31 + w)};
  if (drop_last) args.push_back("--drop-last");
  if (!broken.empty()) args.insert(args.end(), {"--break", broken});
  return run(args);
}

uint64_t first_job_total(uint64_t n, uint64_t w, bool drop_last) {
  return drop_last ? n / w * w : (n + w - 1) / w * w;
}

// The bar: resumes between any world sizes 1..64 pass the audit, at cuts spread over
// the whole range (first, last, inside the padding, random).
TEST(Cli, AuditPassesForResumesBetweenAnyWorldSizesUpTo64) {
  uint64_t counter = 0;
  for (uint64_t w = 1; w <= 64; ++w) {
    for (uint64_t w2 = 1; w2 <= 64; ++w2) {
      const uint64_t n = mix64(counter++) % 300;
      const bool drop_last = (w + w2) % 2 == 0;
      const uint64_t total = first_job_total(n, w, drop_last);
      for (uint64_t cut : {uint64_t{0}, total, total / 2, mix64(counter++) % (total + 1)}) {
        const Result r = audit(n, w, cut, w2, (w * w2) % 3 == 0, drop_last);
        ASSERT_EQ(r.code, 0) << "n " << n << " W " << w << " C " << cut << " W2 " << w2 << "\n"
                             << r.out << r.err;
      }
    }
  }
}

TEST(Cli, AuditPassesAtEveryCutOnASmallGrid) {
  for (uint64_t n = 0; n <= 24; ++n) {
    for (uint64_t w = 1; w <= 6; ++w) {
      for (uint64_t w2 = 1; w2 <= 6; ++w2) {
        for (bool drop_last : {false, true}) {
          for (uint64_t cut = 0; cut <= first_job_total(n, w, drop_last); ++cut) {
            const Result r = audit(n, w, cut, w2, (n + cut) % 2 == 0, drop_last);
            ASSERT_EQ(r.code, 0) << "n " << n << " W " << w << " C " << cut << " W2 " << w2 << "\n"
                                 << r.out;
          }
        }
      }
    }
  }
}

// A resume off by one position must fail whenever the shift cannot be absorbed by the padding's
// wrap-around: with W2 <= C and more than 2 * W2 positions left after the cut.
TEST(Cli, AuditFailsOnABrokenPlan) {
  uint64_t counter = 7;
  int failures = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const uint64_t w = 1 + mix64(counter++) % 64, w2 = 1 + mix64(counter++) % 64;
    const uint64_t n = 2 * (w + w2) + 1 + mix64(counter++) % 500;
    const bool drop_last = trial % 2 == 1;
    const uint64_t total = first_job_total(n, w, drop_last);
    const uint64_t cut = std::min(total, w2 + mix64(counter++) % (n - 2 * w2));
    if (cut < w2 || n - cut <= 2 * w2) continue;
    for (const char* broken : {"overlap", "gap"}) {
      const Result r = audit(n, w, cut, w2, trial % 4 < 2, drop_last, broken);
      ASSERT_EQ(r.code, 1) << broken << " n " << n << " W " << w << " C " << cut << " W2 " << w2
                           << "\n"
                           << r.out;
      EXPECT_NE(r.out.find("VIOLATED"), std::string::npos);
      ++failures;
    }
  }
  EXPECT_GT(failures, 300);
  const Result r = audit(1000, 4, 404, 7, false, false, "overlap");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("repeated read"), std::string::npos) << r.out;
  EXPECT_NE(audit(1000, 4, 404, 7, true, false, "gap").out.find("never read"), std::string::npos);
}

TEST(Cli, AuditMultipleEpochsAndBadFlags) {
  const Result r = run({"audit", "--size", "100", "--world-size", "8", "--epochs", "3",
                        "--consumed", "40", "--resume-world-size", "5", "--cut-epoch", "1"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("epoch 0 (W=8)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1 (W=8 to position 40, then W=5 from position 40)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("epoch 2 (W=5)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verdict: exactly-once holds in all 3 epoch(s)"), std::string::npos);
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"audit", "--size", "10", "--world-size", "4", "--consumed", "13", "--resume-world-size",
            "2"},
           {"audit", "--size", "10", "--world-size", "4", "--consumed", "3"},
           {"audit", "--size", "10", "--world-size", "0"},
           {"audit", "--size", "10", "--world-size", "2", "--break", "gap"},
           {"audit", "--size", "10", "--world-size", "2", "--consumed", "2", "--resume-world-size",
            "2", "--break", "sideways"},
           {"audit", "--size", "10", "--world-size", "2", "--consumed", "2", "--resume-world-size",
            "2", "--cut-epoch", "1"},
           {"audit", "--size", "1000000000", "--world-size", "2"},
           {"audit", "--size", "100000000", "--world-size", "2", "--epochs", "11"}}) {
    const Result b = run(bad);
    EXPECT_EQ(b.code, 2) << bad[3];
    EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << b.err;
  }
}

}  // namespace
}  // namespace distsampler
