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
  if (!explicit_ && live_ && live_->epoch == epoch && !live_->finished()) return;
  if (epoch != epoch_) resume_at_ = 0;
  epoch_ = epoch;
  explicit_ = true;
  after_finished_.reset();
}

PassPlan PassCursor::plan(bool shuffled) const {
  if (explicit_) return PassPlan{epoch_, resume_at_, PassNotice::kNone};
  if (auto_epoch_) {
    if (epoch_ == std::numeric_limits<uint64_t>::max()) {
      throw std::invalid_argument("epoch = 2^64 - 1 cannot advance; call set_epoch");
    }
    return PassPlan{epoch_ + 1, 0, PassNotice::kAdvance};
  }
  // A replay reads the whole epoch again, also after a complete epoch loaded as finished.
  return PassPlan{epoch_, 0, shuffled ? PassNotice::kReplay : PassNotice::kNone};
}

PassNotice PassCursor::begin(const PassPlan& plan, uint64_t total, uint64_t world_size) {
  live_ = Pass{plan.epoch, plan.start, world_size, total, 0};
  epoch_ = plan.epoch, explicit_ = false, resume_at_ = 0;
  after_finished_.reset();
  if (plan.notice == PassNotice::kNone || noticed_) return PassNotice::kNone;
  noticed_ = true;
  return plan.notice;
}

void PassCursor::set_taken(uint64_t taken) {
  if (!live_) throw std::out_of_range("taken = " + std::to_string(taken) + ": no pass started");
  live_->consumed_after(taken);  // checks taken <= total
  live_->taken = taken;
}

Position PassCursor::position() const {
  if (live_ && (!explicit_ || (live_->epoch == epoch_ && !live_->finished()))) {
    return Position{live_->epoch, live_->consumed()};
  }
  return Position{epoch_, resume_at_};
}

void PassCursor::load(const Position& loaded, uint64_t left) {
  std::optional<uint64_t> later;
  if (epoch_ > loaded.epoch && left == 0) later = epoch_;
  epoch_ = loaded.epoch, resume_at_ = loaded.consumed, explicit_ = true;
  live_.reset();
  after_finished_ = later;
}

void PassCursor::load_finished(const Position& loaded, uint64_t world_size) {
  epoch_ = loaded.epoch, resume_at_ = loaded.consumed, explicit_ = false;
  live_ = Pass{loaded.epoch, loaded.consumed, world_size, 0, 0};
  after_finished_.reset();
}

bool PassCursor::skip_finished() {
  if (!after_finished_) return false;
  epoch_ = *after_finished_, resume_at_ = 0, explicit_ = true;
  after_finished_.reset();
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
