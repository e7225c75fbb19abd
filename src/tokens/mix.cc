// mix.cc: the WF2Q interleaving of token sources (mix.h). Exact integer arithmetic: quotas below
// 2^33 and token counts below 2^64 multiply into unsigned 128-bit products.
#include "distsampler/tokens/mix.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "distsampler/hash.h"

namespace distsampler {
namespace {

using Wide = unsigned __int128;

[[noreturn]] void invalid(const std::string& message) { throw std::invalid_argument(message); }

std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

uint64_t source_seed(uint64_t seed, uint64_t source) {
  return derive_key(seed, source, kDomainTokens);
}

}  // namespace

LengthList::LengthList(std::vector<uint32_t> lengths) : lengths_(std::move(lengths)) {
  for (uint32_t length : lengths_) total_ += length;
}

Mixer::Mixer(std::vector<std::shared_ptr<const DocumentLengths>> sources,
             std::vector<double> weights, uint64_t seed, uint64_t piece_tokens)
    : sources_(std::move(sources)), seed_(seed), piece_tokens_(piece_tokens) {
  if (sources_.empty()) invalid("sources: none given; at least one source is needed");
  if (sources_.size() > kMaxSources) {
    invalid("sources: " + std::to_string(sources_.size()) + " given; at most " +
            std::to_string(kMaxSources) + " allowed");
  }
  if (weights.size() != sources_.size()) {
    invalid("weights: " + std::to_string(weights.size()) + " given for " +
            std::to_string(sources_.size()) + " sources; one weight per source");
  }
  if (piece_tokens_ == 0) invalid("piece_tokens = 0; at least 1 token per piece");
  double sum = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    if (!std::isfinite(weights[s]) || !(weights[s] > 0)) {
      invalid("weights[" + std::to_string(s) + "] = " + number(weights[s]) +
              "; a weight must be finite and positive");
    }
    sum += weights[s];
  }
  if (!std::isfinite(sum)) invalid("weights: their sum overflows; scale them down");
  for (size_t s = 0; s < weights.size(); ++s) {
    const double scaled = std::ldexp(weights[s] / sum, kQuotaBits);
    const uint64_t quota = static_cast<uint64_t>(std::llround(scaled));
    if (quota == 0) {
      invalid("weights[" + std::to_string(s) + "] = " + number(weights[s]) +
              " is below 2^-32 of the weights' sum (" + number(sum) + ")");
    }
    quotas_.push_back(quota);
    quota_sum_ += quota;
  }
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (!sources_[s]) invalid("sources[" + std::to_string(s) + "]: missing");
    if (sources_[s]->total_tokens() == 0) {
      invalid("sources[" + std::to_string(s) + "] has no tokens (" +
              std::to_string(sources_[s]->documents()) + " documents, all empty)");
    }
  }
  cursors_.assign(sources_.size(), SourceCursor{});
  live_.resize(sources_.size());
  for (size_t s = 0; s < sources_.size(); ++s) {
    const auto source = static_cast<uint32_t>(s);
    live_[s].order = FeistelPermutation(sources_[s]->documents(), source_seed(seed_, s), 0);
    settle(source);
  }
}

uint64_t Mixer::document_at(uint32_t source, uint64_t epoch, uint64_t position) const {
  if (epoch == cursors_[source].epoch) return live_[source].order.at(position);
  return FeistelPermutation(sources_[source]->documents(), source_seed(seed_, source), epoch)
      .at(position);
}

void Mixer::settle(uint32_t source) {
  SourceCursor& c = cursors_[source];
  Live& live = live_[source];
  const uint64_t documents = sources_[source]->documents();
  for (uint64_t visited = 0;; ++visited) {
    if (visited > documents) {  // a whole epoch of empty documents: the lengths contradict
      throw std::runtime_error("sources[" + std::to_string(source) + "]: every document is " +
                               "empty, but its total_tokens() = " +
                               std::to_string(sources_[source]->total_tokens()));
    }
    if (c.position == documents) {
      ++c.epoch;
      c.position = 0;
      c.offset = 0;
      live.order = FeistelPermutation(documents, source_seed(seed_, source), c.epoch);
    }
    live.document = live.order.at(c.position);
    live.length = sources_[source]->length(live.document);
    if (c.offset < live.length) return;
    ++c.position;  // the document is done (or empty)
    c.offset = 0;
  }
}

uint64_t Mixer::piece_length(uint32_t source) const {
  const uint64_t left = live_[source].length - cursors_[source].offset;
  return left < piece_tokens_ ? left : piece_tokens_;
}

Piece Mixer::next() {
  // WF2Q: among the sources whose service has not run ahead of their share (c_s * Q <= q_s * T),
  // the one whose next piece finishes first in the fluid schedule ((c_s + l_s) / q_s least; the
  // lowest index on a tie). Some source is always eligible: the shares sum to T.
  size_t best = sources_.size();
  Wide best_finish = 0;
  uint64_t best_quota = 1;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const SourceCursor& c = cursors_[s];
    if (Wide{c.consumed} * quota_sum_ > Wide{quotas_[s]} * total_) continue;
    const Wide finish = Wide{c.consumed} + piece_length(static_cast<uint32_t>(s));
    if (best == sources_.size() || finish * best_quota < best_finish * quotas_[s]) {
      best = s, best_finish = finish, best_quota = quotas_[s];
    }
  }
  const auto source = static_cast<uint32_t>(best);
  SourceCursor& c = cursors_[source];
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
  return piece;
}

void Mixer::rewind(std::vector<SourceCursor>& cursors, const Piece& piece) {
  SourceCursor& c = cursors[piece.source];
  c.epoch = piece.epoch;
  c.position = piece.position;
  c.offset = piece.begin;
  c.consumed -= piece.tokens();
}

void Mixer::restore(const std::vector<SourceCursor>& cursors) {
  if (cursors.size() != sources_.size()) {
    invalid("cursors: " + std::to_string(cursors.size()) + " given for " +
            std::to_string(sources_.size()) + " sources");
  }
  uint64_t total = 0;
  std::vector<Live> live(sources_.size());
  for (size_t s = 0; s < sources_.size(); ++s) {
    const SourceCursor& c = cursors[s];
    const std::string where = "cursors[" + std::to_string(s) + "].";
    const uint64_t documents = sources_[s]->documents();
    if (c.position >= documents) {
      invalid(where + "position = " + std::to_string(c.position) + "; the source has " +
              std::to_string(documents) + " documents");
    }
    if (c.epoch > FeistelPermutation::kMaxSize) {
      invalid(where + "epoch = " + std::to_string(c.epoch) + " is out of range");
    }
    live[s].order = FeistelPermutation(documents, source_seed(seed_, s), c.epoch);
    live[s].document = live[s].order.at(c.position);
    live[s].length = sources_[s]->length(live[s].document);
    if (c.offset >= live[s].length) {
      invalid(where + "offset = " + std::to_string(c.offset) + " but document " +
              std::to_string(live[s].document) + " has " + std::to_string(live[s].length) +
              " tokens");
    }
    if (total + c.consumed < total) invalid(where + "consumed overflows the total");
    total += c.consumed;
  }
  cursors_ = cursors;
  live_ = std::move(live);
  total_ = total;
}

}  // namespace distsampler
