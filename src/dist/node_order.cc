// One torch-order permutation per node: local rank 0 builds, the others map (dist/node_order.h).
//
// A segment has no name: local rank 0 builds the permutation into an anonymous memory file
// (memfd_create), one 4 KiB header page (the configuration and a checksum) then the permutation
// as build_torch_order writes it, seals it against writes and keeps the descriptor. The other
// local ranks fetch the descriptor from it over a Unix socket (SCM_RIGHTS) and map it read-only.
// The kernel frees the memory with the last descriptor or mapping, so nothing outlives the
// processes however they end (SIGKILL during a build, an exception on one rank): there is no
// /dev/shm name to leak and no cleanup to run. The socket's address is in Linux's abstract
// namespace (no file either) and names the job and the node; a request names the configuration,
// the sampler instance (the k-th node-shared sampler of that configuration in the process: two
// samplers of one configuration keep separate permutations, never each other's) and the epoch.
//
// Local rank 0 runs one server thread per (job, node) for the life of the process; it answers
// "not yet", "failed" (the readers fall back) or the descriptor, and drops a descriptor once every
// other local rank has fetched it and its instance has kKeptEpochs newer ones, or when its
// sampler is destroyed and every reader has it (or the group's timeout has passed since).
// Readers poll with growing sleeps, check every header field against their own configuration and
// the checksum, and map it read-only.
#include "distsampler/dist/node_order.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "distsampler/dist/env.h"
#include "distsampler/hash.h"

namespace distsampler {
namespace {

constexpr uint64_t kMagic = 0x44534e4f44453032ull;  // "DSNODE02"
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kChecksumSamples = 4096;
constexpr uint64_t kKeptEpochs = 2;  // descriptors kept per sampler instance, at least
constexpr uint64_t kDirect = ~uint64_t{0};       // make_node_epoch_order's own instance
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

// A reader's request: which sampler's which epoch.
struct Request {
  uint64_t config;
  uint64_t instance;
  uint64_t epoch;
};

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

// The configuration's key, the same for every epoch.
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
      if (entries_[of_instance[i].second].done(readers_)) entries_.erase(of_instance[i].second);
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
      it = mine && it->second.done(readers_) ? entries_.erase(it) : std::next(it);
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
    uint64_t served = 0;     // replies with it
    uint64_t published = 0;  // the builder's calls for it
    uint64_t sequence = 0;
    std::optional<Clock::time_point> deadline;  // set once its sampler is destroyed
    bool done(uint64_t readers) const { return served >= readers * published; }
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
    char control[CMSG_SPACE(sizeof(int))] = {};
    iovec io{&reply, 1};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    if (reply == kReady) {
      message.msg_control = control;
      message.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&message);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    // Kept after every reader has it: a sampler may ask for the same epoch again (a second pass).
    if (sendmsg(conn, &message, MSG_NOSIGNAL) == 1 && reply != kNotYet &&
        (++it->second.served, it->second.done(readers_)) && it->second.deadline) {
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

// Builds into a sealed memory file and publishes it; nullptr after a fallback warning (the
// failure is then published, so that the readers fall back too).
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
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec io{&reply, 1};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  if (recvmsg(sock.fd, &message, MSG_CMSG_CLOEXEC) != 1) return {-ECONNRESET, Fd()};
  Fd received;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      received = Fd(fd);
    }
  }
  if (reply == kReady && received.fd < 0) return {-EPROTO, Fd()};
  return {reply, std::move(received)};
}

// nullptr after a fallback warning; throws std::runtime_error at the timeout.
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
    if (Clock::now() >= deadline) {
      throw std::runtime_error("node-shared order: local rank 0 of node '" + group.node +
                               "' did not publish epoch " + std::to_string(epoch) +
                               "'s permutation within " + std::to_string(group.timeout_seconds) +
                               " s (last seen: " + last +
                               "); every local rank must run the same samplers and epochs");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
}

// The k-th node-shared sampler of a configuration in this process gets instance k: the ranks of
// a node create their samplers in the same order, so the instances agree without a message.
// Counted per local rank too, for a process that plays several (tests).
uint64_t claim_instance(const NodeGroup& group, uint64_t config) {
  using Key = std::tuple<std::string, std::string, uint64_t, uint64_t>;
  static std::mutex* mutex = new std::mutex();
  static auto* next = new std::map<Key, uint64_t>();
  std::lock_guard<std::mutex> lock(*mutex);
  return (*next)[Key{group.job, group.node, group.local_rank, config}]++;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

const char* process_env(const char* name) { return std::getenv(name); }

}  // namespace

std::optional<NodeGroup> detect_node_group(const EnvLookup& lookup) {
  auto value = [&](const char* name) -> std::string {
    const char* v = lookup(name);
    return v != nullptr ? v : "";
  };
  NodeGroup group;
  if (lookup("LOCAL_RANK") != nullptr && lookup("LOCAL_WORLD_SIZE") != nullptr) {
    group.local_rank = parse_env_count("LOCAL_RANK", lookup("LOCAL_RANK"));
    group.local_world_size = parse_env_count("LOCAL_WORLD_SIZE", lookup("LOCAL_WORLD_SIZE"));
    group.job = "torchrun:" + value("TORCHELASTIC_RUN_ID") + "@" + value("MASTER_ADDR") + ":" +
                value("MASTER_PORT") + "#" + value("TORCHELASTIC_RESTART_COUNT");
    group.node = host_name() + "/" + value("GROUP_RANK");
  } else if (lookup("OMPI_COMM_WORLD_LOCAL_RANK") != nullptr &&
             lookup("OMPI_COMM_WORLD_LOCAL_SIZE") != nullptr) {
    group.local_rank =
        parse_env_count("OMPI_COMM_WORLD_LOCAL_RANK", lookup("OMPI_COMM_WORLD_LOCAL_RANK"));
    group.local_world_size =
        parse_env_count("OMPI_COMM_WORLD_LOCAL_SIZE", lookup("OMPI_COMM_WORLD_LOCAL_SIZE"));
    group.job = "openmpi:" + value("OMPI_MCA_ess_base_jobid") + value("PMIX_NAMESPACE");
    group.node = host_name();
  } else if (slurm_in_step(lookup) && lookup("SLURM_LOCALID") != nullptr &&
             lookup("SLURM_NODEID") != nullptr) {
    // A step's tasks on this node: SLURM_NODEID indexes the step's compressed tasks per node
    // ("3,1", "2(x2)"). Two slurmd on one host are two nodes, as SLURM sees them.
    const char* per_node_name = lookup("SLURM_STEP_TASKS_PER_NODE") != nullptr
                                    ? "SLURM_STEP_TASKS_PER_NODE"
                                    : "SLURM_TASKS_PER_NODE";
    if (lookup(per_node_name) == nullptr) return std::nullopt;
    const uint64_t node_id = parse_env_count("SLURM_NODEID", lookup("SLURM_NODEID"));
    group.local_rank = parse_env_count("SLURM_LOCALID", lookup("SLURM_LOCALID"));
    group.local_world_size = slurm_tasks_on_node(value(per_node_name), node_id, per_node_name);
    group.job = "slurm:" + value("SLURM_JOB_ID") + "." + value("SLURM_STEP_ID") + "@" +
                value("SLURM_CLUSTER_NAME");
    group.node = host_name() + "/" + std::to_string(node_id);
  } else {
    return std::nullopt;
  }
  if (group.local_world_size == 0 || group.local_rank >= group.local_world_size) {
    throw std::invalid_argument(
        "local rank = " + std::to_string(group.local_rank) +
        "; allowed: < local world size = " + std::to_string(group.local_world_size));
  }
  return group;
}

std::optional<NodeGroup> detect_node_group() { return detect_node_group(process_env); }

namespace {

// One sampler's share of the node: its instance, claimed at its first build.
struct NodeBuilder {
  NodeGroup group;
  std::mutex mutex;
  std::map<uint64_t, uint64_t> instances;  // config -> instance
  ~NodeBuilder() {
    if (group.local_rank != 0) return;
    for (const auto& [config, instance] : instances) {
      if (Server* server = Server::existing(group)) {
        server->release(config, instance, group.timeout_seconds);
      }
    }
  }
};

std::shared_ptr<const EpochOrder> node_epoch_order(const OrderOptions& options, uint64_t epoch,
                                                   const NodeGroup& group,
                                                   const std::function<bool()>& cancelled,
                                                   NodeBuilder* builder) {
  validate(options);
  if (!options.shuffle || options.kind != OrderKind::kTorch || group.local_world_size <= 1) {
    return make_epoch_order(options, epoch);
  }
  expected_identity(options, epoch);  // throws on seed + epoch overflow
  Request request{config_key(options), kDirect, epoch};
  if (builder != nullptr) {
    std::lock_guard<std::mutex> lock(builder->mutex);
    auto it = builder->instances.find(request.config);
    if (it == builder->instances.end()) {
      it = builder->instances.emplace(request.config, claim_instance(group, request.config)).first;
    }
    request.instance = it->second;
  }
  std::shared_ptr<const EpochOrder> order =
      group.local_rank == 0 ? build_shared(options, epoch, group, request)
                            : map_shared(options, epoch, group, request, cancelled);
  return order ? order : make_epoch_order(options, epoch);
}

}  // namespace

std::shared_ptr<const EpochOrder> make_node_epoch_order(const OrderOptions& options, uint64_t epoch,
                                                        const NodeGroup& group,
                                                        const std::function<bool()>& cancelled) {
  return node_epoch_order(options, epoch, group, cancelled, nullptr);
}

OrderBuilder node_order_builder(const NodeGroup& group) {
  auto builder = std::make_shared<NodeBuilder>();
  builder->group = group;
  return [builder](const OrderOptions& options, uint64_t epoch,
                   const std::function<bool()>& cancelled) {
    return node_epoch_order(options, epoch, builder->group, cancelled, builder.get());
  };
}

NodeOrderCounts node_order_counts() {
  return NodeOrderCounts{g_built.load(), g_mapped.load(), g_fallbacks.load()};
}

}  // namespace distsampler
