// bindings.h: what the extension's bind_<header>() files share (private to python/).
//
// The converters between Python and the library's types, and one bind_*() per public header,
// called in this order by _core.cpp's PYBIND11_MODULE (a class is registered before a later
// binding names it in a signature).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of casters for std types

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/order.h"
#include "distsampler/policy.h"
#include "distsampler/seed.h"
#include "distsampler/state_dict.h"

namespace distsampler {
namespace python {

namespace py = pybind11;

// A Python int of any size becomes a Seed through its decimal text, so Seed::parse owns the
// range check ([-2^63, 2^64 - 1]) and its message.
inline Seed to_seed(const py::int_& value) {
  return Seed::parse(std::string(py::repr(value)), "seed");
}

inline py::int_ from_seed(const Seed& seed) {
  return py::int_(
      py::reinterpret_steal<py::object>(PyLong_FromString(seed.to_string().c_str(), nullptr, 10)));
}

// Orders are shared between views; pybind11 holds them as non-const (it cannot hold a const T).
using OrderPtr = std::shared_ptr<EpochOrder>;
inline OrderPtr to_holder(std::shared_ptr<const EpochOrder> order) {
  return std::const_pointer_cast<EpochOrder>(std::move(order));
}

// A numpy array argument of any dtype, converted (copied) to T; Out<T>: one filled in place.
template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;
template <typename T>
using Out = py::array_t<T, py::array::c_style>;

template <typename T>
std::vector<T> to_vector(const Array<T>& values) {
  return std::vector<T>(values.data(), values.data() + values.size());
}

template <typename T>
py::array_t<T> to_array(const std::vector<T>& values) {
  py::array_t<T> out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

// A state dict's values as state_dict.h holds them, and back (bind_policy.cc).
DictValue to_dict_value(py::handle value);
py::object from_dict_value(const DictValue& value);

// The order and the Feistel version as Python passes them, checked against their variant tables
// (bind_order.cc): ValueError naming the parameter, the value and the allowed ones.
std::string order_argument(const py::handle& order);
int feistel_version_argument(const py::handle& version);

// The pass sampler Python holds (_core.PassSampler, bind_policy.cc); a loader's tracker reports
// to it (bind_receipts.cc).
// What the live pass handed out, as its chunks count it: the chunks before the current one plus
// what was taken from the current list iterator, which knows how much of it is left.
struct Progress {
  uint64_t serial = 0;
  uint64_t before = 0;
  uint64_t size = 0;
  py::object current;  // the current chunk's list iterator
  uint64_t handed() const {
    if (!current) return before;
    const Py_ssize_t left = PyObject_LengthHint(current.ptr(), 0);
    return before + size - static_cast<uint64_t>(left < 0 ? 0 : left);
  }
};

// A PolicySampler with the progress of the pass Python is reading.
struct BoundSampler {
  PolicySampler core;
  std::shared_ptr<Progress> live;
  PolicySampler& synced() {
    if (live) core.set_handed(live->serial, live->handed());
    return core;
  }
};

void bind_sampler(py::module_& m);   // sampler.h, partition.h
void bind_node(py::module_& m);      // node/node_order.h
void bind_launch(py::module_& m);    // launch/env.h
void bind_prefetch(py::module_& m);  // prefetch.h
void bind_order(py::module_& m);     // order.h
void bind_policies(py::module_& m);  // policies/*.h
void bind_state(py::module_& m);     // state.h
void bind_pass(py::module_& m);      // pass.h
void bind_policy(py::module_& m);    // policy.h, state_dict.h
void bind_indexed(py::module_& m);   // loader/indexed.h
void bind_tokens(py::module_& m);    // tokens/plan.h, loader/tokens.h
void bind_receipts(py::module_& m);  // receipts.h

}  // namespace python
}  // namespace distsampler
