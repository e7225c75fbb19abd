// One torch-order permutation per node: local rank 0 builds, the others map (dist/node_order.h).
//
// A segment is a POSIX shared-memory object named after the job, the node, the configuration and
// the epoch: one 4 KiB header page, then the permutation as build_torch_order writes it. The
// builder creates it exclusively (a leftover of the same name is unlinked first: a dead run of
// the same job id, never a live one, since only local rank 0 of this job creates these names),
// writes the header page first (so that any later failure can be published as such), reserves the
// permutation's memory with posix_fallocate (tmpfs otherwise overcommits and a full /dev/shm
// turns into SIGBUS while writing), builds, writes the checksum and sets the ready flag with
// release semantics. Readers poll with growing sleeps, reopening the name each time (so a replaced
// leftover is never waited on), check every header field against their own configuration and the
// checksum, and map the permutation read-only. Each rank increments the header's `attached` once
// it has mapped the segment; the one that brings it to the local world size unlinks the name.
#include "distsampler/dist/node_order.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "distsampler/hash.h"

namespace distsampler {
namespace {

constexpr uint64_t kMagic = 0x44534e4f44453031ull;  // "DSNODE01"
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kChecksumSamples = 4096;
enum Status : uint32_t { kBuilding = 0, kReady = 1, kFailed = 2 };

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
  uint64_t builder_pid;
  uint64_t checksum;
  std::atomic<uint32_t> status;
  std::atomic<uint32_t> attached;
};
static_assert(sizeof(Header) <= kHeaderBytes, "the header fits its page");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared between processes");

std::atomic<uint64_t> g_built{0};
std::atomic<uint64_t> g_mapped{0};
std::atomic<uint64_t> g_fallbacks{0};

// Names this process created and no rank has unlinked yet as far as it knows: unlinked at exit.
struct PendingNames {
  std::mutex mutex;
  std::set<std::string> names;
};
PendingNames& pending() {
  static PendingNames* names = new PendingNames();
  static const bool registered = [] {
    std::atexit([] {
      std::lock_guard<std::mutex> lock(pending().mutex);
      for (const std::string& name : pending().names) shm_unlink(name.c_str());
      pending().names.clear();
    });
    return true;
  }();
  (void)registered;
  return *names;
}
void add_pending(const std::string& name) {
  PendingNames& p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.names.insert(name);
}
void remove_pending(const std::string& name) {
  PendingNames& p = pending();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.names.erase(name);
}

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

std::string errno_text(const char* what, const std::string& name) {
  return std::string(what) + " " + name + ": " + std::strerror(errno);
}

// The last rank to map a segment unlinks its name: the memory lives on in the mappings.
void attach(const Mapping& m, const std::string& name, uint64_t local_world_size) {
  const uint32_t now = m.header()->attached.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (now >= local_world_size) {
    shm_unlink(name.c_str());
    remove_pending(name);
  }
}

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

// A mapping of `bytes` of the object at `fd`, or nullptr.
std::shared_ptr<Mapping> map(int fd, uint64_t bytes, int protection) {
  void* address = mmap(nullptr, bytes, protection, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) return nullptr;
  return std::make_shared<Mapping>(address, bytes);
}

// Publishes a failed build: the readers fall back instead of waiting.
void publish_failure(const Mapping& header, const std::string& name, uint64_t local_world_size) {
  header.header()->status.store(kFailed, std::memory_order_release);
  attach(header, name, local_world_size);
}

// The header page first (so that a failure can be published whatever happens next), then the
// permutation. nullptr after a fallback warning.
std::shared_ptr<const EpochOrder> build_shared(const OrderOptions& options, uint64_t epoch,
                                               const NodeGroup& group, const std::string& name,
                                               uint64_t total) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {  // a dead run's leftover of this job id: replace it
    shm_unlink(name.c_str());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) {
    warn_fallback(errno_text("shm_open", name));
    return nullptr;
  }
  add_pending(name);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  std::shared_ptr<Mapping> header;
  if (ftruncate(fd, static_cast<off_t>(kHeaderBytes)) != 0 ||
      !(header = map(fd, kHeaderBytes, PROT_READ | PROT_WRITE))) {
    warn_fallback(errno_text("creating the header of", name));
    shm_unlink(name.c_str());
    remove_pending(name);
    return nullptr;
  }
  Header* h = header->header();
  h->builder_pid = static_cast<uint64_t>(getpid());
  h->status.store(kBuilding, std::memory_order_relaxed);
  h->attached.store(0, std::memory_order_relaxed);
  h->id = expected_identity(options, epoch);
  // Reserve the memory now: on a full tmpfs, writing would raise SIGBUS instead. The free space
  // is checked first, so that a segment that cannot fit never fills the tmpfs on its way to
  // failing.
  struct statvfs fs;
  const bool room = fstatvfs(fd, &fs) != 0 || static_cast<uint64_t>(fs.f_bavail) >=
                                                  total / std::max<uint64_t>(fs.f_frsize, 1);
  int error = 0;
  if (!room) {
    error = ENOSPC;
  } else if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    error = errno;
  } else {
    error = posix_fallocate(fd, 0, static_cast<off_t>(total));
  }
  std::shared_ptr<Mapping> whole;
  if (error == 0 && !(whole = map(fd, total, PROT_READ | PROT_WRITE))) error = errno;
  if (error != 0) {
    errno = error;
    warn_fallback(errno_text("reserving", name) + ", " + std::to_string(total) + " bytes");
    publish_failure(*header, name, group.local_world_size);
    return nullptr;
  }
  void* data = static_cast<unsigned char*>(whole->address) + kHeaderBytes;
  try {
    build_torch_order(options, epoch, data);
  } catch (...) {
    publish_failure(*header, name, group.local_world_size);
    throw;
  }
  h->checksum = sample_checksum(h->id, whole->data());
  h->status.store(kReady, std::memory_order_release);
  g_built.fetch_add(1);
  attach(*header, name, group.local_world_size);
  mprotect(data, total - kHeaderBytes, PROT_READ);
  return torch_order_over(options.size, whole->data(), whole);
}

// nullptr after a fallback warning; throws std::runtime_error at the timeout.
std::shared_ptr<const EpochOrder> map_shared(const OrderOptions& options, uint64_t epoch,
                                             const NodeGroup& group, const std::string& name,
                                             uint64_t total,
                                             const std::function<bool()>& cancelled) {
  using Clock = std::chrono::steady_clock;
  const Identity want = expected_identity(options, epoch);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(group.timeout_seconds));
  auto sleep = std::chrono::microseconds(200);
  std::string last = "not created";
  while (true) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0 && errno != ENOENT) {
      warn_fallback(errno_text("shm_open", name));
      return nullptr;
    }
    if (fd >= 0) {
      struct Closer {
        int fd;
        ~Closer() { close(fd); }
      } closer{fd};
      struct stat st;
      std::shared_ptr<Mapping> header;
      if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= kHeaderBytes) {
        header = map(fd, kHeaderBytes, PROT_READ | PROT_WRITE);  // its counter is written
      }
      if (!header) {
        last = "created, header not yet written";
      } else if (!same_configuration(header->header()->id, want)) {
        last = "holding another configuration";
      } else {
        const Header* h = header->header();
        const uint32_t status = h->status.load(std::memory_order_acquire);
        if (status == kFailed) {
          attach(*header, name, group.local_world_size);
          warn_fallback("local rank 0 could not build " + name + " in shared memory");
          return nullptr;
        }
        if (status == kReady) {
          std::shared_ptr<Mapping> whole;
          if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != total ||
              !(whole = map(fd, total, PROT_READ))) {
            throw std::runtime_error("node-shared order: " + name + " is ready but cannot be " +
                                     "mapped (" + std::to_string(total) + " bytes)");
          }
          if (sample_checksum(h->id, whole->data()) != h->checksum) {
            throw std::runtime_error("node-shared order: " + name +
                                     " fails its checksum; shared memory corrupted");
          }
          attach(*header, name, group.local_world_size);
          g_mapped.fetch_add(1);
          return torch_order_over(options.size, whole->data(), whole);
        }
        const pid_t pid = static_cast<pid_t>(h->builder_pid);
        last = (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
                   ? "being built by process " + std::to_string(pid) + ", which died"
                   : "being built";
      }
    }
    if (cancelled && cancelled()) {
      throw OrderCancelled("node-shared order: the wait for epoch " + std::to_string(epoch) +
                           "'s permutation was cancelled");
    }
    if (Clock::now() >= deadline) {
      throw std::runtime_error("node-shared order: local rank 0 of node '" + group.node +
                               "' did not publish epoch " + std::to_string(epoch) +
                               "'s permutation " + name + " within " +
                               std::to_string(group.timeout_seconds) + " s (last seen: " + last +
                               "); every local rank must run the same sampler and epochs");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
}

uint64_t parse_count(const char* name, const char* text) {
  const std::string s = text;
  bool ok = !s.empty() && s.size() <= 19;
  for (char c : s) ok = ok && c >= '0' && c <= '9';
  if (!ok) {
    throw std::invalid_argument(std::string(name) + " = '" + s +
                                "'; allowed: a decimal integer >= 0 (at most 19 digits)");
  }
  return std::stoull(s);
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
    group.local_rank = parse_count("LOCAL_RANK", lookup("LOCAL_RANK"));
    group.local_world_size = parse_count("LOCAL_WORLD_SIZE", lookup("LOCAL_WORLD_SIZE"));
    group.job = "torchrun:" + value("TORCHELASTIC_RUN_ID") + "@" + value("MASTER_ADDR") + ":" +
                value("MASTER_PORT") + "#" + value("TORCHELASTIC_RESTART_COUNT");
    group.node = host_name() + "/" + value("GROUP_RANK");
  } else if (lookup("OMPI_COMM_WORLD_LOCAL_RANK") != nullptr &&
             lookup("OMPI_COMM_WORLD_LOCAL_SIZE") != nullptr) {
    group.local_rank =
        parse_count("OMPI_COMM_WORLD_LOCAL_RANK", lookup("OMPI_COMM_WORLD_LOCAL_RANK"));
    group.local_world_size =
        parse_count("OMPI_COMM_WORLD_LOCAL_SIZE", lookup("OMPI_COMM_WORLD_LOCAL_SIZE"));
    group.job = "openmpi:" + value("OMPI_MCA_ess_base_jobid") + value("PMIX_NAMESPACE");
    group.node = host_name();
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

std::shared_ptr<const EpochOrder> make_node_epoch_order(const OrderOptions& options, uint64_t epoch,
                                                        const NodeGroup& group,
                                                        const std::function<bool()>& cancelled) {
  validate(options);
  if (!options.shuffle || options.kind != OrderKind::kTorch || group.local_world_size <= 1) {
    return make_epoch_order(options, epoch);
  }
  const Identity want = expected_identity(options, epoch);  // throws on seed + epoch overflow
  if (access("/dev/shm", W_OK) != 0) {
    warn_fallback(errno_text("access", "/dev/shm"));
    return make_epoch_order(options, epoch);
  }
  const uint64_t config = mix64(want.size ^ mix64(want.torch_seed ^ mix64(want.randperm)));
  const std::string name = "/distsampler-" + hex(hash_text(group.job, 1)) + "-" +
                           hex(hash_text(group.node, 2)) + "-" + hex(config) + "-e" +
                           std::to_string(epoch);
  const uint64_t total = kHeaderBytes + options.size * want.element_bytes;
  std::shared_ptr<const EpochOrder> order =
      group.local_rank == 0 ? build_shared(options, epoch, group, name, total)
                            : map_shared(options, epoch, group, name, total, cancelled);
  return order ? order : make_epoch_order(options, epoch);
}

OrderBuilder node_order_builder(const NodeGroup& group) {
  return
      [group](const OrderOptions& options, uint64_t epoch, const std::function<bool()>& cancelled) {
        return make_node_epoch_order(options, epoch, group, cancelled);
      };
}

NodeOrderCounts node_order_counts() {
  return NodeOrderCounts{g_built.load(), g_mapped.load(), g_fallbacks.load()};
}

}  // namespace distsampler
