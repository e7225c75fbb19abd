// read_latency.cc: an LD_PRELOAD shim that waits READ_LATENCY_US microseconds before a pread that
// misses the page cache, as a parallel or remote file system's round trip would, where a client
// cache hit (and a read of a mapping) pays nothing. Whether a pread would miss is asked of the
// kernel first: preadv2(RWF_NOWAIT) reads only what is cached, and a short or refused read is
// charged the latency and read again as usual. READ_LATENCY_ALL=1 charges every pread, cached or
// not (tests that must take distsampler's slow-read path over files they have just written, which
// are in the page cache). Used by tests/CMakeLists.txt and bench/tokens_plan.py's latency runs:
//   LD_PRELOAD=build/tests/libread_latency.so READ_LATENCY_US=1000 program ...
#include <dlfcn.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdlib>
#include <ctime>
#include <unistd.h>

namespace {

long delay_ns() {
  static long ns = -1;
  if (ns < 0) {
    const char* value = getenv("READ_LATENCY_US");
    ns = value != nullptr ? atol(value) * 1000 : 0;
  }
  return ns;
}

bool charge_all() {
  static int all = -1;
  if (all < 0) {
    const char* value = getenv("READ_LATENCY_ALL");
    all = value != nullptr && value[0] == '1' ? 1 : 0;
  }
  return all == 1;
}

}  // namespace

extern "C" {

ssize_t pread64(int fd, void* buffer, size_t n, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t) = nullptr;
  if (real == nullptr) {
    real = reinterpret_cast<ssize_t (*)(int, void*, size_t, off_t)>(dlsym(RTLD_NEXT, "pread64"));
  }
  const long ns = delay_ns();
  if (ns > 0 && !charge_all()) {  // all of it in the page cache: no round trip
    iovec io{buffer, n};
    if (preadv2(fd, &io, 1, offset, RWF_NOWAIT) == static_cast<ssize_t>(n)) {
      return static_cast<ssize_t>(n);
    }
  }
  if (ns > 0) {
    struct timespec wait = {ns / 1000000000, ns % 1000000000};
    while (nanosleep(&wait, &wait) != 0) {
    }
  }
  return real(fd, buffer, n, offset);
}

ssize_t pread(int fd, void* buffer, size_t n, off_t offset) {
  return pread64(fd, buffer, n, offset);
}

}  // extern "C"
