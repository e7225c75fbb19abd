// bind_tokens.cc: tokens/plan.h and loader/tokens.h: a token plan over Megatron indexed sources,
// whose steps come back as numpy rows (read with the GIL released).
#include <unistd.h>

#include <exception>
#include <future>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "distsampler/loader/tokens.h"
#include "distsampler/node/plan_feed.h"
#include "distsampler/tokens/plan.h"

namespace distsampler {
namespace python {
namespace {

// The edits as Python gives them: changes (step, weights), ramps (start, end, weights), appends
// (step, source, shard prefixes) and skips (step, [(source, document), ...]).
using Changes = std::vector<std::tuple<uint64_t, std::vector<double>>>;
using Ramps = std::vector<std::tuple<uint64_t, uint64_t, std::vector<double>>>;
using Appends = std::vector<std::tuple<uint64_t, uint32_t, std::vector<std::string>>>;
using Skips = std::vector<std::tuple<uint64_t, std::vector<std::pair<uint32_t, uint64_t>>>>;
struct Edits {
  Changes changes;
  Ramps ramps;
  Appends appends;
  Skips skips;
};

std::vector<TokenEdit> token_edits(const Edits& in) {
  std::vector<TokenEdit> out;
  for (size_t i = 0; i < in.changes.size(); ++i) {
    TokenEdit e;
    e.edit.label = "changes[" + std::to_string(i) + "]";
    std::tie(e.edit.step, e.edit.weights) = in.changes[i];
    e.edit.until = e.edit.step;
    out.push_back(std::move(e));
  }
  for (size_t i = 0; i < in.ramps.size(); ++i) {
    TokenEdit e;
    e.edit.label = "ramps[" + std::to_string(i) + "]";
    std::tie(e.edit.step, e.edit.until, e.edit.weights) = in.ramps[i];
    if (e.edit.until <= e.edit.step) {
      throw std::invalid_argument(e.edit.label + ": end = " + std::to_string(e.edit.until) +
                                  " must follow start = " + std::to_string(e.edit.step));
    }
    out.push_back(std::move(e));
  }
  for (size_t i = 0; i < in.appends.size(); ++i) {
    TokenEdit e;
    e.edit.kind = MixEdit::Kind::kAppend;
    e.edit.label = "appends[" + std::to_string(i) + "]";
    std::tie(e.edit.step, e.edit.source, e.append) = in.appends[i];
    out.push_back(std::move(e));
  }
  for (size_t i = 0; i < in.skips.size(); ++i) {
    TokenEdit e;
    e.edit.kind = MixEdit::Kind::kSkip;
    e.edit.label = "skips[" + std::to_string(i) + "]";
    std::tie(e.edit.step, e.edit.skip) = in.skips[i];
    out.push_back(std::move(e));
  }
  return out;
}

using Parts = std::optional<std::vector<std::pair<uint64_t, uint64_t>>>;

// `mine` cut to the rows `parts` ((first, count) pairs, in order). Throws std::invalid_argument
// for a part outside it.
std::vector<PlannedSequence> rows_of(std::vector<PlannedSequence> mine, const Parts& parts) {
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

// The rows DataLoader worker `worker` of `workers` reads at the k-th step since it began, of a
// rank that reads `per_step` batches of `micro` rows a step: the step's batch j is the
// (k * per_step + j)-th batch since the start, read by the worker that number is congruent to
// modulo `workers` (the DataLoader returns them in order). nullopt: every row (one worker); an
// empty list: none (the worker skips the step).
Parts worker_parts(uint64_t k, uint64_t per_step, uint64_t micro, uint64_t worker,
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

// Who reads a stream's steps, for plan-aware eviction: the step it began at, and
// worker_parts' arguments.
struct Reader {
  uint64_t start = 0, per_step = 1, micro = 1, worker = 0, workers = 1;
  bool operator==(const Reader& o) const {
    return start == o.start && per_step == o.per_step && micro == o.micro &&
           worker == o.worker && workers == o.workers;
  }
};

// A copy of the plan kept BlockUses::lookahead() steps ahead of a reader, telling the block cache
// which blocks the reader's rows of each of those steps read (BlockUses).
struct UseScout {
  std::shared_ptr<TokenPlan> plan;
  uint64_t next = 0;  // the scout's next step
  uint64_t now = 0;   // the reader's current step
  uint64_t world_size = 0, rank = 0;
  Reader reader;
  BlockUses uses;
};

// The next step's rows, read from the feed on a thread while the loop trains on this one.
struct RowsAhead {
  struct Rows {
    bool ok = false;  // false: read the step as if nothing was read ahead
    std::exception_ptr error;  // what reading them threw: the loop's error, raised there
    std::vector<PlannedSequence> mine;
    TokenPlanState after;
    TokenRows rows;
  };
  uint64_t step = 0, world_size = 0, rank = 0;
  int64_t pad = 0;
  TokenPositions positions = TokenPositions::kSegment;
  Parts parts;
  std::future<Rows> rows;
  pid_t owner = ::getpid();  // the process whose thread reads them
  bool for_(uint64_t s, uint64_t w, uint64_t r, int64_t p, TokenPositions x, const Parts& q) const {
    return step == s && world_size == w && rank == r && pad == p && positions == x && parts == q;
  }
};

// The plan and the sources it reads, with what made them (for pickling). With a feed
// (node/plan_feed.h), steps are read from it through `fed`, and `plan` is brought to the fed
// position only when something needs the plan itself (a checkpoint, a copy).
struct TokenStreamCore {
  std::vector<std::vector<std::string>> prefixes;
  Edits edits;
  std::vector<std::shared_ptr<const IndexedLengths>> sources;  // per source: every shard
  std::vector<std::vector<std::string>> shards;  // per source: its shards and appended ones
  TokenPlanOptions options;
  std::shared_ptr<TokenPlan> plan;
  std::shared_ptr<FedTokenPlan> fed;
  std::shared_ptr<RowsAhead> ahead;  // read_step(read_ahead=True)'s next step
  std::shared_ptr<UseScout> scout;   // read_step(reader=...)'s, with sources read in blocks
  bool blocks = false;               // some source is an object store's, read in blocks

  TokenStreamCore(std::vector<std::vector<std::string>> prefixes_in, TokenPlanOptions options_in,
                  Edits edits_in, const std::optional<EodToken>& eod)
      : prefixes(std::move(prefixes_in)), edits(std::move(edits_in)),
        options(std::move(options_in)) {
    options.appended_eod.reset();
    if (eod && eod->appended) options.appended_eod = static_cast<uint64_t>(eod->id);
    TokenRun run = open_token_run(prefixes, token_edits(edits), eod);
    sources = std::move(run.readers);
    // A source in a locality order is read a block of its order at a time (from an object
    // store; a local source reads as before).
    for (size_t s = 0; s < options.orders.size() && s < sources.size(); ++s) {
      if (options.orders[s].block > 0) sources[s]->source().read_in_blocks(options.orders[s].block);
      blocks = blocks || (options.orders[s].block > 0 && sources[s]->source().remote());
    }
    shards = std::move(run.shards);
    options.edits = std::move(run.edits);
    plan = std::make_shared<TokenPlan>(run.sources, options);
  }
  // The plan at the position read so far.
  TokenPlan& synced() { return fed ? fed->plan() : *plan; }
  uint64_t step() const { return fed ? fed->step() : plan->step(); }
  void feed_from(std::shared_ptr<PlanFeed> feed) {
    drop_ahead();
    fed = feed ? std::make_shared<FedTokenPlan>(plan, std::move(feed)) : nullptr;
  }
  // Forgets the rows read ahead (waiting for their thread without the GIL): the position moves
  // another way.
  void drop_ahead() {
    if (!ahead) return;
    if (ahead->owner != ::getpid()) {
      // A forked DataLoader worker: the reading thread stayed in the parent, so waiting for it
      // (or destroying its future, which waits) would never return. Left as it is.
      new std::shared_ptr<RowsAhead>(std::move(ahead));
      return;
    }
    py::gil_scoped_release release;
    if (ahead->rows.valid()) ahead->rows.wait();
    ahead.reset();
  }
  TokenStreamCore copy() {
    drop_ahead();
    TokenStreamCore out = *this;
    out.scout = nullptr;  // each reader its own
    out.plan = std::make_shared<TokenPlan>(synced());
    out.feed_from(fed ? fed->feed() : nullptr);
    return out;
  }
  // This rank's sequences of the next step (spans of the others' are not kept).
  std::vector<PlannedSequence> next_step(uint64_t world_size, uint64_t rank) {
    return fed ? fed->next_step(world_size, rank) : plan->next_step(world_size, rank);
  }
  TokenPlanState state() { return fed ? fed->state() : plan->state(); }
  void load(const TokenPlanState& state) {
    if (fed) {
      fed->load(state);
    } else {
      plan->load(state);
    }
  }
};

// The EOD token of a plan whose options append `id` (a pickled plan's, checked when made).
std::optional<EodToken> appended(std::optional<uint64_t> id) {
  if (!id) return std::nullopt;
  EodToken eod;
  eod.id = static_cast<int64_t>(*id);
  eod.appended = true;
  return eod;
}

// Per source, spans per sequence a feed's slot has room for: twice the average number of
// documents a sequence crosses, at least 16.
uint64_t feed_spans_per_sequence(const TokenStreamCore& s) {
  double documents = 0, tokens = 0;
  for (const auto& source : s.sources) {
    documents += static_cast<double>(source->documents());
    tokens += static_cast<double>(source->total_tokens());
  }
  const double per_sequence =
      tokens > 0 ? static_cast<double>(s.options.seq_len + 1) * documents / tokens : 1;
  return static_cast<uint64_t>(std::min(4096.0, std::max(16.0, 2 * per_sequence + 2)));
}

TokenPlanOptions make_options(std::vector<double> weights, uint64_t seq_len,
                              uint64_t global_batch, uint64_t seed, const std::string& packing,
                              uint64_t window, std::vector<double> split,
                              const std::string& subset,
                              const std::vector<std::pair<uint64_t, uint64_t>>& orders = {}) {
  TokenPlanOptions o;
  for (const auto& [block, window] : orders) o.orders.push_back(SourceOrder{block, window});
  if (!split.empty()) o.split = SplitRule(std::move(split), "split").fractions();
  o.subset = parse_split(subset, "subset");
  o.weights = std::move(weights);
  o.seq_len = seq_len;
  o.global_batch = global_batch;
  o.seed = seed;
  o.packing = parse_packing(packing);
  o.window = window;
  return o;
}

// A plan's source orders as (block, window) pairs, as the constructor takes them.
using Orders = std::vector<std::pair<uint64_t, uint64_t>>;
Orders orders_of(const TokenPlanOptions& o) {
  Orders out;
  for (const SourceOrder& s : o.orders) out.emplace_back(s.block, s.window);
  return out;
}

// numpy's array of `values` (moved, not copied) in `shape`.
template <typename T>
py::array_t<T> moved_array(std::vector<T>&& values, const std::vector<py::ssize_t>& shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), owner);
}

// Starts reading step `step`'s rows of `self`'s feed on a thread.
void read_ahead(TokenStreamCore& self, uint64_t step, uint64_t world_size, uint64_t rank,
                int64_t pad, TokenPositions positions, const Parts& parts) {
  auto ahead = std::make_shared<RowsAhead>();
  ahead->step = step;
  ahead->world_size = world_size;
  ahead->rank = rank;
  ahead->pad = pad;
  ahead->positions = positions;
  ahead->parts = parts;
  const RankSequences share =
      rank_sequences(self.options.global_batch, world_size, rank, step);
  ahead->rows = std::async(
      std::launch::async, [feed = self.fed->feed(), sources = self.sources, step, share,
                           batch = self.options.global_batch, parts, pad, positions,
                           width = self.options.seq_len + 1] {
        RowsAhead::Rows out;
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
  self.ahead = std::move(ahead);
}

// Tells the block cache what `reader` reads from `step` on (UseScout), before it reads `step`.
void scout_uses(TokenStreamCore& self, uint64_t step, uint64_t world_size, uint64_t rank,
                const Reader& reader) {
  auto& scout = self.scout;
  if (!scout || !(scout->reader == reader) || scout->world_size != world_size ||
      scout->rank != rank || step < scout->now || step > scout->next) {
    scout = std::make_shared<UseScout>();  // the stream moved another way: from here
    scout->plan = std::make_shared<TokenPlan>(self.synced());
    scout->next = step;
    scout->world_size = world_size;
    scout->rank = rank;
    scout->reader = reader;
  }
  scout->now = step;
  scout->uses.at(step);
  for (const uint64_t until = step + BlockUses::lookahead(); scout->next < until; ++scout->next) {
    std::vector<PlannedSequence> rows = scout->plan->next_step(world_size, rank);
    const Parts parts = worker_parts(scout->next - reader.start, reader.per_step, reader.micro,
                                     reader.worker, reader.workers);
    if (parts && parts->empty()) continue;
    scout->uses.add(scout->next, self.sources, rows_of(std::move(rows), parts));
  }
}

py::tuple read_step(TokenStreamCore& self, uint64_t world_size, uint64_t rank, int64_t pad,
                    const std::string& position_ids, Parts parts, bool ahead,
                    std::optional<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, uint64_t>>
                        reader) {
  const TokenPositions counted = parse_positions(position_ids, "positions");
  const uint64_t step = self.step();
  if (reader && self.blocks && !self.synced().exhausted()) {
    const auto& [start, per_step, micro, worker, workers] = *reader;
    if (start > step) {
      throw std::invalid_argument("reader: start " + std::to_string(start) + " after step " +
                                  std::to_string(step) + "; allowed: a step already read or this");
    }
    py::gil_scoped_release release;
    scout_uses(self, step, world_size, rank, Reader{start, per_step, micro, worker, workers});
  }
  const uint64_t width = self.options.seq_len + 1;
  std::vector<PlannedSequence> mine;
  py::array_t<int64_t> tokens, positions;
  py::array_t<int32_t> segments;
  bool done = false;
  if (self.ahead && self.ahead->for_(step, world_size, rank, pad, counted, parts)) {
    RowsAhead::Rows got;
    {
      py::gil_scoped_release release;
      got = self.ahead->rows.get();
    }
    self.ahead.reset();
    // Not read again: a read retries within its own window (s3.h), and a second try here would
    // hide a failure that recurs on every step (each step then waiting out the window).
    if (got.error) std::rethrow_exception(got.error);
    if (got.ok) {
      self.fed->advance(got.after);
      mine = std::move(got.mine);
      const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(got.rows.rows),
                                              static_cast<py::ssize_t>(width)};
      tokens = moved_array(std::move(got.rows.tokens), shape);
      positions = moved_array(std::move(got.rows.positions), shape);
      segments = moved_array(std::move(got.rows.segments), shape);
      done = true;
    }
  }
  self.drop_ahead();
  if (!done) {
    const TokenPlanState before = self.state();
    {
      py::gil_scoped_release release;
      mine = self.next_step(world_size, rank);
    }
    try {
      mine = rows_of(std::move(mine), parts);
      const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(mine.size()),
                                              static_cast<py::ssize_t>(width)};
      tokens = py::array_t<int64_t>(shape);
      positions = py::array_t<int64_t>(shape);
      segments = py::array_t<int32_t>(shape);
      TokenRowsOut out{tokens.mutable_data(), positions.mutable_data(), segments.mutable_data()};
      py::gil_scoped_release release;
      read_token_rows(self.sources, mine, width, pad, counted, out);
    } catch (...) {
      self.load(before);  // a failed read leaves the plan where it was
      throw;
    }
  }
  if (ahead && self.fed) read_ahead(self, step + 1, world_size, rank, pad, counted, parts);
  std::vector<uint64_t> sequences;
  for (const PlannedSequence& s : mine) sequences.push_back(s.index);
  return py::make_tuple(step, to_array(sequences), tokens, positions, segments);
}

}  // namespace

void bind_tokens(py::module_& m) {
  m.def(
      "parse_token_edit",
      [](const std::string& flag, const std::string& value) -> py::tuple {
        const TokenEdit e = parse_token_edit(flag, value);
        const MixEdit& x = e.edit;
        switch (x.kind) {
          case MixEdit::Kind::kWeights:
            if (x.until > x.step) {
              return py::make_tuple("ramps", py::make_tuple(x.step, x.until, x.weights));
            }
            return py::make_tuple("changes", py::make_tuple(x.step, x.weights));
          case MixEdit::Kind::kAppend:
            return py::make_tuple("appends", py::make_tuple(x.step, x.source, e.append));
          case MixEdit::Kind::kSkip:
            return py::make_tuple("skips", py::make_tuple(x.step, x.skip));
        }
        throw std::logic_error("parse_token_edit: an unknown kind");
      },
      py::arg("flag"), py::arg("value"),
      "(argument, edit): one edit flag of `distsampler tokens` (--change, --ramp, --append, "
      "--skip) as TokenStream's argument name and its entry");
  m.def(
      "parse_token_positions",
      [](const std::string& text) { return std::string(to_string(parse_positions(text))); },
      py::arg("positions"),
      "The name of a position convention (loader/tokens.h's TokenPositions): 'segment' or "
      "'document'; ValueError naming `positions` otherwise");
  m.def(
      "split_of",
      [](std::vector<double> split, uint32_t source, uint64_t document) {
        return std::string(to_string(SplitRule(std::move(split), "split").of(source, document)));
      },
      py::arg("split"), py::arg("source"), py::arg("document"),
      "'train', 'valid' or 'test': the split of `document` of source `source` under the "
      "fractions `split` (tokens/mix.h's SplitRule)");
  m.def(
      "rank_sequences",
      [](uint64_t global_batch, uint64_t world_size, uint64_t rank, uint64_t step) {
        const RankSequences r = rank_sequences(global_batch, world_size, rank, step);
        return py::make_tuple(r.first, r.count);
      },
      py::arg("global_batch"), py::arg("world_size"), py::arg("rank"), py::arg("step"),
      "(first, count): the global sequences rank `rank` of `world_size` reads at `step`");
  m.def("worker_parts", &worker_parts, py::arg("k"), py::arg("per_step"), py::arg("micro"),
        py::arg("worker"), py::arg("workers"),
        "The rows ((first, count) pairs) DataLoader worker `worker` of `workers` reads at the "
        "k-th step since it began, of a rank reading `per_step` batches of `micro` rows a step: "
        "None for every row, [] for none");
  m.def(
      "varlen_metadata",
      [](py::array_t<int32_t, py::array::forcecast> segments) {
        if (segments.ndim() != 2) {
          throw std::invalid_argument("segment_ids: " + std::to_string(segments.ndim()) +
                                      " dimensions; rows of segment ids have 2");
        }
        const py::ssize_t rows = segments.shape(0), width = segments.shape(1);
        py::array_t<int32_t, py::array::c_style | py::array::forcecast> dense(segments);
        VarlenMetadata v;
        {
          py::gil_scoped_release release;
          v = varlen_metadata(dense.data(), static_cast<uint64_t>(rows),
                              static_cast<uint64_t>(width), static_cast<uint64_t>(width));
        }
        return py::make_tuple(to_array(v.cu_seqlens), v.max_seqlen);
      },
      py::arg("segment_ids"),
      "(cu_seqlens int32, max_seqlen) of rows of segment ids (loader/tokens.h's "
      "varlen_metadata)");
  m.def(
      "plan_feed_counts",
      [] {
        const PlanFeedCounts c = plan_feed_counts();
        return py::dict(py::arg("planned") = c.planned, py::arg("read") = c.read,
                        py::arg("fallback") = c.fallback, py::arg("served") = c.served,
                        py::arg("attached") = c.attached);
      },
      "This process's plan feed counts (node/plan_feed.h): steps its feed threads planned, "
      "steps read from a feed, steps planned by a reader because the feed did not hold them, "
      "descriptors served to other local ranks, feeds mapped from another process");
  py::class_<TokenStreamCore>(m, "TokenPlan",
                              "The global stream of training sequences over Megatron indexed "
                              "sources (tokens/plan.h), read a step at a time")
      .def(py::init([](std::vector<std::vector<std::string>> prefixes,
                       std::vector<double> weights, uint64_t seq_len, uint64_t global_batch,
                       uint64_t seed, const std::string& packing, uint64_t window,
                       Changes changes, Ramps ramps, Appends appends, Skips skips,
                       std::vector<double> split, const std::string& subset,
                       std::optional<py::object> eod_token, bool append_eod,
                       std::vector<std::pair<uint64_t, uint64_t>> orders) {
             // The id as the user wrote it, for the check every edge shares (parse_eod_token).
             std::optional<EodToken> eod;
             if (eod_token) {
               eod = parse_eod_token(std::string(py::str(*eod_token)), append_eod, "eod_token");
             }
             return TokenStreamCore(
                 std::move(prefixes),
                 make_options(std::move(weights), seq_len, global_batch, seed, packing, window,
                              std::move(split), subset, orders),
                 Edits{std::move(changes), std::move(ramps), std::move(appends), std::move(skips)},
                 eod);
           }),
           py::arg("prefixes"), py::arg("weights"), py::arg("seq_len"), py::arg("global_batch"),
           py::arg("seed"), py::arg("packing"), py::arg("window"), py::arg("changes") = Changes{},
           py::arg("ramps") = Ramps{}, py::arg("appends") = Appends{}, py::arg("skips") = Skips{},
           py::arg("split") = std::vector<double>{}, py::arg("subset") = "train",
           py::arg("eod_token") = py::none(), py::arg("append_eod") = false,
           py::arg("orders") = std::vector<std::pair<uint64_t, uint64_t>>{})
      .def_property_readonly("shards", [](const TokenStreamCore& s) { return s.shards; },
                             "Per source (new ones included), its shard prefixes followed by "
                             "those its appends add, numbered as the plan numbers them")
      .def_property_readonly("exhausted",
                             [](TokenStreamCore& s) { return s.synced().exhausted(); },
                             "A single pass (subset valid or test): every token of the subset "
                             "has been planned")
      .def_property_readonly("step", [](const TokenStreamCore& s) { return s.step(); })
      .def_property_readonly("sequence",
                             [](const TokenStreamCore& s) {
                               return s.fed ? s.fed->state().sequence : s.plan->sequence();
                             })
      .def("copy", &TokenStreamCore::copy)
      .def("read_step", &read_step, py::arg("world_size"), py::arg("rank"), py::arg("pad_token"),
           py::arg("positions") = "segment", py::arg("parts") = py::none(),
           py::arg("read_ahead") = false, py::arg("reader") = py::none(),
           "(step, sequences, tokens, positions, segments) of this rank's share of the next step "
           "(or of its rows `parts`, (first, count) pairs); rows of seq_len + 1; positions counted "
           "from each segment's first token ('segment') or each document's ('document'). With "
           "read_ahead and a plan feed, the step after is read on a thread meanwhile. `reader`, "
           "(start, per_step, micro, worker, workers) as worker_parts takes them, tells the "
           "object-store block cache which blocks the coming steps read (plan-aware eviction)")
      .def(
          "skip_step",
          [](TokenStreamCore& self, uint64_t world_size, uint64_t rank) {
            self.drop_ahead();
            py::gil_scoped_release release;
            if (self.fed) {
              self.fed->skip_step();
            } else {
              self.plan->next_step(world_size, rank);
            }
          },
          py::arg("world_size"), py::arg("rank"), "Plans the next step without reading it")
      .def(
          "plan_step",
          [](TokenStreamCore& self, uint64_t world_size, uint64_t rank) {
            self.drop_ahead();
            std::vector<py::tuple> out;
            for (const PlannedSequence& s : self.next_step(world_size, rank)) {
              std::vector<py::tuple> spans;
              for (const Span& x : s.spans) {
                spans.push_back(py::make_tuple(x.source, x.document, x.begin, x.end, x.epoch));
              }
              out.push_back(py::make_tuple(s.index, spans));
            }
            return out;
          },
          py::arg("world_size"), py::arg("rank"),
          "[(sequence, [(source, document, begin, end, source_epoch), ...]), ...] of this "
          "rank's share of the next step")
      .def(
          "state_dict",
          [](TokenStreamCore& s, uint64_t world_size) {
            return from_dict_value(s.synced().state_dict(world_size));
          },
          py::arg("world_size"))
      .def(
          "load_state_dict",
          [](TokenStreamCore& s, const py::handle& state) {
            s.drop_ahead();
            s.synced().load_state_dict(to_dict_value(state));
            s.fed = nullptr;  // a feed starts where the plan stands: the next start_feed
          },
          py::arg("state"))
      .def(
          "start_feed",
          [](TokenStreamCore& s, uint64_t ahead, std::optional<NodeGroup> group,
             uint64_t world_size, uint64_t rank) {
            TokenPlan& plan = s.synced();
            PlanFeedOptions o;
            o.ahead = ahead;
            o.spans_per_sequence = feed_spans_per_sequence(s);
            if (!group) {  // this rank's feed: its share's spans only
              const RankSequences share =
                  rank_sequences(s.options.global_batch, world_size, rank, 0);
              o.rows_first = share.first;
              o.rows = share.count;
            }
            s.feed_from(group ? PlanFeed::for_node(plan, *group, o) : PlanFeed::start(plan, o));
          },
          py::arg("ahead"), py::arg("group"), py::arg("world_size"), py::arg("rank"),
          "Plans the next steps ahead on a thread (node/plan_feed.h): this process's, for rank "
          "`rank` of `world_size`, or with `group` (a NodeGroup) local rank 0's, for the whole "
          "node; the steps are read from it")
      .def_property_readonly("feeding", [](const TokenStreamCore& s) { return bool(s.fed); },
                             "Whether steps are read from a plan feed")
      .def(py::pickle(
          [](TokenStreamCore& s) {
            const TokenPlanOptions& o = s.options;
            return py::make_tuple(s.prefixes, o.weights, o.seq_len, o.global_batch, o.seed,
                                  std::string(to_string(o.packing)), o.window,
                                  from_dict_value(s.synced().state_dict(1)), s.edits.changes,
                                  s.edits.ramps, s.edits.appends, s.edits.skips, o.split,
                                  std::string(to_string(o.subset)), o.appended_eod,
                                  s.fed ? py::make_tuple(static_cast<int64_t>(s.fed->feed()->pid()),
                                                         s.fed->feed()->fd())
                                        : py::object(py::none()),
                                  orders_of(o));
          },
          [](py::tuple t) {
            TokenStreamCore s(t[0].cast<std::vector<std::vector<std::string>>>(),
                              make_options(t[1].cast<std::vector<double>>(), t[2].cast<uint64_t>(),
                                           t[3].cast<uint64_t>(), t[4].cast<uint64_t>(),
                                           t[5].cast<std::string>(), t[6].cast<uint64_t>(),
                                           t[12].cast<std::vector<double>>(),
                                           t[13].cast<std::string>(),
                                           t.size() > 16 ? t[16].cast<Orders>() : Orders{}),
                              Edits{t[8].cast<Changes>(), t[9].cast<Ramps>(),
                                    t[10].cast<Appends>(), t[11].cast<Skips>()},
                              appended(t[14].cast<std::optional<uint64_t>>()));
            s.plan->load_state_dict(to_dict_value(t[7]));
            if (t.size() > 15 && !t[15].is_none()) {  // a spawned worker: the feed of its rank
              const auto [pid, fd] = t[15].cast<std::pair<int64_t, int>>();
              std::string why;
              PlanFeedOptions o;
              o.spans_per_sequence = feed_spans_per_sequence(s);
              s.feed_from(PlanFeed::attach(static_cast<pid_t>(pid), fd, *s.plan, o, &why));
              if (!s.fed) {
                py::module_::import("sys").attr("stderr").attr("write")(
                    "distsampler: this worker plans its own steps: " + why + "\n");
              }
            }
            return s;
          }));
}

}  // namespace python
}  // namespace distsampler
