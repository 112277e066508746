// A small flag parser shared by every command: --name VALUE, --name=VALUE, boolean --flag, and
// everything after "--" as a passthrough command. Unknown flags and bad values throw
// InvalidArgument with the valid choices, so every command reports them the same way.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cnnergy::cli {

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary);

  // Declarations (before parse). `choices` (optional) restricts the value and is listed in errors.
  void option(const std::string& name, const std::string& help, std::optional<std::string> default_value = {},
              std::vector<std::string> choices = {});
  void flag(const std::string& name, const std::string& help);
  void positional(const std::string& name, const std::string& help, bool required = true);
  void allow_passthrough(const std::string& help);  // accepts "-- CMD ARGS..."
  void epilog(const std::string& text);

  // Returns false when --help was given (help already printed to stdout).
  bool parse(const std::vector<std::string>& args);
  std::string help() const;

  bool has(const std::string& name) const;  // given on the command line (or has a default)
  std::string get(const std::string& name) const;  // throws when absent and no default
  std::optional<std::string> get_optional(const std::string& name) const;
  bool get_flag(const std::string& name) const;
  std::int64_t get_int(const std::string& name, std::int64_t min_value, std::int64_t max_value) const;
  double get_double(const std::string& name, double min_value, double max_value) const;
  const std::vector<std::string>& passthrough() const { return passthrough_; }

 private:
  struct Spec {
    std::string help;
    std::optional<std::string> default_value;
    std::vector<std::string> choices;
    bool is_flag = false;
  };
  std::string command_, summary_, epilog_, passthrough_help_;
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::vector<std::pair<std::string, bool>> positionals_;
  std::map<std::string, std::string> positional_help_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> passthrough_;
  bool allow_passthrough_ = false;
};

// Comma-separated list "64,128,256" -> items (trimmed, non-empty; throws on an empty item).
std::vector<std::string> split_list(const std::string& text, const std::string& what);

}  // namespace cnnergy::cli
