#include "distsampler/order.h"

#include <new>
#include <stdexcept>
#include <string>
#include <vector>

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

template <typename T>
class TorchOrder final : public EpochOrder {
 public:
  TorchOrder(uint64_t n, uint64_t seed, RandpermVariant variant)
      : EpochOrder(n), perm_(allocate(n)) {
    torch_randperm(n, seed, variant, perm_.data());
  }
  uint64_t at(uint64_t position) const override { return perm_[position]; }
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const override {
    const T* p = perm_.data() + first;
    for (uint64_t j = 0; j < count; ++j) out[j] = p[j * stride];
  }

 private:
  static std::vector<T> allocate(uint64_t n) {
    if (n <= physical_memory_bytes() / sizeof(T)) {
      try {
        return std::vector<T>(n);
      } catch (const std::bad_alloc&) {
      } catch (const std::length_error&) {
      }
    }
    throw std::length_error("order torch needs " + std::to_string(n) + " x " +
                            std::to_string(sizeof(T)) +
                            " bytes of memory for size = " + std::to_string(n) +
                            " and could not get them; order feistel needs O(1) memory");
  }
  std::vector<T> perm_;
};

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

std::string_view to_string(OrderKind kind) {
  switch (kind) {
    case OrderKind::kTorch:
      return "torch";
    case OrderKind::kFeistel:
      return "feistel";
  }
  return "unknown";
}

OrderKind parse_order_kind(std::string_view text, std::string_view parameter) {
  if (text == "torch") return OrderKind::kTorch;
  if (text == "feistel") return OrderKind::kFeistel;
  throw std::invalid_argument(std::string(parameter) + " = '" + std::string(text) +
                              "' is not an order; allowed: torch, feistel");
}

void validate(const OrderOptions& options) {
  if (options.size > FeistelPermutation::kMaxSize) {
    throw std::invalid_argument(
        "size = " + std::to_string(options.size) +
        " is too large; allowed: size <= 2^63 = " + std::to_string(FeistelPermutation::kMaxSize));
  }
  if (options.kind != OrderKind::kTorch && options.kind != OrderKind::kFeistel) {
    throw std::invalid_argument("order = " + std::to_string(static_cast<int>(options.kind)) +
                                " is not an order; allowed: torch, feistel");
  }
  if (options.randperm != RandpermVariant::kCurrent &&
      options.randperm != RandpermVariant::kClassic) {
    throw std::invalid_argument("randperm = " + std::to_string(static_cast<int>(options.randperm)) +
                                " is not a variant; allowed: current, classic");
  }
  if (options.feistel_rounds < 1 || options.feistel_rounds > FeistelPermutation::kMaxRounds) {
    throw std::invalid_argument("feistel_rounds = " + std::to_string(options.feistel_rounds) +
                                " is out of range; allowed: 1 <= feistel_rounds <= " +
                                std::to_string(FeistelPermutation::kMaxRounds));
  }
  if (options.feistel_version != FeistelPermutation::kVersion1 &&
      options.feistel_version != FeistelPermutation::kVersion2) {
    throw std::invalid_argument("feistel_version = " + std::to_string(options.feistel_version) +
                                " is not a version; allowed: 1, 2");
  }
}

std::shared_ptr<const EpochOrder> make_epoch_order(const OrderOptions& options, uint64_t epoch) {
  validate(options);
  const uint64_t n = options.size;
  if (!options.shuffle) return std::make_shared<IdentityOrder>(n);
  switch (options.kind) {
    case OrderKind::kTorch: {
      const uint64_t seed = options.seed.plus_epoch(epoch);
      if (n <= (uint64_t{1} << 32)) {
        return std::make_shared<TorchOrder<uint32_t>>(n, seed, options.randperm);
      }
      return std::make_shared<TorchOrder<uint64_t>>(n, seed, options.randperm);
    }
    case OrderKind::kFeistel:
      return std::make_shared<FeistelOrder>(n, options.seed.bits(), epoch, options.feistel_rounds,
                                            options.feistel_version);
  }
  throw std::logic_error("unreachable: validated order kind");
}

}  // namespace distsampler
