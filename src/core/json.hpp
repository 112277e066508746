// The one JSON value of the project: the knob journal, every command's --json output, the results
// store's JSON columns and the exports. Objects keep insertion order (files read in the order they
// were written; objects built from a std::map come out sorted, hence deterministic). The parser is
// strict RFC 8259 (valid UTF-8, surrogate pairs, no leading zeros) and reports DataError with the
// byte offset, so a corrupt file is refused, never half-trusted. The writer always produces valid
// JSON: invalid UTF-8 becomes U+FFFD, '<' and '>' are escaped (safe inside an HTML <script>),
// non-finite numbers are null, integers print as integers and other numbers as the shortest text
// that reads back as the same double.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace cnnergy {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Object = std::map<std::string, Json>;                // a sorted object to build from
  using Members = std::vector<std::pair<std::string, Json>>;  // an object's members in order

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::kBool), bool_(b) {}
  template <class T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Json(T v) : type_(Type::kNumber), number_(static_cast<double>(v)) {}
  Json(std::string s) : type_(Type::kString), string_(std::move(s)) {}
  Json(const char* s) : type_(Type::kString), string_(s) {}
  Json(Array a) : type_(Type::kArray), items_(std::move(a)) {}
  Json(Object o);

  static Json array() { return Json(Array{}); }
  static Json object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Typed access; the wrong type throws DataError naming `what` (e.g. "journal entry 'uuid'").
  double number(const std::string& what = "value") const;
  const std::string& str(const std::string& what = "value") const;
  bool boolean(const std::string& what = "value") const;
  // The same without a name ("JSON value is not a number").
  bool as_bool() const;
  double as_number() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  const Members& as_object() const;

  // Objects. The const operator[] gives null for an absent key (DataError unless this is an
  // object); the non-const one inserts (turning null into an object). find: nullptr when absent;
  // at: DataError when absent.
  const Json& operator[](const std::string& key) const;
  Json& operator[](const std::string& key);
  const Json* find(const std::string& key) const;
  const Json& at(const std::string& key) const;
  const Members& members() const { return members_; }

  // Arrays (push_back turns null into an array).
  void push_back(Json value);
  const Array& items() const { return items_; }

  // indent < 0: one line; otherwise pretty-printed with that many spaces.
  std::string dump(int indent = -1) const;
  static Json parse(std::string_view text);

 private:
  void dump_to(std::string& out, int indent, int depth) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  Array items_;
  Members members_;
};

// A JSON number for an optional reading: null when empty.
template <class T>
Json json_or_null(const T& opt) {
  return opt ? Json(*opt) : Json();
}

// "text" with JSON escapes (quotes included; see the writer's rules above).
std::string json_quote(std::string_view s);
// An integer as an integer, any other finite number as the shortest text that reads back as the
// same double, "null" for NaN and infinities.
std::string json_number(double v);

// Numbers read from files, checked before any cast (casting an out-of-range double to an integer is
// undefined behaviour): a whole number in [lo, hi], or a finite number in [lo, hi]. The DataError
// names `what`, the range and the value as written (json_number: every digit that matters).
std::int64_t json_integer(const Json& j, const std::string& what, std::int64_t lo, std::int64_t hi);
double json_number_in(const Json& j, const std::string& what, double lo, double hi);

}  // namespace cnnergy
