// Byte-level pre-tokenization (byte_level_pretokenizer.h): the split
// patterns matched by hand over code points (std::regex has no \p{L}), each
// alternative tried in the pattern's order as a backtracking engine would.
#include "engine/text/byte_level_pretokenizer.h"

#include "engine/text/unicode_classes.h"

namespace servesim::text {
namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Case folding as (?i) does it for the contractions' letters: ASCII, and
// U+017F LATIN SMALL LETTER LONG S, which folds to 's' (no other code point
// folds to any of s t r e v m l d).
char32_t fold_case(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
  return c == 0x17F ? U's' : c;
}
bool is_cr_lf(char32_t c) { return c == '\r' || c == '\n'; }

// Code points [i, n) of one text and the matchers shared by the patterns;
// each returns the end of its match at i, or i when it does not match.
struct Cursor {
  const std::vector<CodePoint>& cps;
  size_t n;

  CharClass cls(size_t k) const { return cps[k].cls; }
  char32_t at(size_t k) const { return cps[k].value; }
  size_t run(size_t k, CharClass c) const {
    while (k < n && cls(k) == c) ++k;
    return k;
  }

  // 's 't 're 've 'm 'll 'd, case-insensitively when `fold`.
  size_t contraction(size_t i, bool fold) const {
    if (at(i) != '\'' || i + 1 >= n) return i;
    auto low = [&](size_t k) { return fold ? fold_case(at(k)) : at(k); };
    const char32_t a = low(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= n) return i;
    const char32_t b = low(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
  }

  // ` ?X+` for the class X.
  size_t space_then_run(size_t i, CharClass c) const {
    if (at(i) == ' ' && i + 1 < n && cls(i + 1) == c) return run(i + 1, c);
    return cls(i) == c ? run(i, c) : i;
  }

  // \s+(?!\S)|\s+ at a whitespace i: the whole run where it ends the text or
  // is one character; otherwise all but its last, which then leads the next
  // pre-token (" word" stays one).
  size_t trailing_space(size_t i) const {
    const size_t k = run(i, CharClass::Space);
    if (k == n || k - i == 1) return k;
    return k - 1;
  }
};

// One pre-token of the GPT-2 pattern at i (< n); returns its end (> i).
size_t match_gpt2(const Cursor& c, size_t i) {
  size_t j = c.contraction(i, false);
  if (j > i) return j;
  for (CharClass cls : {CharClass::Letter, CharClass::Number, CharClass::Other}) {
    j = c.space_then_run(i, cls);
    if (j > i) return j;
  }
  return c.trailing_space(i);  // cls(i) is Space: every other class matched above
}

// One pre-token of the Llama-3 (max_digits 3) or Qwen2 (1) pattern at i.
size_t match_llama3(const Cursor& c, size_t i, size_t max_digits) {
  size_t j = c.contraction(i, true);
  if (j > i) return j;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls(i) == CharClass::Letter) return c.run(i, CharClass::Letter);
  if (c.cls(i) != CharClass::Number && !is_cr_lf(c.at(i)) && i + 1 < c.n &&
      c.cls(i + 1) == CharClass::Letter)
    return c.run(i + 1, CharClass::Letter);
  // \p{N}{1,max}
  if (c.cls(i) == CharClass::Number) {
    j = i;
    while (j < c.n && j - i < max_digits && c.cls(j) == CharClass::Number) ++j;
    return j;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  j = c.space_then_run(i, CharClass::Other);
  if (j > i) {
    while (j < c.n && is_cr_lf(c.at(j))) ++j;
    return j;
  }
  // \s*[\r\n]+: up to and including the run's last \r or \n.
  const size_t k = c.run(i, CharClass::Space);
  for (size_t e = k; e > i; --e)
    if (is_cr_lf(c.at(e - 1))) return e;
  return c.trailing_space(i);
}

}  // namespace

std::optional<SplitPattern> recognize_split_pattern(std::string_view regex) {
  if (regex == kGpt2Pattern) return SplitPattern::Gpt2;
  if (regex == kLlama3Pattern) return SplitPattern::Llama3;
  if (regex == kQwen2Pattern) return SplitPattern::Qwen2;
  return std::nullopt;
}

const char* to_string(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::Gpt2: return "GPT-2";
    case SplitPattern::Llama3: return "Llama-3";
    case SplitPattern::Qwen2: return "Qwen2";
  }
  return "?";
}

void split_pretokens(std::string_view text, SplitPattern pattern, std::vector<std::string_view>& out) {
  const std::vector<CodePoint> cps = decode_utf8(text);
  const Cursor c{cps, cps.size()};
  size_t i = 0;
  while (i < c.n) {
    size_t j = 0;
    switch (pattern) {
      case SplitPattern::Gpt2: j = match_gpt2(c, i); break;
      case SplitPattern::Llama3: j = match_llama3(c, i, 3); break;
      case SplitPattern::Qwen2: j = match_llama3(c, i, 1); break;
    }
    const size_t begin = cps[i].offset;
    const size_t end = j < c.n ? cps[j].offset : text.size();
    out.push_back(text.substr(begin, end - begin));
    i = j;
  }
}

const std::array<std::string, 256>& byte_level_chars() {
  // Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves;
  // the other 68 take U+0100, U+0101, ... in byte order.
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> out;
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      append_utf8(out[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return out;
  }();
  return chars;
}

std::string byte_level_decode(std::string_view token) {
  // Code point -> byte, for the 324 code points the map uses (-1: none).
  static const std::array<int, 0x144> byte_of = [] {
    std::array<int, 0x144> out;
    out.fill(-1);
    const auto& chars = byte_level_chars();
    for (int b = 0; b < 256; ++b) out[decode_utf8(chars[b]).front().value] = b;
    return out;
  }();
  std::string bytes;
  bytes.reserve(token.size());
  for (const CodePoint& cp : decode_utf8(token)) {
    if (cp.value < byte_of.size() && byte_of[cp.value] >= 0)
      bytes += static_cast<char>(byte_of[cp.value]);
    else
      bytes.append(token.substr(cp.offset, cp.length));
  }
  return bytes;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& chars = byte_level_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) out += chars[static_cast<unsigned char>(b)];
  return out;
}

}  // namespace servesim::text
