// peak_memory.h: this process's peak resident memory, for the bench programs' JSON reports.
#ifndef DISTSAMPLER_BENCH_PEAK_MEMORY_H_
#define DISTSAMPLER_BENCH_PEAK_MEMORY_H_

#include <cstdio>
#include <cstdlib>
#include <cstring>

// VmHWM in kB, or -1 when /proc is missing. Reset at exec, unlike the rusage a parent reads for
// its child, which also counts the interpreter that forked it.
inline long peak_kb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::strtol(line + 6, nullptr, 10);
  }
  std::fclose(f);
  return kb;
}

#endif  // DISTSAMPLER_BENCH_PEAK_MEMORY_H_
