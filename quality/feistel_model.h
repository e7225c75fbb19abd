// feistel_model.h: a model of version 2's Feistel network with a pluggable round function, for
// the structure-aware statistics' weakened networks and chosen round keys.
#ifndef DISTSAMPLER_QUALITY_FEISTEL_MODEL_H_
#define DISTSAMPLER_QUALITY_FEISTEL_MODEL_H_

#include <cstdint>

#include "distsampler/feistel.h"
#include "stats.h"

namespace quality {

// The round function: the library's mix; the multiply-only round of the first version 2 (the one
// the audit of issue 20 broke); a linear one (the mix with its two integer multiplications
// replaced by carry-less ones: GF(2)-affine).
enum class RoundKind { kMix, kMultiply, kLinear };

// Version 2's network (the same equations and keys as FeistelPermutation, without the parity
// correction: quality checks it against the library bit for bit), walked into [0, n).
struct Model {
  uint64_t n;
  int rounds, s;
  uint32_t mask, size;  // 2^s - 1, L
  RoundKind kind;
  uint32_t key[distsampler::FeistelPermutation::kMaxRounds];
  uint32_t key2[distsampler::FeistelPermutation::kMaxRounds];

  // Version 2's keys for (seed, epoch 0) and n; keys_override >= 0: every round key (both words)
  // that value instead.
  Model(uint64_t n_, uint64_t seed, int rounds_, RoundKind kind_, int64_t keys_override = -1);
  uint32_t f(uint32_t x, int r) const;
  uint64_t encrypt(uint64_t x) const;
  uint64_t operator()(uint64_t x) const;
};

// The model's permutation of [0, n) for a seed, as a Fill.
Fill model(RoundKind kind, int rounds, int64_t keys_override = -1);

}  // namespace quality

#endif  // DISTSAMPLER_QUALITY_FEISTEL_MODEL_H_
