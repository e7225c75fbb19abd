// bind_order.cc: order.h in Python (EpochOrder, make_epoch_order), with the variant tables of the
// order layer (variants.h: order kinds, randperm variants, Feistel versions) as names and parsers.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "bindings.h"
#include "distsampler/feistel.h"
#include "distsampler/order.h"
#include "distsampler/torch_random.h"
#include "distsampler/variants.h"

namespace distsampler {
namespace python {
namespace {

// A row's value as Python holds it: the name for named variants, the number for versions.
py::object python_value(const VariantRow<OrderKind>& row) { return py::str(row.name); }
py::object python_value(const VariantRow<RandpermVariant>& row) { return py::str(row.name); }
py::object python_value(const FeistelVersionRow& row) { return py::int_(row.value); }

// The row `value` denotes: a str naming a row, or for versions an int (not a bool) holding one.
template <class Row, size_t N>
const Row* find_row(const Row (&table)[N], const py::handle& value) {
  if constexpr (std::is_same_v<Row, FeistelVersionRow>) {
    if (!PyLong_CheckExact(value.ptr())) return nullptr;
    const long long number = PyLong_AsLongLong(value.ptr());
    if (number == -1 && PyErr_Occurred()) {  // beyond long long: no row
      PyErr_Clear();
      return nullptr;
    }
    for (const Row& row : table) {
      if (row.value == number) return &row;
    }
    return nullptr;
  } else {
    if (!py::isinstance<py::str>(value)) return nullptr;
    return detail::find_variant_name(table, value.cast<std::string>());
  }
}

// detail::check_variant's rule and message in Python's spelling: `value` if it is a row's (or one
// of `also`, which the caller resolves), else ValueError
// "<parameter> = <repr(value)> is not <noun>; allowed: <repr of also and every row>".
template <class Row, size_t N>
py::object parse_python(const Row (&table)[N], const py::handle& value,
                        const std::string& parameter, const char* noun,
                        const std::vector<std::string>& also = {}) {
  if (py::isinstance<py::str>(value)) {
    for (const std::string& name : also) {
      if (value.cast<std::string>() == name) return py::str(name);
    }
  }
  if (const Row* row = find_row(table, value)) return python_value(*row);
  std::string allowed;
  auto add = [&](const py::object& v) {
    allowed += (allowed.empty() ? "" : ", ") + std::string(py::repr(v));
  };
  for (const std::string& name : also) add(py::str(name));
  for (const Row& row : table) add(python_value(row));
  throw py::value_error(parameter + " = " + std::string(py::repr(value)) + " is not " + noun +
                        "; allowed: " + allowed);
}

template <class Row, size_t N>
py::tuple python_values(const Row (&table)[N]) {
  py::list out;
  for (const Row& row : table) out.append(python_value(row));
  return py::tuple(out);
}

// The tables (ORDER_KINDS, ...) and a parser per table, which Python's argument checks call.
void bind_variants(py::module_& m) {
  m.attr("ORDER_KINDS") = python_values(kOrderKinds);
  m.attr("RANDPERM_VARIANTS") = python_values(kRandpermVariants);
  m.attr("FEISTEL_VERSIONS") = python_values(kFeistelVersions);
  m.def(
      "parse_order_kind",
      [](const py::object& order, const std::string& parameter) {
        return parse_python(kOrderKinds, order, parameter, "an order");
      },
      py::arg("order"), py::arg("parameter") = "order",
      "order if it names an order (ORDER_KINDS), else ValueError naming parameter, the value and "
      "the allowed names");
  m.def(
      "parse_randperm_variant",
      [](const py::object& randperm, const std::string& parameter,
         const std::vector<std::string>& also) {
        return parse_python(kRandpermVariants, randperm, parameter, "a variant", also);
      },
      py::arg("randperm"), py::arg("parameter") = "randperm",
      py::arg("also") = std::vector<std::string>{},
      "randperm if it names a variant (RANDPERM_VARIANTS) or is one of `also` (names the caller "
      "resolves,\nlisted first among the allowed ones, e.g. 'auto'), else ValueError");
  m.def("randperm_variant_of_torch", &randperm_variant_of_torch, py::arg("torch_version"),
        "The variant torch.randperm of that PyTorch release uses (torch.__version__)");
  m.def(
      "parse_feistel_version",
      [](const py::object& version, const std::string& parameter) {
        return parse_python(kFeistelVersions, version, parameter, "a version");
      },
      py::arg("feistel_version"), py::arg("parameter") = "feistel_version",
      "feistel_version if it is an int (not a bool) in FEISTEL_VERSIONS, else ValueError");
}

}  // namespace

std::string order_argument(const py::handle& order) {
  return parse_python(kOrderKinds, order, "order", "an order").cast<std::string>();
}

int feistel_version_argument(const py::handle& version) {
  return parse_python(kFeistelVersions, version, "feistel_version", "a version").cast<int>();
}

void bind_order(py::module_& m) {
  bind_variants(m);
  py::class_<EpochOrder, OrderPtr>(m, "EpochOrder", "One epoch's global order (order.h)")
      .def("__len__", &EpochOrder::size)
      .def(
          "array",
          [](const EpochOrder& order) {
            constexpr uint64_t kMaxArray = uint64_t{1} << 60;  // bytes must fit a ssize_t
            if (order.size() > kMaxArray) {
              throw std::length_error("size = " + std::to_string(order.size()) +
                                      " is too large for one array; allowed: size <= 2^60 (read "
                                      "a window of a view with fill instead)");
            }
            py::array_t<uint64_t> out(static_cast<py::ssize_t>(order.size()));
            uint64_t* data = out.mutable_data();
            py::gil_scoped_release release;
            order.gather(0, 1, order.size(), data);
            return out;
          },
          "The whole order as a uint64 array");
  m.def(
      "make_epoch_order",
      [](uint64_t size, const py::int_& seed, bool shuffle, const std::string& order,
         RandpermVariant randperm, uint64_t epoch, int feistel_version) {
        const OrderOptions options{size,           to_seed(seed),
                                   shuffle,        parse_order_kind(order),
                                   randperm,       FeistelPermutation::kVersionDefaultRounds,
                                   feistel_version};
        py::gil_scoped_release release;
        return to_holder(make_epoch_order(options, epoch));
      },
      py::arg("size"), py::arg("seed"), py::arg("shuffle"), py::arg("order"), py::arg("randperm"),
      py::arg("epoch"), py::arg("feistel_version") = FeistelPermutation::kDefaultVersion);
}

}  // namespace python
}  // namespace distsampler
