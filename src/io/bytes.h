// bytes.h: the byte sources under every file format. A source is one file or object: its size,
// which version of it this is, ranged reads, and a view of its bytes where the store maps them.
// Formats (loader/indexed.h's .idx and .bin) open their files with open_bytes() and local_file()
// and know no store; each store is one file here (local.cc, s3.cc, http.cc) and one line in
// bytes.cc's table of schemes. Shaped after Arrow's RandomAccessFile and fsspec: one interface,
// the stores below it.
#ifndef DISTSAMPLER_SRC_IO_BYTES_H_
#define DISTSAMPLER_SRC_IO_BYTES_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace distsampler {
namespace detail {

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // The path or URL it was opened from: what errors name.
  virtual const std::string& name() const = 0;
  virtual uint64_t size() const = 0;
  // Which bytes these are: another version of the file or object has another (an object's ETag;
  // a local file's path, since its mapping is the file's); fixed from opening on.
  virtual std::string version() const = 0;
  // Bytes [offset, offset + n) into out. Throws std::out_of_range naming the source past size(),
  // std::runtime_error naming it when the store fails or the object is no longer this version
  // ("changed since it was opened"). Safe from several threads at once.
  virtual void read(uint64_t offset, uint64_t n, unsigned char* out) const = 0;
  // The bytes themselves where the store maps them (a local file); nullptr: read() them.
  virtual const unsigned char* view() const { return nullptr; }
  // Whether each read is a request to a server (callers gather a step's reads and run
  // remote_reads_in_flight() of them at once).
  virtual bool remote() const { return view() == nullptr && size() > 0; }
  // Writes the whole source to `file` (its own position 0 on), for the node's cached copy
  // (local_file()): one streamed request where the store has one, ranged reads otherwise.
  virtual void copy_to(std::FILE* file) const;
  // The path of its cached copy under the node's cache directory (local_file()), naming the
  // store, the server and the object; only remote sources are copied.
  virtual std::string cache_name() const = 0;
};

// Opens `url`: a local path (mapped: view() is its bytes, read at random), s3://bucket/key
// (s3.h), http:// or https:// (http.h). Throws std::invalid_argument naming a URL of another
// scheme and the schemes allowed; what the store throws otherwise (a missing file or object,
// refused credentials: std::runtime_error naming it).
std::shared_ptr<const ByteSource> open_bytes(const std::string& url);

// A local file holding `url`'s bytes: a local path itself (unopened), else a copy in the node's
// cache directory (DISTSAMPLER_S3_CACHE, else $XDG_CACHE_HOME/distsampler/s3, else
// ~/.cache/distsampler/s3), fetched when missing or when the source's size or version is not the
// copy's; one process of a node fetches it under a lock on the copy, the others wait and take it.
// For a file read at random many times a step (an .idx), where a request each would not do.
std::string local_file(const std::string& url);

// Whether `url` names a remote store's file (a scheme open_bytes() knows other than a path's).
bool is_remote_url(const std::string& url);

// DISTSAMPLER_S3_REQUESTS: how many of a step's reads of remote sources a process has in flight
// at once (1 to 16, default 16). Throws std::invalid_argument naming the variable, its value and
// what is allowed.
int remote_reads_in_flight();

// DISTSAMPLER_S3_RETRY_SECONDS (default 120, 0 to 86400): how long a remote store's request is
// retried (curl.h); the same bad-value error.
double remote_retry_seconds();

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_IO_BYTES_H_
