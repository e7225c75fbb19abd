// S3-compatible object storage over libcurl (s3.h). libcurl is loaded with dlopen on first use and
// its functions taken with dlsym, typed from Debian's curl.h; each thread keeps one easy handle
// (its connection reused across requests), made again in a forked child, which must not share its
// parent's sockets.
#include "s3.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <list>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace distsampler {
namespace detail {
namespace {

std::atomic<uint64_t> g_requests{0};
std::atomic<uint64_t> g_bytes{0};

// libcurl's functions, from libcurl.so.4.
struct Curl {
  decltype(&curl_global_init) global_init = nullptr;
  decltype(&curl_easy_init) easy_init = nullptr;
  decltype(&curl_easy_setopt) setopt = nullptr;
  decltype(&curl_easy_perform) perform = nullptr;
  decltype(&curl_easy_getinfo) getinfo = nullptr;
  decltype(&curl_easy_reset) reset = nullptr;
  decltype(&curl_easy_cleanup) cleanup = nullptr;
  decltype(&curl_easy_strerror) strerror = nullptr;
  decltype(&curl_slist_append) slist_append = nullptr;
  decltype(&curl_slist_free_all) slist_free_all = nullptr;
  decltype(&curl_version_info) version_info = nullptr;
};

template <typename F>
void take(void* library, const char* name, F* out) {
  void* symbol = ::dlsym(library, name);
  if (symbol == nullptr) {
    throw std::runtime_error(std::string("s3:// sources: libcurl.so.4 has no ") + name);
  }
  *out = reinterpret_cast<F>(symbol);
}

const Curl& curl() {
  static Curl loaded;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    void* library = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = ::dlerror();
      failure = std::string("s3:// sources need libcurl (libcurl.so.4, Debian's libcurl4): ") +
                (why != nullptr ? why : "cannot load it");
      return;
    }
    try {
      take(library, "curl_global_init", &loaded.global_init);
      take(library, "curl_easy_init", &loaded.easy_init);
      take(library, "curl_easy_setopt", &loaded.setopt);
      take(library, "curl_easy_perform", &loaded.perform);
      take(library, "curl_easy_getinfo", &loaded.getinfo);
      take(library, "curl_easy_reset", &loaded.reset);
      take(library, "curl_easy_cleanup", &loaded.cleanup);
      take(library, "curl_easy_strerror", &loaded.strerror);
      take(library, "curl_slist_append", &loaded.slist_append);
      take(library, "curl_slist_free_all", &loaded.slist_free_all);
      take(library, "curl_version_info", &loaded.version_info);
    } catch (const std::exception& e) {
      failure = e.what();
      return;
    }
    // SigV4 signing: libcurl 7.75 and later (Debian 12 has 7.88).
    const curl_version_info_data* info = loaded.version_info(CURLVERSION_NOW);
    if (info == nullptr || info->version_num < 0x074b00) {
      failure = std::string("s3:// sources need libcurl 7.75 or later (AWS SigV4 signing); "
                            "this is ") + (info != nullptr ? info->version : "unknown");
      return;
    }
    if (loaded.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) failure = "curl_global_init failed";
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  return loaded;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

double env_number(const char* name, double fallback, double low, double high, bool integer,
                  const char* allowed) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= low && v <= high) ||
      (integer && v != std::floor(v))) {
    throw std::invalid_argument(std::string(name) + " = '" + text + "'; allowed: " + allowed);
  }
  return v;
}

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
  std::string cache;
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
    s.retry_seconds = env_number("DISTSAMPLER_S3_RETRY_SECONDS", s.retry_seconds, 0, 86400,
                                 false, "seconds in [0, 86400]");
    s.cache = env("DISTSAMPLER_S3_CACHE");
    if (s.cache.empty()) {
      const std::string xdg = env("XDG_CACHE_HOME");
      s.cache = !xdg.empty() ? xdg + "/distsampler/s3"
                             : home_file("DISTSAMPLER_S3_CACHE", ".cache/distsampler/s3");
    }
    return s;
  }();
  return s;
}

// A thread's easy handle, made again after a fork; closed (and its connection with it) when the
// thread ends, else every short-lived thread that made a request would leave a socket behind.
CURL* handle() {
  struct Held {
    CURL* easy = nullptr;
    pid_t pid = 0;
    ~Held() {
      if (easy != nullptr && pid == ::getpid()) curl().cleanup(easy);
    }
  };
  thread_local Held held;
  const pid_t pid = ::getpid();
  if (held.easy == nullptr || held.pid != pid) {
    held.easy = curl().easy_init();  // a parent's handle is left alone: its socket is the parent's
    held.pid = pid;
    if (held.easy == nullptr) throw std::runtime_error("s3:// sources: curl_easy_init failed");
  }
  curl().reset(held.easy);
  return held.easy;
}

std::string encode_key(const std::string& key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string between(const std::string& text, const std::string& open, const std::string& close) {
  const size_t b = text.find(open);
  if (b == std::string::npos) return "";
  const size_t e = text.find(close, b + open.size());
  return e == std::string::npos ? "" : text.substr(b + open.size(), e - b - open.size());
}

struct Response {
  long status = 0;
  std::string etag;
  std::string error_body;  // a failed request's body (the server's XML error), bounded
  long long content_length = -1;
  uint64_t got = 0;        // body bytes written to the sink
  bool overflow = false;   // more body than the sink holds
};

// Where a GET's body goes: a buffer of `capacity` bytes, or a FILE.
struct Sink {
  Response* response = nullptr;
  unsigned char* buffer = nullptr;
  uint64_t capacity = 0;
  std::FILE* file = nullptr;
  bool failed_status = false;  // set once the status is known to be an error
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  Response* r = sink->response;
  const std::string line(data, size * count);
  const size_t colon = line.find(':');
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response (after a 100 Continue or a redirect): its status decides where the body goes.
    r->etag.clear();
    r->content_length = -1;
    const size_t space = line.find(' ');
    const long status =
        space == std::string::npos ? 0 : std::strtol(line.c_str() + space, nullptr, 10);
    sink->failed_status = status < 200 || status > 299;
  } else if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const std::string value = trim(line.substr(colon + 1));
    if (name == "etag") r->etag = value;
    if (name == "content-length") r->content_length = std::strtoll(value.c_str(), nullptr, 10);
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  Response* r = sink->response;
  const size_t n = size * count;
  if (sink->failed_status || (sink->buffer == nullptr && sink->file == nullptr)) {
    if (r->error_body.size() < 65536) r->error_body.append(data, std::min<size_t>(n, 65536));
    return n;
  }
  if (sink->file != nullptr) {
    if (std::fwrite(data, 1, n, sink->file) != n) return 0;  // the transfer fails: a write error
  } else {
    if (r->got + n > sink->capacity) {
      r->overflow = true;
      return 0;
    }
    std::memcpy(sink->buffer + r->got, data, n);
  }
  r->got += n;
  g_bytes.fetch_add(n, std::memory_order_relaxed);
  return n;
}

bool retryable(long status) { return status == 429 || (status >= 500 && status <= 599); }

bool retryable(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_COULDNT_RESOLVE_HOST:
      return true;
    default:
      return false;
  }
}

std::string status_text(long status, const std::string& body) {
  std::string text = std::to_string(status);
  switch (status) {
    case 403: text += " Forbidden"; break;
    case 404: text += " Not Found"; break;
    case 412: text += " Precondition Failed"; break;
    case 416: text += " Range Not Satisfiable"; break;
    case 500: text += " Internal Server Error"; break;
    case 503: text += " Service Unavailable"; break;
    default: break;
  }
  const std::string code = between(body, "<Code>", "</Code>");
  const std::string message = between(body, "<Message>", "</Message>");
  if (!code.empty() || !message.empty()) {
    text += " (" + code + (code.empty() || message.empty() ? "" : ": ") + message + ")";
  }
  return text;
}

// Throws when a failed transfer failed for want of a descriptor (the process's RLIMIT_NOFILE, or
// the system's table): a connection refused for that is no server's fault, and retrying it
// until the retry window ends would only slow every read down.
void out_of_descriptors(const Curl& c, CURL* easy, const S3Object& object,
                        const std::string& endpoint) {
  long os_errno = 0;
  c.getinfo(easy, CURLINFO_OS_ERRNO, &os_errno);
  int error = static_cast<int>(os_errno);
  if (error != EMFILE && error != ENFILE) {  // libcurl may not say: try for one ourselves
    const int probe = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    error = probe < 0 ? errno : 0;
    if (probe >= 0) ::close(probe);
  }
  if (error != EMFILE && error != ENFILE) return;
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  throw std::runtime_error(
      object.url() + " at " + endpoint + ": no descriptor for a connection (" +
      std::strerror(error) + "): this process's RLIMIT_NOFILE is " +
      (limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                       : std::to_string(limit.rlim_cur)) +
      (error == ENFILE ? " and the system's file table is full"
                       : "; raise it (ulimit -n) or hold fewer files open"));
}

enum class Method { kHead, kGet };

// One request, tried again while it fails in a way worth retrying. Returns the last response;
// throws naming the object when the transport fails for good. `range` empty: the whole object.
Response request(Method method, const S3Object& object, const std::string& range,
                 const std::string& if_match, Sink* sink) {
  const Curl& c = curl();
  const Settings& s = settings();
  if (s.key_id.empty() || s.secret.empty()) {
    throw std::runtime_error(
        object.url() + ": no credentials; allowed: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
        "or aws_access_key_id and aws_secret_access_key in the profile's section of "
        "~/.aws/credentials (AWS_PROFILE, default 'default')");
  }
  const std::string url = s.endpoint + "/" + encode_key(object.bucket) + "/" +
                          encode_key(object.key);
  const std::string sigv4 = "aws:amz:" + s.region + ":s3";
  const auto start = std::chrono::steady_clock::now();
  double pause = 0.1;
  for (int tries = 1;; ++tries) {
    CURL* easy = handle();
    Response response;
    Sink local;
    Sink* into = sink != nullptr ? sink : &local;
    into->response = &response;
    into->failed_status = false;
    if (into->file != nullptr) {
      std::rewind(into->file);
      if (::ftruncate(::fileno(into->file), 0) != 0) {
        throw std::runtime_error(object.url() + ": cannot truncate the cache's temporary file: " +
                                 std::strerror(errno));
      }
    }
    curl_slist* headers = nullptr;
    // The payload's hash, which S3 requires signed (an empty body's SHA-256).
    headers = c.slist_append(headers, "x-amz-content-sha256: "
                             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    if (!s.token.empty()) {
      headers = c.slist_append(headers, ("x-amz-security-token: " + s.token).c_str());
    }
    if (!range.empty()) headers = c.slist_append(headers, ("Range: bytes=" + range).c_str());
    if (!if_match.empty()) headers = c.slist_append(headers, ("If-Match: " + if_match).c_str());
    c.setopt(easy, CURLOPT_URL, url.c_str());
    c.setopt(easy, CURLOPT_AWS_SIGV4, sigv4.c_str());
    c.setopt(easy, CURLOPT_USERNAME, s.key_id.c_str());
    c.setopt(easy, CURLOPT_PASSWORD, s.secret.c_str());
    c.setopt(easy, CURLOPT_HTTPHEADER, headers);
    c.setopt(easy, CURLOPT_NOSIGNAL, 1L);
    c.setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    c.setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);  // a stalled transfer: 60 s without a byte
    c.setopt(easy, CURLOPT_LOW_SPEED_TIME, 60L);
    c.setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    c.setopt(easy, CURLOPT_HEADERDATA, into);
    c.setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    c.setopt(easy, CURLOPT_WRITEDATA, into);
    if (method == Method::kHead) c.setopt(easy, CURLOPT_NOBODY, 1L);
    g_requests.fetch_add(1, std::memory_order_relaxed);
    struct Guard {
      const Curl& c;
      curl_slist* h;
      ~Guard() { c.slist_free_all(h); }
    } guard{c, headers};
    const CURLcode code = c.perform(easy);
    c.getinfo(easy, CURLINFO_RESPONSE_CODE, &response.status);
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool transport_failed =
        code != CURLE_OK && !(code == CURLE_WRITE_ERROR && response.overflow);
    if (transport_failed) out_of_descriptors(c, easy, object, s.endpoint);
    const bool again = transport_failed ? retryable(code) : retryable(response.status);
    if (again && elapsed + pause <= s.retry_seconds) {
      std::this_thread::sleep_for(std::chrono::duration<double>(pause));
      pause = std::min(2 * pause, 2.0);
      continue;
    }
    if (transport_failed) {
      throw std::runtime_error(object.url() + " at " + s.endpoint + ": " + c.strerror(code) +
                               (again ? " (" + std::to_string(tries) + " tries over " +
                                            std::to_string(static_cast<int>(elapsed)) + " s)"
                                      : std::string()));
    }
    if (again) {
      throw std::runtime_error(object.url() + " at " + s.endpoint + ": " +
                               status_text(response.status, response.error_body) + " (" +
                               std::to_string(tries) + " tries over " +
                               std::to_string(static_cast<int>(elapsed)) + " s)");
    }
    return response;
  }
}

[[noreturn]] void fail(const S3Object& object, const Response& r, const std::string& what) {
  std::string text = object.url() + " at " + settings().endpoint + ": " + what;
  if (r.status == 403) {
    text += " (credentials: " + settings().credentials_from + ")";
  }
  throw std::runtime_error(text);
}

bool ok(long status) { return status >= 200 && status <= 299; }

void make_directories(const std::string& path) {
  for (size_t at = 1; at != std::string::npos; at = path.find('/', at + 1)) {
    const std::string part = path.substr(0, at);
    if (part.empty()) continue;
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      throw std::runtime_error("s3:// cache: cannot make '" + part + "': " + std::strerror(errno));
    }
  }
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    throw std::runtime_error("s3:// cache: cannot make '" + path + "': " + std::strerror(errno));
  }
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

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
  const Response r = request(Method::kHead, object, "", "", nullptr);
  if (r.status == 404) fail(object, r, "not found (404)");
  if (r.status == 403) {
    fail(object, r, "403 Forbidden: the server refused the request (a wrong key id or secret, "
                    "or no permission to read the object)");
  }
  if (!ok(r.status)) fail(object, r, status_text(r.status, r.error_body));
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
  const auto changed = [&](const Response& r) {
    fail(object, r, "changed since it was opened (ETag " + version.etag + ", now " +
                        (r.etag.empty() ? std::string("another") : r.etag) +
                        "); allowed: the object the source was opened with");
  };
  if (offset + n > version.size) {
    throw std::out_of_range(object.url() + ": bytes [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") asked of an object of " +
                            std::to_string(version.size) + " bytes");
  }
  Sink sink;
  sink.buffer = out;
  sink.capacity = n;
  const Response r = request(Method::kGet, object, range, version.etag, &sink);
  if (r.status == 412) changed(r);
  if (r.status == 416) {
    fail(object, r, "truncated: bytes " + range + " asked, the object is shorter now (was " +
                        std::to_string(version.size) + " bytes)");
  }
  if (r.status == 404) fail(object, r, "not found (404): removed since it was opened");
  if (!ok(r.status)) fail(object, r, status_text(r.status, r.error_body));
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

std::string s3_cached_copy(const S3Object& object, S3Version* version) {
  const Settings& s = settings();
  std::string server = s.endpoint.substr(s.endpoint.find("://") == std::string::npos
                                             ? 0
                                             : s.endpoint.find("://") + 3);
  std::replace(server.begin(), server.end(), '/', '_');
  std::replace(server.begin(), server.end(), ':', '_');
  const std::string path = s.cache + "/" + server + "/" + object.bucket + "/" + object.key;
  const S3Version now = s3_head(object);  // a missing object, or refused credentials: no cache
  if (version != nullptr) *version = now;
  make_directories(path.substr(0, path.rfind('/')));
  // One process of the node fetches; the others wait on the lock, then find the copy.
  const std::string lock_path = path + ".lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) {
    throw std::runtime_error("s3:// cache: cannot open '" + lock_path + "': " +
                             std::strerror(errno));
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing releases the flock
  } unlock{lock};
  while (::flock(lock, LOCK_EX) != 0) {
    if (errno != EINTR) {
      throw std::runtime_error("s3:// cache: cannot lock '" + lock_path + "': " +
                               std::strerror(errno));
    }
  }
  const std::string stamp = path + ".etag";
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == now.size &&
      read_small_file(stamp) == now.etag) {
    return path;
  }
  const std::string temporary = path + ".part." + std::to_string(::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb+");
  if (file == nullptr) {
    throw std::runtime_error("s3:// cache: cannot write '" + temporary + "': " +
                             std::strerror(errno));
  }
  Sink sink;
  sink.file = file;
  Response r;
  try {
    r = request(Method::kGet, object, "", now.etag, &sink);
  } catch (...) {
    std::fclose(file);
    ::unlink(temporary.c_str());
    throw;
  }
  const bool written = std::fflush(file) == 0;
  std::fclose(file);
  const auto give_up = [&](const std::string& what) {
    ::unlink(temporary.c_str());
    fail(object, r, what);
  };
  if (r.status == 412 || (ok(r.status) && !r.etag.empty() && r.etag != now.etag)) {
    give_up("changed while it was fetched (ETag " + now.etag + ", now " + r.etag + ")");
  }
  if (!ok(r.status)) give_up(status_text(r.status, r.error_body));
  if (!written) give_up("cannot write the cache's copy '" + temporary + "'");
  if (r.got != now.size) {
    give_up("truncated: " + std::to_string(r.got) + " bytes received of " +
            std::to_string(now.size));
  }
  ::unlink(stamp.c_str());
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    give_up("cannot rename '" + temporary + "' to '" + path + "': " + std::strerror(errno));
  }
  std::ofstream(stamp) << now.etag;
  return path;
}

int s3_requests_in_flight() {
  static const int in_flight = static_cast<int>(
      env_number("DISTSAMPLER_S3_REQUESTS", 16, 1, 16, true, "an integer from 1 to 16"));
  return in_flight;
}

namespace {

// s3_block's cache: blocks by (object, ETag, block number), the most recently used first.
struct BlockCache {
  using Key = std::pair<std::string, uint64_t>;
  using Data = std::shared_ptr<const S3Block>;
  struct Entry {
    std::shared_future<Data> data;
    uint64_t bytes = 0;  // counted once fetched
    std::list<Key>::iterator used;
  };
  std::mutex lock;
  std::map<Key, Entry> blocks;
  std::list<Key> recency;  // front: the most recently used
  uint64_t bytes = 0, hits = 0, fetches = 0;
  uint64_t budget = 0;
  std::set<S3BlockUses*> readers;  // S3BlockUses registered (their order is never read)
  bool next_use = true;            // DISTSAMPLER_S3_EVICT
};

BlockCache& block_cache() {
  static BlockCache* cache = [] {
    const double mb = env_number("DISTSAMPLER_S3_CACHE_MB", 256, 0, 1e7, false,
                                 "megabytes in [0, 10^7]");
    const std::string evict = env("DISTSAMPLER_S3_EVICT");
    if (!evict.empty() && evict != "next-use" && evict != "lru") {
      throw std::invalid_argument("DISTSAMPLER_S3_EVICT = '" + evict +
                                  "'; allowed: next-use (the default) or lru");
    }
    auto* c = new BlockCache;  // never destroyed: reads may run while the process exits
    c->budget = static_cast<uint64_t>(mb * 1e6);
    c->next_use = evict != "lru";
    // Held across fork(), so that a child never inherits it locked; the child starts empty (a
    // fetch in flight in the parent has no thread in the child to finish it).
    ::pthread_atfork([] { block_cache().lock.lock(); }, [] { block_cache().lock.unlock(); },
                     [] {
                       BlockCache& cache = block_cache();
                       cache.blocks.clear();
                       cache.recency.clear();
                       cache.readers.clear();  // the parent's; a child's own register anew
                       cache.bytes = cache.hits = cache.fetches = 0;
                       cache.lock.unlock();
                     });
    return c;
  }();
  return *cache;
}

// The fetched block to drop: the one whose next use is furthest (blocks no reader names first),
// the least recently used among equals; recency.end() when none is fetched.
std::list<BlockCache::Key>::iterator victim(BlockCache& cache) {
  auto best = cache.recency.end();
  uint64_t furthest = 0;
  for (auto at = cache.recency.end(); at != cache.recency.begin();) {
    --at;  // from the least recently used
    if (cache.blocks.find(*at)->second.bytes == 0) continue;  // still being fetched
    if (!cache.next_use || cache.readers.empty()) return at;
    uint64_t d = UINT64_MAX;
    for (S3BlockUses* reader : cache.readers) d = std::min(d, reader->distance(*at));
    if (d == UINT64_MAX) return at;
    if (best == cache.recency.end() || d > furthest) {
      best = at;
      furthest = d;
    }
  }
  return best;
}

}  // namespace

std::string s3_block_object(const S3Object& object, const S3Version& version) {
  return object.url() + "\n" + version.etag;
}

S3BlockUses::S3BlockUses() {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  cache.readers.insert(this);
}

S3BlockUses::~S3BlockUses() {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  cache.readers.erase(this);
}

void S3BlockUses::add(uint64_t step, const std::vector<Key>& blocks) {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  for (const Key& key : blocks) {
    std::deque<uint64_t>& steps = steps_[key];
    if (steps.empty() || steps.back() < step) steps.push_back(step);
  }
}

void S3BlockUses::at(uint64_t step) {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  now_ = step;
}

uint64_t S3BlockUses::distance(const Key& block) {
  auto it = steps_.find(block);
  if (it == steps_.end()) return UINT64_MAX;
  std::deque<uint64_t>& steps = it->second;
  while (!steps.empty() && steps.front() < now_) steps.pop_front();
  if (steps.empty()) {
    steps_.erase(it);
    return UINT64_MAX;
  }
  return steps.front() - now_;
}

std::shared_ptr<const S3Block> s3_block(
    const S3Object& object, const S3Version& version, uint64_t block,
    const std::function<std::pair<uint64_t, uint64_t>()>& range) {
  BlockCache& cache = block_cache();
  const BlockCache::Key key{s3_block_object(object, version), block};
  std::unique_ptr<std::promise<BlockCache::Data>> mine;
  std::shared_future<BlockCache::Data> data;
  {
    std::lock_guard<std::mutex> hold(cache.lock);
    auto it = cache.blocks.find(key);
    if (it != cache.blocks.end()) {
      cache.recency.splice(cache.recency.begin(), cache.recency, it->second.used);
      ++cache.hits;
      data = it->second.data;
    } else {
      ++cache.fetches;
      mine = std::make_unique<std::promise<BlockCache::Data>>();
      data = mine->get_future().share();
      cache.recency.push_front(key);
      cache.blocks.emplace(key, BlockCache::Entry{data, 0, cache.recency.begin()});
    }
  }
  if (!mine) return data.get();  // found, or being fetched by another thread: its result
  try {
    auto fetched = std::make_shared<S3Block>();
    const auto [offset, n] = range();
    fetched->offset = offset;
    fetched->bytes.resize(n);
    s3_read(object, version, offset, n, fetched->bytes.data());
    mine->set_value(fetched);
  } catch (...) {
    mine->set_exception(std::current_exception());
    std::lock_guard<std::mutex> hold(cache.lock);
    auto it = cache.blocks.find(key);  // not kept: the next read tries again
    if (it != cache.blocks.end() && it->second.bytes == 0) {
      cache.recency.erase(it->second.used);
      cache.blocks.erase(it);
    }
    throw;
  }
  std::lock_guard<std::mutex> hold(cache.lock);
  auto it = cache.blocks.find(key);
  if (it != cache.blocks.end() && it->second.bytes == 0) {
    it->second.bytes = std::max<uint64_t>(data.get()->bytes.size(), 1);
    cache.bytes += it->second.bytes;
  }
  // Over the budget: fetched blocks go, the one used furthest ahead first (a reader holding one
  // keeps its bytes until it is done); blocks still being fetched stay.
  while (cache.bytes > cache.budget) {
    const auto at = victim(cache);
    if (at == cache.recency.end()) break;
    auto entry = cache.blocks.find(*at);
    cache.bytes -= entry->second.bytes;
    cache.blocks.erase(entry);
    cache.recency.erase(at);
  }
  return data.get();
}

S3CacheCounts s3_cache_counts() {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  S3CacheCounts c;
  c.hits = cache.hits;
  c.fetches = cache.fetches;
  c.bytes = cache.bytes;
  return c;
}

uint64_t s3_requests() { return g_requests.load(std::memory_order_relaxed); }
uint64_t s3_bytes_read() { return g_bytes.load(std::memory_order_relaxed); }

}  // namespace detail
}  // namespace distsampler
