// wf2q.cc: the mixer's draw (mix.h): WF2Q's choice of the next source (two heaps of sources,
// or one linear scan when sources drop out), the next piece, a source's cursor moved to its next
// document (settle, look: per piece, so in the same file as next()), and the state that rewinds
// and restores it. Exact integer arithmetic: quotas summing to 2^32 and token counts below 2^64
// multiply into 128-bit products.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/tokens/mix.h"
#include "mix_internal.h"

namespace distsampler {

using mix_detail::invalid;
using mix_detail::SignedWide;
using mix_detail::Wide;

namespace {

// a / b < c / d for b, d > 0, exactly (floor quotients, then remainders below 2^33 crossed).
bool less_ratio(SignedWide a, uint64_t b, SignedWide c, uint64_t d) {
  auto floor_div = [](SignedWide n, uint64_t q, SignedWide& rem) {
    SignedWide f = n / static_cast<SignedWide>(q);
    rem = n - f * static_cast<SignedWide>(q);
    if (rem < 0) --f, rem += q;
    return f;
  };
  SignedWide ra = 0, rc = 0;
  const SignedWide fa = floor_div(a, b, ra), fc = floor_div(c, d, rc);
  if (fa != fc) return fa < fc;
  return ra * static_cast<SignedWide>(d) < rc * static_cast<SignedWide>(b);
}

}  // namespace

bool Mixer::skipped(uint32_t source, uint64_t document) const {
  for (size_t i = 0; i < applied_; ++i) {
    const MixEdit& e = edits_[i];
    if (e.kind == MixEdit::Kind::kSkip &&
        std::binary_search(e.skip.begin(), e.skip.end(), std::make_pair(source, document))) {
      return true;
    }
  }
  return false;
}

void Mixer::look(uint32_t source, uint64_t position) {
  Live& live = live_[source];
  uint64_t i = position - live.ahead_from;
  if (position < live.ahead_from || i >= live.ahead.size()) {
    const uint64_t limit = std::clamp<uint64_t>(kReadAheadEntries / live_.size(), kFirstReadAhead,
                                                kMaxReadAhead);
    live.window = live.window == 0 ? kFirstReadAhead : std::min(2 * live.window, limit);
    const uint64_t count = std::min(live.window, live.order.size() - position);
    live.ahead_documents.resize(count);
    live.order.gather(position, count, live.ahead_documents.data());
    live.ahead.resize(count);
    sources_[source]->lengths(live.ahead_documents.data(), count, live.ahead.data());
    live.ahead_from = position;
    i = 0;
    // The next read's documents, to be read in the background meanwhile.
    const uint64_t after =
        std::min(std::min(2 * live.window, limit), live.order.size() - (position + count));
    if (after > 0 && sources_[source]->wants_prefetch()) {
      thread_local std::vector<uint64_t> next;
      next.resize(after);
      live.order.gather(position + count, after, next.data());
      sources_[source]->prefetch(next.data(), after);
    }
  }
  live.document = live.ahead_documents[i];
  const uint32_t length = live.ahead[i];
  live.length = length != DocumentLengths::kAskAlone ? length
                                                     : sources_[source]->length(live.document);
}

void Mixer::settle(uint32_t source) {
  SourceCursor& c = mix_.cursors[source];
  Live& live = live_[source];
  for (uint64_t visited = 0;; ++visited) {
    // A whole epoch of empty (or skipped) documents visited, the rest of this one and all of the
    // next: the lengths contradict total_tokens().
    if (visited > live.order.size() && visited > 2 * sources_[source]->documents() + 1) {
      throw std::runtime_error("sources[" + std::to_string(source) + "]: every document is " +
                               "empty or skipped, but its total_tokens() = " +
                               std::to_string(sources_[source]->total_tokens()));
    }
    if (c.position == live.order.size()) {
      if (holdout_.single_pass) {  // done: epoch 1 marks it
        c.epoch = 1;
        c.position = 0;
        c.offset = 0;
        live.document = 0;
        live.length = 0;
        return;
      }
      ++c.epoch;
      c.position = 0;
      c.offset = 0;
      live.set_order(order_of(source, c.epoch, mix_.landings, *sources_[source]));
    }
    look(source, c.position);
    if (c.offset < live.length && holdout_.reads(source, live.document) &&
        !(c.offset == 0 && skipped(source, live.document))) {
      return;
    }
    ++c.position;  // the document is done (or empty, or skipped)
    c.offset = 0;
  }
}

uint64_t Mixer::piece_length(uint32_t source) const {
  const uint64_t left = live_[source].length - mix_.cursors[source].offset;
  return left < piece_tokens_ ? left : piece_tokens_;
}

size_t Mixer::choose_linear() const {
  const Wide since = total_ - mix_.base;
  size_t best = sources_.size();
  SignedWide best_finish = 0;
  uint64_t best_quota = 1;
  constexpr SignedWide kSmall = SignedWide{1} << 90;  // |finish| below: cross products fit
  // A single pass: the sources not yet done; when none of them is eligible (the done ones' shares
  // can no longer be met), every one of them is.
  bool any_eligible = !holdout_.single_pass;
  for (size_t s = 0; s < sources_.size() && !any_eligible; ++s) {
    const Wide target = mix_.targets[s] + Wide{quotas_[s]} * since;
    any_eligible = !exhausted(static_cast<uint32_t>(s)) &&
                   (Wide{mix_.cursors[s].consumed} << kQuotaBits) <= target;
  }
  for (size_t s = 0; s < sources_.size(); ++s) {
    const SourceCursor& c = mix_.cursors[s];
    const Wide served = Wide{c.consumed} << kQuotaBits;
    const Wide target = mix_.targets[s] + Wide{quotas_[s]} * since;
    if (exhausted(static_cast<uint32_t>(s)) || (served > target && any_eligible)) continue;
    const SignedWide finish =
        static_cast<SignedWide>(served + (Wide{piece_length(static_cast<uint32_t>(s))} << kQuotaBits)) -
        static_cast<SignedWide>(target);
    bool earlier = best == sources_.size();
    if (!earlier) {
      const bool small = finish < kSmall && finish > -kSmall && best_finish < kSmall &&
                         best_finish > -kSmall;
      earlier = small ? finish * static_cast<SignedWide>(best_quota) <
                            best_finish * static_cast<SignedWide>(quotas_[s])
                      : less_ratio(finish, quotas_[s], best_finish, best_quota);
    }
    if (earlier) best = s, best_finish = finish, best_quota = quotas_[s];
  }
  return best;
}

namespace {

// Heap orders (std::push_heap keeps the greatest on top: these say which comes later). Types, not
// functions, so that the heaps' code inlines them.
struct LaterEligible {
  bool operator()(const detail::QueuedSource& a, const detail::QueuedSource& b) const {
    return a.time != b.time ? a.time > b.time : a.source > b.source;
  }
};

struct LaterFinish {
  const uint64_t* quotas;
  bool operator()(const detail::QueuedSource& a, const detail::QueuedSource& b) const {
    if (a.finish != b.finish) return a.finish > b.finish;
    // Equal quotients: the remainders' fractions, r_a / q_a against r_b / q_b, crossed exactly.
    const Wide left = Wide{a.remainder} * quotas[b.source];
    const Wide right = Wide{b.remainder} * quotas[a.source];
    return left != right ? left > right : a.source > b.source;
  }
};

// A binary heap's two moves (the least by `later` on top, as std::push_heap with that order),
// written out so that the choice between two children is a conditional move, not a branch: the
// heaps' keys are random, and mispredicted branches were most of a pick's time.
template <typename Later>
void heap_push(std::vector<detail::QueuedSource>& heap, detail::QueuedSource item, Later later) {
  size_t hole = heap.size();
  heap.push_back(item);
  while (hole > 0) {
    const size_t parent = (hole - 1) / 2;
    if (!later(heap[parent], item)) break;
    heap[hole] = heap[parent];
    hole = parent;
  }
  heap[hole] = item;
}

template <typename Later>
detail::QueuedSource heap_pop(std::vector<detail::QueuedSource>& heap, Later later) {
  const detail::QueuedSource top = heap.front();
  const detail::QueuedSource item = heap.back();
  heap.pop_back();
  const size_t n = heap.size();
  if (n == 0) return top;
  size_t hole = 0;
  for (;;) {
    size_t child = 2 * hole + 1;
    if (child >= n) break;
    if (child + 1 < n) child += static_cast<size_t>(later(heap[child], heap[child + 1]));
    if (!later(item, heap[child])) break;
    heap[hole] = heap[child];
    hole = child;
  }
  heap[hole] = item;
  return top;
}

}  // namespace

bool Mixer::wait(uint32_t source) {
  // With T' the tokens since the weights in force took effect, source s is eligible when
  // 2^32 c_s <= A_s + q_s T', that is when T' >= ceil((2^32 c_s - A_s) / q_s), and its finish
  // relative to now, (2^32 (c_s + l_s) - A_s - q_s T') / q_s, orders the sources as
  // (2^32 (c_s + l_s) - A_s) / q_s does: T' is common to all. Both fractions are exact; both
  // are near T' (each source near its share), so they fit 64 bits but in states far from it.
  const SignedWide quota = static_cast<SignedWide>(quotas_[source]);
  const SignedWide start =
      static_cast<SignedWide>(Wide{mix_.cursors[source].consumed} << kQuotaBits) -
      static_cast<SignedWide>(mix_.targets[source]);
  // One wide division: start = f q + r (0 <= r < q), so ceil(start / q) = f + (r > 0), and the
  // finish, start + 2^32 l, is f q + (r + 2^32 l): f plus the narrow quotient of r + 2^32 l
  // (below 2^64: a piece is at most a document, below 2^32 tokens, and r below q <= 2^32).
  SignedWide f = start / quota;
  if (f * quota > start) --f;
  const uint64_t r = static_cast<uint64_t>(start - f * quota);
  const uint64_t rest = r + (piece_length(source) << kQuotaBits);
  const uint64_t q64 = quotas_[source];
  const SignedWide time = f + (r > 0 ? 1 : 0);
  const SignedWide quotient = f + static_cast<SignedWide>(rest / q64);
  constexpr SignedWide kMax = INT64_MAX, kMin = INT64_MIN;
  if (time > kMax || time < kMin || quotient > kMax || quotient < kMin) return false;
  detail::QueuedSource q;
  q.source = source;
  q.time = static_cast<int64_t>(time);
  q.finish = static_cast<int64_t>(quotient);
  q.remainder = static_cast<uint32_t>(rest % q64);  // < q_s <= 2^32
  heap_push(waiting_, q, LaterEligible());
  return true;
}

size_t Mixer::choose(bool* queued) {
  *queued = false;
  if (!heaps_valid_) {
    eligible_.clear();
    waiting_.clear();
    for (uint32_t s = 0; s < sources_.size(); ++s) {
      if (!wait(s)) return choose_linear();
    }
    heaps_valid_ = true;
  }
  const uint64_t since = total_ - mix_.base;
  const int64_t now = since > INT64_MAX ? INT64_MAX : static_cast<int64_t>(since);
  const LaterFinish later_finish{quotas_.data()};
  while (!waiting_.empty() && waiting_.front().time <= now) {
    heap_push(eligible_, heap_pop(waiting_, LaterEligible()), later_finish);
  }
  if (eligible_.empty()) return sources_.size();
  const uint32_t best = heap_pop(eligible_, later_finish).source;
  heaps_valid_ = false;  // until next() puts it back with its new keys
  *queued = true;
  return best;
}

Piece Mixer::next() {
  // WF2Q: among the sources whose service has not run ahead of their share (2^32 c_s <= their
  // target times 2^32: the share before the weights in force, A_s, plus q_s of the tokens since),
  // the one whose next piece finishes first in the fluid schedule, the least
  // (2^32 (c_s + l_s) - A_s) / q_s; the lowest index on a tie. Some source is always eligible:
  // the shares sum to T. An endless stream keeps the sources in two heaps (choose(), O(log
  // sources) a piece); a single pass, whose sources drop out as they finish, scans them
  // (choose_linear(), which compares the finishes relative to now, each numerator less its
  // target times 2^32, keeping the cross products well inside 128 bits).
  bool queued = false;
  const size_t best = holdout_.single_pass ? choose_linear() : choose(&queued);
  if (best == sources_.size()) throw std::logic_error("next: the single pass is exhausted");
  const auto source = static_cast<uint32_t>(best);
  SourceCursor& c = mix_.cursors[source];
  Piece piece;
  piece.source = source;
  piece.epoch = c.epoch;
  piece.position = c.position;
  piece.document = live_[source].document;
  piece.begin = c.offset;
  piece.end = c.offset + piece_length(source);
  c.offset = piece.end;
  c.consumed += piece.tokens();
  total_ += piece.tokens();
  settle(source);
  if (queued) heaps_valid_ = wait(source);
  return piece;
}

MixState Mixer::state() const { return mix_; }

void Mixer::rewind(MixState& state, const Piece& piece) {
  SourceCursor& c = state.cursors[piece.source];
  c.epoch = piece.epoch;
  c.position = piece.position;
  c.offset = piece.begin;
  c.consumed -= piece.tokens();
}

void Mixer::restore(const MixState& state) {
  Mixer moved = *this;  // works on a copy: a failed restore changes nothing
  const Config config = config_at(state.step);
  const size_t count = config.sources.size();
  if (state.cursors.size() != count) {
    invalid("cursors: " + std::to_string(state.cursors.size()) + " given for " +
            std::to_string(count) + " sources");
  }
  if (state.targets.size() != count) {
    invalid("targets: " + std::to_string(state.targets.size()) + " given for " +
            std::to_string(count) + " sources");
  }
  moved.applied_ = 0;
  while (moved.applied_ < edits_.size() && edits_[moved.applied_].step <= state.step) {
    ++moved.applied_;
  }
  std::vector<uint64_t> landed;
  for (size_t i = 0; i < moved.applied_; ++i) {
    if (edits_[i].kind == MixEdit::Kind::kAppend && !creates_[i]) landed.push_back(i);
  }
  if (state.landings.size() != landed.size()) {
    invalid("landings: " + std::to_string(state.landings.size()) + " given for " +
            std::to_string(landed.size()) + " appends in force");
  }
  for (size_t k = 0; k < landed.size(); ++k) {
    const Landing& l = state.landings[k];
    if (l.edit != landed[k] || l.source != edits_[landed[k]].source ||
        l.epoch > state.cursors[l.source].epoch) {
      invalid("landings[" + std::to_string(k) + "] = [" + std::to_string(l.edit) + ", " +
              std::to_string(l.source) + ", " + std::to_string(l.epoch) + ", " +
              std::to_string(l.start) + "] is not where edit " + std::to_string(landed[k]) +
              " can have landed");
    }
  }
  moved.mix_ = state;
  moved.sources_ = config.sources;
  moved.quotas_ = config.quotas;
  moved.next_change_ = config.next_change;
  moved.live_.assign(count, Live{});
  uint64_t total = 0;
  for (size_t s = 0; s < count; ++s) {
    const SourceCursor& c = state.cursors[s];
    const std::string where = "cursors[" + std::to_string(s) + "].";
    if (c.epoch > FeistelPermutation::kMaxSize) {
      invalid(where + "epoch = " + std::to_string(c.epoch) + " is out of range");
    }
    Live& live = moved.live_[s];
    if (holdout_.single_pass && c.epoch > 0) {  // done
      if (c.epoch != 1 || c.position != 0 || c.offset != 0) {
        invalid(where + "epoch = " + std::to_string(c.epoch) + "; a single pass's source is " +
                "in epoch 0, or done at [1, 0, 0]");
      }
      live.set_order(order_of(static_cast<uint32_t>(s), 0, state.landings, *config.sources[s]));
      if (total + c.consumed < total) invalid(where + "consumed overflows the total");
      total += c.consumed;
      continue;
    }
    live.set_order(order_of(static_cast<uint32_t>(s), c.epoch, state.landings, *config.sources[s]));
    if (c.position >= live.order.size()) {
      invalid(where + "position = " + std::to_string(c.position) + "; the source's epoch has " +
              std::to_string(live.order.size()) + " documents");
    }
  }
  moved.prefetch_next();
  for (size_t s = 0; s < count; ++s) {
    const SourceCursor& c = state.cursors[s];
    const std::string where = "cursors[" + std::to_string(s) + "].";
    Live& live = moved.live_[s];
    if (holdout_.single_pass && c.epoch > 0) continue;  // done, counted
    moved.look(static_cast<uint32_t>(s), c.position);
    if (c.offset >= live.length) {
      invalid(where + "offset = " + std::to_string(c.offset) + " but document " +
              std::to_string(live.document) + " has " + std::to_string(live.length) + " tokens");
    }
    if (!holdout_.reads(static_cast<uint32_t>(s), live.document)) {
      invalid(where + "position = " + std::to_string(c.position) + " is document " +
              std::to_string(live.document) + ", which is not in the '" +
              std::string(to_string(holdout_.subset)) + "' split this stream reads");
    }
    if (total + c.consumed < total) invalid(where + "consumed overflows the total");
    total += c.consumed;
  }
  if (state.base > total) {
    invalid("base = " + std::to_string(state.base) + " exceeds the tokens given, " +
            std::to_string(total));
  }
  moved.total_ = total;
  moved.heaps_valid_ = false;
  *this = std::move(moved);
}

}  // namespace distsampler
