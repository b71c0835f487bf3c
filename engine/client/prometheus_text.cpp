#include "engine/client/prometheus_text.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

namespace servesim {
namespace {

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool name_char(char c) { return name_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

}  // namespace

// The format's three special values, then a C number (strtod would also
// take hexadecimal and "infinity", which the format does not write).
double parse_prometheus_number(std::string_view v) {
  if (v == "+Inf" || v == "Inf") return std::numeric_limits<double>::infinity();
  if (v == "-Inf") return -std::numeric_limits<double>::infinity();
  if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
  const std::string s(v);
  const bool plain = !s.empty() && s.find_first_not_of("+-0123456789.eE") == std::string::npos;
  char* end = nullptr;
  const double x = plain ? std::strtod(s.c_str(), &end) : 0;
  if (!plain || end != s.c_str() + s.size())
    throw std::invalid_argument(fmt::format("'{}' is not a sample value", s.substr(0, 40)));
  return x;
}

std::vector<PromSample> parse_prometheus_text(std::string_view text) {
  std::vector<PromSample> out;
  int64_t line_number = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    ++line_number;
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    size_t i = 0;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size() || line[i] == '#') continue;
    auto fail = [&](const std::string& what) {
      throw std::invalid_argument(fmt::format("line {}: {}", line_number, what));
    };
    PromSample s;
    if (!name_start(line[i])) fail("a sample must start with a metric name");
    const size_t name_begin = i;
    while (i < line.size() && name_char(line[i])) ++i;
    s.name = std::string(line.substr(name_begin, i - name_begin));
    if (i < line.size() && line[i] == '{') {
      ++i;
      for (;;) {
        while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        if (i >= line.size() || !name_start(line[i])) fail("labels do not close with '}'");
        const size_t key_begin = i;
        while (i < line.size() && name_char(line[i])) ++i;
        const std::string key(line.substr(key_begin, i - key_begin));
        if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') fail("a label value must be quoted");
        i += 2;
        std::string value;
        for (;; ++i) {
          if (i >= line.size()) fail("a label value does not close with '\"'");
          if (line[i] == '"') break;
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        ++i;
        s.labels[key] = std::move(value);
      }
    }
    if (i >= line.size() || (line[i] != ' ' && line[i] != '\t')) fail("a metric name must be followed by its value");
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t value_end = i;
    while (value_end < line.size() && line[value_end] != ' ' && line[value_end] != '\t') ++value_end;
    try {
      s.value = parse_prometheus_number(line.substr(i, value_end - i));
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace servesim
