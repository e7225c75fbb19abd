// torch.randperm on the CPU, reproduced bit for bit.
//
// Generator: MT19937 (Matsumoto and Nishimura 1998) seeded with init_genrand from the low 32 bits
// of the seed, as in PyTorch's aten/src/ATen/core/MT19937RNGEngine.h.
//
// Classic randperm (aten/src/ATen/native/TensorFactories.cpp, randperm_cpu, PyTorch <= 2.5 and
// every version for small n): identity, then for i in [0, n-1): z = random() % (n - i), swap
// elements i and i + z. Inside-out variant (PR 143875) for n >= 214,748,364: for i in [0, n):
// z = random64() % (i + 1); out[i] = out[z]; out[z] = i.
//
// Speed, without changing a bit: the draws do not depend on the data, so a block of them is drawn
// and turned into swap targets first, and each target is prefetched a few iterations before its
// swap. A Fisher-Yates pass over an array larger than the caches is bound by those misses.
#include "distsampler/torch_random.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace distsampler {
namespace {

constexpr uint64_t kBlock = 2048;        // draws turned into targets at once
constexpr uint64_t kPrefetchAhead = 64;  // swaps between a prefetch and its use

inline void prefetch(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 1, 3);
#else
  (void)p;
#endif
}

template <typename T>
void classic_randperm(uint64_t n, TorchGenerator& gen, T* out) {
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<T>(i);
  if (n < 2) return;
  uint32_t draws[kBlock];
  uint64_t targets[kBlock];
  for (uint64_t base = 0; base < n - 1; base += kBlock) {
    const uint64_t count = std::min(kBlock, n - 1 - base);
    gen.fill(draws, count);
    for (uint64_t j = 0; j < count; ++j) {
      const uint64_t i = base + j;
      const uint64_t m = n - i;
      // r % m for a 32-bit r: when m >= 2^32 the remainder is r itself.
      const uint64_t z = m < (uint64_t{1} << 32) ? draws[j] % static_cast<uint32_t>(m) : draws[j];
      targets[j] = i + z;
    }
    for (uint64_t j = 0; j < count; ++j) {
      if (j + kPrefetchAhead < count) prefetch(out + targets[j + kPrefetchAhead]);
      const uint64_t i = base + j;
      const T saved = out[i];
      out[i] = out[targets[j]];
      out[targets[j]] = saved;
    }
  }
}

template <typename T>
void inside_out_randperm(uint64_t n, TorchGenerator& gen, T* out) {
  uint64_t targets[kBlock];
  for (uint64_t base = 0; base < n; base += kBlock) {
    const uint64_t count = std::min(kBlock, n - base);
    for (uint64_t j = 0; j < count; ++j) targets[j] = gen.random64() % (base + j + 1);
    for (uint64_t j = 0; j < count; ++j) {
      if (j + kPrefetchAhead < count) prefetch(out + targets[j + kPrefetchAhead]);
      const uint64_t i = base + j;
      const uint64_t z = targets[j];
      // PyTorch writes out[i] = out[z] before out[z] = i; when z == i that reads the element it
      // is about to set. The result is out[i] = i either way, without the read.
      if (z != i) out[i] = out[z];
      out[z] = static_cast<T>(i);
    }
  }
}

}  // namespace

TorchGenerator::TorchGenerator(uint64_t seed) {
  state_[0] = static_cast<uint32_t>(seed);
  for (int j = 1; j < kStateSize; ++j) {
    state_[j] = 1812433253u * (state_[j - 1] ^ (state_[j - 1] >> 30)) + static_cast<uint32_t>(j);
  }
  index_ = kStateSize;
}

void TorchGenerator::twist() {
  constexpr int kShift = 397;
  constexpr uint32_t kMatrix = 0x9908b0dfu;
  auto mix = [](uint32_t upper, uint32_t lower, uint32_t far) {
    const uint32_t y = (upper & 0x80000000u) | (lower & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((y & 1u) ? kMatrix : 0u);
  };
  int k = 0;
  for (; k < kStateSize - kShift; ++k)
    state_[k] = mix(state_[k], state_[k + 1], state_[k + kShift]);
  for (; k < kStateSize - 1; ++k) {
    state_[k] = mix(state_[k], state_[k + 1], state_[k + kShift - kStateSize]);
  }
  state_[kStateSize - 1] = mix(state_[kStateSize - 1], state_[0], state_[kShift - 1]);
  index_ = 0;
}

void TorchGenerator::fill(uint32_t* out, uint64_t count) {
  while (count > 0) {
    if (index_ == kStateSize) twist();
    const uint64_t take = std::min<uint64_t>(count, static_cast<uint64_t>(kStateSize - index_));
    for (uint64_t j = 0; j < take; ++j) out[j] = temper(state_[index_ + j]);
    index_ += static_cast<int>(take);
    out += take;
    count -= take;
  }
}

template <typename T>
void torch_randperm(uint64_t n, uint64_t seed, RandpermVariant variant, T* out) {
  assert(sizeof(T) == 8 || n <= (uint64_t{1} << 32));  // every value must fit in T
  TorchGenerator gen(seed);
  if (randperm_uses_inside_out(n, variant)) {
    inside_out_randperm(n, gen, out);
  } else {
    classic_randperm(n, gen, out);
  }
}

namespace detail {
template <typename T>
void randperm_classic(uint64_t n, uint64_t seed, T* out) {
  TorchGenerator gen(seed);
  classic_randperm(n, gen, out);
}
template <typename T>
void randperm_inside_out(uint64_t n, uint64_t seed, T* out) {
  TorchGenerator gen(seed);
  inside_out_randperm(n, gen, out);
}
template void randperm_classic<uint64_t>(uint64_t, uint64_t, uint64_t*);
template void randperm_inside_out<uint64_t>(uint64_t, uint64_t, uint64_t*);
}  // namespace detail

template void torch_randperm<uint32_t>(uint64_t, uint64_t, RandpermVariant, uint32_t*);
template void torch_randperm<uint64_t>(uint64_t, uint64_t, RandpermVariant, uint64_t*);

std::vector<uint64_t> torch_randperm(uint64_t n, uint64_t seed, RandpermVariant variant) {
  std::vector<uint64_t> out(n);
  torch_randperm(n, seed, variant, out.data());
  return out;
}

}  // namespace distsampler
