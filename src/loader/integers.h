// integers.h: native-order integer arrays of any DType widened to int64 (labels).
#ifndef DISTSAMPLER_SRC_LOADER_INTEGERS_H_
#define DISTSAMPLER_SRC_LOADER_INTEGERS_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "distsampler/loader/dataset.h"

namespace distsampler {
namespace detail {

inline bool is_integer(DType t) { return t != DType::kFloat32 && t != DType::kFloat64; }

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
