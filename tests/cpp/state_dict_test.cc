// state_dict.h's contract: Python's json.dumps and repr() reproduced (floats, escapes, key
// order), the policy format's checksum against a known answer from Python's json + zlib, round
// trips of both formats, and every refusal naming the entry.
#include "distsampler/state_dict.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace distsampler {
namespace {

std::string json_of(double v) { return canonical_json(DictValue::real(v)); }

TEST(StateDict, FloatsAreWrittenAsPythonWritesThem) {
  EXPECT_EQ(json_of(0.0), "0.0");
  EXPECT_EQ(json_of(-0.0), "-0.0");
  EXPECT_EQ(json_of(1.0), "1.0");
  EXPECT_EQ(json_of(0.1), "0.1");
  EXPECT_EQ(json_of(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(json_of(0.0001), "0.0001");
  EXPECT_EQ(json_of(1e-05), "1e-05");
  EXPECT_EQ(json_of(-2.5e-10), "-2.5e-10");
  EXPECT_EQ(json_of(1e15), "1000000000000000.0");
  EXPECT_EQ(json_of(1e16), "1e+16");
  EXPECT_EQ(json_of(123456789.125), "123456789.125");
  EXPECT_EQ(json_of(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(python_repr(DictValue::real(2.0)), "2.0");
}

TEST(StateDict, CanonicalJsonSortsKeysAndEscapesLikePython) {
  DictValue v = DictValue::dict();
  v.set("b", DictValue::string("caf\xc3\xa9 \xf0\x9f\x98\x80 \"q\"\n"))
      .set("a", DictValue::list({DictValue::boolean(true), DictValue::none(),
                                 DictValue::integer_text("-3")}));
  EXPECT_EQ(canonical_json(v),
            "{\"a\":[true,null,-3],\"b\":\"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\"\\n\"}");
  EXPECT_EQ(python_repr(v), "{'b': 'caf\xc3\xa9 \xf0\x9f\x98\x80 \"q\"\\n', 'a': [True, None, -3]}");
  EXPECT_THROW(canonical_json(DictValue::other("np.int64(0)", "int64")), std::invalid_argument);
}

PolicyCheckpoint example() {
  DictValue config = DictValue::dict();
  config.set("seed", DictValue::integer_text("-1"))
      .set("weights", DictValue::list({DictValue::real(0.25), DictValue::real(1e-05),
                                       DictValue::real(1e16), DictValue::real(1e15)}))
      .set("name", DictValue::string("caf\xc3\xa9"))
      .set("drop_last", DictValue::boolean(true));
  return PolicyCheckpoint{"WeightedDistributedSampler", config, 2, 6, 3, DictValue{}};
}

TEST(StateDict, PolicyChecksumIsPythonsCrcOfItsSortedJson) {
  // zlib.crc32(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()) in Python.
  const DictValue state = policy_state_dict(example());
  uint64_t checksum = 0;
  ASSERT_TRUE(state.find("checksum")->as_u64(checksum));
  EXPECT_EQ(checksum, 329100456u);
}

TEST(StateDict, PolicyStatesRoundTripAndRefuseEditsNamingTheEntry) {
  const PolicyCheckpoint c = example();
  const DictValue state = policy_state_dict(c);
  const PolicyCheckpoint back = parse_policy_state(state, c.kind, c.config);
  EXPECT_EQ(back.epoch, 2u);
  EXPECT_EQ(back.consumed, 6u);
  EXPECT_EQ(back.world_size, 3u);
  auto refused = [&](DictValue edited, const std::string& kind, const DictValue& config,
                     const std::string& expected) {
    try {
      parse_policy_state(edited, kind, config);
      ADD_FAILURE() << "accepted; expected " << expected;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  DictValue edited = state;
  edited.set("consumed", DictValue::integer(7));
  refused(edited, c.kind, c.config, "state checksum = 329100456 does not match its contents");
  refused(state, "BlendedDistributedSampler", c.config,
          "state kind = 'WeightedDistributedSampler' but this sampler is a "
          "BlendedDistributedSampler");
  DictValue other = c.config;
  other.set("seed", DictValue::integer(4));
  refused(state, c.kind, other, "state seed = -1 but this sampler's seed = 4");
  EXPECT_EQ(parse_policy_state(state, c.kind, other, {"seed"}).consumed, 6u);  // a loose key
  refused(DictValue::list({}), c.kind, c.config, "state must be a dict from state_dict(), not list");
  DictValue missing = state;
  missing.entries.erase(missing.entries.begin() + 2);  // epoch
  refused(missing, c.kind, c.config, "state is missing epoch");
  // An edit with the checksum recomputed still meets the ranges.
  PolicyCheckpoint forged = c;
  forged.world_size = 0;
  refused(policy_state_dict(forged), c.kind, c.config,
          "state world_size = 0 is out of range; allowed: an int in [1, 2^64 - 1]");
}

TEST(StateDict, APositionIsWrittenCheckedAndReturned) {
  PolicyCheckpoint c = example();
  EXPECT_EQ(policy_state_dict(c).find("position"), nullptr);  // absent unless given
  c.position = DictValue::dict();
  c.position.set("skip", DictValue::integer(4));
  DictValue state = policy_state_dict(c);
  ASSERT_NE(state.find("position"), nullptr);
  EXPECT_EQ(canonical_json(parse_policy_state(state, c.kind, c.config).position), "{\"skip\":4}");
  DictValue edited = state;
  edited.set("position", DictValue::dict().set("skip", DictValue::integer(5)));
  EXPECT_THROW(parse_policy_state(edited, c.kind, c.config), std::invalid_argument);  // checksum
}

TEST(StateDict, SamplerStatesRoundTripInVersion2AndLoadVersion1) {
  SamplerOptions o;
  o.size = 10, o.world_size = 2, o.seed = Seed(uint64_t{3});
  const DistributedSampler sampler(o);
  const SamplerState s = make_state(sampler, 2, 4);
  const DictValue dict = sampler_state_dict(s, 2);
  EXPECT_EQ(parse_sampler_state(dict, sampler), s);
  DictValue edited = dict;
  edited.set("consumed", DictValue::integer(6));
  EXPECT_THROW(parse_sampler_state(edited, sampler), std::invalid_argument);
  DictValue v1 = DictValue::dict();
  v1.set("version", DictValue::integer(1))
      .set("epoch", DictValue::integer(2))
      .set("consumed", DictValue::integer(4))
      .set("size", DictValue::integer(10))
      .set("world_size", DictValue::integer(4))
      .set("seed", DictValue::integer(3))
      .set("shuffle", DictValue::boolean(true))
      .set("drop_last", DictValue::boolean(false))
      .set("order", DictValue::string("torch"))
      .set("randperm", DictValue::string("current"));
  EXPECT_EQ(parse_sampler_state(v1, sampler), s);
  v1.set("shuffle", DictValue::integer(1));  // an int is not a bool there
  EXPECT_THROW(parse_sampler_state(v1, sampler), std::invalid_argument);
}

// load_state_dict's agreement: what every rank raises from what the ranks gathered.
TEST(StateDict, DescribeByRank) {
  auto ranks = [](std::vector<std::pair<uint64_t, std::string>> rows) {
    std::vector<DictValue> out;
    for (const auto& [epoch, config] : rows) {
      out.push_back(DictValue::dict()
                        .set("epoch", DictValue::integer(epoch))
                        .set("configuration", DictValue::string(config)));
    }
    return out;
  };
  EXPECT_EQ(describe_by_rank(ranks({{3, "a"}, {3, "a"}})), "");
  EXPECT_EQ(describe_by_rank(ranks({{3, "a"}, {4, "b"}, {3, "a"}})),
            "configuration = 'a' on ranks 0, 2; 'b' on rank 1; epoch = 3 on ranks 0, 2; 4 on "
            "rank 1");
  std::vector<DictValue> missing = ranks({{3, "a"}});
  missing.push_back(DictValue::dict().set("epoch", DictValue::integer(3)));
  EXPECT_EQ(describe_by_rank(missing), "configuration = 'a' on rank 0; None on rank 1");

  auto call = [](const char* name) {
    return DictValue::dict().set("distsampler_call", DictValue::string(name));
  };
  EXPECT_EQ(describe_collectives({call("load_state_dict"), call("load_state_dict")},
                                 "load_state_dict"),
            "");
  EXPECT_EQ(describe_collectives({call("load_state_dict"), call("check_configuration"),
                                  DictValue::integer(7)},
                                 "load_state_dict"),
            "the ranks are in different collectives (call = 'load_state_dict' on rank 0; "
            "'check_configuration' on rank 1; 'another collective' on rank 2): every rank must "
            "call load_state_dict (and start its passes) in the same order");

  std::vector<DictValue> loaded = ranks({{3, "a"}, {4, "a"}});
  for (DictValue& rank : loaded) rank.set("error", DictValue::none());
  EXPECT_EQ(describe_checkpoints(loaded),
            "the ranks loaded different checkpoints, refusing to resume: epoch = 3 on rank 0; 4 "
            "on rank 1");
  loaded[1].set("error", DictValue::string("ValueError: bad"));
  EXPECT_EQ(describe_checkpoints(loaded),
            "the checkpoint could not be loaded on every rank, refusing to resume: rank 1: "
            "ValueError: bad");
  EXPECT_EQ(describe_checkpoints(ranks({{3, "a"}, {3, "a"}})), "");
}

}  // namespace
}  // namespace distsampler
