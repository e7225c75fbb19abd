// bind_node.cc: node/node_order.h in Python (NodeGroup, detect_node_group, node_order_counts).
#include <cstdint>
#include <string>
#include <utility>

#include "bindings.h"
#include "distsampler/node/node_order.h"

namespace distsampler {
namespace python {

void bind_node(py::module_& m) {
  py::class_<NodeGroup>(m, "NodeGroup",
                        "node/node_order.h: the local ranks that share one permutation per epoch")
      .def(py::init([](std::string job, std::string node, uint64_t local_rank,
                       uint64_t local_world_size, double timeout_seconds) {
             return NodeGroup{std::move(job), std::move(node), local_rank, local_world_size,
                              timeout_seconds};
           }),
           py::arg("job"), py::arg("node"), py::arg("local_rank"), py::arg("local_world_size"),
           py::arg("timeout_seconds") = 300.0)
      .def_readonly("local_world_size", &NodeGroup::local_world_size);
  m.def(
      "detect_node_group", [] { return detect_node_group(); },
      "The node group from torchrun's, Open MPI's or a SLURM step's variables, or None");
  m.def(
      "node_order_counts",
      [] {
        const NodeOrderCounts c = node_order_counts();
        return py::dict(py::arg("built") = c.built, py::arg("mapped") = c.mapped,
                        py::arg("fallbacks") = c.fallbacks);
      },
      "Permutations this process built into shared memory, mapped from another rank, and built "
      "per rank because shared memory was unavailable");
}

}  // namespace python
}  // namespace distsampler
