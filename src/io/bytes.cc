// The stores by URL scheme, and the node's cached copies (bytes.h).
#include "bytes.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "env.h"

namespace distsampler {
namespace detail {

// The stores, one file each.
std::shared_ptr<const ByteSource> open_local(const std::string& path);  // local.cc
std::shared_ptr<const ByteSource> open_s3(const std::string& url);      // s3.cc
std::shared_ptr<const ByteSource> open_http(const std::string& url);    // http.cc

namespace {

struct Store {
  const char* scheme;
  std::shared_ptr<const ByteSource> (*open)(const std::string& url);
};
// A new store: its file, and its line here.
constexpr Store kStores[] = {
    {"s3://", open_s3},
    {"https://", open_http},
    {"http://", open_http},
};

const Store* store_of(const std::string& url) {
  for (const Store& store : kStores) {
    if (url.rfind(store.scheme, 0) == 0) return &store;
  }
  const size_t colon = url.find("://");
  if (colon != std::string::npos && colon > 0 &&
      url.find('/') == colon + 1) {  // scheme://..., not a path with "://" inside it
    std::string allowed;
    for (const Store& store : kStores) allowed += std::string(", ") + store.scheme;
    throw std::invalid_argument("'" + url + "': no store reads " + url.substr(0, colon + 3) +
                                " URLs; allowed: a local path" + allowed);
  }
  return nullptr;
}

std::string home_file(const char* variable, const char* relative) {
  std::string path = env(variable);
  if (!path.empty()) return path;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : home + "/" + relative;
}

const std::string& cache_directory() {
  static const std::string dir = [] {
    const std::string set = env("DISTSAMPLER_S3_CACHE");
    if (!set.empty()) return set;
    const std::string xdg = env("XDG_CACHE_HOME");
    return !xdg.empty() ? xdg + "/distsampler/s3"
                        : home_file("DISTSAMPLER_S3_CACHE", ".cache/distsampler/s3");
  }();
  return dir;
}

void make_directories(const std::string& path) {
  for (size_t at = 1; at != std::string::npos; at = path.find('/', at + 1)) {
    const std::string part = path.substr(0, at);
    if (part.empty()) continue;
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      throw std::runtime_error("the node's cache: cannot make '" + part + "': " +
                               std::strerror(errno));
    }
  }
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error("the node's cache: cannot make '" + path + "': " +
                             std::strerror(errno));
  }
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

// The node's copy of `source` (local_file()).
std::string cached_copy(const ByteSource& source) {
  const std::string path = cache_directory() + "/" + source.cache_name();
  const std::string version = source.version();
  make_directories(path.substr(0, path.rfind('/')));
  // One process of the node fetches; the others wait on the lock, then find the copy.
  const std::string lock_path = path + ".lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) {
    throw std::runtime_error("the node's cache: cannot open '" + lock_path + "': " +
                             std::strerror(errno));
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing releases the flock
  } unlock{lock};
  while (::flock(lock, LOCK_EX) != 0) {
    if (errno != EINTR) {
      throw std::runtime_error("the node's cache: cannot lock '" + lock_path + "': " +
                               std::strerror(errno));
    }
  }
  const std::string stamp = path + ".etag";
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == source.size() &&
      read_small_file(stamp) == version) {
    return path;
  }
  const std::string temporary = path + ".part." + std::to_string(::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb+");
  if (file == nullptr) {
    throw std::runtime_error("the node's cache: cannot write '" + temporary + "': " +
                             std::strerror(errno));
  }
  try {
    source.copy_to(file);
  } catch (...) {
    std::fclose(file);
    ::unlink(temporary.c_str());
    throw;
  }
  const bool written = std::fflush(file) == 0;
  std::fclose(file);
  const auto give_up = [&](const std::string& what) {
    ::unlink(temporary.c_str());
    throw std::runtime_error(source.name() + ": " + what);
  };
  if (!written) give_up("cannot write the cache's copy '" + temporary + "'");
  ::unlink(stamp.c_str());
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    give_up("cannot rename '" + temporary + "' to '" + path + "': " + std::strerror(errno));
  }
  std::ofstream(stamp) << version;
  return path;
}

}  // namespace

void ByteSource::copy_to(std::FILE* file) const {
  constexpr uint64_t kChunk = uint64_t{8} << 20;
  std::vector<unsigned char> buffer(static_cast<size_t>(std::min(size(), kChunk)));
  for (uint64_t at = 0; at < size(); at += kChunk) {
    const uint64_t n = std::min(kChunk, size() - at);
    read(at, n, buffer.data());
    if (std::fwrite(buffer.data(), 1, n, file) != n) {
      throw std::runtime_error(name() + ": cannot write its copy: " + std::strerror(errno));
    }
  }
}

std::shared_ptr<const ByteSource> open_bytes(const std::string& url) {
  const Store* store = store_of(url);
  return store != nullptr ? store->open(url) : open_local(url);
}

std::string local_file(const std::string& url) {
  if (store_of(url) == nullptr) return url;
  return cached_copy(*open_bytes(url));
}

bool is_remote_url(const std::string& url) { return store_of(url) != nullptr; }

int remote_reads_in_flight() {
  static const int in_flight = static_cast<int>(
      env_number("DISTSAMPLER_S3_REQUESTS", 16, 1, 16, true, "an integer from 1 to 16"));
  return in_flight;
}

double remote_retry_seconds() {
  static const double seconds = env_number("DISTSAMPLER_S3_RETRY_SECONDS", 120, 0, 86400, false,
                                           "seconds in [0, 86400]");
  return seconds;
}

}  // namespace detail
}  // namespace distsampler
