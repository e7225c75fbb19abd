// mix.cc: the mixer's configuration (mix.h): weights as quotas, the edit schedule (changes, ramps,
// appends, skips) and the mix in force at a step, the sources' epoch orders. The draw itself is
// wf2q.cc's, the held-out splits split.cc's, the lengths lengths.cc's.
#include "distsampler/tokens/mix.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "distsampler/hash.h"
#include "mix_internal.h"

namespace distsampler {

using mix_detail::invalid;
using mix_detail::kQuotaTotal;
using mix_detail::number;
using mix_detail::Wide;

namespace {

uint64_t source_seed(uint64_t seed, uint64_t source) {
  return derive_key(seed, source, kDomainTokens);
}

// Weights as integer quotas summing to exactly 2^32: each floor(2^32 w_s / sum) (at least 1),
// the units left over to the largest fractions (the lower source on a tie), or taken back from
// the smallest. `what` names the weights in messages.
std::vector<uint64_t> quotas_of(const std::vector<double>& weights, const std::string& what) {
  double sum = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    if (!std::isfinite(weights[s]) || !(weights[s] > 0)) {
      invalid(what + "[" + std::to_string(s) + "] = " + number(weights[s]) +
              "; a weight must be finite and positive");
    }
    sum += weights[s];
  }
  if (!std::isfinite(sum)) invalid(what + ": their sum overflows; scale them down");
  std::vector<uint64_t> quotas(weights.size());
  std::vector<double> fraction(weights.size());
  uint64_t total = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    const double scaled = std::ldexp(weights[s] / sum, Mixer::kQuotaBits);
    if (scaled < 0.5) {
      invalid(what + "[" + std::to_string(s) + "] = " + number(weights[s]) +
              " is below 2^-32 of the weights' sum (" + number(sum) + ")");
    }
    const double whole = std::floor(scaled);
    quotas[s] = std::max<uint64_t>(1, static_cast<uint64_t>(whole));
    fraction[s] = scaled - whole;
    total += quotas[s];
  }
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return fraction[a] > fraction[b]; });
  for (size_t i = 0; total < kQuotaTotal; i = (i + 1) % order.size()) ++quotas[order[i]], ++total;
  for (size_t i = order.size(); total > kQuotaTotal;) {
    i = (i == 0 ? order.size() : i) - 1;
    if (quotas[order[i]] > 1) --quotas[order[i]], --total;
  }
  return quotas;
}


std::vector<double> normalized(const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<double> out;
  for (double w : weights) out.push_back(w / sum);
  return out;
}

}  // namespace


void Mixer::EpochOrder::gather(uint64_t first, uint64_t count, uint64_t* out) const {
  if (parts.empty() && blocks) return blocks->gather(first, count, out);
  if (parts.empty()) return base.gather(first, 1, count, out);
  for (uint64_t i = 0; i < count; ++i) out[i] = at(first + i);
}


uint64_t Mixer::EpochOrder::at(uint64_t position) const {
  for (size_t k = parts.size(); k-- > 0;) {
    const Part& part = parts[k];
    if (position < part.start) continue;  // read before the landing: the earlier order's
    const uint64_t x = part.rest(position - part.start);
    const uint64_t unread = part.before - part.start;
    if (x >= unread) return part.before + (x - unread);  // an appended document
    position = part.start + x;
  }
  return blocks ? (*blocks)(position) : base(position);
}

std::optional<uint64_t> Mixer::EpochOrder::position_of(uint64_t document) const {
  if (document >= size()) return std::nullopt;
  // at() undone: the landing that appended `document` (or the base order) gives its position
  // then, and each later landing moves a position at or after its start within the rest.
  size_t k = parts.size();
  while (k > 0 && document < parts[k - 1].before) --k;
  uint64_t position = 0;
  if (k > 0) {
    const Part& part = parts[k - 1];
    position = part.start + part.rest.inverse((part.before - part.start) + (document - part.before));
  } else {
    position = blocks ? blocks->inverse(document) : base.inverse(document);
  }
  for (; k < parts.size(); ++k) {
    const Part& part = parts[k];
    if (position >= part.start) position = part.start + part.rest.inverse(position - part.start);
  }
  return position;
}

SourceOrder locality_order(int64_t block, int64_t window, const std::string& what) {
  if (block < 1 || window < 1) {
    invalid(what + ": block " + std::to_string(block) + ", window " + std::to_string(window) +
            "; allowed: a block of at least 1 document and a window of at least 1 block");
  }
  return SourceOrder{static_cast<uint64_t>(block), static_cast<uint64_t>(window)};
}

Mixer::Mixer(std::vector<std::shared_ptr<const DocumentLengths>> sources,
             std::vector<double> weights, uint64_t seed, uint64_t piece_tokens,
             std::vector<MixEdit> edits, Holdout holdout, std::vector<SourceOrder> orders)
    : initial_(std::move(sources)),
      initial_weights_(std::move(weights)),
      edits_(std::move(edits)),
      seed_(seed),
      piece_tokens_(piece_tokens),
      holdout_(std::move(holdout)),
      orders_(std::move(orders)) {
  if (orders_.size() > initial_.size()) {
    invalid("locality: " + std::to_string(orders_.size()) + " given for " +
            std::to_string(initial_.size()) + " sources; allowed: at most one per source");
  }
  for (size_t s = 0; s < orders_.size(); ++s) {
    const SourceOrder& o = orders_[s];
    if (o.block > 0) {
      locality_order(static_cast<int64_t>(std::min<uint64_t>(o.block, INT64_MAX)),
                     static_cast<int64_t>(std::min<uint64_t>(o.window, INT64_MAX)),
                     "orders[" + std::to_string(s) + "]");
    }
  }
  if (initial_.empty()) invalid("sources: none given; at least one source is needed");
  if (initial_.size() > kMaxSources) {
    invalid("sources: " + std::to_string(initial_.size()) + " given; at most " +
            std::to_string(kMaxSources) + " allowed");
  }
  if (initial_weights_.size() != initial_.size()) {
    invalid("weights: " + std::to_string(initial_weights_.size()) + " given for " +
            std::to_string(initial_.size()) + " sources; one weight per source");
  }
  if (piece_tokens_ == 0) invalid("piece_tokens = 0; at least 1 token per piece");
  quotas_ = quotas_of(initial_weights_, "weights");
  for (size_t s = 0; s < initial_.size(); ++s) {
    if (!initial_[s]) invalid("sources[" + std::to_string(s) + "]: missing");
    if (initial_[s]->total_tokens() == 0) {
      invalid("sources[" + std::to_string(s) + "] has no tokens (" +
              std::to_string(initial_[s]->documents()) + " documents, all empty)");
    }
  }
  // Each source reads some tokens of its subset (training); a single pass needs one source that
  // does, and passes over the others.
  size_t with_subset = 0;
  for (size_t s = 0; s < initial_.size(); ++s) {
    const bool has = has_subset_tokens(static_cast<uint32_t>(s), *initial_[s]);
    with_subset += has ? 1 : 0;
    if (!has && !holdout_.single_pass) {
      invalid("sources[" + std::to_string(s) + "]: none of its " +
              std::to_string(initial_[s]->documents()) + " documents with tokens is in the '" +
              std::string(to_string(holdout_.subset)) + "' split");
    }
  }
  if (with_subset == 0) {
    invalid("split: no document with tokens of any source is in the '" +
            std::string(to_string(holdout_.subset)) + "' split");
  }
  for (const MixEdit& e : edits_) {
    if (holdout_.single_pass && e.step > 0) {
      invalid(e.label + ": step " + std::to_string(e.step) + "; a single pass (an evaluation " +
              "stream) takes edits of step 0 only, what is in force when it starts");
    }
  }
  // The edits, by step (stably), each checked against what is in force at its step: a step's
  // appends apply first, then its skip lists, then its weights.
  std::stable_sort(edits_.begin(), edits_.end(),
                   [](const MixEdit& a, const MixEdit& b) { return a.step < b.step; });
  ramp_from_.assign(edits_.size(), {});
  creates_.assign(edits_.size(), false);
  std::vector<uint64_t> documents, tokens;
  for (const auto& source : initial_) {
    documents.push_back(source->documents());
    tokens.push_back(source->total_tokens());
  }
  std::vector<std::vector<std::shared_ptr<const DocumentLengths>>> parts;
  for (const auto& source : initial_) parts.push_back({source});
  std::set<std::pair<uint32_t, uint64_t>> skipped;
  std::vector<uint64_t> skipped_tokens(initial_.size(), 0);
  std::vector<double> in_force = initial_weights_;
  const MixEdit* ramp = nullptr;  // the latest weights edit, when a ramp
  for (size_t first = 0; first < edits_.size();) {
    const uint64_t step = edits_[first].step;
    size_t last = first;
    while (last < edits_.size() && edits_[last].step == step) ++last;
    for (const MixEdit::Kind kind : {MixEdit::Kind::kAppend, MixEdit::Kind::kSkip,
                                     MixEdit::Kind::kWeights}) {
      for (size_t i = first; i < last; ++i) {
        MixEdit& e = edits_[i];
        if (e.kind != kind) continue;
        const std::string& at = e.label;
        if (kind == MixEdit::Kind::kAppend) {
          if (!e.documents || e.documents->documents() == 0) invalid(at + ": no documents");
          if (e.source > parts.size()) {
            invalid(at + ": source = " + std::to_string(e.source) + "; allowed: 0 to " +
                    std::to_string(parts.size()) + " (" + std::to_string(parts.size()) +
                    " adds a new source)");
          }
          if (e.source == parts.size()) {
            if (parts.size() == kMaxSources) invalid(at + ": more than 2^20 sources");
            if (e.documents->total_tokens() == 0) invalid(at + ": a new source with no tokens");
            if (!holdout_.single_pass &&
                !has_subset_tokens(static_cast<uint32_t>(parts.size()), *e.documents)) {
              invalid(at + ": a new source none of whose documents with tokens is in the '" +
                      std::string(to_string(holdout_.subset)) + "' split");
            }
            creates_[i] = true;
            parts.push_back({e.documents});
            documents.push_back(e.documents->documents());
            tokens.push_back(e.documents->total_tokens());
            skipped_tokens.push_back(0);
          } else {
            parts[e.source].push_back(e.documents);
            documents[e.source] += e.documents->documents();
            tokens[e.source] += e.documents->total_tokens();
          }
        } else if (kind == MixEdit::Kind::kSkip) {
          std::sort(e.skip.begin(), e.skip.end());
          e.skip.erase(std::unique(e.skip.begin(), e.skip.end()), e.skip.end());
          for (const auto& [source, document] : e.skip) {
            if (source >= parts.size()) {
              invalid(at + ": source " + std::to_string(source) + " does not exist at step " +
                      std::to_string(step) + " (" + std::to_string(parts.size()) + " sources)");
            }
            if (document >= documents[source]) {
              invalid(at + ": document " + std::to_string(document) + " of source " +
                      std::to_string(source) + " does not exist at step " +
                      std::to_string(step) + " (" + std::to_string(documents[source]) +
                      " documents)");
            }
            if (!skipped.insert({source, document}).second) continue;
            skipped_tokens[source] += ConcatLengths(parts[source]).length(document);
            if (skipped_tokens[source] == tokens[source]) {
              invalid(at + ": every document of source " + std::to_string(source) +
                      " with tokens is skipped; a source must keep at least one");
            }
          }
        } else {
          if (ramp != nullptr && step < ramp->until) {
            invalid(at + ": step " + std::to_string(step) + " falls inside the ramp " +
                    ramp->label + " (steps " + std::to_string(ramp->step) + " to " +
                    std::to_string(ramp->until) + "); ramps and changes may not overlap");
          }
          if (e.until < e.step) e.until = e.step;  // a change (mix.h: MixEdit::until)
          ramp_from_[i] = in_force;
          if (e.until > e.step && in_force.size() != e.weights.size()) {
            invalid(at + ": ramps from " + std::to_string(in_force.size()) + " sources to " +
                    std::to_string(e.weights.size()) + "; a new source needs a change at its "
                    "step, not a ramp");
          }
          quotas_of(e.weights, at);
          in_force = e.weights;
          ramp = e.until > e.step ? &e : nullptr;
        }
      }
    }
    if (in_force.size() != parts.size()) {
      invalid("step " + std::to_string(step) + ": " + std::to_string(in_force.size()) +
              " weights in force for " + std::to_string(parts.size()) +
              " sources; give the weights of every source (new ones included) at the step a "
              "source is added");
    }
    first = last;
  }
  mix_.cursors.assign(initial_.size(), SourceCursor{});
  mix_.targets.assign(initial_.size(), 0);
  sources_ = {initial_.begin(), initial_.end()};
  live_.resize(initial_.size());
  for (size_t s = 0; s < initial_.size(); ++s) {
    live_[s].set_order(order_of(static_cast<uint32_t>(s), 0, {}, *initial_[s]));
  }
  prefetch_next();
  // A single pass settles in advance(0), after its step-0 appends: a source with no document of
  // its subset may gain some there.
  for (size_t s = 0; s < initial_.size() && !holdout_.single_pass; ++s) {
    settle(static_cast<uint32_t>(s));
  }
  next_change_ = 0;
  advance(0);  // the edits of step 0
}

bool Mixer::has_subset_tokens(uint32_t source, const DocumentLengths& lengths) const {
  for (uint64_t d = 0; d < lengths.documents(); ++d) {
    if (lengths.length(d) > 0 && holdout_.reads(source, d)) return true;
  }
  return false;
}

bool Mixer::exhausted() const {
  for (uint32_t s = 0; s < mix_.cursors.size(); ++s) {
    if (!exhausted(s)) return false;
  }
  return true;
}

uint64_t Mixer::first_documents(uint32_t source) const {
  if (source < initial_.size()) return initial_[source]->documents();
  for (size_t i = 0; i < edits_.size(); ++i) {
    if (creates_[i] && edits_[i].source == source) return edits_[i].documents->documents();
  }
  return 0;
}

std::vector<double> Mixer::weights_at(uint64_t step) const {
  const MixEdit* latest = nullptr;
  size_t index = 0;
  for (size_t i = 0; i < edits_.size() && edits_[i].step <= step; ++i) {
    if (edits_[i].kind == MixEdit::Kind::kWeights) latest = &edits_[i], index = i;
  }
  if (latest == nullptr) return initial_weights_;
  if (step >= latest->until) return latest->weights;
  // A ramp: linear between the normalized weights at its first and last step.
  const double f = static_cast<double>(step - latest->step) /
                   static_cast<double>(latest->until - latest->step);
  const std::vector<double> from = normalized(ramp_from_[index]), to = normalized(latest->weights);
  std::vector<double> out(to.size());
  for (size_t s = 0; s < to.size(); ++s) out[s] = (1 - f) * from[s] + f * to[s];
  return out;
}

Mixer::Config Mixer::config_at(uint64_t step) const {
  Config config;
  std::vector<std::vector<std::shared_ptr<const DocumentLengths>>> parts;
  for (const auto& source : initial_) parts.push_back({source});
  size_t applied = 0;
  for (; applied < edits_.size() && edits_[applied].step <= step; ++applied) {
    const MixEdit& e = edits_[applied];
    if (e.kind != MixEdit::Kind::kAppend) continue;
    if (creates_[applied]) {
      parts.push_back({e.documents});
    } else {
      parts[e.source].push_back(e.documents);
    }
  }
  for (auto& list : parts) {
    config.sources.push_back(list.size() == 1 ? list[0]
                                              : std::make_shared<ConcatLengths>(std::move(list)));
  }
  config.quotas = quotas_of(weights_at(step), "weights");
  config.next_change = applied < edits_.size() ? edits_[applied].step : UINT64_MAX;
  // Inside a ramp every step changes the quotas.
  for (size_t i = 0; i < applied; ++i) {
    const MixEdit& e = edits_[i];
    if (e.kind == MixEdit::Kind::kWeights && e.step <= step && step < e.until) {
      config.next_change = std::min(config.next_change, step + 1);
    }
  }
  return config;
}

Mixer::EpochOrder Mixer::order_of(uint32_t source, uint64_t epoch,
                                  const std::vector<Landing>& landings,
                                  const DocumentLengths& lengths) const {
  uint64_t size = first_documents(source);
  for (const Landing& l : landings) {
    if (l.source == source && l.epoch < epoch) size += edits_[l.edit].documents->documents();
  }
  EpochOrder order;
  const SourceOrder kind = source < orders_.size() ? orders_[source] : SourceOrder{};
  if (kind.block > 0) {
    order.blocks.emplace(size, kind.block, kind.window, Seed(source_seed(seed_, source)), epoch);
  } else {
    order.base = FeistelPermutation(size, source_seed(seed_, source), epoch);
  }
  for (const Landing& l : landings) {
    if (l.source != source || l.epoch != epoch) continue;
    const uint64_t before = order.size();
    if (l.start > before) {
      invalid("landing of edit " + std::to_string(l.edit) + " at position " +
              std::to_string(l.start) + " but source " + std::to_string(source) + " epoch " +
              std::to_string(epoch) + " had " + std::to_string(before) + " positions");
    }
    const uint64_t added = edits_[l.edit].documents->documents();
    order.parts.push_back(EpochOrder::Part{
        l.start, before,
        FeistelPermutation(before - l.start + added,
                           derive_key(source_seed(seed_, source), l.edit, kDomainTokensAppend),
                           epoch)});
  }
  if (order.size() > lengths.documents()) {
    invalid("source " + std::to_string(source) + " epoch " + std::to_string(epoch) + " has " +
            std::to_string(order.size()) + " positions but " +
            std::to_string(lengths.documents()) + " documents");
  }
  return order;
}

uint64_t Mixer::document_at(uint32_t source, uint64_t epoch, uint64_t position) const {
  if (epoch == mix_.cursors[source].epoch) return live_[source].order.at(position);
  return order_of(source, epoch, mix_.landings, *sources_[source]).at(position);
}

std::vector<uint64_t> Mixer::epoch_documents(uint32_t source, uint64_t epoch,
                                             uint64_t count) const {
  const EpochOrder order = order_of(source, epoch, mix_.landings, *sources_[source]);
  std::vector<uint64_t> out;
  for (uint64_t p = 0; p < count && p < order.size(); ++p) out.push_back(order.at(p));
  return out;
}

std::optional<uint64_t> Mixer::position_of(uint32_t source, uint64_t epoch,
                                           uint64_t document) const {
  if (source >= sources_.size()) return std::nullopt;
  if (epoch == mix_.cursors[source].epoch) return live_[source].order.position_of(document);
  return order_of(source, epoch, mix_.landings, *sources_[source]).position_of(document);
}

uint64_t Mixer::epoch_size(uint32_t source, uint64_t epoch) const {
  return order_of(source, epoch, mix_.landings, *sources_[source]).size();
}

void Mixer::prefetch_next() const {
  std::vector<uint64_t> documents;
  for (size_t s = 0; s < live_.size(); ++s) {
    const uint64_t position = mix_.cursors[s].position;
    const uint64_t size = live_[s].order.size();
    if (position >= size) continue;
    documents.resize(std::min(kFirstReadAhead, size - position));
    live_[s].order.gather(position, documents.size(), documents.data());
    sources_[s]->prefetch(documents.data(), documents.size());
  }
}

void Mixer::advance(uint64_t step) {
  if (step < next_change_) return;
  size_t last = applied_;
  while (last < edits_.size() && edits_[last].step <= step) ++last;
  Config config = config_at(step);
  // Appends: a new source starts at its first document; documents appended to a source join
  // the unread rest of its current epoch (a document begun stays where it is).
  sources_ = config.sources;
  for (size_t i = applied_; i < last; ++i) {
    const MixEdit& e = edits_[i];
    if (e.kind != MixEdit::Kind::kAppend) continue;
    if (creates_[i]) {
      mix_.cursors.push_back(SourceCursor{});
      mix_.targets.push_back(0);
      live_.emplace_back();
      live_.back().set_order(order_of(e.source, 0, mix_.landings, *sources_[e.source]));
    } else {
      const SourceCursor& c = mix_.cursors[e.source];
      mix_.landings.push_back(Landing{i, e.source, c.epoch, c.position + (c.offset > 0 ? 1 : 0)});
      live_[e.source].set_order(order_of(e.source, c.epoch, mix_.landings, *sources_[e.source]));
    }
  }
  applied_ = last;
  heaps_valid_ = false;
  for (size_t s = 0; s < sources_.size(); ++s) settle(static_cast<uint32_t>(s));
  // Weights: each source's share so far is kept, and the new weights share what comes next.
  if (config.quotas != quotas_) {
    for (size_t s = 0; s < quotas_.size(); ++s) mix_.targets[s] += Wide{quotas_[s]} * (total_ - mix_.base);
    mix_.base = total_;
    quotas_ = std::move(config.quotas);
  }
  mix_.step = step;
  next_change_ = config.next_change;
}


}  // namespace distsampler
