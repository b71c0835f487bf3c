// The byte-level tokenizer (tokenizer.h) of random-weight models: one id a
// byte, so any text round-trips and any id decodes to something printable.
#include <fmt/format.h>

#include "engine/text/tokenizer.h"
#include "sim/errors.h"

namespace servesim {
namespace {

constexpr int32_t kFirstByteId = 3;                  // ids 0, 1, 2: <unk>, <s>, </s>
constexpr int32_t kFirstJunkId = kFirstByteId + 256;  // 259

class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}

  std::string name() const override { return "byte-level"; }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (char c : text) ids.push_back(kFirstByteId + static_cast<unsigned char>(c));
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size_)
        throw InputError(fmt::format("token id {} is outside the byte-level tokenizer's vocabulary [0, {})",
                                     id, vocab_size_));
      if (id < kFirstByteId) continue;  // special: no text
      if (id < kFirstJunkId) {
        out += static_cast<char>(id - kFirstByteId);
      } else {
        // 26 letters and a space: readable junk, always ASCII.
        const int32_t k = (id - kFirstJunkId) % 27;
        out += k == 26 ? ' ' : static_cast<char>('a' + k);
      }
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab_size_; }

  std::optional<int32_t> special_token_id(std::string_view content) const override {
    if (content == "<unk>") return 0;
    if (content == "<s>") return 1;
    if (content == "</s>") return 2;
    return std::nullopt;
  }

 private:
  int64_t vocab_size_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer(int64_t vocab_size) {
  if (vocab_size < kFirstJunkId)
    throw InputError(fmt::format("the byte-level tokenizer needs a vocabulary of at least {} ids "
                                 "(3 special + 256 bytes); the model has {}",
                                 kFirstJunkId, vocab_size));
  return std::make_unique<ByteTokenizer>(vocab_size);
}

}  // namespace servesim
