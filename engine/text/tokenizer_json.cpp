// Reading a Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2,
// Llama-3, Qwen2) into a BpeModel (bpe_tokenizer.h). Every check names the
// file and the field; what the encoder needs (a token for each of the 256
// bytes, merges of known tokens, ids below the model's vocabulary) is
// checked here so encode() cannot fail.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/text/bpe_tokenizer.h"
#include "engine/text/unicode_classes.h"
#include "sim/errors.h"

namespace servesim {
namespace {

using nlohmann::json;
using text::BpeModel;
using text::PreTokenizerStage;

// A token's text for a message: quoted, escaped, at most 40 bytes.
std::string show(std::string_view token) {
  std::string s = std::string(token.substr(0, 40));
  if (!text::is_valid_utf8(s)) s = text::byte_level_encode(s);  // printable, valid UTF-8
  return json(s).dump() + (token.size() > 40 ? "..." : "");
}

class Reader {
 public:
  Reader(std::string source, int64_t vocab_size) : source_(std::move(source)) {
    model_.source = source_;
    model_.vocab_size = vocab_size;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(fmt::format("tokenizer {}: {}", source_, what));
  }

  BpeModel read(const json& root) {
    if (!root.is_object()) fail("not a JSON object");
    const json* model = member(root, "model");
    if (!model || !model->is_object()) fail("no \"model\" object");
    const json* type = member(*model, "type");
    if (!type || !type->is_string()) fail("model.type is missing (expected \"BPE\")");
    if (*type != "BPE")
      fail(fmt::format("model.type is {}; only byte-level \"BPE\" tokenizers are supported",
                       type->dump()));
    for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json* v = member(*model, field);
      if (v && !v->is_null() && !(v->is_string() && v->get_ref<const std::string&>().empty()))
        fail(fmt::format("model.{} is not supported (byte-level BPE has none)", field));
    }
    if (const json* v = member(*model, "ignore_merges"); v && !v->is_null()) {
      if (!v->is_boolean()) fail("model.ignore_merges is not true or false");
      model_.ignore_merges = v->get<bool>();
    }
    read_vocab(*model);
    read_merges(*model);
    read_added_tokens(root);
    read_normalizer(root);
    read_pre_tokenizer(root);
    return std::move(model_);
  }

 private:
  static const json* member(const json& object, const char* name) {
    auto it = object.find(name);
    return it == object.end() ? nullptr : &*it;
  }

  int32_t checked_id(const json& value, const std::string& what) const {
    if (!value.is_number_integer()) fail(fmt::format("{}: the id {} is not an integer", what, value.dump()));
    // number_integer covers unsigned values too: compare as such.
    if (value.is_number_unsigned() ? value.get<uint64_t>() >= static_cast<uint64_t>(model_.vocab_size)
                                   : (value.get<int64_t>() < 0 || value.get<int64_t>() >= model_.vocab_size))
      fail(fmt::format("{}: the id {} is outside the model's vocabulary [0, {})", what, value.dump(),
                       model_.vocab_size));
    return static_cast<int32_t>(value.get<int64_t>());
  }

  void read_vocab(const json& model) {
    const json* vocab = member(model, "vocab");
    if (!vocab || !vocab->is_object() || vocab->empty()) fail("model.vocab is missing or not a non-empty object");
    std::vector<int32_t> seen;  // id -> 1 once named
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
      const int32_t id = checked_id(it.value(), fmt::format("model.vocab {}", show(it.key())));
      if (static_cast<size_t>(id) >= model_.id_bytes.size()) {
        model_.id_bytes.resize(id + 1);
        seen.resize(id + 1, 0);
      }
      if (seen[id]) fail(fmt::format("model.vocab names the id {} twice (last as {})", id, show(it.key())));
      seen[id] = 1;
      model_.id_bytes[id] = text::byte_level_decode(it.key());
      model_.vocab.emplace(it.key(), id);
    }
    const auto& chars = text::byte_level_chars();
    for (int b = 0; b < 256; ++b) {
      auto it = model_.vocab.find(chars[b]);
      if (it == model_.vocab.end())
        fail(fmt::format("model.vocab has no token for the byte 0x{:02X} ({}): not a byte-level BPE", b,
                         show(chars[b])));
      model_.byte_ids[b] = it->second;
    }
  }

  void read_merges(const json& model) {
    const json* merges = member(model, "merges");
    if (!merges || merges->is_null()) return;
    if (!merges->is_array()) fail("model.merges is not an array");
    if (merges->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) fail("model.merges is too long");
    for (size_t k = 0; k < merges->size(); ++k) {
      const json& m = (*merges)[k];
      std::string left, right;
      if (m.is_string()) {  // "a b"
        const std::string& s = m.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          fail(fmt::format("model.merges[{}] {} is not two tokens separated by one space", k, show(s)));
        left = s.substr(0, space), right = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
        left = m[0].get<std::string>(), right = m[1].get<std::string>();
      } else {
        fail(fmt::format("model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", k));
      }
      const int32_t a = token_of(left, k), b = token_of(right, k), ab = token_of(left + right, k);
      // A later duplicate overwrites, as in Hugging Face's merge map.
      model_.merges[(static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b)] =
          BpeModel::Merge{static_cast<int32_t>(k), ab};
    }
  }

  int32_t token_of(const std::string& token, size_t merge) const {
    auto it = model_.vocab.find(token);
    if (it == model_.vocab.end())
      fail(fmt::format("model.merges[{}]: the token {} is not in model.vocab", merge, show(token)));
    return it->second;
  }

  void read_added_tokens(const json& root) {
    const json* added = member(root, "added_tokens");
    if (!added || added->is_null()) return;
    if (!added->is_array()) fail("added_tokens is not an array");
    for (size_t k = 0; k < added->size(); ++k) {
      const json& t = (*added)[k];
      const std::string where = fmt::format("added_tokens[{}]", k);
      if (!t.is_object()) fail(where + " is not an object");
      const json* content = member(t, "content");
      if (!content || !content->is_string() || content->get_ref<const std::string&>().empty())
        fail(where + ".content is missing or not a non-empty string");
      const json* id = member(t, "id");
      if (!id) fail(where + ".id is missing");
      text::AddedToken token{content->get<std::string>(), checked_id(*id, where), false, false};
      token.lstrip = flag(t, "lstrip", where);
      token.rstrip = flag(t, "rstrip", where);
      model_.added.push_back(std::move(token));
    }
  }

  bool flag(const json& object, const char* name, const std::string& where) const {
    const json* v = member(object, name);
    if (!v || v->is_null()) return false;
    if (!v->is_boolean()) fail(fmt::format("{}.{} is not true or false", where, name));
    return v->get<bool>();
  }

  void read_normalizer(const json& root) {
    const json* n = member(root, "normalizer");
    if (!n || n->is_null()) return;
    // NFC (Qwen2's) is accepted and not applied: text that is already NFC,
    // as nearly all text is, tokenizes the same.
    const json* type = n->is_object() ? member(*n, "type") : nullptr;
    if (type && *type == "NFC") return;
    fail(fmt::format("normalizer {} is not supported (only none or NFC)", type ? type->dump() : n->dump()));
  }

  void read_pre_tokenizer(const json& root) {
    const json* p = member(root, "pre_tokenizer");
    if (!p || p->is_null()) fail("pre_tokenizer is missing: not a byte-level BPE (no ByteLevel pre-tokenizer)");
    read_stage(*p, "pre_tokenizer", 0);
    bool byte_level = false;
    for (const auto& s : stages_are_byte_level_) byte_level = byte_level || s;
    if (!byte_level) fail("pre_tokenizer has no ByteLevel stage: not a byte-level BPE");
  }

  void read_stage(const json& p, const std::string& where, int depth) {
    if (!p.is_object()) fail(where + " is not an object");
    const json* type = member(p, "type");
    if (!type || !type->is_string()) fail(where + ".type is missing");
    const std::string& t = type->get_ref<const std::string&>();
    if (t == "Sequence") {
      const json* list = member(p, "pretokenizers");
      if (!list || !list->is_array()) fail(where + ".pretokenizers is not an array");
      if (depth > 4) fail(where + " nests Sequences too deeply");
      for (size_t k = 0; k < list->size(); ++k)
        read_stage((*list)[k], fmt::format("{}.pretokenizers[{}]", where, k), depth + 1);
    } else if (t == "ByteLevel") {
      PreTokenizerStage stage;
      stage.add_prefix_space = flag(p, "add_prefix_space", where);
      const json* use_regex = member(p, "use_regex");
      if (!use_regex || use_regex->is_null() || (use_regex->is_boolean() && use_regex->get<bool>()))
        stage.split = text::SplitPattern::Gpt2;
      else if (!use_regex->is_boolean())
        fail(where + ".use_regex is not true or false");
      model_.stages.push_back(stage);
      stages_are_byte_level_.push_back(true);
    } else if (t == "Split") {
      const json* pattern = member(p, "pattern");
      const json* regex = pattern && pattern->is_object() ? member(*pattern, "Regex") : nullptr;
      if (!regex || !regex->is_string()) fail(where + ".pattern is not {\"Regex\": ...}");
      const auto kind = text::recognize_split_pattern(regex->get_ref<const std::string&>());
      if (!kind)
        fail(fmt::format("{}.pattern {} is not supported (GPT-2's, Llama-3's and Qwen2's are)", where,
                         show(regex->get_ref<const std::string&>())));
      const json* behavior = member(p, "behavior");
      if (behavior && !(behavior->is_string() && *behavior == "Isolated"))
        fail(fmt::format("{}.behavior {} is not supported (only \"Isolated\")", where, behavior->dump()));
      if (flag(p, "invert", where)) fail(where + ".invert true is not supported");
      model_.stages.push_back(PreTokenizerStage{kind, false});
      stages_are_byte_level_.push_back(false);
    } else {
      fail(fmt::format("{}.type {} is not supported (ByteLevel, Split or a Sequence of them)", where,
                       type->dump()));
    }
  }

  std::string source_;
  BpeModel model_;
  std::vector<bool> stages_are_byte_level_;
};

}  // namespace

std::unique_ptr<Tokenizer> parse_tokenizer_json(std::string_view json_text, const std::string& source,
                                                int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > std::numeric_limits<int32_t>::max())
    throw InputError(fmt::format("tokenizer {}: the model's vocabulary size {} is not in [1, 2^31)", source,
                                 vocab_size));
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    throw InputError(fmt::format("tokenizer {}: not valid JSON: {}", source, e.what()));
  }
  Reader reader(source, vocab_size);
  try {
    return std::make_unique<text::BpeTokenizer>(reader.read(root));
  } catch (const json::exception& e) {  // a field of another type than checked for
    throw InputError(fmt::format("tokenizer {}: {}", source, e.what()));
  }
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& given, int64_t vocab_size) {
  // A model's folder stands for the tokenizer.json in it.
  std::error_code ec;
  const std::string path =
      std::filesystem::is_directory(given, ec) ? (std::filesystem::path(given) / "tokenizer.json").string() : given;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("tokenizer {}: cannot be read (missing or not readable)", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("tokenizer {}: cannot be read", path));
  return parse_tokenizer_json(buffer.str(), path, vocab_size);
}

}  // namespace servesim
