// The token plan's stream, frozen: for a grid of configurations (1 to 300 sources, tied and
// distinct weights, both packings, every kind of edit, a held-out split and a single pass), a
// digest of every span of the first sequences and of the state at the end, equal to
// tests/golden/token_plans.txt. That file was written by the planner before the O(log sources)
// mixer (issue 41), so it holds the new planner to the old one's stream bit for bit. Each case
// also resumes from a checkpoint at a step drawn from a hash, on a world size drawn the same way,
// and must continue with the same digest.
//
// Regenerate (only for a deliberate change of the stream, which changes every user's data order):
//   DISTSAMPLER_WRITE_GOLDEN=tests/golden/token_plans.txt build/tests/plan_golden_test
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distsampler/hash.h"
#include "distsampler/tokens/plan.h"
#include "mix_edits.h"
#include "golden.h"

namespace distsampler {
namespace {

using Sources = std::vector<std::shared_ptr<const DocumentLengths>>;

// `documents` lengths from a hash: mostly short, a few long (cut into pieces), some empty.
std::shared_ptr<const DocumentLengths> lengths(uint64_t key, uint64_t documents, uint32_t longest,
                                               bool same = false) {
  std::vector<uint32_t> out(documents);
  for (uint64_t d = 0; d < documents; ++d) {
    const uint64_t h = hash_at(key, d);
    out[d] = same ? longest
                  : static_cast<uint32_t>(h % ((h >> 60) == 0 ? 4 * longest : longest / 3 + 2));
  }
  out[0] = 3;
  return std::make_shared<LengthList>(out);
}

struct Case {
  std::string name;
  Sources sources;
  TokenPlanOptions options;
  uint64_t steps = 0;
};

using testing_edits::append;
using testing_edits::change;
using testing_edits::skip;

std::vector<double> weights_of(uint64_t key, size_t count, bool tied) {
  std::vector<double> out(count, 1.0);
  if (tied) return out;
  for (size_t s = 0; s < count; ++s) out[s] = 0.5 + static_cast<double>(hash_at(key, s) >> 11) * 0x1p-52;
  return out;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const struct {
    const char* name;
    size_t sources;
    uint64_t documents;
    uint32_t longest;
    bool tied, same;
    uint64_t seq_len, batch;
  } shapes[] = {
      {"one", 1, 50, 40, false, false, 16, 4},
      {"three", 3, 120, 60, false, false, 24, 24},
      {"tied", 8, 30, 7, true, true, 16, 8},
      {"tied_lengths", 17, 40, 50, true, false, 32, 8},
      {"many", 130, 20, 90, false, false, 100, 16},
      {"wide", 300, 9, 400, false, false, 256, 8},
  };
  for (const auto& shape : shapes) {
    for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
      for (const char* edits : {"none", "change", "ramp", "append", "new_source", "skip", "split",
                                "valid"}) {
        Case c;
        const uint64_t key = hash_at(shape.sources, shape.documents);
        for (size_t s = 0; s < shape.sources; ++s) {
          c.sources.push_back(lengths(key + s, shape.documents + s % 7, shape.longest, shape.same));
        }
        TokenPlanOptions& o = c.options;
        o.weights = weights_of(key, shape.sources, shape.tied);
        o.seq_len = shape.seq_len;
        o.global_batch = shape.batch;
        o.seed = key;
        o.packing = packing;
        o.window = 29;
        c.steps = 40;
        const std::string e = edits;
        const auto n = static_cast<uint32_t>(shape.sources);
        if (e == "change") {
          o.edits.push_back(change(3, weights_of(key + 1, shape.sources, false)));
        } else if (e == "ramp") {
          o.edits.push_back(change(2, weights_of(key + 2, shape.sources, shape.tied), 9));
        } else if (e == "append") {
          o.edits.push_back(append(4, n / 2, lengths(key + 3, 25, shape.longest)));
        } else if (e == "new_source") {
          o.edits.push_back(append(5, n, lengths(key + 4, 25, shape.longest)));
          std::vector<double> w = o.weights;
          w.push_back(1.5);
          o.edits.push_back(change(5, w));
        } else if (e == "skip") {
          std::vector<std::pair<uint32_t, uint64_t>> list;
          for (uint32_t s = 0; s < n; s += 2) list.push_back({s, 1 + s % 5});
          o.edits.push_back(skip(2, list));
        } else if (e == "split") {
          o.split = {0.8, 0.15, 0.05};
        } else if (e == "valid") {
          o.split = {0.5, 0.5};
          o.subset = Split::kValidation;
          c.steps = 1000;  // until the pass is exhausted
        }
        c.name = std::string(shape.name) + " " + std::string(to_string(packing)) + " " + e;
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

// A digest of sequences and of where the plan stands after them.
struct Digest {
  uint64_t value = 0;
  void add(uint64_t x) { value = hash_at(value ^ 0x9e3779b97f4a7c15ull, x); }
  void add(const PlannedSequence& s) {
    add(s.index);
    add(s.spans.size());
    for (const Span& x : s.spans) {
      add(x.source);
      add(x.document);
      add(x.begin);
      add(x.end);
      add(x.epoch);
    }
  }
  void add(const TokenPlanState& state) {
    add(state.sequence);
    add(state.skip);
    for (const SourceCursor& c : state.mix.cursors) {
      add(c.epoch);
      add(c.position);
      add(c.offset);
      add(c.consumed);
    }
    add(state.mix.base);
    for (detail::Uint128 t : state.mix.targets) {
      add(static_cast<uint64_t>(t >> 64));
      add(static_cast<uint64_t>(t));
    }
  }
};

// The digest of a run of c.steps steps (or until a single pass ends), every rank of W's share
// read from its own plan, the ranks resumed at step `resume_at` onto W' from rank 0's checkpoint.
uint64_t run(const Case& c, uint64_t world, uint64_t resume_at, uint64_t world_after,
             uint64_t* steps_run) {
  Digest digest;
  std::vector<TokenPlan> ranks(world, TokenPlan(c.sources, c.options));
  uint64_t step = 0;
  for (; step < c.steps && !ranks[0].exhausted(); ++step) {
    if (step == resume_at) {
      const DictValue checkpoint = ranks[0].state_dict(world);
      std::vector<TokenPlan> after(world_after, TokenPlan(c.sources, c.options));
      for (TokenPlan& plan : after) plan.load_state_dict(checkpoint);
      ranks = std::move(after);
      world = world_after;
    }
    for (uint64_t r = 0; r < world; ++r) {
      for (const PlannedSequence& s : ranks[r].next_step(world, r)) digest.add(s);
    }
  }
  for (const TokenPlan& plan : ranks) EXPECT_EQ(plan.state(), ranks[0].state()) << c.name;
  digest.add(ranks[0].state());
  *steps_run = step;
  return digest.value;
}

TEST(PlanGoldenTest, TheStreamIsTheRecordedOneOnAnyWorldSizeAndResume) {
  std::map<std::string, std::vector<uint64_t>> golden;
  const char* write = std::getenv("DISTSAMPLER_WRITE_GOLDEN");
  if (write == nullptr) {
    for (const auto& g : testing::read_golden("token_plans.txt")) {
      std::string name;
      for (const std::string& f : g.fields) name += (name.empty() ? "" : " ") + f;
      golden[name] = g.values;
    }
  }
  std::ofstream out;
  if (write != nullptr) {
    out.open(write);
    out << "# plan_golden_test's cases: name | steps digest (frozen: see the test's header)\n";
  }
  size_t checked = 0;
  for (const Case& c : cases()) {
    uint64_t steps = 0, resumed_steps = 0;
    const uint64_t whole = run(c, 1, UINT64_MAX, 1, &steps);
    // The same stream read by W ranks, resumed at a hashed step onto W'.
    const uint64_t h = hash_at(whole, 17);
    const uint64_t worlds[] = {1, 2, 4, 8};
    const uint64_t world = worlds[h % 4], after = worlds[(h >> 8) % 4];
    if (steps >= 2 && c.options.global_batch % world == 0 && c.options.global_batch % after == 0) {
      const uint64_t resume_at = 1 + (h >> 16) % (steps - 1);
      EXPECT_EQ(run(c, world, resume_at, after, &resumed_steps), whole)
          << c.name << ": W = " << world << " resumed at step " << resume_at << " on W' = "
          << after;
      EXPECT_EQ(resumed_steps, steps) << c.name;
    }
    if (write != nullptr) {
      out << c.name << " | " << steps << " " << whole << "\n";
      continue;
    }
    const auto it = golden.find(c.name);
    ASSERT_NE(it, golden.end()) << c.name << " is not in token_plans.txt";
    EXPECT_EQ(it->second, (std::vector<uint64_t>{steps, whole})) << c.name;
    ++checked;
  }
  if (write == nullptr) {
    EXPECT_EQ(checked, golden.size());
  }
}

}  // namespace
}  // namespace distsampler
