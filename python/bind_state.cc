// bind_state.cc: state.h in Python (checkpoint state, fingerprints, configuration agreement).
#include <cstdint>
#include <string>

#include <pybind11/operators.h>

#include "bindings.h"
#include "distsampler/sampler.h"
#include "distsampler/state.h"

namespace distsampler {
namespace python {

void bind_state(py::module_& m) {
  m.attr("STATE_FORMAT_VERSION") = kStateFormatVersion;
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
      .def_readonly("feistel_version", &Fingerprint::feistel_version)
      .def("field_value", &field_value, py::arg("field"),
           "A field's value as text ('torch', 'true', '-3', ...)")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", [](const Fingerprint& f) {
        std::string text;
        for (const char* name :
             {"algorithm_version", "size", "seed", "shuffle", "drop_last", "uneven", "order",
              "randperm", "feistel_rounds", "feistel_version"}) {
          text += (text.empty() ? "" : ", ") + std::string(name) + "=" + field_value(f, name);
        }
        return "Fingerprint(" + text + ")";
      });

  py::class_<SamplerState>(m, "SamplerState",
                           "A checkpoint: the job consumed global positions [0, consumed) of "
                           "`epoch`'s order")
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

}  // namespace python
}  // namespace distsampler
