// bind_pass.cc: pass.h (the passes every Python sampler shares, through _passes.py).
#include <optional>
#include <stdexcept>
#include <tuple>

#include "bindings.h"
#include "distsampler/pass.h"

namespace distsampler {
namespace python {
namespace {

py::object pass_to_python(const std::optional<Pass>& pass) {
  if (!pass) return py::none();
  return py::make_tuple(pass->epoch, pass->start, pass->world_size, pass->total, pass->taken);
}

std::optional<Pass> pass_from_python(const py::object& value) {
  if (value.is_none()) return std::nullopt;
  const auto t = value.cast<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, uint64_t>>();
  return Pass{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t), std::get<4>(t)};
}

}  // namespace

void bind_pass(py::module_& m) {
  py::enum_<PassNotice>(m, "PassNotice")
      .value("none", PassNotice::kNone)
      .value("replay", PassNotice::kReplay)
      .value("advance", PassNotice::kAdvance);

  py::class_<PassPlan>(m, "PassPlan", "The pass the next begin() starts (pass.h)")
      .def_readonly("epoch", &PassPlan::epoch)
      .def_readonly("start", &PassPlan::start)
      .def_readonly("notice", &PassPlan::notice);

  py::class_<PassCursor>(m, "PassCursor", "The passes of a sampler (pass.h)")
      .def(py::init<bool>(), py::arg("auto_epoch") = false)
      .def_property_readonly("auto_epoch", &PassCursor::auto_epoch)
      .def_property_readonly("epoch", &PassCursor::epoch)
      .def_property_readonly("resume_at", &PassCursor::resume_at)
      .def("set_epoch", &PassCursor::set_epoch, py::arg("epoch"))
      .def("plan", &PassCursor::plan, py::arg("shuffled"))
      .def("begin", &PassCursor::begin, py::arg("plan"), py::arg("total"), py::arg("world_size"))
      .def("set_taken", &PassCursor::set_taken, py::arg("taken"))
      .def(
          "position",
          [](const PassCursor& cursor) {
            const Position p = cursor.position();
            return py::make_tuple(p.epoch, p.consumed);
          },
          "(epoch, consumed) a checkpoint taken now records")
      .def(
          "load",
          [](PassCursor& cursor, uint64_t epoch, uint64_t consumed, uint64_t left) {
            cursor.load(Position{epoch, consumed}, left);
          },
          py::arg("epoch"), py::arg("consumed"), py::arg("left"))
      .def("skip_finished", &PassCursor::skip_finished)
      .def(py::pickle(
          [](const PassCursor& cursor) {
            const PassCursor::State& s = cursor.state();
            return py::make_tuple(s.auto_epoch, s.epoch, s.explicit_epoch, s.resume_at,
                                  pass_to_python(s.live), s.after_finished, s.noticed);
          },
          [](const py::tuple& t) {
            if (t.size() != 7) throw std::invalid_argument("PassCursor: a pickled state of 7");
            PassCursor::State s;
            s.auto_epoch = t[0].cast<bool>();
            s.epoch = t[1].cast<uint64_t>();
            s.explicit_epoch = t[2].cast<bool>();
            s.resume_at = t[3].cast<uint64_t>();
            s.live = pass_from_python(t[4]);
            s.after_finished = t[5].cast<std::optional<uint64_t>>();
            s.noticed = t[6].cast<bool>();
            return PassCursor(s);
          }));

  m.def("pass_notice_text", &pass_notice_text, py::arg("notice"), py::arg("epoch"),
        py::arg("who"), py::arg("peers"), py::arg("option"));
}

}  // namespace python
}  // namespace distsampler
