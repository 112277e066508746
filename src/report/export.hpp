// Exports of a results store: CSV (one row per trial: knobs, status, every metric's median and
// spread, values relative to the reference) and JSON (everything: sweeps, environments, trials,
// repetitions, phases, layers, optima, Pareto front). RFC 4180 quoting for CSV, full escaping for JSON.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tune/store.hpp"

namespace cnnergy::report {

// One CSV field, quoted when it holds a comma, quote, CR or LF (quotes doubled), and prefixed with
// ' when it starts with = + - @ and is not a number, so a spreadsheet never runs it as a formula.
std::string csv_field(std::string_view s);

// The files are written to a temporary name and renamed, so a failed export leaves no half file.
void export_csv(const tune::ResultStore& store, const std::string& path);
void export_json(const tune::ResultStore& store, const std::string& path);

// Writes `text` to `path` atomically (temp file + rename); DataError naming the path on failure.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace cnnergy::report
