// bind_order.cc: order.h in Python (EpochOrder, make_epoch_order).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "bindings.h"
#include "distsampler/feistel.h"
#include "distsampler/order.h"

namespace distsampler {
namespace python {

void bind_order(py::module_& m) {
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
