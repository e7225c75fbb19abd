// stream.cc: a token stream's runtime (tokens/stream.h).
#include "distsampler/tokens/stream.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <future>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace distsampler {

RowParts worker_parts(uint64_t k, uint64_t per_step, uint64_t micro, uint64_t worker,
                      uint64_t workers) {
  if (workers == 0 || worker >= workers || per_step == 0) {
    throw std::invalid_argument("worker_parts: worker " + std::to_string(worker) + " of " +
                                std::to_string(workers) + ", " + std::to_string(per_step) +
                                " batches a step; allowed: worker < workers, per_step >= 1");
  }
  if (workers == 1) return std::nullopt;
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (uint64_t j = 0; j < per_step; ++j) {
    if ((k * per_step + j) % workers == worker) out.emplace_back(j * micro, micro);
  }
  if (out.size() == per_step) return std::nullopt;
  return out;
}

std::vector<PlannedSequence> rows_of(std::vector<PlannedSequence> mine, const RowParts& parts) {
  if (!parts) return mine;
  std::vector<PlannedSequence> chosen;
  for (const auto& [first, count] : *parts) {
    if (first > mine.size() || count > mine.size() - first) {
      throw std::invalid_argument("parts: rows [" + std::to_string(first) + ", +" +
                                  std::to_string(count) + ") of a share of " +
                                  std::to_string(mine.size()));
    }
    chosen.insert(chosen.end(), mine.begin() + static_cast<std::ptrdiff_t>(first),
                  mine.begin() + static_cast<std::ptrdiff_t>(first + count));
  }
  return chosen;
}

// The next step's rows, read from the feed on a thread while the loop trains on this one.
struct TokenStreamRuntime::Ahead {
  struct Rows {
    bool ok = false;           // false: read the step as if nothing was read ahead
    std::exception_ptr error;  // what reading them threw: the loop's error, thrown there
    std::vector<PlannedSequence> mine;
    TokenPlanState after;
    TokenRows rows;
  };
  uint64_t step = 0, world_size = 0, rank = 0;
  int64_t pad = 0;
  TokenPositions positions = TokenPositions::kSegment;
  RowParts parts;
  std::future<Rows> rows;
  pid_t owner = ::getpid();  // the process whose thread reads them
  bool for_(uint64_t s, uint64_t w, uint64_t r, int64_t p, TokenPositions x,
            const RowParts& q) const {
    return step == s && world_size == w && rank == r && pad == p && positions == x && parts == q;
  }
};

// A copy of the plan kept BlockUses::lookahead() steps ahead of a reader, telling the block
// cache which blocks the reader's rows of each of those steps read.
struct TokenStreamRuntime::Scout {
  std::shared_ptr<TokenPlan> plan;
  uint64_t next = 0;  // the scout's next step
  uint64_t now = 0;   // the reader's current step
  uint64_t world_size = 0, rank = 0;
  StreamReader reader;
  BlockUses uses;
};

TokenStreamRuntime::TokenStreamRuntime(std::vector<std::vector<std::string>> prefixes,
                                       TokenPlanOptions options, std::vector<TokenEdit> edits,
                                       const std::optional<EodToken>& eod)
    : prefixes_(std::move(prefixes)), edits_(std::move(edits)), options_(std::move(options)) {
  options_.appended_eod.reset();
  if (eod && eod->appended) options_.appended_eod = static_cast<uint64_t>(eod->id);
  TokenRun run = open_token_run(prefixes_, edits_, eod);
  sources_ = std::move(run.readers);
  // A source in a locality order is read a block of its order at a time (from an object store;
  // a local source reads as before).
  for (size_t s = 0; s < options_.orders.size() && s < sources_.size(); ++s) {
    if (options_.orders[s].block == 0) continue;
    sources_[s]->source().read_in_blocks(options_.orders[s].block);
    blocks_ = blocks_ || sources_[s]->source().remote();
  }
  shards_ = std::move(run.shards);
  options_.edits = std::move(run.edits);
  plan_ = std::make_shared<TokenPlan>(run.sources, options_);
  start_ = std::make_shared<const TokenPlan>(*plan_);
}

TokenStreamRuntime::~TokenStreamRuntime() { drop_ahead(); }

TokenPlan& TokenStreamRuntime::synced() { return fed_ ? fed_->plan() : *plan_; }

uint64_t TokenStreamRuntime::step() const { return fed_ ? fed_->step() : plan_->step(); }

uint64_t TokenStreamRuntime::sequence() const {
  return fed_ ? fed_->state().sequence : plan_->sequence();
}

bool TokenStreamRuntime::exhausted() { return synced().exhausted(); }

std::vector<PlannedSequence> TokenStreamRuntime::next_step(uint64_t world_size, uint64_t rank) {
  return fed_ ? fed_->next_step(world_size, rank) : plan_->next_step(world_size, rank);
}

TokenPlanState TokenStreamRuntime::state() const { return fed_ ? fed_->state() : plan_->state(); }

void TokenStreamRuntime::load(const TokenPlanState& state) {
  if (fed_) {
    fed_->load(state);
  } else {
    plan_->load(state);
  }
}

void TokenStreamRuntime::feed_from(std::shared_ptr<PlanFeed> feed) {
  drop_ahead();
  fed_ = feed ? std::make_shared<FedTokenPlan>(plan_, std::move(feed)) : nullptr;
}

void TokenStreamRuntime::drop_ahead() {
  if (!ahead_) return;
  if (ahead_->owner != ::getpid()) {
    // A forked DataLoader worker: the reading thread stayed in the parent, so waiting for it (or
    // destroying its future, which waits) would never return. Left as it is.
    new std::shared_ptr<Ahead>(std::move(ahead_));
    return;
  }
  if (ahead_->rows.valid()) ahead_->rows.wait();
  ahead_.reset();
}

StepExplanation TokenStreamRuntime::explain(uint64_t step, uint64_t world_size,
                                            const PlanIndex* index) const {
  if (index != nullptr) return explain_indexed(*start_, *index, step, world_size, shards_.size());
  return explain_step(*start_, step, world_size, shards_.size());
}

TokenStreamRuntime TokenStreamRuntime::copy() {
  drop_ahead();
  TokenStreamRuntime out;
  out.prefixes_ = prefixes_;
  out.edits_ = edits_;
  out.sources_ = sources_;
  out.shards_ = shards_;
  out.options_ = options_;
  out.blocks_ = blocks_;
  out.plan_ = std::make_shared<TokenPlan>(synced());
  out.start_ = start_;
  out.feed_from(fed_ ? fed_->feed() : nullptr);  // each reader its own scout
  return out;
}

uint64_t TokenStreamRuntime::feed_spans_per_sequence() const {
  // Twice the average number of documents a sequence crosses, at least 16.
  double documents = 0, tokens = 0;
  for (const auto& source : sources_) {
    documents += static_cast<double>(source->documents());
    tokens += static_cast<double>(source->total_tokens());
  }
  const double per_sequence =
      tokens > 0 ? static_cast<double>(options_.seq_len + 1) * documents / tokens : 1;
  return static_cast<uint64_t>(std::min(4096.0, std::max(16.0, 2 * per_sequence + 2)));
}

void TokenStreamRuntime::check_plan_ahead(int64_t ahead) {
  if (ahead < 1 || static_cast<uint64_t>(ahead) > PlanFeedOptions::kMaxAhead) {
    throw std::invalid_argument("plan_ahead = " + std::to_string(ahead) +
                                ": steps planned ahead, in [1, " +
                                std::to_string(PlanFeedOptions::kMaxAhead) + "]");
  }
}

void TokenStreamRuntime::start_feed(uint64_t ahead, const std::optional<NodeGroup>& group,
                                    uint64_t world_size, uint64_t rank) {
  check_plan_ahead(static_cast<int64_t>(std::min<uint64_t>(ahead, INT64_MAX)));
  TokenPlan& plan = synced();
  PlanFeedOptions o;
  o.ahead = ahead;
  o.spans_per_sequence = feed_spans_per_sequence();
  if (!group) {  // this rank's feed: its share's spans only
    const RankSequences share = rank_sequences(options_.global_batch, world_size, rank, 0);
    o.rows_first = share.first;
    o.rows = share.count;
  }
  feed_from(group ? PlanFeed::for_node(plan, *group, o) : PlanFeed::start(plan, o));
}

std::optional<std::pair<pid_t, int>> TokenStreamRuntime::feed_handle() const {
  if (!fed_) return std::nullopt;
  return std::make_pair(fed_->feed()->pid(), fed_->feed()->fd());
}

bool TokenStreamRuntime::attach_feed(pid_t pid, int fd, std::string* why) {
  PlanFeedOptions o;
  o.spans_per_sequence = feed_spans_per_sequence();
  feed_from(PlanFeed::attach(pid, fd, *plan_, o, why));
  return bool(fed_);
}

DictValue TokenStreamRuntime::state_dict(uint64_t world_size) {
  return synced().state_dict(world_size);
}

void TokenStreamRuntime::load_state_dict(const DictValue& state) {
  drop_ahead();
  synced().load_state_dict(state);
  fed_ = nullptr;  // a feed starts where the plan stands: the next start_feed
}

void TokenStreamRuntime::skip_step(uint64_t world_size, uint64_t rank) {
  drop_ahead();
  if (fed_) {
    fed_->skip_step();
  } else {
    plan_->next_step(world_size, rank);
  }
}

std::vector<PlannedSequence> TokenStreamRuntime::plan_step(uint64_t world_size, uint64_t rank) {
  drop_ahead();
  return next_step(world_size, rank);
}

void TokenStreamRuntime::start_ahead(uint64_t step, uint64_t world_size, uint64_t rank,
                                     int64_t pad, TokenPositions positions,
                                     const RowParts& parts) {
  auto ahead = std::make_shared<Ahead>();
  ahead->step = step;
  ahead->world_size = world_size;
  ahead->rank = rank;
  ahead->pad = pad;
  ahead->positions = positions;
  ahead->parts = parts;
  const RankSequences share = rank_sequences(options_.global_batch, world_size, rank, step);
  ahead->rows = std::async(
      std::launch::async, [feed = fed_->feed(), sources = sources_, step, share,
                           batch = options_.global_batch, parts, pad, positions,
                           width = options_.seq_len + 1] {
        Ahead::Rows out;
        try {
          PlanFeed::Step got;
          if (!feed->read(step, share.first - step * batch, share.count, true, &got)) return out;
          out.mine = rows_of(std::move(got.sequences), parts);
          out.rows = read_token_rows(sources, out.mine, width, pad, positions);
          out.after = std::move(got.after);
          out.ok = true;
        } catch (...) {
          out.error = std::current_exception();
        }
        return out;
      });
  ahead_ = std::move(ahead);
}

void TokenStreamRuntime::scout_uses(uint64_t step, uint64_t world_size, uint64_t rank,
                                    const StreamReader& reader) {
  if (!scout_ || !(scout_->reader == reader) || scout_->world_size != world_size ||
      scout_->rank != rank || step < scout_->now || step > scout_->next) {
    scout_ = std::make_shared<Scout>();  // the stream moved another way: from here
    scout_->plan = std::make_shared<TokenPlan>(synced());
    scout_->next = step;
    scout_->world_size = world_size;
    scout_->rank = rank;
    scout_->reader = reader;
  }
  scout_->now = step;
  scout_->uses.at(step);
  for (const uint64_t until = step + BlockUses::lookahead(); scout_->next < until;
       ++scout_->next) {
    std::vector<PlannedSequence> rows = scout_->plan->next_step(world_size, rank);
    const RowParts parts = worker_parts(scout_->next - reader.start, reader.per_step,
                                        reader.micro, reader.worker, reader.workers);
    if (parts && parts->empty()) continue;
    scout_->uses.add(scout_->next, sources_, rows_of(std::move(rows), parts));
  }
}

StreamStep TokenStreamRuntime::read_step(uint64_t world_size, uint64_t rank, int64_t pad,
                                         TokenPositions positions, const RowParts& parts,
                                         bool read_ahead,
                                         const std::optional<StreamReader>& reader) {
  StreamStep out;
  out.step = step();
  if (reader && blocks_ && !synced().exhausted()) {
    if (reader->start > out.step) {
      throw std::invalid_argument("reader: start " + std::to_string(reader->start) +
                                  " after step " + std::to_string(out.step) +
                                  "; allowed: a step already read or this");
    }
    scout_uses(out.step, world_size, rank, *reader);
  }
  const uint64_t width = options_.seq_len + 1;
  std::vector<PlannedSequence> mine;
  bool done = false;
  if (ahead_ && ahead_->for_(out.step, world_size, rank, pad, positions, parts)) {
    Ahead::Rows got = ahead_->rows.get();
    ahead_.reset();
    // Not read again: a read retries within its own window (s3.h), and a second try here would
    // hide a failure that recurs on every step (each step then waiting out the window).
    if (got.error) std::rethrow_exception(got.error);
    if (got.ok) {
      fed_->advance(got.after);
      mine = std::move(got.mine);
      out.rows = std::move(got.rows);
      done = true;
    }
  }
  drop_ahead();
  if (!done) {
    const TokenPlanState before = state();
    mine = next_step(world_size, rank);
    try {
      mine = rows_of(std::move(mine), parts);
      out.rows = read_token_rows(sources_, mine, width, pad, positions);
    } catch (...) {
      load(before);  // a failed read leaves the plan where it was
      throw;
    }
  }
  if (read_ahead && fed_) start_ahead(out.step + 1, world_size, rank, pad, positions, parts);
  out.sequences.reserve(mine.size());
  for (const PlannedSequence& s : mine) out.sequences.push_back(s.index);
  return out;
}

std::vector<double> TokenStreamRuntime::latest_weights() const {
  return plan_->mixer().weights_at(UINT64_MAX);
}

}  // namespace distsampler
