// plan.h's contract: concat sequences are the mixer's stream cut at every L tokens with one shared
// token; best-fit bins hold each window's pieces once, within L + 1 tokens; the ranks of any W
// read the one stream; a state resumes it bit for bit on any W; a failed load changes nothing;
// a state of another configuration is refused naming the difference.
#include "distsampler/tokens/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "distsampler/hash.h"

namespace distsampler {
namespace {

using Sources = std::vector<std::shared_ptr<const DocumentLengths>>;

Sources make_sources(uint64_t key, std::vector<uint64_t> documents, uint32_t longest) {
  Sources out;
  for (size_t s = 0; s < documents.size(); ++s) {
    std::vector<uint32_t> lengths(documents[s]);
    for (uint64_t d = 0; d < documents[s]; ++d) {
      const uint64_t h = hash_at(key + s, d);
      lengths[d] = static_cast<uint32_t>(h % ((h >> 60) == 0 ? 4 * longest : longest / 4 + 2));
    }
    lengths[0] = 5;
    out.push_back(std::make_shared<LengthList>(lengths));
  }
  return out;
}

TokenPlanOptions options(Packing packing, uint64_t seq_len, uint64_t batch) {
  TokenPlanOptions o;
  o.weights = {0.5, 0.3, 0.2};
  o.seq_len = seq_len;
  o.global_batch = batch;
  o.seed = 1234;
  o.packing = packing;
  o.window = 37;
  return o;
}

std::vector<PlannedSequence> run(TokenPlan& plan, uint64_t count) {
  std::vector<PlannedSequence> out;
  for (uint64_t i = 0; i < count; ++i) out.push_back(plan.next());
  return out;
}

void expect_same(const PlannedSequence& a, const PlannedSequence& b, const std::string& where) {
  ASSERT_EQ(a.index, b.index) << where;
  ASSERT_EQ(a.spans, b.spans) << where << ", sequence " << a.index;
}

TEST(PlanTest, ConcatIsTheMixedStreamCutEveryLTokensSharingOneToken) {
  const Sources sources = make_sources(1, {40, 9, 120}, 50);
  const TokenPlanOptions o = options(Packing::kConcat, 16, 4);
  TokenPlan plan(sources, o);
  Mixer mixer(sources, o.weights, o.seed, o.seq_len + 1);
  // the mixed stream, token by token, as (source, document, offset)
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> stream;
  const auto sequences = run(plan, 500);
  while (stream.size() < 500 * 16 + 1) {
    const Piece p = mixer.next();
    for (uint64_t t = p.begin; t < p.end; ++t) stream.emplace_back(p.source, p.document, t);
  }
  for (const PlannedSequence& s : sequences) {
    ASSERT_EQ(s.tokens(), 17u);
    uint64_t at = s.index * 16;
    for (const Span& span : s.spans) {
      ASSERT_LT(span.begin, span.end);
      for (uint64_t t = span.begin; t < span.end; ++t, ++at) {
        ASSERT_EQ(stream[at], std::make_tuple(span.source, span.document, t))
            << "sequence " << s.index;
      }
    }
  }
}

TEST(PlanTest, BestFitBinsHoldEachWindowsPiecesOnceWithinLPlusOneTokens) {
  const Sources sources = make_sources(2, {300, 80, 500}, 40);
  const TokenPlanOptions o = options(Packing::kBestFit, 64, 8);
  TokenPlan plan(sources, o);
  Mixer mixer(sources, o.weights, o.seed, o.seq_len + 1);
  uint64_t tokens = 0, capacity = 0;
  uint64_t windows = 0;
  while (windows < 30) {
    // one window of pieces from the mixer, and the plan's bins until they are all placed
    std::map<std::tuple<uint32_t, uint64_t, uint64_t, uint64_t>, uint64_t> window;
    uint64_t window_tokens = 0;
    // (source, epoch, document, begin) of each piece placed
    std::map<std::tuple<uint32_t, uint64_t, uint64_t, uint64_t>, int> placed;
    for (uint64_t i = 0; i < o.window; ++i) {
      const Piece p = mixer.next();
      window[{p.source, p.epoch, p.document, p.begin}] = p.end;
      window_tokens += p.tokens();
    }
    uint64_t seen = 0;
    while (seen < window_tokens) {
      const PlannedSequence s = plan.next();
      ASSERT_LE(s.tokens(), 65u);
      ASSERT_FALSE(s.spans.empty());
      for (const Span& span : s.spans) {
        auto it = window.find({span.source, span.epoch, span.document, span.begin});
        ASSERT_NE(it, window.end()) << "a span from outside its window";
        ASSERT_EQ(it->second, span.end);
        ASSERT_EQ(++placed[it->first], 1) << "a piece placed twice";
        seen += span.end - span.begin;
      }
      tokens += s.tokens();
      capacity += 65;
    }
    ASSERT_EQ(seen, window_tokens);
    ++windows;
  }
  // best-fit decreasing fills the bins: padding well under a tenth here
  EXPECT_LT(static_cast<double>(capacity - tokens) / static_cast<double>(capacity), 0.10);
}

// The mix bound at every step (docs/tokens.md): with T the stream's tokens before the step's
// end and c_s those of source s, |w_s T - c_s| <= 2 (L + 1) for concat (one piece of the mixer's
// bound, one cut piece); for best-fit, L + 1 at window ends and (window + 1)(L + 1) inside one.
TEST(PlanTest, EverySourceStaysWithinTheStatedBoundOfItsShareAtEveryStep) {
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    for (size_t count : {2, 3, 10, 100, 1000}) {
      const uint64_t key = hash_at(count, packing == Packing::kConcat ? 1 : 2);
      std::vector<uint64_t> documents(count);
      TokenPlanOptions o;
      for (size_t s = 0; s < count; ++s) {
        documents[s] = 1 + hash_at(key, s) % 200;
        const double u = static_cast<double>(hash_at(key + 1, s) >> 11) / 9007199254740992.0;
        o.weights.push_back(1e-3 + u * u * u);
      }
      const Sources sources = make_sources(key, documents, 300);
      o.seq_len = 64;
      o.global_batch = 8;
      o.seed = key;
      o.packing = packing;
      o.window = 32;
      TokenPlan plan(sources, o);
      const auto& q = plan.mixer().quotas();
      const __int128 Q = __int128{1} << Mixer::kQuotaBits;
      std::vector<uint64_t> consumed(count, 0);
      uint64_t total = 0;
      for (uint64_t step = 0; step < 300; ++step) {
        for (uint64_t i = 0; i < o.global_batch; ++i) {
          const PlannedSequence s = plan.next();
          uint64_t owned = packing == Packing::kConcat ? o.seq_len : s.tokens();
          for (const Span& x : s.spans) {  // concat: the last token is the next sequence's
            const uint64_t take = std::min<uint64_t>(owned, x.end - x.begin);
            consumed[x.source] += take;
            total += take;
            owned -= take;
          }
        }
        const TokenPlanState at = plan.state();
        const bool window_end = packing == Packing::kBestFit && at.skip == 0;
        uint64_t bound = 2 * (o.seq_len + 1);
        if (packing == Packing::kBestFit) {
          bound = window_end ? o.seq_len + 1 : (o.window + 1) * (o.seq_len + 1);
        }
        for (size_t s = 0; s < count; ++s) {
          __int128 d = static_cast<__int128>(q[s]) * total - static_cast<__int128>(consumed[s]) * Q;
          if (d < 0) d = -d;
          ASSERT_LE(d, static_cast<__int128>(bound) * Q)
              << count << " sources, " << to_string(packing) << ", step " << step << ", source "
              << s << " strays " << static_cast<double>(d) / static_cast<double>(Q);
        }
      }
    }
  }
}

TEST(PlanTest, EveryWorldSizeReadsTheOneStream) {
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    const Sources sources = make_sources(3, {70, 15, 200}, 30);
    const TokenPlanOptions o = options(packing, 32, 24);
    TokenPlan one(sources, o);
    const auto expected = run(one, 24 * 20);
    for (uint64_t world : {1, 2, 3, 4, 8}) {
      std::vector<TokenPlan> ranks(world, TokenPlan(sources, o));
      for (uint64_t step = 0; step < 20; ++step) {
        for (uint64_t r = 0; r < world; ++r) {
          const auto mine = ranks[r].next_step(world, r);
          ASSERT_EQ(mine.size(), 24 / world);
          for (size_t i = 0; i < mine.size(); ++i) {
            const uint64_t k = step * 24 + r * (24 / world) + i;
            expect_same(mine[i], expected[k], "W=" + std::to_string(world));
          }
        }
      }
    }
  }
}

TEST(PlanTest, AStateResumesTheStreamOnAnyWorldSize) {
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    const Sources sources = make_sources(4, {50, 7, 90}, 60);
    const TokenPlanOptions o = options(packing, 20, 6);
    TokenPlan full(sources, o);
    const auto expected = run(full, 6 * 40);
    for (uint64_t cut : {0, 1, 5, 6, 37, 120, 234}) {
      TokenPlan first(sources, o);
      run(first, cut);
      const DictValue saved = first.state_dict(2);
      const std::string json = canonical_json(saved);
      TokenPlan resumed(sources, o);
      resumed.load_state_dict(saved);
      EXPECT_EQ(canonical_json(resumed.state_dict(2)), json) << "state of a fresh load, cut " << cut;
      for (uint64_t k = cut; k < expected.size(); ++k) {
        expect_same(resumed.next(), expected[k], "cut " + std::to_string(cut));
      }
    }
    // a step boundary: resumed on 3 ranks where 2 stopped
    TokenPlan stopped(sources, o);
    run(stopped, 6 * 13);
    const DictValue saved = stopped.state_dict(2);
    for (uint64_t r = 0; r < 3; ++r) {
      TokenPlan rank(sources, o);
      rank.load_state_dict(saved);
      for (uint64_t step = 13; step < 40; ++step) {
        const auto mine = rank.next_step(3, r);
        for (size_t i = 0; i < mine.size(); ++i) {
          expect_same(mine[i], expected[step * 6 + r * 2 + i], "W'=3");
        }
      }
    }
  }
}

TEST(PlanTest, TheStatesWordsRoundTripWithTargetsInTheDictsOrder) {
  TokenPlanState s;
  s.sequence = 41, s.skip = 3, s.mix.step = 9, s.mix.base = 1234;
  s.mix.cursors = {SourceCursor{1, 2, 3, 4}, SourceCursor{5, 6, 7, 8}};
  s.mix.targets = {(detail::Uint128{11} << 64) | 22, (detail::Uint128{33} << 64) | 44};
  s.mix.landings = {Landing{0, 1, 2, 3}};
  const std::vector<uint64_t> words = token_state_words(s);
  // The targets' halves as the checkpoint's dict stores them: [high, low].
  const std::vector<uint64_t> targets(words.begin() + 13, words.begin() + 18);
  EXPECT_EQ(targets, (std::vector<uint64_t>{2, 11, 22, 33, 44}));
  const std::optional<TokenPlanState> back = token_state_from_words(words);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(*back == s);
  for (size_t cut : {size_t{0}, size_t{4}, words.size() - 1}) {  // torn: never a state
    EXPECT_FALSE(token_state_from_words({words.begin(), words.begin() + cut}).has_value());
  }
}

TEST(PlanTest, AFailedLoadChangesNothing) {
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    const Sources sources = make_sources(5, {30, 30, 30}, 20);
    const TokenPlanOptions o = options(packing, 8, 2);
    TokenPlan plan(sources, o);
    run(plan, 11);
    TokenPlan twin(sources, o);
    run(twin, 11);
    TokenPlanState bad = plan.state();
    bad.skip = 1000000;
    EXPECT_THROW(plan.load(bad), std::invalid_argument);
    bad = plan.state();
    bad.mix.cursors[2].position = 30;
    EXPECT_THROW(plan.load(bad), std::invalid_argument);
    DictValue edited = plan.state_dict(1);
    edited.set("consumed", DictValue::integer(3));
    EXPECT_THROW(plan.load_state_dict(edited), std::invalid_argument);
    for (int i = 0; i < 50; ++i) expect_same(plan.next(), twin.next(), "after failed loads");
  }
}

std::string load_error(const TokenPlanOptions& writer, const TokenPlanOptions& reader,
                       const Sources& written, const Sources& read) {
  TokenPlan a(written, writer);
  run(a, 3);
  TokenPlan b(read, reader);
  try {
    b.load_state_dict(a.state_dict(1));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PlanTest, AStateOfAnotherConfigurationIsRefusedNamingTheDifference) {
  const Sources sources = make_sources(6, {30, 30, 30}, 20);
  const TokenPlanOptions o = options(Packing::kConcat, 8, 2);
  TokenPlanOptions other = o;
  other.seed = 5;
  EXPECT_NE(load_error(o, other, sources, sources).find("state seed = 1234 but this sampler's seed = 5"),
            std::string::npos);
  other = o;
  other.weights = {0.2, 0.3, 0.5};
  EXPECT_NE(load_error(o, other, sources, sources).find("quotas"), std::string::npos);
  other = o;
  other.global_batch = 4;
  EXPECT_NE(load_error(o, other, sources, sources).find("global_batch"), std::string::npos);
  other = o;
  other.packing = Packing::kBestFit;
  EXPECT_NE(load_error(o, other, sources, sources).find("packing"), std::string::npos);
  const Sources grown = make_sources(6, {30, 31, 30}, 20);
  EXPECT_NE(load_error(o, o, sources, grown).find("sources"), std::string::npos);
  EXPECT_EQ(load_error(o, o, sources, sources), "");
}

TEST(PlanTest, BadOptionsAreRefusedNamingTheParameter) {
  const Sources sources = make_sources(7, {3}, 10);
  TokenPlanOptions o;
  o.weights = {1};
  o.seq_len = 0;
  EXPECT_THROW(TokenPlan(sources, o), std::invalid_argument);
  o.seq_len = 8;
  o.global_batch = 0;
  EXPECT_THROW(TokenPlan(sources, o), std::invalid_argument);
  o.global_batch = 4;
  o.packing = Packing::kBestFit;
  o.window = 0;
  EXPECT_THROW(TokenPlan(sources, o), std::invalid_argument);
  EXPECT_THROW(parse_packing("first-fit"), std::invalid_argument);
  EXPECT_EQ(parse_packing("best-fit"), Packing::kBestFit);
  EXPECT_THROW(rank_sequences(6, 4, 0, 0), std::invalid_argument);
  EXPECT_THROW(rank_sequences(8, 4, 4, 0), std::invalid_argument);
  EXPECT_EQ(rank_sequences(8, 4, 3, 2).first, 22u);
  o.window = 4;
  TokenPlan plan(sources, o);
  plan.next();
  EXPECT_THROW(plan.next_step(2, 0), std::logic_error);
}

// ---- held-out splits and the evaluation pass ----------------------------------------------------

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(SplitTest, EachDocumentHasOneSplitInTheStatedProportions) {
  const SplitRule rule({969, 30, 1});
  EXPECT_EQ(rule.fractions(), (std::vector<double>{969, 30, 1}));
  uint64_t count[3] = {0, 0, 0};
  for (uint32_t s = 0; s < 4; ++s) {
    for (uint64_t d = 0; d < 100000; ++d) {
      const Split split = rule.of(s, d);
      ASSERT_EQ(split, SplitRule({969, 30, 1}).of(s, d));  // a pure function of (source, doc)
      ++count[static_cast<int>(split)];
    }
  }
  // 400,000 documents: within 5 standard deviations of 96.9%, 3% and 0.1%.
  EXPECT_NEAR(count[0], 387600, 550);
  EXPECT_NEAR(count[1], 12000, 540);
  EXPECT_NEAR(count[2], 400, 100);
  // The fractions scale: (96.9, 3, 0.1) is the same rule; a missing fraction is 0.
  const SplitRule same({96.9, 3, 0.1}), two({90, 10});
  uint64_t tests = 0;
  for (uint64_t d = 0; d < 20000; ++d) {
    ASSERT_EQ(same.of(1, d), rule.of(1, d));
    tests += two.of(1, d) == Split::kTest ? 1 : 0;
  }
  EXPECT_EQ(tests, 0u);
  // Not the seed, not the position: the source index and document number only.
  uint64_t differ = 0;
  for (uint64_t d = 0; d < 1000; ++d) differ += rule.of(0, d) != rule.of(1, d) ? 1 : 0;
  EXPECT_GT(differ, 10u);
}

TEST(SplitTest, BadFractionsAndNamesAreRefusedNamingTheParameter) {
  EXPECT_NE(error_of([] { SplitRule(std::vector<double>{}); }).find("split: 0 fractions"), std::string::npos);
  EXPECT_NE(error_of([] { SplitRule({1, 2, 3, 4}); }).find("1 to 3"), std::string::npos);
  EXPECT_NE(error_of([] { SplitRule({1, -2}); }).find("split[1] = -2"), std::string::npos);
  EXPECT_NE(error_of([] { SplitRule({0, 0}); }).find("sum to 0"), std::string::npos);
  EXPECT_NE(error_of([] { SplitRule({1, std::nan("")}); }).find("split[1] = nan"), std::string::npos);
  EXPECT_NE(error_of([] { parse_split("validation"); }).find("subset = 'validation'"),
            std::string::npos);
  EXPECT_EQ(parse_split("valid"), Split::kValidation);
  EXPECT_EQ(to_string(Split::kTest), "test");
}

TokenPlanOptions split_options(Packing packing, Split subset) {
  TokenPlanOptions o = options(packing, 16, 24);
  o.split = {80, 15, 5};
  o.subset = subset;
  return o;
}

TEST(SplitTest, TrainingNeverReadsAHeldOutDocumentThroughEpochsAndAppends) {
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    const Sources sources = make_sources(11, {60, 25, 90}, 40);
    TokenPlanOptions o = split_options(packing, Split::kTrain);
    MixEdit append;
    append.kind = MixEdit::Kind::kAppend;
    append.step = 4;
    append.source = 1;
    append.documents = make_sources(12, {40}, 40)[0];
    append.label = "append";
    o.edits = {append};
    const SplitRule rule(o.split);
    TokenPlan plan(sources, o);
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> read;
    for (uint64_t k = 0; k < 24 * 60; ++k) {  // several source epochs of every source
      for (const Span& x : plan.next().spans) {
        ASSERT_EQ(rule.of(x.source, x.document), Split::kTrain)
            << "source " << x.source << " document " << x.document << " is held out";
        ++read[{x.source, x.document}];
      }
    }
    EXPECT_GT(plan.state().mix.cursors[1].epoch, 1u);
    // Every training document with tokens was read, appended ones (25 and up) included.
    for (uint64_t d = 0; d < 65; ++d) {
      const uint32_t length = d < 25 ? sources[1]->length(d) : append.documents->length(d - 25);
      if (length > 0 && rule.of(1, d) == Split::kTrain) {
        EXPECT_GT(read.count({1, d}), 0u) << "document " << d;
      }
    }
    // The config records the split: a checkpoint of another split is refused naming it.
    TokenPlanOptions other = o;
    other.split = {90, 10};
    TokenPlan elsewhere(sources, other);
    const std::string error =
        error_of([&] { elsewhere.load_state_dict(plan.state_dict(1)); });
    EXPECT_NE(error.find("split"), std::string::npos) << error;
  }
}

// The tokens a pass covers: (source, document) -> each token's count, the last token of every
// concat sequence but the pass's last being the next one's first (not counted twice).
std::map<std::pair<uint32_t, uint64_t>, std::vector<int>> coverage(
    const std::vector<PlannedSequence>& sequences, const Sources& sources, Packing packing) {
  std::map<std::pair<uint32_t, uint64_t>, std::vector<int>> out;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const PlannedSequence& q = sequences[i];
    const bool last = i + 1 == sequences.size() || sequences[i + 1].spans.empty();
    uint64_t owned = packing == Packing::kConcat && !last ? q.tokens() - 1 : q.tokens();
    for (const Span& x : q.spans) {
      auto& counts = out[{x.source, x.document}];
      counts.resize(sources[x.source]->length(x.document), 0);
      for (uint64_t t = x.begin; t < x.end && owned > 0; ++t, --owned) ++counts[t];
    }
  }
  return out;
}

TEST(SplitTest, AnEvaluationPassReadsEveryDocumentOfItsSubsetOnceOnAnyWorldSize) {
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    for (Split subset : {Split::kValidation, Split::kTest}) {
      const Sources sources = make_sources(13, {3000, 800, 5000}, 40);
      const TokenPlanOptions o = split_options(packing, subset);
      const SplitRule rule(o.split);
      std::vector<PlannedSequence> expected;
      uint64_t steps = 0;
      {
        TokenPlan one(sources, o);
        for (; !one.exhausted(); ++steps) {
          for (PlannedSequence& q : one.next_step(1, 0)) expected.push_back(std::move(q));
        }
        ASSERT_GT(steps, 1u);
        ASSERT_TRUE(one.next().spans.empty());  // padding after the pass
      }
      const auto covered = coverage(expected, sources, packing);
      for (uint32_t s = 0; s < 3; ++s) {
        for (uint64_t d = 0; d < sources[s]->documents(); ++d) {
          const bool in = rule.of(s, d) == subset && sources[s]->length(d) > 0;
          auto it = covered.find({s, d});
          if (!in) {
            EXPECT_TRUE(it == covered.end()) << "source " << s << " document " << d;
            continue;
          }
          ASSERT_TRUE(it != covered.end()) << "source " << s << " document " << d << " unread";
          for (size_t t = 0; t < it->second.size(); ++t) {
            ASSERT_EQ(it->second[t], 1) << "source " << s << " document " << d << " token " << t;
          }
        }
      }
      // Every W: the same sequences, the same number of steps; the last step's tail padding.
      for (uint64_t world : {3, 8}) {
        for (uint64_t r = 0; r < world; ++r) {
          TokenPlan rank(sources, o);
          uint64_t taken = 0;
          for (; !rank.exhausted(); ++taken) {
            const auto mine = rank.next_step(world, r);
            ASSERT_EQ(mine.size(), 24 / world);
            for (size_t i = 0; i < mine.size(); ++i) {
              const uint64_t k = taken * 24 + r * (24 / world) + i;
              if (k < expected.size()) expect_same(mine[i], expected[k], "W=" + std::to_string(world));
            }
          }
          EXPECT_EQ(taken, steps) << "W=" << world << " rank " << r;
        }
      }
      // A pass resumes from a state inside it, and a state after it.
      for (uint64_t cut : {uint64_t{24}, steps * 24 - 24, steps * 24}) {
        TokenPlan first(sources, o);
        run(first, cut);
        TokenPlan resumed(sources, o);
        resumed.load_state_dict(first.state_dict(1));
        for (uint64_t k = cut; k < expected.size(); ++k) expect_same(resumed.next(), expected[k], "cut");
        EXPECT_TRUE(resumed.exhausted());
      }
    }
  }
}

TEST(SplitTest, AnEvaluationPassRefusesLaterEditsAndAnEmptySubset) {
  const Sources sources = make_sources(14, {30, 30, 30}, 20);
  TokenPlanOptions o = split_options(Packing::kConcat, Split::kValidation);
  MixEdit change;
  change.step = 3;
  change.until = 3;
  change.weights = {1, 1, 1};
  change.label = "--change 3:1,1,1";
  o.edits = {change};
  EXPECT_NE(error_of([&] { TokenPlan(sources, o); }).find("--change 3:1,1,1: step 3"),
            std::string::npos);
  o.edits.clear();
  o.split = {1, 0, 0};
  EXPECT_NE(error_of([&] { TokenPlan(sources, o); }).find("'valid' split"), std::string::npos);
  o.subset = Split::kTrain;
  o.split = {0, 1};
  EXPECT_NE(error_of([&] { TokenPlan(sources, o); }).find("sources[0]: none of its"),
            std::string::npos);
  // No split: an evaluation pass reads every document (a separate validation set).
  o.split.clear();
  o.subset = Split::kValidation;
  TokenPlan whole(sources, o);
  uint64_t tokens = 0;
  while (!whole.exhausted()) tokens += whole.next().tokens() - 1;
  uint64_t total = 0;
  for (const auto& s : sources) total += s->total_tokens();
  EXPECT_EQ(tokens + 1, total);
}

}  // namespace
}  // namespace distsampler
