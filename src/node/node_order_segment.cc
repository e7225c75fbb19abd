// node_order_segment.cc: the node-shared order's segment (node_order_internal.h): its identity
// and checksum, descriptors and mappings, the server's socket address, the fallback warning and
// the counters.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "distsampler/hash.h"
#include "node_order_internal.h"

namespace distsampler {
namespace detail {
namespace node {

std::atomic<uint64_t> g_built{0};
std::atomic<uint64_t> g_mapped{0};
std::atomic<uint64_t> g_fallbacks{0};

uint64_t hash_text(const std::string& text, uint64_t h) {
  for (unsigned char c : text) h = mix64(h ^ c);
  return mix64(h ^ text.size());
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool send_byte(int sock, unsigned char byte, int fd) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec io{&byte, 1};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&message);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return sendmsg(sock, &message, MSG_NOSIGNAL) == 1;
}

bool receive_byte(int sock, unsigned char* byte, Fd* fd) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec io{byte, 1};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  if (recvmsg(sock, &message, MSG_CMSG_CLOEXEC) != 1) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c), sizeof received);
      *fd = Fd(received);
    }
  }
  return true;
}

uint64_t sample_checksum(const Identity& h, const unsigned char* data) {
  uint64_t sum = mix64(h.magic ^ mix64(h.size ^ mix64(h.torch_seed ^ mix64(h.epoch ^ h.randperm))));
  const uint64_t step = h.size / kChecksumSamples + 1;
  for (uint64_t p = 0; p < h.size; p += step) {
    uint64_t value = 0;
    if (h.element_bytes == 4) {
      uint32_t v;
      std::memcpy(&v, data + p * 4, 4);
      value = v;
    } else {
      std::memcpy(&value, data + p * 8, 8);
    }
    sum = mix64(sum ^ value) + p;
  }
  return sum;
}

bool same_configuration(const Identity& a, const Identity& b) {
  return a.magic == b.magic && a.size == b.size && a.torch_seed == b.torch_seed &&
         a.epoch == b.epoch && a.randperm == b.randperm && a.element_bytes == b.element_bytes;
}

void warn_fallback(const std::string& why) {
  static std::atomic<bool> warned{false};
  g_fallbacks.fetch_add(1);
  if (!warned.exchange(true)) {
    std::fprintf(stderr,
                 "distsampler: node-shared order unavailable (%s); each rank builds its own "
                 "permutation\n",
                 why.c_str());
  }
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

Identity expected_identity(const OrderOptions& options, uint64_t epoch) {
  Identity h{};
  h.magic = kMagic;
  h.size = options.size;
  h.torch_seed = options.seed.plus_epoch(epoch);
  h.epoch = epoch;
  h.randperm = static_cast<uint64_t>(options.randperm);
  h.element_bytes = torch_order_element_bytes(options.size);
  return h;
}

uint64_t config_key(const OrderOptions& options) {
  return mix64(options.size ^ mix64(options.seed.plus_epoch(0) ^
                                    mix64(static_cast<uint64_t>(options.randperm) + 1)));
}

// A mapping of `bytes` of the object at `fd`, or nullptr.
std::shared_ptr<Mapping> map(int fd, uint64_t bytes, int protection) {
  void* address = mmap(nullptr, bytes, protection, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) return nullptr;
  return std::make_shared<Mapping>(address, bytes);
}

// The socket address of a node's server: abstract (a leading NUL), so no file names it.
sockaddr_un address_of(const NodeGroup& group, socklen_t* length) {
  const std::string name = "distsampler/" + hex(hash_text(group.job, 1)) + "/" +
                           hex(hash_text(group.node, 2)) + "/" + std::to_string(getuid());
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

}  // namespace node
}  // namespace detail
}  // namespace distsampler
