// The distsampler command-line tool; everything lives in cli.cc so that tests run it in-process.
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  std::vector<std::string> args(argv + 1, argv + argc);
  return distsampler::cli::run(args, std::cout, std::cerr);
}
