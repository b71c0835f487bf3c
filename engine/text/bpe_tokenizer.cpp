// Byte-level BPE encoding and decoding (bpe_tokenizer.h), following Hugging
// Face tokenizers: added tokens split the text first, the pre-tokenizer
// stages split each remaining piece, and each pre-token's bytes (as
// byte-level characters) are merged by the lowest-ranked adjacent pair
// until none applies (tokenizers' models/bpe/word.rs, merge_all).
#include "engine/text/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "sim/errors.h"

namespace servesim::text {
namespace {

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeModel model) : model_(std::move(model)), added_by_first_byte_(256) {
  for (size_t k = 0; k < model_.added.size(); ++k) {
    const AddedToken& t = model_.added[k];
    if (t.content.empty()) continue;
    added_by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back(k);
    // An added token's text is what its id decodes to, over a vocab entry
    // of the same id (GPT-2's <|endoftext|> is both).
    if (static_cast<size_t>(t.id) >= model_.id_bytes.size()) model_.id_bytes.resize(t.id + 1);
    model_.id_bytes[t.id] = t.content;
  }
  for (auto& bucket : added_by_first_byte_)
    std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
      return model_.added[a].content.size() > model_.added[b].content.size();
    });
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t segment = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (size_t k : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      if (text.substr(i).starts_with(model_.added[k].content)) {
        hit = &model_.added[k];  // the longest: buckets are sorted longest first
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + hit->content.size();
    if (hit->lstrip)
      while (begin > segment && is_ascii_space(text[begin - 1])) --begin;
    if (hit->rstrip)
      while (end < text.size() && is_ascii_space(text[end])) ++end;
    encode_plain(text.substr(segment, begin - segment), out);
    out.push_back(hit->id);
    segment = i = end;
  }
  encode_plain(text.substr(segment), out);
  return out;
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  std::vector<std::string_view> views;
  for (const PreTokenizerStage& stage : model_.stages) {
    next.clear();
    for (std::string& piece : pieces) {
      if (stage.add_prefix_space && piece[0] != ' ') piece.insert(0, 1, ' ');
      if (!stage.split) {
        next.push_back(std::move(piece));
        continue;
      }
      views.clear();
      split_pretokens(piece, *stage.split, views);
      for (std::string_view v : views) next.emplace_back(v);
    }
    pieces.swap(next);
  }
  for (const std::string& piece : pieces) encode_word(piece, out);
}

void BpeTokenizer::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (bytes.size() == 1) {
    out.push_back(model_.byte_ids[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  if (model_.ignore_merges) {
    auto it = model_.vocab.find(byte_level_encode(bytes));
    if (it != model_.vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The symbols, a linked list over the bytes; a merge keeps the left one.
  struct Symbol {
    int32_t id;
    int64_t prev, next;  // -1: none
    bool removed;
  };
  const int64_t n = static_cast<int64_t>(bytes.size());
  std::vector<Symbol> symbols(n);
  for (int64_t k = 0; k < n; ++k)
    symbols[k] = Symbol{model_.byte_ids[static_cast<unsigned char>(bytes[k])], k - 1, k + 1 < n ? k + 1 : -1, false};

  struct Candidate {
    int32_t rank;
    int64_t pos;  // the left symbol
    int32_t result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int64_t left) {
    const int64_t right = symbols[left].next;
    if (right < 0) return;
    auto it = model_.merges.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != model_.merges.end()) queue.push(Candidate{it->second.rank, left, it->second.result});
  };
  for (int64_t k = 0; k + 1 < n; ++k) push_pair(k);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    // A stale entry: the pair at pos has changed since it was queued.
    auto it = model_.merges.find(pair_key(left.id, symbols[left.next].id));
    if (it == model_.merges.end() || it->second.result != top.result) continue;
    Symbol& right = symbols[left.next];
    left.id = top.result;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int64_t k = 0; k >= 0; k = symbols[k].next) out.push_back(symbols[k].id);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= model_.vocab_size)
      throw InputError(fmt::format("token id {} is outside the vocabulary [0, {}) of {}", id,
                                   model_.vocab_size, model_.source));
    if (static_cast<size_t>(id) < model_.id_bytes.size()) out += model_.id_bytes[id];
  }
  return out;
}

std::optional<int32_t> BpeTokenizer::special_token_id(std::string_view content) const {
  for (const AddedToken& t : model_.added)
    if (t.content == content) return t.id;
  return std::nullopt;
}

}  // namespace servesim::text
