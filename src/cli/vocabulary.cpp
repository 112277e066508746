// The shared flag vocabulary: declarations, the stdout/-o/--format sink, JSON -> CSV, the --device rule.
#include "cli/vocabulary.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/errors.hpp"
#include "report/export.hpp"

namespace cnnergy::cli {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void flush_all() {
  std::cout.flush();
  std::fflush(stdout);
}

void write_all(int fd, const std::string& text) {
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n <= 0) break;  // a closed pipe: nothing more can be said
    off += static_cast<std::size_t>(n);
  }
}

std::string csv_cell(const Json& v) {
  if (v.is_null()) return {};
  if (v.is_string()) return report::csv_field(v.as_string());
  if (v.is_number() || v.is_bool()) return v.dump();
  return report::csv_field(v.dump());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

void declare_output_flags(ArgParser& p, const std::string& main_output, bool main_is_stdout) {
  p.group("Output");
  p.option("out", main_is_stdout ? "write " + main_output +
                                      " to FILE instead of stdout (the format follows --format, or FILE's extension "
                                      ".json/.csv)"
                                : "FILE: " + main_output);
  p.short_alias("out", 'o');
  p.option("format", "what goes to stdout (or -o): human-readable table, or the machine document as JSON or CSV",
           "table", {"table", "json", "csv"});
  p.option("json", "also write the machine-readable result as JSON to FILE ('-' = stdout)");
  p.option("csv", "also write the machine-readable result as CSV to FILE ('-' = stdout)");
  p.group("Options");
}

OutputSink::OutputSink(const ArgParser& p, bool main_is_stdout) : main_is_stdout_(main_is_stdout) {
  format_ = p.get_optional("format").value_or("table");
  if (main_is_stdout) out_ = p.get_optional("out");
  json_ = p.get_optional("json");
  csv_ = p.get_optional("csv");
  if (out_ && !p.given("format")) {
    if (ends_with(*out_, ".json")) format_ = "json";
    else if (ends_with(*out_, ".csv")) format_ = "csv";
  }
  // `--json -` (or the bare deprecated `--json` of devices and monitor) puts the document on stdout: it
  // is then the stdout format, and the text moves to stderr, so stdout stays one parseable document.
  if (!p.given("format")) {
    if (json_ && *json_ == "-") format_ = "json", json_.reset();
    else if (csv_ && *csv_ == "-") format_ = "csv", csv_.reset();
  }
  // Fail before the work, not after it: every file must be writable now.
  for (const auto* path : {&out_, &json_, &csv_}) {
    if (!*path || **path == "-") continue;
    if (!std::filesystem::exists(**path)) created_.push_back(**path);
    std::ofstream probe(**path, std::ios::app);
    if (!probe) throw DataError("cannot write " + **path + ": " + std::strerror(errno));
  }
  if (!main_is_stdout_) return;
  const int target = machine() ? STDERR_FILENO : (out_ && *out_ != "-" ? -2 : -1);
  if (target == -1) return;  // table on stdout: nothing to divert
  flush_all();
  saved_stdout_ = ::dup(STDOUT_FILENO);
  if (saved_stdout_ < 0) throw InternalError(std::string("dup(stdout) failed: ") + std::strerror(errno));
  int fd = target;
  if (target == -2) {
    fd = ::open(out_->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw DataError("cannot write " + *out_ + ": " + std::strerror(errno));
  }
  ::dup2(fd, STDOUT_FILENO);
  if (target == -2) ::close(fd);
}

OutputSink::~OutputSink() {
  if (saved_stdout_ >= 0) {
    flush_all();
    ::dup2(saved_stdout_, STDOUT_FILENO);
    ::close(saved_stdout_);
  }
  if (finished_) return;
  std::error_code ec;  // a command that failed leaves no empty result file behind (text it wrote stays)
  for (const auto& path : created_)
    if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0)
      std::filesystem::remove(path, ec);
}

void OutputSink::to_stdout(const std::string& text) {
  flush_all();
  write_all(saved_stdout_ >= 0 ? saved_stdout_ : STDOUT_FILENO, text);
}

void OutputSink::finish(const Json& document, const std::string& rows_key) {
  finish_text(document.dump(2) + "\n", csv_ || format_ == "csv" ? json_to_csv(document, rows_key) : std::string());
}

void OutputSink::finish_text(const std::string& json_text, const std::string& csv_text) {
  finished_ = true;
  if (machine()) {  // out_ is only set when -o is the stdout destination
    const std::string& text = format_ == "json" ? json_text : csv_text;
    if (out_ && *out_ != "-") report::write_file_atomically(*out_, text);
    else to_stdout(text);
  }
  for (const auto& [path, text] : {std::pair{json_, &json_text}, std::pair{csv_, &csv_text}}) {
    if (!path) continue;
    if (*path == "-") to_stdout(*text);
    else report::write_file_atomically(*path, *text);
  }
}

void OutputSink::finish_with(const std::function<void(const std::string& path)>& write_json,
                             const std::function<void(const std::string& path)>& write_csv) {
  // The store exports write files (atomically, by rename); the text for stdout comes through a temporary.
  auto text_of = [](const std::function<void(const std::string&)>& write) {
    const auto tmp = std::filesystem::temp_directory_path() / ("cnnergy-out-" + std::to_string(::getpid()));
    write(tmp.string());
    std::string text = read_file(tmp.string());
    std::filesystem::remove(tmp);
    return text;
  };
  const bool need_json = json_ || format_ == "json";
  const bool need_csv = csv_ || format_ == "csv";
  finish_text(need_json ? text_of(write_json) : std::string(), need_csv ? text_of(write_csv) : std::string());
}

std::string json_to_csv(const Json& document, const std::string& rows_key) {
  std::vector<const Json*> rows;
  const Json* array = rows_key.empty() || !document.is_object() ? nullptr : document.find(rows_key);
  if (array && array->is_array()) {
    for (const auto& r : array->items()) rows.push_back(&r);
  } else {
    rows.push_back(&document);
  }
  std::vector<std::string> header;
  for (const Json* r : rows) {
    if (!r->is_object()) continue;
    for (const auto& [k, v] : r->members())
      if (std::find(header.begin(), header.end(), k) == header.end()) header.push_back(k);
  }
  std::string out;
  for (std::size_t i = 0; i < header.size(); ++i) out += (i ? "," : "") + report::csv_field(header[i]);
  out += "\n";
  for (const Json* r : rows) {
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (i) out += ",";
      if (const Json* v = r->is_object() ? r->find(header[i]) : nullptr) out += csv_cell(*v);
    }
    out += "\n";
  }
  return out;
}

void declare_device_flag(ArgParser& p, const std::string& extra_help) {
  p.option("device", std::string("cpu, cuda or cuda:N [default: ") + kDeviceDefaultRule + "]" +
                         (extra_help.empty() ? "" : "; " + extra_help));
}

Device device_from_flags(const ArgParser& p) {
  if (auto d = p.get_optional("device")) return parse_device(*d);
  return parse_device(cuda_device_count() > 0 ? "cuda" : "cpu");
}

void declare_window_flags(ArgParser& p, const std::string& windows_default, const std::string& window_s_default) {
  p.group("Measurement");
  p.option("windows", "repeated measurement windows per result (>= 3 gives a spread)", windows_default);
  p.short_alias("windows", 'r');
  p.option("window-s", "minimum length of each measurement window, in seconds", window_s_default);
  p.group("Options");
}

}  // namespace cnnergy::cli
