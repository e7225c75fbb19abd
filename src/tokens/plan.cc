// plan.cc: packing the mixer's pieces into sequences, steps and ranks, and the plan's checkpoint
// (plan.h).
#include "distsampler/tokens/plan.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "distsampler/state.h"

namespace distsampler {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw std::invalid_argument(message); }

Holdout holdout_of(const TokenPlanOptions& o) {
  Holdout h;
  if (!o.split.empty()) h.rule = SplitRule(o.split, "split");
  h.subset = o.subset;
  h.single_pass = o.subset != Split::kTrain;
  return h;
}

uint64_t checked_seq_len(uint64_t seq_len) {
  if (seq_len == 0 || seq_len > TokenPlanOptions::kMaxSeqLen) {
    invalid("seq_len = " + std::to_string(seq_len) + "; allowed: 1 to 2^30");
  }
  return seq_len;
}

DictValue plan_config(const std::vector<std::shared_ptr<const DocumentLengths>>& sources,
                      const Mixer& mixer, const TokenPlanOptions& o) {
  std::vector<DictValue> lengths, quotas;
  for (const auto& source : sources) {
    lengths.push_back(DictValue::list(
        {DictValue::integer(source->documents()), DictValue::integer(source->total_tokens())}));
  }
  for (uint64_t quota : mixer.quotas()) quotas.push_back(DictValue::integer(quota));
  DictValue config = DictValue::dict();
  config.set("plan", DictValue::integer(TokenPlan::kVersion))
      .set("sources", DictValue::list(std::move(lengths)))
      .set("quotas", DictValue::list(std::move(quotas)))
      .set("seq_len", DictValue::integer(o.seq_len))
      .set("global_batch", DictValue::integer(o.global_batch))
      .set("seed", DictValue::integer(o.seed))
      .set("packing", DictValue::string(std::string(to_string(o.packing))));
  if (o.packing == Packing::kBestFit) config.set("window", DictValue::integer(o.window));
  if (!o.split.empty() || o.subset != Split::kTrain) {
    std::vector<DictValue> fractions;
    for (double f : mixer.holdout().rule.fractions()) fractions.push_back(DictValue::real(f));
    config.set("split", DictValue::list(std::move(fractions)))
        .set("subset", DictValue::string(std::string(to_string(o.subset))));
  }
  if (o.appended_eod) config.set("append_eod", DictValue::integer(*o.appended_eod));
  // Recorded only when some source has a locality order: earlier checkpoints stay valid.
  if (std::any_of(o.orders.begin(), o.orders.end(), [](const SourceOrder& s) { return s.block; })) {
    std::vector<DictValue> orders;
    for (const SourceOrder& s : o.orders) {
      orders.push_back(
          DictValue::list({DictValue::integer(s.block), DictValue::integer(s.window)}));
    }
    config.set("orders", DictValue::list(std::move(orders)));
  }
  return config;
}

DictValue edit_config(const MixEdit& e) {
  DictValue out = DictValue::dict();
  out.set("step", DictValue::integer(e.step));
  switch (e.kind) {
    case MixEdit::Kind::kWeights: {
      std::vector<DictValue> weights;
      for (double w : e.weights) weights.push_back(DictValue::real(w));
      out.set("weights", DictValue::list(std::move(weights)));
      if (e.until > e.step) out.set("until", DictValue::integer(e.until));
      break;
    }
    case MixEdit::Kind::kAppend:
      out.set("source", DictValue::integer(e.source))
          .set("append", DictValue::list({DictValue::integer(e.documents->documents()),
                                          DictValue::integer(e.documents->total_tokens())}));
      break;
    case MixEdit::Kind::kSkip: {
      std::string lines;  // "source document" lines, sorted: the list's CRC-32
      for (const auto& [source, document] : e.skip) {
        lines += std::to_string(source) + " " + std::to_string(document) + "\n";
      }
      out.set("skip", DictValue::integer(e.skip.size()))
          .set("crc32", DictValue::integer(crc32(lines)));
      break;
    }
  }
  return out;
}

// A mix target's 64-bit halves, in the order both codecs store them: high, then low.
struct WideHalves {
  uint64_t high = 0, low = 0;
};
WideHalves halves(detail::Uint128 value) {
  return {static_cast<uint64_t>(value >> 64), static_cast<uint64_t>(value)};
}
detail::Uint128 wide_of(WideHalves h) {
  return (static_cast<detail::Uint128>(h.high) << 64) | h.low;
}

DictValue wide(detail::Uint128 value) {
  const WideHalves h = halves(value);
  return DictValue::list({DictValue::integer(h.high), DictValue::integer(h.low)});
}

uint64_t entry_u64(const DictValue& value, const std::string& name) {
  uint64_t out = 0;
  if (!value.as_u64(out)) {
    invalid("state " + name + " = " + python_repr(value) + "; expected an int in [0, 2^64 - 1]");
  }
  return out;
}

}  // namespace

std::string_view to_string(Packing packing) { return detail::variant_name(kPackings, packing); }

Packing parse_packing(std::string_view text, std::string_view parameter) {
  return detail::parse_variant(kPackings, text, parameter, "a packing").value;
}

uint64_t PlannedSequence::tokens() const {
  uint64_t n = 0;
  for (const Span& span : spans) n += span.end - span.begin;
  return n;
}

RankSequences rank_sequences(uint64_t global_batch, uint64_t world_size, uint64_t rank,
                             uint64_t step) {
  if (world_size == 0) invalid("world_size = 0; at least 1 rank");
  if (rank >= world_size) {
    invalid("rank = " + std::to_string(rank) + "; allowed: 0 to world_size - 1 = " +
            std::to_string(world_size - 1));
  }
  if (global_batch == 0 || global_batch % world_size != 0) {
    invalid("global_batch = " + std::to_string(global_batch) +
            " is not a positive multiple of world_size = " + std::to_string(world_size) +
            "; each rank reads global_batch / world_size sequences per step");
  }
  const uint64_t per_rank = global_batch / world_size;
  return RankSequences{step * global_batch + rank * per_rank, per_rank};
}

TokenPlan::TokenPlan(std::vector<std::shared_ptr<const DocumentLengths>> sources,
                     TokenPlanOptions options)
    : options_(std::move(options)),
      mixer_(sources, options_.weights, options_.seed, checked_seq_len(options_.seq_len) + 1,
             options_.edits, holdout_of(options_), options_.orders) {
  if (options_.global_batch == 0) invalid("global_batch = 0; at least 1 sequence per step");
  if (options_.packing == Packing::kBestFit &&
      (options_.window == 0 || options_.window > TokenPlanOptions::kMaxWindow)) {
    invalid("window = " + std::to_string(options_.window) + "; allowed: 1 to 2^24 pieces");
  }
  config_ = plan_config(sources, mixer_, options_);
  for (const MixEdit& e : mixer_.edits()) edit_configs_.push_back(edit_config(e));
}

DictValue TokenPlan::config(uint64_t sequence) const {
  if (edit_configs_.empty()) return config_;
  // Edits of steps before sequence's (ceil(sequence / B)) took effect before it; those of step 0
  // at the start.
  const uint64_t before = std::max<uint64_t>(
      1, sequence / options_.global_batch + (sequence % options_.global_batch != 0));
  std::vector<DictValue> edits;
  for (size_t i = 0; i < edit_configs_.size(); ++i) {
    if (mixer_.edits()[i].step < before) {
      edits.push_back(edit_configs_[i]);
    }
  }
  if (edits.empty()) return config_;
  DictValue out = config_;
  out.set("edits", DictValue::list(std::move(edits)));
  return out;
}

PlannedSequence TokenPlan::next() { return next(/*spans=*/true); }

PlannedSequence TokenPlan::next(bool spans) {
  if (mixer_.changes_by(step())) {
    // The edits take effect before this sequence's first draw. concat: the one piece pending
    // (holding this sequence's first token) was drawn before them, so the anchor before it is
    // kept as it stood.
    if (options_.packing == Packing::kConcat && !pending_.empty() && !edit_anchor_) {
      if (pending_.size() != 1) throw std::logic_error("next: more than one piece pending");
      edit_anchor_ = mixer_.state();
      Mixer::rewind(*edit_anchor_, pending_.front());
    }
    mixer_.advance(step());
  }
  return options_.packing == Packing::kConcat ? next_concat(spans) : next_best_fit(spans);
}

bool TokenPlan::exhausted() const {
  if (!mixer_.exhausted()) return false;
  if (options_.packing == Packing::kBestFit) return next_bin_ >= bins_.size();
  // concat: a last token left alone was the previous sequence's last label.
  uint64_t left = 0;
  for (const Piece& piece : pending_) left += piece.tokens();
  return left <= offset_ + 1;
}

PlannedSequence TokenPlan::next_concat(bool spans) {
  const uint64_t want = sequence_tokens();
  PlannedSequence out;
  out.index = sequence_++;
  if (exhausted()) return out;  // a single pass's padding rows
  if (spans) out.spans.reserve(16);
  uint64_t have = 0, offset = offset_;
  for (size_t i = 0; have < want; ++i) {
    if (i == pending_.size()) {
      if (mixer_.exhausted()) break;  // a single pass's last sequence
      pending_.push_back(mixer_.next());
    }
    const Piece& piece = pending_[i];
    const uint64_t begin = piece.begin + (i == 0 ? offset : 0);
    const uint64_t end = std::min(piece.end, begin + (want - have));
    if (spans) out.spans.push_back(Span{piece.source, piece.document, begin, end, piece.epoch});
    if (ledger_) count(piece.source, end - begin);
    have += end - begin;
  }
  // The next sequence starts at the last token of this one: L tokens on.
  uint64_t advance = options_.seq_len;
  while (advance > 0) {
    const uint64_t left = pending_.front().tokens() - offset;
    if (advance < left) {
      offset += advance;
      break;
    }
    advance -= left;
    offset = 0;
    pending_.pop_front();
    edit_anchor_.reset();
    if (pending_.empty()) {
      if (mixer_.exhausted()) break;
      pending_.push_back(mixer_.next());
    }
  }
  offset_ = offset;
  return out;
}

void TokenPlan::fill_window() {
  anchor_ = mixer_.state();
  std::vector<Piece> pieces;
  pieces.reserve(options_.window);
  for (uint64_t i = 0; i < options_.window && !mixer_.exhausted(); ++i) {
    pieces.push_back(mixer_.next());
  }
  // Best-fit decreasing: the longest piece first (the earlier one on a tie), each into the bin
  // with the least room that holds it (the earliest opened on a tie), a new bin when none does.
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return pieces[a].tokens() > pieces[b].tokens();
  });
  const uint64_t capacity = sequence_tokens();
  std::set<std::pair<uint64_t, size_t>> room;  // (tokens free, bin)
  bins_.clear();
  for (size_t i : order) {
    const Piece& piece = pieces[i];
    auto fit = room.lower_bound({piece.tokens(), size_t{0}});
    size_t bin;
    uint64_t free;
    if (fit == room.end()) {
      bin = bins_.size();
      bins_.emplace_back();
      free = capacity;
    } else {
      bin = fit->second;
      free = fit->first;
      room.erase(fit);
    }
    bins_[bin].push_back(Span{piece.source, piece.document, piece.begin, piece.end, piece.epoch});
    free -= piece.tokens();
    if (free > 0) room.insert({free, bin});
  }
  next_bin_ = 0;
}

PlannedSequence TokenPlan::next_best_fit(bool spans) {
  if (next_bin_ == bins_.size() && !mixer_.exhausted()) fill_window();
  PlannedSequence out;
  out.index = sequence_++;
  if (next_bin_ < bins_.size()) {  // else a single pass's padding
    if (spans) out.spans = bins_[next_bin_];
    if (ledger_) {
      for (const Span& x : bins_[next_bin_]) count(x.source, x.end - x.begin);
    }
    ++next_bin_;
  }
  return out;
}

std::vector<PlannedSequence> TokenPlan::next_step(uint64_t world_size, uint64_t rank) {
  const RankSequences mine = rank_sequences(options_.global_batch, world_size, rank, step());
  return next_step_rows(mine.first - step() * options_.global_batch, mine.count);
}

std::vector<PlannedSequence> TokenPlan::next_step_rows(uint64_t first, uint64_t count) {
  if (first > options_.global_batch || count > options_.global_batch - first) {
    invalid("rows [" + std::to_string(first) + ", +" + std::to_string(count) +
            ") of a step of " + std::to_string(options_.global_batch));
  }
  if (sequence_ % options_.global_batch != 0) {
    throw std::logic_error("next_step: the plan stands at sequence " + std::to_string(sequence_) +
                           ", inside a step of " + std::to_string(options_.global_batch));
  }
  const uint64_t begin = sequence_ + first;
  std::vector<PlannedSequence> out;
  out.reserve(count);
  for (uint64_t i = 0; i < options_.global_batch; ++i) {
    const bool kept = sequence_ >= begin && sequence_ < begin + count;
    PlannedSequence sequence = next(/*spans=*/kept);  // the others' spans are not built
    if (kept) out.push_back(std::move(sequence));
  }
  return out;
}

TokenPlanState TokenPlan::state() const {
  TokenPlanState state;
  state.sequence = sequence_;
  if (options_.packing == Packing::kConcat) {
    if (edit_anchor_) {
      state.mix = *edit_anchor_;
    } else {
      state.mix = mixer_.state();
      for (auto it = pending_.rbegin(); it != pending_.rend(); ++it) Mixer::rewind(state.mix, *it);
    }
    state.skip = pending_.empty() ? 0 : offset_;
  } else if (next_bin_ < bins_.size()) {
    state.mix = anchor_;
    state.skip = next_bin_;
  } else {
    state.mix = mixer_.state();
  }
  return state;
}

void TokenPlan::load(const TokenPlanState& state) {
  TokenPlan moved = *this;  // the load works on a copy: a failure leaves this plan as it was
  moved.mixer_.restore(state.mix);
  moved.sequence_ = state.sequence;
  moved.pending_.clear();
  moved.offset_ = 0;
  moved.edit_anchor_.reset();
  moved.bins_.clear();
  moved.next_bin_ = 0;
  if (options_.packing == Packing::kConcat && moved.mixer_.exhausted()) {
    if (state.skip != 0) invalid("state skip = " + std::to_string(state.skip) + " after the pass");
  } else if (options_.packing == Packing::kConcat) {
    moved.pending_.push_back(moved.mixer_.next());
    if (state.skip >= moved.pending_.front().tokens()) {
      invalid("state skip = " + std::to_string(state.skip) + " but the piece there holds " +
              std::to_string(moved.pending_.front().tokens()) + " tokens");
    }
    moved.offset_ = state.skip;
  } else if (state.skip > 0) {
    moved.fill_window();
    if (state.skip >= moved.bins_.size()) {
      invalid("state skip = " + std::to_string(state.skip) + " but the window there packs " +
              std::to_string(moved.bins_.size()) + " sequences");
    }
    moved.next_bin_ = state.skip;
  }
  *this = std::move(moved);
}

DictValue TokenPlan::state_dict(uint64_t world_size) const {
  const TokenPlanState s = state();
  std::vector<DictValue> cursors;
  for (const SourceCursor& c : s.mix.cursors) {
    cursors.push_back(DictValue::list({DictValue::integer(c.epoch), DictValue::integer(c.position),
                                       DictValue::integer(c.offset),
                                       DictValue::integer(c.consumed)}));
  }
  PolicyCheckpoint checkpoint;
  checkpoint.kind = kStateKind;
  checkpoint.config = config(s.sequence);
  checkpoint.consumed = s.sequence;
  checkpoint.world_size = world_size;
  checkpoint.position = DictValue::dict();
  checkpoint.position.set("cursors", DictValue::list(std::move(cursors)))
      .set("skip", DictValue::integer(s.skip));
  if (checkpoint.config.find("edits") != nullptr) {  // what is in force, where appends landed
    std::vector<DictValue> targets, landings;
    for (detail::Uint128 t : s.mix.targets) targets.push_back(wide(t));
    for (const Landing& l : s.mix.landings) {
      landings.push_back(DictValue::list({DictValue::integer(l.edit), DictValue::integer(l.source),
                                          DictValue::integer(l.epoch),
                                          DictValue::integer(l.start)}));
    }
    DictValue mix = DictValue::dict();
    mix.set("step", DictValue::integer(s.mix.step))
        .set("base", DictValue::integer(s.mix.base))
        .set("targets", DictValue::list(std::move(targets)))
        .set("landings", DictValue::list(std::move(landings)));
    checkpoint.position.set("mix", std::move(mix));
  }
  return policy_state_dict(checkpoint);
}

void TokenPlan::load_state_dict(const DictValue& state) {
  // The edits a checkpoint records are those before its step: find its sequence first (a
  // malformed one is parse_policy_state's to report).
  uint64_t sequence = 0;
  const DictValue* consumed = state.find("consumed");
  if (consumed == nullptr || !consumed->as_u64(sequence)) sequence = 0;
  const PolicyCheckpoint checkpoint = parse_policy_state(state, kStateKind, config(sequence));
  const DictValue& position = checkpoint.position;
  const DictValue* cursors = position.find("cursors");
  const DictValue* skip = position.find("skip");
  if (cursors == nullptr || skip == nullptr || cursors->type != DictValue::Type::kList) {
    invalid("state position = " + python_repr(position) +
            "; expected {'cursors': [[epoch, position, offset, consumed], ...], 'skip': n}");
  }
  TokenPlanState s;
  s.sequence = checkpoint.consumed;
  s.skip = entry_u64(*skip, "position['skip']");
  auto list_of = [&](const DictValue* value, const std::string& name, size_t width) {
    if (value == nullptr || value->type != DictValue::Type::kList) {
      invalid("state position['mix']['" + name + "'] is missing or not a list");
    }
    std::vector<std::vector<uint64_t>> rows;
    for (size_t i = 0; i < value->items.size(); ++i) {
      const DictValue& row = value->items[i];
      const std::string at = "position['mix']['" + name + "'][" + std::to_string(i) + "]";
      if (row.type != DictValue::Type::kList || row.items.size() != width) {
        invalid("state " + at + " = " + python_repr(row) + "; expected a list of " +
                std::to_string(width) + " ints");
      }
      rows.emplace_back();
      for (size_t j = 0; j < width; ++j) {
        rows.back().push_back(entry_u64(row.items[j], at + "[" + std::to_string(j) + "]"));
      }
    }
    return rows;
  };
  const DictValue* mix = position.find("mix");
  const bool recorded = checkpoint.config.find("edits") != nullptr;
  if (recorded != (mix != nullptr)) {
    invalid(std::string("state position ") + (mix ? "has" : "lacks") +
            " the edits' entry 'mix' but its config " + (recorded ? "has" : "has no") + " edits");
  }
  if (mix != nullptr) {
    const DictValue* step = mix->find("step");
    const DictValue* base = mix->find("base");
    if (step == nullptr || base == nullptr) invalid("state position['mix'] lacks step or base");
    s.mix.step = entry_u64(*step, "position['mix']['step']");
    s.mix.base = entry_u64(*base, "position['mix']['base']");
    for (const auto& t : list_of(mix->find("targets"), "targets", 2)) {
      s.mix.targets.push_back(wide_of({t[0], t[1]}));
    }
    for (const auto& l : list_of(mix->find("landings"), "landings", 4)) {
      if (l[1] >= Mixer::kMaxSources) invalid("state position['mix']['landings']: bad source");
      s.mix.landings.push_back(Landing{l[0], static_cast<uint32_t>(l[1]), l[2], l[3]});
    }
  } else {
    s.mix.targets.assign(cursors->items.size(), 0);
  }
  for (size_t i = 0; i < cursors->items.size(); ++i) {
    const DictValue& c = cursors->items[i];
    const std::string name = "position['cursors'][" + std::to_string(i) + "]";
    if (c.type != DictValue::Type::kList || c.items.size() != 4) {
      invalid("state " + name + " = " + python_repr(c) +
              "; expected [epoch, position, offset, consumed]");
    }
    s.mix.cursors.push_back(SourceCursor{entry_u64(c.items[0], name + "[0]"),
                                     entry_u64(c.items[1], name + "[1]"),
                                     entry_u64(c.items[2], name + "[2]"),
                                     entry_u64(c.items[3], name + "[3]")});
  }
  load(s);
}

// The state as words (plan.h: the layout, beside the dict codec above).
std::vector<uint64_t> token_state_words(const TokenPlanState& s) {
  std::vector<uint64_t> w = {s.sequence, s.skip, s.mix.step, s.mix.base, s.mix.cursors.size()};
  for (const SourceCursor& c : s.mix.cursors) {
    w.insert(w.end(), {c.epoch, c.position, c.offset, c.consumed});
  }
  w.push_back(s.mix.targets.size());
  for (const detail::Uint128& t : s.mix.targets) {
    const WideHalves h = halves(t);
    w.insert(w.end(), {h.high, h.low});
  }
  w.push_back(s.mix.landings.size());
  for (const Landing& l : s.mix.landings) w.insert(w.end(), {l.edit, l.source, l.epoch, l.start});
  return w;
}

std::optional<TokenPlanState> token_state_from_words(const std::vector<uint64_t>& w) {
  size_t i = 0;
  auto take = [&](uint64_t* v) {
    if (i >= w.size()) return false;
    *v = w[i++];
    return true;
  };
  TokenPlanState s;
  uint64_t n = 0;
  if (!take(&s.sequence) || !take(&s.skip) || !take(&s.mix.step) || !take(&s.mix.base) ||
      !take(&n) || n > (w.size() - i) / 4) {
    return std::nullopt;
  }
  s.mix.cursors.resize(n);
  for (SourceCursor& c : s.mix.cursors) {
    take(&c.epoch), take(&c.position), take(&c.offset), take(&c.consumed);
  }
  if (!take(&n) || n > (w.size() - i) / 2) return std::nullopt;
  s.mix.targets.resize(n);
  for (detail::Uint128& t : s.mix.targets) {
    WideHalves h;
    take(&h.high), take(&h.low);
    t = wide_of(h);
  }
  if (!take(&n) || n != (w.size() - i) / 4 || (w.size() - i) % 4 != 0) return std::nullopt;
  s.mix.landings.resize(n);
  for (Landing& l : s.mix.landings) {
    uint64_t source = 0;
    take(&l.edit), take(&source), take(&l.epoch), take(&l.start);
    l.source = static_cast<uint32_t>(source);
  }
  return s;
}

}  // namespace distsampler
