// The byte-level BPE tokenizer behind load_tokenizer_json (tokenizer.h):
// what tokenizer_json.cpp reads from the file, and the encoder over it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/text/byte_level_pretokenizer.h"
#include "engine/text/tokenizer.h"

namespace servesim::text {

// An added token (tokenizer.json's added_tokens): matched in the raw text
// before pre-tokenization, leftmost then longest, as Hugging Face does.
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool lstrip = false;  // the match takes the whitespace before it
  bool rstrip = false;  // ... and after it
};

// One stage of the pre-tokenizer (a Split, or the ByteLevel one), applied to
// every piece the previous stage left.
struct PreTokenizerStage {
  std::optional<SplitPattern> split;  // none: the piece stays whole
  bool add_prefix_space = false;      // ByteLevel's: " " before a piece not starting with one
};

struct BpeModel {
  std::string source;  // the file, for name() and messages
  int64_t vocab_size = 0;
  std::unordered_map<std::string, int32_t> vocab;  // byte-level token text -> id
  std::vector<std::string> id_bytes;               // id -> its bytes (decoded text); "" where unnamed
  struct Merge {
    int32_t rank = 0;    // its index in "merges": lower merges first
    int32_t result = 0;  // the merged token's id
  };
  std::unordered_map<uint64_t, Merge> merges;  // key: left id << 32 | right id
  std::array<int32_t, 256> byte_ids{};         // the token of each single byte
  std::vector<AddedToken> added;
  std::vector<PreTokenizerStage> stages;
  bool ignore_merges = false;  // a pre-token that is a whole vocab entry is one token
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeModel model);

  std::string name() const override { return "bpe (" + model_.source + ")"; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return model_.vocab_size; }
  std::optional<int32_t> special_token_id(std::string_view content) const override;

 private:
  // Appends the BPE tokens of one pre-token (raw bytes).
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;
  // Appends the tokens of text between added tokens.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  BpeModel model_;
  std::vector<std::vector<size_t>> added_by_first_byte_;  // indices into model_.added, longest first
};

}  // namespace servesim::text
