// bind_sampler.cc: sampler.h and partition.h in Python (DistributedSampler, RankView, rank_view).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "bindings.h"
#include "distsampler/partition.h"
#include "distsampler/sampler.h"

namespace distsampler {
namespace python {
namespace {

DistributedSampler make_sampler(uint64_t size, uint64_t world_size, uint64_t rank,
                                const py::int_& seed, bool shuffle, bool drop_last,
                                const std::string& order, RandpermVariant randperm, bool uneven,
                                int feistel_version) {
  SamplerOptions options;
  options.size = size;
  options.world_size = world_size;
  options.rank = rank;
  options.seed = to_seed(seed);
  options.shuffle = shuffle;
  options.drop_last = drop_last;
  options.order = parse_order_kind(order, "order");
  options.randperm = randperm;
  options.uneven = uneven;
  options.feistel_version = feistel_version;
  return DistributedSampler(options);
}

}  // namespace

void bind_sampler(py::module_& m) {
  py::enum_<RandpermVariant> randperm(m, "RandpermVariant");
  for (const VariantRow<RandpermVariant>& row : kRandpermVariants) {
    randperm.value(row.name, row.value);
  }

  py::class_<RankView>(m, "RankView")
      .def("__len__", &RankView::size)
      .def_property_readonly("epoch", &RankView::epoch)
      .def_property_readonly("start", [](const RankView& v) { return v.partition().start; })
      .def("__getitem__", &RankView::at, py::arg("i"))
      .def(
          "fill",
          [](const RankView& view, uint64_t first, Out<uint64_t> out) {
            uint64_t* data = out.mutable_data();
            const auto count = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            view.fill(first, count, data);
          },
          py::arg("first"), py::arg("out").noconvert(),
          "out[j] = view[first + j] for every j of a C-contiguous uint64 array (filled in place, "
          "never\n"
          "copied: another dtype is a TypeError), computed without the GIL")
      .def("is_padding", &RankView::is_padding, py::arg("i"),
           "Whether sample i is a wrapped-around repeat (padded-with-mask evaluation)")
      .def_property_readonly("num_real", &RankView::num_real,
                             "Samples that are not padding; they come first");

  py::class_<DistributedSampler>(m, "DistributedSampler")
      .def(py::init(&make_sampler), py::arg("size"), py::arg("world_size"), py::arg("rank"),
           py::arg("seed"), py::arg("shuffle"), py::arg("drop_last"), py::arg("order"),
           py::arg("randperm"), py::arg("uneven") = false,
           py::arg("feistel_version") = FeistelPermutation::kDefaultVersion)
      .def_property_readonly("num_samples", &DistributedSampler::num_samples)
      .def_property_readonly("total_size", &DistributedSampler::total_size)
      .def_property_readonly(
          "seed", [](const DistributedSampler& s) { return from_seed(s.options().seed); })
      .def("remaining", &DistributedSampler::remaining, py::arg("start"),
           "Samples per rank left in an epoch resumed at global position `start` (any start; at or "
           "past the end: 0)")
      .def(
          "check_epoch",
          [](const DistributedSampler& sampler, uint64_t epoch) {
            check_epoch(sampler.options().order_options(), epoch);
          },
          py::arg("epoch"),
          "Raises IndexError when `epoch` cannot be read (seed + epoch beyond 2^64 - 1 for the\n"
          "torch order), without building the order")
      .def(
          "epoch",
          [](const DistributedSampler& sampler, uint64_t epoch, uint64_t start) {
            py::gil_scoped_release release;
            return sampler.epoch(epoch, start);
          },
          py::arg("epoch"), py::arg("start") = 0,
          "This rank's view of `epoch`, resumed at global position `start` (partition.h)");

  m.def(
      "rank_view",
      [](const OrderPtr& order, uint64_t world_size, uint64_t rank, bool drop_last, bool uneven,
         uint64_t epoch, uint64_t start) {
        const Partition partition{order->size(), world_size, rank, drop_last, 0, uneven};
        partition.validate();
        return RankView(order, partition.resumed_at(start), epoch);
      },
      py::arg("order"), py::arg("world_size"), py::arg("rank"), py::arg("drop_last") = false,
      py::arg("uneven") = false, py::arg("epoch") = 0, py::arg("start") = 0,
      "A rank's view of any epoch order under partition.h's rule");
}

}  // namespace python
}  // namespace distsampler
