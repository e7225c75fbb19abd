// node_order_internal.h: what the pieces of the node-shared order share (private to src/node/):
// the segment's layout and identity (node_order_segment.cc), local rank 0's side that builds and
// serves it (node_order_server.cc) and the other local ranks' side that maps it
// (node_order_reader.cc). node_order.cc holds the design and the public entry points.
#ifndef DISTSAMPLER_SRC_DIST_NODE_ORDER_INTERNAL_H_
#define DISTSAMPLER_SRC_DIST_NODE_ORDER_INTERNAL_H_

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "distsampler/node/node_order.h"

namespace distsampler {
namespace detail {
namespace node {

constexpr uint64_t kMagic = 0x44534e4f44453032ull;  // "DSNODE02"
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kChecksumSamples = 4096;
constexpr uint64_t kKeptEpochs = 2;         // descriptors kept per sampler instance, at least
constexpr uint64_t kDirect = ~uint64_t{0};  // make_node_epoch_order's own instance
enum Reply : unsigned char { kNotYet = 0, kReady = 1, kFailed = 2 };

// What a segment holds: every field must equal the reader's own.
struct Identity {
  uint64_t magic;
  uint64_t size;
  uint64_t torch_seed;  // seed + epoch, as torch.manual_seed takes it
  uint64_t epoch;
  uint64_t randperm;
  uint64_t element_bytes;
};

struct Header {
  Identity id;
  uint64_t checksum;
};
static_assert(sizeof(Header) <= kHeaderBytes, "the header fits its page");

// A reader's request: which sampler's which epoch, and who asks (the server counts each reader
// once per publication, however often it asks).
struct Request {
  uint64_t config;
  uint64_t instance;
  uint64_t epoch;
  uint64_t reader;  // the asking rank's local rank, 1 .. local world size - 1
};

// How this process's node-shared orders were obtained (node_order_counts).
extern std::atomic<uint64_t> g_built;
extern std::atomic<uint64_t> g_mapped;
extern std::atomic<uint64_t> g_fallbacks;

// A checksum of the identity and of kChecksumSamples values spread over the permutation.
uint64_t sample_checksum(const Identity& h, const unsigned char* data);
bool same_configuration(const Identity& a, const Identity& b);

// One mapping; the last reference unmaps it.
struct Mapping {
  void* address = MAP_FAILED;
  size_t bytes = 0;
  Mapping(void* a, size_t b) : address(a), bytes(b) {}
  ~Mapping() {
    if (address != MAP_FAILED) munmap(address, bytes);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Header* header() const { return static_cast<Header*>(address); }
  const unsigned char* data() const {
    return static_cast<const unsigned char*>(address) + kHeaderBytes;
  }
};

// A descriptor closed with its owner.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd >= 0) close(fd);
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
};

// Counts a fallback; the first one in the process prints why on stderr.
void warn_fallback(const std::string& why);
// A hash of `text` from `h`, and a value in 16 hex digits: the parts of a socket's name.
uint64_t hash_text(const std::string& text, uint64_t h);
std::string hex(uint64_t v);
// One byte over a connected Unix socket, with descriptor `fd` attached unless it is -1: whether it
// was sent.
bool send_byte(int sock, unsigned char byte, int fd);
// One byte from a connected Unix socket into `byte`, and the descriptor attached to it into
// `fd` (left empty when none): false when no byte came.
bool receive_byte(int sock, unsigned char* byte, Fd* fd);
// `what`: strerror(errno).
std::string errno_text(const std::string& what);
// What a segment of (options, epoch) must hold; throws on seed + epoch overflow.
Identity expected_identity(const OrderOptions& options, uint64_t epoch);
// The configuration's key, the same for every epoch.
uint64_t config_key(const OrderOptions& options);
// A mapping of `bytes` of the object at `fd`, or nullptr.
std::shared_ptr<Mapping> map(int fd, uint64_t bytes, int protection);
// The socket address of a node's server: abstract (a leading NUL), so no file names it.
sockaddr_un address_of(const NodeGroup& group, socklen_t* length);

// Local rank 0: builds into a sealed memory file and publishes it; nullptr after a fallback
// warning (the failure is then published, so that the readers fall back too).
std::shared_ptr<const EpochOrder> build_shared(const OrderOptions& options, uint64_t epoch,
                                               const NodeGroup& group, const Request& request);
// Local rank 0: a sampler instance is gone; its descriptors go once every reader has them (or
// the group's timeout has passed).
void release_instance(const NodeGroup& group, uint64_t config, uint64_t instance);

// The other local ranks: the permutation local rank 0 published, mapped read-only; nullptr after
// a fallback warning; throws std::runtime_error at the group's timeout and OrderCancelled when
// `cancelled` says so.
std::shared_ptr<const EpochOrder> map_shared(const OrderOptions& options, uint64_t epoch,
                                             const NodeGroup& group, const Request& request,
                                             const std::function<bool()>& cancelled);

}  // namespace node
}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_DIST_NODE_ORDER_INTERNAL_H_
