// Python-compatible JSON serialisation for prompt rendering (see python_json.h).
#include "encoding/python_json.h"

#include "common/error.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace deepinfer::encoding {

namespace {

// Python's repr of a finite double: the shortest digits that round-trip, written in fixed
// notation when the decimal point falls within [-4, 16) digits of the first digit, else as
// d[.ddd]e±XX; fixed notation always shows a fractional part ("1.0").
std::string python_float_repr(double value) {
  std::array<char, 64> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value,
                                    std::chars_format::scientific);
  const std::string_view sci(buffer.data(), static_cast<std::size_t>(result.ptr - buffer.data()));
  const std::size_t e_pos = sci.find('e');
  std::string_view mantissa = sci.substr(0, e_pos);
  std::string out;
  if (mantissa.front() == '-') {
    out += '-';
    mantissa.remove_prefix(1);
  }
  std::string digits(1, mantissa.front());
  if (mantissa.size() > 2) digits.append(mantissa.substr(2));  // skip the '.'
  const int exponent = std::stoi(std::string(sci.substr(e_pos + 1)));
  const int point = exponent + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  if (point <= -4 || point > 16) {
    out += digits.front();
    if (n > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (point <= 0) {
    out += "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
  } else if (point < n) {
    out += digits.substr(0, static_cast<std::size_t>(point)) + "." +
           digits.substr(static_cast<std::size_t>(point));
  } else {
    out += digits + std::string(static_cast<std::size_t>(point - n), '0') + ".0";
  }
  return out;
}

void dump_to(std::string& out, const Json& value) {
  switch (value.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        out += '"';
        append_json_escaped(out, key);
        out += "\": ";
        dump_to(out, item);
      }
      out += '}';
      return;
    }
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        dump_to(out, item);
      }
      out += ']';
      return;
    }
    case Json::value_t::string:
      out += '"';
      append_json_escaped(out, value.get_ref<const std::string&>());
      out += '"';
      return;
    case Json::value_t::number_float: {
      // Python writes non-finite floats as NaN/Infinity; nlohmann would write null.
      const double number = value.get<double>();
      if (std::isnan(number)) {
        out += "NaN";
      } else if (std::isinf(number)) {
        out += number > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(number);
      }
      return;
    }
    case Json::value_t::binary:
      throw_error("python_json_dumps: binary JSON values cannot be rendered into a prompt");
    case Json::value_t::discarded:
      throw_error("python_json_dumps: discarded JSON value");
    default:  // null, boolean, integers
      out += value.dump();
      return;
  }
}

}  // namespace

void append_json_escaped(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (byte < 0x20) {
          out += "\\u00";
          out += kHex[byte >> 4];
          out += kHex[byte & 0xF];
        } else {
          out += c;
        }
    }
  }
}

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  append_json_escaped(out, text);
  out += '"';
  return out;
}

std::string python_json_dumps(const Json& value) {
  std::string out;
  dump_to(out, value);
  return out;
}

}  // namespace deepinfer::encoding
