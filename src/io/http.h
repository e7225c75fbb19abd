// http.h: files served over plain HTTP(S) as byte sources, for token sources whose prefix is
// https://host/path-prefix or http://...: a web server's or a CDN's files (nginx, Apache,
// a bucket's public website), no credentials. HEAD gives the size and the version (the ETag; the
// Last-Modified date when there is none) when opened; each read is a GET with Range that must
// still find that version (If-Match, or If-Unmodified-Since for a weak or absent ETag) and must
// be answered 206 Partial Content: a server that ignores Range (sending the whole file) is one
// error saying so. Requests over libcurl (curl.h: loaded on first use, retried for
// DISTSAMPLER_S3_RETRY_SECONDS). CURL_CA_BUNDLE, as curl reads it: a CA bundle for https://
// servers whose certificate the system's CAs do not sign.
// Every failure is one std::runtime_error naming the URL and the status or the transport's error.
// The URL is taken as given (percent-encoded as a browser sends it); one with a query string
// (a signed URL) is refused, since ".idx" and ".bin" are appended to a prefix.
#ifndef DISTSAMPLER_SRC_IO_HTTP_H_
#define DISTSAMPLER_SRC_IO_HTTP_H_

#include <memory>
#include <string>

#include "bytes.h"

namespace distsampler {
namespace detail {

std::shared_ptr<const ByteSource> open_http(const std::string& url);

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_IO_HTTP_H_
