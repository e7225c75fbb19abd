// mix.h's contract: the stated mix bound at every piece boundary (random weights, 2 to 1,000
// sources), every source's documents once per source epoch in full, a restore that continues the
// same stream, and bad options refused naming the parameter.
#include "distsampler/tokens/mix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "distsampler/hash.h"

namespace distsampler {
namespace {

using Sources = std::vector<std::shared_ptr<const DocumentLengths>>;

// Lengths with a long tail (most documents short, some far over a piece), some empty.
std::shared_ptr<const DocumentLengths> random_source(uint64_t key, uint64_t documents,
                                                     uint32_t longest) {
  std::vector<uint32_t> lengths(documents);
  for (uint64_t d = 0; d < documents; ++d) {
    const uint64_t h = hash_at(key, d);
    const uint32_t cap = (h & 7) == 0 ? longest : longest / 16 + 1;
    lengths[d] = static_cast<uint32_t>((h >> 8) % (cap + 1));
  }
  lengths[0] = 1 + static_cast<uint32_t>(key % longest);  // at least one token
  return std::make_shared<LengthList>(lengths);
}

std::vector<double> random_weights(uint64_t key, size_t count) {
  std::vector<double> w(count);
  for (size_t s = 0; s < count; ++s) {
    const double u = static_cast<double>(hash_at(key, s) >> 11) / 9007199254740992.0;
    w[s] = 1e-3 + u * u * u;  // skewed: a few large weights, many small
  }
  return w;
}

TEST(MixTest, EverySourceStaysWithinOnePieceOfItsShareAtEveryPiece) {
  struct Case {
    size_t sources;
    uint64_t piece;
    uint64_t pieces;
  };
  const Case cases[] = {{2, 64, 20000}, {3, 17, 20000}, {7, 256, 20000}, {50, 100, 20000},
                        {200, 33, 20000}, {1000, 129, 40000}};
  for (const Case& c : cases) {
    for (uint64_t trial = 0; trial < 3; ++trial) {
      const uint64_t key = hash_at(c.sources, trial);
      Sources sources;
      for (size_t s = 0; s < c.sources; ++s) {
        sources.push_back(random_source(hash_at(key, s), 1 + hash_at(key, s + 7) % 300,
                                        static_cast<uint32_t>(3 * c.piece)));
      }
      Mixer mixer(sources, random_weights(key, c.sources), trial, c.piece);
      const auto& q = mixer.quotas();
      const unsigned __int128 Q = uint64_t{1} << Mixer::kQuotaBits;
      unsigned __int128 sum = 0;
      for (uint64_t quota : q) sum += quota;
      ASSERT_EQ(sum, Q) << "the quotas sum to exactly 2^32";
      std::vector<uint64_t> consumed(c.sources, 0);
      uint64_t total = 0;
      __int128 worst = 0;  // the largest |q_s T - c_s Q| seen, in units of 1 / Q tokens
      for (uint64_t i = 0; i < c.pieces; ++i) {
        const Piece p = mixer.next();
        ASSERT_LE(p.tokens(), c.piece);
        ASSERT_GT(p.tokens(), 0u);
        consumed[p.source] += p.tokens();
        total += p.tokens();
        for (size_t s = 0; s < c.sources; ++s) {
          __int128 d = static_cast<__int128>(q[s]) * total - static_cast<__int128>(consumed[s]) * Q;
          if (d < 0) d = -d;
          if (d > worst) worst = d;
        }
      }
      EXPECT_LE(worst, static_cast<__int128>(c.piece) * Q)
          << c.sources << " sources, trial " << trial << ": a source strayed "
          << static_cast<double>(worst) / static_cast<double>(Q) << " tokens from its share";
      EXPECT_EQ(mixer.total(), total);
    }
  }
}

TEST(MixTest, EachSourceGivesEveryDocumentOncePerEpochInOrderWithoutGaps) {
  Sources sources = {random_source(1, 37, 50), random_source(2, 5, 20), random_source(3, 90, 9)};
  Mixer mixer(sources, {0.5, 0.2, 0.3}, 42, 8);
  // (source, epoch) -> document -> tokens given so far (pieces must continue where it stopped)
  std::map<std::tuple<uint32_t, uint64_t>, std::map<uint64_t, uint64_t>> given;
  std::map<std::tuple<uint32_t, uint64_t>, uint64_t> last_position;
  for (int i = 0; i < 20000; ++i) {
    const Piece p = mixer.next();
    EXPECT_EQ(mixer.document_at(p.source, p.epoch, p.position), p.document);
    auto& docs = given[{p.source, p.epoch}];
    ASSERT_EQ(docs[p.document], p.begin) << "a piece skipped or repeated tokens";
    docs[p.document] = p.end;
    auto key = std::make_tuple(p.source, p.epoch);
    if (last_position.count(key)) {
      ASSERT_GE(p.position, last_position[key]);
    }
    last_position[key] = p.position;
  }
  for (const auto& [key, docs] : given) {
    const auto& [source, epoch] = key;
    const DocumentLengths& lengths = *sources[source];
    if (given.count({source, epoch + 1}) == 0) continue;  // the live epoch is partial
    uint64_t nonempty = 0;
    for (uint64_t d = 0; d < lengths.documents(); ++d) {
      if (lengths.length(d) == 0) continue;
      ++nonempty;
      ASSERT_TRUE(docs.count(d)) << "source " << source << " epoch " << epoch << " lost " << d;
      EXPECT_EQ(docs.at(d), lengths.length(d)) << "document " << d << " given in part";
    }
    EXPECT_EQ(docs.size(), nonempty);
  }
  EXPECT_GT(given.size(), 6u) << "the test should cross source epochs";
}

// A source of one document with tokens among empty ones: crossing into a new source epoch may
// pass more empty documents in a row than the source has (the rest of one epoch, then the start
// of the next), which is no contradiction of its total_tokens() and must not be refused as one.
TEST(MixTest, EmptyDocumentsAcrossAnEpochBoundaryAreNoContradiction) {
  for (uint64_t seed = 0; seed < 64; ++seed) {
    const Sources sources = {std::make_shared<LengthList>(std::vector<uint32_t>{5, 0, 0, 0}),
                             std::make_shared<LengthList>(std::vector<uint32_t>{0, 0, 3})};
    Mixer mixer(sources, {0.5, 0.5}, seed, 4);
    uint64_t tokens = 0;
    for (int i = 0; i < 200; ++i) {
      Piece piece;
      ASSERT_NO_THROW(piece = mixer.next()) << "seed " << seed << ", piece " << i;
      tokens += piece.tokens();
    }
    EXPECT_EQ(tokens, mixer.total());
  }
}

TEST(MixTest, RestoringTheCursorsContinuesTheSameStream) {
  Sources sources = {random_source(4, 100, 40), random_source(5, 3, 400), random_source(6, 60, 7)};
  Mixer a(sources, {1, 2, 3}, 7, 32);
  std::vector<Piece> first;
  std::vector<MixState> saved;
  for (int i = 0; i < 3000; ++i) {
    saved.push_back(a.state());
    first.push_back(a.next());
  }
  for (int at : {0, 1, 17, 999, 2999}) {
    Mixer b(sources, {1, 2, 3}, 7, 32);
    b.restore(saved[at]);
    for (int i = at; i < 3000; ++i) {
      const Piece p = b.next();
      ASSERT_EQ(p.document, first[i].document) << "from " << at << " at " << i;
      ASSERT_EQ(p.begin, first[i].begin);
      ASSERT_EQ(p.source, first[i].source);
    }
  }
  // rewinding the piece just given gives the cursors before it
  MixState c = a.state();
  Mixer::rewind(c, first.back());
  EXPECT_EQ(c, saved.back());
}

TEST(MixTest, AFailedRestoreChangesNothing) {
  Sources sources = {random_source(7, 10, 40), random_source(8, 20, 40)};
  Mixer a(sources, {1, 1}, 0, 16);
  for (int i = 0; i < 50; ++i) a.next();
  const MixState before = a.state();
  MixState bad = before;
  bad.cursors[1].position = 20;
  EXPECT_THROW(a.restore(bad), std::invalid_argument);
  bad = before;
  bad.cursors[0].offset = 1000;
  EXPECT_THROW(a.restore(bad), std::invalid_argument);
  bad = before;
  bad.cursors.pop_back();
  EXPECT_THROW(a.restore(bad), std::invalid_argument);
  EXPECT_EQ(a.state(), before);
  Mixer b(sources, {1, 1}, 0, 16);
  b.restore(before);
  for (int i = 0; i < 100; ++i) {
    const Piece x = a.next(), y = b.next();
    ASSERT_EQ(x.document, y.document);
    ASSERT_EQ(x.begin, y.begin);
  }
}

void expect_invalid(const std::function<void()>& make, const std::string& needle) {
  try {
    make();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(MixTest, BadOptionsAreRefusedNamingTheParameter) {
  auto one = random_source(9, 4, 10);
  auto empty = std::make_shared<LengthList>(std::vector<uint32_t>{0, 0});
  expect_invalid([&] { Mixer({}, {}, 0, 4); }, "sources: none");
  expect_invalid([&] { Mixer({one, one}, {1}, 0, 4); }, "weights: 1 given for 2");
  expect_invalid([&] { Mixer({one}, {0}, 0, 4); }, "weights[0] = 0");
  expect_invalid([&] { Mixer({one}, {-1}, 0, 4); }, "weights[0] = -1");
  expect_invalid([&] { Mixer({one, one}, {1, 1e-12}, 0, 4); }, "weights[1] = 9.9999999999999998e-13 is below 2^-32");
  expect_invalid([&] { Mixer({one, one}, {1, std::nan("")}, 0, 4); }, "weights[1] = nan");
  expect_invalid([&] { Mixer({one, empty}, {1, 1}, 0, 4); }, "sources[1] has no tokens");
  expect_invalid([&] { Mixer({one}, {1}, 0, 0); }, "piece_tokens = 0");
}

}  // namespace
}  // namespace distsampler
