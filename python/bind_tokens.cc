// bind_tokens.cc: tokens/plan.h and loader/tokens.h: a token plan over Megatron indexed sources,
// whose steps come back as numpy rows (read with the GIL released).
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "distsampler/loader/tokens.h"
#include "distsampler/tokens/plan.h"

namespace distsampler {
namespace python {
namespace {

// The plan and the sources it reads, with what made them (for pickling).
struct TokenStreamCore {
  std::vector<std::vector<std::string>> prefixes;
  std::vector<std::shared_ptr<const IndexedLengths>> sources;
  TokenPlanOptions options;
  std::shared_ptr<TokenPlan> plan;

  TokenStreamCore(std::vector<std::vector<std::string>> prefixes_in, TokenPlanOptions options_in)
      : prefixes(std::move(prefixes_in)), options(std::move(options_in)) {
    sources = open_token_sources(prefixes);
    plan = std::make_shared<TokenPlan>(
        std::vector<std::shared_ptr<const DocumentLengths>>(sources.begin(), sources.end()),
        options);
  }
  TokenStreamCore copy() const {
    TokenStreamCore out = *this;
    out.plan = std::make_shared<TokenPlan>(*plan);
    return out;
  }
};

TokenPlanOptions make_options(std::vector<double> weights, uint64_t seq_len,
                              uint64_t global_batch, uint64_t seed, const std::string& packing,
                              uint64_t window) {
  TokenPlanOptions o;
  o.weights = std::move(weights);
  o.seq_len = seq_len;
  o.global_batch = global_batch;
  o.seed = seed;
  o.packing = parse_packing(packing);
  o.window = window;
  return o;
}

py::tuple read_step(TokenStreamCore& self, uint64_t world_size, uint64_t rank, int64_t pad) {
  const uint64_t step = self.plan->step();
  std::vector<PlannedSequence> mine;
  TokenRows rows;
  {
    py::gil_scoped_release release;
    const TokenPlanState before = self.plan->state();
    mine = self.plan->next_step(world_size, rank);
    try {
      rows = read_token_rows(self.sources, mine, self.options.seq_len + 1, pad);
    } catch (...) {
      self.plan->load(before);  // a failed read leaves the plan where it was
      throw;
    }
  }
  std::vector<uint64_t> sequences;
  for (const PlannedSequence& s : mine) sequences.push_back(s.index);
  const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(rows.rows),
                                          static_cast<py::ssize_t>(rows.width)};
  py::array_t<int64_t> tokens(shape), positions(shape);
  py::array_t<int32_t> segments(shape);
  std::copy(rows.tokens.begin(), rows.tokens.end(), tokens.mutable_data());
  std::copy(rows.positions.begin(), rows.positions.end(), positions.mutable_data());
  std::copy(rows.segments.begin(), rows.segments.end(), segments.mutable_data());
  return py::make_tuple(step, to_array(sequences), tokens, positions, segments);
}

}  // namespace

void bind_tokens(py::module_& m) {
  m.def(
      "rank_sequences",
      [](uint64_t global_batch, uint64_t world_size, uint64_t rank, uint64_t step) {
        const RankSequences r = rank_sequences(global_batch, world_size, rank, step);
        return py::make_tuple(r.first, r.count);
      },
      py::arg("global_batch"), py::arg("world_size"), py::arg("rank"), py::arg("step"),
      "(first, count): the global sequences rank `rank` of `world_size` reads at `step`");
  py::class_<TokenStreamCore>(m, "TokenPlan",
                              "The global stream of training sequences over Megatron indexed "
                              "sources (tokens/plan.h), read a step at a time")
      .def(py::init([](std::vector<std::vector<std::string>> prefixes,
                       std::vector<double> weights, uint64_t seq_len, uint64_t global_batch,
                       uint64_t seed, const std::string& packing, uint64_t window) {
             return TokenStreamCore(std::move(prefixes), make_options(std::move(weights), seq_len,
                                                                      global_batch, seed, packing,
                                                                      window));
           }),
           py::arg("prefixes"), py::arg("weights"), py::arg("seq_len"), py::arg("global_batch"),
           py::arg("seed"), py::arg("packing"), py::arg("window"))
      .def_property_readonly("step", [](const TokenStreamCore& s) { return s.plan->step(); })
      .def_property_readonly("sequence",
                             [](const TokenStreamCore& s) { return s.plan->sequence(); })
      .def("copy", &TokenStreamCore::copy)
      .def("read_step", &read_step, py::arg("world_size"), py::arg("rank"), py::arg("pad_token"),
           "(step, sequences, tokens, positions, segments) of this rank's share of the next step; "
           "rows of seq_len + 1")
      .def(
          "skip_step",
          [](TokenStreamCore& self, uint64_t world_size, uint64_t rank) {
            py::gil_scoped_release release;
            self.plan->next_step(world_size, rank);
          },
          py::arg("world_size"), py::arg("rank"), "Plans the next step without reading it")
      .def(
          "plan_step",
          [](TokenStreamCore& self, uint64_t world_size, uint64_t rank) {
            std::vector<py::tuple> out;
            for (const PlannedSequence& s : self.plan->next_step(world_size, rank)) {
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
          [](const TokenStreamCore& s, uint64_t world_size) {
            return from_dict_value(s.plan->state_dict(world_size));
          },
          py::arg("world_size"))
      .def(
          "load_state_dict",
          [](TokenStreamCore& s, const py::handle& state) {
            s.plan->load_state_dict(to_dict_value(state));
          },
          py::arg("state"))
      .def(py::pickle(
          [](const TokenStreamCore& s) {
            const TokenPlanOptions& o = s.options;
            return py::make_tuple(s.prefixes, o.weights, o.seq_len, o.global_batch, o.seed,
                                  std::string(to_string(o.packing)), o.window,
                                  from_dict_value(s.plan->state_dict(1)));
          },
          [](const py::tuple& t) {
            TokenStreamCore s(t[0].cast<std::vector<std::vector<std::string>>>(),
                              make_options(t[1].cast<std::vector<double>>(), t[2].cast<uint64_t>(),
                                           t[3].cast<uint64_t>(), t[4].cast<uint64_t>(),
                                           t[5].cast<std::string>(), t[6].cast<uint64_t>()));
            s.plan->load_state_dict(to_dict_value(t[7]));
            return s;
          }));
}

}  // namespace python
}  // namespace distsampler
