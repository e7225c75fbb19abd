// bind_launch.cc: launch/env.h in Python (refuse_slurm_outside_step, for distsampler.launch).
#include <deque>
#include <string>

#include "bindings.h"
#include "distsampler/launch/env.h"

namespace distsampler {
namespace python {

void bind_launch(py::module_& m) {
  m.def(
      "refuse_slurm_outside_step",
      [](const py::object& env, const std::string& remedy) {
        std::deque<std::string> values;  // what the lookup returns points into these
        refuse_slurm_outside_step(
            [&](const char* name) -> const char* {
              const py::object value = env.attr("get")(name);
              if (value.is_none()) return nullptr;
              values.push_back(value.cast<std::string>());
              return values.back().c_str();
            },
            remedy);
      },
      py::arg("env"), py::arg("remedy"),
      "ValueError when SLURM_PROCID or SLURM_NTASKS is set in the mapping `env` outside a job "
      "step, ending in `remedy`");
}

}  // namespace python
}  // namespace distsampler
