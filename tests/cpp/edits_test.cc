// Edits of a token plan (mix.h's MixEdit): a weight change, a ramp, an appended shard, a new source
// and a skip list, each at a step drawn from a hash, on W in {1, 3, 8} with a resume onto another
// W', in both packings. For each: the sequences before the edit's step are the unedited plan's,
// the run reads every document of every source epoch once (an independent ledger here, not the
// CLI's audit), a checkpoint resumes it bit for bit, and the checkpoint records the edit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "distsampler/hash.h"
#include "distsampler/tokens/plan.h"
#include "mix_edits.h"

namespace distsampler {
namespace {

using Sources = std::vector<std::shared_ptr<const DocumentLengths>>;

// `minimum` > 0: every document at least that long (a source whose cursor is almost always
// inside a document, so that an edit lands mid-document).
std::shared_ptr<const DocumentLengths> lengths(uint64_t key, uint64_t documents, uint32_t longest,
                                               uint32_t minimum = 0) {
  std::vector<uint32_t> out(documents);
  for (uint64_t d = 0; d < documents; ++d) {
    const uint64_t h = hash_at(key, d);
    out[d] = minimum + static_cast<uint32_t>(h % ((h >> 61) == 0 ? 3 * longest : longest / 3 + 2));
  }
  out[0] = 3;
  return std::make_shared<LengthList>(out);
}

const Sources& base_sources() {
  static const Sources sources = {lengths(11, 60, 40), lengths(12, 25, 90, 60), lengths(13, 140, 12)};
  return sources;
}

TokenPlanOptions options(Packing packing, std::vector<MixEdit> edits) {
  TokenPlanOptions o;
  o.weights = {0.5, 0.3, 0.2};
  o.seq_len = 24;
  o.global_batch = 24;  // a multiple of 1, 3 and 8
  o.seed = 99;
  o.packing = packing;
  o.window = 29;
  o.edits = std::move(edits);
  return o;
}

using testing_edits::append;
using testing_edits::change;
using testing_edits::skip;

// The global sequences of `steps` steps read by W ranks, each rank with its own plan (as the
// ranks of a job do), the first `resume_at` steps on W ranks and the rest on W' ranks resumed
// from rank 0's checkpoint (0: no resume).
std::vector<PlannedSequence> read(const Sources& sources, const TokenPlanOptions& o,
                                  uint64_t steps, uint64_t world, uint64_t resume_at = 0,
                                  uint64_t world_after = 1) {
  std::map<uint64_t, PlannedSequence> by_index;
  std::vector<TokenPlan> ranks(world, TokenPlan(sources, o));
  DictValue checkpoint;
  for (uint64_t step = 0; step < (resume_at ? resume_at : steps); ++step) {
    for (uint64_t r = 0; r < world; ++r) {
      for (PlannedSequence& s : ranks[r].next_step(world, r)) {
        EXPECT_TRUE(by_index.emplace(s.index, s).second) << "sequence " << s.index << " twice";
      }
    }
  }
  if (resume_at) {
    checkpoint = ranks[0].state_dict(world);
    std::vector<TokenPlan> after(world_after, TokenPlan(sources, o));
    for (TokenPlan& plan : after) plan.load_state_dict(checkpoint);
    for (uint64_t step = resume_at; step < steps; ++step) {
      for (uint64_t r = 0; r < world_after; ++r) {
        for (PlannedSequence& s : after[r].next_step(world_after, r)) {
          EXPECT_TRUE(by_index.emplace(s.index, s).second) << "sequence " << s.index << " twice";
        }
      }
    }
  }
  std::vector<PlannedSequence> out;
  for (auto& [index, s] : by_index) out.push_back(std::move(s));
  EXPECT_EQ(out.size(), steps * o.global_batch);
  return out;
}

// The ledger: the tokens each sequence owns (concat: its first L; best-fit: all) per (source,
// source epoch, document), none twice; and every document at a position a source has passed in
// its order read whole, or not at all when a skip list names it.
void expect_exactly_once(const Sources& sources, const TokenPlanOptions& o,
                         const std::vector<PlannedSequence>& sequences, const std::string& where) {
  TokenPlan plan(sources, o);
  std::map<std::tuple<uint32_t, uint64_t, uint64_t>, std::vector<std::pair<uint64_t, uint64_t>>>
      ledger;
  for (const PlannedSequence& s : sequences) {
    uint64_t owned = o.packing == Packing::kConcat ? o.seq_len : s.tokens();
    for (const Span& x : s.spans) {
      const uint64_t take = std::min(owned, x.end - x.begin);
      if (take) ledger[{x.source, x.epoch, x.document}].push_back({x.begin, x.begin + take});
      owned -= take;
    }
    const PlannedSequence replay = plan.next();
    ASSERT_EQ(replay.spans, s.spans) << where;
  }
  const MixState at_end = plan.state().mix;
  const Mixer& mixer = plan.mixer();
  uint64_t whole = 0, skipped = 0, epochs = 0;
  for (uint32_t source = 0; source < mixer.sources(); ++source) {
    const SourceCursor& c = at_end.cursors[source];
    epochs += c.epoch;
    for (uint64_t e = 0; e <= c.epoch; ++e) {
      const uint64_t passed = e < c.epoch ? mixer.epoch_size(source, e) : c.position;
      const std::vector<uint64_t> documents = mixer.epoch_documents(source, e, passed);
      ASSERT_EQ(std::set<uint64_t>(documents.begin(), documents.end()).size(), documents.size())
          << where << ": a document twice in the order of source " << source << " epoch " << e;
      for (uint64_t d : documents) {
        const uint64_t length = mixer.lengths(source).length(d);
        auto it = ledger.find({source, e, d});
        uint64_t covered = 0, at = 0;
        if (it != ledger.end()) {
          std::sort(it->second.begin(), it->second.end());
          for (const auto& [begin, end] : it->second) {
            ASSERT_GE(begin, at) << where << ": source " << source << " epoch " << e
                                 << " document " << d << " read twice from token " << begin;
            covered += end - begin;
            at = end;
          }
        }
        if (length == 0) continue;
        if (covered == 0 && mixer.skipped(source, d)) {
          ++skipped;
          continue;
        }
        ASSERT_EQ(covered, length) << where << ": source " << source << " epoch " << e
                                   << " document " << d << " lost tokens";
        ++whole;
      }
    }
  }
  EXPECT_GT(epochs, 0u) << where << ": the run should finish some source epoch";
  EXPECT_GT(whole, 0u);
}

struct EditCase {
  std::string name;
  Sources sources;
  std::vector<MixEdit> edits;
  uint64_t step;  // the first edit's step
};

std::vector<EditCase> cases() {
  const Sources& base = base_sources();
  const uint64_t at = 3 + hash_at(31, 0) % 10;  // a step drawn from a hash: 3 to 12
  std::vector<EditCase> out;
  out.push_back({"weight change", base, {change(at, {0.1, 0.2, 0.7})}, at});
  out.push_back({"ramp", base, {change(at, {0.05, 0.05, 0.9}, at + 9)}, at});
  out.push_back({"appended shard", base, {append(at, 1, lengths(77, 40, 90))}, at});
  out.push_back({"new source", base,
                 {append(at, 3, lengths(78, 30, 20)), change(at, {0.3, 0.2, 0.2, 0.3})}, at});
  std::vector<std::pair<uint32_t, uint64_t>> listed;
  for (uint64_t d = 1; d < 60; d += 4) listed.push_back({0, d});
  for (uint64_t d = 2; d < 140; d += 9) listed.push_back({2, d});
  out.push_back({"skip list", base, {skip(at, listed)}, at});
  out.push_back({"all at once", base,
                 {append(at, 0, lengths(79, 20, 40)), skip(at + 2, listed),
                  change(at + 4, {1, 1, 1}, at + 10), append(at + 11, 2, lengths(80, 50, 12))},
                 at});
  return out;
}

class EditTest : public ::testing::TestWithParam<Packing> {};

TEST_P(EditTest, StepsBeforeAnEditAreTheUneditedPlans) {
  const uint64_t steps = 40;
  const TokenPlanOptions plain = options(GetParam(), {});
  const auto unedited = read(base_sources(), plain, steps, 1);
  for (const EditCase& c : cases()) {
    const auto edited = read(c.sources, options(GetParam(), c.edits), steps, 1);
    const uint64_t before = c.step * plain.global_batch;
    for (uint64_t k = 0; k < before; ++k) {
      ASSERT_EQ(edited[k].spans, unedited[k].spans) << c.name << ": sequence " << k;
    }
    bool differs = false;
    for (uint64_t k = before; k < edited.size(); ++k) differs |= edited[k].spans != unedited[k].spans;
    EXPECT_TRUE(differs) << c.name << ": the edit changed nothing";
  }
}

TEST_P(EditTest, EveryWorldSizeAndAResumeOntoAnotherReadEachDocumentOncePerSourceEpoch) {
  const uint64_t steps = 60;
  for (const EditCase& c : cases()) {
    const TokenPlanOptions o = options(GetParam(), c.edits);
    const auto reference = read(c.sources, o, steps, 1);
    expect_exactly_once(c.sources, o, reference, c.name);
    for (uint64_t world : {1, 3, 8}) {
      const auto got = read(c.sources, o, steps, world);
      for (size_t k = 0; k < got.size(); ++k) ASSERT_EQ(got[k].spans, reference[k].spans);
      // a resume at a step drawn from a hash, before or after the edits, onto another W
      for (uint64_t trial = 0; trial < 3; ++trial) {
        const uint64_t resume = 1 + hash_at(world * 7 + trial, c.step) % (steps - 2);
        const uint64_t world_after = world == 8 ? 3 : 8;
        const auto resumed = read(c.sources, o, steps, world, resume, world_after);
        for (size_t k = 0; k < resumed.size(); ++k) {
          ASSERT_EQ(resumed[k].spans, reference[k].spans)
              << c.name << ": W " << world << " resumed at step " << resume << " on W' "
              << world_after << ", sequence " << k;
        }
      }
    }
  }
}

TEST_P(EditTest, EveryStepsStateResumesTheEditedStream) {
  for (const EditCase& c : cases()) {
    const TokenPlanOptions o = options(GetParam(), c.edits);
    TokenPlan plan(c.sources, o);
    std::vector<TokenPlanState> states;
    std::vector<PlannedSequence> stream;
    for (int k = 0; k < 30 * 24; ++k) {
      states.push_back(plan.state());
      stream.push_back(plan.next());
    }
    for (size_t k = 0; k < stream.size(); k += 7) {  // inside steps too (the C++ state allows it)
      TokenPlan resumed(c.sources, o);
      resumed.load(states[k]);
      for (size_t j = k; j < std::min(stream.size(), k + 40); ++j) {
        ASSERT_EQ(resumed.next().spans, stream[j].spans) << c.name << ": from " << k;
      }
    }
  }
}

TEST_P(EditTest, ACheckpointRecordsItsEditsAndRefusesAnotherHistory) {
  const EditCase c = cases()[0];
  const TokenPlanOptions o = options(GetParam(), c.edits);
  TokenPlan plan(c.sources, o);
  for (uint64_t s = 0; s < c.step + 2; ++s) plan.next_step(1, 0);
  const DictValue after = plan.state_dict(1);
  // without the edit, or with another, refused naming the edits
  TokenPlan unedited(c.sources, options(GetParam(), {}));
  try {
    unedited.load_state_dict(after);
    FAIL() << "a checkpoint of an edited run loaded into the unedited plan";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("edits"), std::string::npos) << e.what();
  }
  TokenPlan other(c.sources, options(GetParam(), {change(c.step, {0.2, 0.2, 0.6})}));
  EXPECT_THROW(other.load_state_dict(after), std::invalid_argument);
  // an edit after the checkpoint's step is the resumed run's to add
  std::vector<MixEdit> more = c.edits;
  more.push_back(change(c.step + 5, {1, 2, 3}));
  TokenPlan extended(c.sources, options(GetParam(), more));
  extended.load_state_dict(after);
  EXPECT_EQ(extended.state(), plan.state());
  // a checkpoint before the edit loads into the unedited plan and continues the same
  TokenPlan early(c.sources, o);
  for (uint64_t s = 0; s < c.step; ++s) early.next_step(1, 0);
  unedited.load_state_dict(early.state_dict(1));
}

TEST_P(EditTest, AFailedLoadOfAnEditedStateChangesNothing) {
  const EditCase c = cases()[2];  // the appended shard: a landing in the state
  const TokenPlanOptions o = options(GetParam(), c.edits);
  TokenPlan plan(c.sources, o);
  for (uint64_t s = 0; s < c.step + 3; ++s) plan.next_step(1, 0);
  TokenPlan twin = plan;
  TokenPlanState bad = plan.state();
  ASSERT_EQ(bad.mix.landings.size(), 1u);
  bad.mix.landings[0].start = 1000000;
  EXPECT_THROW(plan.load(bad), std::invalid_argument);
  bad = plan.state();
  bad.mix.landings.clear();
  EXPECT_THROW(plan.load(bad), std::invalid_argument);
  bad = plan.state();
  bad.mix.targets.pop_back();
  EXPECT_THROW(plan.load(bad), std::invalid_argument);
  for (int i = 0; i < 60; ++i) ASSERT_EQ(plan.next().spans, twin.next().spans);
}

INSTANTIATE_TEST_SUITE_P(Packings, EditTest,
                         ::testing::Values(Packing::kConcat, Packing::kBestFit),
                         [](const auto& info) {
                           return info.param == Packing::kConcat ? "concat" : "bestfit";
                         });

// The mix after a change or along a ramp: every source within one piece of the integral of its
// weights over the tokens (the share before the change kept, the new weights sharing the rest).
TEST(EditMixTest, EachSourceStaysWithinOnePieceOfItsScheduledShare) {
  const Sources sources = {lengths(1, 300, 50), lengths(2, 200, 80), lengths(3, 500, 20),
                           lengths(4, 90, 60)};
  const uint64_t piece = 33;
  const std::vector<std::vector<MixEdit>> schedules = {
      {change(5, {0.1, 0.1, 0.1, 0.7})},
      {change(2, {4, 3, 2, 1}, 40)},
      {change(3, {1, 1, 1, 1}), change(10, {0.01, 0.5, 0.01, 0.48}, 30), change(50, {9, 1, 1, 1})}};
  for (const auto& schedule : schedules) {
    Mixer mixer(sources, {0.25, 0.25, 0.25, 0.25}, 5, piece, schedule);
    std::vector<uint64_t> consumed(4, 0);
    std::vector<double> target(4, 0);  // the integral of the weights over the tokens
    uint64_t step = 0;
    double worst = 0;
    for (int i = 0; i < 60000; ++i) {
      if (i % 800 == 0) mixer.advance(step++);  // a step every 800 pieces
      const std::vector<uint64_t>& q = mixer.quotas();
      const Piece p = mixer.next();
      for (size_t s = 0; s < 4; ++s) {
        target[s] += static_cast<double>(p.tokens()) * static_cast<double>(q[s]) / 4294967296.0;
      }
      consumed[p.source] += p.tokens();
      for (size_t s = 0; s < 4; ++s) {
        worst = std::max(worst, std::abs(target[s] - static_cast<double>(consumed[s])));
      }
    }
    EXPECT_LE(worst, static_cast<double>(piece) + 1e-6) << "a source strayed from its schedule";
  }
}

// A skip list: from its step no skipped document is begun (one begun before it is finished), and
// given at the start the stream is the unedited one up to the first skipped document.
TEST(EditMixTest, SkippedDocumentsAreNeverBegunAndTheStreamIsUnchangedUpToTheFirst) {
  const Sources& sources = base_sources();
  std::vector<std::pair<uint32_t, uint64_t>> listed;
  for (uint64_t d = 3; d < 140; d += 5) listed.push_back({2, d});
  for (uint64_t d = 1; d < 25; d += 3) listed.push_back({1, d});
  std::sort(listed.begin(), listed.end());
  for (uint64_t at : {0, 7}) {
    Mixer plain(sources, {1, 2, 3}, 8, 16);
    Mixer edited(sources, {1, 2, 3}, 8, 16, {skip(at, listed)});
    bool same = at == 0;  // at 0: the same until the unedited mixer begins a skipped document
    for (int i = 0; i < 20000; ++i) {
      if (i == 500) edited.advance(7);
      const Piece p = edited.next(), q = plain.next();
      const bool listed_p =
          std::binary_search(listed.begin(), listed.end(), std::make_pair(p.source, p.document));
      if (same) {
        if (std::binary_search(listed.begin(), listed.end(),
                               std::make_pair(q.source, q.document))) {
          same = false;
        } else {
          ASSERT_EQ(std::make_tuple(p.source, p.document, p.begin),
                    std::make_tuple(q.source, q.document, q.begin)) << "piece " << i;
        }
      }
      if (listed_p && p.begin == 0) {
        ASSERT_TRUE(at != 0 && i < 500) << "skipped document " << p.document << " of source " << p.source
                          << " begun after its skip list took effect";
      }
    }
  }
}

TEST(EditMixTest, BadEditsAreRefusedNamingTheEdit) {
  const Sources& sources = base_sources();
  auto refused = [&](std::vector<MixEdit> edits, const std::string& needle) {
    try {
      Mixer mixer(sources, {1, 1, 1}, 0, 16, std::move(edits));
      ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({change(4, {1, 2})}, "2 weights in force for 3 sources");
  refused({change(4, {1, 2, -1})}, "change@4[2] = -1");
  refused({append(4, 5, lengths(1, 3, 3))}, "append@4: source = 5; allowed: 0 to 3");
  refused({append(4, 3, lengths(1, 3, 3))}, "3 weights in force for 4 sources");
  refused({skip(4, {{0, 60}})}, "skip@4: document 60 of source 0 does not exist at step 4");
  refused({skip(4, {{3, 0}})}, "skip@4: source 3 does not exist");
  std::vector<std::pair<uint32_t, uint64_t>> every;
  for (uint64_t d = 0; d < 25; ++d) every.push_back({1, d});
  refused({skip(4, every)}, "every document of source 1 with tokens is skipped");
  refused({change(4, {1, 2, 3}, 10), change(6, {3, 2, 1})}, "falls inside the ramp change@4");
  MixEdit empty = append(2, 0, std::make_shared<LengthList>(std::vector<uint32_t>{}));
  refused({empty}, "append@2: no documents");
}

}  // namespace
}  // namespace distsampler
