// HTTP(S) requests over libcurl (curl.h). libcurl is loaded with dlopen on first use and its
// functions taken with dlsym, typed from Debian's curl.h.
#include "curl.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

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
    throw std::runtime_error(std::string("remote sources: libcurl.so.4 has no ") + name);
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
      failure = std::string("s3:// and http(s):// sources need libcurl (libcurl.so.4, Debian's libcurl4): ") +
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
      failure = std::string("remote sources need libcurl 7.75 or later (AWS SigV4 signing); "
                            "this is ") + (info != nullptr ? info->version : "unknown");
      return;
    }
    if (loaded.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) failure = "curl_global_init failed";
  });
  if (!failure.empty()) throw std::runtime_error(failure);
  return loaded;
}

}  // namespace

std::string encode_path(const std::string& key) {
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

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
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
    if (held.easy == nullptr) throw std::runtime_error("remote sources: curl_easy_init failed");
  }
  curl().reset(held.easy);
  return held.easy;
}

std::string between(const std::string& text, const std::string& open, const std::string& close) {
  const size_t b = text.find(open);
  if (b == std::string::npos) return "";
  const size_t e = text.find(close, b + open.size());
  return e == std::string::npos ? "" : text.substr(b + open.size(), e - b - open.size());
}

// A request's sink and response, as the callbacks see them.
struct Sink {
  HttpResponse* response = nullptr;
  HttpSink* into = nullptr;
  bool failed_status = false;  // set once the status is known to be an error
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  HttpResponse* r = sink->response;
  const std::string line(data, size * count);
  const size_t colon = line.find(':');
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response (after a 100 Continue or a redirect): its status decides where the body goes.
    r->etag.clear();
    r->last_modified.clear();
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
    if (name == "last-modified") r->last_modified = value;
    if (name == "content-length") r->content_length = std::strtoll(value.c_str(), nullptr, 10);
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  HttpResponse* r = sink->response;
  const size_t n = size * count;
  HttpSink* into = sink->into;
  if (sink->failed_status || into == nullptr || (into->buffer == nullptr && into->file == nullptr)) {
    if (r->error_body.size() < 65536) r->error_body.append(data, std::min<size_t>(n, 65536));
    return n;
  }
  if (into->file != nullptr) {
    if (std::fwrite(data, 1, n, into->file) != n) return 0;  // the transfer fails: a write error
  } else {
    if (r->got + n > into->capacity) {
      r->overflow = true;
      return 0;
    }
    std::memcpy(into->buffer + r->got, data, n);
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

}  // namespace

std::string http_status_text(long status, const std::string& body) {
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

namespace {

// Throws when a failed transfer failed for want of a descriptor (the process's RLIMIT_NOFILE, or
// the system's table): a connection refused for that is no server's fault, and retrying it
// until the retry window ends would only slow every read down.
void out_of_descriptors(const Curl& c, CURL* easy, const std::string& what) {
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
      what + ": no descriptor for a connection (" +
      std::strerror(error) + "): this process's RLIMIT_NOFILE is " +
      (limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                       : std::to_string(limit.rlim_cur)) +
      (error == ENFILE ? " and the system's file table is full"
                       : "; raise it (ulimit -n) or hold fewer files open"));
}

}  // namespace

HttpResponse http_request(const HttpRequest& request, HttpSink* sink) {
  const Curl& c = curl();
  const std::string what =
      request.name + (request.where.empty() ? std::string() : " at " + request.where);
  const auto start = std::chrono::steady_clock::now();
  double pause = 0.1;
  for (int tries = 1;; ++tries) {
    CURL* easy = handle();
    HttpResponse response;
    Sink callback;
    callback.response = &response;
    callback.into = sink;
    if (sink != nullptr && sink->file != nullptr) {
      std::rewind(sink->file);
      if (::ftruncate(::fileno(sink->file), 0) != 0) {
        throw std::runtime_error(request.name + ": cannot truncate the cache's temporary file: " +
                                 std::strerror(errno));
      }
    }
    curl_slist* headers = nullptr;
    for (const std::string& header : request.headers) {
      headers = c.slist_append(headers, header.c_str());
    }
    if (!request.range.empty()) {
      headers = c.slist_append(headers, ("Range: bytes=" + request.range).c_str());
    }
    if (!request.if_match.empty()) {
      headers = c.slist_append(headers, ("If-Match: " + request.if_match).c_str());
    }
    c.setopt(easy, CURLOPT_URL, request.url.c_str());
    if (!request.sigv4.empty()) {
      c.setopt(easy, CURLOPT_AWS_SIGV4, request.sigv4.c_str());
      c.setopt(easy, CURLOPT_USERNAME, request.user.c_str());
      c.setopt(easy, CURLOPT_PASSWORD, request.password.c_str());
    }
    if (!request.ca_file.empty()) c.setopt(easy, CURLOPT_CAINFO, request.ca_file.c_str());
    c.setopt(easy, CURLOPT_HTTPHEADER, headers);
    c.setopt(easy, CURLOPT_NOSIGNAL, 1L);
    c.setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    c.setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);  // a stalled transfer: 60 s without a byte
    c.setopt(easy, CURLOPT_LOW_SPEED_TIME, 60L);
    c.setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    c.setopt(easy, CURLOPT_HEADERDATA, &callback);
    c.setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    c.setopt(easy, CURLOPT_WRITEDATA, &callback);
    if (request.head) c.setopt(easy, CURLOPT_NOBODY, 1L);
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
    if (transport_failed) out_of_descriptors(c, easy, what);
    const bool again = transport_failed ? retryable(code) : retryable(response.status);
    if (again && elapsed + pause <= request.retry_seconds) {
      std::this_thread::sleep_for(std::chrono::duration<double>(pause));
      pause = std::min(2 * pause, 2.0);
      continue;
    }
    const std::string tried = " (" + std::to_string(tries) + " tries over " +
                              std::to_string(static_cast<int>(elapsed)) + " s)";
    if (transport_failed) {
      const std::string hint =
          code == CURLE_PEER_FAILED_VERIFICATION
              ? "; allowed: a server whose certificate a CA this machine trusts signs (or "
                "CURL_CA_BUNDLE, AWS_CA_BUNDLE for s3://, naming a bundle that signs it)"
              : std::string();
      throw std::runtime_error(what + ": " + c.strerror(code) + (again ? tried : hint));
    }
    if (again) {
      throw std::runtime_error(what + ": " +
                               http_status_text(response.status, response.error_body) + tried);
    }
    return response;
  }
}

uint64_t http_requests() { return g_requests.load(std::memory_order_relaxed); }
uint64_t http_bytes_read() { return g_bytes.load(std::memory_order_relaxed); }

}  // namespace detail
}  // namespace distsampler
