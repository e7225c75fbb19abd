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
// Cost: O(log sources) a piece (two heaps of sources, Mixer::choose; an evaluation stream, whose
// sources drop out, scans them). Lengths are read a window of positions ahead, many at once
// (DocumentLengths::lengths), the next window's asked for in the background (prefetch).
//
// The mixer's state is one SourceCursor per source: O(sources), never a list of documents.
#ifndef DISTSAMPLER_TOKENS_MIX_H_
#define DISTSAMPLER_TOKENS_MIX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distsampler/feistel.h"
#include "distsampler/hash.h"  // detail::Uint128
#include "distsampler/policies/shards.h"
#include "distsampler/variants.h"

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
  // The lengths of documents[0, n) into out[0, n), each what length() gives, or kAskAlone where
  // that document's length() must be called by itself (it throws the error that explains why):
  // one call for many documents, so that a source on files reads them together (sorted,
  // neighbours in one read, several reads in flight) and not one read at a time. The default
  // calls length() for each.
  virtual void lengths(const uint64_t* documents, size_t n, uint32_t* out) const;
  static constexpr uint32_t kAskAlone = UINT32_MAX;
  // A hint that lengths() of these documents comes soon: a source on files starts reading them in
  // the background. The default does nothing. wants_prefetch(): whether it would do anything now
  // (false once every length it holds is in memory: the caller then skips listing documents).
  virtual void prefetch(const uint64_t* documents, size_t n) const {
    static_cast<void>(documents), static_cast<void>(n);
  }
  virtual bool wants_prefetch() const { return false; }
};

// DocumentLengths over a vector (tests, and sources whose lengths are known up front).
class LengthList : public DocumentLengths {
 public:
  explicit LengthList(std::vector<uint32_t> lengths);
  uint64_t documents() const override { return lengths_.size(); }
  uint64_t total_tokens() const override { return total_; }
  uint32_t length(uint64_t document) const override { return lengths_[document]; }
  void lengths(const uint64_t* documents, size_t n, uint32_t* out) const override;

 private:
  std::vector<uint32_t> lengths_;
  uint64_t total_ = 0;
};

// Documents of several DocumentLengths numbered one after the other (a source and the documents
// appended to it).
class ConcatLengths : public DocumentLengths {
 public:
  explicit ConcatLengths(std::vector<std::shared_ptr<const DocumentLengths>> parts);
  uint64_t documents() const override { return starts_.back(); }
  uint64_t total_tokens() const override { return total_; }
  uint32_t length(uint64_t document) const override;
  void lengths(const uint64_t* documents, size_t n, uint32_t* out) const override;
  void prefetch(const uint64_t* documents, size_t n) const override;
  bool wants_prefetch() const override;

 private:
  std::vector<std::shared_ptr<const DocumentLengths>> parts_;
  std::vector<uint64_t> starts_;  // part i holds documents [starts_[i], starts_[i + 1])
  uint64_t total_ = 0;
};

namespace detail {
// A source in one of the mixer's heaps, with its keys, constant between its picks and the edits:
// waiting, `time` is when it becomes eligible (ceil((2^32 c_s - A_s) / q_s) tokens since the
// weights in force took effect); eligible, its next piece's finish (2^32 (c_s + l_s) - A_s) / q_s
// is `finish` (the floor quotient) and `remainder`.
struct QueuedSource {
  int64_t time = 0;
  int64_t finish = 0;
  uint32_t remainder = 0;
  uint32_t source = 0;
};

// DocumentLengths::lengths over parts numbered one after the other (part i holds documents
// [starts[i], starts[i + 1])): `read` is called once per part with its documents, renumbered;
// a document past the last part is kAskAlone (with one part, that part answers for it).
using PartLengths = std::function<void(size_t part, const uint64_t* documents, size_t n,
                                       uint32_t* out)>;
void lengths_by_part(const std::vector<uint64_t>& starts, const uint64_t* documents, size_t n,
                     uint32_t* out, const PartLengths& read);
}  // namespace detail

// Held-out splits (Megatron's `split`, "969,30,1"): each document of each source belongs to one
// of train / validation / test by a hash of (source index, document number), never by position,
// so a document's split is the same on every machine and W, whatever the seed (a run's seed can
// change without moving documents between splits), and documents appended to a source are split
// by the same rule. Fractions are fixed-point: document d of source s is in train when the high
// 32 bits of hash_at(derive_key(0, s, kDomainTokensSplit), d) are below bounds[0], in validation
// below bounds[1], in test otherwise.
enum class Split : uint8_t { kTrain, kValidation, kTest };
// The subsets by name (--subset, Python's subset=, the checkpoint's config): one row each.
inline constexpr VariantRow<Split> kSplits[] = {
    {Split::kTrain, "train", 0},
    {Split::kValidation, "valid", 1},
    {Split::kTest, "test", 2},
};
std::string_view to_string(Split split);  // "train", "valid", "test"
// Throws std::invalid_argument naming `parameter`, the text and the allowed names.
Split parse_split(std::string_view text, std::string_view parameter = "subset");

class SplitRule {
 public:
  SplitRule() = default;  // no split: every document is in whichever subset a stream reads
  // One to three fractions (train, validation, test; missing ones 0), each finite and >= 0,
  // with a positive sum. Throws std::invalid_argument naming `parameter` otherwise.
  explicit SplitRule(std::vector<double> fractions, std::string_view parameter = "split");
  bool empty() const { return fractions_.empty(); }
  const std::vector<double>& fractions() const { return fractions_; }
  Split of(uint32_t source, uint64_t document) const;

 private:
  std::vector<double> fractions_;
  uint64_t bounds_[2] = {0, 0};
};

// What a stream reads of its sources: one subset of a split, and whether once (an evaluation:
// each document of the subset once, then the stream ends) or epoch after epoch (training).
struct Holdout {
  SplitRule rule;
  Split subset = Split::kTrain;
  bool single_pass = false;
  bool reads(uint32_t source, uint64_t document) const {
    return rule.empty() || rule.of(source, document) == subset;
  }
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

// A change of the mix in force from plan step `step` on (the plan applies it before the first
// piece it draws for a sequence of that step or later; docs/tokens.md, "Edits").
struct MixEdit {
  enum class Kind { kWeights, kAppend, kSkip };
  Kind kind = Kind::kWeights;
  uint64_t step = 0;
  // kWeights: one weight per source (new ones included). until <= step (the default 0 too): the
  // weights from `step` on; until > step: a linear ramp from the weights in force at `step` to
  // these at `until`. So no MixEdit is a bad ramp: the rule that a ramp a user writes ends after
  // it starts is weights_edit's (loader/tokens.h), the one constructor of both edges' ramps.
  std::vector<double> weights;
  uint64_t until = 0;
  // kAppend: `documents` join source `source`, numbered after its own, and the unread rest of
  // its current epoch; `source` equal to the sources in force adds a new source.
  uint32_t source = 0;
  std::shared_ptr<const DocumentLengths> documents;
  // kSkip: (source, document) pairs never read from `step` on.
  std::vector<std::pair<uint32_t, uint64_t>> skip;
  // How the caller named the edit (a flag, an argument): every message about it starts with it.
  std::string label;
};

// Where append edit `edit` (its index among the mixer's edits, sorted by step) joined `source`:
// in source epoch `epoch`, after its first `start` positions.
struct Landing {
  uint64_t edit = 0;
  uint32_t source = 0;
  uint64_t epoch = 0;
  uint64_t start = 0;
  bool operator==(const Landing& o) const {
    return edit == o.edit && source == o.source && epoch == o.epoch && start == o.start;
  }
};

// A source's document order within an epoch. block = 0 (the default): the global shuffle, a
// keyed permutation of all its documents. block >= 1: the locality order for an object store,
// policies/shards.h's BlockShardOrder: documents in blocks of `block` contiguous ones, the blocks
// in a keyed order, the documents shuffled within windows of `window` blocks, so that a stretch
// of the order reads about `window` blocks (each block one ranged read, kept while its window
// lasts). Documents appended by an edit join the rest of the epoch by a keyed permutation, as
// with the global shuffle.
struct SourceOrder {
  uint64_t block = 0;
  uint64_t window = 1;
  bool operator==(const SourceOrder& o) const { return block == o.block && window == o.window; }
};

// The one check of a locality order as its user gives it (TokenStream's locality[s], the CLI's
// --locality S:BLOCK:WINDOW, a C++ plan's orders[s] with a block): a block of at least 1 document
// and a window of at least 1 block; std::invalid_argument naming `what`, the values and what is
// allowed otherwise.
SourceOrder locality_order(int64_t block, int64_t window, const std::string& what);

// The mixer's state: O(sources + edits).
struct MixState {
  std::vector<SourceCursor> cursors;
  // The step of the latest edit in force (0 before any), the total tokens when the weights in
  // force took effect, and per source its share of the tokens before that, times 2^32.
  uint64_t step = 0;
  uint64_t base = 0;
  std::vector<detail::Uint128> targets;
  std::vector<Landing> landings;
  bool operator==(const MixState& o) const {
    return cursors == o.cursors && step == o.step && base == o.base && targets == o.targets &&
           landings == o.landings;
  }
};

class Mixer {
 public:
  // Quotas: weights scaled to integers summing to exactly 2^32.
  static constexpr int kQuotaBits = 32;
  // At most this many sources.
  static constexpr uint64_t kMaxSources = uint64_t{1} << 20;
  // Lengths read ahead: a source's first read covers kFirstReadAhead positions of its order, each
  // next one twice the last, up to kReadAheadEntries / sources (at least kFirstReadAhead, at most
  // kMaxReadAhead): 12 bytes each, at most 12 MB for all sources (more only past 65,536 sources).
  static constexpr uint64_t kFirstReadAhead = 16;
  static constexpr uint64_t kMaxReadAhead = 16384;
  static constexpr uint64_t kReadAheadEntries = uint64_t{1} << 20;

  // Throws std::invalid_argument naming the parameter: no sources, more than kMaxSources, a
  // weight count other than the source count, a weight that is not finite and positive or below
  // 2^-32 of their sum, a source without tokens, piece_tokens of 0; an edit that cannot apply
  // (named by its label); a holdout whose subset no document of a source (training) or of any
  // source (single pass) with tokens falls in; a single pass with edits after step 0.
  // A single pass marks a source that has read its last document with cursor epoch 1; pieces
  // come from the sources not yet done (by WF2Q while one is eligible, else the earliest finish).
  // `orders`: per source its SourceOrder (empty, or missing for a source: the global shuffle);
  // std::invalid_argument for an order with a block that locality_order refuses, or more orders
  // than sources.
  Mixer(std::vector<std::shared_ptr<const DocumentLengths>> sources, std::vector<double> weights,
        uint64_t seed, uint64_t piece_tokens, std::vector<MixEdit> edits = {},
        Holdout holdout = {}, std::vector<SourceOrder> orders = {});
  const std::vector<SourceOrder>& orders() const { return orders_; }
  // The weights in force at plan step `step` (new sources included; inside a ramp, the linear
  // blend of its normalized ends): the one owner of the mix at a step, which the quotas come from
  // and an evaluation stream mixes by (at UINT64_MAX, every edit in force).
  std::vector<double> weights_at(uint64_t step) const;

  // Whether edits take effect by plan step `step`, and applying them (no piece is drawn between
  // the two: the plan calls them before its next draw).
  bool changes_by(uint64_t step) const { return step >= next_change_; }
  void advance(uint64_t step);

  // The next piece of the stream; std::logic_error once a single pass is exhausted().
  Piece next();
  // A single pass: whether source `source` has read every document of its subset; whether all
  // have (no piece left). Always false for an endless stream.
  bool exhausted(uint32_t source) const {
    return holdout_.single_pass && mix_.cursors[source].epoch > 0;
  }
  bool exhausted() const;
  const Holdout& holdout() const { return holdout_; }
  // Whether the stream reads `document` of `source` (its split is the subset read).
  bool reads(uint32_t source, uint64_t document) const {
    return holdout_.reads(source, document);
  }
  // The state before the next piece.
  MixState state() const;
  const std::vector<SourceCursor>& cursors() const { return mix_.cursors; }
  // The state as it stood before `piece` (one this mixer gave since its last edit, of the
  // source's current position) was taken: for a state that rewinds pieces already drawn.
  static void rewind(MixState& state, const Piece& piece);
  // Continues from `state` (what state() returned, on any machine). Throws
  // std::invalid_argument naming the source and the field when it cannot be a state of this
  // mixer; a failed restore changes nothing.
  void restore(const MixState& state);

  size_t sources() const { return sources_.size(); }
  const std::vector<uint64_t>& quotas() const { return quotas_; }
  uint64_t piece_tokens() const { return piece_tokens_; }
  const std::vector<MixEdit>& edits() const { return edits_; }
  // Tokens given by all sources.
  uint64_t total() const { return total_; }
  // The document at `position` of source `source`'s order in source epoch `epoch` (one this
  // mixer has entered).
  uint64_t document_at(uint32_t source, uint64_t epoch, uint64_t position) const;
  const DocumentLengths& lengths(uint32_t source) const { return *sources_[source]; }
  // Whether `document` of `source` is on a skip list in force.
  bool skipped(uint32_t source, uint64_t document) const;
  // The documents at positions [0, count) of source `source`'s order in source epoch `epoch` (one
  // this mixer has entered), and how many positions that epoch has (so far, for the live one).
  std::vector<uint64_t> epoch_documents(uint32_t source, uint64_t epoch, uint64_t count) const;
  uint64_t epoch_size(uint32_t source, uint64_t epoch) const;
  // The inverse of document_at: the position of `document` in source `source`'s order in source
  // epoch `epoch` (one this mixer has entered, with the landings it knows), nullopt when that
  // epoch's order does not hold it (a document appended after the epoch began, and not landed in
  // it). O(landings in the epoch).
  std::optional<uint64_t> position_of(uint32_t source, uint64_t epoch, uint64_t document) const;

 private:
  // A source's order in one source epoch: a FeistelPermutation over the documents it had when
  // the epoch began, each landing reshuffling the unread rest with the appended documents.
  struct EpochOrder {
    struct Part {
      uint64_t start = 0, before = 0;  // the positions kept, and the size before the landing
      FeistelPermutation rest;         // over (before - start) + appended positions
    };
    FeistelPermutation base;
    std::optional<BlockShardOrder> blocks;  // instead of base: a source's locality order
    std::vector<Part> parts;
    uint64_t size() const {
      return parts.empty() ? (blocks ? blocks->size() : base.size())
                           : parts.back().start + parts.back().rest.size();
    }
    uint64_t at(uint64_t position) const;
    std::optional<uint64_t> position_of(uint64_t document) const;  // at()'s inverse
    void gather(uint64_t first, uint64_t count, uint64_t* out) const;  // at(first + i)
  };
  struct Live {  // per source: the current epoch's order and the next piece's document
    EpochOrder order;
    uint64_t document = 0;
    uint64_t length = 0;  // tokens of `document`
    // Read ahead: the documents at positions [ahead_from, ahead_from + ahead.size()) of `order`
    // and their lengths (kAskAlone: ask length()). A cache of pure functions of the order and
    // the lengths, never state; emptied when `order` changes.
    uint64_t ahead_from = 0;
    std::vector<uint64_t> ahead_documents;
    std::vector<uint32_t> ahead;
    uint64_t window = 0;  // positions the last read ahead covered
    void set_order(EpochOrder o) {
      order = std::move(o);
      ahead_documents.clear();
      ahead.clear();
    }
  };
  // What is in force at a step, a pure function of the options and the edits.
  struct Config {
    std::vector<std::shared_ptr<const DocumentLengths>> sources;
    std::vector<uint64_t> quotas;
    uint64_t next_change = 0;
  };
  Config config_at(uint64_t step) const;
  uint64_t first_documents(uint32_t source) const;  // documents it started with
  EpochOrder order_of(uint32_t source, uint64_t epoch, const std::vector<Landing>& landings,
                      const DocumentLengths& lengths) const;
  // Sets live_[source]'s document and length to those at `position` of its order, reading the
  // lengths of the positions after it ahead (kFirstReadAhead positions, doubling each time).
  void look(uint32_t source, uint64_t position);
  // Asks every source to read its next kFirstReadAhead positions' lengths in the background, so
  // that the sources' first reads (a plan made or restored) are in flight together.
  void prefetch_next() const;
  void settle(uint32_t source);  // skip empty, skipped and held-out documents, enter the next
                                 // epoch (a single pass: mark the source done), refresh live_
  bool has_subset_tokens(uint32_t source, const DocumentLengths& lengths) const;
  uint64_t piece_length(uint32_t source) const;
  // WF2Q's choice (next()'s comment): by the linear scan (a single pass, whose sources drop out),
  // or by the two heaps below in O(log sources).
  // choose(): *queued when the heaps chose (their keys fit 64 bits), the choice then taken off.
  size_t choose_linear() const;
  size_t choose(bool* queued);
  bool wait(uint32_t source);  // pushes `source` on waiting_ with its keys; false: they don't fit

  // Heaps (std::push_heap's, the least key on top): the eligible sources by (finish, index), the
  // others by (time, index). Rebuilt after an edit or a restore (heaps_valid_ false).
  std::vector<detail::QueuedSource> eligible_, waiting_;
  bool heaps_valid_ = false;

  std::vector<std::shared_ptr<const DocumentLengths>> initial_;
  std::vector<double> initial_weights_;
  std::vector<MixEdit> edits_;  // sorted by step, stably
  std::vector<std::vector<double>> ramp_from_;  // per edit: a ramp's starting weights
  std::vector<bool> creates_;                   // per edit: an append adding a new source
  uint64_t seed_ = 0;
  uint64_t piece_tokens_ = 0;
  Holdout holdout_;
  std::vector<SourceOrder> orders_;  // per initial source; later ones the global shuffle

  std::vector<std::shared_ptr<const DocumentLengths>> sources_;
  std::vector<uint64_t> quotas_;
  uint64_t next_change_ = 0;
  size_t applied_ = 0;  // the edits in force (a prefix of edits_)
  MixState mix_;
  std::vector<Live> live_;
  uint64_t total_ = 0;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_TOKENS_MIX_H_
