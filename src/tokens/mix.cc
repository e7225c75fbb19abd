// mix.cc: the WF2Q interleaving of token sources and its edits (mix.h). Exact integer arithmetic:
// quotas summing to 2^32 and token counts below 2^64 multiply into 128-bit products.
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

namespace distsampler {
namespace {

using Wide = unsigned __int128;
using SignedWide = __int128;
constexpr uint64_t kQuotaTotal = uint64_t{1} << Mixer::kQuotaBits;

[[noreturn]] void invalid(const std::string& message) { throw std::invalid_argument(message); }

std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

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

std::vector<double> normalized(const std::vector<double>& weights) {
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<double> out;
  for (double w : weights) out.push_back(w / sum);
  return out;
}

}  // namespace

std::string_view to_string(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kValidation:
      return "valid";
    case Split::kTest:
      return "test";
  }
  return "?";
}

Split parse_split(std::string_view text, std::string_view parameter) {
  if (text == "train") return Split::kTrain;
  if (text == "valid") return Split::kValidation;
  if (text == "test") return Split::kTest;
  invalid(std::string(parameter) + " = '" + std::string(text) +
          "'; allowed: 'train', 'valid' or 'test'");
}

SplitRule::SplitRule(std::vector<double> fractions, std::string_view parameter)
    : fractions_(std::move(fractions)) {
  const std::string name(parameter);
  if (fractions_.empty() || fractions_.size() > 3) {
    invalid(name + ": " + std::to_string(fractions_.size()) +
            " fractions given; 1 to 3 allowed (train, validation, test, as Megatron's "
            "split=\"969,30,1\")");
  }
  double sum = 0;
  for (size_t i = 0; i < fractions_.size(); ++i) {
    if (!std::isfinite(fractions_[i]) || fractions_[i] < 0) {
      invalid(name + "[" + std::to_string(i) + "] = " + number(fractions_[i]) +
              "; a fraction must be finite and >= 0");
    }
    sum += fractions_[i];
  }
  if (!(sum > 0) || !std::isfinite(sum)) {
    invalid(name + ": the fractions sum to " + number(sum) + "; their sum must be finite and > 0");
  }
  fractions_.resize(3, 0.0);
  // Cumulative bounds in units of 2^-32, rounded to nearest: exact 0 and 2^32 at the ends.
  double cumulative = 0;
  for (size_t i = 0; i < 2; ++i) {
    cumulative += fractions_[i];
    const double scaled = std::floor(std::ldexp(cumulative / sum, Mixer::kQuotaBits) + 0.5);
    bounds_[i] = std::min<uint64_t>(kQuotaTotal, static_cast<uint64_t>(scaled));
  }
}

Split SplitRule::of(uint32_t source, uint64_t document) const {
  const uint64_t h = hash_at(derive_key(0, source, kDomainTokensSplit), document) >> 32;
  return h < bounds_[0] ? Split::kTrain : h < bounds_[1] ? Split::kValidation : Split::kTest;
}

LengthList::LengthList(std::vector<uint32_t> lengths) : lengths_(std::move(lengths)) {
  for (uint32_t length : lengths_) total_ += length;
}

ConcatLengths::ConcatLengths(std::vector<std::shared_ptr<const DocumentLengths>> parts)
    : parts_(std::move(parts)), starts_{0} {
  for (const auto& part : parts_) {
    starts_.push_back(starts_.back() + part->documents());
    total_ += part->total_tokens();
  }
}

uint32_t ConcatLengths::length(uint64_t document) const {
  const size_t part = std::upper_bound(starts_.begin(), starts_.end(), document) - starts_.begin() - 1;
  return parts_[part]->length(document - starts_[part]);
}

void DocumentLengths::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  for (size_t i = 0; i < n; ++i) out[i] = length(documents[i]);
}

void LengthList::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  for (size_t i = 0; i < n; ++i) out[i] = lengths_[documents[i]];
}

void ConcatLengths::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  detail::lengths_by_part(starts_, documents, n, out,
                          [&](size_t part, const uint64_t* local, size_t count, uint32_t* into) {
                            parts_[part]->lengths(local, count, into);
                          });
}

void ConcatLengths::prefetch(const uint64_t* documents, size_t n) const {
  std::vector<uint32_t> unused(n);
  detail::lengths_by_part(starts_, documents, n, unused.data(),
                          [&](size_t part, const uint64_t* local, size_t count, uint32_t*) {
                            parts_[part]->prefetch(local, count);
                          });
}

bool ConcatLengths::wants_prefetch() const {
  for (const auto& part : parts_) {
    if (part->wants_prefetch()) return true;
  }
  return false;
}

namespace detail {

void lengths_by_part(const std::vector<uint64_t>& starts, const uint64_t* documents, size_t n,
                     uint32_t* out, const PartLengths& read) {
  if (starts.size() == 2) return read(0, documents, n, out);  // one part: it answers for all
  // Past the last part: kAskAlone (length() says why).
  std::vector<size_t> part_of(n);
  std::vector<size_t> count(starts.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    part_of[i] = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), documents[i]) -
                                     starts.begin()) - 1;
    ++count[part_of[i]];
    if (part_of[i] + 1 == starts.size()) out[i] = DocumentLengths::kAskAlone;
  }
  std::vector<uint64_t> local;
  std::vector<uint32_t> got;
  for (size_t part = 0; part + 1 < starts.size(); ++part) {
    if (count[part] == 0) continue;
    local.clear();
    for (size_t i = 0; i < n; ++i) {
      if (part_of[i] == part) local.push_back(documents[i] - starts[part]);
    }
    got.resize(local.size());
    read(part, local.data(), local.size(), got.data());
    for (size_t i = 0, k = 0; i < n; ++i) {
      if (part_of[i] == part) out[i] = got[k++];
    }
  }
}

}  // namespace detail

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
    invalid("orders: " + std::to_string(orders_.size()) + " given for " +
            std::to_string(initial_.size()) + " sources; allowed: at most one per source");
  }
  for (size_t s = 0; s < orders_.size(); ++s) {
    if (orders_[s].block > 0 && orders_[s].window == 0) {
      invalid("orders[" + std::to_string(s) + "]: window = 0; allowed: at least 1 block");
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
          if (e.until < e.step) e.until = e.step;
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
