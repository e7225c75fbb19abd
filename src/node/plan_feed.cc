// plan_feed.cc: a token plan planned ahead by one thread, into a ring in shared memory
// (node/plan_feed.h).
//
// The memory file: a header page, then `slots` slots of `slot_words` 64-bit words. Slot words:
//   [0] sequence lock: 2 s + 1 while step s is written, 2 s + 2 once it is
//   [1] spans in the step, or kAbsent (too many for the slot: readers plan it)
//   [2] state words, or kAbsent (too many: readers plan the step)
//   [3, 3 + R) the end of each held sequence's spans (cumulative; R = rows held, B or fewer)
//   then span_capacity spans of 5 words (source, document, begin, end, epoch)
//   then state_capacity words of the state after the step (encode_state)
// Every word is written with release and read with acquire operations (a sequence lock without
// fences, which ThreadSanitizer follows; plain moves on x86-64): a reader that saw any word of a
// newer write sees the lock changed after it, so a torn slot is only read to be discarded.
#include "distsampler/node/plan_feed.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "distsampler/hash.h"
#include "distsampler/state_dict.h"
#include "node_order_internal.h"
#include "plan_feed_internal.h"

namespace distsampler {

namespace {

constexpr uint64_t kMagic = 0x4453464545443032ull;  // "DSFEED02"
constexpr uint64_t kHeaderWords = 512;              // one page
constexpr uint64_t kAbsent = ~uint64_t{0};
constexpr uint64_t kSpanWords = 5;
enum : uint64_t { kPlanning = 0, kFailed = 1, kStopped = 2 };

std::atomic<uint64_t> g_planned{0}, g_read{0}, g_fallback{0}, g_served{0}, g_attached{0};

uint64_t load(const uint64_t* w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
void store(uint64_t* w, uint64_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }
void raise_to(uint64_t* w, uint64_t v) {
  uint64_t seen = __atomic_load_n(w, __ATOMIC_RELAXED);
  while (seen < v &&
         !__atomic_compare_exchange_n(w, &seen, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

struct Header {
  uint64_t magic;
  uint64_t key;  // the plan's configuration
  uint64_t first_step;
  uint64_t global_batch;
  uint64_t rows_first;  // the sequences of a step held: [rows_first, rows_first + rows)
  uint64_t rows;
  uint64_t slots;
  uint64_t slot_words;
  uint64_t span_capacity;
  uint64_t state_capacity;
  uint64_t ahead;
  uint64_t planner_pid;
  uint64_t frontier;   // atomic: the furthest step a reader has asked for
  uint64_t published;  // atomic: the step after the last one written
  uint64_t status;     // atomic: kPlanning, kFailed, kStopped
};
static_assert(sizeof(Header) <= kHeaderWords * 8, "the header fits its page");

uint64_t config_key(const TokenPlan& plan) {
  return detail::node::hash_text(canonical_json(plan.config(~uint64_t{0})), kMagic);
}

// Whether process `pid` has ended (gone, or a zombie not yet reaped).
bool process_ended(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

void check_plan(const TokenPlan& plan) {
  if (plan.options().subset != Split::kTrain) {
    throw std::invalid_argument("plan feed: an evaluation stream (subset " +
                                std::string(to_string(plan.options().subset)) +
                                ") is read a pass at a time, not fed");
  }
  if (plan.sequence() % plan.options().global_batch != 0) {
    throw std::invalid_argument("plan feed: the plan stands at sequence " +
                                std::to_string(plan.sequence()) + ", inside a step of " +
                                std::to_string(plan.options().global_batch));
  }
}

}  // namespace

void detail::count_feed_fallback() { g_fallback.fetch_add(1); }

PlanFeedCounts plan_feed_counts() {
  return {g_planned.load(), g_read.load(), g_fallback.load(), g_served.load(),
          g_attached.load()};
}

// The mapping of the memory file.
struct PlanFeed::Ring {
  uint64_t* words = nullptr;
  size_t bytes = 0;
  Ring(uint64_t* w, size_t b) : words(w), bytes(b) {}
  ~Ring() {
    if (words != nullptr) ::munmap(words, bytes);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  Header* header() const { return reinterpret_cast<Header*>(words); }
  uint64_t* slot(uint64_t step) const {
    const Header* h = header();
    return words + kHeaderWords + (step % h->slots) * h->slot_words;
  }
};

// This process's planning thread, and the node's server when it serves one.
struct PlanFeed::Planner {
  std::atomic<bool> stop{false};
  std::thread thread;
  std::thread server;
  int listener = -1;
};

namespace {

std::shared_ptr<PlanFeed::Ring> map_ring(int fd, std::string* why) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kHeaderWords * 8)) {
    *why = "the feed's memory file is not there or too small";
    return nullptr;
  }
  void* address = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE,
                         MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    *why = std::string("mmap: ") + std::strerror(errno);
    return nullptr;
  }
  return std::make_shared<PlanFeed::Ring>(static_cast<uint64_t*>(address),
                                          static_cast<size_t>(st.st_size));
}

void plan_into(PlanFeed::Ring& ring, TokenPlan plan, const std::atomic<bool>& stop) {
  Header* h = ring.header();
  std::vector<uint64_t> state;
  try {
    for (uint64_t step = h->first_step;; ++step) {
      auto pause = std::chrono::microseconds(20);
      while (step > load(&h->frontier) + h->ahead) {
        if (stop.load()) return;
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(2000));
      }
      if (stop.load()) return;
      const std::vector<PlannedSequence> sequences = plan.next_step_rows(h->rows_first, h->rows);
      state = token_state_words(plan.state());
      uint64_t spans = 0;
      for (const PlannedSequence& s : sequences) spans += s.spans.size();
      uint64_t* slot = ring.slot(step);
      store(&slot[0], 2 * step + 1);
      const bool fits = spans <= h->span_capacity && state.size() <= h->state_capacity;
      store(&slot[1], fits ? spans : kAbsent);
      store(&slot[2], fits ? state.size() : kAbsent);
      if (fits) {
        uint64_t* ends = slot + 3;
        uint64_t* out = ends + h->rows;
        uint64_t end = 0;
        for (size_t i = 0; i < sequences.size(); ++i) {
          for (const Span& x : sequences[i].spans) {
            for (uint64_t v : {uint64_t{x.source}, x.document, x.begin, x.end, x.epoch}) {
              store(out++, v);
            }
          }
          end += sequences[i].spans.size();
          store(&ends[i], end);
        }
        uint64_t* words = ends + h->rows + h->span_capacity * kSpanWords;
        for (size_t i = 0; i < state.size(); ++i) store(&words[i], state[i]);
      }
      store(&slot[0], 2 * step + 2);
      store(&h->published, step + 1);
      g_planned.fetch_add(1);
    }
  } catch (const std::exception& e) {
    store(&h->status, kFailed);
    std::cerr << "distsampler: the plan feed stopped planning (" << e.what()
              << "); each reader plans its steps itself\n";
  }
}

}  // namespace

PlanFeed::PlanFeed(pid_t pid, int fd, std::shared_ptr<Ring> ring, PlanFeedOptions options)
    : pid_(pid), fd_(fd), ring_(std::move(ring)), options_(options) {}

std::shared_ptr<PlanFeed> PlanFeed::start(const TokenPlan& plan, const PlanFeedOptions& options) {
  if (options.ahead == 0 || options.ahead > PlanFeedOptions::kMaxAhead) {
    throw std::invalid_argument("ahead = " + std::to_string(options.ahead) +
                                ": steps planned ahead, in [1, " +
                                std::to_string(PlanFeedOptions::kMaxAhead) + "]");
  }
  if (options.spans_per_sequence == 0) {
    throw std::invalid_argument("spans_per_sequence = 0: a slot's room per sequence, at least 1");
  }
  check_plan(plan);
  const uint64_t batch = plan.options().global_batch;
  const uint64_t rows = options.rows == 0 ? batch : options.rows;
  if (options.rows_first > batch || rows > batch - options.rows_first) {
    throw std::invalid_argument("rows_first = " + std::to_string(options.rows_first) +
                                ", rows = " + std::to_string(options.rows) +
                                ": sequences of a step of " + std::to_string(batch));
  }
  const uint64_t state_words = token_state_words(plan.state()).size();
  const uint64_t state_capacity = 2 * state_words + 256;  // edits add landings
  const uint64_t max_spans =
      (PlanFeedOptions::kMaxSlotBytes / 8 - 3 - rows - state_capacity) / kSpanWords;
  const uint64_t span_capacity =
      std::min(max_spans, rows * std::min<uint64_t>(options.spans_per_sequence, 1 << 20));
  const uint64_t slot_words = 3 + rows + span_capacity * kSpanWords + state_capacity;
  const uint64_t slots = 2 * options.ahead + 2;  // a reader may trail the furthest by ahead + 1
  const uint64_t bytes = (kHeaderWords + slots * slot_words) * 8;

  const int fd = ::memfd_create("distsampler-plan-feed", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const std::string error = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("plan feed: a memory file of " + std::to_string(bytes) +
                             " bytes: " + error);
  }
  std::string why;
  std::shared_ptr<Ring> ring = map_ring(fd, &why);
  if (!ring) {
    ::close(fd);
    throw std::runtime_error("plan feed: " + why);
  }
  Header* h = ring->header();
  *h = Header{kMagic, config_key(plan), plan.step(), batch, options.rows_first, rows, slots,
              slot_words, span_capacity,
              state_capacity, options.ahead, static_cast<uint64_t>(::getpid()), plan.step(), 0,
              kPlanning};
  auto feed = std::make_shared<PlanFeed>(::getpid(), fd, ring, options);
  feed->planner_ = new Planner();
  feed->planner_pid_ = ::getpid();
  Planner* planner = feed->planner_;
  feed->planner_->thread =
      std::thread([ring, plan, planner] { plan_into(*ring, plan, planner->stop); });
  return feed;
}

std::shared_ptr<PlanFeed> PlanFeed::attach(pid_t pid, int fd, const TokenPlan& plan,
                                           const PlanFeedOptions& options, std::string* why) {
  int own = -1;
  if (pid == ::getpid()) {
    own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  } else {
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    own = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  }
  if (own < 0) {
    *why = std::string("the feed's memory file: ") + std::strerror(errno);
    return nullptr;
  }
  std::shared_ptr<Ring> ring = map_ring(own, why);
  if (!ring) {
    ::close(own);
    return nullptr;
  }
  const Header* h = ring->header();
  if (h->magic != kMagic || h->key != config_key(plan)) {
    ::close(own);
    *why = "the feed plans another configuration";
    return nullptr;
  }
  if (h->first_step > plan.step()) {
    ::close(own);
    *why = "the feed starts at step " + std::to_string(h->first_step) + ", after step " +
           std::to_string(plan.step());
    return nullptr;
  }
  g_attached.fetch_add(1);
  return std::make_shared<PlanFeed>(::getpid(), own, ring, options);
}

PlanFeed::~PlanFeed() {
  if (planner_ != nullptr && planner_pid_ == ::getpid()) {
    planner_->stop.store(true);
    store(&ring_->header()->status, kStopped);
    if (planner_->thread.joinable()) planner_->thread.join();
    if (planner_->listener >= 0) ::shutdown(planner_->listener, SHUT_RDWR);
    if (planner_->server.joinable()) planner_->server.join();
    if (planner_->listener >= 0) ::close(planner_->listener);
    delete planner_;
  }
  // In a forked child the threads are not there: the Planner is left as it is.
  if (fd_ >= 0) ::close(fd_);
}

uint64_t PlanFeed::first_step() const { return ring_->header()->first_step; }

bool PlanFeed::plans_here() const { return planner_ != nullptr && planner_pid_ == ::getpid(); }

bool PlanFeed::read(uint64_t step, uint64_t first, uint64_t count, bool spans, Step* out) {
  Header* h = ring_->header();
  const uint64_t batch = h->global_batch;
  if (step < h->first_step || first + count > batch) return false;
  if (count > 0 && (first < h->rows_first || first + count > h->rows_first + h->rows)) {
    return false;  // rows this feed does not hold
  }
  raise_to(&h->frontier, step);
  uint64_t* slot = ring_->slot(step);
  const pid_t planner = static_cast<pid_t>(h->planner_pid);
  const auto start = std::chrono::steady_clock::now();
  auto checked = start;
  auto pause = std::chrono::microseconds(10);
  while (true) {
    const uint64_t lock = load(&slot[0]);
    if (lock > 2 * step + 2) return false;  // overwritten: a ring behind the furthest reader
    if (lock == 2 * step + 2) break;
    if (load(&h->status) != kPlanning) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now - start > std::chrono::duration<double>(options_.timeout_seconds)) return false;
    if (planner != ::getpid() && now - checked > std::chrono::milliseconds(50)) {
      checked = now;
      if (process_ended(planner)) return false;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  const uint64_t n_spans = load(&slot[1]);
  const uint64_t n_state = load(&slot[2]);
  if (n_spans == kAbsent || n_state == kAbsent || n_spans > h->span_capacity ||
      n_state > h->state_capacity) {
    return false;
  }
  const uint64_t* ends = slot + 3;
  const uint64_t* span_words = ends + h->rows;
  const uint64_t* state_words = span_words + h->span_capacity * kSpanWords;
  std::vector<uint64_t> state(n_state);
  for (uint64_t i = 0; i < n_state; ++i) state[i] = load(&state_words[i]);
  std::vector<PlannedSequence> sequences;
  if (spans) {
    sequences.resize(count);
    const uint64_t held = first - h->rows_first;  // the first one's place among those held
    uint64_t begin = held == 0 ? 0 : load(&ends[held - 1]);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t end = load(&ends[held + i]);
      if (end < begin || end > n_spans) return false;
      PlannedSequence& s = sequences[i];
      s.index = step * batch + first + i;
      s.spans.resize(end - begin);
      for (uint64_t k = begin; k < end; ++k) {
        const uint64_t* w = span_words + k * kSpanWords;
        Span& x = s.spans[k - begin];
        x.source = static_cast<uint32_t>(load(&w[0]));
        x.document = load(&w[1]);
        x.begin = load(&w[2]);
        x.end = load(&w[3]);
        x.epoch = load(&w[4]);
      }
      begin = end;
    }
  } else {
    sequences.clear();
  }
  if (load(&slot[0]) != 2 * step + 2) return false;  // overwritten while read
  std::optional<TokenPlanState> after = token_state_from_words(state);
  if (!after || after->sequence != (step + 1) * batch) return false;
  out->sequences = std::move(sequences);
  out->after = std::move(*after);
  g_read.fetch_add(1);
  return true;
}

// --- one feed per node --------------------------------------------------------------------------

namespace {

std::atomic<uint64_t> g_node_feeds{0};

sockaddr_un feed_address(const NodeGroup& group, uint64_t instance, socklen_t* length) {
  const std::string name = "distsampler/feed/" +
                           detail::node::hex(detail::node::hash_text(group.job, 1)) + "/" +
                           detail::node::hex(detail::node::hash_text(group.node, 2)) + "/" +
                           std::to_string(::getuid()) + "/" + std::to_string(instance);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// Sends `fd` to each local rank that connects, until the listener is shut down.
void serve(int listener, int fd) {
  while (true) {
    pollfd p{listener, POLLIN, 0};
    const int ready = ::poll(&p, 1, 200);
    if (ready < 0 && errno != EINTR) return;
    if (ready <= 0) continue;
    if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return;
    const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    if (detail::node::send_byte(client, 1, fd)) g_served.fetch_add(1);
    ::close(client);
  }
}

// The descriptor local rank 0 serves at `address`, or -1 with the reason in `why`.
int receive(const sockaddr_un& address, socklen_t length, double timeout_seconds,
            std::string* why) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (true) {
    detail::node::Fd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (sock.fd < 0) {
      *why = detail::node::errno_text("socket");
      return -1;
    }
    if (::connect(sock.fd, reinterpret_cast<const sockaddr*>(&address), length) == 0) {
      unsigned char byte = 0;
      detail::node::Fd fd;
      if (detail::node::receive_byte(sock.fd, &byte, &fd) && fd.fd >= 0) {
        return std::exchange(fd.fd, -1);
      }
      *why = "local rank 0 answered without the feed";
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      *why = "local rank 0 did not serve it within " + std::to_string(timeout_seconds) + " s";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::shared_ptr<PlanFeed> PlanFeed::for_node(const TokenPlan& plan, const NodeGroup& group,
                                             const PlanFeedOptions& options) {
  const uint64_t instance = g_node_feeds.fetch_add(1);
  socklen_t length = 0;
  const sockaddr_un address = feed_address(group, instance, &length);
  std::string why;
  if (group.local_rank == 0) {
    std::shared_ptr<PlanFeed> feed = start(plan, options);
    if (group.local_world_size > 1) {
      detail::node::Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (listener.fd < 0 ||
          ::bind(listener.fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
          ::listen(listener.fd, 64) != 0) {
        std::cerr << "distsampler: plan feed " << instance << ": "
                  << detail::node::errno_text("listening for the node's local ranks")
                  << "; each local rank plans its own\n";
        return feed;
      }
      feed->planner_->listener = std::exchange(listener.fd, -1);
      feed->planner_->server = std::thread(serve, feed->planner_->listener, feed->fd_);
    }
    return feed;
  }
  check_plan(plan);
  const int fd = receive(address, length, std::min(group.timeout_seconds, options.timeout_seconds),
                         &why);
  if (fd >= 0) {
    std::shared_ptr<PlanFeed> feed = attach(::getpid(), fd, plan, options, &why);
    ::close(fd);
    if (feed) return feed;
  }
  std::cerr << "distsampler: local rank " << group.local_rank << ": node plan feed " << instance
            << ": " << why << "; this rank plans its own\n";
  return start(plan, options);
}

// --- a plan read from a feed --------------------------------------------------------------------

}  // namespace distsampler
