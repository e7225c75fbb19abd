// integers.h: native-order integer arrays of any DType widened to int64 (labels), and the checked
// size of an array's shape.
#ifndef DISTSAMPLER_SRC_LOADER_INTEGERS_H_
#define DISTSAMPLER_SRC_LOADER_INTEGERS_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "distsampler/loader/dataset.h"

namespace distsampler {
namespace detail {

inline bool is_integer(DType t) { return t != DType::kFloat32 && t != DType::kFloat64; }

// The most bytes an array may take, numpy's own limit (NPY_MAX_INTP, 2^63 - 1).
inline constexpr uint64_t kMaxArrayBytes = (uint64_t{1} << 63) - 1;

// The first dimension k at which element_size times the non-zero dimensions of dims[0..k]
// exceeds kMaxArrayBytes, or dims.size() when none does. Zero dimensions are skipped: an empty
// array's shape must still fit, or a row's byte count (the product of the later dimensions) would
// wrap.
inline size_t first_oversized_dimension(const std::vector<uint64_t>& dims, uint64_t element_size) {
  uint64_t bytes = element_size;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 0) continue;
    if (__builtin_mul_overflow(bytes, dims[k], &bytes) || bytes > kMaxArrayBytes) return k;
  }
  return dims.size();
}

// `count` integers of type t (is_integer(t)) in native byte order, as int64.
inline std::vector<int64_t> widen_integers(const unsigned char* p, DType t, uint64_t count) {
  std::vector<int64_t> out(count);
  for (uint64_t i = 0; i < count; ++i) {
    switch (t) {
      case DType::kUInt8:
        out[i] = p[i];
        break;
      case DType::kInt8:
        out[i] = static_cast<int8_t>(p[i]);
        break;
      case DType::kInt16: {
        int16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = v;
        break;
      }
      case DType::kInt32: {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = v;
        break;
      }
      default:
        std::memcpy(&out[i], p + 8 * i, 8);
        break;
    }
  }
  return out;
}

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_LOADER_INTEGERS_H_
