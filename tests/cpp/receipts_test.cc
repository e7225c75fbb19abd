#include "distsampler/receipts.h"

#include <gtest/gtest.h>

#include <optional>

namespace distsampler {
namespace {

TEST(Receipts, TheCheckpointIsTheSnapshotOfTheLastBatchReceived) {
  Receipts<int> r;
  EXPECT_TRUE(r.begin_pass());
  for (int snapshot = 1; snapshot <= 3; ++snapshot) r.dispatched(snapshot);  // prefetched
  EXPECT_EQ(r.receive(), std::optional<int>(1));
  EXPECT_EQ(r.receive(), std::optional<int>(2));
  EXPECT_EQ(r.batches(), 2u);
  EXPECT_EQ(r.last_received(), std::optional<int>(2));
  r.end_pass();
  EXPECT_EQ(r.batches(), 0u);
  EXPECT_FALSE(r.last_received());
  EXPECT_TRUE(r.begin_pass());
  EXPECT_EQ(r.receive(), std::nullopt);  // nothing dispatched: no snapshot, still counted
  EXPECT_EQ(r.received(), 1u);
}

TEST(Receipts, AnIteratorBeingMadeBeginsOnePass) {
  Receipts<int> r;
  r.set_opening(true);
  EXPECT_TRUE(r.begin_pass());
  r.dispatched(7);
  EXPECT_FALSE(r.begin_pass());  // the first reset's iter(): the same pass, snapshots kept
  r.set_opening(false);
  EXPECT_EQ(r.receive(), std::optional<int>(7));
  EXPECT_TRUE(r.begin_pass());  // a later iter(): a new pass
  EXPECT_EQ(r.batches(), 0u);
}

TEST(Receipts, AResumeCountsTheBatchesBeforeIt) {
  Receipts<int> r;
  r.load(5, /*restored=*/true, 42);
  EXPECT_EQ(r.batches(), 5u);
  EXPECT_EQ(r.last_received(), std::optional<int>(42));
  EXPECT_TRUE(r.begin_pass());
  EXPECT_FALSE(r.skip_draw());  // the source restored itself
  r.dispatched(1);
  r.receive();
  EXPECT_EQ(r.batches(), 6u);
  r.end_pass();
  EXPECT_TRUE(r.begin_pass());  // the pass after: from zero
  EXPECT_EQ(r.batches(), 0u);
}

TEST(Receipts, ASourceWithoutStateDropsTheBatchesReceived) {
  Receipts<int> at_dispatch;
  at_dispatch.load(2, /*restored=*/false);
  at_dispatch.begin_pass();
  EXPECT_FALSE(at_dispatch.skip_receipt());
  EXPECT_TRUE(at_dispatch.skip_draw());
  EXPECT_TRUE(at_dispatch.skip_draw());
  EXPECT_FALSE(at_dispatch.skip_draw());
  EXPECT_EQ(at_dispatch.batches(), 2u);

  Receipts<int> at_receipt(/*skips_received=*/true);
  at_receipt.load(1, /*restored=*/false);
  at_receipt.begin_pass();
  EXPECT_FALSE(at_receipt.skip_draw());
  at_receipt.dispatched(1);
  EXPECT_TRUE(at_receipt.skip_receipt());  // its snapshots go with it
  EXPECT_FALSE(at_receipt.skip_receipt());
  EXPECT_EQ(at_receipt.receive(), std::nullopt);
  EXPECT_EQ(at_receipt.batches(), 2u);
  // Only the pass right after the load drops them.
  at_receipt.end_pass();
  at_receipt.begin_pass();
  EXPECT_FALSE(at_receipt.skip_receipt());
}

}  // namespace
}  // namespace distsampler
