// mix.h: many sources' documents, each in its own keyed order, interleaved by token weight into
// one stream of pieces (a document cut into parts of at most piece_tokens).
//
// Each source s has its documents in a random-access order per source epoch (a FeistelPermutation
// keyed by (seed, s), advanced to the next epoch when the source runs out): without replacement,
// every document of the epoch once, in O(1) memory. The sources are interleaved by WF2Q (Bennett
// and Zhang, "WF2Q: Worst-case Fair Weighted Fair Queueing", INFOCOM 1996): with c_s the tokens
// source s has given so far, T the sum of all c_s and w_s its weight, the next piece comes from
// the source with the earliest finish c_s + l_s over w_s (l_s its next piece's length) among the
// eligible ones, those with c_s <= w_s * T. The bound (tested in mix_test): at every piece
// boundary, for every source, |w_s * T - c_s| <= piece_tokens. Weights are fixed-point integers
// (quota_s = round(2^32 * weight_s / sum of weights), w_s = quota_s / the sum of quotas) and every
// comparison is exact integer arithmetic, so the stream is the same on every machine.
//
// The mixer's state is one SourceCursor per source: O(sources), never a list of documents.
#ifndef DISTSAMPLER_TOKENS_MIX_H_
#define DISTSAMPLER_TOKENS_MIX_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "distsampler/feistel.h"

namespace distsampler {

// The token counts of one source's documents (a Megatron indexed dataset, a list in a test).
// length() must be safe to call from several threads at once.
class DocumentLengths {
 public:
  virtual ~DocumentLengths() = default;
  virtual uint64_t documents() const = 0;
  virtual uint64_t total_tokens() const = 0;
  // Tokens of `document` < documents().
  virtual uint32_t length(uint64_t document) const = 0;
};

// DocumentLengths over a vector (tests, and sources whose lengths are known up front).
class LengthList : public DocumentLengths {
 public:
  explicit LengthList(std::vector<uint32_t> lengths);
  uint64_t documents() const override { return lengths_.size(); }
  uint64_t total_tokens() const override { return total_; }
  uint32_t length(uint64_t document) const override { return lengths_[document]; }

 private:
  std::vector<uint32_t> lengths_;
  uint64_t total_ = 0;
};

// Where a source stands: the next document is at `position` of its order in source epoch
// `epoch`, `offset` of its tokens already given; `consumed` tokens given in all.
struct SourceCursor {
  uint64_t epoch = 0;
  uint64_t position = 0;
  uint64_t offset = 0;
  uint64_t consumed = 0;
  bool operator==(const SourceCursor& o) const {
    return epoch == o.epoch && position == o.position && offset == o.offset &&
           consumed == o.consumed;
  }
};

// Tokens [begin, end) of `document` of `source`, found at `position` of the source's order in
// source epoch `epoch`.
struct Piece {
  uint32_t source = 0;
  uint64_t epoch = 0;
  uint64_t position = 0;
  uint64_t document = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t tokens() const { return end - begin; }
};

class Mixer {
 public:
  // Quotas: weights scaled to integers summing to about 2^32.
  static constexpr int kQuotaBits = 32;
  // At most this many sources.
  static constexpr uint64_t kMaxSources = uint64_t{1} << 20;

  // Throws std::invalid_argument naming the parameter: no sources, more than kMaxSources, a
  // weight count other than the source count, a weight that is not finite and positive or below
  // 2^-32 of their sum, a source without tokens, piece_tokens of 0.
  Mixer(std::vector<std::shared_ptr<const DocumentLengths>> sources, std::vector<double> weights,
        uint64_t seed, uint64_t piece_tokens);

  // The next piece of the stream.
  Piece next();
  // The state before the next piece.
  const std::vector<SourceCursor>& cursors() const { return cursors_; }
  // The cursors as they stood before `piece` (one this mixer gave, of the source's current
  // position) was taken: for a state that rewinds pieces already drawn.
  static void rewind(std::vector<SourceCursor>& cursors, const Piece& piece);
  // Continues from `cursors` (what cursors() returned, on any machine). Throws
  // std::invalid_argument naming the source and the field when they cannot be a state of this
  // mixer; a failed restore changes nothing.
  void restore(const std::vector<SourceCursor>& cursors);

  size_t sources() const { return sources_.size(); }
  const std::vector<uint64_t>& quotas() const { return quotas_; }
  uint64_t quota_sum() const { return quota_sum_; }
  uint64_t piece_tokens() const { return piece_tokens_; }
  // Tokens given by all sources.
  uint64_t total() const { return total_; }
  // The document at `position` of source `source`'s order in source epoch `epoch`.
  uint64_t document_at(uint32_t source, uint64_t epoch, uint64_t position) const;
  const DocumentLengths& lengths(uint32_t source) const { return *sources_[source]; }

 private:
  struct Live {  // per source: the current epoch's order and the next piece's document
    FeistelPermutation order;
    uint64_t document = 0;
    uint64_t length = 0;  // tokens of `document`
  };
  void settle(uint32_t source);  // skip empty documents, enter the next epoch, refresh live_
  uint64_t piece_length(uint32_t source) const;

  std::vector<std::shared_ptr<const DocumentLengths>> sources_;
  std::vector<uint64_t> quotas_;
  uint64_t quota_sum_ = 0;
  uint64_t seed_ = 0;
  uint64_t piece_tokens_ = 0;
  std::vector<SourceCursor> cursors_;
  std::vector<Live> live_;
  uint64_t total_ = 0;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_TOKENS_MIX_H_
