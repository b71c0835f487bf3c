// The prefix cache's block keys: the same tokens give the same key however
// the spans were cut; any different token, or a different prefix before the
// block, gives another; extending keys a block at a time matches computing
// them at once; generated tokens are the output source's positions.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "sim/block_hashes.h"
#include "sim/token_identity.h"

using servesim::extend_block_keys;
using servesim::token_source;
using servesim::TokenIdentity;
using servesim::TokenSourceKind;
using servesim::TokenSpan;

namespace {

TokenIdentity identity(std::vector<TokenSpan> spans, uint64_t output = 99) {
  TokenIdentity id;
  id.prompt_spans = std::move(spans);
  id.output_source = output;
  return id;
}

std::vector<uint64_t> keys_of(const TokenIdentity& id, int64_t tokens, int32_t block_size) {
  std::vector<uint64_t> keys;
  extend_block_keys(id, tokens, block_size, keys);
  return keys;
}

}  // namespace

TEST_CASE("Block keys: only full blocks get a key", "[prefix]") {
  const TokenIdentity id = identity({{7, 0, 10}});
  CHECK(keys_of(id, 10, 4).size() == 2);  // tokens 8, 9 do not fill block 2
  CHECK(keys_of(id, 12, 4).size() == 3);  // with two generated tokens they do
  CHECK(keys_of(id, 3, 4).empty());
}

TEST_CASE("Block keys: the same tokens cut into other spans give the same keys", "[prefix]") {
  const TokenIdentity whole = identity({{7, 0, 20}});
  const TokenIdentity cut = identity({{7, 0, 3}, {7, 3, 9}, {7, 12, 8}});
  const TokenIdentity one_by_one = [] {
    std::vector<TokenSpan> s;
    for (int32_t i = 0; i < 20; ++i) s.push_back({7, i, 1});
    return identity(s);
  }();
  CHECK(keys_of(whole, 20, 4) == keys_of(cut, 20, 4));
  CHECK(keys_of(whole, 20, 4) == keys_of(one_by_one, 20, 4));
  // Generated tokens continue the output source whatever the prompt's cut.
  CHECK(keys_of(whole, 28, 4) == keys_of(cut, 28, 4));
}

TEST_CASE("Block keys: a different token or prefix changes the key of its block and of every later one",
          "[prefix]") {
  const auto base = keys_of(identity({{7, 0, 16}}), 16, 4);
  // Token 9 comes from another source: blocks 0, 1 equal, 2 and 3 differ.
  const auto changed = keys_of(identity({{7, 0, 9}, {8, 9, 1}, {7, 10, 6}}), 16, 4);
  REQUIRE(changed.size() == 4);
  CHECK(changed[0] == base[0]);
  CHECK(changed[1] == base[1]);
  CHECK(changed[2] != base[2]);
  CHECK(changed[3] != base[3]);  // block 3's own tokens are equal, its prefix is not
  // A shifted position is another token.
  CHECK(keys_of(identity({{7, 1, 16}}), 16, 4)[0] != base[0]);
  // A span that skips positions is not the same as one that does not.
  CHECK(keys_of(identity({{7, 0, 2}, {7, 3, 2}}), 4, 4)[0] != keys_of(identity({{7, 0, 4}}), 4, 4)[0]);
  // Every key of a long prompt is distinct (a chain, not a repetition).
  const auto long_keys = keys_of(identity({{7, 0, 4000}}), 4000, 16);
  CHECK(std::set<uint64_t>(long_keys.begin(), long_keys.end()).size() == long_keys.size());
}

TEST_CASE("Block keys: extending a block at a time equals computing them at once", "[prefix]") {
  const TokenIdentity id = identity({{token_source(TokenSourceKind::SharedPrefix, 1), 0, 37},
                                     {token_source(TokenSourceKind::RequestTail, 5), 0, 11}},
                                    token_source(TokenSourceKind::Output, 5));
  const auto at_once = keys_of(id, 48 + 30, 8);
  std::vector<uint64_t> grown;
  for (int64_t tokens = 1; tokens <= 78; ++tokens) extend_block_keys(id, tokens, 8, grown);
  CHECK(grown == at_once);
  CHECK(grown.size() == 9);  // 78 / 8
}

TEST_CASE("Block keys: a conversation's next turn shares its history's keys", "[prefix]") {
  // Turn 1: prompt P (10 tokens) and 6 generated tokens of output source O1.
  const TokenIdentity turn1 = identity({{11, 0, 10}}, 21);
  // Turn 2 quotes turn 1's prompt and output, then a new message.
  const TokenIdentity turn2 = identity({{11, 0, 10}, {21, 0, 6}, {31, 0, 9}}, 22);
  const auto k1 = keys_of(turn1, 16, 4);
  const auto k2 = keys_of(turn2, 25, 4);
  REQUIRE(k1.size() == 4);
  REQUIRE(k2.size() == 6);
  for (size_t i = 0; i < k1.size(); ++i) CHECK(k2[i] == k1[i]);
}

TEST_CASE("Block keys: of many prompts, two keys are equal exactly when their blocks and all before them hold the "
          "same tokens",
          "[prefix]") {
  // Prompts of 1 to 6 spans, each span one of two sources per place (a tree
  // of shared prefixes, as in a Mooncake trace), some cut in two; blocks of
  // 4 tokens, spans of 6, so that blocks cross spans.
  std::mt19937_64 rng(3);
  std::map<std::vector<std::pair<uint64_t, int32_t>>, uint64_t> key_of_tokens;  // tokens so far -> key
  std::map<uint64_t, std::vector<std::pair<uint64_t, int32_t>>> tokens_of_key;
  for (int p = 0; p < 400; ++p) {
    std::vector<TokenSpan> spans;
    std::vector<std::pair<uint64_t, int32_t>> tokens;  // (source, position) of each token
    const int n = 1 + int(rng() % 6);
    for (int i = 0; i < n; ++i) {
      const uint64_t source = token_source(TokenSourceKind::MooncakeBlock, uint64_t(2 * i + rng() % 2));
      if (rng() % 4 == 0) {
        spans.push_back({source, 0, 2});
        spans.push_back({source, 2, 4});
      } else {
        spans.push_back({source, 0, 6});
      }
      for (int32_t j = 0; j < 6; ++j) tokens.emplace_back(source, j);
    }
    const auto keys = keys_of(identity(spans), int64_t(tokens.size()), 4);
    REQUIRE(keys.size() == tokens.size() / 4);
    for (size_t b = 0; b < keys.size(); ++b) {
      const std::vector<std::pair<uint64_t, int32_t>> prefix(tokens.begin(), tokens.begin() + long(4 * (b + 1)));
      auto [it, fresh] = key_of_tokens.try_emplace(prefix, keys[b]);
      CHECK(it->second == keys[b]);  // the same tokens: the same key
      auto [jt, new_key] = tokens_of_key.try_emplace(keys[b], prefix);
      CHECK(jt->second == prefix);   // the same key: the same tokens
    }
  }
  CHECK(key_of_tokens.size() > 100);  // many distinct prefixes were compared (162)
}
