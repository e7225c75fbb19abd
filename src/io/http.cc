// Files over plain HTTP(S) (http.h).
#include "http.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "curl.h"
#include "env.h"

namespace distsampler {
namespace detail {
namespace {

bool ok(long status) { return status >= 200 && status <= 299; }

class HttpSource : public ByteSource {
 public:
  explicit HttpSource(const std::string& url) : url_(url) {
    const size_t scheme = url.find("://");
    const size_t path = url.find('/', scheme + 3);
    if (path == std::string::npos || path == scheme + 3 || path + 1 == url.size()) {
      throw std::invalid_argument("'" + url + "': no host or no path; allowed: " +
                                  url.substr(0, scheme) + "://host[:port]/path");
    }
    if (url.find_first_of("?#") != std::string::npos) {
      throw std::invalid_argument("'" + url + "': a query or fragment; allowed: a URL with a "
                                  "path only (.idx and .bin are appended to a source's prefix)");
    }
    host_ = url.substr(scheme + 3, path - scheme - 3);
    scheme_ = url.substr(0, scheme);
    const HttpResponse r = request(true, "", nullptr);
    if (r.status == 404) fail(r, "not found (404)");
    if (!ok(r.status)) fail(r, http_status_text(r.status, r.error_body));
    if (r.content_length < 0) fail(r, "HEAD gave no Content-Length; allowed: a file's size");
    if (r.etag.empty() && r.last_modified.empty()) {
      fail(r, "HEAD gave no ETag and no Last-Modified; allowed: a server that says which "
              "version of a file it serves (a reader must notice a file replaced meanwhile)");
    }
    size_ = static_cast<uint64_t>(r.content_length);
    etag_ = r.etag;
    last_modified_ = r.last_modified;
  }

  const std::string& name() const override { return url_; }
  uint64_t size() const override { return size_; }
  std::string version() const override {
    return !etag_.empty() ? etag_ : "Last-Modified: " + last_modified_;
  }
  bool remote() const override { return true; }

  void read(uint64_t offset, uint64_t n, unsigned char* out) const override {
    if (n == 0) return;
    if (offset + n > size_) {
      throw std::out_of_range(url_ + ": bytes [" + std::to_string(offset) + ", " +
                              std::to_string(offset + n) + ") asked of a file of " +
                              std::to_string(size_) + " bytes");
    }
    const std::string range = std::to_string(offset) + "-" + std::to_string(offset + n - 1);
    HttpSink sink;
    sink.buffer = out;
    sink.capacity = n;
    const HttpResponse r = request(false, range, &sink);
    check(r);
    if (r.status == 416) {
      fail(r, "truncated: bytes " + range + " asked, the file is shorter now (was " +
                  std::to_string(size_) + " bytes)");
    }
    if (r.status == 200) {
      fail(r, "the server answered a range request with the whole file (200); allowed: a server "
              "that supports Range (206 Partial Content)");
    }
    if (!ok(r.status)) fail(r, http_status_text(r.status, r.error_body));
    if (r.status != 206) {
      fail(r, "status " + std::to_string(r.status) + " to a range request; allowed: 206 "
              "Partial Content (the server must support Range)");
    }
    if (r.overflow || r.got != n) {
      fail(r, "truncated: bytes " + range + " asked, " + std::to_string(r.got) + " received" +
                  (r.overflow ? " (more than asked)" : ""));
    }
  }

  void copy_to(std::FILE* file) const override {
    HttpSink sink;
    sink.file = file;
    const HttpResponse r = request(false, "", &sink);
    check(r);
    if (!ok(r.status)) fail(r, http_status_text(r.status, r.error_body));
    if (r.got != size_) {
      fail(r, "truncated: " + std::to_string(r.got) + " bytes received of " +
                  std::to_string(size_));
    }
  }

  // The scheme, the host and port, the path.
  std::string cache_name() const override {
    std::string host = host_;
    std::replace(host.begin(), host.end(), ':', '_');
    return scheme_ + "/" + host + url_.substr(url_.find('/', url_.find("://") + 3));
  }

 private:
  // The preconditions: the version opened, by ETag when it is strong, else by date.
  HttpResponse request(bool head, const std::string& range, HttpSink* sink) const {
    HttpRequest q;
    q.url = url_;
    q.name = url_;
    q.head = head;
    q.range = range;
    if (!head) {
      if (!etag_.empty() && etag_.rfind("W/", 0) != 0) {
        q.if_match = etag_;
      } else if (!last_modified_.empty()) {
        q.headers.push_back("If-Unmodified-Since: " + last_modified_);
      }
    }
    q.ca_file = env("CURL_CA_BUNDLE");
    q.retry_seconds = remote_retry_seconds();
    return http_request(q, sink);
  }

  // A file replaced or removed since it was opened.
  void check(const HttpResponse& r) const {
    const bool other_etag = ok(r.status) && !r.etag.empty() && !etag_.empty() && r.etag != etag_;
    if (r.status == 412 || other_etag) {
      fail(r, "changed since it was opened (" + version() + ", now " +
                  (r.etag.empty() ? std::string("another") : r.etag) +
                  "); allowed: the file the source was opened with");
    }
    if (r.status == 404) fail(r, "not found (404): removed since it was opened");
  }

  [[noreturn]] void fail(const HttpResponse&, const std::string& what) const {
    throw std::runtime_error(url_ + ": " + what);
  }

  std::string url_, scheme_, host_;
  uint64_t size_ = 0;
  std::string etag_, last_modified_;
};

}  // namespace

std::shared_ptr<const ByteSource> open_http(const std::string& url) {
  return std::make_shared<const HttpSource>(url);
}

}  // namespace detail
}  // namespace distsampler
