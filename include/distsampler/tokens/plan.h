// plan.h: the global stream of training sequences of a language-model run, a pure function of
// (the sources' document lengths, their token weights, seed, sequence length, packing), and the
// sequences each rank reads per step.
//
// The mixer (mix.h) gives pieces of at most L + 1 tokens; the packing turns them into sequences
// of L + 1 tokens (inputs are the first L, labels the last L):
// - concat (Megatron's GPTDataset): the pieces back to back, sequence k = tokens [k L, k L + L + 1)
//   of that stream, consecutive sequences sharing one token;
// - best-fit: windows of `window` pieces, each packed best-fit decreasing into bins of L + 1
//   tokens (a piece goes to the fullest bin it fits, a new bin when none), the bins in the order
//   they were opened, each padded to L + 1; a document is cut only when it is longer than L + 1.
// Sequence k carries its spans (source, document, token range), which are its document
// boundaries. Step s is sequences [s B, s B + B); rank r of W reads [s B + r B / W, + B / W), so
// the stream does not depend on W, and every rank plans from lengths alone.
//
// Megatron's GPTDataset builds three arrays before the first sample: the document index (each
// epoch's documents, shuffled), the sample index (where each sample starts in it) and the shuffle
// index (the order of samples); BlendedDataset adds two more (which dataset, which sample). Here
// mix.h's per-source FeistelPermutation replaces the document index, the mixer and the packing
// replace the sample index and the blending arrays, and nothing replaces the shuffle index:
// documents are shuffled, sequences are read in order. The state is O(sources): the mixer's
// cursors at an anchor, and how far past it the plan stands.
#ifndef DISTSAMPLER_TOKENS_PLAN_H_
#define DISTSAMPLER_TOKENS_PLAN_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "distsampler/state_dict.h"
#include "distsampler/tokens/mix.h"
#include "distsampler/variants.h"

namespace distsampler {

enum class Packing { kConcat, kBestFit };
// The packings by name (--packing, Python's packing=, the checkpoint's config): one row each.
inline constexpr VariantRow<Packing> kPackings[] = {
    {Packing::kConcat, "concat", 0},  // Megatron's concat-then-split
    {Packing::kBestFit, "best-fit", 1},
};
std::string_view to_string(Packing packing);  // "concat", "best-fit"
// Throws std::invalid_argument naming `parameter`, the text and the allowed names.
Packing parse_packing(std::string_view text, std::string_view parameter = "packing");

struct TokenPlanOptions {
  std::vector<double> weights;  // one per source, token weights (normalized here)
  uint64_t seq_len = 0;         // L >= 1: a sequence holds L + 1 tokens
  uint64_t global_batch = 1;    // B >= 1 sequences per step
  uint64_t seed = 0;
  Packing packing = Packing::kConcat;
  uint64_t window = kDefaultWindow;  // best-fit: pieces packed together
  // Changes from a step on (mix.h's MixEdit): weights and ramps, appended documents and sources,
  // skip lists. Steps before an edit's are the same sequences as without it.
  std::vector<MixEdit> edits;
  // Held-out splits (mix.h's SplitRule): the fractions (train, validation, test; empty: no split)
  // and the subset read. Train is endless; valid and test are one pass (an evaluation): every
  // document of the subset once, then exhausted(), later sequences empty (padding rows).
  std::vector<double> split;
  Split subset = Split::kTrain;
  // The end-of-document token the reader appends to each non-empty document (loader/tokens.h's
  // IndexedLengths), when it does: the lengths given count it already; the config records it.
  std::optional<uint64_t> appended_eod;
  // Per source its document order (mix.h's SourceOrder: the global shuffle, or blocks shuffled
  // within windows for an object store); empty: the global shuffle for every source.
  std::vector<SourceOrder> orders;
  static constexpr uint64_t kDefaultWindow = 1024;
  static constexpr uint64_t kMaxWindow = uint64_t{1} << 24;
  static constexpr uint64_t kMaxSeqLen = uint64_t{1} << 30;
};

// Tokens [begin, end) of `document` of `source`, read in the source's epoch `epoch`.
struct Span {
  uint32_t source = 0;
  uint64_t document = 0;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t epoch = 0;
  bool operator==(const Span& o) const {
    return source == o.source && document == o.document && begin == o.begin && end == o.end &&
           epoch == o.epoch;
  }
};

struct PlannedSequence {
  uint64_t index = 0;  // k, the global sequence index
  std::vector<Span> spans;
  uint64_t tokens() const;  // L + 1, or fewer for a best-fit bin (the rest is padding)
};

// A position in the plan: the next sequence, and the mixer at an anchor (concat: before the piece
// holding that sequence's first token, `skip` of its tokens before it; best-fit: before the
// window, `skip` of its bins already given).
struct TokenPlanState {
  uint64_t sequence = 0;
  MixState mix;
  uint64_t skip = 0;
  bool operator==(const TokenPlanState& o) const {
    return sequence == o.sequence && mix == o.mix && skip == o.skip;
  }
};

// TokenPlanState as words, for a plan feed's shared memory (node/plan_feed.h): sequence, skip,
// mix step, base, then counted lists of cursors (4 words: epoch, position, offset, consumed),
// targets (2: high, low, as the checkpoint's dict stores them) and landings (4). Both codecs of
// the state live in plan.cc (its dict: TokenPlan::state_dict), so its layout has one owner.
// token_state_from_words: nullopt when the words are not a state (never trusted).
std::vector<uint64_t> token_state_words(const TokenPlanState& s);
std::optional<TokenPlanState> token_state_from_words(const std::vector<uint64_t>& w);

// The sequences [first, first + count) rank `rank` of `world_size` reads at `step`. Throws
// std::invalid_argument naming the parameter when world_size is 0, rank >= world_size, or the
// global batch is not a multiple of world_size.
struct RankSequences {
  uint64_t first = 0;
  uint64_t count = 0;
};
RankSequences rank_sequences(uint64_t global_batch, uint64_t world_size, uint64_t rank,
                             uint64_t step);

class TokenPlan {
 public:
  // The state_dict format's version of this plan ("config"'s "plan" entry).
  static constexpr uint64_t kVersion = 1;
  static constexpr const char* kStateKind = "TokenStream";

  // Throws std::invalid_argument naming the parameter (the mixer's checks, seq_len outside
  // [1, 2^30], global_batch 0, window outside [1, 2^24] for best-fit).
  TokenPlan(std::vector<std::shared_ptr<const DocumentLengths>> sources, TokenPlanOptions options);

  // The next global sequence.
  PlannedSequence next();
  // Step `state().sequence / B`'s B sequences, with the ones rank `rank` of `world_size` reads
  // in `mine`. Throws std::logic_error when the plan is not at a step boundary.
  std::vector<PlannedSequence> next_step(uint64_t world_size, uint64_t rank);
  // The same for the sequences [first, first + count) of the step (0 <= first <= first + count
  // <= B); the others are planned without their spans. Throws std::invalid_argument for a range
  // outside the step.
  std::vector<PlannedSequence> next_step_rows(uint64_t first, uint64_t count);
  uint64_t sequence() const { return sequence_; }
  // A single pass (subset valid or test): whether every token of the subset is in sequences
  // already given (next() gives empty sequences from here on). Always false for training.
  bool exhausted() const;
  uint64_t step() const { return sequence_ / options_.global_batch; }

  TokenPlanState state() const;
  // Moves to `state` (from state() of a plan with the same configuration). Throws
  // std::invalid_argument naming the field when it cannot be a state of this plan; a failed load
  // changes nothing.
  void load(const TokenPlanState& state);

  // What a checkpoint at `sequence` must match: {"plan", "sources": [[documents, tokens], ...],
  // "quotas", "seq_len", "global_batch", "seed", "packing", "window"}, "split" and "subset" when
  // split (the fractions, the subset's name), "append_eod" when appended_eod, and "edits": those of
  // step 0 and of steps before `sequence`'s (those that shaped the stream so far), when there are
  // any (a checkpoint's "position" then holds the mixer's "mix": what is in force, where appends
  // landed).
  DictValue config(uint64_t sequence) const;
  // The policies' checkpoint format (state_dict.h): kind "TokenStream", consumed = the next
  // sequence, the cursors and skip under "position"; world_size is only recorded.
  DictValue state_dict(uint64_t world_size) const;
  // Throws std::invalid_argument naming the entry (another configuration: every difference
  // named); a failed load changes nothing.
  void load_state_dict(const DictValue& state);

  const TokenPlanOptions& options() const { return options_; }
  const Mixer& mixer() const { return mixer_; }
  // Provenance's ledger (tokens/where.h's index, explain): from here on, each source's tokens in
  // the sequences planned (their spans' sum, counted whether or not the spans are built), on
  // top of `from` (per source; sources added later start at 0). Not the plan's state: load()
  // leaves it as it is, for the caller to set.
  void count_tokens(std::vector<uint64_t> from) { ledger_ = std::move(from); }
  // The ledger, or nullptr when count_tokens was never called.
  const std::vector<uint64_t>* tokens_counted() const { return ledger_ ? &*ledger_ : nullptr; }
  uint64_t sequence_tokens() const { return options_.seq_len + 1; }

 private:
  void fill_window();
  PlannedSequence next(bool spans);  // without its spans when !spans (another rank's)
  PlannedSequence next_concat(bool spans);
  PlannedSequence next_best_fit(bool spans);

  TokenPlanOptions options_;
  DictValue config_;
  Mixer mixer_;
  std::vector<DictValue> edit_configs_;  // per edit of mixer_.edits(): what a checkpoint records
  uint64_t sequence_ = 0;
  // concat: the pieces from the one holding the next sequence's first token on, and how many
  // tokens of the first are behind that token.
  std::deque<Piece> pending_;
  uint64_t offset_ = 0;
  // concat: the anchor before pending_'s first piece when an edit took effect after it was drawn.
  std::optional<MixState> edit_anchor_;
  // best-fit: the window's bins, the next one to give, and the mixer before the window.
  std::vector<std::vector<Span>> bins_;
  uint64_t next_bin_ = 0;
  MixState anchor_;
  std::optional<std::vector<uint64_t>> ledger_;
  void count(uint32_t source, uint64_t tokens) {
    if (source >= ledger_->size()) ledger_->resize(source + 1, 0);
    (*ledger_)[source] += tokens;
  }
};

}  // namespace distsampler

#endif  // DISTSAMPLER_TOKENS_PLAN_H_
