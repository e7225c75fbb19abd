// bind_tokens.cc: tokens/stream.h, tokens/plan.h and loader/tokens.h: a token stream over Megatron
// indexed sources, whose steps come back as numpy rows (read with the GIL released). Translation
// only: the runtime (feed, read-ahead, scouting, worker parts) is tokens/stream.h's.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "distsampler/loader/tokens.h"
#include "distsampler/node/plan_feed.h"
#include "distsampler/tokens/plan.h"
#include "distsampler/tokens/stream.h"
#include "distsampler/tokens/where.h"

namespace distsampler {
namespace python {
namespace {

// The edits as Python gives them: changes (step, weights), ramps (start, end, weights), appends
// (step, source, shard prefixes) and skips (step, [(source, document), ...]).
using Changes = std::vector<std::tuple<uint64_t, std::vector<double>>>;
using Ramps = std::vector<std::tuple<uint64_t, uint64_t, std::vector<double>>>;
using Appends = std::vector<std::tuple<uint64_t, uint32_t, std::vector<std::string>>>;
using Skips = std::vector<std::tuple<uint64_t, std::vector<std::pair<uint32_t, uint64_t>>>>;

std::vector<TokenEdit> token_edits(const Changes& changes, const Ramps& ramps,
                                   const Appends& appends, const Skips& skips) {
  std::vector<TokenEdit> out;
  const auto label = [](const char* name, size_t i) {
    return std::string(name) + "[" + std::to_string(i) + "]";
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    const auto& [step, weights] = changes[i];
    out.push_back(weights_edit(label("changes", i), step, std::nullopt, weights));
  }
  for (size_t i = 0; i < ramps.size(); ++i) {
    const auto& [start, end, weights] = ramps[i];
    out.push_back(weights_edit(label("ramps", i), start, end, weights));
  }
  for (size_t i = 0; i < appends.size(); ++i) {
    TokenEdit e;
    e.edit.kind = MixEdit::Kind::kAppend;
    e.edit.label = label("appends", i);
    std::tie(e.edit.step, e.edit.source, e.append) = appends[i];
    out.push_back(std::move(e));
  }
  for (size_t i = 0; i < skips.size(); ++i) {
    TokenEdit e;
    e.edit.kind = MixEdit::Kind::kSkip;
    e.edit.label = label("skips", i);
    std::tie(e.edit.step, e.edit.skip) = skips[i];
    out.push_back(std::move(e));
  }
  return out;
}

// An edit as Python gives it: (argument name, entry).
// where.h's sightings as Python dicts.
py::list sightings_list(const std::vector<Sighting>& all) {
  py::list out;
  for (const Sighting& x : all) {
    out.append(py::dict(py::arg("step") = x.step, py::arg("row") = x.row,
                        py::arg("sequence") = x.sequence, py::arg("offset") = x.offset,
                        py::arg("source") = x.source, py::arg("document") = x.document,
                        py::arg("begin") = x.begin, py::arg("end") = x.end,
                        py::arg("tokens") = x.tokens(), py::arg("source_epoch") = x.epoch,
                        py::arg("rank") = x.rank, py::arg("rank_row") = x.rank_row));
  }
  return out;
}

py::tuple python_edit(const TokenEdit& e) {
  const MixEdit& x = e.edit;
  switch (x.kind) {
    case MixEdit::Kind::kWeights:
      if (x.until > x.step) return py::make_tuple("ramps", py::make_tuple(x.step, x.until, x.weights));
      return py::make_tuple("changes", py::make_tuple(x.step, x.weights));
    case MixEdit::Kind::kAppend:
      return py::make_tuple("appends", py::make_tuple(x.step, x.source, e.append));
    case MixEdit::Kind::kSkip:
      return py::make_tuple("skips", py::make_tuple(x.step, x.skip));
  }
  throw std::logic_error("python_edit: an unknown kind");
}

TokenPlanOptions make_options(std::vector<double> weights, uint64_t seq_len,
                              uint64_t global_batch, uint64_t seed, const std::string& packing,
                              uint64_t window, std::vector<double> split,
                              const std::string& subset, std::vector<SourceOrder> orders = {}) {
  TokenPlanOptions o;
  o.orders = std::move(orders);
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

// A plan's source orders as (block, window) pairs, as a pickle holds them.
using Orders = std::vector<std::pair<uint64_t, uint64_t>>;
Orders orders_of(const TokenPlanOptions& o) {
  Orders out;
  for (const SourceOrder& s : o.orders) out.emplace_back(s.block, s.window);
  return out;
}
std::vector<SourceOrder> source_orders(const Orders& pairs) {
  std::vector<SourceOrder> out;
  for (const auto& [block, window] : pairs) out.push_back(SourceOrder{block, window});
  return out;
}

// A Python int as int64, clamped (a rule's check then names the value as out of range).
int64_t clamped_int(const py::handle v) {
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (n == -1 && PyErr_Occurred()) throw py::error_already_set();
  return overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : static_cast<int64_t>(n);
}

// TokenStream's `locality` (None, or per source None or (block, window)) converted; the values
// are locality_order's to check (tokens/mix.h). Only the types are the binding's: a count is an
// int, not a bool.
std::vector<SourceOrder> locality_orders(const py::object& locality) {
  std::vector<SourceOrder> out;
  if (locality.is_none()) return out;
  for (const py::handle item : locality) {
    const std::string what =
        "locality[" + std::to_string(out.size()) + "] = " + std::string(py::repr(item));
    if (item.is_none()) {
      out.push_back(SourceOrder{});
      continue;
    }
    const auto count = [&](const py::handle v) {
      if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr())) {
        throw py::value_error(what + ": (block, window), two ints, or None");
      }
      return clamped_int(py::int_(py::reinterpret_borrow<py::object>(v)));
    };
    if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) ||
        py::len(item) != 2) {
      throw py::value_error(what + ": (block, window), two ints, or None");
    }
    const py::sequence pair = py::reinterpret_borrow<py::sequence>(item);
    out.push_back(locality_order(count(pair[0]), count(pair[1]), what));
  }
  return out;
}

// The EOD token of a plan whose options append `id` (a pickled plan's, checked when made).
std::optional<EodToken> appended(std::optional<uint64_t> id) {
  if (!id) return std::nullopt;
  EodToken eod;
  eod.id = static_cast<int64_t>(*id);
  eod.appended = true;
  return eod;
}

// numpy's array of `values` (moved, not copied) in `shape`.
template <typename T>
py::array_t<T> moved_array(std::vector<T>&& values, const std::vector<py::ssize_t>& shape) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), owner);
}

using Parts = std::optional<std::vector<std::pair<uint64_t, uint64_t>>>;
using Reader = std::optional<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, uint64_t>>;

py::tuple read_step(TokenStreamRuntime& self, uint64_t world_size, uint64_t rank, int64_t pad,
                    const std::string& position_ids, const Parts& parts, bool ahead,
                    const Reader& reader) {
  const TokenPositions counted = parse_positions(position_ids, "positions");
  std::optional<StreamReader> who;
  if (reader) {
    const auto& [start, per_step, micro, worker, workers] = *reader;
    who = StreamReader{start, per_step, micro, worker, workers};
  }
  StreamStep got;
  {
    py::gil_scoped_release release;
    got = self.read_step(world_size, rank, pad, counted, parts, ahead, who);
  }
  const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(got.rows.rows),
                                          static_cast<py::ssize_t>(self.options().seq_len + 1)};
  return py::make_tuple(got.step, to_array(got.sequences),
                        moved_array(std::move(got.rows.tokens), shape),
                        moved_array(std::move(got.rows.positions), shape),
                        moved_array(std::move(got.rows.segments), shape));
}

}  // namespace

void bind_tokens(py::module_& m) {
  m.def(
      "parse_token_edit",
      [](const std::string& flag, const std::string& value) {
        return python_edit(parse_token_edit(flag, value));
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
      "token_loss_mask",
      [](py::array_t<int64_t, py::array::c_style | py::array::forcecast> tokens,
         py::array_t<int32_t, py::array::c_style | py::array::forcecast> segments,
         bool mask_cross_document, std::optional<int64_t> eod_mask) {
        if (tokens.ndim() != 2 || segments.ndim() != 2 || tokens.shape(0) != segments.shape(0) ||
            tokens.shape(1) != segments.shape(1) || tokens.shape(1) < 1) {
          throw std::invalid_argument("token_loss_mask: tokens and segments must be rows of one "
                                      "shape [rows, seq_len + 1]");
        }
        const auto rows = static_cast<uint64_t>(tokens.shape(0));
        const auto width = static_cast<uint64_t>(tokens.shape(1));
        py::array_t<float> out({tokens.shape(0), tokens.shape(1) - 1});
        {
          py::gil_scoped_release release;
          token_loss_mask(tokens.data(), segments.data(), rows, width,
                          LossMaskRule{mask_cross_document, eod_mask}, out.mutable_data());
        }
        return out;
      },
      py::arg("tokens"), py::arg("segments"), py::arg("mask_cross_document") = false,
      py::arg("eod_mask") = py::none(),
      "float32 [rows, seq_len] loss mask of rows of seq_len + 1 tokens (loader/tokens.h's "
      "token_loss_mask)");
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
  m.def(
      "check_plan_ahead",
      [](const py::int_& ahead) { TokenStreamRuntime::check_plan_ahead(clamped_int(ahead)); },
      py::arg("plan_ahead"),
      "ValueError naming plan_ahead unless it is in [1, 1024] (tokens/stream.h)");
  py::class_<PlanIndex>(m, "PlanIndex",
                        "The plan's states every K steps (tokens/where.h): what makes where() "
                        "and takedown() fast")
      .def(py::init([](const TokenStreamRuntime& run, uint64_t steps, uint64_t every) {
             return PlanIndex(run.start(), steps, every);
           }),
           py::arg("run"), py::arg("steps"), py::arg("every"),
           py::call_guard<py::gil_scoped_release>())
      .def_static("load", [](const std::string& path, const TokenStreamRuntime& run) {
             return PlanIndex::load(path, run.start());
           }, py::arg("path"), py::arg("run"), py::call_guard<py::gil_scoped_release>())
      .def("save", &PlanIndex::save, py::arg("path"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("steps", &PlanIndex::steps)
      .def_property_readonly("every", &PlanIndex::every)
      .def_property_readonly("states", &PlanIndex::size)
      .def_property_readonly("bytes", &PlanIndex::bytes)
      .def_property_readonly("fingerprint", &PlanIndex::fingerprint);

  py::class_<TokenStreamRuntime>(m, "TokenPlan",
                                 "The global stream of training sequences over Megatron indexed "
                                 "sources, read a step at a time (tokens/stream.h)")
      .def(py::init([](std::vector<std::vector<std::string>> prefixes,
                       std::vector<double> weights, uint64_t seq_len, uint64_t global_batch,
                       uint64_t seed, const std::string& packing, uint64_t window,
                       const Changes& changes, const Ramps& ramps, const Appends& appends,
                       const Skips& skips, std::vector<double> split, const std::string& subset,
                       std::optional<py::object> eod_token, bool append_eod,
                       const py::object& orders) {
             // The id as the user wrote it, for the check every edge shares (parse_eod_token).
             std::optional<EodToken> eod;
             if (eod_token) {
               eod = parse_eod_token(std::string(py::str(*eod_token)), append_eod, "eod_token");
             }
             return TokenStreamRuntime(
                 std::move(prefixes),
                 make_options(std::move(weights), seq_len, global_batch, seed, packing, window,
                              std::move(split), subset, locality_orders(orders)),
                 token_edits(changes, ramps, appends, skips), eod);
           }),
           py::arg("prefixes"), py::arg("weights"), py::arg("seq_len"), py::arg("global_batch"),
           py::arg("seed"), py::arg("packing"), py::arg("window"), py::arg("changes") = Changes{},
           py::arg("ramps") = Ramps{}, py::arg("appends") = Appends{}, py::arg("skips") = Skips{},
           py::arg("split") = std::vector<double>{}, py::arg("subset") = "train",
           py::arg("eod_token") = py::none(), py::arg("append_eod") = false,
           py::arg("orders") = py::none())
      .def_property_readonly("latest_weights", &TokenStreamRuntime::latest_weights,
                             "Per source (new ones included), its weight once every edit is in "
                             "force: what an evaluation stream mixes by")
      .def_property_readonly("shards", &TokenStreamRuntime::shards,
                             "Per source (new ones included), its shard prefixes followed by "
                             "those its appends add, numbered as the plan numbers them")
      .def_property_readonly("exhausted", &TokenStreamRuntime::exhausted,
                             "A single pass (subset valid or test): every token of the subset "
                             "has been planned")
      .def_property_readonly("step", &TokenStreamRuntime::step)
      .def_property_readonly("sequence", &TokenStreamRuntime::sequence)
      .def("copy", &TokenStreamRuntime::copy, py::call_guard<py::gil_scoped_release>())
      .def("read_step", &read_step, py::arg("world_size"), py::arg("rank"), py::arg("pad_token"),
           py::arg("positions") = "segment", py::arg("parts") = py::none(),
           py::arg("read_ahead") = false, py::arg("reader") = py::none(),
           "(step, sequences, tokens, positions, segments) of this rank's share of the next step "
           "(or of its rows `parts`, (first, count) pairs); rows of seq_len + 1; positions counted "
           "from each segment's first token ('segment') or each document's ('document'). With "
           "read_ahead and a plan feed, the step after is read on a thread meanwhile. `reader`, "
           "(start, per_step, micro, worker, workers) as worker_parts takes them, tells the "
           "object-store block cache which blocks the coming steps read (plan-aware eviction)")
      .def("skip_step", &TokenStreamRuntime::skip_step, py::arg("world_size"), py::arg("rank"),
           py::call_guard<py::gil_scoped_release>(), "Plans the next step without reading it")
      .def(
          "plan_step",
          [](TokenStreamRuntime& self, uint64_t world_size, uint64_t rank) {
            std::vector<py::tuple> out;
            for (const PlannedSequence& s : self.plan_step(world_size, rank)) {
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
          "explain",
          [](const TokenStreamRuntime& self, uint64_t step, uint64_t world_size,
             const PlanIndex* index) {
            StepExplanation e;
            {
              py::gil_scoped_release release;
              e = self.explain(step, world_size, index);
            }
            py::list rows;
            for (const ExplainedRow& r : e.rows) {
              py::list spans;
              for (const Span& x : r.spans) {
                spans.append(py::dict(py::arg("source") = x.source,
                                      py::arg("document") = x.document,
                                      py::arg("begin") = x.begin, py::arg("end") = x.end,
                                      py::arg("source_epoch") = x.epoch));
              }
              rows.append(py::dict(py::arg("row") = r.row, py::arg("sequence") = r.sequence,
                                   py::arg("rank") = r.rank, py::arg("rank_row") = r.rank_row,
                                   py::arg("tokens") = r.tokens, py::arg("spans") = spans));
            }
            py::list sources;
            for (size_t s = 0; s < e.step_tokens.size(); ++s) {
              sources.append(py::dict(py::arg("source") = s,
                                      py::arg("step_tokens") = e.step_tokens[s],
                                      py::arg("tokens_through") = e.tokens_through[s]));
            }
            return py::dict(py::arg("step") = e.step, py::arg("world_size") = e.world_size,
                            py::arg("rows") = rows, py::arg("sources") = sources);
          },
          py::arg("step"), py::arg("world_size"), py::arg("index") = nullptr,
          "Which documents made `step` (tokens/explain.h), from the plan's start (or `index`'s "
          "last state before it) whatever the "
          "stream's position: {'step', 'world_size', 'rows': [{'row', 'sequence', 'rank', "
          "'rank_row', 'tokens', 'spans': [{'source', 'document', 'begin', 'end', "
          "'source_epoch'}, ...]}, ...], 'sources': [{'source', 'step_tokens', "
          "'tokens_through'}, ...]}")
      .def(
          "where",
          [](const TokenStreamRuntime& self, uint32_t source, uint64_t document, uint64_t until,
             uint64_t world_size, const PlanIndex* index) {
            std::vector<Sighting> found;
            {
              py::gil_scoped_release release;
              found = where_document(self.start(), index, source, document, until, world_size);
            }
            return sightings_list(found);
          },
          py::arg("source"), py::arg("document"), py::arg("until"), py::arg("world_size"),
          py::arg("index"),
          "Every piece of a document in steps [0, until) (tokens/where.h): [{'step', 'row', "
          "'sequence', 'offset', 'source', 'document', 'begin', 'end', 'tokens', "
          "'source_epoch', 'rank', 'rank_row'}, ...]; with `index` (a PlanIndex of this run) a "
          "replay between its states, else a scan")
      .def(
          "takedown",
          [](const TokenStreamRuntime& self, const TokenStreamRuntime& edited,
             std::vector<DocumentId> documents, uint64_t from_step, uint64_t until,
             uint64_t world_size, const PlanIndex* index) {
            Takedown t;
            {
              py::gil_scoped_release release;
              t = takedown(self.start(), index, edited.start(), std::move(documents), from_step,
                           until, world_size);
            }
            return py::dict(py::arg("from_step") = t.from_step,
                            py::arg("documents") = t.documents,
                            py::arg("before") = sightings_list(t.before),
                            py::arg("after") = sightings_list(t.after));
          },
          py::arg("edited"), py::arg("documents"), py::arg("from_step"), py::arg("until"),
          py::arg("world_size"), py::arg("index"),
          "A takedown (tokens/where.h): the sightings before from_step, and those `edited` (this "
          "run with the skip edit) still delivers from it on")
      .def(
          "documents_with_digest",
          [](const TokenStreamRuntime& self, uint32_t source, const py::bytes& digest) {
            if (source >= self.shards().size()) {
              throw std::invalid_argument("source = " + std::to_string(source) +
                                          " is out of range; allowed: 0 <= source < " +
                                          std::to_string(self.shards().size()));
            }
            return documents_with_digest(self.shards()[source], std::string(digest));
          },
          py::arg("source"), py::arg("digest"),
          "The documents of `source` whose .dochash entry is `digest` (16 bytes)")
      .def(
          "fingerprint",
          [](const TokenStreamRuntime& self, uint64_t steps) {
            return PlanIndex::fingerprint_of(self.start(), steps);
          },
          py::arg("steps"), "The run's fingerprint through `steps` (JSON text)")
      .def(
          "state_dict",
          [](TokenStreamRuntime& s, uint64_t world_size) {
            return from_dict_value(s.state_dict(world_size));
          },
          py::arg("world_size"))
      .def(
          "load_state_dict",
          [](TokenStreamRuntime& s, const py::handle& state) {
            const DictValue value = to_dict_value(state);
            py::gil_scoped_release release;
            s.load_state_dict(value);
          },
          py::arg("state"))
      .def("start_feed", &TokenStreamRuntime::start_feed, py::arg("ahead"), py::arg("group"),
           py::arg("world_size"), py::arg("rank"), py::call_guard<py::gil_scoped_release>(),
           "Plans the next steps ahead on a thread (node/plan_feed.h): this process's, for rank "
           "`rank` of `world_size`, or with `group` (a NodeGroup) local rank 0's, for the whole "
           "node; the steps are read from it")
      .def_property_readonly("feeding", &TokenStreamRuntime::feeding,
                             "Whether steps are read from a plan feed")
      .def(py::pickle(
          [](TokenStreamRuntime& s) {
            const TokenPlanOptions& o = s.options();
            py::dict edits;
            for (const char* key : {"changes", "ramps", "appends", "skips"}) edits[key] = py::list();
            for (const TokenEdit& e : s.edits()) {
              const py::tuple x = python_edit(e);
              edits[x[0]].cast<py::list>().append(x[1]);
            }
            py::object feed = py::none();
            if (const auto handle = s.feed_handle()) {
              feed = py::make_tuple(static_cast<int64_t>(handle->first), handle->second);
            }
            return py::make_tuple(s.prefixes(), o.weights, o.seq_len, o.global_batch, o.seed,
                                  std::string(to_string(o.packing)), o.window,
                                  from_dict_value(s.state_dict(1)), edits["changes"],
                                  edits["ramps"], edits["appends"], edits["skips"], o.split,
                                  std::string(to_string(o.subset)), o.appended_eod, feed,
                                  orders_of(o));
          },
          [](py::tuple t) {
            TokenStreamRuntime s(
                t[0].cast<std::vector<std::vector<std::string>>>(),
                make_options(t[1].cast<std::vector<double>>(), t[2].cast<uint64_t>(),
                             t[3].cast<uint64_t>(), t[4].cast<uint64_t>(),
                             t[5].cast<std::string>(), t[6].cast<uint64_t>(),
                             t[12].cast<std::vector<double>>(), t[13].cast<std::string>(),
                             source_orders(t.size() > 16 ? t[16].cast<Orders>() : Orders{})),
                token_edits(t[8].cast<Changes>(), t[9].cast<Ramps>(), t[10].cast<Appends>(),
                            t[11].cast<Skips>()),
                appended(t[14].cast<std::optional<uint64_t>>()));
            s.load_state_dict(to_dict_value(t[7]));
            if (t.size() > 15 && !t[15].is_none()) {  // a spawned worker: the feed of its rank
              const auto [pid, fd] = t[15].cast<std::pair<int64_t, int>>();
              std::string why;
              if (!s.attach_feed(static_cast<pid_t>(pid), fd, &why)) {
                py::module_::import("sys").attr("stderr").attr("write")(
                    "distsampler: this worker plans its own steps: " + why + "\n");
              }
            }
            return s;
          }));
}

}  // namespace python
}  // namespace distsampler
