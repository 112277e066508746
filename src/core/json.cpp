// JSON writing and the strict parser (see json.hpp for the rules).
#include "core/json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/errors.hpp"

namespace cnnergy {

namespace {

const Json kNull;

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not valid.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t len = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
  else return 0;
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  // Reject overlong forms, surrogates and values beyond U+10FFFF.
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return len;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Json document() {
    Json v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError("malformed JSON at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  Json value(int depth) {
    if (depth > 200) fail("nesting deeper than 200 levels");
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end of input");
    const char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json(string());
    if (consume("true")) return Json(true);
    if (consume("false")) return Json(false);
    if (consume("null")) return Json();
    return Json(number());
  }
  Json object(int depth) {
    ++pos_;
    Json obj = Json::object();
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return obj;
    }
    for (;;) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a member name");
      std::string key = string();
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') fail("expected ':'");
      ++pos_;
      obj[key] = value(depth + 1);  // a repeated key: the last one wins, in the first one's place
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return obj; }
      fail("expected ',' or '}'");
    }
  }
  Json array(int depth) {
    ++pos_;
    Json::Array arr;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Json(std::move(arr));
    }
    for (;;) {
      arr.push_back(value(depth + 1));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') { ++pos_; continue; }
      if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return Json(std::move(arr)); }
      fail("expected ',' or ']'");
    }
  }
  std::uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    std::uint32_t v = 0;
    auto [p, ec] = std::from_chars(s_.data() + pos_, s_.data() + pos_ + 4, v, 16);
    if (ec != std::errc() || p != s_.data() + pos_ + 4) fail("bad \\u escape");
    pos_ += 4;
    return v;
  }
  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_];
      if (c == '"') { ++pos_; return out; }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        const std::size_t len = utf8_length(s_, pos_);
        if (!len) fail("invalid UTF-8 in string");
        out.append(s_.substr(pos_, len));
        pos_ += len;
        continue;
      }
      if (++pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!consume("\\u")) fail("lone high surrogate");
            const std::uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("lone low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail(std::string("unknown escape \\") + e);
      }
    }
  }
  double number() {
    const std::size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const std::size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    const std::size_t int_start = pos_;
    if (!digits()) fail("expected a value");
    if (s_[int_start] == '0' && pos_ - int_start > 1) fail("leading zero in number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) fail("expected digits after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) fail("expected digits in exponent");
    }
    double v = 0;
    auto [p, ec] = std::from_chars(s_.data() + start, s_.data() + pos_, v);
    if (ec != std::errc() || p != s_.data() + pos_) fail("number out of range");
    return v;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

[[noreturn]] void type_error(const char* expected) { throw DataError(std::string("JSON value is not ") + expected); }

}  // namespace

Json::Json(Object o) : type_(Type::kObject) {
  members_.reserve(o.size());
  for (auto& [k, v] : o) members_.emplace_back(k, std::move(v));
}

Json Json::object() {
  Json j;
  j.type_ = Type::kObject;
  return j;
}

double Json::number(const std::string& what) const {
  if (type_ != Type::kNumber) throw DataError(what + " must be a number");
  return number_;
}
const std::string& Json::str(const std::string& what) const {
  if (type_ != Type::kString) throw DataError(what + " must be a string");
  return string_;
}
bool Json::boolean(const std::string& what) const {
  if (type_ != Type::kBool) throw DataError(what + " must be true or false");
  return bool_;
}

bool Json::as_bool() const {
  if (!is_bool()) type_error("a boolean");
  return bool_;
}
double Json::as_number() const {
  if (!is_number()) type_error("a number");
  return number_;
}
const std::string& Json::as_string() const {
  if (!is_string()) type_error("a string");
  return string_;
}
const Json::Array& Json::as_array() const {
  if (!is_array()) type_error("an array");
  return items_;
}
const Json::Members& Json::as_object() const {
  if (!is_object()) type_error("an object");
  return members_;
}

const Json& Json::operator[](const std::string& key) const {
  if (!is_object()) type_error("an object");
  const Json* v = find(key);
  return v ? *v : kNull;
}

Json& Json::operator[](const std::string& key) {
  if (type_ == Type::kNull) type_ = Type::kObject;
  if (type_ != Type::kObject) throw InternalError("JSON value is not an object");
  for (auto& [k, v] : members_)
    if (k == key) return v;
  members_.emplace_back(key, Json());
  return members_.back().second;
}

const Json* Json::find(const std::string& key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& [k, v] : members_)
    if (k == key) return &v;
  return nullptr;
}

const Json& Json::at(const std::string& key) const {
  const Json* v = find(key);
  if (!v) throw DataError("missing field '" + key + "'");
  return *v;
}

void Json::push_back(Json value) {
  if (type_ == Type::kNull) type_ = Type::kArray;
  if (type_ != Type::kArray) throw InternalError("JSON value is not an array");
  items_.push_back(std::move(value));
}

void Json::dump_to(std::string& out, int indent, int depth) const {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<std::size_t>(indent * d), ' ');
  };
  switch (type_) {
    case Type::kNull:
      out += "null";
      break;
    case Type::kBool:
      out += bool_ ? "true" : "false";
      break;
    case Type::kNumber:
      out += json_number(number_);
      break;
    case Type::kString:
      out += json_quote(string_);
      break;
    case Type::kArray:
      out += '[';
      for (std::size_t i = 0; i < items_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        items_[i].dump_to(out, indent, depth + 1);
      }
      if (!items_.empty()) newline(depth);
      out += ']';
      break;
    case Type::kObject:
      out += '{';
      for (std::size_t i = 0; i < members_.size(); ++i) {
        if (i) out += ',';
        newline(depth + 1);
        out += json_quote(members_[i].first);
        out += indent < 0 ? ":" : ": ";
        members_[i].second.dump_to(out, indent, depth + 1);
      }
      if (!members_.empty()) newline(depth);
      out += '}';
      break;
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

Json Json::parse(std::string_view text) { return Parser(text).document(); }

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      default: break;
    }
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    // '<' and '>' escaped too, so JSON embedded in an HTML <script> can never close the element.
    if (c == '<') { out += "\\u003c"; ++i; continue; }
    if (c == '>') { out += "\\u003e"; ++i; continue; }
    const std::size_t len = utf8_length(s, i);
    if (!len) {
      out += "\xEF\xBF\xBD";  // U+FFFD for a byte that is not valid UTF-8
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  out += '"';
  return out;
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) {  // exactly an integer: no exponent, no ".0"
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<std::int64_t>(v));
    if (ec == std::errc()) return std::string(buf, p);
  }
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "null";
  return std::string(buf, p);
}

std::int64_t json_integer(const Json& j, const std::string& what, std::int64_t lo, std::int64_t hi) {
  const double v = j.number(what);
  // [lo, hi] as doubles: hi = INT64_MAX rounds up to 2^63, so the upper test is strict there.
  const double dlo = static_cast<double>(lo), dhi = static_cast<double>(hi);
  const bool above = dhi >= 9.2e18 ? v >= dhi : v > dhi;
  if (!std::isfinite(v) || v != std::floor(v) || v < dlo || above)
    throw DataError(what + " must be a whole number from " + std::to_string(lo) + " to " +
                    std::to_string(hi) + ", not " + json_number(v));
  return static_cast<std::int64_t>(v);
}

double json_number_in(const Json& j, const std::string& what, double lo, double hi) {
  const double v = j.number(what);
  if (!std::isfinite(v) || v < lo || v > hi)
    throw DataError(what + " must be a number from " + json_number(lo) + " to " + json_number(hi) +
                    ", not " + json_number(v));
  return v;
}

}  // namespace cnnergy
