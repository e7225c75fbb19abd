// feistel_v2_gather.h: FeistelV2::gather's kernels, one file per instruction set
// (feistel_v2_gather_portable.cc, _avx2.cc, _avx512.cc), and what they share: their view of the
// network. The choice among them is FeistelV2::gather (feistel_v2_gather.cc). Private to src/.
//
// Every kernel's contract: out[j] = net.value(first + j * stride) for j in [0, count), the walked
// network's value without the parity correction (FeistelV2::gather applies it afterwards); every
// position below net.n. They compute the scalar FeistelV2::encrypt's integer operations, so all
// give the same bits (feistel_test compares each with operator()).
#ifndef DISTSAMPLER_SRC_FEISTEL_V2_GATHER_H_
#define DISTSAMPLER_SRC_FEISTEL_V2_GATHER_H_

#include <cstdint>

#include "distsampler/feistel_v2.h"
#include "feistel_internal.h"

namespace distsampler {
namespace detail {

// Version 2's parameters as its gather kernels read them (FeistelV2's friend).
struct FeistelV2Network {
  explicit FeistelV2Network(const FeistelV2& p)
      : n(p.n_),
        rounds(p.rounds_),
        right_bits(p.right_bits_),
        right_mask(p.right_mask_),
        left_size(p.left_size_),
        right_shift(p.right_shift_),
        keys(p.keys_),
        keys2(p.keys2_),
        perm_(&p) {}
  // The walked network's value at `position`, before the parity correction: the scalar path,
  // which walks.
  uint64_t value(uint64_t position) const { return perm_->network_value(position); }

  uint64_t n;
  int rounds;
  int right_bits;       // s
  uint32_t right_mask;  // 2^s - 1
  uint32_t left_size;   // L
  int right_shift;      // 32 - s
  const uint32_t* keys;
  const uint32_t* keys2;

 private:
  const FeistelV2* perm_;
};

namespace v2 {

using Network = FeistelV2Network;

// The portable kernel (any CPU, any compiler).
void gather_portable(const Network& net, uint64_t first, uint64_t stride, uint64_t count,
                     uint64_t* out);
#if DISTSAMPLER_X86_KERNELS
// The portable kernel built for SSE4.1.
void gather_sse41(const Network& net, uint64_t first, uint64_t stride, uint64_t count,
                  uint64_t* out);
// 8 lanes of 32 bits per vector; the CPU must have AVX2.
void gather_avx2(const Network& net, uint64_t first, uint64_t stride, uint64_t count,
                 uint64_t* out);
// 16 lanes of 32 bits per vector; the CPU must have AVX-512 F, VL, BW and DQ.
void gather_avx512(const Network& net, uint64_t first, uint64_t stride, uint64_t count,
                   uint64_t* out);
#endif

// The kernels store the network's values (net.value) and leave the parity correction to
// FeistelV2::gather. A lane's value is final unless it is >= n, which takes left >=
// floor(n / 2^s): walk_bound.
inline uint32_t walk_bound(const Network& net) {
  return static_cast<uint32_t>(net.n >> net.right_bits);
}

// After a step of `lanes` outputs at out[j...] flagged one or more lanes: the values >= n are
// recomputed by the scalar net.value, which walks.
inline void fix_step(const Network& net, uint64_t first, uint64_t stride, uint64_t j, int lanes,
                     uint64_t* out) {
  for (int i = 0; i < lanes; ++i) {
    const uint64_t o = j + static_cast<uint64_t>(i);
    if (out[o] >= net.n) out[o] = net.value(first + o * stride);
  }
}

// R > 0: the rounds as a constant (the default FeistelV2::kDefaultRounds, unrolled by the
// compiler); 0: net.rounds.
inline int rounds_of(int R, const Network& net) { return R > 0 ? R : net.rounds; }

#if defined(__GNUC__) || defined(__clang__)
// The round constants, read through a pointer the compiler cannot see through: they stay memory
// operands (AVX-512: embedded broadcasts) instead of being hoisted out of the loop into the
// registers the lanes need, whose spills cost more than the loads. The portable and AVX-512
// kernels use it; the AVX2 kernel, slower with it, does not.
template <typename Keys>
inline __attribute__((always_inline)) const Keys& opaque(const Keys& k) {
  const Keys* p = &k;
  __asm__("" : "+r"(p));
  return *p;
}
#endif

}  // namespace v2
}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_FEISTEL_V2_GATHER_H_
