// read_latency.cc: an LD_PRELOAD shim that waits READ_LATENCY_US microseconds before every pread,
// as a parallel or remote file system's round trip would (a page cache hit, a read of a mapping,
// pays nothing, as on such a system). Used by the tests that must take distsampler's slow-read
// path (tests/CMakeLists.txt) and by bench/tokens_plan.py's latency runs:
//   LD_PRELOAD=build/lib/libread_latency.so READ_LATENCY_US=1000 program ...
#include <dlfcn.h>
#include <cstdlib>
#include <sys/types.h>
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

}  // namespace

extern "C" {

ssize_t pread64(int fd, void* buffer, size_t n, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t) = nullptr;
  if (real == nullptr) {
    real = reinterpret_cast<ssize_t (*)(int, void*, size_t, off_t)>(dlsym(RTLD_NEXT, "pread64"));
  }
  const long ns = delay_ns();
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
