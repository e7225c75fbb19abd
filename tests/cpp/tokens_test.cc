// loader/tokens.h's contract: a plan's sequences read from indexed sources are the sources'
// tokens at the planned spans, with each token's offset in its document and its span, padding
// after the last span; a missing source is named.
#include "distsampler/loader/tokens.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distsampler/hash.h"
#include "distsampler/node/plan_feed.h"
#include "temp_dir.h"
#include "token_sources.h"

namespace distsampler {
namespace {

TEST(TokensTest, RowsAreTheSourcesTokensAtThePlannedSpans) {
  testing_util::TempDir dir;
  const std::vector<uint32_t> a = {5, 0, 40, 3, 1, 70, 9}, b = {12, 30, 2, 0, 8};
  const auto sources = open_token_sources(
      {{write_source(dir, "a", 0, a)}, {write_source(dir, "b", 1, b)}});
  for (Packing packing : {Packing::kConcat, Packing::kBestFit}) {
    TokenPlanOptions o;
    o.weights = {2, 1};
    o.seq_len = 16;
    o.global_batch = 4;
    o.packing = packing;
    o.window = 8;
    TokenPlan plan({sources.begin(), sources.end()}, o);
    for (int step = 0; step < 10; ++step) {
      const auto sequences = plan.next_step(1, 0);
      const TokenRows rows = read_token_rows(sources, sequences, 17, -7);
      const TokenRows by_document =
          read_token_rows(sources, sequences, 17, -7, TokenPositions::kDocument);
      ASSERT_EQ(rows.rows, 4u);
      for (size_t r = 0; r < sequences.size(); ++r) {
        uint64_t at = r * 17;
        int32_t segment = -1;
        int64_t position = 0;
        const Span* before = nullptr;
        for (size_t i = 0; i < sequences[r].spans.size(); ++i) {
          const Span& x = sequences[r].spans[i];
          // A new segment unless x continues the span before it in the same document.
          if (!before || !(before->source == x.source && before->document == x.document &&
                           before->epoch == x.epoch && before->end == x.begin)) {
            ++segment;
            position = 0;
          }
          before = &x;
          for (uint64_t t = x.begin; t < x.end; ++t, ++at, ++position) {
            ASSERT_EQ(rows.tokens[at], token(x.source, x.document, t));
            ASSERT_EQ(rows.positions[at], position);
            ASSERT_LT(rows.positions[at], 17);
            ASSERT_EQ(by_document.positions[at], static_cast<int64_t>(t));
            ASSERT_EQ(rows.segments[at], segment);
            ASSERT_EQ(by_document.segments[at], segment);
          }
        }
        if (packing == Packing::kConcat) {
          ASSERT_EQ(at, r * 17 + 17);
        }
        for (; at < (r + 1) * 17; ++at) {
          ASSERT_EQ(rows.tokens[at], -7);
          ASSERT_EQ(rows.segments[at], -1);
        }
      }
    }
  }
}

TEST(TokensTest, SegmentsJoinSpansThatContinueEachOther) {
  testing_util::TempDir dir;
  const auto sources = open_token_sources(
      {{write_source(dir, "a", 0, {12, 4})}, {write_source(dir, "b", 1, {6})}});
  PlannedSequence s;
  // Document 0 of source 0 in two pieces drawn back to back, then source 1's, then document 0's
  // piece after a gap, then document 1: four segments.
  s.spans = {{0, 0, 0, 3, 0}, {0, 0, 3, 5, 0}, {1, 0, 0, 2, 0}, {0, 0, 7, 9, 0}, {0, 1, 0, 2, 0}};
  const TokenRows rows = read_token_rows(sources, {s}, 12, -1);
  EXPECT_EQ(rows.segments, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, -1}));
  EXPECT_EQ(rows.positions, (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 0, 1, 0, 1, 0}));
  const TokenRows by_document = read_token_rows(sources, {s}, 12, -1, TokenPositions::kDocument);
  EXPECT_EQ(by_document.positions, (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 7, 8, 0, 1, 0}));
  // The same document in another source epoch is another segment.
  s.spans = {{0, 0, 0, 3, 0}, {0, 0, 3, 5, 1}};
  EXPECT_EQ(read_token_rows(sources, {s}, 6, -1).segments,
            (std::vector<int32_t>{0, 0, 0, 1, 1, -1}));
  EXPECT_EQ(parse_positions("document"), TokenPositions::kDocument);
  EXPECT_THROW(
      {
        try {
          parse_positions("token");
        } catch (const std::invalid_argument& e) {
          EXPECT_STREQ(e.what(), "positions = 'token'; allowed: segment, document");
          throw;
        }
      },
      std::invalid_argument);
}

// The EOD id's one check (TokenStream's eod_token and the CLI's --append-eod both call it): an
// integer in [0, 2^63 - 1], then within every source's dtype, appended sources included.
TEST(TokensTest, AnEodTokenIsAnIdEverySourceCanHold) {
  EXPECT_EQ(parse_eod_token("0", true, "eod_token").id, 0);
  EXPECT_EQ(parse_eod_token("9223372036854775807", false, "x").id, INT64_MAX);
  for (const char* bad : {"-1", "9223372036854775808", "18446744073709551616", "", "1.5", " 1",
                          "0x10", "True"}) {
    try {
      parse_eod_token(bad, true, "--append-eod");
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("--append-eod = ") + bad +
                                           ": a token id, an integer in [0, 9223372036854775807]");
    }
  }
  testing_util::TempDir dir;
  const std::string a = write_source(dir, "a", 0, {3, 0, 2});
  const std::string b = write_source(dir, "b", 1, {4});
  for (const bool appended : {true, false}) {
    EXPECT_NO_THROW(open_token_run({{a}}, {}, parse_eod_token("65535", appended, "eod_token")));
    try {  // the second source is appended by an edit: its dtype is checked too
      TokenEdit add;
      add.edit.kind = MixEdit::Kind::kAppend;
      add.edit.label = "appends[0]";
      add.edit.step = 2;
      add.edit.source = 1;
      add.append = {b};
      open_token_run({{a}}, {add}, parse_eod_token("65536", appended, "eod_token"));
      ADD_FAILURE() << "65536 in uint16 sources";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "eod_token = 65536: sources[0] holds uint16 tokens; allowed: 0 to 65535");
    }
  }
}

TEST(TokensTest, ASequenceTooLongOrOfAMissingSourceIsRefused) {
  testing_util::TempDir dir;
  const auto sources = open_token_sources({{write_source(dir, "a", 0, {50})}});
  PlannedSequence s;
  s.spans = {Span{0, 0, 0, 20, 0}};
  EXPECT_THROW(read_token_rows(sources, {s}, 17, 0), std::invalid_argument);
  s.spans = {Span{1, 0, 0, 2, 0}};
  EXPECT_THROW(read_token_rows(sources, {s}, 17, 0), std::invalid_argument);
  try {
    open_token_sources({{write_source(dir, "b", 0, {4})}, {dir.file("missing")}});
    ADD_FAILURE() << "a missing source opened";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("sources[1]: "), std::string::npos) << e.what();
  }
}

// A plan feed's thread plans over indexed sources (reading their lengths) while two readers of
// it read rows from the same sources on two threads: each gets its own plan's rows. Under
// ThreadSanitizer (scripts/sanitize.sh), the sources' concurrent reads.
TEST(TokensTest, AFeedPlansOverIndexedSourcesWhileReadersReadTheirRows) {
  testing_util::TempDir dir;
  std::vector<std::vector<std::string>> prefixes;
  for (uint64_t s = 0; s < 3; ++s) {
    std::vector<uint32_t> lengths(2000 + 300 * s);
    for (uint64_t d = 0; d < lengths.size(); ++d) {
      lengths[d] = static_cast<uint32_t>(hash_at(s, d) % 90);
    }
    prefixes.push_back({write_source(dir, "s" + std::to_string(s), s, lengths)});
  }
  const auto sources = open_token_sources(prefixes);
  TokenPlanOptions o;
  o.weights = {3, 2, 1};
  o.seq_len = 31;
  o.global_batch = 8;
  const std::vector<std::shared_ptr<const DocumentLengths>> lengths(sources.begin(),
                                                                    sources.end());
  PlanFeedOptions fo;
  fo.ahead = 3;
  std::shared_ptr<PlanFeed> feed = PlanFeed::start(TokenPlan(lengths, o), fo);
  auto reader = [&](uint64_t rank, bool* same) {
    TokenPlan own(lengths, o);
    FedTokenPlan fed(std::make_shared<TokenPlan>(lengths, o), feed);
    *same = true;
    for (int step = 0; step < 60; ++step) {
      const TokenRows a = read_token_rows(sources, fed.next_step(2, rank), 32, -1);
      const TokenRows b = read_token_rows(sources, own.next_step(2, rank), 32, -1);
      *same = *same && a.tokens == b.tokens && a.segments == b.segments;
    }
  };
  bool same0 = false, same1 = false;
  std::thread other(reader, 1, &same1);
  reader(0, &same0);
  other.join();
  EXPECT_TRUE(same0);
  EXPECT_TRUE(same1);
}

}  // namespace
}  // namespace distsampler
