// bind_receipts.cc: receipts.h in Python: distsampler.data.DataLoader's tracker and the two
// iterators it wraps around torch's (the index sampler's draws, the batches the loop receives).
//
// The tracker asks the loader's source as its kind allows: a sampler of the package (its
// PassSampler's mark and receipts), the iterable adapter (its PassSampler, told each pass's start
// by progress_start()), another sampler with state_dict (snapshotted through it), or none.
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "bindings.h"
#include "distsampler/receipts.h"
#include "distsampler/state_dict.h"

namespace distsampler {
namespace python {
namespace {

// A source's progress when a batch was dispatched: a package sampler's mark, or another
// sampler's state_dict() (None: nothing to report).
struct Snapshot {
  bool mark = false;
  uint64_t serial = 0;
  uint64_t handed = 0;
  py::object state = py::none();
};

// next(iterator), StopIteration when it is exhausted.
py::object next_of(const py::object& iterator) {
  PyObject* item = PyIter_Next(iterator.ptr());
  if (item != nullptr) return py::reinterpret_steal<py::object>(item);
  if (PyErr_Occurred()) throw py::error_already_set();
  throw py::stop_iteration();
}

class Tracker {
 public:
  Tracker(py::object source, py::object adapter, uint64_t per_batch)
      : receipts_(source.is_none() && adapter.is_none()),
        source_(std::move(source)),
        adapter_(std::move(adapter)),
        per_batch_(per_batch) {}

  Receipts<Snapshot>& receipts() { return receipts_; }

  void begin_pass() {
    if (receipts_.begin_pass() && !adapter_.is_none()) adapter_.attr("progress_start")();
  }

  void dispatched() {
    Snapshot snapshot;
    if (BoundSampler* sampler = package_sampler(source_)) {
      snapshot.mark = true;
      snapshot.serial = sampler->core.serial();
      snapshot.handed = sampler->live ? sampler->live->handed() : 0;
      // From the first mark of a pass on, the sampler's checkpoint counts receipts.
      if (!sampler->core.tracked()) sampler->core.receive(snapshot.serial, 0);
    } else if (!source_.is_none() && py::hasattr(source_, "state_dict")) {
      snapshot.state = source_.attr("state_dict")();
    }
    receipts_.dispatched(std::move(snapshot));
  }

  void receive() {
    const std::optional<Snapshot> snapshot = receipts_.receive();
    if (BoundSampler* adapter = package_sampler(adapter_)) {
      const uint64_t received = receipts_.received();
      const uint64_t items = received > std::numeric_limits<uint64_t>::max() / per_batch_
                                 ? std::numeric_limits<uint64_t>::max()
                                 : received * per_batch_;  // clamped to the pass by the sampler
      adapter->core.receive(adapter->core.serial(), items);
    } else if (snapshot && snapshot->mark) {
      package_sampler(source_)->core.receive(snapshot->serial, snapshot->handed);
    }
  }

  void end_pass() {
    BoundSampler* sampler = package_sampler(adapter_.is_none() ? source_ : adapter_);
    if (sampler != nullptr) sampler->core.receive_all(sampler->core.serial());
    receipts_.end_pass();
  }

  py::dict state_dict() {
    py::dict state = from_dict_value(loader_state_dict(receipts_.batches()));
    const auto& last = receipts_.last_received();
    if (!adapter_.is_none()) {
      state["dataset"] = adapter_.attr("state_dict")();
    } else if (package_sampler(source_) != nullptr) {
      state["sampler"] = source_.attr("state_dict")();
    } else if (!source_.is_none() && py::hasattr(source_, "state_dict")) {
      state["sampler"] = last && !last->state.is_none() ? last->state
                                                         : source_.attr("state_dict")();
    }
    return state;
  }

  void load_state_dict(const py::object& state) {
    const bool stateful = !source_.is_none() && py::hasattr(source_, "load_state_dict");
    const char* entry = !adapter_.is_none() ? "dataset" : stateful ? "sampler" : "";
    const uint64_t batches = parse_loader_state(to_dict_value(state), entry);
    std::optional<Snapshot> last;
    if (!adapter_.is_none()) {
      adapter_.attr("load_state_dict")(state["dataset"]);
    } else if (stateful) {
      source_.attr("load_state_dict")(state["sampler"]);
      if (package_sampler(source_) == nullptr) {
        last = Snapshot();
        last->state = state.attr("get")("sampler");
      }
    }
    receipts_.load(batches, stateful || !adapter_.is_none(), std::move(last));
  }

 private:
  // The PassSampler of a sampler of the package (a Shell), else nullptr.
  static BoundSampler* package_sampler(const py::object& owner) {
    if (owner.is_none() || !py::hasattr(owner, "_core")) return nullptr;
    const py::object core = owner.attr("_core");
    return py::isinstance<BoundSampler>(core) ? &core.cast<BoundSampler&>() : nullptr;
  }

  Receipts<Snapshot> receipts_;
  py::object source_;
  py::object adapter_;
  uint64_t per_batch_;
};

using TrackerPtr = std::shared_ptr<Tracker>;

// The index sampler's draws, each a dispatch (torch's iterators draw every batch's indices here).
struct Dispatching {
  py::object indices;
  TrackerPtr tracker;
  py::object next() {
    while (tracker->receipts().skip_draw()) next_of(indices);  // a resumed source without state
    py::object index = next_of(indices);
    tracker->dispatched();
    return index;
  }
};

// The index sampler as torch's iterators see it: the same indices, each draw a dispatch.
struct DispatchingSampler {
  py::object index_sampler;
  TrackerPtr tracker;
};

// torch's DataLoader iterator, each batch it yields a receipt; other attributes are its own.
struct Receiving {
  py::object iterator;
  TrackerPtr tracker;
  py::object next() {
    py::object batch;
    try {
      while (tracker->receipts().skip_receipt()) next_of(iterator);  // an IterableDataset
      batch = next_of(iterator);
    } catch (const py::stop_iteration&) {
      tracker->end_pass();
      throw;
    }
    tracker->receive();
    return batch;
  }
};

}  // namespace

void bind_receipts(py::module_& m) {
  py::class_<Dispatching>(m, "Dispatching", "An index sampler's iterator, each draw a dispatch")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &Dispatching::next);
  py::class_<DispatchingSampler>(m, "DispatchingSampler",
                                 "An index sampler whose iterators record each draw")
      .def("__len__", [](const DispatchingSampler& s) { return py::len(s.index_sampler); })
      .def("__iter__", [](const DispatchingSampler& s) {
        s.tracker->begin_pass();
        return Dispatching{s.index_sampler.attr("__iter__")(), s.tracker};
      });
  py::class_<Receiving>(m, "Receiving", "A loader's iterator, each batch it yields a receipt")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &Receiving::next)
      .def("__len__", [](const Receiving& r) { return py::len(r.iterator); })
      .def("__getattr__", [](const Receiving& r, const py::str& name) {
        return r.iterator.attr(name);
      });
  py::class_<Tracker, TrackerPtr>(m, "LoaderTracker",
                                  "distsampler.data.DataLoader's record of its passes "
                                  "(receipts.h)")
      .def(py::init<py::object, py::object, uint64_t>(), py::arg("source"), py::arg("adapter"),
           py::arg("per_batch"),
           "source: the object whose state is the loader's (None for an iterable dataset); "
           "adapter: the DistributedIterableDataset served, or None")
      .def("set_opening",
           [](Tracker& t, bool opening) { t.receipts().set_opening(opening); },
           py::arg("opening"), "A loader iterator is being made: its iter() calls are one pass")
      .def(
          "dispatching",
          [](const TrackerPtr& t, py::object index_sampler) {
            return DispatchingSampler{std::move(index_sampler), t};
          },
          py::arg("index_sampler"))
      .def(
          "receiving",
          [](const TrackerPtr& t, py::object iterator) {
            return Receiving{std::move(iterator), t};
          },
          py::arg("iterator"))
      .def_property_readonly("batches", [](Tracker& t) { return t.receipts().batches(); })
      .def("state_dict", &Tracker::state_dict)
      .def("load_state_dict", &Tracker::load_state_dict, py::arg("state"));
}

}  // namespace python
}  // namespace distsampler
