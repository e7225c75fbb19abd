// S3-compatible object storage (s3.h): settings as the AWS SDKs read them, requests signed with
// AWS Signature Version 4 by libcurl (curl.h), and s3:// objects as byte sources.
#include "s3.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "curl.h"
#include "env.h"

namespace distsampler {
namespace detail {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string home_file(const char* variable, const char* relative) {
  std::string path = env(variable);
  if (!path.empty()) return path;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : home + "/" + relative;
}

// The keys of section `section` of an INI file (the AWS files' format); empty when absent.
std::map<std::string, std::string> ini_section(const std::string& path,
                                               const std::string& section) {
  std::map<std::string, std::string> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      inside = trim(line.substr(1, line.size() - 2)) == section;
      continue;
    }
    const size_t eq = line.find('=');
    if (inside && eq != std::string::npos) {
      out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
    }
  }
  return out;
}

struct Settings {
  std::string endpoint;  // scheme://host[:port], no trailing slash
  std::string region;
  std::string key_id, secret, token;
  std::string credentials_from;  // where they came from, for errors
  double retry_seconds = 120;
  std::string ca_file;  // AWS_CA_BUNDLE
};

const Settings& settings() {
  static const Settings s = [] {
    Settings s;
    std::string profile = env("AWS_PROFILE");
    if (profile.empty()) profile = "default";
    const std::string config_file = home_file("AWS_CONFIG_FILE", ".aws/config");
    const std::string credentials_file =
        home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    const auto config_section =
        ini_section(config_file, profile == "default" ? "default" : "profile " + profile);
    auto config = config_section;
    const auto credentials = ini_section(credentials_file, profile);
    std::string endpoint_from = "AWS_ENDPOINT_URL_S3";
    s.endpoint = env("AWS_ENDPOINT_URL_S3");
    if (s.endpoint.empty()) {
      endpoint_from = "AWS_ENDPOINT_URL";
      s.endpoint = env("AWS_ENDPOINT_URL");
    }
    if (s.endpoint.empty()) {
      endpoint_from = "endpoint_url in " + config_file;
      s.endpoint = config["endpoint_url"];
    }
    std::string scheme = s.endpoint.substr(0, s.endpoint.find("://") + 1);
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!s.endpoint.empty() && scheme != "http:" && scheme != "https:") {
      throw std::invalid_argument(endpoint_from + " = '" + s.endpoint +
                                  "'; allowed: an http:// or https:// URL");
    }
    s.region = env("AWS_REGION");
    if (s.region.empty()) s.region = env("AWS_DEFAULT_REGION");
    if (s.region.empty()) s.region = config["region"];
    if (s.region.empty()) s.region = "us-east-1";
    if (s.endpoint.empty()) s.endpoint = "https://s3." + s.region + ".amazonaws.com";
    while (!s.endpoint.empty() && s.endpoint.back() == '/') s.endpoint.pop_back();
    if (!env("AWS_ACCESS_KEY_ID").empty() || !env("AWS_SECRET_ACCESS_KEY").empty()) {
      s.key_id = env("AWS_ACCESS_KEY_ID");
      s.secret = env("AWS_SECRET_ACCESS_KEY");
      s.token = env("AWS_SESSION_TOKEN");
      s.credentials_from = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY";
    } else {
      for (const std::map<std::string, std::string>* from : {&credentials, &config_section}) {
        auto id = from->find("aws_access_key_id");
        auto secret = from->find("aws_secret_access_key");
        if (id == from->end() || secret == from->end()) continue;
        s.key_id = id->second;
        s.secret = secret->second;
        auto token = from->find("aws_session_token");
        if (token != from->end()) s.token = token->second;
        s.credentials_from = "profile '" + profile + "' in " +
                             (from == &credentials ? credentials_file : config_file);
        break;
      }
    }
    s.retry_seconds = remote_retry_seconds();
    s.ca_file = env("AWS_CA_BUNDLE");
    return s;
  }();
  return s;
}

// One request for `object`, signed, tried again as curl.h retries. `range` empty: the whole object.
HttpResponse request(bool head, const S3Object& object, const std::string& range,
                     const std::string& if_match, HttpSink* sink) {
  const Settings& s = settings();
  if (s.key_id.empty() || s.secret.empty()) {
    throw std::runtime_error(
        object.url() + ": no credentials; allowed: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
        "or aws_access_key_id and aws_secret_access_key in the profile's section of "
        "~/.aws/credentials (AWS_PROFILE, default 'default')");
  }
  HttpRequest r;
  r.url = s.endpoint + "/" + encode_path(object.bucket) + "/" + encode_path(object.key);
  r.name = object.url();
  r.where = s.endpoint;
  r.head = head;
  r.range = range;
  r.if_match = if_match;
  // The payload's hash, which S3 requires signed (an empty body's SHA-256).
  r.headers.push_back("x-amz-content-sha256: "
                      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  if (!s.token.empty()) r.headers.push_back("x-amz-security-token: " + s.token);
  r.sigv4 = "aws:amz:" + s.region + ":s3";
  r.user = s.key_id;
  r.password = s.secret;
  r.ca_file = s.ca_file;
  r.retry_seconds = s.retry_seconds;
  return http_request(r, sink);
}

[[noreturn]] void fail(const S3Object& object, const HttpResponse& r, const std::string& what) {
  std::string text = object.url() + " at " + settings().endpoint + ": " + what;
  if (r.status == 403) {
    text += " (credentials: " + settings().credentials_from + ")";
  }
  throw std::runtime_error(text);
}

bool ok(long status) { return status >= 200 && status <= 299; }

// An s3:// object as a byte source: its size and ETag from HEAD when opened, each read a ranged
// GET that must still find that ETag.
class S3Source : public ByteSource {
 public:
  explicit S3Source(const std::string& url)
      : url_(url), object_(S3Object::parse(url)), version_(s3_head(object_)) {}
  const std::string& name() const override { return url_; }
  uint64_t size() const override { return version_.size; }
  std::string version() const override { return version_.etag; }
  void read(uint64_t offset, uint64_t n, unsigned char* out) const override {
    s3_read(object_, version_, offset, n, out);
  }
  bool remote() const override { return true; }
  void copy_to(std::FILE* file) const override {
    HttpSink sink;
    sink.file = file;
    const HttpResponse r = request(false, object_, "", version_.etag, &sink);
    if (r.status == 412 || (ok(r.status) && !r.etag.empty() && r.etag != version_.etag)) {
      fail(object_, r, "changed while it was fetched (ETag " + version_.etag + ", now " +
                           r.etag + ")");
    }
    if (!ok(r.status)) fail(object_, r, http_status_text(r.status, r.error_body));
    if (r.got != version_.size) {
      fail(object_, r, "truncated: " + std::to_string(r.got) + " bytes received of " +
                           std::to_string(version_.size));
    }
  }
  // The endpoint's host and port, the bucket and the key.
  std::string cache_name() const override {
    const std::string& endpoint = settings().endpoint;
    const size_t scheme = endpoint.find("://");
    std::string server = endpoint.substr(scheme == std::string::npos ? 0 : scheme + 3);
    std::replace(server.begin(), server.end(), '/', '_');
    std::replace(server.begin(), server.end(), ':', '_');
    return server + "/" + object_.bucket + "/" + object_.key;
  }

 private:
  std::string url_;
  S3Object object_;
  S3Version version_;
};

}  // namespace

bool is_s3_url(const std::string& path) { return path.rfind("s3://", 0) == 0; }

S3Object S3Object::parse(const std::string& url) {
  if (!is_s3_url(url)) {
    throw std::invalid_argument("'" + url + "': not an s3:// URL; allowed: s3://bucket/key");
  }
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  S3Object o;
  if (slash != std::string::npos) {
    o.bucket = rest.substr(0, slash);
    o.key = rest.substr(slash + 1);
  }
  if (o.bucket.empty() || o.key.empty()) {
    throw std::invalid_argument("'" + url +
                                "': no bucket or no key; allowed: s3://bucket/key (a key of "
                                "one or more characters after the bucket's slash)");
  }
  return o;
}

S3Version s3_head(const S3Object& object) {
  const HttpResponse r = request(true, object, "", "", nullptr);
  if (r.status == 404) fail(object, r, "not found (404)");
  if (r.status == 403) {
    fail(object, r, "403 Forbidden: the server refused the request (a wrong key id or secret, "
                    "or no permission to read the object)");
  }
  if (!ok(r.status)) fail(object, r, http_status_text(r.status, r.error_body));
  if (r.content_length < 0 || r.etag.empty()) {
    fail(object, r, "HEAD gave no Content-Length or no ETag; allowed: an S3-compatible server");
  }
  S3Version v;
  v.etag = r.etag;
  v.size = static_cast<uint64_t>(r.content_length);
  return v;
}

void s3_read(const S3Object& object, const S3Version& version, uint64_t offset, uint64_t n,
             unsigned char* out) {
  if (n == 0) return;
  const std::string range = std::to_string(offset) + "-" + std::to_string(offset + n - 1);
  const auto changed = [&](const HttpResponse& r) {
    fail(object, r, "changed since it was opened (ETag " + version.etag + ", now " +
                        (r.etag.empty() ? std::string("another") : r.etag) +
                        "); allowed: the object the source was opened with");
  };
  if (offset + n > version.size) {
    throw std::out_of_range(object.url() + ": bytes [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") asked of an object of " +
                            std::to_string(version.size) + " bytes");
  }
  HttpSink sink;
  sink.buffer = out;
  sink.capacity = n;
  const HttpResponse r = request(false, object, range, version.etag, &sink);
  if (r.status == 412) changed(r);
  if (r.status == 416) {
    fail(object, r, "truncated: bytes " + range + " asked, the object is shorter now (was " +
                        std::to_string(version.size) + " bytes)");
  }
  if (r.status == 404) fail(object, r, "not found (404): removed since it was opened");
  if (!ok(r.status)) fail(object, r, http_status_text(r.status, r.error_body));
  if (!r.etag.empty() && r.etag != version.etag) changed(r);
  if (r.status != 206) {
    fail(object, r, "status " + std::to_string(r.status) +
                        " to a range request; allowed: 206 Partial Content (the server must "
                        "support Range)");
  }
  if (r.overflow || r.got != n) {
    fail(object, r, "truncated: bytes " + range + " asked, " + std::to_string(r.got) +
                        " received" + (r.overflow ? " (more than asked)" : ""));
  }
}

std::shared_ptr<const ByteSource> open_s3(const std::string& url) {
  return std::make_shared<const S3Source>(url);
}

}  // namespace detail
}  // namespace distsampler
