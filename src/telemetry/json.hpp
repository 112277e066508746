// A small JSON value (parse and print) for the knob journal and the telemetry commands' --json
// output. Objects keep insertion order so files read well; parse errors are DataError with the
// byte offset, so a corrupt journal is reported, never half-trusted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace cnnergy::telemetry {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  Json() = default;
  Json(std::nullptr_t) {}
  Json(bool b) : type_(Type::kBool), bool_(b) {}
  template <class T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Json(T v) : type_(Type::kNumber), number_(static_cast<double>(v)) {}
  Json(std::string s) : type_(Type::kString), string_(std::move(s)) {}
  Json(const char* s) : type_(Type::kString), string_(s) {}

  static Json array() {
    Json j;
    j.type_ = Type::kArray;
    return j;
  }
  static Json object() {
    Json j;
    j.type_ = Type::kObject;
    return j;
  }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Typed access; the wrong type throws DataError naming `what` (e.g. "journal entry 'uuid'").
  double number(const std::string& what = "value") const;
  const std::string& str(const std::string& what = "value") const;
  bool boolean(const std::string& what = "value") const;

  // Objects: operator[] inserts (turning null into an object); find returns nullptr when absent.
  Json& operator[](const std::string& key);
  const Json* find(const std::string& key) const;
  const Json& at(const std::string& key) const;  // throws DataError when absent
  const std::vector<std::pair<std::string, Json>>& members() const { return members_; }

  // Arrays.
  void push_back(Json value);
  const std::vector<Json>& items() const { return items_; }

  // indent < 0: one line; otherwise pretty-printed with that many spaces.
  std::string dump(int indent = -1) const;
  static Json parse(std::string_view text);

 private:
  void dump_to(std::string& out, int indent, int depth) const;

  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> items_;
  std::vector<std::pair<std::string, Json>> members_;
};

// A JSON number for an optional reading: null when empty.
template <class T>
Json json_or_null(const T& opt) {
  return opt ? Json(*opt) : Json();
}

}  // namespace cnnergy::telemetry
