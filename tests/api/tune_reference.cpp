// The tuner's statistics (src/tune/significance.cpp) and results store on queries given on stdin,
// so the Python optimizer's copy of the formulas (cnnergy/_stats.py) and its side table in the
// results database are checked against the C++ side. One query a line:
//   interval V1 V2 ...              -> "df t mean stddev low high" (95 % t-interval of the mean)
//   eds K E1,E2,.. T1,T2,.. ER1,.. TR1,..  -> "low high" of EDS(K) of a trial against a reference
//   open-store PATH                 -> "sweeps N": opens PATH read-write as a results store
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "tune/metrics.hpp"
#include "tune/significance.hpp"
#include "tune/store.hpp"

using namespace cnnergy::tune;

namespace {
std::vector<double> list(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stod(item));
  return out;
}

TrialSummary trial(const std::vector<double>& e, const std::vector<double>& t) {
  TrialSummary s;
  s.metrics[Metric::kEnergyPerIteration] = compute_stats(e);
  s.metrics[Metric::kTimePerIteration] = compute_stats(t);
  return s;
}
}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string what;
    in >> what;
    if (what == "interval") {
      std::vector<double> v;
      for (double x; in >> x;) v.push_back(x);
      const Stats s = compute_stats(v);
      const auto i = mean_interval(s);
      std::printf("%zu %.10g %.10g %.10g %.10g %.10g\n", s.n - 1, t_quantile_975(s.n - 1), s.mean, s.stddev,
                  i ? i->low : 0.0, i ? i->high : 0.0);
    } else if (what == "eds") {
      std::string k, e, t, er, tr;
      in >> k >> e >> t >> er >> tr;
      const TrialSummary a = trial(list(e), list(t)), ref = trial(list(er), list(tr));
      const auto i = objective_interval(a, parse_objective("eds:" + k), &ref, false);
      std::printf("%.10g %.10g\n", i ? i->low : 0.0, i ? i->high : 0.0);
    } else if (what == "open-store") {
      std::string path;
      in >> path;
      try {
        ResultStore store(path);
        std::printf("sweeps %zu\n", store.sweeps().size());
      } catch (const cnnergy::Error& e) {
        std::fprintf(stderr, "tune_reference: %s\n", e.what());
        return 3;
      }
    } else if (!what.empty()) {
      std::fprintf(stderr, "tune_reference: unknown query '%s'\n", what.c_str());
      return 2;
    }
  }
  return 0;
}
