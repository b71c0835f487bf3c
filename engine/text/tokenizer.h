// Text <-> token ids for `servesim serve` and `servesim bench`.
//   byte-level: for random-weight models (no vocabulary of their own): ids
//               3..258 are the bytes 0..255 (0..2 stay special: unk, bos,
//               eos, as in Llama-2-style vocabularies)
//   Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, Llama-3,
//               Qwen): its vocab, merges, added tokens and pre-tokenizer
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace servesim {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // What it is, for /v1/models and logs: "byte-level" or "bpe (path)".
  virtual std::string name() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The bytes of `ids` (special tokens included as their text). May end in
  // an incomplete UTF-8 sequence when a character spans several tokens.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The model's vocabulary size this tokenizer serves (ids < vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // The id of a special (added) token such as "<|eot_id|>", if this
  // tokenizer has it: what the chat template and the stop condition ask.
  virtual std::optional<int32_t> special_token_id(std::string_view /*content*/) const {
    return std::nullopt;
  }
};

// The byte-level tokenizer for a model of `vocab_size` (>= 259; InputError
// otherwise) ids. encode: byte b -> id b + 3, never 0..2, so
// decode(encode(s)) == s for any bytes. decode: 0..2 (<unk>, <s>, </s>, which
// special_token_id knows) -> "" so a random model's stream stays clean; ids
// >= 259 (a random-weight model samples any id) -> one printable ASCII
// character, a lowercase letter or a space chosen by the id, so streamed
// text is readable junk and always valid UTF-8. InputError for an id outside
// [0, vocab_size).
std::unique_ptr<Tokenizer> make_byte_tokenizer(int64_t vocab_size);

// A Hugging Face tokenizer.json (byte-level BPE), or the one in the folder
// `path` (a model's folder). Throws InputError naming
// the file and what is wrong (unreadable, not JSON, another model type, an
// unsupported pre-tokenizer, a merge of tokens not in the vocabulary, an id
// >= vocab_size). encode() adds no BOS/EOS (the post_processor is not
// applied): callers (the chat template) write special tokens as text, which
// encode matches first as Hugging Face does. decode() gives "" for an id
// below vocab_size that the file does not name (the model's padded rows)
// and InputError for an id outside [0, vocab_size).
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, int64_t vocab_size);

// The same from the file's text in memory; `source` names it in errors.
std::unique_ptr<Tokenizer> parse_tokenizer_json(std::string_view json_text, const std::string& source,
                                                int64_t vocab_size);

}  // namespace servesim
