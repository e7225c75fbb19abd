// node_order_reader.cc: the other local ranks' side of the node-shared order
// (node_order_internal.h). A reader asks local rank 0's server for the descriptor, polling with
// growing sleeps until it is published, checks every header field against its own configuration
// and the checksum, and maps the permutation read-only.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "node_order_internal.h"

namespace distsampler {
namespace detail {
namespace node {
namespace {

// One request to local rank 0's server: the reply, and the descriptor with kReady.
std::pair<int, Fd> ask(const NodeGroup& group, const Request& request) {
  socklen_t length = 0;
  const sockaddr_un address = address_of(group, &length);
  Fd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (sock.fd < 0) return {-errno, Fd()};
  if (connect(sock.fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return {-errno, Fd()};
  }
  timeval timeout{5, 0};
  setsockopt(sock.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const ssize_t sent = send(sock.fd, &request, sizeof request, MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(sizeof request)) {
    return {-errno, Fd()};
  }
  unsigned char reply = 0;
  Fd received;
  if (!receive_byte(sock.fd, &reply, &received)) return {-ECONNRESET, Fd()};
  if (reply == kReady && received.fd < 0) return {-EPROTO, Fd()};
  return {reply, std::move(received)};
}

// The servers (job, node) this process has had an answer from. A server lives as long as local
// rank 0's process, so a refused connection to one of them means that process is gone (killed,
// or ended by an error) and whatever it had not published will never come: the readers stop at
// once instead of waiting for the timeout. Before the first answer a refusal only means "not
// listening yet".
class ReachedServers {
 public:
  static void note(const NodeGroup& group) {
    std::lock_guard<std::mutex> lock(mutex());
    servers().emplace(group.job, group.node);
  }
  static bool contains(const NodeGroup& group) {
    std::lock_guard<std::mutex> lock(mutex());
    return servers().count({group.job, group.node}) != 0;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex* m = new std::mutex();
    return *m;
  }
  static std::set<std::pair<std::string, std::string>>& servers() {
    static auto* s = new std::set<std::pair<std::string, std::string>>();
    return *s;
  }
};

}  // namespace

std::shared_ptr<const EpochOrder> map_shared(const OrderOptions& options, uint64_t epoch,
                                             const NodeGroup& group, const Request& request,
                                             const std::function<bool()>& cancelled) {
  using Clock = std::chrono::steady_clock;
  const Identity want = expected_identity(options, epoch);
  const uint64_t total = kHeaderBytes + options.size * want.element_bytes;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(group.timeout_seconds));
  auto sleep = std::chrono::microseconds(200);
  std::string last = "not listening";
  while (true) {
    auto [reply, fd] = ask(group, request);
    if (reply >= 0) ReachedServers::note(group);
    const bool gone = reply == -ECONNREFUSED && ReachedServers::contains(group);
    if (reply == kFailed) {
      warn_fallback("local rank 0 could not build epoch " + std::to_string(epoch) +
                    "'s permutation in shared memory");
      return nullptr;
    }
    if (reply == kReady) {
      struct stat st;
      std::shared_ptr<Mapping> whole;
      if (fstat(fd.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != total ||
          !(whole = map(fd.fd, total, PROT_READ))) {
        throw std::runtime_error("node-shared order: epoch " + std::to_string(epoch) +
                                 "'s permutation from local rank 0 cannot be mapped (" +
                                 std::to_string(total) + " bytes)");
      }
      const Header* h = whole->header();
      if (!same_configuration(h->id, want) ||
          sample_checksum(h->id, whole->data()) != h->checksum) {
        throw std::runtime_error("node-shared order: epoch " + std::to_string(epoch) +
                                 "'s permutation from local rank 0 holds another configuration "
                                 "or fails its checksum");
      }
      g_mapped.fetch_add(1);
      return torch_order_over(options.size, whole->data(), whole);
    }
    last = reply == kNotYet ? "not yet built"
                            : "not listening (" + std::string(std::strerror(-reply)) + ")";
    if (cancelled && cancelled()) {
      throw OrderCancelled("node-shared order: the wait for epoch " + std::to_string(epoch) +
                           "'s permutation was cancelled");
    }
    if (gone) {
      throw std::runtime_error("node-shared order: local rank 0 of node '" + group.node +
                               "' stopped serving before it published epoch " +
                               std::to_string(epoch) +
                               "'s permutation: its process is gone (killed, or ended by an "
                               "error: see its output)");
    }
    if (Clock::now() >= deadline) {
      throw std::runtime_error(
          "node-shared order: local rank 0 of node '" + group.node + "' did not publish epoch " +
          std::to_string(epoch) + "'s permutation within " + std::to_string(group.timeout_seconds) +
          " s (last seen: " + last + "); every local rank must run the same samplers and epochs");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
}

}  // namespace node
}  // namespace detail
}  // namespace distsampler
