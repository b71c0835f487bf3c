// UTF-8 decoding and Unicode classes (unicode_classes.h).
#include "engine/text/unicode_classes.h"

#include <algorithm>
#include <array>

namespace servesim::text {
namespace {

struct Range {
  char32_t first, last;
  CharClass cls;
};
constexpr CharClass L = CharClass::Letter;
constexpr CharClass N = CharClass::Number;
constexpr Range kRanges[] = {
#include "engine/text/unicode_tables.inc"
};

// Unicode White_Space, which \s matches in Oniguruma and Rust's regex.
bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace

CharClass classify(char32_t cp) {
  // ASCII first: nearly all text the servers see.
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Number;
    return is_white_space(cp) ? CharClass::Space : CharClass::Other;
  }
  if (cp == kInvalidCodePoint) return CharClass::Other;
  if (is_white_space(cp)) return CharClass::Space;
  const auto* it = std::upper_bound(std::begin(kRanges), std::end(kRanges), cp,
                                    [](char32_t v, const Range& r) { return v < r.first; });
  if (it == std::begin(kRanges)) return CharClass::Other;
  --it;
  return cp <= it->last ? it->cls : CharClass::Other;
}

std::vector<CodePoint> decode_utf8(std::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    uint32_t len = 0;
    char32_t cp = 0, min = 0;
    if (b < 0x80) {
      len = 1, cp = b;
    } else if (b >= 0xC2 && b <= 0xDF) {
      len = 2, cp = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3, cp = b & 0x0F, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4, cp = b & 0x07, min = 0x10000;
    }
    bool ok = len > 0 && i + len <= n;
    for (uint32_t k = 1; ok && k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are ill-formed.
    if (ok && (cp < min || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)) ok = false;
    if (!ok) cp = kInvalidCodePoint, len = 1;
    out.push_back(CodePoint{cp, static_cast<uint32_t>(i), len, classify(cp)});
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
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

bool is_valid_utf8(std::string_view text) {
  const auto cps = decode_utf8(text);
  return std::none_of(cps.begin(), cps.end(),
                      [](const CodePoint& c) { return c.value == kInvalidCodePoint; });
}

}  // namespace servesim::text
