// The flag parser every command declares its options through: a thin facade over CLI11 (Debian's
// libcli11-dev) that keeps one vocabulary — --name VALUE, --name=VALUE, -x short aliases, grouped help,
// "did you mean" for unknown flags, deprecated spellings that still work with a note on stderr, and
// everything after "--" as a passthrough command. Bad values throw InvalidArgument (exit 2) with choices.
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

  // Vocabulary extensions (all optional; call after the option is declared unless stated).
  // Options and flags declared after group() are listed under that heading in --help.
  void group(const std::string& title);
  void short_alias(const std::string& name, char letter);            // -o for --out
  void alias(const std::string& name, const std::string& other);      // a second long spelling, not deprecated
  // An old spelling that still works for one release: using it prints "cnnergy: warning: --OLD is
  // deprecated ...; use --NEW" on stderr (plus `note`) and sets NEW. get(OLD) reads NEW.
  void deprecated_alias(const std::string& old_name, const std::string& new_name, const std::string& note = {});
  // The option may be given without a value (`--json` alone): it then takes `implicit`, and when
  // `deprecation_note` is non-empty that bare form prints it as a deprecation warning.
  void implicit_value(const std::string& name, const std::string& implicit, const std::string& deprecation_note = {});

  // Returns false when --help was given (help already printed to stdout).
  bool parse(const std::vector<std::string>& args);
  std::string help() const;

  bool has(const std::string& name) const;  // given on the command line (or has a default)
  bool given(const std::string& name) const;  // given on the command line (defaults do not count)
  std::string get(const std::string& name) const;  // throws when absent and no default
  std::optional<std::string> get_optional(const std::string& name) const;
  bool get_flag(const std::string& name) const;
  std::int64_t get_int(const std::string& name, std::int64_t min_value, std::int64_t max_value) const;
  double get_double(const std::string& name, double min_value, double max_value) const;
  const std::vector<std::string>& passthrough() const { return passthrough_; }
  const std::vector<std::string>& warnings() const { return warnings_; }  // deprecation notes printed by parse
  const std::string& command() const { return command_; }
  std::vector<std::string> option_names() const;  // long names in declaration order (no aliases)
  bool is_flag(const std::string& name) const;     // declared with flag() (takes no value)

 private:
  struct Spec {
    std::string help;
    std::optional<std::string> default_value;
    std::vector<std::string> choices;
    bool is_flag = false;
    std::string group;
    std::vector<std::string> short_names, long_aliases;
    std::optional<std::string> implicit;
    std::string implicit_note;
  };
  struct Deprecated {
    std::string target, note;
  };
  static std::string cli11_names(const std::string& name, const Spec& s);
  const std::string& resolve(const std::string& name) const;  // deprecated alias -> its target
  std::string nearest_option(const std::string& unknown) const;

  std::string command_, summary_, epilog_, passthrough_help_, current_group_ = "Options";
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, Deprecated> deprecated_;
  std::vector<std::pair<std::string, bool>> positionals_;
  std::map<std::string, std::string> positional_help_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> passthrough_, warnings_;
  bool allow_passthrough_ = false;
};

// The one rule for every option that names a file or folder (the vocabulary's path options, and any
// option whose help speaks of a FILE or DIR): a given value that is empty, or that no file system can
// hold (longer than PATH_MAX, or a name in it longer than NAME_MAX), is refused with InvalidArgument
// (exit 2) before the command does anything. parse() applies it; check_path_value is for values that
// arrive another way (an environment variable).
bool is_path_option(const std::string& name, const std::string& help);
void check_path_value(const std::string& option, const std::string& value);

// Comma-separated list "64,128,256" -> items (trimmed, non-empty; throws on an empty item).
std::vector<std::string> split_list(const std::string& text, const std::string& what);

// Levenshtein distance, for "did you mean" (also used for command names).
std::size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace cnnergy::cli
