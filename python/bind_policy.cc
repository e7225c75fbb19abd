// bind_policy.cc: policy.h and state_dict.h in Python: the one pass sampler every sampler of the
// package is a shell over (PassSampler), its pass as chunks of Python items, and state dicts.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "distsampler/policy.h"
#include "distsampler/state_dict.h"

namespace distsampler {
namespace python {

DictValue to_dict_value(py::handle value) {
  const std::string type_name = py::str(py::type::handle_of(value).attr("__name__"));
  PyObject* o = value.ptr();
  if (o == Py_None) return DictValue::none();
  if (PyBool_Check(o)) return DictValue::boolean(o == Py_True);
  if (PyLong_CheckExact(o)) return DictValue::integer_text(py::str(value));
  if (PyFloat_CheckExact(o)) return DictValue::real(PyFloat_AsDouble(o));
  if (PyUnicode_Check(o)) {
    DictValue v = DictValue::string(value.cast<std::string>());
    v.type_name = type_name;
    return v;
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    std::vector<DictValue> items;
    for (py::handle item : value) items.push_back(to_dict_value(item));
    DictValue v = DictValue::list(std::move(items));
    v.type_name = type_name;
    return v;
  }
  if (PyDict_Check(o)) {
    DictValue v = DictValue::dict();
    for (auto item : value.cast<py::dict>()) {
      if (!PyUnicode_Check(item.first.ptr())) return DictValue::other(py::repr(value), type_name);
      v.set(item.first.cast<std::string>(), to_dict_value(item.second));
    }
    v.type_name = type_name;
    return v;
  }
  return DictValue::other(py::repr(value), type_name);
}

py::object from_dict_value(const DictValue& v) {
  using Type = DictValue::Type;
  switch (v.type) {
    case Type::kNone: return py::none();
    case Type::kBool: return py::bool_(v.flag);
    case Type::kInt:
      return py::reinterpret_steal<py::object>(PyLong_FromString(v.text.c_str(), nullptr, 10));
    case Type::kFloat: return py::float_(v.number);
    case Type::kString: return py::str(v.text);
    case Type::kOther: return py::str(v.text);
    case Type::kList: {
      py::list out;
      for (const DictValue& item : v.items) out.append(from_dict_value(item));
      return out;
    }
    case Type::kDict: {
      py::dict out;
      for (const auto& [key, item] : v.entries) out[py::str(key)] = from_dict_value(item);
      return out;
    }
  }
  return py::none();
}

namespace {

// The first chunk of a pass is small: the first item comes after one short fill, not after a
// whole chunk's Python objects.
constexpr uint64_t kFirstChunk = 256;
constexpr uint64_t kIndexChunk = uint64_t{1} << 14;  // 128 KiB of uint64, its ints stay in cache
constexpr uint64_t kBatchChunk = 256;

// One pass as an iterator of chunk iterators (itertools.chain.from_iterable reads it): each
// chunk's items are computed in C++ without the GIL, then made Python objects in one list.
class PassChunks {
 public:
  PassChunks(PolicySampler::Started started, ItemShape shape, std::shared_ptr<Progress> progress)
      : s_(std::move(started)), shape_(shape), progress_(std::move(progress)) {}
  const PolicySampler::Started& started() const { return s_; }
  uint64_t total() const { return s_.items->size(); }

  py::object next() {
    const uint64_t total = s_.items->size();
    if (first_ >= total) throw py::stop_iteration();
    const uint64_t limit = first_ == 0 ? kFirstChunk
                                       : (shape_ == ItemShape::kBatch ? kBatchChunk : kIndexChunk);
    const uint64_t count = std::min(limit, total - first_);
    py::list items(static_cast<py::ssize_t>(count));
    if (shape_ == ItemShape::kBatch) {
      for (uint64_t j = 0; j < count; ++j) {
        std::vector<uint64_t> batch;
        {
          py::gil_scoped_release release;
          batch = s_.items->batch(first_ + j);
        }
        items[j] = py::cast(batch);
      }
    } else {
      const uint64_t width = shape_ == ItemShape::kIndex ? 1 : 2;
      buffer_.resize(count * width);
      {
        py::gil_scoped_release release;
        s_.items->fill(first_, count, buffer_.data());
      }
      for (uint64_t j = 0; j < count; ++j) {
        const auto at = static_cast<Py_ssize_t>(j);
        if (shape_ == ItemShape::kIndex) {
          PyList_SET_ITEM(items.ptr(), at, PyLong_FromUnsignedLongLong(buffer_[j]));
          continue;
        }
        // (index, is_real) or (dataset, index).
        py::object head = py::reinterpret_steal<py::object>(
            PyLong_FromUnsignedLongLong(buffer_[2 * j]));
        py::object tail = py::reinterpret_steal<py::object>(
            shape_ == ItemShape::kIndexMask ? PyBool_FromLong(static_cast<long>(buffer_[2 * j + 1]))
                                            : PyLong_FromUnsignedLongLong(buffer_[2 * j + 1]));
        PyList_SET_ITEM(items.ptr(), at, PyTuple_Pack(2, head.ptr(), tail.ptr()));
      }
    }
    first_ += count;
    progress_->before += progress_->size;
    progress_->size = count;
    progress_->current = items.attr("__iter__")();
    return progress_->current;
  }

 private:
  PolicySampler::Started s_;
  ItemShape shape_;
  std::shared_ptr<Progress> progress_;
  uint64_t first_ = 0;
  std::vector<uint64_t> buffer_;
};

// What one DataLoader worker (or the main process) reads of the iterable adapter's pass:
// batches w, w + K, ... of the rank's share, as dataset[index]. torchdata's Stateful: its state
// (the pass and the items yielded) resumes a worker of the same world size, rank and num_workers
// (`where`, which the loaded state must match). `own`: the reader's own pass (the adapter used
// alone in the main process), whose items are counted into `counter` (its PassSampler) as read.
struct WorkerItems {
  WorkerShare share;
  py::object dataset;
  py::object where;
  py::object counter;
  std::optional<uint64_t> own;
};

}  // namespace

void bind_policy(py::module_& m) {
  m.attr("SAMPLER_STATE_DICT_VERSION") = kSamplerStateDictVersion;
  m.attr("PASS_FIRST_CHUNK") = kFirstChunk;
  m.attr("PASS_CHUNK") = kIndexChunk;
  py::enum_<ItemShape>(m, "ItemShape")
      .value("index", ItemShape::kIndex)
      .value("index_mask", ItemShape::kIndexMask)
      .value("pair", ItemShape::kPair)
      .value("batch", ItemShape::kBatch);

  m.def(
      "check_count",
      [](const std::string& name, const py::handle& value, uint64_t minimum) -> py::int_ {
        // A bool is not a count here (PyTorch's samplers refuse it); a float is
        // operator.index's TypeError.
        const std::string type = py::str(py::type::handle_of(value).attr("__name__"));
        if (PyBool_Check(value.ptr()) || type == "bool_") {
          throw std::invalid_argument(name + " = " + std::string(py::repr(value)) +
                                      " is a bool; allowed: an integer >= " +
                                      std::to_string(minimum));
        }
        const auto index = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
        if (!index) throw py::error_already_set();
        const bool below = PyObject_RichCompareBool(index.ptr(), py::int_(minimum).ptr(), Py_LT);
        const bool above =
            PyObject_RichCompareBool(index.ptr(), py::int_(UINT64_MAX).ptr(), Py_GT);
        if (below || above) {
          throw std::invalid_argument(name + " = " + std::string(py::repr(index)) +
                                      " is out of range; allowed: " + std::to_string(minimum) +
                                      " <= " + name + " <= 2^64 - 1");
        }
        return index;
      },
      py::arg("name"), py::arg("value"), py::arg("minimum") = 0,
      "value as a count (a uint64 of the core) >= minimum, else ValueError naming `name`");
  const auto per_rank = [](const py::list& gathered) {
    std::vector<DictValue> out;
    for (py::handle theirs : gathered) out.push_back(to_dict_value(theirs));
    return out;
  };
  m.def(
      "describe_collectives",
      [per_rank](const py::list& gathered, const std::string& call) {
        return describe_collectives(per_rank(gathered), call);
      },
      py::arg("gathered"), py::arg("call"),
      "'' when every rank's gathered dict is in collective `call`, else the message");
  m.def(
      "describe_checkpoints",
      [per_rank](const py::list& gathered) { return describe_checkpoints(per_rank(gathered)); },
      py::arg("gathered"), "'' when every rank loaded the same checkpoint, else the message");
  py::class_<Policy, std::shared_ptr<Policy>>(m, "Policy", "A sampling policy (policy.h)")
      .def_property_readonly("kind", &Policy::kind)
      .def_property_readonly("config", [](const Policy& p) { return from_dict_value(p.config()); })
      .def_property_readonly("world_size", &Policy::world_size)
      .def_property_readonly("shape", &Policy::shape)
      .def("remaining", &Policy::remaining, py::arg("start"),
           "Items this rank reads in a pass starting at global position `start`");

  py::class_<PlainPolicy, Policy, std::shared_ptr<PlainPolicy>>(
      m, "PlainPolicy", "The samplers over DistributedSampler (policy.h)")
      .def_property_readonly("sampler", &PlainPolicy::sampler, py::return_value_policy::copy)
      .def("set_source", &PlainPolicy::set_source, py::arg("source"),
           "Read views from a PrefetchingSampler of the same options");

  py::class_<WorkerItems>(m, "WorkerShare",
                          "One DataLoader worker's iterator of the iterable adapter's pass "
                          "(policy.h's WorkerShare)")
      .def(py::init([](DistributedSampler sampler, uint64_t batch_size, uint64_t worker,
                       uint64_t workers, uint64_t epoch, uint64_t start, py::object dataset,
                       py::object where, py::object counter, std::optional<uint64_t> own) {
             return WorkerItems{WorkerShare(std::move(sampler), batch_size, worker, workers,
                                            WorkerPosition{epoch, start, 0}),
                                std::move(dataset), std::move(where), std::move(counter), own};
           }),
           py::arg("sampler"), py::arg("batch_size"), py::arg("worker"), py::arg("workers"),
           py::arg("epoch"), py::arg("start"), py::arg("dataset"), py::arg("where"),
           py::arg("counter"), py::arg("own"))
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](WorkerItems& w) -> py::object {
             const std::optional<uint64_t> index = w.share.next();
             if (!index) throw py::stop_iteration();
             if (w.own) {
               w.counter.cast<BoundSampler&>().core.receive(*w.own, w.share.position().yielded);
             }
             return w.dataset[py::cast(*index)];
           })
      .def("state_dict",
           [](const WorkerItems& w) {
             return from_dict_value(worker_state_dict(w.share.position(), to_dict_value(w.where)));
           })
      .def(
          "load_state_dict",
          [](WorkerItems& w, py::handle state) {
            w.share.seek(parse_worker_state(to_dict_value(state), to_dict_value(w.where)));
          },
          py::arg("state"), "ValueError naming the entry, changing nothing");

  py::class_<PassChunks>(m, "PassChunks", "One pass's items, chunk by chunk")
      .def_property_readonly("epoch", [](const PassChunks& c) { return c.started().epoch; })
      .def_property_readonly("start", [](const PassChunks& c) { return c.started().start; })
      .def_property_readonly("serial", [](const PassChunks& c) { return c.started().serial; })
      .def_property_readonly("notice", [](const PassChunks& c) { return c.started().notice; })
      .def_property_readonly("total", &PassChunks::total)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &PassChunks::next);

  py::class_<BoundSampler>(m, "PassSampler",
                           "The one pass sampler (policy.h): passes, progress and checkpoints")
      .def(py::init([](std::shared_ptr<Policy> policy, bool auto_epoch) {
             return BoundSampler{PolicySampler(std::move(policy), auto_epoch), nullptr};
           }),
           py::arg("policy"), py::arg("auto_epoch") = false)
      .def(py::init([](std::shared_ptr<Policy> policy, const PassCursor& cursor) {
             return BoundSampler{PolicySampler(std::move(policy), cursor.state()), nullptr};
           }),
           py::arg("policy"), py::arg("cursor"))
      .def_property_readonly("cursor",
                             [](BoundSampler& b) {
                               b.synced().position();  // the live pass's progress, in the cursor
                               return PassCursor(b.core.cursor().state());
                             })
      .def_property_readonly("auto_epoch",
                             [](const BoundSampler& b) { return b.core.cursor().auto_epoch(); })
      .def_property_readonly("epoch", [](const BoundSampler& b) { return b.core.cursor().epoch(); })
      .def_property_readonly("resume_at",
                             [](const BoundSampler& b) { return b.core.cursor().resume_at(); })
      .def_property_readonly("serial", [](const BoundSampler& b) { return b.core.serial(); })
      .def("remaining", [](const BoundSampler& b, uint64_t start) {
        return b.core.policy().remaining(start);
      }, py::arg("start"))
      .def("set_epoch", [](BoundSampler& b, uint64_t epoch) { b.synced().set_epoch(epoch); },
           py::arg("epoch"))
      .def("skip_finished", [](BoundSampler& b) { return b.core.skip_finished(); })
      .def(
          "start",
          [](BoundSampler& b, const std::string& who) {
            PolicySampler::Started started;
            {
              py::gil_scoped_release release;  // builds the epoch's order
              started = b.core.start();
            }
            b.live = std::make_shared<Progress>();
            b.live->serial = started.serial;
            py::object notice = py::none();
            if (started.notice != PassNotice::kNone) {
              notice = py::str(pass_notice_text(started.notice, started.epoch, who,
                                                "PyTorch's DistributedSampler does",
                                                "auto_epoch=True"));
            }
            const ItemShape shape = b.core.policy().shape();
            return py::make_tuple(PassChunks(std::move(started), shape, b.live), notice);
          },
          py::arg("who"),
          "Starts the next pass (its epoch and start decided now): (its chunks, the notice to "
          "give as a\nwarning from the sampler `who`, or None)")
      .def("receive", [](BoundSampler& b, uint64_t serial, uint64_t count) {
        b.core.receive(serial, count);
      }, py::arg("serial"), py::arg("count"),
           "The loop received pass `serial`'s first `count` items (a loader's report)")
      .def("position", [](BoundSampler& b) {
        const Position p = b.synced().position();
        return py::make_tuple(p.epoch, p.consumed);
      }, "(epoch, consumed) a checkpoint taken now records")
      .def("state_dict", [](BoundSampler& b) { return from_dict_value(b.synced().state_dict()); })
      .def(
          "parse_state",
          [](const BoundSampler& b, py::handle state) {
            std::string summary;
            const Position p = b.core.parse_state(to_dict_value(state), &summary);
            return py::make_tuple(p.epoch, p.consumed, summary);
          },
          py::arg("state"),
          "(epoch, consumed, configuration) of a state dict for this sampler; raises ValueError "
          "naming the entry, changing nothing")
      .def("load", [](BoundSampler& b, uint64_t epoch, uint64_t consumed) {
        b.core.load(Position{epoch, consumed});
        b.live.reset();
      }, py::arg("epoch"), py::arg("consumed"));
}

}  // namespace python
}  // namespace distsampler
