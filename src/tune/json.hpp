// A small JSON value with a strict parser and an escaping writer: the results store keeps knobs,
// per-GPU energies and environments as JSON columns, and export writes JSON files. Strings are UTF-8;
// invalid UTF-8 is written as U+FFFD so the output is always valid JSON.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cnnergy::tune {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::map<std::string, Json>;  // sorted keys: deterministic output

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : value_(b) {}
  Json(double d) : value_(d) {}
  Json(int i) : value_(static_cast<double>(i)) {}
  Json(std::int64_t i) : value_(static_cast<double>(i)) {}
  Json(std::size_t i) : value_(static_cast<double>(i)) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(Array a) : value_(std::make_shared<Array>(std::move(a))) {}
  Json(Object o) : value_(std::make_shared<Object>(std::move(o))) {}

  bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  bool is_bool() const { return std::holds_alternative<bool>(value_); }
  bool is_number() const { return std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<Array>>(value_); }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(value_); }

  // Typed access; DataError naming the expected type when the value is another type.
  bool as_bool() const;
  double as_number() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;
  // Object member or null when absent (DataError when this is not an object).
  const Json& operator[](const std::string& key) const;

  // Compact serialisation; non-finite numbers become null.
  std::string dump() const;
  // Strict RFC 8259 parse; DataError with the byte offset on malformed input.
  static Json parse(std::string_view text);

 private:
  std::variant<std::monostate, bool, double, std::string, std::shared_ptr<Array>, std::shared_ptr<Object>> value_;
};

// "text" with JSON escapes (quotes included).
std::string json_quote(std::string_view s);
// Shortest decimal that reads back as the same double ("null" for NaN/Inf).
std::string json_number(double v);

}  // namespace cnnergy::tune
