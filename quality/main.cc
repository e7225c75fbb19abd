// quality: the statistical battery of the shuffled orders (issues 13 and 20); never installed.
// This file is its command line: the size plans, the classic statistics' tables
// (whole_permutation.cc), the structure-aware half (feistel_structure_report.h) on a thread beside
// them, docs/quality.md, and the checks the ctest test `quality` makes.
//
// usage: quality [--long] [--structure-only] [--max-size N] [--threads T] [--markdown PATH]
//        quality [--long] --classic-only [--min-size N] [--max-size N]
//        quality --sweep N KEYS MAX_ROUNDS FIRST_SEED
//        quality --permutations FILE N NAME
//   default (short mode, a ctest test): fewer draws; exits 1 unless version 2 and the reference
//   shuffle stay below |z| = 4 on every statistic, the battery detects version 1's parity, and
//   every weakened network fails the structure-aware statistics (each of which catches one).
//   --long: the sizes and draws of docs/quality.md (minutes), which --markdown writes.
//   --structure-only: the structure-aware half alone (--markdown then writes its section only),
//   --max-size N: only sizes up to N, --threads T: T of its jobs at once. --classic-only: the
//   classic statistics alone, printed, --min-size N: only their sizes from N. --sweep: version 2
//   at 1..MAX_ROUNDS rounds against the structure-aware statistics (how the default rounds were
//   chosen). --permutations: the structure-aware statistics on another library's orders (FILE:
//   see check_permutation_file), beside the reference shuffle's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "whole_permutation.h"
#include "reference_shuffle.h"
#include "stats.h"
#include "feistel_structure_report.h"

namespace {

using quality::factorial;
using quality::fmt;
using quality::Generator;
using quality::generators;
using quality::kGenerators;
using quality::kUniform;
using quality::kV1;
using quality::kV2;
using quality::reference_shuffle;
using quality::Result;
using quality::run_size;
using quality::size_name;
using quality::SizePlan;

struct SizeReport {
  SizePlan plan;
  std::vector<Result> rows;
  double p_odd[kGenerators];
  double seconds[kGenerators];
};

// FILE: permutations of [0, n) as little-endian uint64 values, one after the other (the key
// count is the file's size / 8n). Prints one markdown row per statistic for them and for the
// reference shuffle at the same n and keys, then the worst |z| of each. Exit 0, or 2 when the file
// is not a whole number of permutations of [0, n).
int check_permutation_file(const std::string& path, uint64_t n, const std::string& name) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff bytes = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  std::vector<uint64_t> all(static_cast<size_t>(bytes) / sizeof(uint64_t));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(all.data()), static_cast<std::streamsize>(all.size() * 8));
  if (n < 2 || all.empty() || all.size() % n != 0) {
    std::cerr << path << ": " << all.size() << " values; expected a positive multiple of n = " << n
              << " (n >= 2)\n";
    return 2;
  }
  const int keys = static_cast<int>(all.size() / n);
  for (int k = 0; k < keys; ++k) {
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t v = all[k * n + i];
      if (v >= n || seen[v]) {
        std::cerr << path << ": key " << k << " is not a permutation of [0, " << n << "): value "
                  << v << " at position " << i << "\n";
        return 2;
      }
      seen[v] = true;
    }
  }
  double worst = 0, worst_reference = 0;
  std::printf(
      "| order | n | keys | statistic | pooled z | worst key's z (where) |\n"
      "|---|---|---|---|---|---|\n");
  std::printf("%s", quality::check_permutations(
                        name, n, keys,
                        [&](uint64_t, uint64_t key, uint64_t* out) {
                          std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(key * n), n, out);
                        },
                        &worst)
                        .c_str());
  std::printf("%s", quality::check_permutations(
                        "uniform (reference)", n, keys,
                        [](uint64_t m, uint64_t key, uint64_t* out) {
                          reference_shuffle(m, key + 1, 0, out);
                        },
                        &worst_reference)
                        .c_str());
  std::printf("\nworst |z|: %s %.2f, uniform (reference) %.2f\n", name.c_str(), worst,
              worst_reference);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool long_mode = false, structure_only = false, classic_only = false;
  uint64_t max_n = ~uint64_t{0}, min_n = 0;
  int threads = 0;
  std::string markdown;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--long") {
      long_mode = true;
    } else if (arg == "--structure-only") {
      structure_only = true;
    } else if (arg == "--classic-only") {
      classic_only = true;
    } else if (arg == "--min-size" && i + 1 < argc) {
      min_n = std::stoull(argv[++i]);
    } else if (arg == "--max-size" && i + 1 < argc) {
      max_n = std::stoull(argv[++i]);
    } else if (arg == "--threads" && i + 1 < argc) {
      threads = std::stoi(argv[++i]);
    } else if (arg == "--sweep" && i + 4 < argc) {
      // --sweep N KEYS MAX_ROUNDS FIRST_SEED: version 2's rounds against the structure battery.
      const uint64_t n = std::stoull(argv[i + 1]), seed = std::stoull(argv[i + 4]);
      std::printf(
          "%s",
          quality::sweep_rounds(n, std::stoi(argv[i + 2]), std::stoi(argv[i + 3]), seed).c_str());
      return 0;
    } else if (arg == "--markdown" && i + 1 < argc) {
      markdown = argv[++i];
    } else if (arg == "--permutations" && i + 3 < argc) {
      // --permutations FILE N NAME: the structure-aware statistics on another library's orders
      // (bench/peers_quality.py writes them), beside the reference shuffle's at the same n and
      // keys.
      return check_permutation_file(argv[i + 1], std::stoull(argv[i + 2]), argv[i + 3]);
    } else {
      std::cerr << "usage: quality [--long] [--structure-only] [--max-size N] [--threads T] "
                   "[--markdown PATH]\n"
                   "       quality [--long] --classic-only [--min-size N] [--max-size N]\n"
                   "       quality --sweep N KEYS MAX_ROUNDS FIRST_SEED\n"
                   "       quality --permutations FILE N NAME\n";
      return 2;
    }
  }
  // The structure-aware statistics (feistel_structure.cc) on a second thread: the two halves of
  // the battery share nothing, and each is deterministic.
  quality::StructureReport structure;
  std::thread structure_thread([&] {
    if (classic_only) return;
    structure = quality::run_structure(
        long_mode,
        [](uint64_t n, uint64_t seed, uint64_t* out) { reference_shuffle(n, seed, 0, out); }, max_n,
        threads);
  });
  if (structure_only) {
    structure_thread.join();
    std::printf("%s", structure.text.c_str());
    if (!markdown.empty()) std::ofstream(markdown) << structure.markdown;
    const bool ok = structure.worst_default < 4 && structure.worst_reference < 4 &&
                    structure.weakened_caught && structure.statistics_proven &&
                    structure.model_matches_library;
    std::printf(ok ? "OK\n" : "FAILED\n");
    return ok ? 0 : 1;
  }
  // The short mode's draws; the long mode adds 10^7.
  std::vector<SizePlan> plans;
  for (uint64_t n = 2; n <= 6; ++n) plans.push_back({n, 200 * factorial(n), 20000});
  plans.push_back({7, 20 * 5040, 20000});
  plans.push_back({8, 10 * 40320, 20000});
  plans.push_back({9, 362880, 20000});
  plans.push_back({10, 362880, 20000});
  plans.push_back({100, 20000, 20000});
  plans.push_back({1000, 4000, 4000});
  for (uint64_t n : {65535, 65536, 65537}) plans.push_back({n, 200, 200});
  // The smallest size past kNarrowDomainVersion2 (the default rounds only, feistel.h), and one
  // with L = 977 for the left part, the range that exposed the unscaled modular rounds.
  plans.push_back({131073, 40, 40});
  plans.push_back({1000003, 20, 20});
  if (long_mode) plans.push_back({10000000, 2, 2});
  plans.erase(std::remove_if(plans.begin(), plans.end(),
                             [&](const SizePlan& p) { return p.n < min_n || p.n > max_n; }),
              plans.end());
  if (plans.empty()) {
    std::fprintf(stderr, "--min-size %llu --max-size %llu: no size of the classic half is in that "
                 "range\n", static_cast<unsigned long long>(min_n),
                 static_cast<unsigned long long>(max_n));
    structure_thread.join();
    return 2;
  }
  const std::vector<Generator> gens = generators();
  std::vector<SizeReport> reports;
  double worst[kGenerators] = {};
  std::printf("%-8s %-38s %12s %12s %12s %12s\n", "n", "statistic (z-score)", gens[0].name,
              gens[1].name, gens[2].name, gens[3].name);
  for (const SizePlan& plan : plans) {
    SizeReport report{plan, {}, {}, {}};
    // The generators of a size on threads of their own (each writes only its own results).
    std::vector<std::vector<Result>> per_gen(kGenerators);
    std::vector<std::thread> pool;
    for (int g = 0; g < kGenerators; ++g) {
      pool.emplace_back([&, g] {
        const auto start = std::chrono::steady_clock::now();
        per_gen[g] = run_size(gens[g], plan, &report.p_odd[g]);
        report.seconds[g] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
    }
    for (std::thread& t : pool) t.join();
    report.rows = per_gen[0];
    for (int g = 0; g < kGenerators; ++g) {
      for (size_t r = 0; r < per_gen[g].size(); ++r) report.rows[r].z[g] = per_gen[g][r].z[0];
    }
    for (const Result& r : report.rows) {
      std::printf("%-8s %-38s %12.2f %12.2f %12.2f %12.2f\n", size_name(plan.n).c_str(),
                  r.statistic.c_str(), r.z[0], r.z[1], r.z[2], r.z[3]);
      for (int g = 0; g < kGenerators; ++g) worst[g] = std::max(worst[g], std::fabs(r.z[g]));
    }
    std::printf("%-8s %-38s %12.4f %12.4f %12.4f %12.4f   (%llu trials; %.1f s)\n",
                size_name(plan.n).c_str(), "P(odd), uniform: 0.5", report.p_odd[0], report.p_odd[1],
                report.p_odd[2], report.p_odd[3], static_cast<unsigned long long>(plan.trials),
                report.seconds[0] + report.seconds[1] + report.seconds[2] + report.seconds[3]);
    std::fflush(stdout);
    reports.push_back(std::move(report));
  }
  std::printf("worst |z|: %s %.2f, %s %.2f, %s %.2f, %s %.2f\n", gens[0].name, worst[0],
              gens[1].name, worst[1], gens[2].name, worst[2], gens[3].name, worst[3]);
  structure_thread.join();
  std::printf("%s", structure.text.c_str());

  if (!markdown.empty()) {
    std::ostringstream md;
    md << "# Statistical quality of the shuffled orders\n\n"
       << (classic_only
               ? "The classic statistics: one run of `build/bin/quality --long --classic-only "
                 "--markdown docs/quality.md`\n(quality/), which keeps the "
                 "structure-aware section below as it was (its own run: see\nthat section and "
                 "the notes at the end). The short mode of both halves runs as the ctest test\n"
                 "`quality`. Each cell is a z-score "
               : "Written by `build/bin/quality --long --markdown docs/quality.md` "
                 "(quality/, one run; the short\nmode runs as the ctest test `quality`). "
                 "Each cell is a z-score ")
       << "against a uniform random\npermutation: |z| >= 4 is a deviation a fair generator shows "
          "once in 16,000 statistics; the\nreference uniform shuffle (Fisher-Yates from Philox) "
          "calibrates the battery.\nquality/whole_permutation.cc describes each statistic and its "
          "exact moments. The battery is\ndeterministic (trial t uses seed t + 1, epoch 0), so "
          "these are the numbers on every run and\nplatform.\n\n";
    md << "Worst |z| over every classic statistic and size: feistel v1 " << fmt(worst[0], 1)
       << ", feistel v2 " << fmt(worst[1], 2) << ", torch " << fmt(worst[2], 2) << ", uniform "
       << fmt(worst[3], 2) << ".\n\n";
    md << "## Parity: P(odd permutation), uniform 0.5\n\n"
       << "| n | trials | feistel v1 | feistel v2 | torch | uniform |\n"
       << "|---|---|---|---|---|---|\n";
    for (const SizeReport& r : reports) {
      md << "| " << size_name(r.plan.n) << " | " << r.plan.trials;
      for (int g = 0; g < kGenerators; ++g) md << " | " << fmt(r.p_odd[g], 4);
      md << " |\n";
    }
    md << "\n## Worst |z| per size\n\n"
       << "| n | statistics | feistel v1 | feistel v2 | torch | uniform |\n"
       << "|---|---|---|---|---|---|\n";
    for (const SizeReport& r : reports) {
      double w[kGenerators] = {};
      for (const Result& row : r.rows) {
        for (int g = 0; g < kGenerators; ++g) w[g] = std::max(w[g], std::fabs(row.z[g]));
      }
      md << "| " << size_name(r.plan.n) << " | " << r.rows.size();
      for (int g = 0; g < kGenerators; ++g) md << " | " << fmt(w[g], 2);
      md << " |\n";
    }
    md << "\n## Every statistic\n\n"
       << "| n | statistic | feistel v1 | feistel v2 | torch | uniform |\n"
       << "|---|---|---|---|---|---|\n";
    for (const SizeReport& r : reports) {
      for (const Result& row : r.rows) {
        md << "| " << size_name(r.plan.n) << " | " << row.statistic;
        for (int g = 0; g < kGenerators; ++g) md << " | " << fmt(row.z[g], 2);
        md << " |\n";
      }
    }
    md << "\nTrials per size (permutations per generator; for n <= 10 also the draws of the "
          "exhaustive\ncount; the related-key statistics use the first of them):\n\n"
          "| n | trials | related-key trials | seconds (4 generators, summed) |\n"
          "|---|---|---|---|\n";
    for (const SizeReport& r : reports) {
      md << "| " << size_name(r.plan.n) << " | " << r.plan.trials << " | "
         << std::min(r.plan.trials, r.plan.related_trials) << " | "
         << fmt(r.seconds[0] + r.seconds[1] + r.seconds[2] + r.seconds[3], 1) << " |\n";
    }
    std::ifstream keep(markdown);
    std::string existing((std::istreambuf_iterator<char>(keep)), std::istreambuf_iterator<char>());
    if (classic_only) {
      // The structure-aware section and everything after it, as the file has them.
      const size_t at = existing.find(quality::kStructureHeading);
      if (at == std::string::npos) {
        std::cerr << "--classic-only --markdown " << markdown << ": no '" << quality::kStructureHeading
                  << "' to keep; run the whole battery (--long --markdown) instead\n";
        return 2;
      }
      md << "\n" << existing.substr(at);
    } else {
      md << "\n" << structure.markdown;
      // Hand-written notes below this marker survive a rerun.
      const std::string marker = "<!-- end of the generated part -->";
      const size_t at = existing.find(marker);
      md << "\n" << marker << "\n";
      if (at != std::string::npos) md << existing.substr(at + marker.size() + 1);
    }
    std::ofstream(markdown) << md.str();
  }

  // The checks of the short mode (and of the long one): version 2 and the reference within
  // |z| < 4 everywhere; version 1's parity flaw detected (the battery's self-check).
  bool ok = true;
  for (int g : {kV2, kUniform}) {
    if (worst[g] >= 4) {
      std::printf("FAIL: %s has |z| = %.2f >= 4\n", gens[g].name, worst[g]);
      ok = false;
    }
  }
  bool parity_detected = false;
  for (const SizeReport& r : reports) {
    for (const Result& row : r.rows) {
      if (row.statistic == "parity P(odd)" && std::fabs(row.z[kV1]) >= 4) parity_detected = true;
    }
  }
  // Its sizes (n = 9, 10, 65535, 65536) are below any --min-size that leaves them out.
  if (!parity_detected && min_n <= 9) {
    std::printf("FAIL: the battery did not detect feistel v1's parity deviation\n");
    ok = false;
  }
  if (!quality::serial_variance_matches_enumeration()) {
    std::printf("FAIL: serial_variance differs from the enumeration of small permutations\n");
    ok = false;
  }
  if (classic_only) {
    std::printf(ok ? "OK (the classic statistics only)\n" : "FAILED\n");
    return ok ? 0 : 1;
  }
  // The structure-aware half: the default order and the reference within |z| < 4, every
  // weakened network caught, every statistic catching one, the model equal to the library.
  if (structure.worst_default >= 4 || structure.worst_reference >= 4) {
    std::printf("FAIL: structure-aware statistics: default %.2f, reference %.2f (>= 4)\n",
                structure.worst_default, structure.worst_reference);
    ok = false;
  }
  if (!structure.weakened_caught || !structure.statistics_proven) {
    std::printf("FAIL: a weakened network passed, or a statistic caught none of them\n");
    ok = false;
  }
  if (!structure.model_matches_library) {
    std::printf("FAIL: the model network differs from the library's version 2\n");
    ok = false;
  }
  std::printf(ok ? "OK\n" : "FAILED\n");
  return ok ? 0 : 1;
}
