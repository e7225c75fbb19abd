// bind_indexed.cc: loader/indexed.h in Python (IndexedDataset, IndexedSource: Megatron-LM's
// .idx/.bin token files). FormatError arrives as RuntimeError, std::out_of_range as IndexError.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "distsampler/loader/indexed.h"

namespace distsampler {
namespace python {
namespace {

// Tokens [begin, end) of `document` (end None: to the document's end) as an int64 numpy array,
// allocated once the checks passed, filled without the GIL.
template <typename Source>
py::array_t<int64_t> read_tokens(const Source& source, uint64_t document, uint64_t begin,
                                 std::optional<uint64_t> end) {
  const uint64_t stop = end ? *end : source.length(document);
  const uint64_t count = source.check_read(document, begin, stop);
  py::array_t<int64_t> out(static_cast<py::ssize_t>(count));
  int64_t* data = out.mutable_data();
  py::gil_scoped_release release;
  source.read(document, begin, stop, data);
  return out;
}

template <typename Source, typename Class>
void bind_reads(Class& c) {
  c.def_property_readonly("documents", &Source::documents)
      .def("__len__", &Source::documents)
      .def("length", &Source::length, py::arg("document"), "Tokens of `document`")
      .def_property_readonly("total_tokens", &Source::total_tokens)
      .def_property_readonly("token_bytes", &Source::token_bytes)
      .def_property_readonly("dtype",
                             [](const Source& s) { return std::string(s.dtype_name()); })
      .def("read", &read_tokens<Source>, py::arg("document"), py::arg("begin") = 0,
           py::arg("end") = py::none(),
           "Tokens [begin, end) of `document` as an int64 numpy array (end None: its length)");
}

}  // namespace

void bind_indexed(py::module_& m) {
  py::class_<IndexedDataset> dataset(
      m, "IndexedDataset",
      "loader/indexed.h: one Megatron indexed dataset (PREFIX.idx + PREFIX.bin), memory-mapped");
  dataset.def(py::init<const std::string&>(), py::arg("prefix"))
      .def_property_readonly("prefix", &IndexedDataset::prefix);
  bind_reads<IndexedDataset>(dataset);

  py::class_<IndexedSource> source(
      m, "IndexedSource",
      "loader/indexed.h: shards of one source, documents numbered across them in order");
  source.def(py::init<std::vector<std::string>>(), py::arg("prefixes"))
      .def_property_readonly("prefixes",
                             [](const IndexedSource& s) {
                               std::vector<std::string> prefixes;
                               for (const IndexedDataset& shard : s.shards()) {
                                 prefixes.push_back(shard.prefix());
                               }
                               return prefixes;
                             })
      .def("shard_start", &IndexedSource::shard_start, py::arg("shard"),
           "The first document of shard `shard` (shard_start(len(prefixes)) == documents)");
  bind_reads<IndexedSource>(source);
  m.def(
      "s3_counts",
      [] {
        const ObjectStoreCounts c = object_store_counts();
        return py::dict(py::arg("requests") = c.requests, py::arg("bytes") = c.bytes,
                        py::arg("block_hits") = c.block_hits,
                        py::arg("block_fetches") = c.block_fetches,
                        py::arg("cached_bytes") = c.cached_bytes);
      },
      "What this process asked of remote stores for s3://, https:// and http:// sources "
      "(loader/indexed.h's "
      "object_store_counts): requests, each try counted, and the bytes they returned");
}

}  // namespace python
}  // namespace distsampler
