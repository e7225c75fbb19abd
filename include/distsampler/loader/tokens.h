// tokens.h: a token plan's sequences (tokens/plan.h) read from Megatron indexed sources, as rows
// of L + 1 tokens with each token's offset in its document and its span (document boundaries).
#ifndef DISTSAMPLER_LOADER_TOKENS_H_
#define DISTSAMPLER_LOADER_TOKENS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distsampler/loader/indexed.h"
#include "distsampler/tokens/plan.h"

namespace distsampler {

// An indexed source's document lengths, for the plan: O(1) to open, lengths read on demand.
// With `eod` (Megatron's preprocess_data.py --append-eod, done by the reader for files written
// without it), each non-empty document has one more token, `eod`, after its last: lengths and
// the total count it (opening then reads every length once, to count the non-empty documents).
class IndexedLengths : public DocumentLengths {
 public:
  explicit IndexedLengths(std::shared_ptr<const IndexedSource> source,
                          std::optional<int64_t> eod = std::nullopt);
  uint64_t documents() const override { return source_->documents(); }
  uint64_t total_tokens() const override { return total_; }
  uint32_t length(uint64_t document) const override {
    const uint32_t n = source_->length(document);
    return n + (eod_ && n > 0 ? 1 : 0);
  }
  void lengths(const uint64_t* documents, size_t n, uint32_t* out) const override;
  void prefetch(const uint64_t* documents, size_t n) const override {
    source_->prefetch(documents, n);
  }
  bool wants_prefetch() const override { return source_->wants_prefetch(); }
  const IndexedSource& source() const { return *source_; }
  // Tokens [begin, end) of `document` (length() counting the appended EOD) into out.
  void read(uint64_t document, uint64_t begin, uint64_t end, int64_t* out) const;

 private:
  std::shared_ptr<const IndexedSource> source_;
  std::optional<int64_t> eod_;
  uint64_t total_ = 0;
};

// The sources of a run, opened once: prefixes[s] are the shards of source s. Throws what
// IndexedSource throws, naming the source (`sources[s]: ...`).
std::vector<std::shared_ptr<const IndexedLengths>> open_token_sources(
    const std::vector<std::vector<std::string>>& prefixes,
    std::optional<int64_t> eod = std::nullopt);

// The end-of-document token of a run: its id; whether the reader appends it after each non-empty
// document (files written without Megatron's --append-eod) or the files end documents with it
// already; and the parameter the user named it with (TokenStream's eod_token, the CLI's
// --append-eod), for errors.
struct EodToken {
  int64_t id = 0;
  bool appended = false;
  std::string parameter = "eod_token";
};
// `text`, the id as the user wrote it (a decimal integer), as a run's EOD token: the one check of
// the id that every edge makes. Throws std::invalid_argument naming `parameter`, the text and
// the range allowed, [0, 2^63 - 1], for anything else (negative, 2^63 or more, not an integer);
// open_token_run checks it against the sources' dtypes.
EodToken parse_eod_token(std::string_view text, bool appended, std::string parameter);

// An edit of a run over indexed sources: an append edit's documents are the shards `append`.
struct TokenEdit {
  MixEdit edit;
  std::vector<std::string> append;
};

// A weights edit labelled `label` (for errors): the weights from `step` on (no `until`), or a
// linear ramp to them from `step` to `until`. The one check of a ramp, the CLI's --ramp and
// TokenStream's ramps alike: throws std::invalid_argument naming the label and both steps unless
// until > step.
TokenEdit weights_edit(std::string label, uint64_t step, std::optional<uint64_t> until,
                       std::vector<double> weights);

// A source's shard prefixes as the CLI writes them: joined by commas. Throws
// std::invalid_argument, starting with `label`, for an empty list or an empty prefix.
std::vector<std::string> parse_shards(const std::string& list, const std::string& label);

// The edit flags of `distsampler tokens` (docs/tokens.md, "Edits"), in the order they are
// grouped in: --change STEP:W0,W1,..., --ramp A:B:W0,W1,..., --append STEP:S=PREFIX[,PREFIX...],
// --skip STEP:FILE (lines "source document", blank lines and # comments allowed; read here).
inline constexpr const char* kTokenEditFlags[] = {"--change", "--ramp", "--append", "--skip"};
// One edit flag's value as an edit, labelled "FLAG VALUE". Throws std::invalid_argument naming
// the flag, the value and what is expected.
TokenEdit parse_token_edit(const std::string& flag, const std::string& value);

// A run opened: the plan's sources and edits (appends' documents opened), and per source at the
// end of the edits (new ones included) every shard in the order its documents are numbered, its
// own then each append's by step, for reading.
struct TokenRun {
  std::vector<std::shared_ptr<const DocumentLengths>> sources;
  std::vector<MixEdit> edits;
  std::vector<std::shared_ptr<const IndexedLengths>> readers;
  // Per source, its shards followed by those its appends add (in the order the mixer numbers
  // them: by step, stably), as `readers` opens them; new sources last.
  std::vector<std::vector<std::string>> shards;
};
// Throws what open_token_sources throws, naming the edit by its label for an append's shards;
// std::invalid_argument naming eod->parameter, the id, the first source whose dtype cannot hold it
// (appended sources included) and that dtype's range, for an EOD token the files cannot hold
// (an appended one would be written into rows as another id, a masked one never found).
TokenRun open_token_run(const std::vector<std::vector<std::string>>& prefixes,
                        std::vector<TokenEdit> edits,
                        const std::optional<EodToken>& eod = std::nullopt);

// A row's segments: its runs of consecutive tokens of one document (one planned span, or several
// that continue each other). Where the mix interleaves sources, a segment may end inside its
// document, which goes on in a later row.
// What a token's position id counts from. kSegment: the first token of its segment, so positions
// restart at 0 at every document boundary and at the start of every row, and never reach the
// row's width: Megatron's --reset-position-ids, Hugging Face's
// DataCollatorWithFlattening, Grain's packers and OLMo-core's document-masked batches.
// kDocument: the first token of its document, so a document cut into pieces goes on counting past
// the row's width (the only convention of releases up to 0.1.0).
enum class TokenPositions { kSegment, kDocument };
std::string_view to_string(TokenPositions positions);  // "segment", "document"
// Throws std::invalid_argument naming `parameter`, the text and the allowed names.
TokenPositions parse_positions(std::string_view text, std::string_view parameter = "positions");

// Rows of `width` (= L + 1) values per sequence, row-major: the tokens (pad_token after the last
// span), each token's position id (TokenPositions; 0 on padding), and each token's segment index
// in its row (from 0; -1 on padding): the document boundaries for attention masks.
struct TokenRows {
  uint64_t rows = 0;
  uint64_t width = 0;
  std::vector<int64_t> tokens;
  std::vector<int64_t> positions;
  std::vector<int32_t> segments;
};

// flash-attention's varlen layout of rows of segment ids (TokenRows::segments, -1 on padding):
// `cu_seqlens`, the cumulative lengths of the runs of one segment among each row's non-padding
// tokens, row-major, from 0; `max_seqlen`, the longest run (0 for none). Row r's ids are
// segments[r * row_stride, + width).
struct VarlenMetadata {
  std::vector<int32_t> cu_seqlens;
  int64_t max_seqlen = 0;
};
VarlenMetadata varlen_metadata(const int32_t* segments, uint64_t rows, uint64_t width,
                               uint64_t row_stride);

// The loss mask of rows of `width` tokens (seq_len + 1: a row's inputs are its first width - 1
// tokens, its labels the last width - 1), out[r * (width - 1) + t] for label t of row r: 1 unless
// the label is padding (its segment id < 0), or, with `mask_cross_document`, it belongs to
// another segment than its input (the next document's first token), or the input is
// `eod_mask`'s token (Megatron's eod_mask_loss); 0 then. The one rule of every edge (Python's
// TokenStream, libtorch/tokens.h). width >= 1.
struct LossMaskRule {
  bool mask_cross_document = false;
  std::optional<int64_t> eod_mask;  // the end-of-document token whose next label is masked
};
void token_loss_mask(const int64_t* tokens, const int32_t* segments, uint64_t rows,
                     uint64_t width, const LossMaskRule& rule, float* out);

// Reads `sequences` of a plan over `sources` into rows of `width` tokens: from local files one span
// after the other; when some source is in an object store (IndexedSource::remote()), every span
// of the call at once, up to 16 requests in flight (detail::parallel_for), so that a step pays
// the store's latency about once per 16 spans, not once per span. Throws
// std::invalid_argument when a sequence holds more than `width` tokens or names a source that is
// not there, and what IndexedSource::read throws for a bad file.
TokenRows read_token_rows(const std::vector<std::shared_ptr<const IndexedLengths>>& sources,
                          const std::vector<PlannedSequence>& sequences, uint64_t width,
                          int64_t pad_token,
                          TokenPositions positions = TokenPositions::kSegment);
// The same into arrays of sequences.size() * width values each, which the caller owns (numpy's,
// in the Python binding: no copy).
struct TokenRowsOut {
  int64_t* tokens;
  int64_t* positions;
  int32_t* segments;
};
void read_token_rows(const std::vector<std::shared_ptr<const IndexedLengths>>& sources,
                     const std::vector<PlannedSequence>& sequences, uint64_t width,
                     int64_t pad_token, TokenPositions positions, TokenRowsOut out);

namespace detail {
class BlockUseList;
}

// Plan-aware eviction for the blocks of remote sources read in blocks
// (IndexedSource::read_in_blocks): a reader tells the process's cache which blocks its rows of
// each coming step read, and the step it reads now; the cache then drops the block whose next
// use is furthest away (Belady's rule; src/io/block_cache.h). Blocks no step added names are dropped first. Local
// sources, and sources not read in blocks, add nothing.
class BlockUses {
 public:
  BlockUses();
  ~BlockUses();
  BlockUses(const BlockUses&) = delete;
  BlockUses& operator=(const BlockUses&) = delete;
  // The reader's rows of `step` (steps added in increasing order).
  void add(uint64_t step, const std::vector<std::shared_ptr<const IndexedLengths>>& sources,
           const std::vector<PlannedSequence>& rows);
  void at(uint64_t step);  // the reader reads `step` now
  // How many steps ahead a reader adds: DISTSAMPLER_S3_LOOKAHEAD (default 64, 1 to 10^5); a
  // block next used further ahead counts as not named. Throws std::invalid_argument naming the
  // variable, its value and what is allowed.
  static uint64_t lookahead();

 private:
  std::unique_ptr<detail::BlockUseList> uses_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_LOADER_TOKENS_H_
