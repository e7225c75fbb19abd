// _core.cpp: the pybind11 extension behind the distsampler package; translation only.
//
// Every check lives in the C++ library: std::invalid_argument arrives in Python as ValueError,
// std::out_of_range as IndexError. Bulk work (building an epoch's order, filling a window of
// indices) runs with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/dist/node_order.h"
#include "distsampler/policies/batches.h"
#include "distsampler/policies/blend.h"
#include "distsampler/policies/shards.h"
#include "distsampler/policies/weighted.h"
#include "distsampler/policies/wrap.h"
#include "distsampler/prefetch.h"
#include "distsampler/sampler.h"
#include "distsampler/seed.h"
#include "distsampler/state.h"
#include "distsampler/version.h"

namespace py = pybind11;

namespace distsampler {
namespace {

// A Python int of any size becomes a Seed through its decimal text, so Seed::parse owns the
// range check ([-2^63, 2^64 - 1]) and its message.
Seed to_seed(const py::int_& value) { return Seed::parse(std::string(py::repr(value)), "seed"); }

py::int_ from_seed(const Seed& seed) {
  return py::int_(
      py::reinterpret_steal<py::object>(PyLong_FromString(seed.to_string().c_str(), nullptr, 10)));
}

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

// ---- Policies (policies/*.h): helpers --------------------------------------------------------
// Orders are shared between views; pybind11 holds them as non-const (it cannot hold a const T).
using OrderPtr = std::shared_ptr<EpochOrder>;
OrderPtr to_holder(std::shared_ptr<const EpochOrder> order) {
  return std::const_pointer_cast<EpochOrder>(std::move(order));
}

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

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
// ---- end of the policies helpers ----------------------------------------------------------------

}  // namespace
}  // namespace distsampler

// ---- state.h: checkpoint state, fingerprints, configuration agreement (issue 5) ----
namespace distsampler {
namespace {

void bind_state(py::module_& m) {
  m.attr("STATE_FORMAT_VERSION") = kStateFormatVersion;
  m.attr("STATE_BYTES") = kStateBytes;
  m.attr("ORDER_ALGORITHM_VERSION") = kOrderAlgorithmVersion;

  py::class_<Fingerprint>(m, "Fingerprint",
                          "What every rank of a job, and a job and its checkpoint, must agree on")
      .def_readonly("algorithm_version", &Fingerprint::algorithm_version)
      .def_readonly("size", &Fingerprint::size)
      .def_property_readonly("seed", [](const Fingerprint& f) { return from_seed(f.seed); })
      .def_readonly("shuffle", &Fingerprint::shuffle)
      .def_readonly("drop_last", &Fingerprint::drop_last)
      .def_readonly("uneven", &Fingerprint::uneven)
      .def_property_readonly("order", [](const Fingerprint& f) { return field_value(f, "order"); })
      .def_property_readonly("randperm",
                             [](const Fingerprint& f) { return field_value(f, "randperm"); })
      .def_readonly("feistel_rounds", &Fingerprint::feistel_rounds)
      .def_readonly("feistel_version", &Fingerprint::feistel_version)
      .def("field_value", &field_value, py::arg("field"),
           "A field's value as text ('torch', 'true', '-3', ...)")
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", [](const Fingerprint& f) {
        std::string text;
        for (const char* name :
             {"algorithm_version", "size", "seed", "shuffle", "drop_last", "uneven", "order",
              "randperm", "feistel_rounds", "feistel_version"}) {
          text += (text.empty() ? "" : ", ") + std::string(name) + "=" + field_value(f, name);
        }
        return "Fingerprint(" + text + ")";
      });

  py::class_<SamplerState>(m, "SamplerState",
                           "A checkpoint: the job consumed global positions [0, consumed) of "
                           "`epoch`'s order")
      .def(py::init([](const Fingerprint& config, uint64_t epoch, uint64_t consumed) {
             return SamplerState{config, epoch, consumed};
           }),
           py::arg("config"), py::arg("epoch"), py::arg("consumed"))
      .def_readonly("config", &SamplerState::config)
      .def_readonly("epoch", &SamplerState::epoch)
      .def_readonly("consumed", &SamplerState::consumed)
      .def(py::self == py::self)
      .def(py::self != py::self)
      .def("__repr__", [](const SamplerState& s) {
        return "SamplerState(epoch=" + std::to_string(s.epoch) +
               ", consumed=" + std::to_string(s.consumed) + ")";
      });

  m.def(
      "fingerprint",
      [](const DistributedSampler& sampler) { return fingerprint(sampler.options()); },
      py::arg("sampler"), "The sampler's configuration fingerprint (never its world size or rank)");
  m.def("differing_fields", &differing_fields, py::arg("a"), py::arg("b"));
  m.def("describe_disagreement", &describe_disagreement, py::arg("per_rank"),
        "'' when every rank's fingerprint is the same, else one line per differing field");
  m.def(
      "crc32", [](const py::bytes& data) { return crc32(std::string(data)); }, py::arg("data"));
  m.def(
      "encode_state", [](const SamplerState& s) { return py::bytes(encode_state(s)); },
      py::arg("state"));
  m.def(
      "decode_state", [](const py::bytes& data) { return decode_state(std::string(data)); },
      py::arg("data"));
  m.def("state_to_json", &state_to_json, py::arg("state"));
  m.def(
      "state_from_json", [](const std::string& json) { return state_from_json(json); },
      py::arg("json"));
  m.def("make_state", &make_state, py::arg("sampler"), py::arg("epoch"), py::arg("consumed"));
  m.def("consumed_after", &consumed_after, py::arg("view"), py::arg("taken"));
  m.def(
      "resume",
      [](const DistributedSampler& sampler, const SamplerState& state) {
        py::gil_scoped_release release;
        return resume(sampler, state);
      },
      py::arg("sampler"), py::arg("state"),
      "This rank's view of the rest of the state's epoch, on this sampler's world size and rank");
}

}  // namespace
}  // namespace distsampler
// ---- end of the state.h bindings ----

PYBIND11_MODULE(_core, m) {
  using namespace distsampler;
  m.doc() = "distsampler's C++ core: a rank's view of an epoch (see distsampler.torch)";
  m.attr("__version__") = DISTSAMPLER_VERSION_STRING;
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

  py::enum_<RandpermVariant>(m, "RandpermVariant")
      .value("current", RandpermVariant::kCurrent)
      .value("classic", RandpermVariant::kClassic);

  py::class_<RankView>(m, "RankView")
      .def("__len__", &RankView::size)
      .def_property_readonly("epoch", &RankView::epoch)
      .def_property_readonly("start", [](const RankView& v) { return v.partition().start; })
      .def("__getitem__", &RankView::at, py::arg("i"))
      .def(
          "fill",
          [](const RankView& view, uint64_t first, py::array_t<uint64_t, py::array::c_style> out) {
            uint64_t* data = out.mutable_data();
            const auto count = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            view.fill(first, count, data);
          },
          py::arg("first"), py::arg("out").noconvert(),
          "out[j] = view[first + j] for every j of a C-contiguous uint64 array (filled in place, "
          "never\n"
          "copied: another dtype is a TypeError), computed without the GIL");

  py::class_<DistributedSampler>(m, "DistributedSampler")
      .def(py::init(&make_sampler), py::arg("size"), py::arg("world_size"), py::arg("rank"),
           py::arg("seed"), py::arg("shuffle"), py::arg("drop_last"), py::arg("order"),
           py::arg("randperm"), py::arg("uneven") = false,
           py::arg("feistel_version") = FeistelPermutation::kDefaultVersion)
      .def_property_readonly("num_samples", &DistributedSampler::num_samples)
      .def_property_readonly("total_size", &DistributedSampler::total_size)
      .def_property_readonly(
          "seed", [](const DistributedSampler& s) { return from_seed(s.options().seed); })
      .def(
          "remaining",
          [](const DistributedSampler& sampler, uint64_t start) {
            Partition resumed = sampler.partition();
            resumed.start = start;
            resumed.validate();
            return resumed.num_samples();
          },
          py::arg("start"), "Samples per rank left in an epoch resumed at global position `start`")
      .def(
          "check_epoch",
          [](const DistributedSampler& sampler, uint64_t epoch) {
            const SamplerOptions& options = sampler.options();
            if (options.shuffle && options.order == OrderKind::kTorch) {
              options.seed.plus_epoch(epoch);
            }
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

  py::class_<NodeGroup>(m, "NodeGroup",
                        "dist/node_order.h: the local ranks that share one permutation per epoch")
      .def(py::init([](std::string job, std::string node, uint64_t local_rank,
                       uint64_t local_world_size, double timeout_seconds) {
             return NodeGroup{std::move(job), std::move(node), local_rank, local_world_size,
                              timeout_seconds};
           }),
           py::arg("job"), py::arg("node"), py::arg("local_rank"), py::arg("local_world_size"),
           py::arg("timeout_seconds") = 300.0)
      .def_readonly("job", &NodeGroup::job)
      .def_readonly("node", &NodeGroup::node)
      .def_readonly("local_rank", &NodeGroup::local_rank)
      .def_readonly("local_world_size", &NodeGroup::local_world_size)
      .def_readwrite("timeout_seconds", &NodeGroup::timeout_seconds);
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

  py::class_<PrefetchingSampler>(
      m, "PrefetchingSampler",
      "prefetch.h: DistributedSampler.epoch with the next epoch's torch order built in the "
      "background")
      .def(py::init([](const DistributedSampler& sampler, bool prefetch,
                       const std::optional<NodeGroup>& node) {
             return std::make_unique<PrefetchingSampler>(
                 sampler.options(), prefetch, node ? node_order_builder(*node) : OrderBuilder());
           }),
           py::arg("sampler"), py::arg("prefetch") = true, py::arg("node") = py::none(),
           "node: share the torch order's permutation with the node's other ranks "
           "(dist/node_order.h)")
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

  // ---- Policies (policies/*.h, partition.h's evaluation modes) ---------------------------------
  auto rank_view = py::reinterpret_borrow<py::class_<RankView>>(m.attr("RankView"));
  rank_view.def("is_padding", &RankView::is_padding, py::arg("i"),
                "Whether sample i is a wrapped-around repeat (padded-with-mask evaluation)");
  rank_view.def_property_readonly("num_real", &RankView::num_real,
                                  "Samples that are not padding; they come first");

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
  m.def(
      "rank_view",
      [](const OrderPtr& order, uint64_t world_size, uint64_t rank, bool drop_last, bool uneven,
         uint64_t epoch, uint64_t start) {
        const Partition partition{order->size(), world_size, rank, drop_last, start, uneven};
        partition.validate();
        return RankView(order, partition, epoch);
      },
      py::arg("order"), py::arg("world_size"), py::arg("rank"), py::arg("drop_last") = false,
      py::arg("uneven") = false, py::arg("epoch") = 0, py::arg("start") = 0,
      "A rank's view of any epoch order under partition.h's rule");

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
          "fill",
          [](const WeightedSampler& sampler, uint64_t epoch, uint64_t first,
             py::array_t<uint64_t, py::array::c_style> out) {
            uint64_t* data = out.mutable_data();
            const auto count = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            sampler.fill(epoch, first, count, data);
          },
          py::arg("epoch"), py::arg("first"), py::arg("out").noconvert(),
          "out[j] = this rank's draw first + j of `epoch`, in place, without the GIL")
      .def(
          "fill_global",
          [](const WeightedSampler& sampler, uint64_t epoch, uint64_t first, uint64_t stride,
             py::array_t<uint64_t, py::array::c_style> out) {
            uint64_t* data = out.mutable_data();
            const auto count = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            for (uint64_t j = 0; j < count; ++j)
              data[j] = sampler.global(epoch, first + j * stride);
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
          [](const QuotaSchedule& schedule, uint64_t first,
             py::array_t<uint64_t, py::array::c_style> out) {
            uint64_t* data = out.mutable_data();
            const auto count = static_cast<uint64_t>(out.size());
            py::gil_scoped_release release;
            for (uint64_t j = 0; j < count; ++j) data[j] = schedule.at(first + j).dataset;
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
          "fill",
          [](const BlendedSampler& sampler, uint64_t epoch, uint64_t first,
             py::array_t<uint64_t, py::array::c_style> datasets,
             py::array_t<uint64_t, py::array::c_style> indices, bool flat) {
            if (datasets.size() != indices.size()) {
              throw py::value_error("datasets and indices must have the same length");
            }
            uint64_t* dataset_out = datasets.mutable_data();
            uint64_t* index_out = indices.mutable_data();
            const auto count = static_cast<uint64_t>(indices.size());
            py::gil_scoped_release release;
            std::vector<BlendedSample> samples(count);
            sampler.fill(epoch, first, count, samples.data());
            for (uint64_t j = 0; j < count; ++j) {
              dataset_out[j] = samples[j].dataset;
              index_out[j] = flat ? sampler.flat(samples[j]) : samples[j].index;
            }
          },
          py::arg("epoch"), py::arg("first"), py::arg("datasets").noconvert(),
          py::arg("indices").noconvert(), py::arg("flat") = false,
          "This rank's samples first + j of `epoch`: the dataset, and the index within it (or in\n"
          "the concatenation when flat), in place, without the GIL")
      .def(
          "fill_global",
          [](const BlendedSampler& sampler, py::array_t<uint64_t, py::array::c_style> positions,
             py::array_t<uint64_t, py::array::c_style> datasets,
             py::array_t<uint64_t, py::array::c_style> indices, bool flat) {
            if (datasets.size() != positions.size() || indices.size() != positions.size()) {
              throw py::value_error("positions, datasets and indices must have the same length");
            }
            const uint64_t* position = positions.data();
            uint64_t* dataset_out = datasets.mutable_data();
            uint64_t* index_out = indices.mutable_data();
            const auto count = static_cast<uint64_t>(positions.size());
            py::gil_scoped_release release;
            for (uint64_t j = 0; j < count; ++j) {
              const BlendedSample s = sampler.global(position[j]);
              dataset_out[j] = s.dataset;
              index_out[j] = flat ? sampler.flat(s) : s.index;
            }
          },
          py::arg("positions").noconvert(), py::arg("datasets").noconvert(),
          py::arg("indices").noconvert(), py::arg("flat") = false,
          "The samples at stream positions `positions` (any, across epochs: a resumed pass), in\n"
          "place, without the GIL");
  // ---- end of the policies block --------------------------------------------------------------
  bind_state(m);  // state.h (issue 5)
}
