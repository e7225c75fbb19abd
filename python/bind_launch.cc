// bind_launch.cc: launch/env.h and launch/parent.h in Python (for distsampler.launch and the
// DataLoader's workers).
#include <cstdint>
#include <deque>
#include <string>

#include "bindings.h"
#include "distsampler/launch/env.h"
#include "distsampler/launch/parent.h"

namespace distsampler {
namespace python {
namespace {

// A Python mapping (os.environ, a dict) as an EnvLookup; what it returns points into `values`.
EnvLookup lookup_in(const py::object& env, std::deque<std::string>& values) {
  return [&env, &values](const char* name) -> const char* {
    const py::object value = env.attr("get")(name);
    if (value.is_none()) return nullptr;
    values.push_back(value.cast<std::string>());
    return values.back().c_str();
  };
}

}  // namespace

void bind_launch(py::module_& m) {
  m.def(
      "refuse_slurm_outside_step",
      [](const py::object& env, const std::string& remedy) {
        std::deque<std::string> values;
        refuse_slurm_outside_step(lookup_in(env, values), remedy);
      },
      py::arg("env"), py::arg("remedy"),
      "ValueError when SLURM_PROCID or SLURM_NTASKS is set in the mapping `env` outside a job "
      "step, ending in `remedy`");
  m.def("slurm_first_host", &slurm_first_host, py::arg("nodelist"),
        "The first host of a SLURM host list, parsed; ValueError naming a malformed list");
  m.def(
      "slurm_torchrun_env",
      [](const py::object& env, const py::object& master_address) {
        std::deque<std::string> values;
        return slurm_torchrun_env(lookup_in(env, values), [&](const std::string& nodelist) {
          return master_address(nodelist).cast<std::string>();
        });
      },
      py::arg("env"), py::arg("master_address"),
      "[(name, value)] of torchrun's variables from a SLURM step's in the mapping `env`");
  m.def("end_with_process", &end_with_process, py::arg("creator"), py::arg("death_signal"),
        "Ends this process when process `creator` ends (launch/parent.h)");
}

}  // namespace python
}  // namespace distsampler
