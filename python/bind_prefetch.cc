// bind_prefetch.cc: prefetch.h in Python (PrefetchingSampler).
#include <cstdint>
#include <memory>
#include <optional>

#include "bindings.h"
#include "distsampler/node/node_order.h"
#include "distsampler/prefetch.h"
#include "distsampler/sampler.h"

namespace distsampler {
namespace python {

void bind_prefetch(py::module_& m) {
  py::class_<PrefetchingSampler, std::shared_ptr<PrefetchingSampler>>(
      m, "PrefetchingSampler",
      "prefetch.h: DistributedSampler.epoch with the next epoch's torch order built in the "
      "background")
      .def(py::init([](const DistributedSampler& sampler, bool prefetch,
                       const std::optional<NodeGroup>& node) {
             return std::make_shared<PrefetchingSampler>(
                 sampler.options(), prefetch, node ? node_order_builder(*node) : OrderBuilder());
           }),
           py::arg("sampler"), py::arg("prefetch") = true, py::arg("node") = py::none(),
           "node: share the torch order's permutation with the node's other ranks "
           "(node/node_order.h)")
      .def_property_readonly("prefetching", &PrefetchingSampler::prefetching)
      .def_property_readonly("hits", &PrefetchingSampler::hits)
      .def_property_readonly("live_orders", &PrefetchingSampler::live_orders)
      .def(
          "epoch",
          [](PrefetchingSampler& sampler, uint64_t epoch, uint64_t start) {
            py::gil_scoped_release release;
            return sampler.epoch(epoch, start);
          },
          py::arg("epoch"), py::arg("start") = 0,
          "DistributedSampler.epoch(epoch, start), the same bits; then builds epoch + 1");
}

}  // namespace python
}  // namespace distsampler
