// bind_state.cc: state.h in Python (checkpoint state, fingerprints, configuration agreement).
#include <pybind11/operators.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.h"
#include "distsampler/fingerprint.h"
#include "distsampler/sampler.h"
#include "distsampler/state.h"

namespace distsampler {
namespace python {
namespace {

// A field's text value as Python reads it: an int, a bool or a str.
py::object field_object(const FingerprintField& row, const std::string& text) {
  switch (row.kind) {
    case FieldKind::kUnsigned:
    case FieldKind::kInteger:
      return py::reinterpret_steal<py::object>(PyLong_FromString(text.c_str(), nullptr, 10));
    case FieldKind::kBool:
      return py::bool_(text == "true");
    case FieldKind::kName:
      break;
  }
  return py::str(text);
}

}  // namespace

void bind_state(py::module_& m) {
  m.attr("STATE_FORMAT_VERSION") = kStateFormatVersion;
  m.attr("ORDER_ALGORITHM_VERSION") = kOrderAlgorithmVersion;

  // The fingerprint's fields, their Python values and repr all come from its table (fingerprint.h).
  const std::vector<FingerprintField>& fields = fingerprint_fields();
  py::class_<Fingerprint> fingerprint_class(
      m, "Fingerprint", "What every rank of a job, and a job and its checkpoint, must agree on");
  py::list names;
  py::dict absent;
  for (const FingerprintField& row : fields) {
    fingerprint_class.def_property_readonly(
        row.name, [p = &row](const Fingerprint& f) { return field_object(*p, p->value(f)); });
    names.append(row.name);
    if (row.absent != nullptr) absent[row.name] = field_object(row, row.absent);
  }
  fingerprint_class
      .def("field_value", &field_value, py::arg("field"),
           "A field's value as text ('torch', 'true', '-3', ...)")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", [](const Fingerprint& f) {
        std::string text;
        for (const FingerprintField& row : fingerprint_fields()) {
          text += (text.empty() ? "" : ", ") + std::string(row.name) + "=" + row.value(f);
        }
        return "Fingerprint(" + text + ")";
      });
  m.attr("FINGERPRINT_FIELDS") = py::tuple(names);
  m.attr("FINGERPRINT_ABSENT") = absent;
  m.def(
      "fingerprint_fields",
      [](const Fingerprint& f) {
        py::list out;
        for (const FingerprintField& row : fingerprint_fields()) {
          out.append(py::make_tuple(row.name, field_object(row, row.value(f))));
        }
        return out;
      },
      py::arg("fingerprint"), "[(name, value)] in the table's order (fingerprint.h)");

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
  m.def("crc32", [](const py::bytes& data) { return crc32(std::string(data)); }, py::arg("data"));
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
