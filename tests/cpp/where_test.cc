// where.h's contract, on randomized configurations (1 to 50 sources, concat and best-fit, splits,
// locality orders, weight changes and ramps, appends to a source and a new source, skip lists
// mid-run, several source passes): where_document with a PlanIndex of any spacing, and without
// one, is the brute-force scan of the plan, sighting for sighting; the order inverses
// (Mixer::position_of, BlockShardOrder::inverse) undo the orders; a takedown's report is the scan
// of the run before its step and of the edited run after it, and the edited run, resumed from a
// checkpoint at the step on another world size, delivers no listed document but those under way;
// explain from an index's state and ledger is explain from step 0.
#include "distsampler/tokens/where.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "distsampler/blake2b.h"
#include "distsampler/hash.h"
#include "distsampler/policies/shards.h"
#include "distsampler/tokens/explain.h"
#include "distsampler/tokens/plan.h"
#include "mix_edits.h"

namespace distsampler {

// Failure messages that read as the CLI's table.
void PrintTo(const Sighting& s, std::ostream* os) {
  *os << "step " << s.step << " row " << s.row << " (seq " << s.sequence << ") offset "
      << s.offset << " " << s.source << "/" << s.document << "[" << s.begin << ", " << s.end
      << ") epoch " << s.epoch;
}

namespace {

using Sources = std::vector<std::shared_ptr<const DocumentLengths>>;
using testing_edits::append;
using testing_edits::change;
using testing_edits::skip;

struct Config {
  std::string name;
  Sources sources;
  TokenPlanOptions options;
  uint64_t steps = 0;
};

uint64_t draw(uint64_t key, uint64_t& counter, uint64_t n) { return hash_at(key, counter++) % n; }

std::shared_ptr<const DocumentLengths> random_lengths(uint64_t key, uint64_t documents,
                                                      uint32_t longest) {
  std::vector<uint32_t> out(documents);
  for (uint64_t d = 0; d < documents; ++d) {
    const uint64_t h = hash_at(key ^ 0x5bd1e995, d);
    out[d] = (h & 15) == 0 ? 0 : static_cast<uint32_t>(1 + (h >> 8) % longest);  // some empty
  }
  out[0] = std::max<uint32_t>(out[0], 1);
  return std::make_shared<LengthList>(out);
}

Config random_config(uint64_t key) {
  uint64_t c = 0;
  Config out;
  const uint64_t counts[] = {1, 2, 3, 5, 8, 20, 50};
  const uint64_t n = counts[draw(key, c, 7)];
  for (uint64_t s = 0; s < n; ++s) {
    out.sources.push_back(random_lengths(key * 131 + s, 4 + draw(key, c, 40),
                                         static_cast<uint32_t>(10 + draw(key, c, 150))));
  }
  TokenPlanOptions& o = out.options;
  for (uint64_t s = 0; s < n; ++s) o.weights.push_back(1.0 + static_cast<double>(draw(key, c, 5)));
  o.seq_len = 7 + draw(key, c, 60);
  const uint64_t batches[] = {4, 6, 8, 12};
  o.global_batch = batches[draw(key, c, 4)];
  o.seed = hash_at(key, 999);
  o.packing = key % 2 == 0 ? Packing::kConcat : Packing::kBestFit;
  o.window = 1 + draw(key, c, 30);
  out.steps = 12 + draw(key, c, 24);
  std::string name = std::to_string(n) + " sources, " + std::string(to_string(o.packing));
  if (key % 3 == 1) {
    o.split = {0.8, 0.15, 0.05};
    name += ", split";
  }
  if (key % 4 == 2) {
    for (uint64_t s = 0; s < n; ++s) {
      o.orders.push_back(s % 2 == 0 ? SourceOrder{1 + draw(key, c, 5), 1 + draw(key, c, 4)}
                                    : SourceOrder{});
    }
    name += ", locality";
  }
  const uint64_t kind = key % 5;
  const uint64_t at = 1 + draw(key, c, out.steps - 2);
  if (kind == 0 || kind == 4) {
    std::vector<double> w;
    for (uint64_t s = 0; s < n; ++s) w.push_back(1.0 + static_cast<double>(draw(key, c, 9)));
    o.edits.push_back(change(at, w, kind == 4 ? at + 1 + draw(key, c, 8) : 0));
    name += kind == 4 ? ", ramp" : ", change";
  }
  if (kind == 1 || kind == 4) {
    o.edits.push_back(append(at, static_cast<uint32_t>(draw(key, c, n)),
                             random_lengths(key + 77, 5 + draw(key, c, 20), 80)));
    name += ", append";
  }
  if (kind == 2) {  // a new source, with its weight
    o.edits.push_back(append(at, static_cast<uint32_t>(n), random_lengths(key + 78, 9, 60)));
    std::vector<double> w(o.weights);
    w.push_back(2.0);
    o.edits.push_back(change(at, w));
    name += ", new source";
  }
  if (kind == 3 || kind == 1) {
    std::vector<std::pair<uint32_t, uint64_t>> pairs;
    for (int i = 0; i < 4; ++i) {
      const uint32_t s = static_cast<uint32_t>(draw(key, c, n));
      pairs.push_back({s, draw(key, c, out.sources[s]->documents())});
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    o.edits.push_back(skip(1 + draw(key, c, out.steps - 2), pairs));
    name += ", skip list";
  }
  out.name = name + " (key " + std::to_string(key) + ")";
  return out;
}

// Every document of the run (new sources and appended documents included).
std::vector<DocumentId> all_documents(const TokenPlan& end) {
  std::vector<DocumentId> out;
  for (uint32_t s = 0; s < end.mixer().sources(); ++s) {
    for (uint64_t d = 0; d < end.mixer().lengths(s).documents(); ++d) out.push_back({s, d});
  }
  return out;
}

std::map<DocumentId, std::vector<Sighting>> by_document(const std::vector<Sighting>& all) {
  std::map<DocumentId, std::vector<Sighting>> out;
  for (const Sighting& s : all) out[{s.source, s.document}].push_back(s);
  return out;
}

// The reference: the plan walked sequence by sequence, each span of each row in order.
std::vector<Sighting> brute(TokenPlan plan, uint64_t steps, uint64_t world) {
  std::vector<Sighting> out;
  const uint64_t batch = plan.options().global_batch;
  for (uint64_t step = 0; step < steps; ++step) {
    for (const PlannedSequence& seq : plan.next_step(1, 0)) {
      uint64_t offset = 0;
      for (const Span& x : seq.spans) {
        Sighting s;
        s.step = step;
        s.row = seq.index - step * batch;
        s.sequence = seq.index;
        s.offset = offset;
        s.source = x.source;
        s.document = x.document;
        s.begin = x.begin;
        s.end = x.end;
        s.epoch = x.epoch;
        s.rank = s.row / (batch / world);
        s.rank_row = s.row % (batch / world);
        out.push_back(s);
        offset += x.end - x.begin;
      }
    }
  }
  return out;
}

std::vector<Sighting> before(const std::vector<Sighting>& all, uint64_t until) {
  std::vector<Sighting> out;
  for (const Sighting& s : all) {
    if (s.step < until) out.push_back(s);
  }
  return out;
}

TEST(Blake2b, IsHashlibsBlake2bOf16Bytes) {
  // hashlib.blake2b(text, digest_size=16).hexdigest() for each text.
  auto hex = [](const std::string& raw) {
    std::string out;
    char b[3];
    for (unsigned char c : raw) std::snprintf(b, sizeof b, "%02x", c), out += b;
    return out;
  };
  auto of = [&](const std::string& text) { return hex(blake2b(text.data(), text.size(), 16)); };
  EXPECT_EQ(of(""), "cae66941d9efbd404e4d88758ea67670");
  EXPECT_EQ(of("abc"), "cf4ab791c62b8d2b2109c90275287816");
  EXPECT_EQ(of(std::string(128, 'x')), "874acca82a22239ec64a3e70c3ae494e");
  EXPECT_EQ(of(std::string(129, 'y')), "1387a72eb29ba78bf6693c16ba54611b");
  EXPECT_THROW(blake2b("", 0, 65), std::invalid_argument);
}

TEST(OrderInverse, BlockShardOrderUndoesItsOrder) {
  for (uint64_t n : {1, 2, 7, 30, 101}) {
    for (uint64_t block : {1, 2, 3, 8, 200}) {
      for (uint64_t window : {1, 2, 5, 64}) {
        const BlockShardOrder order(n, block, window, Seed(n * 7 + block), 3);
        for (uint64_t p = 0; p < n; ++p) {
          ASSERT_EQ(order.inverse(order(p)), p) << n << " " << block << " " << window;
        }
      }
    }
  }
}

TEST(Where, IsTheBruteForceScanOnRandomConfigurations) {
  uint64_t passes = 0, sightings = 0, with_edits = 0;
  for (uint64_t key = 0; key < 40; ++key) {
    const Config c = random_config(key);
    const TokenPlan start(c.sources, c.options);
    with_edits += c.options.edits.empty() ? 0 : 1;
    TokenPlan end = start;
    for (uint64_t s = 0; s < c.steps; ++s) end.next_step_rows(0, 0);
    // The inverse of each source epoch's order.
    for (uint32_t s = 0; s < end.mixer().sources(); ++s) {
      const uint64_t last = end.mixer().cursors()[s].epoch;
      for (uint64_t e = 0; e <= last; ++e) {
        const uint64_t size = end.mixer().epoch_size(s, e);
        for (uint64_t p = 0; p < size; ++p) {
          const uint64_t d = end.mixer().document_at(s, e, p);
          ASSERT_EQ(end.mixer().position_of(s, e, d), std::optional<uint64_t>(p)) << c.name;
        }
      }
    }
    const uint64_t world = c.options.global_batch / 2;
    const std::vector<Sighting> all = brute(start, c.steps, world);
    const auto expected = by_document(all);
    const std::vector<DocumentId> documents = all_documents(end);
    for (const Sighting& s : all) passes = std::max(passes, s.epoch);
    sightings += all.size();
    for (uint64_t every : {uint64_t{1}, uint64_t{3}, uint64_t{7}, c.steps + 5}) {
      const PlanIndex index(start, c.steps, every);
      ASSERT_EQ(index.size(), c.steps / every + 1 + (c.steps % every != 0));
      // explain from the index's state and ledger is explain from step 0.
      for (uint64_t step : {uint64_t{0}, c.steps / 3, c.steps - 1, c.steps + 2}) {
        const uint64_t sources = end.mixer().sources();
        const StepExplanation a = explain_step(start, step, world, sources);
        const StepExplanation b = explain_indexed(start, index, step, world, sources);
        ASSERT_EQ(a.tokens_through, b.tokens_through) << c.name << ", step " << step;
        ASSERT_EQ(a.step_tokens, b.step_tokens) << c.name << ", step " << step;
        ASSERT_EQ(a.rows.size(), b.rows.size());
        for (size_t r = 0; r < a.rows.size(); ++r) {
          ASSERT_EQ(a.rows[r].spans, b.rows[r].spans) << c.name << ", step " << step;
          ASSERT_EQ(a.rows[r].rank_row, b.rows[r].rank_row);
        }
      }
      const uint64_t until = every == 3 ? c.steps / 2 + 1 : c.steps;
      for (const DocumentId& d : documents) {
        const auto it = expected.find(d);
        const std::vector<Sighting> want =
            it == expected.end() ? std::vector<Sighting>{} : before(it->second, until);
        ASSERT_EQ(where_document(start, &index, d.first, d.second, until, world), want)
            << c.name << ": source " << d.first << " document " << d.second << ", every "
            << every << ", until " << until;
      }
    }
    // Without an index: the scan.
    for (size_t i = 0; i < documents.size(); i += 7) {
      const DocumentId d = documents[i];
      const auto it = expected.find(d);
      ASSERT_EQ(where_document(start, nullptr, d.first, d.second, c.steps, world),
                it == expected.end() ? std::vector<Sighting>{} : it->second)
          << c.name;
    }
  }
  EXPECT_GE(passes, 3u) << "the configurations should read several source passes";
  EXPECT_GT(sightings, 10000u);
  EXPECT_GE(with_edits, 25u);
}

TEST(Where, RefusesWhatIsNotInTheRunAndAnIndexOfAnotherRun) {
  const Config c = random_config(6);
  const TokenPlan start(c.sources, c.options);
  const PlanIndex index(start, c.steps, 4);
  auto message = [&](auto call) {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { where_document(start, &index, 99, 0, c.steps); })
                .find("source = 99 is out of range"), std::string::npos);
  EXPECT_NE(message([&] { where_document(start, &index, 0, 1u << 30, c.steps); })
                .find("document = 1073741824 is out of range"), std::string::npos);
  EXPECT_NE(message([&] { where_document(start, &index, 0, 0, c.steps + 1); })
                .find("until = " + std::to_string(c.steps + 1) + " is past the index"),
            std::string::npos);
  EXPECT_NE(message([&] { where_document(start, &index, 0, 0, 2, 5); }).find("world_size"),
            std::string::npos);
  EXPECT_NE(message([&] { PlanIndex(start, c.steps, 0); }).find("every = 0"), std::string::npos);

  const std::string path = ::testing::TempDir() + "where_test_" + std::to_string(::getpid());
  index.save(path);
  const PlanIndex loaded = PlanIndex::load(path, start);
  for (size_t i = 0; i < index.size(); ++i) EXPECT_EQ(loaded.state(i), index.state(i));
  // Another seed, another source length: each named.
  TokenPlanOptions other = c.options;
  other.seed += 1;
  EXPECT_NE(message([&] { PlanIndex::load(path, TokenPlan(c.sources, other)); })
                .find("seed = "), std::string::npos);
  Sources changed = c.sources;
  std::vector<uint32_t> lengths;
  for (uint64_t d = 0; d < changed[0]->documents(); ++d) lengths.push_back(changed[0]->length(d));
  std::swap(lengths.front(), lengths.back());  // the same documents and tokens, moved
  if (lengths.front() != lengths.back()) {
    changed[0] = std::make_shared<LengthList>(lengths);
    EXPECT_NE(message([&] { PlanIndex::load(path, TokenPlan(changed, c.options)); })
                  .find("sampled_lengths"), std::string::npos);
  }
  {
    std::ofstream cut(path, std::ios::binary | std::ios::app);
    cut << "x";
  }
  EXPECT_NE(message([&] { PlanIndex::load(path, start); }).find("bytes after its last state"),
            std::string::npos);
  {
    std::ofstream junk(path, std::ios::binary | std::ios::trunc);
    junk << "not an index\n";
  }
  EXPECT_NE(message([&] { PlanIndex::load(path, start); }).find("is not a plan index"),
            std::string::npos);
  std::remove(path.c_str());
}

TEST(Takedown, ReportsTheScanAndTheEditedRunResumedOnAnotherWorldReadsNoneOfThem) {
  uint64_t seen_before = 0, checked = 0, under_way = 0;
  for (uint64_t key = 100; key < 124; ++key) {
    const Config c = random_config(key);
    const TokenPlan start(c.sources, c.options);
    TokenPlan end = start;
    for (uint64_t s = 0; s < c.steps; ++s) end.next_step_rows(0, 0);
    // Documents seen early and documents read later: the takedown's list.
    const std::vector<Sighting> all = brute(start, c.steps, 1);
    const uint64_t from = 1 + hash_at(key, 1) % (c.steps - 1);
    std::vector<DocumentId> listed;
    for (size_t i = 0; i < all.size(); i += 1 + all.size() / 6) {
      listed.push_back({all[i].source, all[i].document});
    }
    TokenPlanOptions o = c.options;
    std::vector<std::pair<uint32_t, uint64_t>> pairs(listed.begin(), listed.end());
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    o.edits.push_back(skip(from, pairs));
    const TokenPlan edited(c.sources, o);
    const PlanIndex index(start, c.steps, 3);
    const Takedown t = takedown(start, &index, edited, listed, from, c.steps);
    // before: the run's scan; after: the edited run's scan.
    std::set<DocumentId> set(pairs.begin(), pairs.end());
    std::vector<Sighting> want_before, want_after;
    for (const Sighting& s : all) {
      if (s.step < from && set.count({s.source, s.document})) want_before.push_back(s);
    }
    for (const Sighting& s : brute(edited, c.steps, 1)) {
      if (s.step >= from && set.count({s.source, s.document})) want_after.push_back(s);
    }
    const auto by_document = [](const Sighting& a, const Sighting& b) {
      return std::tie(a.source, a.document, a.sequence, a.offset) <
             std::tie(b.source, b.document, b.sequence, b.offset);
    };
    std::sort(want_before.begin(), want_before.end(), by_document);
    std::sort(want_after.begin(), want_after.end(), by_document);
    EXPECT_EQ(t.before, want_before) << c.name;
    EXPECT_EQ(t.after, want_after) << c.name;
    seen_before += t.before.size();
    under_way += t.after.size();
    // Resumed at `from` on another W from a checkpoint of the original run, with the edit: the
    // same sequences as the edited run; its listed documents only those the report names.
    const uint64_t w = c.options.global_batch, w2 = c.options.global_batch / 2;
    TokenPlan before_resume = start;
    for (uint64_t s = 0; s < from; ++s) before_resume.next_step(w, 0);
    TokenPlan resumed = edited;
    resumed.load_state_dict(before_resume.state_dict(w));
    TokenPlan reference = edited;
    for (uint64_t s = 0; s < from; ++s) reference.next_step_rows(0, 0);
    for (uint64_t s = from; s < c.steps; ++s) {
      const std::vector<PlannedSequence> want = reference.next_step(1, 0);
      for (uint64_t r = 0; r < w2; ++r) {
        TokenPlan mine = resumed;
        const std::vector<PlannedSequence> got = mine.next_step(w2, r);
        const RankSequences share = rank_sequences(c.options.global_batch, w2, r, s);
        for (uint64_t j = 0; j < share.count; ++j) {
          ASSERT_EQ(got[j].spans,
                    want[share.first - s * c.options.global_batch + j].spans)
              << c.name;
        }
      }
      resumed.next_step(1, 0);
      ++checked;
    }
    for (const Sighting& s : t.after) EXPECT_TRUE(set.count({s.source, s.document}));
  }
  EXPECT_GT(seen_before, 20u);
  EXPECT_GT(checked, 100u);
  EXPECT_GT(under_way, 0u) << "some listed document should be under way at the takedown's step";
}

TEST(Takedown, KeepsEachSourceWithinTheMixBound) {
  // Two sources by weight 3:1, one of them losing many documents to the takedown: the tokens of
  // each stay within the mixer's bound of its share after the edit (the backfill).
  std::vector<uint32_t> a(400), b(400);
  for (uint64_t d = 0; d < 400; ++d) {
    a[d] = static_cast<uint32_t>(20 + hash_at(1, d) % 60);
    b[d] = static_cast<uint32_t>(20 + hash_at(2, d) % 60);
  }
  const Sources sources = {std::make_shared<LengthList>(a), std::make_shared<LengthList>(b)};
  TokenPlanOptions o;
  o.weights = {3, 1};
  o.seq_len = 63;
  o.global_batch = 8;
  o.seed = 5;
  const TokenPlan start(sources, o);
  std::vector<DocumentId> listed;
  for (uint64_t d = 0; d < 400; d += 2) listed.push_back({0, d});  // half of source 0
  TokenPlanOptions edited_options = o;
  edited_options.edits.push_back(skip(10, {listed.begin(), listed.end()}));
  TokenPlan edited(sources, edited_options);
  const Takedown t = takedown(start, nullptr, edited, listed, 10, 60);
  EXPECT_FALSE(t.before.empty());
  std::set<DocumentId> set(listed.begin(), listed.end());
  uint64_t c0 = 0, total = 0, listed_after = 0, reported_after = 0;
  for (const Sighting& x : t.after) reported_after += x.tokens();
  for (uint64_t s = 0; s < 60; ++s) {
    for (const PlannedSequence& seq : edited.next_step(1, 0)) {
      for (const Span& x : seq.spans) {
        if (s >= 10 && set.count({x.source, x.document})) listed_after += x.end - x.begin;
        if (x.source == 0) c0 += x.end - x.begin;
        total += x.end - x.begin;
      }
      // Concat's sequences share a token (counted twice here): the bound of the mixer (L + 1)
      // plus one token per sequence.
      const double share = 0.75 * static_cast<double>(total);
      EXPECT_LE(std::abs(static_cast<double>(c0) - share),
                static_cast<double>(o.seq_len + 1 + seq.index + 1))
          << "step " << s;
    }
  }
  EXPECT_EQ(listed_after, reported_after);
  EXPECT_LT(listed_after, 200u);  // only documents under way at step 10
}

}  // namespace
}  // namespace distsampler
