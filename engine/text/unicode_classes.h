// UTF-8 code points and the few Unicode classes the byte-level
// pre-tokenizers' split patterns ask about (\p{L}, \p{N}, \s). std::regex
// knows none of them, so byte_level_pretokenizer.cpp walks code points
// classified here.
//
// \p{L} and \p{N} come from unicode_tables.inc, generated from Python's
// unicodedata (gen_unicode_tables.py; Unicode 14.0): exact for that
// version, so only code points assigned later (Hugging Face's Oniguruma
// and Rust regex follow their own Unicode versions) may be classified
// differently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace servesim::text {

enum class CharClass : uint8_t {
  Letter,  // \p{L}
  Number,  // \p{N}
  Space,   // \s (Unicode White_Space)
  Other,   // everything else: punctuation, symbols, marks, invalid bytes
};

// One code point of a UTF-8 string: its bytes are text[offset, offset + length).
struct CodePoint {
  char32_t value = 0;  // kInvalidCodePoint for a byte that is not valid UTF-8
  uint32_t offset = 0;
  uint32_t length = 0;
  CharClass cls = CharClass::Other;
};

// The value given to each byte of an ill-formed sequence (a stray
// continuation byte, a truncated or overlong sequence, a surrogate): it
// becomes a code point of its own, of class Other.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

CharClass classify(char32_t cp);

// `text` as code points, ill-formed bytes one each (never throws).
std::vector<CodePoint> decode_utf8(std::string_view text);

// Appends the UTF-8 encoding of `cp` (< 0x110000).
void append_utf8(std::string& out, char32_t cp);

// True when `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);

}  // namespace servesim::text
