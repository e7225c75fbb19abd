// bind_policies.cc: policies/*.h in Python (shard, bucketed and sequence orders, BatchView,
// weighted and blended sampling).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.h"
#include "distsampler/policies/batches.h"
#include "distsampler/policies/blend.h"
#include "distsampler/policies/shards.h"
#include "distsampler/policies/weighted.h"
#include "distsampler/policies/samplers.h"
#include "distsampler/policies/wrap.h"
#include "distsampler/policy.h"
#include "distsampler/sampler.h"

namespace distsampler {
namespace python {

namespace {

// A Python sampler's output for an epoch, as DistributedSamplerWrapper cuts it: set_epoch is
// forwarded when it has one; an index that is not a non-negative integer is named.
std::vector<uint64_t> sampler_output(const py::object& sampler, uint64_t epoch) {
  if (py::hasattr(sampler, "set_epoch")) sampler.attr("set_epoch")(epoch);
  std::vector<uint64_t> out;
  const py::object as_index = py::module_::import("operator").attr("index");
  for (py::handle item : sampler) {
    const py::object index = as_index(item);
    const bool negative = PyObject_RichCompareBool(index.ptr(), py::int_(0).ptr(), Py_LT) == 1;
    if (negative || PyObject_RichCompareBool(index.ptr(), py::int_(UINT64_MAX).ptr(), Py_GT) == 1) {
      throw std::invalid_argument("sampler output[" + std::to_string(out.size()) + "] = " +
                                  std::string(py::repr(item)) + " is out of range; allowed: >= 0");
    }
    out.push_back(index.cast<uint64_t>());
  }
  return out;
}

// A sequence of non-negative integers (shard sizes, lengths) as a uint64 array: numpy would wrap
// a negative value silently, so a ValueError names `name` and the first bad element.
py::array_t<uint64_t> uint_array(const std::string& name, const py::handle& values) {
  const py::module_ np = py::module_::import("numpy");
  const py::array array = np.attr("asarray")(values);
  if (array.ndim() != 1) {
    throw std::invalid_argument(name + " has shape " + std::string(py::str(array.attr("shape"))) +
                                "; allowed: a 1-D sequence of integers");
  }
  const char kind = array.dtype().kind();
  if (array.size() != 0 && kind != 'i' && kind != 'u') {
    throw std::invalid_argument(name + " has dtype " + std::string(py::str(array.dtype())) +
                                "; allowed: integers");
  }
  if (kind == 'i') {
    const Array<int64_t> signed_values(array);
    for (py::ssize_t i = 0; i < signed_values.size(); ++i) {
      if (signed_values.data()[i] < 0) {
        throw std::invalid_argument(name + "[" + std::to_string(i) + "] = " +
                                    std::to_string(signed_values.data()[i]) +
                                    " is out of range; allowed: >= 0");
      }
    }
  }
  return py::reinterpret_borrow<py::array_t<uint64_t>>(
      np.attr("ascontiguousarray")(array, py::arg("dtype") = np.attr("uint64")));
}

}  // namespace

void bind_policies(py::module_& m) {
  m.def("uint_array", &uint_array, py::arg("name"), py::arg("values"),
        "values (a sequence or array of integers >= 0) as a uint64 array; ValueError naming "
        "`name` and the first bad element");
  // Every policy of samplers.h (and policy.h's plain ones), for the package's shells.
  m.def(
      "plain_policy",
      [](const std::string& kind, uint64_t size, uint64_t world_size, uint64_t rank,
         const py::int_& seed, bool shuffle, bool drop_last, const py::object& order,
         RandpermVariant randperm, bool uneven, const py::object& feistel_version,
         bool with_mask) {
        SamplerOptions o;
        o.size = size, o.world_size = world_size, o.rank = rank, o.seed = to_seed(seed);
        o.shuffle = shuffle, o.drop_last = drop_last, o.order = parse_order_kind(order_argument(order));
        o.randperm = randperm, o.uneven = uneven;
        o.feistel_version = feistel_version_argument(feistel_version);
        const PlainPolicy::Kind k = kind == "eval"       ? PlainPolicy::Kind::kEval
                                    : kind == "iterable" ? PlainPolicy::Kind::kIterable
                                                         : PlainPolicy::Kind::kDropIn;
        return std::make_shared<PlainPolicy>(k, o, with_mask);
      },
      py::arg("kind"), py::arg("size"), py::arg("world_size"), py::arg("rank"), py::arg("seed"),
      py::arg("shuffle"), py::arg("drop_last"), py::arg("order"), py::arg("randperm"),
      py::arg("uneven") = false, py::arg("feistel_version") = py::int_(FeistelPermutation::kDefaultVersion),
      py::arg("with_mask") = false, "kind: 'drop_in', 'eval' or 'iterable' (policy.h)");
  m.def(
      "weighted_policy",
      [](const Array<double>& weights, uint64_t size, uint64_t num_samples, uint64_t world_size,
         uint64_t rank, const py::int_& seed, bool drop_last) {
        WeightedOptions o;
        o.size = size, o.num_samples = num_samples, o.world_size = world_size, o.rank = rank;
        o.seed = to_seed(seed), o.drop_last = drop_last;
        std::vector<double> w = to_vector(weights);
        py::gil_scoped_release release;
        return weighted_policy(std::move(w), o);
      },
      py::arg("weights"), py::arg("size"), py::arg("num_samples"), py::arg("world_size"),
      py::arg("rank"), py::arg("seed"), py::arg("drop_last"));
  m.def(
      "blended_policy",
      [](const Array<uint64_t>& sizes, const Array<double>& weights, uint64_t samples_per_epoch,
         uint64_t world_size, uint64_t rank, const py::int_& seed, bool drop_last, bool flat) {
        BlendOptions o;
        o.sizes = to_vector(sizes), o.weights = to_vector(weights);
        o.samples_per_epoch = samples_per_epoch, o.world_size = world_size, o.rank = rank;
        o.seed = to_seed(seed), o.drop_last = drop_last;
        return blended_policy(o, flat);
      },
      py::arg("sizes"), py::arg("weights"), py::arg("samples_per_epoch"), py::arg("world_size"),
      py::arg("rank"), py::arg("seed"), py::arg("drop_last"), py::arg("flat"));
  m.def(
      "sharded_policy",
      [](const Array<uint64_t>& shard_sizes, uint64_t window, const py::int_& seed,
         uint64_t world_size, uint64_t rank, bool drop_last) {
        return sharded_policy(ShardOptions{to_vector(shard_sizes), window, to_seed(seed)},
                              RankCut{world_size, rank, drop_last});
      },
      py::arg("shard_sizes"), py::arg("window"), py::arg("seed"), py::arg("world_size"),
      py::arg("rank"), py::arg("drop_last"));
  m.def(
      "wrapper_policy",
      [](py::object sampler, uint64_t world_size, uint64_t rank, bool drop_last) {
        SequenceSource source;
        source.name = py::str(py::type::handle_of(sampler).attr("__qualname__"));
        source.size = [sampler] {
          py::gil_scoped_acquire gil;
          return py::len(sampler);
        };
        source.epoch = [sampler](uint64_t epoch) {
          py::gil_scoped_acquire gil;
          return sampler_output(sampler, epoch);
        };
        return wrapper_policy(std::move(source), RankCut{world_size, rank, drop_last});
      },
      py::arg("sampler"), py::arg("world_size"), py::arg("rank"), py::arg("drop_last"),
      "A user sampler's output each epoch, cut among ranks (its len() and indices read live)");
  m.def(
      "batch_policy",
      [](uint64_t size, const py::int_& seed, bool shuffle, const py::object& order,
         RandpermVariant randperm, const py::object& feistel_version, uint64_t batch_size,
         uint64_t world_size, uint64_t rank, bool drop_last) {
        const OrderOptions o{size,
                             to_seed(seed),
                             shuffle,
                             parse_order_kind(order_argument(order)),
                             randperm,
                             FeistelPermutation::kVersionDefaultRounds,
                             feistel_version_argument(feistel_version)};
        return batch_policy(o, batch_size, RankCut{world_size, rank, drop_last});
      },
      py::arg("size"), py::arg("seed"), py::arg("shuffle"), py::arg("order"), py::arg("randperm"),
      py::arg("feistel_version"), py::arg("batch_size"), py::arg("world_size"), py::arg("rank"),
      py::arg("drop_last"));
  m.def(
      "bucketed_policy",
      [](const Array<uint64_t>& lengths, uint64_t batch_size, uint64_t window_batches,
         const py::int_& seed, uint64_t world_size, uint64_t rank, bool drop_last) {
        BucketOptions o{to_vector(lengths), batch_size, window_batches, to_seed(seed)};
        return bucketed_policy(o, RankCut{world_size, rank, drop_last});
      },
      py::arg("lengths"), py::arg("batch_size"), py::arg("window_batches"), py::arg("seed"),
      py::arg("world_size"), py::arg("rank"), py::arg("drop_last"));

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
      "block_shard_order",
      [](uint64_t n, uint64_t block, uint64_t window, const py::int_& seed, uint64_t epoch,
         uint64_t first, uint64_t count) {
        const BlockShardOrder order(n, block, window, to_seed(seed), epoch);
        if (first > n || count > n - first) {
          throw py::index_error("first = " + std::to_string(first) + ", count = " +
                                std::to_string(count) +
                                ": out of range; allowed: first + count <= " + std::to_string(n));
        }
        py::array_t<uint64_t> out(static_cast<py::ssize_t>(count));
        uint64_t* data = out.mutable_data();
        py::gil_scoped_release release;
        order.gather(first, count, data);
        return out;
      },
      py::arg("n"), py::arg("block"), py::arg("window"), py::arg("seed"), py::arg("epoch"),
      py::arg("first"), py::arg("count"),
      "Positions [first, first + count) of policies/shards.h's BlockShardOrder (n items in "
      "blocks of `block`, shuffled in windows of `window` blocks) as a uint64 numpy array");
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
