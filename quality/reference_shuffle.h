// reference_shuffle.h: the battery's reference uniform shuffle, which calibrates every statistic.
#ifndef DISTSAMPLER_QUALITY_REFERENCE_SHUFFLE_H_
#define DISTSAMPLER_QUALITY_REFERENCE_SHUFFLE_H_

#include <cstdint>

namespace quality {

// A uniform permutation of [0, n) for (seed, epoch) into out[0, n): Fisher-Yates drawing from
// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011) with
// Lemire's unbiased draws. The same bits on every platform.
void reference_shuffle(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t* out);

}  // namespace quality

#endif  // DISTSAMPLER_QUALITY_REFERENCE_SHUFFLE_H_
