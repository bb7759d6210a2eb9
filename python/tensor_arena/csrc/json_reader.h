// A small JSON reader for the allocator library's own output.
//
// The device extensions turn the library's statistics and snapshot (JSON
// text from tensor_arena_device_stats_json / tensor_arena_snapshot_json)
// into torch's C++ structs. The text always comes from the library, never
// from a user, but the reader still never crashes on bad input: it answers
// an empty value, and the callers then report zeros or no segments.
// Integers are kept as int64 (sizes and addresses fit), other numbers as
// double; only the escapes the library writes are decoded (\" \\ \/ \n \t
// \r \b \f; \uXXXX becomes '?').

#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tensor_arena::json {

struct Value {
  enum class Kind { Null, Bool, Int, Float, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::int64_t integer = 0;
  double number = 0.0;
  std::string text;
  std::vector<Value> items;
  std::map<std::string, Value, std::less<>> fields;

  // The field `key` of an object, or a shared null value.
  const Value& operator[](std::string_view key) const {
    static const Value null_value;
    if (kind != Kind::Object) {
      return null_value;
    }
    auto it = fields.find(key);
    return it == fields.end() ? null_value : it->second;
  }

  std::int64_t as_int(std::int64_t otherwise = 0) const {
    if (kind == Kind::Int) {
      return integer;
    }
    if (kind == Kind::Float) {
      return static_cast<std::int64_t>(number);
    }
    if (kind == Kind::Bool) {
      return boolean ? 1 : 0;
    }
    return otherwise;
  }

  const std::string& as_string() const {
    return text;
  }
};

class Reader {
 public:
  explicit Reader(std::string_view text) : s_(text) {}

  // The whole document, or a null value when it is not valid JSON.
  Value parse() {
    Value v;
    if (!value(v, 0)) {
      return Value{};
    }
    skip();
    return pos_ == s_.size() ? v : Value{};
  }

 private:
  // Deeper documents than this are refused rather than recursed into.
  static constexpr int kMaxDepth = 64;

  std::string_view s_;
  std::size_t pos_ = 0;

  void skip() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) {
      return false;
    }
    pos_ += word.size();
    return true;
  }

  bool string(std::string& out) {
    if (pos_ >= s_.size() || s_[pos_] != '"') {
      return false;
    }
    ++pos_;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') {
        return true;
      }
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) {
        return false;
      }
      char e = s_[pos_++];
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'u':
          if (pos_ + 4 > s_.size()) {
            return false;
          }
          pos_ += 4;
          out.push_back('?');
          break;
        default: out.push_back(e); break;
      }
    }
    return false;
  }

  bool number(Value& v) {
    std::size_t start = pos_;
    bool is_float = false;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
      } else if (!((c >= '0' && c <= '9') || c == '-' || c == '+')) {
        break;
      }
      ++pos_;
    }
    if (pos_ == start) {
      return false;
    }
    std::string digits(s_.substr(start, pos_ - start));
    char* end = nullptr;
    if (is_float) {
      v.kind = Value::Kind::Float;
      v.number = std::strtod(digits.c_str(), &end);
    } else {
      v.kind = Value::Kind::Int;
      v.integer = std::strtoll(digits.c_str(), &end, 10);
      v.number = static_cast<double>(v.integer);
    }
    return end == digits.c_str() + digits.size();
  }

  bool value(Value& v, int depth) {
    if (depth > kMaxDepth) {
      return false;
    }
    skip();
    if (pos_ >= s_.size()) {
      return false;
    }
    char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.kind = Value::Kind::Object;
      skip();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      while (true) {
        skip();
        std::string key;
        if (!string(key)) {
          return false;
        }
        skip();
        if (pos_ >= s_.size() || s_[pos_] != ':') {
          return false;
        }
        ++pos_;
        Value item;
        if (!value(item, depth + 1)) {
          return false;
        }
        v.fields.insert_or_assign(std::move(key), std::move(item));
        skip();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          return true;
        }
        return false;
      }
    }
    if (c == '[') {
      ++pos_;
      v.kind = Value::Kind::Array;
      skip();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      while (true) {
        Value item;
        if (!value(item, depth + 1)) {
          return false;
        }
        v.items.push_back(std::move(item));
        skip();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          return true;
        }
        return false;
      }
    }
    if (c == '"') {
      v.kind = Value::Kind::String;
      return string(v.text);
    }
    if (literal("true")) {
      v.kind = Value::Kind::Bool;
      v.boolean = true;
      return true;
    }
    if (literal("false")) {
      v.kind = Value::Kind::Bool;
      return true;
    }
    if (literal("null")) {
      return true;
    }
    return number(v);
  }
};

inline Value parse(std::string_view text) {
  return Reader(text).parse();
}

}  // namespace tensor_arena::json
