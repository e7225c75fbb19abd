// s3.h: objects in S3-compatible storage (AWS S3, SeaweedFS, MinIO, ...) read by byte range, for
// token sources whose prefix is s3://bucket/key-prefix: an object's size and ETag (HEAD), a byte
// range of it that must still be that object (GET with Range, its ETag checked), and a whole
// object kept once per node in a local cache directory (the .idx).
//
// On Debian's libcurl, which signs requests (AWS Signature Version 4, CURLOPT_AWS_SIGV4) and does
// the HTTP. It is loaded when the first s3:// source is opened (dlopen of libcurl.so.4), so that
// the core library and the wheel link nothing more, and a machine without libcurl reads local
// sources as before (docs/design.md says why).
//
// Settings, as the AWS SDKs and CLI read them (the first found):
//   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url in the config
//                file; else https://s3.REGION.amazonaws.com. Requests are path-style
//                (ENDPOINT/bucket/key), which S3-compatible servers all take.
//   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region; else us-east-1.
//   credentials  AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN); else the
//                profile's aws_access_key_id and aws_secret_access_key in the credentials file
//                (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), then in the config
//                file (AWS_CONFIG_FILE, default ~/.aws/config; section [profile NAME], or
//                [default]). The profile: AWS_PROFILE, else default.
//   retries      a request that fails with a 5xx or 429 status, a timeout, or a connection
//                refused or broken, is tried again after 0.1 s, doubling up to 2 s, until
//                DISTSAMPLER_S3_RETRY_SECONDS (default 120) have passed since its first try:
//                a server restarted meanwhile is waited for. Any other status is one error.
//   cache        DISTSAMPLER_S3_CACHE, else $XDG_CACHE_HOME/distsampler/s3, else
//                ~/.cache/distsampler/s3.
//   requests     DISTSAMPLER_S3_REQUESTS: how many of a step's reads a process has in flight at
//                once (1 to 16, default 16; read_token_rows).
// Every failure is one std::runtime_error naming the object (s3://bucket/key), the endpoint and
// the status (with the server's error code and message) or the transport's error.
#ifndef DISTSAMPLER_SRC_LOADER_S3_H_
#define DISTSAMPLER_SRC_LOADER_S3_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <string>
#include <vector>

namespace distsampler {
namespace detail {

// Whether `path` names an object store's object or prefix (starts with "s3://").
bool is_s3_url(const std::string& path);

// An object's place: bucket and key. Parsed from s3://bucket/key; throws std::invalid_argument
// naming the URL and what is allowed when the bucket or key is empty.
struct S3Object {
  std::string bucket;
  std::string key;
  static S3Object parse(const std::string& url);
  std::string url() const { return "s3://" + bucket + "/" + key; }
};

// What HEAD says of an object.
struct S3Version {
  uint64_t size = 0;
  std::string etag;  // as the server quotes it
};

// The object's size and ETag. Throws std::runtime_error naming it: "not found" for a 404.
S3Version s3_head(const S3Object& object);

// Reads bytes [offset, offset + n) of the object into out, which must still be `version` (its
// ETag: a replaced object is refused, "changed since it was opened"; so is one that ends before
// offset + n, "truncated"). n > 0.
void s3_read(const S3Object& object, const S3Version& version, uint64_t offset, uint64_t n,
             unsigned char* out);

// A local copy of the object: the file in the cache directory that holds it (endpoint, bucket and
// key in its path), fetched when missing or when the object's ETag or size is not the copy's
// (one process of a node fetches it, under a lock on the directory, the others wait and take
// it). Returns the file's path; `version` (when not null) gets the object's.
std::string s3_cached_copy(const S3Object& object, S3Version* version = nullptr);

// The number in environment variable `name`, or `fallback` when it is unset or empty. Throws
// std::invalid_argument naming the variable, its value and `allowed` unless it is a number in
// [low, high] (an integer when `integer`).
double env_number(const char* name, double fallback, double low, double high, bool integer,
                  const char* allowed);

// DISTSAMPLER_S3_REQUESTS (s3.h's settings): reads in flight at once. Throws
// std::invalid_argument naming the variable, its value and what is allowed.
int s3_requests_in_flight();

// Bytes [offset, offset + n) of the object (which must still be `version`), read whole once and
// kept in this process's cache of blocks under `block` (the caller's number for the range: one
// range a block of an object), so that the callers reading inside one block make one request.
// The cache holds DISTSAMPLER_S3_CACHE_MB (default 256) megabytes of blocks at most, the one
// whose next use is furthest dropped first (S3BlockUses; the least recently used without one);
// a block wanted by several threads at once is fetched once; a failed fetch is not kept (the
// next read tries again). Fork-safe: a child starts empty.
// `range` gives the block's bytes [offset, offset + n) and is called only when the block is not
// in the cache (working it out may cost reads).
struct S3Block {
  uint64_t offset = 0;  // the object's byte at bytes[0]
  std::vector<unsigned char> bytes;
};
std::shared_ptr<const S3Block> s3_block(
    const S3Object& object, const S3Version& version, uint64_t block,
    const std::function<std::pair<uint64_t, uint64_t>()>& range);
// s3_block's name for a block's object: its URL and ETag (a replaced object's blocks are others).
std::string s3_block_object(const S3Object& object, const S3Version& version);

// Plan-aware eviction (Belady's rule) for s3_block's cache. A reader that knows which blocks it
// will read at which of its steps (a token stream knows its plan) says so here; when the cache is
// over its budget, the fetched block whose next use is furthest away goes first: its next step in
// some reader's list, counted from that reader's current step (the least over readers). Blocks no
// reader names go before any named one, the least recently used first; with no reader at all
// that is plain LRU. DISTSAMPLER_S3_EVICT = next-use (the default) or lru (readers ignored, for
// comparison); anything else is one std::invalid_argument naming the variable and its value.
// Registered with the cache while it lives; thread-safe against reads (the cache's lock).
class S3BlockUses {
 public:
  using Key = std::pair<std::string, uint64_t>;  // s3_block_object(), block number
  S3BlockUses();
  ~S3BlockUses();
  S3BlockUses(const S3BlockUses&) = delete;
  S3BlockUses& operator=(const S3BlockUses&) = delete;
  // This reader reads `blocks` at `step` (steps added in increasing order).
  void add(uint64_t step, const std::vector<Key>& blocks);
  // This reader reads `step` now: uses before it are gone.
  void at(uint64_t step);
  // Steps from the current one to the block's next use; UINT64_MAX when none is known. Called
  // under the cache's lock.
  uint64_t distance(const Key& block);

 private:
  std::map<Key, std::deque<uint64_t>> steps_;
  uint64_t now_ = 0;
};

// The cache's counts in this process: blocks found, blocks fetched, bytes held now.
struct S3CacheCounts {
  uint64_t hits = 0, fetches = 0, bytes = 0;
};
S3CacheCounts s3_cache_counts();

// Requests this process has made (each try counts), and the bytes the GETs returned (tests,
// benchmarks).
uint64_t s3_requests();
uint64_t s3_bytes_read();

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_LOADER_S3_H_
