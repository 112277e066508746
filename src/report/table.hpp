// Terminal tables: an aligned text table, the per-trial results table, and the optimum table in the
// layout of Krzywaniak et al. 2022, Tables 2-3 (target metric, knobs, average power, energy and time with their
// change against the default).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "report/sweep_data.hpp"

namespace cnnergy::report {

class TextTable {
 public:
  enum class Align { kLeft, kRight };
  void add_column(std::string header, Align align = Align::kRight);
  void add_row(std::vector<std::string> cells);  // InvalidArgument when the cell count is wrong
  // Columns padded to their widest cell (counted in UTF-8 characters), a rule under the header.
  std::string render() const;
  std::size_t rows() const { return rows_.size(); }

 private:
  std::vector<std::string> headers_;
  std::vector<Align> aligns_;
  std::vector<std::vector<std::string>> rows_;
};

// Number of characters (UTF-8 code points) in `s`, for alignment.
std::size_t display_width(const std::string& s);

// One row per trial: knobs, status, time and energy per work unit with their spread, power, EDP,
// EDS(k=2) against the reference, GFLOPS/W; failed trials show their error.
void print_trials_table(std::ostream& out, const SweepData& data);
struct SweepStability;
// One row per objective: the optimum, and what it saves and costs against the default; with
// `stability` (report/stability_view.hpp) a column of how often it was the optimum in resamples,
// and the reference's drift and the settle time below the table.
void print_optimum_table(std::ostream& out, const SweepData& data, const SweepStability* stability = nullptr);

}  // namespace cnnergy::report
