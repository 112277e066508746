// ArgParser over CLI11: the declarations are kept here and turned into a CLI::App for each parse and
// each help text, so CLI11's headers stay out of every command's translation unit. CLI11 does the
// tokenising, short options, --name=value, groups and help layout; this file adds what CLI11 2.1 lacks:
// "did you mean", deprecated spellings with a note, and messages that list the valid choices.
#include "cli/args.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/errors.hpp"

namespace cnnergy::cli {

namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

// The placeholder shown after an option in --help: FILE where the help text speaks of a file.
std::string value_name(const std::string& help) { return help.find("FILE") != std::string::npos ? "FILE" : "VALUE"; }

// Options that name a file or folder wherever a command declares them.
const char* const kPathOptions[] = {"algo-cache", "baseline", "checkpoint", "csv", "db", "html", "init",
                                    "inputs", "journal", "json", "jsonl", "out", "outputs", "report",
                                    "resume-from", "save", "socket"};

constexpr const char* kDeprecatedGroup = "Deprecated spellings (still accepted until the next release)";

}  // namespace

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void ArgParser::option(const std::string& name, const std::string& help, std::optional<std::string> default_value,
                       std::vector<std::string> choices) {
  if (!specs_.count(name)) order_.push_back(name);
  deprecated_.erase(name);  // a real declaration wins over an older alias of the same spelling
  Spec s;
  s.help = help;
  s.default_value = std::move(default_value);
  s.choices = std::move(choices);
  s.group = current_group_;
  specs_[name] = std::move(s);
}

void ArgParser::flag(const std::string& name, const std::string& help) {
  if (!specs_.count(name)) order_.push_back(name);
  deprecated_.erase(name);
  Spec s;
  s.help = help;
  s.is_flag = true;
  s.group = current_group_;
  specs_[name] = std::move(s);
}

void ArgParser::positional(const std::string& name, const std::string& help, bool required) {
  positionals_.emplace_back(name, required);
  positional_help_[name] = help;
}

void ArgParser::allow_passthrough(const std::string& help) {
  allow_passthrough_ = true;
  passthrough_help_ = help;
}

void ArgParser::epilog(const std::string& text) { epilog_ = text; }

void ArgParser::group(const std::string& title) { current_group_ = title; }

void ArgParser::short_alias(const std::string& name, char letter) {
  auto it = specs_.find(name);
  if (it == specs_.end()) throw InternalError("short_alias for undeclared option --" + name);
  it->second.short_names.push_back(std::string(1, letter));
}

void ArgParser::alias(const std::string& name, const std::string& other) {
  auto it = specs_.find(name);
  if (it == specs_.end()) throw InternalError("alias for undeclared option --" + name);
  it->second.long_aliases.push_back(other);
}

void ArgParser::deprecated_alias(const std::string& old_name, const std::string& new_name, const std::string& note) {
  if (!specs_.count(new_name)) throw InternalError("deprecated alias --" + old_name + " of undeclared --" + new_name);
  if (specs_.count(old_name)) return;  // the command still declares the old spelling itself: leave it alone
  deprecated_[old_name] = Deprecated{new_name, note};
}

void ArgParser::implicit_value(const std::string& name, const std::string& implicit, const std::string& deprecation_note) {
  auto it = specs_.find(name);
  if (it == specs_.end() || it->second.is_flag) throw InternalError("implicit value for undeclared option --" + name);
  it->second.implicit = implicit;
  it->second.implicit_note = deprecation_note;
}

// CLI11's name list of an option: "-o,--out,--output-file".
std::string ArgParser::cli11_names(const std::string& name, const Spec& s) {
  std::string names;
  for (const auto& sn : s.short_names) names += "-" + sn + ",";
  names += "--" + name;
  for (const auto& a : s.long_aliases) names += ",--" + a;
  return names;
}

const std::string& ArgParser::resolve(const std::string& name) const {
  auto it = deprecated_.find(name);
  return it == deprecated_.end() ? name : it->second.target;
}

std::vector<std::string> ArgParser::option_names() const { return order_; }

std::string ArgParser::help() const {
  // Rendered by CLI11's formatter from the same App parse() uses (see build below).
  std::ostringstream os;
  CLI::App app(summary_, "cnnergy " + command_);
  app.set_help_flag("-h,--help", "show this help and exit");
  app.get_formatter()->column_width(34);
  for (std::size_t i = 0; i < positionals_.size(); ++i) {
    const auto& [name, required] = positionals_[i];
    auto* o = app.add_option(name)->description(positional_help_.at(name));
    if (required) o->required();
  }
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    const std::string names = cli11_names(name, s);
    std::string desc = s.help;
    if (s.default_value && !s.default_value->empty()) desc += " [default: " + *s.default_value + "]";
    // (The two-argument add_option/add_flag would bind the description as the option's variable.)
    CLI::Option* o = (s.is_flag ? app.add_flag(names) : app.add_option(names))->description(desc);
    if (!s.is_flag) o->option_text(s.choices.empty() ? (s.implicit ? "[" + value_name(s.help) + "]" : value_name(s.help)) : "{" + join(s.choices, ",") + "}");
    o->group(s.group);
  }
  for (const auto& [old_name, d] : deprecated_) {
    const Spec& target = specs_.at(d.target);
    const std::string desc = "use --" + d.target + (d.note.empty() ? "" : " (" + d.note + ")");
    CLI::Option* o = (target.is_flag ? app.add_flag("--" + old_name) : app.add_option("--" + old_name))->description(desc);
    if (!target.is_flag) o->option_text("VALUE");
    o->group(kDeprecatedGroup);
  }
  std::string footer;
  if (allow_passthrough_) footer += "-- CMD ARGS...  " + passthrough_help_ + "\n";
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    if (s.implicit && !s.implicit_note.empty())
      footer += "--" + name + " without a value is deprecated: " + s.implicit_note + "\n";
  }
  if (!epilog_.empty()) footer += (footer.empty() ? "" : "\n") + epilog_ + "\n";
  if (!footer.empty()) app.footer(footer);
  os << app.help();
  std::string text = os.str();
  if (allow_passthrough_) {  // CLI11's usage line does not know about the passthrough command
    const auto usage = text.find("Usage:");
    const auto eol = usage == std::string::npos ? usage : text.find('\n', usage);
    if (eol != std::string::npos) text.insert(eol, " [-- CMD ARGS...]");
  }
  return text;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string ArgParser::nearest_option(const std::string& unknown) const {
  std::string best;
  std::size_t best_d = std::string::npos;
  auto consider = [&](const std::string& name) {
    // A prefix ("--epoch" for "--epochs") or a small typo; the bound keeps "--x" from matching anything.
    std::size_t d = edit_distance(unknown, name);
    if (name.starts_with(unknown) && unknown.size() >= 3) d = std::min<std::size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = name;
    }
  };
  for (const auto& n : order_) {
    consider(n);
    for (const auto& a : specs_.at(n).long_aliases) consider(a);
  }
  for (const auto& [n, d] : deprecated_) consider(n);
  const std::size_t bound = std::max<std::size_t>(2, unknown.size() / 3);
  if (best_d > bound) return {};
  return resolve(best);
}

bool ArgParser::parse(const std::vector<std::string>& args) {
  // The passthrough command is everything after the first "--", never seen by CLI11.
  auto dashes = std::find(args.begin(), args.end(), std::string("--"));
  std::vector<std::string> own(args.begin(), dashes);
  if (dashes != args.end()) {
    if (!allow_passthrough_) throw InvalidArgument("cnnergy " + command_ + " takes no command after '--'");
    passthrough_.assign(dashes + 1, args.end());
  }

  CLI::App app(summary_, "cnnergy " + command_);
  app.set_help_flag("-h,--help", "show this help and exit");
  std::map<std::string, CLI::Option*> opts, old_opts;
  std::vector<CLI::Option*> pos;
  for (const auto& spec : positionals_) pos.push_back(app.add_option(spec.first));
  auto choice_check = [](const std::vector<std::string>& choices) {
    return CLI::Validator(
        [choices](std::string& v) -> std::string {
          if (std::find(choices.begin(), choices.end(), v) != choices.end()) return {};
          return "invalid value '" + v + "' (choose one of: " + join(choices, ", ") + ")";
        },
        "{" + join(choices, ",") + "}");
  };
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    const std::string names = cli11_names(name, s);
    CLI::Option* o = nullptr;
    if (s.is_flag) {
      o = app.add_flag(names);
    } else {
      o = app.add_option(names);
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      if (s.implicit) o->expected(0, 1);
      if (!s.choices.empty()) o->check(choice_check(s.choices));
    }
    opts[name] = o;
  }
  for (const auto& [old_name, d] : deprecated_) {
    const Spec& target = specs_.at(d.target);
    CLI::Option* o = target.is_flag ? app.add_flag("--" + old_name) : app.add_option("--" + old_name);
    if (!target.is_flag) {
      o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      if (!target.choices.empty()) o->check(choice_check(target.choices));
    }
    old_opts[old_name] = o;
  }

  try {
    std::vector<std::string> reversed(own.rbegin(), own.rend());  // CLI11 takes a vector in reverse order
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(help().c_str(), stdout);
    return false;
  } catch (const CLI::ExtrasError&) {
    for (const auto& extra : app.remaining()) {
      if (extra.size() > 1 && extra[0] == '-' && !(extra[1] >= '0' && extra[1] <= '9')) {
        std::string name = extra.substr(extra.starts_with("--") ? 2 : 1);
        name = name.substr(0, name.find('='));
        const std::string near = nearest_option(name);
        throw InvalidArgument("unknown option " + extra.substr(0, extra.find('=')) + " for 'cnnergy " + command_ + "'" +
                              (near.empty() ? "" : "; did you mean --" + near + "?") + " (see cnnergy " + command_ +
                              " --help)");
      }
    }
    const auto rest = app.remaining();
    throw InvalidArgument("unexpected argument '" + (rest.empty() ? std::string() : rest.front()) + "' for 'cnnergy " +
                          command_ + "' (see cnnergy " + command_ + " --help)");
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    // CLI11 prefixes validation messages with the option's full name list ("-o,--out: ...").
    throw InvalidArgument(msg + " (see cnnergy " + command_ + " --help)");
  }

  for (const auto& [name, o] : opts) {
    if (o->count() == 0) continue;
    const Spec& s = specs_.at(name);
    if (s.is_flag) {
      values_[name] = "1";
      continue;
    }
    const auto& r = o->results();
    if (r.empty() || (s.implicit && r.back().empty())) {
      values_[name] = *s.implicit;
      if (!s.implicit_note.empty()) warnings_.push_back("--" + name + " without a value is deprecated: " + s.implicit_note);
    } else {
      values_[name] = r.back();
    }
  }
  for (const auto& [name, o] : opts) {
    const Spec& s = specs_.at(name);
    const auto it = values_.find(name);
    if (it == values_.end() || s.is_flag || (s.implicit && it->second == *s.implicit)) continue;
    if (is_path_option(name, s.help)) check_path_value(name, it->second);
  }
  for (const auto& [old_name, o] : old_opts) {
    if (o->count() == 0) continue;
    const Deprecated& d = deprecated_.at(old_name);
    warnings_.push_back("--" + old_name + " is deprecated and will be removed in the next release; use --" + d.target +
                        (d.note.empty() ? "" : " (" + d.note + ")"));
    if (values_.count(d.target)) continue;  // the new spelling, when both are given, wins
    values_[d.target] = specs_.at(d.target).is_flag ? "1" : o->results().back();
  }
  for (std::size_t i = 0; i < positionals_.size(); ++i) {
    if (pos[i]->count() > 0) {
      values_[positionals_[i].first] = pos[i]->results().back();
    } else if (positionals_[i].second) {
      throw InvalidArgument("'cnnergy " + command_ + "' needs " + positionals_[i].first + " (see cnnergy " + command_ +
                            " --help)");
    }
  }
  for (const auto& w : warnings_) std::fprintf(stderr, "cnnergy: warning: %s\n", w.c_str());
  return true;
}

bool ArgParser::given(const std::string& name) const { return values_.count(resolve(name)) > 0; }

bool ArgParser::has(const std::string& name) const {
  const std::string& n = resolve(name);
  if (values_.count(n)) return true;
  auto it = specs_.find(n);
  return it != specs_.end() && it->second.default_value.has_value();
}

std::optional<std::string> ArgParser::get_optional(const std::string& name) const {
  const std::string& n = resolve(name);
  if (auto it = values_.find(n); it != values_.end()) return it->second;
  if (auto it = specs_.find(n); it != specs_.end()) return it->second.default_value;
  return std::nullopt;
}

std::string ArgParser::get(const std::string& name) const {
  auto v = get_optional(name);
  if (!v) throw InvalidArgument("'cnnergy " + command_ + "' needs --" + resolve(name));
  return *v;
}

bool ArgParser::get_flag(const std::string& name) const { return values_.count(resolve(name)) > 0; }

bool ArgParser::is_flag(const std::string& name) const {
  const auto it = specs_.find(resolve(name));
  return it != specs_.end() && it->second.is_flag;
}

std::int64_t ArgParser::get_int(const std::string& name, std::int64_t min_value, std::int64_t max_value) const {
  const std::string s = get(name);
  const std::string& n = resolve(name);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    throw InvalidArgument("--" + n + " must be an integer, got '" + s + "'");
  if (v < min_value || v > max_value)
    throw InvalidArgument("--" + n + " must be between " + std::to_string(min_value) + " and " +
                          std::to_string(max_value) + ", got " + s);
  return v;
}

double ArgParser::get_double(const std::string& name, double min_value, double max_value) const {
  const std::string s = get(name);
  const std::string& n = resolve(name);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || v != v)
    throw InvalidArgument("--" + n + " must be a number, got '" + s + "'");
  if (v < min_value || v > max_value) {
    std::ostringstream os;
    os << "--" << n << " must be between " << min_value << " and " << max_value << ", got " << s;
    throw InvalidArgument(os.str());
  }
  return v;
}

bool is_path_option(const std::string& name, const std::string& help) {
  for (const char* p : kPathOptions)
    if (name == p) return true;
  return help.find("FILE") != std::string::npos || help.find("DIR") != std::string::npos;
}

void check_path_value(const std::string& option, const std::string& value) {
  if (value.find_first_not_of(" \t") == std::string::npos)
    throw InvalidArgument("--" + option + " is empty: give a path (a file or folder name)");
  if (value.size() >= PATH_MAX)
    throw InvalidArgument("--" + option + " is " + std::to_string(value.size()) +
                          " characters long; no path can be longer than " + std::to_string(PATH_MAX - 1));
  std::size_t start = 0;
  while (start <= value.size()) {
    const std::size_t end = std::min(value.find('/', start), value.size());
    if (end - start > NAME_MAX)
      throw InvalidArgument("--" + option + " has a name of " + std::to_string(end - start) +
                            " characters; no file or folder name can be longer than " + std::to_string(NAME_MAX));
    start = end + 1;
  }
}

std::vector<std::string> split_list(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(text);
  while (std::getline(is, cur, ',')) {
    cur.erase(0, cur.find_first_not_of(" \t"));
    cur.erase(cur.find_last_not_of(" \t") + 1);
    if (cur.empty()) throw InvalidArgument("empty item in " + what + " list '" + text + "'");
    out.push_back(cur);
  }
  if (out.empty()) throw InvalidArgument("empty " + what + " list");
  return out;
}

}  // namespace cnnergy::cli
