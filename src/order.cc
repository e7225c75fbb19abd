#include "distsampler/order.h"

#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace distsampler {
namespace {

// Installed memory, or UINT64_MAX where it cannot be read. A permutation larger than this can
// only end in the out-of-memory killer (Linux overcommits), so it is refused up front.
uint64_t physical_memory_bytes() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  }
#endif
  return UINT64_MAX;
}

class IdentityOrder final : public EpochOrder {
 public:
  explicit IdentityOrder(uint64_t n) : EpochOrder(n) {}
  uint64_t at(uint64_t position) const override { return position; }
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const override {
    for (uint64_t j = 0; j < count; ++j) out[j] = first + j * stride;
  }
};

inline void prefetch_read(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 0);
#else
  (void)p;
#endif
}

// A materialized permutation, owned (a private buffer) or borrowed (a shared-memory mapping
// that `keep_` holds). gather reads it at stride W, the rank's positions: where each index is its
// own cache line (W >= 16 for 32-bit storage), lines are prefetched kAhead indices early (the
// hardware prefetcher follows a stride only within a page); the loops have no other branch.
template <typename T>
class TorchOrder final : public EpochOrder {
 public:
  TorchOrder(uint64_t n, std::shared_ptr<const void> keep, const T* perm)
      : EpochOrder(n), keep_(std::move(keep)), perm_(perm) {}
  uint64_t at(uint64_t position) const override { return perm_[position]; }
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const override {
    const T* p = perm_ + first;
    if (stride * sizeof(T) < 64) {  // several indices per line: the hardware prefetcher keeps up
      for (uint64_t j = 0; j < count; ++j) out[j] = p[j * stride];
      return;
    }
    constexpr uint64_t kAhead = 32;
    uint64_t j = 0;
    if (count > kAhead) {
      for (uint64_t k = 0; k < kAhead; ++k) prefetch_read(p + k * stride);
      const T* ahead = p + kAhead * stride;
      for (; j < count - kAhead; ++j) {
        prefetch_read(ahead + j * stride);
        out[j] = p[j * stride];
      }
    }
    for (; j < count; ++j) out[j] = p[j * stride];
  }

 private:
  std::shared_ptr<const void> keep_;
  const T* perm_;
};

// n elements of T, uninitialized (torch_randperm writes every one), or std::length_error.
template <typename T>
std::shared_ptr<T> allocate(uint64_t n) {
  if (n <= physical_memory_bytes() / sizeof(T)) {
    try {
      return std::shared_ptr<T>(new T[n], std::default_delete<T[]>());
    } catch (const std::bad_alloc&) {
    }
  }
  throw std::length_error("order torch needs " + std::to_string(n) + " x " +
                          std::to_string(sizeof(T)) +
                          " bytes of memory for size = " + std::to_string(n) +
                          " and could not get them; order feistel needs O(1) memory");
}

template <typename T>
std::shared_ptr<const EpochOrder> make_torch_order(uint64_t n, uint64_t seed,
                                                   RandpermVariant variant) {
  std::shared_ptr<T> perm = allocate<T>(n);
  torch_randperm(n, seed, variant, perm.get());
  const T* data = perm.get();
  return std::make_shared<TorchOrder<T>>(n, std::move(perm), data);
}

constexpr bool fits_32_bits(uint64_t n) { return n <= (uint64_t{1} << 32); }

class FeistelOrder final : public EpochOrder {
 public:
  FeistelOrder(uint64_t n, uint64_t seed, uint64_t epoch, int rounds, int version)
      : EpochOrder(n), perm_(n, seed, epoch, rounds, version) {}
  uint64_t at(uint64_t position) const override { return perm_(position); }
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const override {
    perm_.gather(first, stride, count, out);
  }

 private:
  FeistelPermutation perm_;
};

}  // namespace

constexpr std::string_view kOrderNoun = "an order";

std::string_view to_string(OrderKind kind) { return detail::variant_name(kOrderKinds, kind); }

OrderKind parse_order_kind(std::string_view text, std::string_view parameter) {
  return detail::parse_variant(kOrderKinds, text, parameter, kOrderNoun).value;
}

void check_order_kind(OrderKind kind, std::string_view parameter) {
  detail::check_variant(kOrderKinds, kind, parameter, kOrderNoun);
}

void validate(const OrderOptions& options) {
  if (options.size > FeistelPermutation::kMaxSize) {
    throw std::invalid_argument(
        "size = " + std::to_string(options.size) +
        " is too large; allowed: size <= 2^63 = " + std::to_string(FeistelPermutation::kMaxSize));
  }
  check_order_kind(options.kind, "order");
  check_randperm_variant(options.randperm, "randperm");
  if (options.feistel_rounds < 0 || options.feistel_rounds > FeistelPermutation::kMaxRounds) {
    throw std::invalid_argument("feistel_rounds = " + std::to_string(options.feistel_rounds) +
                                " is out of range; allowed: 1 <= feistel_rounds <= " +
                                std::to_string(FeistelPermutation::kMaxRounds) +
                                ", or 0 for the version's default");
  }
  check_feistel_version(options.feistel_version, "feistel_version");
}

std::shared_ptr<const EpochOrder> make_epoch_order(const OrderOptions& options, uint64_t epoch) {
  validate(options);
  const uint64_t n = options.size;
  if (!options.shuffle) return std::make_shared<IdentityOrder>(n);
  switch (options.kind) {
    case OrderKind::kTorch: {
      const uint64_t seed = options.seed.plus_epoch(epoch);
      if (fits_32_bits(n)) return make_torch_order<uint32_t>(n, seed, options.randperm);
      return make_torch_order<uint64_t>(n, seed, options.randperm);
    }
    case OrderKind::kFeistel:
      return std::make_shared<FeistelOrder>(n, options.seed.bits(), epoch, options.feistel_rounds,
                                            options.feistel_version);
  }
  throw std::logic_error("unreachable: validated order kind");
}

void check_epoch(const OrderOptions& options, uint64_t epoch) {
  validate(options);
  if (options.shuffle && options.kind == OrderKind::kTorch) options.seed.plus_epoch(epoch);
}

uint64_t torch_order_element_bytes(uint64_t size) { return fits_32_bits(size) ? 4 : 8; }

void build_torch_order(const OrderOptions& options, uint64_t epoch, void* out) {
  validate(options);
  if (!options.shuffle || options.kind != OrderKind::kTorch) {
    throw std::invalid_argument(
        "build_torch_order: order = " + std::string(to_string(options.kind)) + ", shuffle = " +
        (options.shuffle ? "true" : "false") + "; allowed: the shuffled torch order only");
  }
  const uint64_t seed = options.seed.plus_epoch(epoch);
  if (fits_32_bits(options.size)) {
    torch_randperm(options.size, seed, options.randperm, static_cast<uint32_t*>(out));
  } else {
    torch_randperm(options.size, seed, options.randperm, static_cast<uint64_t*>(out));
  }
}

std::shared_ptr<const EpochOrder> torch_order_over(uint64_t size, const void* data,
                                                   std::shared_ptr<const void> keep) {
  if (fits_32_bits(size)) {
    return std::make_shared<TorchOrder<uint32_t>>(size, std::move(keep),
                                                  static_cast<const uint32_t*>(data));
  }
  return std::make_shared<TorchOrder<uint64_t>>(size, std::move(keep),
                                                static_cast<const uint64_t*>(data));
}

}  // namespace distsampler
