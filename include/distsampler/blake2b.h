// blake2b.h: BLAKE2b (RFC 7693) with a digest of 1 to 64 bytes and no key: what Python's
// hashlib.blake2b(data, digest_size=n) gives, so that a text hashed by `tokens prepare` (its
// .dochash sidecar) is found by the CLI. Written here, not taken from libb2: the core depends on
// nothing beyond POSIX, and this is one function (docs/design.md, "Dependencies").
#ifndef DISTSAMPLER_BLAKE2B_H_
#define DISTSAMPLER_BLAKE2B_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace distsampler {

// The digest of data[0, size), `digest_size` bytes (1 to 64), as raw bytes.
std::string blake2b(const void* data, size_t size, size_t digest_size);

}  // namespace distsampler

#endif  // DISTSAMPLER_BLAKE2B_H_
