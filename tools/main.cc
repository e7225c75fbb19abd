// The distsampler command-line tool; everything lives in cli.cc so that tests run it in-process.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli.h"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  std::vector<std::string> args(argv + 1, argv + argc);
  // Standard output through a buffer that knows why a write failed (output.h).
  distsampler::cli::FdStreamBuf stdout_buf(STDOUT_FILENO);
  std::ostream out(&stdout_buf);
  return distsampler::cli::run(args, out, std::cerr);
}
