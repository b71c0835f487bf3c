// The byte-level pre-tokenization of GPT-2, Llama-3 and Qwen2 tokenizers:
// the split of text into pre-tokens by their regex, and GPT-2's map of the
// 256 bytes to printable code points in which their vocabularies are
// written (a space is "Ġ", a newline "Ċ").
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace servesim::text {

// The split patterns recognised, by their exact text in tokenizer.json.
enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  // (also ByteLevel's own with use_regex: true)
  Gpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Llama3,
  // Llama-3's with \p{N} for \p{N}{1,3}: one digit a pre-token.
  Qwen2,
};

// The pattern `regex` is, or nullopt when it is none of the above.
std::optional<SplitPattern> recognize_split_pattern(std::string_view regex);
// Its name for messages ("GPT-2", "Llama-3", "Qwen2").
const char* to_string(SplitPattern pattern);

// Appends to `out` the pre-tokens of `text`, in order; they concatenate to
// `text` (the patterns match every character: behaviour "Isolated"). Bytes
// that are not UTF-8 are pre-tokens' characters of the punctuation kind.
// Checked against Python's `regex` (tests/data/tokenizers/split_cases.json).
void split_pretokens(std::string_view text, SplitPattern pattern, std::vector<std::string_view>& out);

// GPT-2's bytes_to_unicode: the UTF-8 of the code point byte b stands for.
const std::array<std::string, 256>& byte_level_chars();

// A vocabulary token's text back to its bytes; a code point that stands for
// no byte (not byte-level) is kept as its UTF-8.
std::string byte_level_decode(std::string_view token);

// The byte-level text of `bytes` (each byte as byte_level_chars()).
std::string byte_level_encode(std::string_view bytes);

}  // namespace servesim::text
