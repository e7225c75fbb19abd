// pass.h: the passes of a stateful sampler, as one value type every adapter shares (the Python
// samplers and loaders through the bindings, the libtorch adapter directly).
//
// A *pass* is one iteration over a rank's share of an epoch. Which epoch and start it reads is
// decided when it starts: the epoch set_epoch() named, or a loaded checkpoint's position, or,
// when neither came since the previous pass, that pass's epoch again (PyTorch's replay) or the
// next one (auto_epoch). A checkpoint is (epoch, consumed): the job read global positions
// [0, consumed) of the epoch's stream, all ranks together (partition.h's elastic rule), so it
// resumes on any number of ranks.
//
//   PassCursor cursor(/*auto_epoch=*/false);
//   cursor.set_epoch(e);
//   PassPlan plan = cursor.plan(shuffled);          // throws when auto_epoch cannot advance
//   RankView view = sampler.epoch(plan.epoch, plan.start);  // may throw: nothing changed yet
//   cursor.begin(plan, view.size(), world_size);    // the live pass
//   cursor.set_taken(k);                            // as the adapter hands items out
//   Position p = cursor.position();                 // {e, start + k * world_size}
//
// Not thread-safe: an adapter shared between threads holds it under its lock.
#ifndef DISTSAMPLER_PASS_H_
#define DISTSAMPLER_PASS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace distsampler {

// One started pass: its epoch, the global position it started at (a loaded consumed count, kept
// as loaded even when at or past the epoch's end), the global positions one item advances (the
// world size), the items this rank reads in it and the items handed out (or received) so far.
struct Pass {
  uint64_t epoch = 0;
  uint64_t start = 0;
  uint64_t world_size = 1;
  uint64_t total = 0;
  uint64_t taken = 0;

  bool finished() const { return taken >= total; }
  // The consumed rule: after every rank took `taken` items of a pass started at `start`, the job
  // has read global positions [0, start + taken * world_size). Throws std::out_of_range when
  // taken > total.
  uint64_t consumed_after(uint64_t taken) const;
  uint64_t consumed() const { return consumed_after(taken); }
};

// A checkpoint's position: the job read global positions [0, consumed) of `epoch`.
struct Position {
  uint64_t epoch = 0;
  uint64_t consumed = 0;
  friend bool operator==(const Position& a, const Position& b) {
    return a.epoch == b.epoch && a.consumed == b.consumed;
  }
};

// Why a pass reads what it reads, when the caller should say so (once per sampler).
enum class PassNotice {
  kNone,
  kReplay,   // no set_epoch since the previous shuffled pass: it replays that epoch's order
  kAdvance,  // no set_epoch since the previous pass, auto_epoch: it reads the next epoch
};

// The pass the next begin() starts: epoch, start position, and the notice to give.
struct PassPlan {
  uint64_t epoch = 0;
  uint64_t start = 0;
  PassNotice notice = PassNotice::kNone;
};

class PassCursor {
 public:
  // Everything a cursor holds, for copies across languages (the Python bindings pickle it).
  struct State {
    bool auto_epoch = false;
    uint64_t epoch = 0;           // of the latest pass, or of the next one before any
    bool explicit_epoch = true;   // set_epoch or a load came since the latest pass started
    uint64_t resume_at = 0;       // where the next pass starts when explicit_epoch
    std::optional<Pass> live;     // the latest pass that started (none after a load)
    std::optional<uint64_t> after_finished;  // see load()
    bool noticed = false;         // a notice was given (once per sampler)
  };

  explicit PassCursor(bool auto_epoch = false) { s_.auto_epoch = auto_epoch; }
  explicit PassCursor(const State& state) : s_(state) {}
  const State& state() const { return s_; }

  bool auto_epoch() const { return s_.auto_epoch; }
  // The epoch of the latest pass, or of the next one before any.
  uint64_t epoch() const { return s_.epoch; }
  // Whether set_epoch or a load came since the latest pass started: the next pass reads
  // (epoch(), resume_at()) as they are.
  bool explicit_epoch() const { return s_.explicit_epoch; }
  // Where the next pass starts when explicit_epoch() (a loaded consumed count, or 0).
  uint64_t resume_at() const { return s_.resume_at; }
  // The latest pass that started, if any since construction or the latest load.
  const std::optional<Pass>& live() const { return s_.live; }

  // Makes the next pass read `epoch`. Setting the epoch a loaded position is in keeps that
  // position; setting the epoch of the pass in progress (started without set_epoch, not
  // finished) changes nothing: a loader may start the pass before the loop's set_epoch call.
  void set_epoch(uint64_t epoch);

  // The pass the next begin() would start. `shuffled`: whether a replay repeats a shuffled order
  // (the replay notice's condition). A replay reads the whole epoch again. Throws
  // std::invalid_argument when auto_epoch would advance past 2^64 - 1. Changes nothing.
  PassPlan plan(bool shuffled) const;
  // Makes `plan` (from plan(), after the caller built the pass, which may throw) the live pass,
  // with `total` items on this rank. Returns the notice to give now: plan.notice the first time
  // any notice is due, kNone after (once per sampler).
  PassNotice begin(const PassPlan& plan, uint64_t total, uint64_t world_size);
  // The live pass handed out (or, for a loader reporting receipts, its loop received) `taken`
  // items. Throws std::out_of_range when there is no live pass or taken > its total.
  void set_taken(uint64_t taken);

  // (epoch, consumed) a checkpoint taken now records. set_epoch(e) while a pass of e is in
  // progress (frameworks call it more than once) keeps that pass's position; after a finished
  // pass it means a new pass of e.
  Position position() const;

  // Makes the next pass resume `loaded`, as set_epoch does: a complete epoch's next pass is the
  // rest of it (empty), and the pass after that replays or advances. `left`: the items this rank
  // reads from loaded.consumed (0 when the epoch is complete).
  //
  // A complete epoch loaded into a cursor already set to a later epoch (torchdata loads the state
  // at the next iter(), after the loop's set_epoch(e + 1)): the next skip_finished() is true and
  // makes the pass after it read that later epoch from its start, as without the load.
  void load(const Position& loaded, uint64_t left);
  // For adapters that start passes eagerly (libtorch: the DataLoader starts the next pass right
  // after a load): a complete epoch loads as a finished pass, so the next pass replays or
  // advances at once; set_epoch of its epoch still keeps the loaded (complete) position.
  void load_finished(const Position& loaded, uint64_t world_size);
  // True once after load() of a complete epoch into a cursor set to a later epoch: the caller's
  // next iterator is empty, and the next pass reads that later epoch from its start.
  bool skip_finished();

 private:
  State s_;
};

// The notice's text for a sampler named `who` (its class): `peers` names whose behaviour the
// replay matches ("PyTorch's DistributedSampler does"), `option` how auto_epoch is spelled in the
// caller's language ("auto_epoch=True").
std::string pass_notice_text(PassNotice notice, uint64_t epoch, std::string_view who,
                             std::string_view peers, std::string_view option);

}  // namespace distsampler

#endif  // DISTSAMPLER_PASS_H_
