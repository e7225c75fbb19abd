#include "output.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace distsampler::cli {

FdStreamBuf::FdStreamBuf(int fd) : fd_(fd), buffer_(size_t{1} << 16) {
  setp(buffer_.data(), buffer_.data() + buffer_.size());
}

bool FdStreamBuf::write_all(const char* p, size_t n) {
  while (n > 0 && error_ == 0) {
    const ssize_t r = ::write(fd_, p, n);
    if (r < 0) {
      if (errno != EINTR) error_ = errno;
      continue;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return error_ == 0;
}

// Writes the buffered bytes; on failure they are dropped (the output is lost either way).
bool FdStreamBuf::drain() {
  const bool ok = write_all(pbase(), static_cast<size_t>(pptr() - pbase()));
  setp(buffer_.data(), buffer_.data() + buffer_.size());
  return ok;
}

FdStreamBuf::int_type FdStreamBuf::overflow(int_type c) {
  if (!drain()) return traits_type::eof();
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  *pptr() = traits_type::to_char_type(c);
  pbump(1);
  return c;
}

std::streamsize FdStreamBuf::xsputn(const char* s, std::streamsize n) {
  const auto size = static_cast<size_t>(n);
  if (size > static_cast<size_t>(epptr() - pptr())) {
    if (!drain()) return 0;
    // Large writes go straight to the descriptor.
    if (size >= buffer_.size()) return write_all(s, size) ? n : 0;
  }
  std::memcpy(pptr(), s, size);
  pbump(static_cast<int>(size));
  return n;
}

int FdStreamBuf::sync() { return drain() ? 0 : -1; }

void check_output(const std::ostream& out) {
  if (!out.fail()) return;
  const auto* buf = dynamic_cast<const FdStreamBuf*>(out.rdbuf());
  const int error = buf != nullptr ? buf->error() : 0;
  throw OutputError(std::string("cannot write the output: ") +
                    (error != 0 ? std::strerror(error) : "the output stream failed"));
}

}  // namespace distsampler::cli
