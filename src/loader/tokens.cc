// tokens.cc: reading a plan's sequences (loader/tokens.h).
#include "distsampler/loader/tokens.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace distsampler {

IndexedLengths::IndexedLengths(std::shared_ptr<const IndexedSource> source)
    : source_(std::move(source)) {
  if (!source_) throw std::invalid_argument("source: missing");
}

std::vector<std::shared_ptr<const IndexedLengths>> open_token_sources(
    const std::vector<std::vector<std::string>>& prefixes) {
  std::vector<std::shared_ptr<const IndexedLengths>> out;
  for (size_t s = 0; s < prefixes.size(); ++s) {
    const std::string where = "sources[" + std::to_string(s) + "]: ";
    try {
      out.push_back(
          std::make_shared<IndexedLengths>(std::make_shared<const IndexedSource>(prefixes[s])));
    } catch (const FormatError&) {
      throw;  // names its file already
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + e.what());
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(where + e.what());
    }
  }
  return out;
}

TokenRun open_token_run(const std::vector<std::vector<std::string>>& prefixes,
                        std::vector<TokenEdit> edits) {
  TokenRun run;
  for (const auto& source : open_token_sources(prefixes)) run.sources.push_back(source);
  std::vector<std::vector<std::string>> shards = prefixes;
  // The mixer numbers appended documents in the order it applies the appends: by step, stably.
  std::stable_sort(edits.begin(), edits.end(), [](const TokenEdit& a, const TokenEdit& b) {
    return a.edit.step < b.edit.step;
  });
  for (TokenEdit& e : edits) {
    if (e.edit.kind == MixEdit::Kind::kAppend) {
      try {
        e.edit.documents = open_token_sources({e.append}).at(0);
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
  run.readers = open_token_sources(shards);
  return run;
}

TokenRows read_token_rows(const std::vector<std::shared_ptr<const IndexedLengths>>& sources,
                          const std::vector<PlannedSequence>& sequences, uint64_t width,
                          int64_t pad_token) {
  TokenRows rows;
  rows.rows = sequences.size();
  rows.width = width;
  rows.tokens.assign(rows.rows * width, pad_token);
  rows.positions.assign(rows.rows * width, 0);
  rows.segments.assign(rows.rows * width, -1);
  for (size_t r = 0; r < sequences.size(); ++r) {
    const PlannedSequence& sequence = sequences[r];
    if (sequence.tokens() > width) {
      throw std::invalid_argument("sequence " + std::to_string(sequence.index) + " holds " +
                                  std::to_string(sequence.tokens()) + " tokens; a row holds " +
                                  std::to_string(width));
    }
    uint64_t at = r * width;
    for (size_t i = 0; i < sequence.spans.size(); ++i) {
      const Span& span = sequence.spans[i];
      if (span.source >= sources.size()) {
        throw std::invalid_argument("sequence " + std::to_string(sequence.index) +
                                    " reads source " + std::to_string(span.source) + " of " +
                                    std::to_string(sources.size()));
      }
      sources[span.source]->source().read(span.document, span.begin, span.end,
                                          rows.tokens.data() + at);
      for (uint64_t t = span.begin; t < span.end; ++t, ++at) {
        rows.positions[at] = static_cast<int64_t>(t);
        rows.segments[at] = static_cast<int32_t>(i);
      }
    }
  }
  return rows;
}

}  // namespace distsampler
