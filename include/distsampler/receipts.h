// receipts.h: a loader's checkpoint that counts what the training loop received, not what was
// fetched ahead (distsampler.data.DataLoader's bookkeeping; torchdata's protocol).
//
// Each batch's indices are *dispatched* (drawn from the sampler, for the fetcher or a worker) with
// a snapshot of the sampler's progress. Batches reach the loop in dispatch order, so when the loop
// receives batch k the checkpoint is the snapshot taken when batch k was dispatched, whatever
// was prefetched. A source without state is resumed by drawing and dropping the batches received
// before the checkpoint (exact for deterministic sources only).
//
//   Receipts<Mark> receipts;
//   receipts.begin_pass();                   // a loader iterator started drawing indices
//   while (receipts.skip_draw()) draw();     // a resumed source without state
//   receipts.dispatched(mark_of(sampler));   // a batch's indices were drawn
//   std::optional<Mark> m = receipts.receive();  // the loop received the oldest one dispatched
//   receipts.end_pass();                     // ... and the pass's last batch
//
// Not thread-safe (one loader's main process).
#ifndef DISTSAMPLER_RECEIPTS_H_
#define DISTSAMPLER_RECEIPTS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

namespace distsampler {

template <class Snapshot>
class Receipts {
 public:
  // `skips_received`: a resumed source without state drops the batches received before at
  // receipt rather than at dispatch (an IterableDataset of its own: its data come from its
  // iterators, not from the indices drawn).
  explicit Receipts(bool skips_received = false) : skips_received_(skips_received) {}

  // Batches of the current pass the loop received, counting those before a resume.
  uint64_t batches() const { return base_ + received_; }
  // Batches the loop received since the pass began (or resumed).
  uint64_t received() const { return received_; }
  // The snapshot of the last batch received in this pass (or the one a load restored).
  const std::optional<Snapshot>& last_received() const { return last_; }

  // A loader iterator is being made (`true`) or made: torch's multi-process iterator calls
  // iter() on its index sampler in its constructor and again in its first reset, one pass.
  void set_opening(bool opening) {
    opening_ = opening;
    opened_ = false;
  }
  // An iterator (re)started drawing indices. Returns whether that begins a pass (false for the
  // second iter() of an iterator being made).
  bool begin_pass() {
    if (opening_) {
      if (opened_) return false;
      opened_ = true;
    }
    snapshots_.clear();
    base_ = std::exchange(resumed_, 0);
    received_ = 0;
    skipping_ = std::exchange(skip_, 0);
    return true;
  }
  // Whether the next batch is to be drawn and dropped (true) or drawn and dispatched, and whether
  // the next batch the loop would receive is to be read and dropped: a resumed source without
  // state re-reads the batches received before the checkpoint. Each true counts one batch.
  bool skip_draw() { return !skips_received_ && take_skip(); }
  bool skip_receipt() {
    if (!skips_received_ || !take_skip()) return false;
    snapshots_.clear();
    return true;
  }
  // A batch's indices were drawn; `snapshot` is its source's progress now.
  void dispatched(Snapshot snapshot) { snapshots_.push_back(std::move(snapshot)); }
  // The loop received the oldest batch dispatched and not yet received: its snapshot, none when
  // no snapshot is waiting.
  std::optional<Snapshot> receive() {
    ++received_;
    if (snapshots_.empty()) return std::nullopt;
    last_ = std::move(snapshots_.front());
    snapshots_.pop_front();
    return last_;
  }
  // The loop received the pass's last batch: the pass is complete.
  void end_pass() {
    snapshots_.clear();
    base_ = received_ = 0;
    last_.reset();
  }
  // Resumes at `batches` received in the checkpoint's pass. `restored`: the source restored its
  // own state (else the next pass drops that many batches); `last`: its state as of the last
  // batch received, when the checkpoint holds one.
  void load(uint64_t batches, bool restored, std::optional<Snapshot> last = std::nullopt) {
    snapshots_.clear();
    received_ = skipping_ = 0;
    base_ = resumed_ = batches;
    skip_ = restored ? 0 : batches;
    last_ = std::move(last);
  }

 private:
  bool take_skip() {
    if (skipping_ == 0) return false;
    --skipping_;
    return true;
  }

  bool skips_received_;
  std::deque<Snapshot> snapshots_;  // dispatched, not yet received, oldest first
  std::optional<Snapshot> last_;
  uint64_t received_ = 0;  // batches received in this pass, after base_
  uint64_t base_ = 0;      // batches of this pass received before a resume
  uint64_t resumed_ = 0;   // the loaded checkpoint's batches, the next pass's base_
  uint64_t skip_ = 0;      // batches the next pass drops (a source without state)
  uint64_t skipping_ = 0;  // ... of which this pass has yet to drop
  bool opening_ = false;
  bool opened_ = false;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_RECEIPTS_H_
