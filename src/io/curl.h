// curl.h: HTTP(S) requests for the remote byte sources (s3.h, http.h), over Debian's libcurl.
// libcurl is loaded when the first request is made (dlopen of libcurl.so.4), so that the core
// library and the wheel link nothing more, and a machine without libcurl reads local sources as
// before (docs/design.md says why). Each thread keeps one easy handle (its connection reused
// across requests), made again in a forked child (which must not share its parent's sockets) and
// closed when the thread ends.
#ifndef DISTSAMPLER_SRC_IO_CURL_H_
#define DISTSAMPLER_SRC_IO_CURL_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace distsampler {
namespace detail {

struct HttpResponse {
  long status = 0;
  std::string etag;           // as the server quotes it
  std::string last_modified;  // the Last-Modified header, verbatim
  std::string error_body;     // a failed request's body (an S3 server's XML error), bounded
  long long content_length = -1;
  uint64_t got = 0;       // body bytes written to the sink
  bool overflow = false;  // more body than the sink holds
};

// Where a GET's body goes: a buffer of `capacity` bytes, or a FILE (rewound and truncated before
// each try); neither: the body is dropped.
struct HttpSink {
  unsigned char* buffer = nullptr;
  uint64_t capacity = 0;
  std::FILE* file = nullptr;
};

struct HttpRequest {
  std::string url;    // the whole URL, its path already percent-encoded
  std::string name;   // what errors name first (s3://bucket/key, or the URL)
  std::string where;  // and where it was asked ("NAME at WHERE: ..."; empty: not said)
  bool head = false;
  std::string range;  // "FIRST-LAST" (bytes, inclusive); empty: the whole object
  std::string if_match;
  std::vector<std::string> headers;  // more, "Name: value"
  // AWS Signature Version 4 ("aws:amz:REGION:s3"), with user and password the key id and secret;
  // empty: unsigned.
  std::string sigv4, user, password;
  std::string ca_file;  // a CA bundle to verify https:// servers with; empty: the system's
  // A request that fails with a 5xx or 429 status, a timeout, or a connection refused or broken,
  // is tried again after 0.1 s, doubling up to 2 s, until this many seconds have passed since
  // its first try.
  double retry_seconds = 120;
};

// One request, tried again while it fails in a way worth retrying (HttpRequest::retry_seconds).
// Returns the last response (any status); throws std::runtime_error naming the request when the
// transport fails for good, when no descriptor is left for a connection (naming RLIMIT_NOFILE,
// at once: retrying would not help), and when libcurl cannot be loaded.
HttpResponse http_request(const HttpRequest& request, HttpSink* sink = nullptr);

// "404 Not Found", and an S3 server's error code and message from the body when it has them.
std::string http_status_text(long status, const std::string& body);

// Percent-encodes `path` as a URL's path (RFC 3986's unreserved characters and '/' kept).
std::string encode_path(const std::string& path);

// Requests this process has made (each try counts), and the bytes the GETs' bodies returned
// (tests, benchmarks).
uint64_t http_requests();
uint64_t http_bytes_read();

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_IO_CURL_H_
