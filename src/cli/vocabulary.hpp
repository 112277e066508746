// The flags every command shares, declared and read in one place so they mean the same everywhere:
// -o/--out FILE, --json FILE, --csv FILE, --format table|json|csv (output), --device with one default
// rule, --windows/--window-s (measurement windows). README "Flags every command shares" lists them.
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "cli/args.hpp"
#include "core/json.hpp"

namespace cnnergy::cli {

// Declares, in the "Output" group: -o/--out FILE (`main_output` says what it holds), --format, --json FILE,
// --csv FILE. `main_is_stdout`: -o receives what the command prints on stdout (in --format); otherwise
// -o names the command's own product (report's HTML) and the caller reads it with get("out").
void declare_output_flags(ArgParser& p, const std::string& main_output = "what the command prints on stdout",
                          bool main_is_stdout = true);

// Where a command's stdout goes, from -o and --format, for the whole life of the object (RAII):
//  * --format table (the default): the human-readable text goes to stdout, or to -o FILE;
//  * --format json|csv: the text goes to stderr and finish() prints the machine document to stdout
//    (or -o FILE). With -o FILE.json / FILE.csv and no --format, the format follows the extension.
// finish() also writes --json FILE and --csv FILE. CSV rows: the array `rows_key` of the document
// (one column per key, nested values as JSON text), or the document itself as one row.
class OutputSink {
 public:
  explicit OutputSink(const ArgParser& p, bool main_is_stdout = true);
  ~OutputSink();  // puts stdout back; removes the empty files of a command that failed before finish()
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  const std::string& format() const { return format_; }
  bool machine() const { return format_ != "table"; }
  void finish(const Json& document, const std::string& rows_key = {});
  // The same for a command that renders its own JSON and CSV text.
  void finish_text(const std::string& json_text, const std::string& csv_text);
  // For commands whose machine output is written by a library function to a path (the results
  // store exports): `write(path)` is called for --json/--csv and for stdout in that format.
  void finish_with(const std::function<void(const std::string& path)>& write_json,
                   const std::function<void(const std::string& path)>& write_csv);

 private:
  void to_stdout(const std::string& text);
  std::string format_;
  std::optional<std::string> out_, json_, csv_;
  int saved_stdout_ = -1;  // the real stdout while the text is diverted
  std::vector<std::string> created_;  // files the writability check created: removed if nothing was written
  bool finished_ = false;
  bool main_is_stdout_ = true;
};

// A JSON document as CSV: the rows of `rows_key` (or the document as one row), header = union of keys.
std::string json_to_csv(const Json& document, const std::string& rows_key);

// --device: "cpu, cuda or cuda:N"; the one default rule of every command: cuda (GPU 0) when a CUDA GPU
// is present, else cpu. `extra_help` is appended to the help text.
void declare_device_flag(ArgParser& p, const std::string& extra_help = {});
Device device_from_flags(const ArgParser& p);
constexpr const char* kDeviceDefaultRule = "cuda when a CUDA GPU is present, else cpu";

// --windows N (repeated measurement windows; -r) and --window-s S (minimum seconds of each window).
void declare_window_flags(ArgParser& p, const std::string& windows_default, const std::string& window_s_default);

}  // namespace cnnergy::cli
