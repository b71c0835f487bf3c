// Tokenizers (engine/text): the byte-level one of random-weight models, the
// Hugging Face byte-level BPE reader on two tiny hand-made tokenizer.json
// files (tests/data/tokenizers/make_tiny_tokenizers.py: ids 0..255 are the
// bytes in GPT-2's order, so 'a' = 64, ' ' = 220, '\n' = 198; merged tokens
// from 256), the split patterns against Python's `regex`, chat templates and
// the files refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/text/byte_level_pretokenizer.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"
#include "engine/text/unicode_classes.h"
#include "sim/errors.h"

using namespace servesim;
using Catch::Matchers::Contains;
using Ids = std::vector<int32_t>;
using namespace std::string_literals;

namespace {

const std::string kDir = SERVESIM_TEST_DATA_DIR "/tokenizers/";
const std::string kGpt2 = kDir + "tiny_gpt2.json";
const std::string kLlama3 = kDir + "tiny_llama3.json";

// The fixtures' ids (make_tiny_tokenizers.py). Bytes: GPT-2 order, '!'..'~' = b - 33.
constexpr int32_t b(char c) { return static_cast<unsigned char>(c) - 33; }
constexpr int32_t kSpace = 220, kNewline = 198;
constexpr int32_t kHe = 256, kLl = 257, kHell = 258, kHello = 259, kSpW = 260, kOr = 261, kSpWor = 262,
                  kLd = 263, kSpWorld = 264, kSpT = 265, kSpThe = 266, k12 = 267, k123 = 268,
                  kNewline2 = 269, kSpace2 = 270, kApS = 271, kIn = 272, kSpHello = 273;
constexpr int32_t kEndOfText = 274;  // tiny_gpt2's added token
constexpr int32_t kBeginOfText = 280, kStartHeader = 282, kEndHeader = 283, kEot = 284;  // tiny_llama3's

// Texts whose bytes every byte-level tokenizer must give back.
const std::vector<std::string>& round_trip_texts() {
  static const std::vector<std::string> texts = {
      "", "hello world", "Hello, World!\n", "  leading and trailing  ", "tabs\tand\r\nCRLF\n\n\n",
      "naïve café, Straße, Ωμέγα, привет", "日本語のテキスト", "emoji 😀👍🏽 and a ZWJ 👨‍👩‍👧",
      "e\u0301 (combining)", "<|endoftext|> in the middle <|endoftext|>", "it's we'll THEY'RE",
      "1234567890 ²½٣", "\0\x01\x7f\xff\xfe bytes that are not UTF-8 \xc3"s,
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"};
  return texts;
}

std::string all_bytes() {
  std::string s;
  for (int c = 0; c < 256; ++c) s += static_cast<char>(c);
  return s;
}

// Writes `text` to a file of this test's own and returns its path.
std::string write_temp(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "servesim_test_tokenizer";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

nlohmann::json fixture_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("byte tokenizer: ids 3..258 are the bytes and round-trip any text") {
  const auto tok = make_byte_tokenizer(1000);
  CHECK(tok->name() == "byte-level");
  CHECK(tok->vocab_size() == 1000);
  CHECK(tok->encode("hi\n") == Ids{'h' + 3, 'i' + 3, '\n' + 3});
  const Ids all = tok->encode(all_bytes());
  REQUIRE(all.size() == 256);
  for (int c = 0; c < 256; ++c) CHECK(all[c] == c + 3);
  CHECK(tok->decode(all) == all_bytes());
  for (const std::string& t : round_trip_texts()) CHECK(tok->decode(tok->encode(t)) == t);
}

TEST_CASE("byte tokenizer: special ids decode to nothing, ids past the bytes to printable ASCII") {
  const auto tok = make_byte_tokenizer(5000);
  CHECK(tok->decode(Ids{0, 1, 2}).empty());
  CHECK(tok->decode(Ids{1, 'o' + 3, 'k' + 3, 2}) == "ok");
  CHECK(tok->special_token_id("<s>") == 1);
  CHECK(tok->special_token_id("</s>") == 2);
  CHECK(tok->special_token_id("<unk>") == 0);
  CHECK_FALSE(tok->special_token_id("<|eot_id|>").has_value());
  CHECK(tok->decode(Ids{259, 260, 285}) == "ab ");
  Ids junk;
  for (int32_t id = 259; id < 5000; ++id) junk.push_back(id);
  const std::string text = tok->decode(junk);
  CHECK(text.size() == junk.size());
  CHECK(text::is_valid_utf8(text));
  for (char c : text) CHECK(((c >= 'a' && c <= 'z') || c == ' '));
}

TEST_CASE("byte tokenizer: a vocabulary under 259 ids and ids outside it are refused") {
  CHECK_THROWS_AS(make_byte_tokenizer(258), InputError);
  CHECK_THROWS_WITH(make_byte_tokenizer(100), Contains("at least 259"));
  const auto tok = make_byte_tokenizer(300);
  CHECK_THROWS_WITH(tok->decode(Ids{300}), Contains("outside"));
  CHECK_THROWS_AS(tok->decode(Ids{-1}), InputError);
}

TEST_CASE("bpe tokenizer: GPT-2 style merges give the ids computed by hand") {
  const auto tok = load_tokenizer_json(kGpt2, 300);
  CHECK(tok->name() == "bpe (" + kGpt2 + ")");
  CHECK(tok->vocab_size() == 300);
  // "hello": h e -> he, l l -> ll, he ll -> hell, hell o -> hello.
  CHECK(tok->encode("hello world") == Ids{kHello, kSpWorld});
  // "the" alone: only h e merges; " the": he first (rank 0), then Ġ t, then Ġt he.
  CHECK(tok->encode("the") == Ids{b('t'), kHe});
  CHECK(tok->encode(" the") == Ids{kSpThe});
  // GPT-2 keeps a digit run whole: 4 1 2 3 -> 4 12 3 -> 4 123.
  CHECK(tok->encode("4123") == Ids{b('4'), k123});
  // Contractions are case-sensitive in GPT-2's pattern.
  CHECK(tok->encode("it's") == Ids{b('i'), b('t'), kApS});
  CHECK(tok->encode("IT'S") == Ids{b('I'), b('T'), b('\''), b('S')});
  // Whitespace: before a word the last space leads it; at the end a run stays whole (Ġ Ġ merges once).
  CHECK(tok->encode("a  b") == Ids{b('a'), kSpace, kSpace, b('b')});
  CHECK(tok->encode("a   ") == Ids{b('a'), kSpace2, kSpace});
  CHECK(tok->encode("a\n\nb") == Ids{b('a'), kNewline, kNewline, b('b')});
  // No ignore_merges: " hello" merges to Ġ + hello although "Ġhello" is in the vocab.
  CHECK(tok->encode(" hello") == Ids{kSpace, kHello});
  // é is two bytes C3 A9 ('Ã' = 127, '©' = 102 in GPT-2's order), inside one pre-token.
  CHECK(tok->encode("héllo") == Ids{b('h'), 127, 102, kLl, b('o')});
  CHECK(tok->encode("in") == Ids{kIn});
}

TEST_CASE("bpe tokenizer: added tokens are matched in the text first") {
  const auto tok = load_tokenizer_json(kGpt2, 300);
  CHECK(tok->encode("<|endoftext|>") == Ids{kEndOfText});
  CHECK(tok->encode("hi<|endoftext|>there") == Ids{b('h'), b('i'), kEndOfText, b('t'), kHe, b('r'), b('e')});
  CHECK(tok->encode("<|endoftext|><|endoftext|>") == Ids{kEndOfText, kEndOfText});
  CHECK(tok->encode("<|endoftext|") == Ids{b('<'), b('|'), b('e'), b('n'), b('d'), b('o'), b('f'), b('t'), b('e'),
                                             b('x'), b('t'), b('|')});
  CHECK(tok->special_token_id("<|endoftext|>") == kEndOfText);
  CHECK_FALSE(tok->special_token_id("<|eot_id|>").has_value());
  CHECK(tok->decode(Ids{kHello, kEndOfText, kSpWorld}) == "hello<|endoftext|> world");
}

TEST_CASE("bpe tokenizer: Llama-3 style split, ignore_merges and array merges") {
  const auto tok = load_tokenizer_json(kLlama3, 300);
  // ignore_merges: a pre-token that is a vocab entry is that token.
  CHECK(tok->encode(" hello") == Ids{kSpHello});
  CHECK(tok->encode("hello world") == Ids{kHello, kSpWorld});
  // Digits in threes: "412" "3" -> 4 12, 3.
  CHECK(tok->encode("4123") == Ids{b('4'), k12, b('3')});
  // Case-insensitive contractions; newlines kept together (Ċ Ċ merges).
  CHECK(tok->encode("IT'S") == Ids{b('I'), b('T'), b('\''), b('S')});  // "'S" is one pre-token, no merge for it
  CHECK(tok->encode("it's") == Ids{b('i'), b('t'), kApS});
  CHECK(tok->encode("a\n\nb") == Ids{b('a'), kNewline2, b('b')});
  // A punctuation mark leads the letters after it: "(hello" is one pre-token (not in the vocab).
  CHECK(tok->encode("(hello") == Ids{b('('), kHello});
  CHECK(tok->encode("<|begin_of_text|><|start_header_id|>in<|end_header_id|>") ==
        Ids{kBeginOfText, kStartHeader, kIn, kEndHeader});
}

TEST_CASE("bpe tokenizer: decode(encode(text)) gives back every text's bytes") {
  for (const std::string& path : {kGpt2, kLlama3}) {
    const auto tok = load_tokenizer_json(path, 300);
    for (const std::string& t : round_trip_texts()) {
      INFO(path << ": " << t);
      CHECK(tok->decode(tok->encode(t)) == t);
    }
    CHECK(tok->decode(tok->encode(all_bytes())) == all_bytes());
    // One token a byte where no merge applies: the multi-byte emoji stays four byte tokens.
    CHECK(tok->encode("😀").size() == 4);
  }
}

TEST_CASE("bpe tokenizer: ids the file does not name decode to nothing, ids past the model's vocabulary throw") {
  const auto tok = load_tokenizer_json(kLlama3, 300);
  CHECK(tok->decode(Ids{kHello, 290, 299, kSpWorld}) == "hello world");
  CHECK_THROWS_WITH(tok->decode(Ids{300}), Contains(kLlama3) && Contains("outside"));
  CHECK_THROWS_AS(tok->decode(Ids{-5}), InputError);
}

TEST_CASE("split patterns: the hand-written matcher splits as Python's regex does") {
  const nlohmann::json cases = fixture_json(kDir + "split_cases.json");
  REQUIRE(cases.size() > 300);
  const std::pair<const char*, text::SplitPattern> patterns[] = {
      {"gpt2", text::SplitPattern::Gpt2}, {"llama3", text::SplitPattern::Llama3}, {"qwen2", text::SplitPattern::Qwen2}};
  for (const auto& c : cases) {
    const std::string t = c["text"];
    for (const auto& [key, pattern] : patterns) {
      std::vector<std::string_view> views;
      text::split_pretokens(t, pattern, views);
      const std::vector<std::string> got(views.begin(), views.end());
      INFO(key << ": " << nlohmann::json(t).dump());
      CHECK(got == c[key].get<std::vector<std::string>>());
    }
  }
}

TEST_CASE("split patterns: recognised by their text in tokenizer.json") {
  const nlohmann::json j = fixture_json(kLlama3);
  const std::string regex = j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
  CHECK(text::recognize_split_pattern(regex) == text::SplitPattern::Llama3);
  CHECK_FALSE(text::recognize_split_pattern("\\s+").has_value());
}

TEST_CASE("unicode classes: letters, numbers and white space beyond ASCII") {
  using text::CharClass;
  CHECK(text::classify(U'é') == CharClass::Letter);
  CHECK(text::classify(U'日') == CharClass::Letter);
  CHECK(text::classify(U'ß') == CharClass::Letter);
  CHECK(text::classify(U'²') == CharClass::Number);
  CHECK(text::classify(U'٣') == CharClass::Number);
  CHECK(text::classify(0x00A0) == CharClass::Space);
  CHECK(text::classify(0x3000) == CharClass::Space);
  CHECK(text::classify(0x0301) == CharClass::Other);  // a combining mark is not a letter
  CHECK(text::classify(U'😀') == CharClass::Other);
  const auto cps = text::decode_utf8("a\xc3\xa9\xff\xe2\x82");
  REQUIRE(cps.size() == 5);  // a, é, then each ill-formed byte alone
  CHECK(cps[1].value == U'é');
  CHECK(cps[1].length == 2);
  for (size_t k = 2; k < 5; ++k) {
    CHECK(cps[k].value == text::kInvalidCodePoint);
    CHECK(cps[k].length == 1);
    CHECK(cps[k].offset == k + 1);
  }
  CHECK_FALSE(text::is_valid_utf8("\xed\xa0\x80"));  // a surrogate
  CHECK_FALSE(text::is_valid_utf8("\xc0\xaf"));      // overlong
  CHECK(text::is_valid_utf8("😀 ok"));
}

TEST_CASE("byte-level map: GPT-2's bytes_to_unicode") {
  const auto& chars = text::byte_level_chars();
  CHECK(chars[' '] == "Ġ");
  CHECK(chars['\n'] == "Ċ");
  CHECK(chars['a'] == "a");
  CHECK(chars[0] == "Ā");
  CHECK(chars[0x7F] == "ġ");  // 0x00..0x20 take U+0100..U+0120, then 0x7F..0xA0
  CHECK(chars[0xAD] == "Ń");  // the last of the 68 remapped bytes: U+0100 + 67
  CHECK(text::byte_level_decode(text::byte_level_encode(all_bytes())) == all_bytes());
}

TEST_CASE("chat template: Llama-3's format where the tokenizer has its special tokens") {
  const auto tok = load_tokenizer_json(kLlama3, 300);
  CHECK(chat_template_name(*tok) == "llama-3");
  const std::string prompt = apply_chat_template({{"system", "Be brief."}, {"user", "  hello  "}}, *tok);
  CHECK(prompt ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const Ids ids = tok->encode(prompt);
  REQUIRE(ids.size() > 4);
  CHECK(ids.front() == kBeginOfText);
  CHECK(ids[1] == kStartHeader);
  CHECK(std::count(ids.begin(), ids.end(), kEot) == 2);
}

TEST_CASE("chat template: the plain format otherwise") {
  const auto bytes = make_byte_tokenizer(512);
  CHECK(chat_template_name(*bytes) == "plain");
  CHECK(apply_chat_template({{"system", "S"}, {"user", "hi"}}, *bytes) == "system: S\nuser: hi\nassistant: ");
  const auto gpt2 = load_tokenizer_json(kGpt2, 300);
  CHECK(chat_template_name(*gpt2) == "plain");
  CHECK(apply_chat_template({}, *gpt2) == "assistant: ");
}

TEST_CASE("bpe tokenizer: unreadable and malformed files are refused by name") {
  CHECK_THROWS_WITH(load_tokenizer_json(kDir + "no_such.json", 300), Contains("no_such.json") && Contains("cannot be read"));
  const std::string not_json = write_temp("not_json.json", "{\"model\": ");
  CHECK_THROWS_WITH(load_tokenizer_json(not_json, 300), Contains(not_json) && Contains("not valid JSON"));
  // A folder stands for its tokenizer.json.
  CHECK_THROWS_WITH(load_tokenizer_json(kDir, 300), Contains(kDir + "tokenizer.json") && Contains("cannot be read"));
  const std::string folder = std::filesystem::path(write_temp("tokenizer.json", "{}")).parent_path().string();
  CHECK_THROWS_WITH(load_tokenizer_json(folder, 300), Contains("tokenizer.json") && Contains("no \"model\""));
  CHECK_THROWS_WITH(parse_tokenizer_json("[1, 2]", "array.json", 300), Contains("array.json") && Contains("not a JSON object"));
  CHECK_THROWS_WITH(parse_tokenizer_json("{}", "empty.json", 300), Contains("no \"model\""));
}

TEST_CASE("bpe tokenizer: files of other kinds or with inconsistent contents are refused, saying what is wrong") {
  const nlohmann::json good = fixture_json(kLlama3);
  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, int64_t vocab = 300) {
    nlohmann::json j = good;
    edit(j);
    try {
      parse_tokenizer_json(j.dump(), "edited.json", vocab);
    } catch (const InputError& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Contains("edited.json"));
      return what;
    }
    FAIL("accepted");
    return std::string();
  };
  CHECK_THAT(refused([](auto& j) { j["model"]["type"] = "WordPiece"; }), Contains("\"WordPiece\"") && Contains("BPE"));
  CHECK_THAT(refused([](auto& j) { j["model"].erase("type"); }), Contains("model.type"));
  CHECK_THAT(refused([](auto& j) { j["model"].erase("vocab"); }), Contains("model.vocab is missing"));
  CHECK_THAT(refused([](auto& j) { j["model"]["vocab"].erase("Ġ"); }), Contains("byte 0x20"));
  CHECK_THAT(refused([](auto& j) { j["model"]["vocab"]["zz"] = 5; }), Contains("id 5 twice"));
  CHECK_THAT(refused([](auto& j) { j["model"]["vocab"]["zz"] = "7"; }), Contains("not an integer"));
  CHECK_THAT(refused([](auto& j) { j["model"]["merges"].push_back({"q", "zz"}); }),
             Contains("merges[17]") && Contains("\"zz\" is not in model.vocab"));
  CHECK_THAT(refused([](auto& j) { j["model"]["merges"] = nlohmann::json::array({"h e x"}); }),
             Contains("two tokens"));
  CHECK_THAT(refused([](auto& j) { j["model"]["merges"] = nlohmann::json::array({42}); }), Contains("merges[0]"));
  CHECK_THAT(refused([](auto& j) { j["model"]["continuing_subword_prefix"] = "##"; }),
             Contains("continuing_subword_prefix"));
  CHECK_THAT(refused([](auto& j) { j["pre_tokenizer"] = nullptr; }), Contains("not a byte-level BPE"));
  CHECK_THAT(refused([](auto& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }), Contains("\"Metaspace\""));
  CHECK_THAT(refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }), Contains("no ByteLevel"));
  CHECK_THAT(refused([](auto& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; }),
             Contains("is not supported"));
  CHECK_THAT(refused([](auto& j) { j["normalizer"] = {{"type", "Lowercase"}}; }), Contains("normalizer"));
  CHECK_THAT(refused([](auto& j) { j["added_tokens"][0].erase("content"); }), Contains("added_tokens[0].content"));
  // Ids at or past the model's vocabulary: in the vocab, or an added token.
  CHECK_THAT(refused([](auto&) {}, 284), Contains("added_tokens[4]") && Contains("outside the model's vocabulary [0, 284)"));
  CHECK_THAT(refused([](auto&) {}, 200), Contains("model.vocab") && Contains("outside"));
  CHECK_THAT(refused([](auto& j) { j["model"]["vocab"]["zz"] = -1; }), Contains("outside"));
  CHECK_THROWS_WITH(parse_tokenizer_json("{}", "v.json", 0), Contains("vocabulary size 0"));
}

TEST_CASE("bpe tokenizer: Qwen2's pattern and an NFC normalizer are accepted") {
  nlohmann::json j = fixture_json(kLlama3);
  j["normalizer"] = {{"type", "NFC"}};
  std::string regex = j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
  regex.replace(regex.find("\\p{N}{1,3}"), 10, "\\p{N}");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex;
  const auto tok = parse_tokenizer_json(j.dump(), "qwen2-like.json", 300);
  CHECK(tok->encode("4123") == Ids{b('4'), b('1'), b('2'), b('3')});  // one digit a pre-token
}
