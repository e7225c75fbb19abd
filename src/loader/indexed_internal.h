// indexed_internal.h: the messages indexed.cc (IndexedDataset) and indexed_source.cc
// (IndexedSource) both raise for a document or a range out of bounds.
#ifndef DISTSAMPLER_LOADER_INDEXED_INTERNAL_H_
#define DISTSAMPLER_LOADER_INDEXED_INTERNAL_H_

#include <cstdint>
#include <stdexcept>
#include <string>

namespace distsampler {
namespace detail {

inline std::string document_message(uint64_t document, uint64_t documents,
                                    const std::string& where) {
  return "document = " + std::to_string(document) + " is out of range" + where +
         "; allowed: document < documents() = " + std::to_string(documents);
}

inline void check_range(uint64_t document, uint64_t begin, uint64_t end, uint32_t length,
                        const std::string& where) {
  if (begin <= end && end <= length) return;
  throw std::out_of_range("document = " + std::to_string(document) + ", begin = " +
                          std::to_string(begin) + ", end = " + std::to_string(end) +
                          ": out of range" + where + "; allowed: begin <= end <= length(" +
                          std::to_string(document) + ") = " + std::to_string(length));
}

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_LOADER_INDEXED_INTERNAL_H_
