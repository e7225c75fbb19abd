// _core.cpp: the pybind11 extension behind the distsampler package; translation only.
//
// One bind_<header>() per public header (python/bind_*.cc, declared in bindings.h). Every check
// lives in the C++ library: std::invalid_argument arrives in Python as ValueError,
// std::out_of_range as IndexError. Bulk work (building an epoch's order, filling a window of
// indices) runs with the GIL released.
#include <pybind11/pybind11.h>

#include <string>

#include "bindings.h"
#include "distsampler/version.h"

namespace py = pybind11;

extern "C" int distsampler_guard_fork(void);  // fork_guard.c

PYBIND11_MODULE(_core, m) {
  using namespace distsampler::python;
  m.doc() = "distsampler's C++ core: a rank's view of an epoch (see distsampler.torch)";
  m.attr("__version__") = DISTSAMPLER_VERSION_STRING;
  // Whether fork() in this process waits for CPython's thread-list lock (fork_guard.c: CPython
  // before 3.12, whose fork child can deadlock on it); registered once, when first imported.
  static const bool fork_guarded = distsampler_guard_fork() != 0;
  m.attr("_fork_guarded") = fork_guarded;
#if PYBIND11_VERSION_MAJOR < 2 || (PYBIND11_VERSION_MAJOR == 2 && PYBIND11_VERSION_MINOR < 12)
  // pybind11 before 2.12 misreads numpy 2's array descriptors (an array it returns has strides
  // of 0): refuse to load beside numpy 2 rather than give wrong arrays.
  try {
    const auto numpy = py::module_::import("numpy").attr("__version__").cast<std::string>();
    if (std::stoi(numpy) >= 2) {
      throw py::import_error("distsampler._core was built with pybind11 " +
                             std::to_string(PYBIND11_VERSION_MAJOR) + "." +
                             std::to_string(PYBIND11_VERSION_MINOR) +
                             ", which misreads numpy 2 arrays, and numpy " + numpy +
                             " is installed; allowed: numpy < 2, or a build with pybind11 >= "
                             "2.12 (pip install . takes one)");
    }
  } catch (const py::error_already_set&) {
    // No numpy: nothing to misread.
  }
#endif

  bind_sampler(m);   // sampler.h, partition.h
  bind_node(m);      // node/node_order.h
  bind_launch(m);    // launch/env.h
  bind_prefetch(m);  // prefetch.h
  bind_order(m);     // order.h
  bind_state(m);     // state.h
  bind_pass(m);      // pass.h
  bind_policy(m);    // policy.h, state_dict.h
  bind_receipts(m);  // receipts.h
  bind_policies(m);  // policies/*.h
  bind_indexed(m);   // loader/indexed.h
  bind_tokens(m);    // tokens/plan.h, loader/tokens.h
}
