// _core.cpp: the pybind11 extension behind the distsampler package; translation only.
//
// Every check lives in the C++ library: std::invalid_argument arrives in Python as ValueError,
// std::out_of_range as IndexError. Bulk work (building an epoch's order, filling a window of
// indices) runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "distsampler/sampler.h"
#include "distsampler/seed.h"
#include "distsampler/state.h"
#include "distsampler/version.h"

namespace py = pybind11;

namespace distsampler {
namespace {

// A Python int of any size becomes a Seed through its decimal text, so Seed::parse owns the
// range check ([-2^63, 2^64 - 1]) and its message.
Seed to_seed(const py::int_& value) { return Seed::parse(std::string(py::repr(value)), "seed"); }

py::int_ from_seed(const Seed& seed) {
  return py::int_(
      py::reinterpret_steal<py::object>(PyLong_FromString(seed.to_string().c_str(), nullptr, 10)));
}

DistributedSampler make_sampler(uint64_t size, uint64_t world_size, uint64_t rank,
                                const py::int_& seed, bool shuffle, bool drop_last,
                                const std::string& order, RandpermVariant randperm) {
  SamplerOptions options;
  options.size = size;
  options.world_size = world_size;
  options.rank = rank;
  options.seed = to_seed(seed);
  options.shuffle = shuffle;
  options.drop_last = drop_last;
  options.order = parse_order_kind(order, "order");
  options.randperm = randperm;
  return DistributedSampler(options);
}

}  // namespace
}  // namespace distsampler

// ---- state.h: checkpoint state, fingerprints, configuration agreement (issue 5) ----
namespace distsampler {
namespace {

void bind_state(py::module_& m) {
  m.attr("STATE_FORMAT_VERSION") = kStateFormatVersion;
  m.attr("STATE_BYTES") = kStateBytes;
  m.attr("ORDER_ALGORITHM_VERSION") = kOrderAlgorithmVersion;

  py::class_<Fingerprint>(m, "Fingerprint",
                          "What every rank of a job, and a job and its checkpoint, must agree on")
      .def_readonly("algorithm_version", &Fingerprint::algorithm_version)
      .def_readonly("size", &Fingerprint::size)
      .def_property_readonly("seed", [](const Fingerprint& f) { return from_seed(f.seed); })
      .def_readonly("shuffle", &Fingerprint::shuffle)
      .def_readonly("drop_last", &Fingerprint::drop_last)
      .def_readonly("uneven", &Fingerprint::uneven)
      .def_property_readonly("order", [](const Fingerprint& f) { return field_value(f, "order"); })
      .def_property_readonly("randperm",
                             [](const Fingerprint& f) { return field_value(f, "randperm"); })
      .def_readonly("feistel_rounds", &Fingerprint::feistel_rounds)
      .def("field_value", &field_value, py::arg("field"),
           "A field's value as text ('torch', 'true', '-3', ...)")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", [](const Fingerprint& f) {
        std::string text;
        for (const char* name : {"algorithm_version", "size", "seed", "shuffle", "drop_last",
                                 "uneven", "order", "randperm", "feistel_rounds"}) {
          text += (text.empty() ? "" : ", ") + std::string(name) + "=" + field_value(f, name);
        }
        return "Fingerprint(" + text + ")";
      });

  py::class_<SamplerState>(m, "SamplerState",
                           "A checkpoint: the job consumed global positions [0, consumed) of "
                           "`epoch`'s order")
      .def(py::init([](const Fingerprint& config, uint64_t epoch, uint64_t consumed) {
             return SamplerState{config, epoch, consumed};
           }),
           py::arg("config"), py::arg("epoch"), py::arg("consumed"))
      .def_readonly("config", &SamplerState::config)
      .def_readonly("epoch", &SamplerState::epoch)
      .def_readonly("consumed", &SamplerState::consumed)
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", [](const SamplerState& s) {
        return "SamplerState(epoch=" + std::to_string(s.epoch) +
               ", consumed=" + std::to_string(s.consumed) + ")";
      });

  m.def(
      "fingerprint",
      [](const DistributedSampler& sampler) { return fingerprint(sampler.options()); },
      py::arg("sampler"), "The sampler's configuration fingerprint (never its world size or rank)");
  m.def("differing_fields", &differing_fields, py::arg("a"), py::arg("b"));
  m.def("describe_disagreement", &describe_disagreement, py::arg("per_rank"),
        "'' when every rank's fingerprint is the same, else one line per differing field");
  m.def(
      "crc32", [](const py::bytes& data) { return crc32(std::string(data)); }, py::arg("data"));
  m.def(
      "encode_state", [](const SamplerState& s) { return py::bytes(encode_state(s)); },
      py::arg("state"));
  m.def(
      "decode_state", [](const py::bytes& data) { return decode_state(std::string(data)); },
      py::arg("data"));
  m.def("state_to_json", &state_to_json, py::arg("state"));
  m.def(
      "state_from_json", [](const std::string& json) { return state_from_json(json); },
      py::arg("json"));
  m.def("make_state", &make_state, py::arg("sampler"), py::arg("epoch"), py::arg("consumed"));
  m.def("consumed_after", &consumed_after, py::arg("view"), py::arg("taken"));
  m.def(
      "resume",
      [](const DistributedSampler& sampler, const SamplerState& state) {
        py::gil_scoped_release release;
        return resume(sampler, state);
      },
      py::arg("sampler"), py::arg("state"),
      "This rank's view of the rest of the state's epoch, on this sampler's world size and rank");
}

}  // namespace
}  // namespace distsampler
// ---- end of the state.h bindings ----

PYBIND11_MODULE(_core, m) {
  using namespace distsampler;
  m.doc() = "distsampler's C++ core: a rank's view of an epoch (see distsampler.torch)";
  m.attr("__version__") = DISTSAMPLER_VERSION_STRING;

  py::enum_<RandpermVariant>(m, "RandpermVariant")
      .value("current", RandpermVariant::kCurrent)
      .value("classic", RandpermVariant::kClassic);

  py::class_<RankView>(m, "RankView")
      .def("__len__", &RankView::size)
      .def_property_readonly("epoch", &RankView::epoch)
      .def_property_readonly("start", [](const RankView& v) { return v.partition().start; })
      .def("__getitem__", &RankView::at, py::arg("i"))
      .def(
          "fill",
          [](const RankView& view, uint64_t first, py::array_t<uint64_t, py::array::c_style> out) {
            uint64_t* data = out.mutable_data();
            const auto count = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            view.fill(first, count, data);
          },
          py::arg("first"), py::arg("out").noconvert(),
          "out[j] = view[first + j] for every j of a C-contiguous uint64 array (filled in place, "
          "never\n"
          "copied: another dtype is a TypeError), computed without the GIL");

  py::class_<DistributedSampler>(m, "DistributedSampler")
      .def(py::init(&make_sampler), py::arg("size"), py::arg("world_size"), py::arg("rank"),
           py::arg("seed"), py::arg("shuffle"), py::arg("drop_last"), py::arg("order"),
           py::arg("randperm"))
      .def_property_readonly("num_samples", &DistributedSampler::num_samples)
      .def_property_readonly("total_size", &DistributedSampler::total_size)
      .def_property_readonly(
          "seed", [](const DistributedSampler& s) { return from_seed(s.options().seed); })
      .def(
          "remaining",
          [](const DistributedSampler& sampler, uint64_t start) {
            Partition resumed = sampler.partition();
            resumed.start = start;
            resumed.validate();
            return resumed.num_samples();
          },
          py::arg("start"), "Samples per rank left in an epoch resumed at global position `start`")
      .def(
          "epoch",
          [](const DistributedSampler& sampler, uint64_t epoch, uint64_t start) {
            py::gil_scoped_release release;
            return sampler.epoch(epoch, start);
          },
          py::arg("epoch"), py::arg("start") = 0,
          "This rank's view of `epoch`, resumed at global position `start` (partition.h)");

  bind_state(m);  // state.h (issue 5)
}
