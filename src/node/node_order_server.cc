// node_order_server.cc: local rank 0's side of the node-shared order (node_order_internal.h). It
// builds an epoch's permutation into a sealed anonymous memory file and serves the descriptor to
// the node's other local ranks from one thread per (job, node), for the life of the process.
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "node_order_internal.h"

namespace distsampler {
namespace detail {
namespace node {
namespace {

// Memory the kernel could give now (MemAvailable), or nullopt when unknown.
std::optional<uint64_t> available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

// Local rank 0's descriptors, served to the node's other local ranks; one per (job, node), for
// the life of the process (never destroyed: its thread may outlive every sampler).
class Server {
 public:
  // nullptr after a fallback warning (the address is taken, sockets refused, a forked child).
  static Server* of(const NodeGroup& group) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    Server*& server = registry()[{group.job, group.node}];
    if (server == nullptr) {
      socklen_t length = 0;
      const sockaddr_un address = address_of(group, &length);
      Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (fd.fd < 0 || bind(fd.fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
          listen(fd.fd, 64) != 0) {
        warn_fallback(errno_text("listening for the node's local ranks"));
        return nullptr;
      }
      server = new Server(std::move(fd), group.local_world_size - 1);
    }
    if (server != nullptr && server->pid_ != getpid()) {
      // A fork of the process that serves (its thread did not come along): building here would
      // publish where no thread answers, and the readers would wait for nothing.
      warn_fallback("local rank 0 builds in a forked child of the process that serves the node");
      return nullptr;
    }
    return server;
  }

  // This process's server of the group, or nullptr; creates nothing, warns nothing.
  static Server* existing(const NodeGroup& group) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    const auto it = registry().find({group.job, group.node});
    return it != registry().end() && it->second != nullptr && it->second->pid_ == getpid()
               ? it->second
               : nullptr;
  }

  void publish(const Request& r, Fd fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    // The same epoch again (a second pass that builds again): the same bits, so the first
    // descriptor serves both passes, and every reader fetches it once per publication.
    Entry& e = entries_[key(r)];
    if (e.published == 0 || e.failed) {
      e.fd = std::move(fd);
      e.failed = e.fd.fd < 0;
    }
    e.fetched.resize(readers_);
    ++e.published;
    e.deadline.reset();
    e.sequence = ++sequence_;
    // Beyond an instance's kKeptEpochs newest, a descriptor every reader has is dropped (while
    // the sampler holds the current and the next epoch's orders, keeping theirs costs nothing).
    std::vector<std::pair<uint64_t, Key>> of_instance;
    for (const auto& [k, entry] : entries_) {
      if (std::get<0>(k) == r.config && std::get<1>(k) == r.instance) {
        of_instance.emplace_back(entry.sequence, k);
      }
    }
    std::sort(of_instance.begin(), of_instance.end());
    for (size_t i = 0; i + kKeptEpochs < of_instance.size(); ++i) {
      if (entries_[of_instance[i].second].done()) entries_.erase(of_instance[i].second);
    }
  }

  // The sampler instance is gone: what every reader has goes now, the rest once a reader still
  // waiting for it would have given up (the group's timeout): the sampler's ranks are gone too,
  // or they lag and fetch it before then.
  void release(uint64_t config, uint64_t instance, double timeout_seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_seconds));
    for (auto it = entries_.begin(); it != entries_.end();) {
      const bool mine = std::get<0>(it->first) == config && std::get<1>(it->first) == instance;
      if (mine) it->second.deadline = deadline;
      it = mine && it->second.done() ? entries_.erase(it) : std::next(it);
    }
  }

 private:
  using Registry = std::map<std::pair<std::string, std::string>, Server*>;
  static std::mutex& registry_mutex() {
    static std::mutex* mutex = new std::mutex();
    return *mutex;
  }
  static Registry& registry() {
    static Registry* servers = new Registry();
    return *servers;
  }
  using Key = std::tuple<uint64_t, uint64_t, uint64_t>;
  using Clock = std::chrono::steady_clock;
  struct Entry {
    Fd fd;
    bool failed = false;
    // Replies with it to each reader (local rank 1 at index 0): a reader that asks again (a
    // retried or discarded fetch) must not stand in for one that has not asked yet.
    std::vector<uint64_t> fetched;
    uint64_t published = 0;  // the builder's calls for it
    uint64_t sequence = 0;
    std::optional<Clock::time_point> deadline;  // set once its sampler is destroyed
    // Every reader fetched it once per publication.
    bool done() const {
      return std::all_of(fetched.begin(), fetched.end(),
                         [&](uint64_t count) { return count >= published; });
    }
  };
  static Key key(const Request& r) { return Key{r.config, r.instance, r.epoch}; }

  Server(Fd listener, uint64_t readers) : listener_(std::move(listener)), readers_(readers) {
    std::thread([this] { loop(); }).detach();
  }

  void loop() {
    while (true) {
      pollfd p{listener_.fd, POLLIN, 0};
      const int ready = poll(&p, 1, 1000);
      purge();
      if (ready <= 0) continue;
      const int conn = accept4(listener_.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // EMFILE and the like
        continue;
      }
      Fd closer(conn);
      answer(conn);
    }
  }

  void purge() {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto now = Clock::now();
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.deadline && *it->second.deadline <= now ? entries_.erase(it) : std::next(it);
    }
  }

  void answer(int conn) {
    ucred peer{};
    socklen_t peer_length = sizeof peer;
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &peer_length) != 0 ||
        peer.uid != geteuid()) {
      return;  // only this user's processes get the permutation
    }
    timeval timeout{1, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    Request r{};
    if (recv(conn, &r, sizeof r, MSG_WAITALL) != static_cast<ssize_t>(sizeof r)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = entries_.find(key(r));
    unsigned char reply = kNotYet;
    int fd = -1;
    if (it != entries_.end()) {
      reply = it->second.failed ? kFailed : kReady;
      fd = it->second.fd.fd;
    }
    if (!send_byte(conn, reply, reply == kReady ? fd : -1) || reply == kNotYet) return;
    // A reader outside 1 .. readers_ (another configuration of the node) is served, not counted.
    if (r.reader >= 1 && r.reader <= readers_) ++it->second.fetched[r.reader - 1];
    // Kept after every reader has it: a sampler may ask for the same epoch again (a second pass).
    if (it->second.deadline && it->second.done()) {
      entries_.erase(it);  // its sampler is gone and every reader has it
    }
  }

  Fd listener_;
  const uint64_t readers_;
  const pid_t pid_ = getpid();
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
  uint64_t sequence_ = 0;
};

}  // namespace

std::shared_ptr<const EpochOrder> build_shared(const OrderOptions& options, uint64_t epoch,
                                               const NodeGroup& group, const Request& request) {
  Server* server = Server::of(group);
  if (server == nullptr) return nullptr;
  const Identity id = expected_identity(options, epoch);
  const uint64_t total = kHeaderBytes + options.size * id.element_bytes;
  auto fail = [&](const std::string& why) -> std::shared_ptr<const EpochOrder> {
    warn_fallback(why);
    server->publish(request, Fd());
    return nullptr;
  };
  Fd fd(static_cast<int>(memfd_create("distsampler-order", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (fd.fd < 0) return fail(errno_text("memfd_create"));
  // Reserve the memory now (shmem overcommits, and running out while writing is SIGBUS), and
  // only when it can fit: a reservation beyond the available memory wakes the OOM killer.
  const std::optional<uint64_t> available = available_memory();
  int error = 0;
  if (available && total > *available) {
    error = ENOMEM;
  } else if (ftruncate(fd.fd, static_cast<off_t>(total)) != 0) {
    error = errno;
  } else {
    error = posix_fallocate(fd.fd, 0, static_cast<off_t>(total));
  }
  std::shared_ptr<Mapping> writable;
  if (error == 0 && !(writable = map(fd.fd, total, PROT_READ | PROT_WRITE))) error = errno;
  if (error != 0) {
    errno = error;
    return fail(errno_text("reserving " + std::to_string(total) + " bytes of memory"));
  }
  try {
    build_torch_order(options, epoch,
                      static_cast<unsigned char*>(writable->address) + kHeaderBytes);
  } catch (...) {
    server->publish(request, Fd());
    throw;
  }
  Header* h = writable->header();
  h->id = id;
  h->checksum = sample_checksum(id, writable->data());
  writable.reset();
  // Sealed: no rank can change it once published (the seal needs no writable mapping left).
  fcntl(fd.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  std::shared_ptr<Mapping> whole = map(fd.fd, total, PROT_READ);
  if (!whole) return fail(errno_text("mapping the permutation read-only"));
  server->publish(request, std::move(fd));
  g_built.fetch_add(1);
  return torch_order_over(options.size, whole->data(), whole);
}

void release_instance(const NodeGroup& group, uint64_t config, uint64_t instance) {
  if (Server* server = Server::existing(group)) {
    server->release(config, instance, group.timeout_seconds);
  }
}

}  // namespace node
}  // namespace detail
}  // namespace distsampler
