// order.h: one epoch's global order of [0, n): identity, torch-exact, or random-access Feistel.
#ifndef DISTSAMPLER_ORDER_H_
#define DISTSAMPLER_ORDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "distsampler/feistel.h"
#include "distsampler/seed.h"
#include "distsampler/torch_random.h"
#include "distsampler/variants.h"

namespace distsampler {

enum class OrderKind {
  // torch.randperm(n) seeded with seed + epoch: PyTorch's DistributedSampler bit for bit. Builds
  // the whole permutation, O(n) time and memory per epoch, on every rank (as PyTorch does).
  kTorch,
  // FeistelPermutation keyed by hash(seed, epoch) (version 2: and n): O(1) per position, O(1)
  // memory.
  kFeistel,
};

// The orders by name ("torch", "feistel": --order, Python's order=, the JSON checkpoint) and byte
// code (the binary checkpoint's order byte): one row per kind.
inline constexpr VariantRow<OrderKind> kOrderKinds[] = {
    {OrderKind::kTorch, "torch", 0},
    {OrderKind::kFeistel, "feistel", 1},
};

// "torch" / "feistel" ("unknown" for a value that is no row), and back: parse throws
// std::invalid_argument "<parameter> = '<text>' is not an order; allowed: torch, feistel".
std::string_view to_string(OrderKind kind);
OrderKind parse_order_kind(std::string_view text, std::string_view parameter = "order");
// Throws std::invalid_argument "<parameter> = 7 is not an order; allowed: ..." unless `kind` is a
// row of kOrderKinds.
void check_order_kind(OrderKind kind, std::string_view parameter = "order");

// What fixes the order of every epoch. The world size is deliberately absent: an epoch's global
// order never depends on how many ranks read it.
struct OrderOptions {
  uint64_t size = 0;
  Seed seed;
  bool shuffle = true;
  OrderKind kind = OrderKind::kTorch;
  RandpermVariant randperm = RandpermVariant::kCurrent;            // kind == kTorch only
  int feistel_rounds = FeistelPermutation::kVersionDefaultRounds;  // kind == kFeistel; 0: default
  int feistel_version = FeistelPermutation::kDefaultVersion;       // kind == kFeistel only
};

// One epoch's order: position p in [0, size) holds dataset index at(p).
class EpochOrder {
 public:
  virtual ~EpochOrder() = default;
  uint64_t size() const { return size_; }
  // Requires position < size().
  virtual uint64_t at(uint64_t position) const = 0;
  // out[j] = at(first + j * stride) for j in [0, count); every position must be below size().
  virtual void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const = 0;

 protected:
  explicit EpochOrder(uint64_t size) : size_(size) {}

 private:
  uint64_t size_;
};

// Checks options (size <= 2^63, rounds in range, kind, randperm and version rows of their tables)
// and throws std::invalid_argument naming the field. Cheap; make_epoch_order calls it too.
void validate(const OrderOptions& options);

// Builds epoch `epoch`'s order. For kTorch with shuffle this materializes torch.randperm and
// throws std::out_of_range when seed + epoch leaves PyTorch's seed range, std::length_error when
// the permutation cannot be held in memory.
std::shared_ptr<const EpochOrder> make_epoch_order(const OrderOptions& options, uint64_t epoch);
// Throws what make_epoch_order(options, epoch) throws, without building the order: the shuffled
// torch order of an epoch whose seed + epoch exceeds 2^64 - 1 is std::out_of_range.
void check_epoch(const OrderOptions& options, uint64_t epoch);

// The shuffled torch order's storage, for orders held elsewhere (node/node_order.h): bytes per
// position of the materialized permutation, 4 when size <= 2^32 (the indices fit), else 8.
uint64_t torch_order_element_bytes(uint64_t size);

// Writes the permutation make_epoch_order(options, epoch) materializes for the shuffled torch
// order to `out` (options.size * torch_order_element_bytes(options.size) bytes, aligned to 8).
// Throws std::invalid_argument when options is not the shuffled torch order; otherwise the
// errors of make_epoch_order.
void build_torch_order(const OrderOptions& options, uint64_t epoch, void* out);

// The torch order over a permutation that build_torch_order wrote into memory owned elsewhere
// (a shared-memory mapping): `data` must stay valid and unchanged while `keep` is alive.
std::shared_ptr<const EpochOrder> torch_order_over(uint64_t size, const void* data,
                                                   std::shared_ptr<const void> keep);

}  // namespace distsampler

#endif  // DISTSAMPLER_ORDER_H_
