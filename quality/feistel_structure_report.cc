// feistel_structure_report.cc: the structure-aware half of the battery
// (feistel_structure_report.h): the generators and sizes it runs, the rounds sweep, chosen round
// keys and the weak-key search, and the console tables and docs/quality.md's section. The
// statistics: feistel_structure.cc.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distsampler/feistel.h"
#include "feistel_model.h"
#include "stats.h"
#include "feistel_structure_report.h"
#include "feistel_structure.h"

namespace quality {
namespace {

using distsampler::FeistelPermutation;

Fill library(int version, int rounds) {
  return [version, rounds](uint64_t n, uint64_t seed, uint64_t* out) {
    FeistelPermutation(n, seed, 0, rounds, version).gather(0, 1, n, out);
  };
}

// f(i) for every i < count on `threads` threads, in order of i as threads free up (jobs listed
// longest first balance best). Each job writes only its own results: deterministic.
template <typename F>
void parallel_for(size_t count, int threads, F f) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < count; i = next++) f(i);
    });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace

std::string sweep_rounds(uint64_t n, int keys, int max_rounds, uint64_t first_seed) {
  std::ostringstream out;
  for (int r = 1; r <= max_rounds; ++r) {
    const Gen g{"", library(FeistelPermutation::kVersion2, r), true, false};
    const std::vector<Row> rows = measure(g, n, keys, first_seed);
    const Row* worst = &rows[0];
    double w = 0;
    for (const Row& row : rows) {
      const double z =
          std::max(std::fabs(row.pooled), row.has_worst_key ? std::fabs(row.worst_key) : 0);
      if (z > w) {
        w = z;
        worst = &row;
      }
    }
    out << "n = " << n << ", " << keys << " keys, " << r << " rounds: worst |z| " << fmt(w) << " ("
        << worst->statistic << "; " << worst->where << ")\n";
    std::fprintf(stderr, "%s", out.str().c_str());
  }
  return out.str();
}

std::string check_permutations(const std::string& name, uint64_t n, int keys, const Fill& fill,
                               double* worst_out) {
  const Gen g{name, fill, false, false};
  const std::vector<Row> rows = measure(g, n, keys, 0);
  std::ostringstream out;
  double worst = 0;
  for (const Row& row : rows) {
    const double z =
        std::max(std::fabs(row.pooled), row.has_worst_key ? std::fabs(row.worst_key) : 0);
    worst = std::max(worst, z);
    out << "| " << name << " | " << size_name(n) << " | " << keys << " | " << row.statistic << " | "
        << fmt(row.pooled) << " | "
        << (row.has_worst_key ? fmt(row.worst_key) + " (" + row.where + ")" : std::string("-"))
        << " |\n";
  }
  if (worst_out != nullptr) *worst_out = worst;
  return out.str();
}

StructureReport run_structure(bool long_mode, const Fill& reference, uint64_t max_n,
                              int thread_count) {
  StructureReport rep;
  std::ostringstream text, md;
  const int v2 = FeistelPermutation::kVersion2;
  const int def = FeistelPermutation::kVersion2Rounds;
  // The model against the library: the same values except the parity correction's two.
  {
    bool same = true;
    for (uint64_t n : {uint64_t{131073}, uint64_t{1000003}}) {
      for (uint64_t seed : {1, 2}) {
        const Model m(n, seed, def, RoundKind::kMix);
        const FeistelPermutation lib(n, seed, 0, def, v2);
        uint64_t differ = 0;
        for (uint64_t i = 0; i < n; ++i) differ += m(i) != lib(i);
        if (differ != 0 && differ != 2) same = false;
      }
    }
    rep.model_matches_library = same;
    text << "model network == library version 2 (up to the parity swap): " << (same ? "yes" : "NO")
         << "\n";
  }
  const int weak = FeistelPermutation::kVersion2Rounds / 2;
  std::vector<Gen> gens = {
      {"v2 (default, " + std::to_string(def) + " rounds)", library(v2, 0), false, false},
      {"uniform (reference)", reference, false, false},
      {"v2, " + std::to_string(weak) + " rounds", library(v2, weak), true, false},
      {"linear round, " + std::to_string(def) + " rounds", model(RoundKind::kLinear, def), true,
       false},
      {"multiply round, 6 rounds (audited v2)", model(RoundKind::kMultiply, 6), true, false},
  };
  struct Plan {
    uint64_t n;
    int keys;
  };
  std::vector<Plan> plans =
      long_mode ? std::vector<Plan>{{131073, 30}, {1000003, 4}, {3000017, 1}, {10000000, 1}}
                : std::vector<Plan>{{131073, 10}, {1000003, 1}};
  plans.erase(
      std::remove_if(plans.begin(), plans.end(), [&](const Plan& p) { return p.n > max_n; }),
      plans.end());
  // Every (size, generator) on its own thread, the largest sizes first.
  const int threads = thread_count > 0 ? thread_count : long_mode ? 4 : 2;
  std::vector<std::vector<std::vector<Row>>> table(plans.size(),
                                                   std::vector<std::vector<Row>>(gens.size()));
  parallel_for(plans.size() * gens.size(), threads, [&](size_t job) {
    const size_t p = plans.size() - 1 - job / gens.size(), g = job % gens.size();
    const auto start = std::chrono::steady_clock::now();
    table[p][g] = measure(gens[g], plans[p].n, plans[p].keys);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "structure n=%llu %s: worst %.2f (%.1f s)\n",
                 static_cast<unsigned long long>(plans[p].n), gens[g].name.c_str(),
                 worst_of(table[p][g]), secs);
  });
  text << "\nstructure-aware statistics (pooled z / worst key z, adjusted; see "
          "quality/feistel_structure.cc)\n";
  bool every_weak_fails = true;
  std::vector<bool> stat_caught;
  for (size_t p = 0; p < plans.size(); ++p) {
    const Plan& plan = plans[p];
    const std::vector<std::vector<Row>>& per_gen = table[p];
    for (size_t g = 0; g < gens.size(); ++g) {
      const std::vector<Row>& rows = per_gen[g];
      const double w = worst_of(rows);
      if (g == 0) rep.worst_default = std::max(rep.worst_default, w);
      if (g == 1) rep.worst_reference = std::max(rep.worst_reference, w);
      if (gens[g].weakened && w < 4) every_weak_fails = false;
      if (stat_caught.empty()) stat_caught.assign(rows.size() * 2, false);
      for (size_t r = 0; r < rows.size(); ++r) {
        if (!gens[g].weakened) continue;
        if (std::fabs(rows[r].pooled) >= 4) stat_caught[2 * r] = true;
        if (!rows[r].has_worst_key || std::fabs(rows[r].worst_key) >= 4) {
          stat_caught[2 * r + 1] = true;
        }
      }
    }
    for (size_t r = 0; r < per_gen[0].size(); ++r) {
      text << size_name(plan.n) << " (" << plan.keys << " keys)  " << per_gen[0][r].statistic
           << "\n";
      for (size_t g = 0; g < gens.size(); ++g) {
        const Row& row = per_gen[g][r];
        char buf[256];
        std::snprintf(buf, sizeof(buf), "    %-40s %10.2f %10s   %s\n", gens[g].name.c_str(),
                      row.pooled, row.has_worst_key ? fmt(row.worst_key).c_str() : "-",
                      row.where.c_str());
        text << buf;
      }
    }
  }
  rep.weakened_caught = every_weak_fails;
  rep.statistics_proven =
      std::all_of(stat_caught.begin(), stat_caught.end(), [](bool b) { return b; });
  text << "every weakened network fails at every size: " << (every_weak_fails ? "yes" : "NO")
       << "; every statistic catches a weakened network: " << (rep.statistics_proven ? "yes" : "NO")
       << "\n";

  // Rounds: the library's version 2 at each round count, worst |z| over every statistic.
  const std::vector<Plan> sweep_plans =
      long_mode ? std::vector<Plan>{{131073, 20}, {1000003, 1}} : std::vector<Plan>{};
  const int max_rounds = def;
  std::vector<std::vector<double>> sweep(sweep_plans.size(), std::vector<double>(max_rounds));
  parallel_for(sweep_plans.size() * max_rounds, threads, [&](size_t job) {
    const size_t p = sweep_plans.size() - 1 - job / max_rounds;
    const int r = static_cast<int>(job % max_rounds) + 1;
    const Gen g{"", library(v2, r), true, false};
    sweep[p][r - 1] = worst_of(measure(g, sweep_plans[p].n, sweep_plans[p].keys, 1000));
    std::fprintf(stderr, "sweep n=%llu rounds=%d: worst %.2f\n",
                 static_cast<unsigned long long>(sweep_plans[p].n), r, sweep[p][r - 1]);
  });

  // Chosen round keys (the model with the default rounds) and the weak-key search.
  const uint64_t key_n = long_mode ? 1000003 : 131073;
  std::vector<Gen> chosen = {
      {"round keys all 0", model(RoundKind::kMix, def, 0), false, true},
      {"round keys all 0xffffffff", model(RoundKind::kMix, def, 0xffffffffll), false, true},
      {"round keys all 0x80000000", model(RoundKind::kMix, def, 0x80000000ll), false, true},
  };
  std::vector<double> chosen_worst(chosen.size());
  const uint64_t search_n = 131073;
  const int search_keys = long_mode ? 200 : 30;
  Search search_default, search_multiply8;
  parallel_for(chosen.size() + 2, threads, [&](size_t job) {
    if (job == 0) {
      search_default = weak_key_search(gens[0], search_n, search_keys, 100000);
    } else if (job == 1) {
      search_multiply8 = weak_key_search({"", model(RoundKind::kMultiply, 8), true, false},
                                         search_n, search_keys, 100000);
    } else {
      chosen_worst[job - 2] = worst_of(measure(chosen[job - 2], key_n, 1));
    }
  });
  for (double w : chosen_worst) rep.worst_default = std::max(rep.worst_default, w);
  rep.worst_default = std::max(rep.worst_default, std::fabs(search_default.adjusted));
  text << "chosen round keys (n = " << key_n << "):";
  for (size_t i = 0; i < chosen.size(); ++i) {
    text << " " << chosen[i].name << " " << fmt(chosen_worst[i]) << ";";
  }
  text << "\nweak-key search, n = " << search_n << ", " << search_keys
       << " keys: default worst key z = " << fmt(search_default.worst) << " (adjusted "
       << fmt(search_default.adjusted) << ", seed " << search_default.seed << ", "
       << search_default.member << "); multiply round 8 rounds: " << fmt(search_multiply8.worst)
       << " (adjusted " << fmt(search_multiply8.adjusted) << ", seed " << search_multiply8.seed
       << ", " << search_multiply8.member << ")\n";
  for (size_t i = 0; i < sweep.size(); ++i) {
    text << "rounds sweep n = " << sweep_plans[i].n << ":";
    for (size_t r = 0; r < sweep[i].size(); ++r) text << " " << r + 1 << ": " << fmt(sweep[i][r]);
    text << "\n";
  }

  // The markdown section.
  md << kStructureHeading << "\n\n"
     << "quality/feistel_structure.cc defines them: pairs of positions one input difference "
        "apart\n(single-bit XOR in either half of the network, additions with carry, small "
        "additive differences,\nthe inverse's XOR pairs), the collisions of their output "
        "differences per key (mod n and in the\nnetwork's coordinates), their distribution "
        "pooled over keys, and linear correlations of input and\noutput bits. Each cell: the "
        "z-score pooled over the keys / the worst key's, both Sidak-adjusted\nfor the members "
        "(and keys) they are the worst of, so |z| >= 4 keeps its meaning.\n\n";
  md << "Worst |z| of the default order over every statistic, size, chosen key and the weak-key "
        "search: "
     << fmt(rep.worst_default) << "; of the reference: " << fmt(rep.worst_reference) << ".\n\n";
  md << "| n | keys | statistic |";
  for (const Gen& g : gens) md << " " << g.name << " |";
  md << "\n|---|---|---|";
  for (size_t g = 0; g < gens.size(); ++g) md << "---|";
  md << "\n";
  for (size_t p = 0; p < plans.size(); ++p) {
    for (size_t r = 0; r < table[p][0].size(); ++r) {
      md << "| " << size_name(plans[p].n) << " | " << plans[p].keys << " | "
         << table[p][0][r].statistic << " |";
      for (size_t g = 0; g < gens.size(); ++g) {
        const Row& row = table[p][g][r];
        md << " " << fmt(row.pooled);
        if (row.has_worst_key) md << " / " << fmt(row.worst_key);
        md << " |";
      }
      md << "\n";
    }
  }
  md << "\nWorst |z| per size and generator:\n\n| n | keys |";
  for (const Gen& g : gens) md << " " << g.name << " |";
  md << "\n|---|---|";
  for (size_t g = 0; g < gens.size(); ++g) md << "---|";
  md << "\n";
  for (size_t p = 0; p < plans.size(); ++p) {
    md << "| " << size_name(plans[p].n) << " | " << plans[p].keys << " |";
    for (size_t g = 0; g < gens.size(); ++g) md << " " << fmt(worst_of(table[p][g])) << " |";
    md << "\n";
  }
  if (!sweep.empty()) {
    md << "\nRounds: the library's version 2 at each round count, worst |z| over every "
          "statistic above\n(seeds from 1000):\n\n| n | keys |";
    for (int r = 1; r <= max_rounds; ++r) md << " " << r << " |";
    md << "\n|---|---|";
    for (int r = 1; r <= max_rounds; ++r) md << "---|";
    md << "\n";
    for (size_t i = 0; i < sweep.size(); ++i) {
      md << "| " << size_name(sweep_plans[i].n) << " | " << sweep_plans[i].keys << " |";
      for (double w : sweep[i]) md << " " << fmt(w) << " |";
      md << "\n";
    }
  }
  md << "\nChosen round keys (the model network, default rounds, n = " << size_name(key_n)
     << "), worst |z|:";
  for (size_t i = 0; i < chosen.size(); ++i) {
    md << (i ? ";" : "") << " " << chosen[i].name << " " << fmt(chosen_worst[i]);
  }
  md << ".\n\nWeak-key search (n = " << search_n << ", seeds 100000 to " << 100000 + search_keys - 1
     << ", XOR collisions mod n and in network coordinates, " << search_default.statistics
     << " statistics per key): the default's worst key z = " << fmt(search_default.worst)
     << " (seed " << search_default.seed << ", " << search_default.member << "), adjusted "
     << fmt(search_default.adjusted)
     << "; the multiply round at 8 rounds: " << fmt(search_multiply8.worst) << " (seed "
     << search_multiply8.seed << ", " << search_multiply8.member << "), adjusted "
     << fmt(search_multiply8.adjusted) << ".\n";
  rep.text = text.str();
  rep.markdown = md.str();
  return rep;
}

}  // namespace quality
