// ArgParser implementation.
#include "cli/args.hpp"

#include <algorithm>
#include <cerrno>
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
}  // namespace

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void ArgParser::option(const std::string& name, const std::string& help, std::optional<std::string> default_value,
                       std::vector<std::string> choices) {
  specs_[name] = Spec{help, std::move(default_value), std::move(choices), false};
  order_.push_back(name);
}

void ArgParser::flag(const std::string& name, const std::string& help) {
  specs_[name] = Spec{help, {}, {}, true};
  order_.push_back(name);
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

std::string ArgParser::help() const {
  std::ostringstream os;
  os << "usage: cnnergy " << command_;
  for (const auto& [name, required] : positionals_) os << (required ? " " : " [") << name << (required ? "" : "]");
  if (!order_.empty()) os << " [options]";
  if (allow_passthrough_) os << " [-- CMD ARGS...]";
  os << "\n\n" << summary_ << "\n";
  if (!positionals_.empty()) {
    os << "\narguments:\n";
    for (const auto& [name, required] : positionals_) os << "  " << name << "\n      " << positional_help_.at(name) << "\n";
  }
  os << "\noptions:\n";
  for (const auto& name : order_) {
    const auto& s = specs_.at(name);
    os << "  --" << name << (s.is_flag ? "" : " VALUE") << "\n      " << s.help;
    if (!s.choices.empty()) os << " (one of: " << join(s.choices, ", ") << ")";
    if (s.default_value) os << " [default: " << *s.default_value << "]";
    os << "\n";
  }
  os << "  --help\n      show this help\n";
  if (allow_passthrough_) os << "  -- CMD ARGS...\n      " << passthrough_help_ << "\n";
  if (!epilog_.empty()) os << "\n" << epilog_ << "\n";
  return os.str();
}

bool ArgParser::parse(const std::vector<std::string>& args) {
  std::size_t pos_index = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      if (!allow_passthrough_) throw InvalidArgument("cnnergy " + command_ + " takes no command after '--'");
      passthrough_.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (a.size() > 2 && a.starts_with("--")) {
      std::string name = a.substr(2), value;
      bool has_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      auto it = specs_.find(name);
      if (it == specs_.end()) {
        std::vector<std::string> known;
        for (const auto& n : order_) known.push_back("--" + n);
        throw InvalidArgument("unknown option --" + name + " for 'cnnergy " + command_ +
                              "' (valid: " + join(known, ", ") + ", --help)");
      }
      if (it->second.is_flag) {
        if (has_value) throw InvalidArgument("--" + name + " takes no value");
        values_[name] = "1";
        continue;
      }
      if (!has_value) {
        if (i + 1 >= args.size()) throw InvalidArgument("--" + name + " needs a value");
        value = args[++i];
      }
      const auto& choices = it->second.choices;
      if (!choices.empty() && std::find(choices.begin(), choices.end(), value) == choices.end())
        throw InvalidArgument("invalid value '" + value + "' for --" + name + " (choose one of: " + join(choices, ", ") + ")");
      values_[name] = value;
      continue;
    }
    if (pos_index >= positionals_.size())
      throw InvalidArgument("unexpected argument '" + a + "' for 'cnnergy " + command_ + "' (see --help)");
    values_[positionals_[pos_index++].first] = a;
  }
  for (std::size_t p = pos_index; p < positionals_.size(); ++p)
    if (positionals_[p].second)
      throw InvalidArgument("'cnnergy " + command_ + "' needs " + positionals_[p].first + " (see --help)");
  return true;
}

bool ArgParser::has(const std::string& name) const {
  if (values_.count(name)) return true;
  auto it = specs_.find(name);
  return it != specs_.end() && it->second.default_value.has_value();
}

std::optional<std::string> ArgParser::get_optional(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = specs_.find(name); it != specs_.end()) return it->second.default_value;
  return std::nullopt;
}

std::string ArgParser::get(const std::string& name) const {
  auto v = get_optional(name);
  if (!v) throw InvalidArgument("'cnnergy " + command_ + "' needs --" + name);
  return *v;
}

bool ArgParser::get_flag(const std::string& name) const { return values_.count(name) > 0; }

std::int64_t ArgParser::get_int(const std::string& name, std::int64_t min_value, std::int64_t max_value) const {
  const std::string s = get(name);
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    throw InvalidArgument("--" + name + " must be an integer, got '" + s + "'");
  if (v < min_value || v > max_value)
    throw InvalidArgument("--" + name + " must be between " + std::to_string(min_value) + " and " +
                          std::to_string(max_value) + ", got " + s);
  return v;
}

double ArgParser::get_double(const std::string& name, double min_value, double max_value) const {
  const std::string s = get(name);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || v != v)
    throw InvalidArgument("--" + name + " must be a number, got '" + s + "'");
  if (v < min_value || v > max_value) {
    std::ostringstream os;
    os << "--" << name << " must be between " << min_value << " and " << max_value << ", got " << s;
    throw InvalidArgument(os.str());
  }
  return v;
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
