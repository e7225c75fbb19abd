// output.h: the CLI's standard output as a checked stream: a failed write (a full disk, a closed
// stdout, a reader that left) stops the command with the cause, never silently.
#ifndef DISTSAMPLER_TOOLS_OUTPUT_H_
#define DISTSAMPLER_TOOLS_OUTPUT_H_

#include <ostream>
#include <stdexcept>
#include <streambuf>
#include <vector>

namespace distsampler::cli {

// A buffered stream buffer over a file descriptor that keeps the errno of the first write that
// failed (ENOSPC, EBADF, EPIPE when SIGPIPE is ignored); every write after it fails at once.
// It does not own the descriptor.
class FdStreamBuf : public std::streambuf {
 public:
  explicit FdStreamBuf(int fd);
  FdStreamBuf(const FdStreamBuf&) = delete;
  FdStreamBuf& operator=(const FdStreamBuf&) = delete;

  // The errno of the failed write, 0 while every write succeeded.
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  bool drain();
  bool write_all(const char* p, size_t n);

  int fd_;
  int error_ = 0;
  std::vector<char> buffer_;
};

// The output could not be written; the message names the cause ("cannot write the output: No
// space left on device").
struct OutputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws OutputError when a write to out has failed, naming the errno of its FdStreamBuf. Cheap:
// a command calls it after each chunk it writes, so that a reader leaving stops the work at once.
void check_output(const std::ostream& out);

}  // namespace distsampler::cli

#endif  // DISTSAMPLER_TOOLS_OUTPUT_H_
