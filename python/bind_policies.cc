// bind_policies.cc: policies/*.h in Python (shard, bucketed and sequence orders, BatchView,
// weighted and blended sampling).
#include <cstdint>
#include <vector>

#include "bindings.h"
#include "distsampler/policies/batches.h"
#include "distsampler/policies/blend.h"
#include "distsampler/policies/shards.h"
#include "distsampler/policies/weighted.h"
#include "distsampler/policies/wrap.h"

namespace distsampler {
namespace python {

void bind_policies(py::module_& m) {
  m.def(
      "make_shard_order",
      [](const Array<uint64_t>& shard_sizes, uint64_t window, const py::int_& seed,
         uint64_t epoch) {
        ShardOptions options{to_vector(shard_sizes), window, to_seed(seed)};
        py::gil_scoped_release release;
        return to_holder(make_shard_order(options, epoch));
      },
      py::arg("shard_sizes"), py::arg("window"), py::arg("seed"), py::arg("epoch"));
  m.def(
      "make_bucketed_order",
      [](const Array<uint64_t>& lengths, uint64_t batch_size, uint64_t window_batches,
         const py::int_& seed, uint64_t epoch) {
        BucketOptions options{to_vector(lengths), batch_size, window_batches, to_seed(seed)};
        py::gil_scoped_release release;
        return to_holder(make_bucketed_order(options, epoch));
      },
      py::arg("lengths"), py::arg("batch_size"), py::arg("window_batches"), py::arg("seed"),
      py::arg("epoch"));
  m.def(
      "make_sequence_order",
      [](const Array<uint64_t>& sequence) {
        return to_holder(make_sequence_order(to_vector(sequence)));
      },
      py::arg("sequence"));

  py::class_<BatchView>(m, "BatchView")
      .def(py::init<OrderPtr, uint64_t, uint64_t, uint64_t, bool>(), py::arg("order"),
           py::arg("batch_size"), py::arg("world_size"), py::arg("rank"), py::arg("drop_last"))
      .def("__len__", &BatchView::size)
      .def_property_readonly("batch_size", &BatchView::batch_size)
      .def("global_indices", &BatchView::global, py::arg("b"))
      .def("__getitem__", &BatchView::operator[], py::arg("j"));

  m.def(
      "class_balanced_weights",
      [](const Array<int64_t>& labels) {
        const std::vector<int64_t> values = to_vector(labels);
        std::vector<double> weights;
        {
          py::gil_scoped_release release;
          weights = class_balanced_weights(values);
        }
        return to_array(weights);
      },
      py::arg("labels"));
  py::class_<WeightedSampler>(m, "WeightedSampler")
      .def(py::init([](const Array<double>& weights, uint64_t size, uint64_t num_samples,
                       uint64_t world_size, uint64_t rank, const py::int_& seed, bool drop_last) {
             WeightedOptions options;
             options.size = size;
             options.num_samples = num_samples;
             options.world_size = world_size;
             options.rank = rank;
             options.seed = to_seed(seed);
             options.drop_last = drop_last;
             const std::vector<double> w = to_vector(weights);
             py::gil_scoped_release release;
             return WeightedSampler(w, options);
           }),
           py::arg("weights"), py::arg("size"), py::arg("num_samples"), py::arg("world_size"),
           py::arg("rank"), py::arg("seed"), py::arg("drop_last"))
      .def_property_readonly("num_samples", &WeightedSampler::num_samples)
      .def("global_draw", &WeightedSampler::global, py::arg("epoch"), py::arg("g"))
      .def(
          "fill_global",
          [](const WeightedSampler& sampler, uint64_t epoch, uint64_t first, uint64_t stride,
             Out<uint64_t> out) {
            uint64_t* data = out.mutable_data();
            const auto count = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            sampler.fill_global(epoch, first, stride, count, data);
          },
          py::arg("epoch"), py::arg("first"), py::arg("stride"), py::arg("out").noconvert(),
          "out[j] = global draw first + j * stride of `epoch` (a resumed pass), without the GIL");

  py::class_<QuotaSchedule>(m, "QuotaSchedule")
      .def(py::init([](const Array<double>& weights) { return QuotaSchedule(to_vector(weights)); }),
           py::arg("weights"))
      .def_property_readonly("weights", &QuotaSchedule::weights)
      .def_property_readonly("quota_weights", &QuotaSchedule::quota_weights)
      .def_property_readonly("quota_total", &QuotaSchedule::quota_total)
      .def_property_readonly("quota_exact", &QuotaSchedule::quota_exact)
      .def_property_readonly("error_bound", &QuotaSchedule::error_bound)
      .def(
          "at",
          [](const QuotaSchedule& schedule, uint64_t i) {
            const BlendedSample s = schedule.at(i);
            return py::make_tuple(s.dataset, s.index);
          },
          py::arg("i"), "(dataset, draws of that dataset before position i)")
      .def("count", &QuotaSchedule::count, py::arg("k"), py::arg("i"))
      .def(
          "datasets",
          [](const QuotaSchedule& schedule, uint64_t first, Out<uint64_t> out) {
            uint64_t* data = out.mutable_data();
            const auto count = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            schedule.datasets(first, count, data);
          },
          py::arg("first"), py::arg("out").noconvert(),
          "out[j] = the dataset of stream position first + j, without the GIL");

  py::class_<BlendedSampler>(m, "BlendedSampler")
      .def(py::init([](const Array<uint64_t>& sizes, const Array<double>& weights,
                       uint64_t samples_per_epoch, uint64_t world_size, uint64_t rank,
                       const py::int_& seed, bool drop_last) {
             BlendOptions options;
             options.sizes = to_vector(sizes);
             options.weights = to_vector(weights);
             options.samples_per_epoch = samples_per_epoch;
             options.world_size = world_size;
             options.rank = rank;
             options.seed = to_seed(seed);
             options.drop_last = drop_last;
             return BlendedSampler(options);
           }),
           py::arg("sizes"), py::arg("weights"), py::arg("samples_per_epoch"),
           py::arg("world_size"), py::arg("rank"), py::arg("seed"), py::arg("drop_last"))
      .def_property_readonly("num_samples", &BlendedSampler::num_samples)
      .def_property_readonly("schedule", [](const BlendedSampler& s) { return s.schedule(); })
      .def(
          "global_sample",
          [](const BlendedSampler& sampler, uint64_t g) {
            const BlendedSample s = sampler.global(g);
            return py::make_tuple(s.dataset, s.index);
          },
          py::arg("g"), "(dataset, index) at stream position g")
      .def(
          "fill_global",
          [](const BlendedSampler& sampler, Out<uint64_t> positions, Out<uint64_t> datasets,
             Out<uint64_t> indices, bool flat) {
            if (datasets.size() != positions.size() || indices.size() != positions.size()) {
              throw py::value_error("positions, datasets and indices must have the same length");
            }
            const uint64_t* position = positions.data();
            uint64_t* dataset_out = datasets.mutable_data();
            uint64_t* index_out = indices.mutable_data();
            const auto count = static_cast<uint64_t>(positions.size());
            py::gil_scoped_release release;
            sampler.fill_global(position, count, dataset_out, index_out, flat);
          },
          py::arg("positions").noconvert(), py::arg("datasets").noconvert(),
          py::arg("indices").noconvert(), py::arg("flat") = false,
          "The samples at stream positions `positions` (any, across epochs: a resumed pass), in\n"
          "place, without the GIL");
}

}  // namespace python
}  // namespace distsampler
