// lengths.cc: the token counts of documents (mix.h: DocumentLengths, LengthList, ConcatLengths)
// and the read of many lengths split by part (detail::lengths_by_part).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "distsampler/tokens/mix.h"

namespace distsampler {

LengthList::LengthList(std::vector<uint32_t> lengths) : lengths_(std::move(lengths)) {
  for (uint32_t length : lengths_) total_ += length;
}

ConcatLengths::ConcatLengths(std::vector<std::shared_ptr<const DocumentLengths>> parts)
    : parts_(std::move(parts)), starts_{0} {
  for (const auto& part : parts_) {
    starts_.push_back(starts_.back() + part->documents());
    total_ += part->total_tokens();
  }
}

uint32_t ConcatLengths::length(uint64_t document) const {
  const size_t part = std::upper_bound(starts_.begin(), starts_.end(), document) - starts_.begin() - 1;
  return parts_[part]->length(document - starts_[part]);
}

void DocumentLengths::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  for (size_t i = 0; i < n; ++i) out[i] = length(documents[i]);
}

void LengthList::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  for (size_t i = 0; i < n; ++i) out[i] = lengths_[documents[i]];
}

void ConcatLengths::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  detail::lengths_by_part(starts_, documents, n, out,
                          [&](size_t part, const uint64_t* local, size_t count, uint32_t* into) {
                            parts_[part]->lengths(local, count, into);
                          });
}

void ConcatLengths::prefetch(const uint64_t* documents, size_t n) const {
  std::vector<uint32_t> unused(n);
  detail::lengths_by_part(starts_, documents, n, unused.data(),
                          [&](size_t part, const uint64_t* local, size_t count, uint32_t*) {
                            parts_[part]->prefetch(local, count);
                          });
}

bool ConcatLengths::wants_prefetch() const {
  for (const auto& part : parts_) {
    if (part->wants_prefetch()) return true;
  }
  return false;
}

namespace detail {

void lengths_by_part(const std::vector<uint64_t>& starts, const uint64_t* documents, size_t n,
                     uint32_t* out, const PartLengths& read) {
  if (starts.size() == 2) return read(0, documents, n, out);  // one part: it answers for all
  // Past the last part: kAskAlone (length() says why).
  std::vector<size_t> part_of(n);
  std::vector<size_t> count(starts.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    part_of[i] = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), documents[i]) -
                                     starts.begin()) - 1;
    ++count[part_of[i]];
    if (part_of[i] + 1 == starts.size()) out[i] = DocumentLengths::kAskAlone;
  }
  std::vector<uint64_t> local;
  std::vector<uint32_t> got;
  for (size_t part = 0; part + 1 < starts.size(); ++part) {
    if (count[part] == 0) continue;
    local.clear();
    for (size_t i = 0; i < n; ++i) {
      if (part_of[i] == part) local.push_back(documents[i] - starts[part]);
    }
    got.resize(local.size());
    read(part, local.data(), local.size(), got.data());
    for (size_t i = 0, k = 0; i < n; ++i) {
      if (part_of[i] == part) out[i] = got[k++];
    }
  }
}

}  // namespace detail

}  // namespace distsampler
