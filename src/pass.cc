#include "distsampler/pass.h"

#include <limits>
#include <stdexcept>

namespace distsampler {

uint64_t Pass::consumed_after(uint64_t count) const {
  if (count > total) {
    throw std::out_of_range("taken = " + std::to_string(count) +
                            " is out of range; allowed: taken <= " + std::to_string(total) +
                            ", the items of the pass");
  }
  return start + count * world_size;
}

void PassCursor::set_epoch(uint64_t epoch) {
  if (!s_.explicit_epoch && s_.live && s_.live->epoch == epoch && !s_.live->finished()) return;
  if (epoch != s_.epoch) s_.resume_at = 0;
  s_.epoch = epoch;
  s_.explicit_epoch = true;
  s_.after_finished.reset();
}

PassPlan PassCursor::plan(bool shuffled) const {
  if (s_.explicit_epoch) return PassPlan{s_.epoch, s_.resume_at, PassNotice::kNone};
  if (s_.auto_epoch) {
    if (s_.epoch == std::numeric_limits<uint64_t>::max()) {
      throw std::invalid_argument("epoch = 2^64 - 1 cannot advance; call set_epoch");
    }
    return PassPlan{s_.epoch + 1, 0, PassNotice::kAdvance};
  }
  return PassPlan{s_.epoch, 0, shuffled ? PassNotice::kReplay : PassNotice::kNone};
}

PassNotice PassCursor::begin(const PassPlan& plan, uint64_t total, uint64_t world_size) {
  s_.live = Pass{plan.epoch, plan.start, world_size, total, 0};
  s_.epoch = plan.epoch, s_.explicit_epoch = false, s_.resume_at = 0;
  s_.after_finished.reset();
  if (plan.notice == PassNotice::kNone || s_.noticed) return PassNotice::kNone;
  s_.noticed = true;
  return plan.notice;
}

void PassCursor::set_taken(uint64_t taken) {
  if (!s_.live) throw std::out_of_range("taken = " + std::to_string(taken) + ": no pass started");
  s_.live->consumed_after(taken);  // checks taken <= total
  s_.live->taken = taken;
}

Position PassCursor::position() const {
  const std::optional<Pass>& live = s_.live;
  if (live && (!s_.explicit_epoch || (live->epoch == s_.epoch && !live->finished()))) {
    return Position{live->epoch, live->consumed()};
  }
  return Position{s_.epoch, s_.resume_at};
}

void PassCursor::load(const Position& loaded, uint64_t left) {
  std::optional<uint64_t> later;
  if (s_.epoch > loaded.epoch && left == 0) later = s_.epoch;
  s_.epoch = loaded.epoch, s_.resume_at = loaded.consumed, s_.explicit_epoch = true;
  s_.live.reset();
  s_.after_finished = later;
}

void PassCursor::load_finished(const Position& loaded, uint64_t world_size) {
  s_.epoch = loaded.epoch, s_.resume_at = loaded.consumed, s_.explicit_epoch = false;
  s_.live = Pass{loaded.epoch, loaded.consumed, world_size, 0, 0};
  s_.after_finished.reset();
}

bool PassCursor::skip_finished() {
  if (!s_.after_finished) return false;
  s_.epoch = *s_.after_finished, s_.resume_at = 0, s_.explicit_epoch = true;
  s_.after_finished.reset();
  return true;
}

std::string pass_notice_text(PassNotice notice, uint64_t epoch, std::string_view who,
                             std::string_view peers, std::string_view option) {
  const std::string opening =
      std::string(who) + " started a pass without a set_epoch() call since the previous one: ";
  switch (notice) {
    case PassNotice::kNone:
      return "";
    case PassNotice::kReplay:
      return opening + "this pass replays epoch " + std::to_string(epoch) + "'s order, as " +
             std::string(peers) +
             ". Call sampler.set_epoch(epoch) before each epoch to get a new order (or pass " +
             std::string(option) + " to advance automatically). Shown once per sampler.";
    case PassNotice::kAdvance:
      return opening + std::string(option) + " advances to epoch " + std::to_string(epoch) +
             " so this pass gets a new order. Every rank must start the same number of passes, "
             "or the ranks read different epochs and their shares overlap; calling "
             "sampler.set_epoch(epoch) before each epoch avoids that. Shown once per sampler.";
  }
  return "";
}

}  // namespace distsampler
