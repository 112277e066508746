// Summary statistics over repeated measurements: median and spread are what every report shows.
#pragma once

#include <cstddef>
#include <span>

namespace cnnergy {

struct Summary {
  std::size_t n = 0;
  double median = 0, mean = 0, stddev = 0, min = 0, max = 0;
  double cv() const { return mean != 0 ? stddev / mean : 0; }  // coefficient of variation
};

// Sample standard deviation (n-1); an empty span gives n = 0 and zeros.
Summary summarize(std::span<const double> values);

}  // namespace cnnergy
