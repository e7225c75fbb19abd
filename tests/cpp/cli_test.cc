#include "cli.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "distsampler/sampler.h"

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
      {"demo", "--order", "nope"},
      {"demo", "--extra", "1"},
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

}  // namespace
}  // namespace distsampler
