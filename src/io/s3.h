// s3.h: objects in S3-compatible storage (AWS S3, SeaweedFS, MinIO, ...) as byte sources, for
// token sources whose prefix is s3://bucket/key-prefix: an object's size and ETag (HEAD) when
// opened, each read a byte range that must still be that object (GET with Range and If-Match).
// Requests signed (AWS Signature Version 4) by libcurl (curl.h: loaded on first use, retries).
//
// Settings, as the AWS SDKs and CLI read them (the first found):
//   endpoint     AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url in the config
//                file; else https://s3.REGION.amazonaws.com. Requests are path-style
//                (ENDPOINT/bucket/key), which S3-compatible servers all take. Anything but an
//                http:// or https:// URL is one std::invalid_argument naming where it came from.
//   region       AWS_REGION, AWS_DEFAULT_REGION, the profile's region; else us-east-1.
//   credentials  AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN); else the
//                profile's aws_access_key_id and aws_secret_access_key in the credentials file
//                (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), then in the config
//                file (AWS_CONFIG_FILE, default ~/.aws/config; section [profile NAME], or
//                [default]). The profile: AWS_PROFILE, else default.
//   CA bundle    AWS_CA_BUNDLE, for an https:// endpoint whose certificate the system's CAs do
//                not sign.
//   retries      bytes.h's remote_retry_seconds() (DISTSAMPLER_S3_RETRY_SECONDS).
// Every failure is one std::runtime_error naming the object (s3://bucket/key), the endpoint and
// the status (with the server's error code and message) or the transport's error.
#ifndef DISTSAMPLER_SRC_IO_S3_H_
#define DISTSAMPLER_SRC_IO_S3_H_

#include <cstdint>
#include <memory>
#include <string>

#include "bytes.h"

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

// s3://bucket/key as a byte source (bytes.h): s3_head() when opened, s3_read() for each read,
// one GET for copy_to().
std::shared_ptr<const ByteSource> open_s3(const std::string& url);

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_IO_S3_H_
