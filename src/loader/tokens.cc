// tokens.cc: reading a plan's sequences (loader/tokens.h).
#include "distsampler/loader/tokens.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "../io/block_cache.h"
#include "../io/bytes.h"
#include "../io/env.h"
#include "file.h"

namespace distsampler {

IndexedLengths::IndexedLengths(std::shared_ptr<const IndexedSource> source,
                               std::optional<int64_t> eod)
    : source_(std::move(source)), eod_(eod) {
  if (!source_) throw std::invalid_argument("source: missing");
  total_ = source_->total_tokens();
  if (eod_) {  // one EOD per document with tokens: the lengths read in blocks
    constexpr uint64_t kBlock = 1 << 16;
    std::vector<uint64_t> documents;
    std::vector<uint32_t> got;
    for (uint64_t first = 0; first < source_->documents(); first += kBlock) {
      const uint64_t count = std::min(kBlock, source_->documents() - first);
      documents.resize(count);
      got.resize(count);
      for (uint64_t i = 0; i < count; ++i) documents[i] = first + i;
      source_->lengths(documents.data(), count, got.data());
      for (uint64_t i = 0; i < count; ++i) {
        const uint32_t n = got[i] != kAskAlone ? got[i] : source_->length(first + i);
        total_ += n > 0 ? 1 : 0;
      }
    }
  }
}

void IndexedLengths::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  source_->lengths(documents, n, out);
  if (!eod_) return;
  for (size_t i = 0; i < n; ++i) out[i] += out[i] != kAskAlone && out[i] > 0 ? 1 : 0;
}

void IndexedLengths::read(uint64_t document, uint64_t begin, uint64_t end, int64_t* out) const {
  const uint64_t stored = source_->length(document);
  if (!eod_ || end <= stored) return source_->read(document, begin, end, out);
  if (begin < stored) source_->read(document, begin, stored, out);
  if (end != stored + 1 || stored == 0) {
    throw std::invalid_argument("document " + std::to_string(document) + ": tokens [" +
                                std::to_string(begin) + ", " + std::to_string(end) +
                                ") of " + std::to_string(length(document)));
  }
  out[stored - std::min(begin, stored)] = *eod_;
}

namespace {

// Opens sources `which` of `prefixes` into out[s], at once (each a few reads of its headers: a cold
// disk's or a remote file system's latency paid once for all, not once per source). Throws the
// error of the lowest failing source, naming it ("sources[s]: ...").
void open_sources(const std::vector<std::vector<std::string>>& prefixes,
                  const std::vector<size_t>& which, std::optional<int64_t> eod,
                  std::vector<std::shared_ptr<const IndexedLengths>>& out) {
  detail::parallel_for(0, which.size(), [&](size_t k) {
    const size_t s = which[k];
    const std::string where = "sources[" + std::to_string(s) + "]: ";
    try {
      out[s] = std::make_shared<IndexedLengths>(
          std::make_shared<const IndexedSource>(prefixes[s]), eod);
    } catch (const FormatError&) {
      throw;  // names its file already
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + e.what());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(where + e.what());
    }
  });
}

}  // namespace

std::vector<std::shared_ptr<const IndexedLengths>> open_token_sources(
    const std::vector<std::vector<std::string>>& prefixes, std::optional<int64_t> eod) {
  std::vector<std::shared_ptr<const IndexedLengths>> out(prefixes.size());
  std::vector<size_t> all(prefixes.size());
  for (size_t s = 0; s < all.size(); ++s) all[s] = s;
  open_sources(prefixes, all, eod, out);
  return out;
}

namespace {

[[noreturn]] void bad_edit(const std::string& label, const std::string& what) {
  throw std::invalid_argument(label + ": " + what);
}

uint64_t edit_u64(const std::string& text, const std::string& label, const char* what) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    bad_edit(label, std::string(what) + " '" + text + "' is not an integer in [0, 2^64 - 1]");
  }
  return value;
}

// "STEP:REST" -> STEP, and REST in `rest`.
uint64_t edit_step(const std::string& value, const std::string& label, const char* syntax,
                   std::string& rest) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) bad_edit(label, std::string("expected ") + syntax);
  rest = value.substr(colon + 1);
  return edit_u64(value.substr(0, colon), label, "step");
}

std::vector<double> edit_weights(const std::string& list, const std::string& label) {
  std::vector<double> weights;
  std::stringstream items(list + ",");
  for (std::string w; std::getline(items, w, ',');) {
    char* end = nullptr;
    const double value = std::strtod(w.c_str(), &end);
    if (w.empty() || end != w.c_str() + w.size() || !std::isfinite(value) || !(value > 0)) {
      bad_edit(label, "weight '" + w + "' is not a finite number > 0");
    }
    weights.push_back(value);
  }
  return weights;
}

uint32_t edit_source(const std::string& text, const std::string& label) {
  const uint64_t source = edit_u64(text, label, "source");
  if (source >= Mixer::kMaxSources) bad_edit(label, "source " + text + " is out of range");
  return static_cast<uint32_t>(source);
}

}  // namespace

TokenEdit weights_edit(std::string label, uint64_t step, std::optional<uint64_t> until,
                       std::vector<double> weights) {
  if (until && *until <= step) {
    bad_edit(label, "the ramp's end " + std::to_string(*until) + " must follow its start " +
                        std::to_string(step));
  }
  TokenEdit e;
  e.edit.label = std::move(label);
  e.edit.step = step;
  e.edit.until = until.value_or(step);
  e.edit.weights = std::move(weights);
  return e;
}

std::vector<std::string> parse_shards(const std::string& list, const std::string& label) {
  std::vector<std::string> shards;
  std::stringstream items(list + ",");
  for (std::string shard; std::getline(items, shard, ',');) {
    if (shard.empty()) bad_edit(label, "an empty shard prefix");
    shards.push_back(shard);
  }
  return shards;
}

TokenEdit parse_token_edit(const std::string& flag, const std::string& value) {
  TokenEdit e;
  e.edit.label = flag + " " + value;
  const std::string& label = e.edit.label;
  std::string rest;
  if (flag == "--change") {
    const uint64_t step = edit_step(value, label, "STEP:W0,W1,...", rest);
    return weights_edit(label, step, std::nullopt, edit_weights(rest, label));
  } else if (flag == "--ramp") {
    std::string weights;
    const uint64_t start = edit_step(value, label, "A:B:W0,W1,...", rest);
    const uint64_t end = edit_step(rest, label, "A:B:W0,W1,...", weights);
    return weights_edit(label, start, end, edit_weights(weights, label));
  } else if (flag == "--append") {
    e.edit.kind = MixEdit::Kind::kAppend;
    e.edit.step = edit_step(value, label, "STEP:SOURCE=PREFIX", rest);
    const size_t equals = rest.find('=');
    if (equals == std::string::npos) bad_edit(label, "expected STEP:SOURCE=PREFIX");
    e.edit.source = edit_source(rest.substr(0, equals), label);
    e.append = parse_shards(rest.substr(equals + 1), label);
  } else if (flag == "--skip") {
    e.edit.kind = MixEdit::Kind::kSkip;
    std::string path;
    e.edit.step = edit_step(value, label, "STEP:FILE", path);
    std::ifstream in(path);
    if (!in) bad_edit(label, "cannot open " + path);
    std::string line;
    for (uint64_t n = 1; std::getline(in, line); ++n) {
      const std::string where = label + ": line " + std::to_string(n);
      std::stringstream fields(line);
      std::string source, document, extra;
      if (!(fields >> source) || source[0] == '#') continue;  // blank or a comment
      if (!(fields >> document) || (fields >> extra)) {
        throw std::invalid_argument(where + " is '" + line + "'; expected \"source document\"");
      }
      e.edit.skip.emplace_back(edit_source(source, where), edit_u64(document, where, "document"));
    }
  } else {
    throw std::invalid_argument("edit flag '" + flag +
                                "'; allowed: --change, --ramp, --append, --skip");
  }
  return e;
}

EodToken parse_eod_token(std::string_view text, bool appended, std::string parameter) {
  EodToken out;
  out.appended = appended;
  out.parameter = std::move(parameter);
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, out.id);
  if (text.empty() || ec != std::errc() || ptr != end || out.id < 0) {
    throw std::invalid_argument(out.parameter + " = " + std::string(text) +
                                ": a token id, an integer in [0, 9223372036854775807]");
  }
  return out;
}

namespace {

// Throws open_token_run's error when a reader's dtype cannot hold `eod`'s id.
void check_eod_fits(const EodToken& eod,
                    const std::vector<std::shared_ptr<const IndexedLengths>>& readers) {
  for (size_t s = 0; s < readers.size(); ++s) {
    const IndexedSource& source = readers[s]->source();
    if (eod.id > source.max_token()) {
      throw std::invalid_argument(
          eod.parameter + " = " + std::to_string(eod.id) + ": sources[" + std::to_string(s) +
          "] holds " + std::string(source.dtype_name()) + " tokens; allowed: 0 to " +
          std::to_string(source.max_token()));
    }
  }
}

}  // namespace

TokenRun open_token_run(const std::vector<std::vector<std::string>>& prefixes,
                        std::vector<TokenEdit> edits, const std::optional<EodToken>& eod_token) {
  std::optional<int64_t> eod;  // the id the readers append
  if (eod_token && eod_token->appended) eod = eod_token->id;
  TokenRun run;
  const std::vector<std::shared_ptr<const IndexedLengths>> opened = open_token_sources(prefixes, eod);
  for (const auto& source : opened) run.sources.push_back(source);
  std::vector<std::vector<std::string>> shards = prefixes;
  // The mixer numbers appended documents in the order it applies the appends: by step, stably.
  std::stable_sort(edits.begin(), edits.end(), [](const TokenEdit& a, const TokenEdit& b) {
    return a.edit.step < b.edit.step;
  });
  for (TokenEdit& e : edits) {
    if (e.edit.kind == MixEdit::Kind::kAppend) {
      try {
        e.edit.documents = open_token_sources({e.append}, eod).at(0);
      } catch (const std::invalid_argument& error) {
        throw std::invalid_argument(e.edit.label + ": " + error.what());
      } catch (const FormatError&) {
        throw;
      } catch (const std::runtime_error& error) {
        throw std::runtime_error(e.edit.label + ": " + error.what());
      }
      if (e.edit.source == shards.size()) shards.emplace_back();
      if (e.edit.source < shards.size()) {
        shards[e.edit.source].insert(shards[e.edit.source].end(), e.append.begin(),
                                     e.append.end());
      }
    }
    run.edits.push_back(std::move(e.edit));
  }
  // The readers: each source with the shards its appends add (opened again only then).
  run.readers = opened;
  run.readers.resize(shards.size());
  std::vector<size_t> grown;
  for (size_t s = 0; s < shards.size(); ++s) {
    if (s >= prefixes.size() || shards[s] != prefixes[s]) grown.push_back(s);
  }
  open_sources(shards, grown, eod, run.readers);
  if (eod_token) check_eod_fits(*eod_token, run.readers);
  run.shards = std::move(shards);
  return run;
}

std::string_view to_string(TokenPositions positions) {
  return positions == TokenPositions::kSegment ? "segment" : "document";
}

TokenPositions parse_positions(std::string_view text, std::string_view parameter) {
  for (TokenPositions p : {TokenPositions::kSegment, TokenPositions::kDocument}) {
    if (text == to_string(p)) return p;
  }
  throw std::invalid_argument(std::string(parameter) + " = '" + std::string(text) +
                              "'; allowed: segment, document");
}

TokenRows read_token_rows(const std::vector<std::shared_ptr<const IndexedLengths>>& sources,
                          const std::vector<PlannedSequence>& sequences, uint64_t width,
                          int64_t pad_token, TokenPositions positions) {
  TokenRows rows;
  rows.rows = sequences.size();
  rows.width = width;
  rows.tokens.resize(rows.rows * width);
  rows.positions.resize(rows.rows * width);
  rows.segments.resize(rows.rows * width);
  read_token_rows(sources, sequences, width, pad_token, positions,
                  {rows.tokens.data(), rows.positions.data(), rows.segments.data()});
  return rows;
}

void read_token_rows(const std::vector<std::shared_ptr<const IndexedLengths>>& sources,
                     const std::vector<PlannedSequence>& sequences, uint64_t width,
                     int64_t pad_token, TokenPositions positions, TokenRowsOut out) {
  const uint64_t cells = sequences.size() * width;
  std::fill(out.tokens, out.tokens + cells, pad_token);
  std::fill(out.positions, out.positions + cells, 0);
  std::fill(out.segments, out.segments + cells, -1);
  // The spans' reads: done in place from local files; gathered, then read at once, when some
  // source is remote.
  struct Read {
    const Span* span;
    int64_t* out;
  };
  const bool gather = std::any_of(sources.begin(), sources.end(), [](const auto& source) {
    return source->source().remote();
  });
  std::vector<Read> reads;
  for (size_t r = 0; r < sequences.size(); ++r) {
    const PlannedSequence& sequence = sequences[r];
    if (sequence.tokens() > width) {
      throw std::invalid_argument("sequence " + std::to_string(sequence.index) + " holds " +
                                  std::to_string(sequence.tokens()) + " tokens; a row holds " +
                                  std::to_string(width));
    }
    uint64_t at = r * width;
    int32_t segment = -1;
    uint64_t first = 0;  // the document offset that position 0 stands for
    for (size_t i = 0; i < sequence.spans.size(); ++i) {
      const Span& span = sequence.spans[i];
      // A segment: the row's consecutive tokens of one document, one span or several that
      // continue each other (the mixer's pieces of a document drawn back to back).
      const Span* before = i > 0 ? &sequence.spans[i - 1] : nullptr;
      if (!before || before->source != span.source || before->document != span.document ||
          before->epoch != span.epoch || before->end != span.begin) {
        ++segment;
        first = positions == TokenPositions::kSegment ? span.begin : 0;
      }
      if (span.source >= sources.size()) {
        throw std::invalid_argument("sequence " + std::to_string(sequence.index) +
                                    " reads source " + std::to_string(span.source) + " of " +
                                    std::to_string(sources.size()));
      }
      if (gather) {
        reads.push_back(Read{&span, out.tokens + at});
      } else {
        sources[span.source]->read(span.document, span.begin, span.end, out.tokens + at);
      }
      for (uint64_t t = span.begin; t < span.end; ++t, ++at) {
        out.positions[at] = static_cast<int64_t>(t - first);
        out.segments[at] = segment;
      }
    }
  }
  if (reads.empty()) return;
  detail::parallel_for(
      0, reads.size(),
      [&](size_t i) {
        const Span& span = *reads[i].span;
        sources[span.source]->read(span.document, span.begin, span.end, reads[i].out);
      },
      detail::remote_reads_in_flight());
}

void token_loss_mask(const int64_t* tokens, const int32_t* segments, uint64_t rows,
                     uint64_t width, const LossMaskRule& rule, float* out) {
  if (width == 0) throw std::invalid_argument("token_loss_mask: width = 0; allowed: >= 1");
  const uint64_t labels = width - 1;
  for (uint64_t r = 0; r < rows; ++r) {
    const int64_t* row = tokens + r * width;
    const int32_t* spans = segments + r * width;
    for (uint64_t t = 0; t < labels; ++t) {
      bool keep = spans[t + 1] >= 0;
      if (rule.mask_cross_document) keep = keep && spans[t + 1] == spans[t];
      if (rule.eod_mask) keep = keep && row[t] != *rule.eod_mask;
      out[r * labels + t] = keep ? 1.0f : 0.0f;
    }
  }
}

VarlenMetadata varlen_metadata(const int32_t* segments, uint64_t rows, uint64_t width,
                               uint64_t row_stride) {
  VarlenMetadata out;
  out.cu_seqlens.push_back(0);
  int64_t total = 0, run = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    const int32_t* row = segments + r * row_stride;
    int32_t last = -1;  // the previous non-padding token's segment in this row
    for (uint64_t t = 0; t < width; ++t) {
      if (row[t] < 0) continue;
      if (run > 0 && row[t] != last) {
        total += run;
        out.cu_seqlens.push_back(static_cast<int32_t>(total));
        out.max_seqlen = std::max(out.max_seqlen, run);
        run = 0;
      }
      last = row[t];
      ++run;
    }
    if (run > 0) {  // a row's last run ends with the row
      total += run;
      out.cu_seqlens.push_back(static_cast<int32_t>(total));
      out.max_seqlen = std::max(out.max_seqlen, run);
      run = 0;
    }
  }
  return out;
}

BlockUses::BlockUses() : uses_(std::make_unique<detail::BlockUseList>()) {}
BlockUses::~BlockUses() = default;

namespace {

// The distinct blocks `rows` read from sources read in blocks, in the order first read.
std::vector<std::pair<std::string, uint64_t>> blocks_read(
    const std::vector<std::shared_ptr<const IndexedLengths>>& sources,
    const std::vector<PlannedSequence>& rows) {
  std::vector<std::pair<std::string, uint64_t>> out;
  std::set<std::pair<std::string, uint64_t>> seen;
  for (const PlannedSequence& row : rows) {
    for (const Span& span : row.spans) {
      if (span.source >= sources.size()) continue;  // read_token_rows refuses it
      auto key = sources[span.source]->source().block_of(span.document);
      if (key && seen.insert(*key).second) out.push_back(std::move(*key));
    }
  }
  return out;
}

}  // namespace

void BlockUses::add(uint64_t step,
                    const std::vector<std::shared_ptr<const IndexedLengths>>& sources,
                    const std::vector<PlannedSequence>& rows) {
  uses_->add(step, blocks_read(sources, rows));
}

void BlockUses::at(uint64_t step) { uses_->at(step); }

uint64_t BlockUses::lookahead() {
  static const uint64_t steps = static_cast<uint64_t>(detail::env_number(
      "DISTSAMPLER_S3_LOOKAHEAD", 64, 1, 100000, true, "steps from 1 to 100000"));
  return steps;
}

}  // namespace distsampler
