// Chat templates (chat_template.h).
#include "engine/text/chat_template.h"

#include <string_view>

namespace servesim {
namespace {

enum class Template { Llama3, ChatMl, Plain };

Template choose(const Tokenizer& tokenizer) {
  auto has = [&](std::string_view t) { return tokenizer.special_token_id(t).has_value(); };
  if (has("<|begin_of_text|>") && has("<|start_header_id|>") && has("<|end_header_id|>") && has("<|eot_id|>"))
    return Template::Llama3;
  if (has("<|im_start|>") && has("<|im_end|>")) return Template::ChatMl;
  return Template::Plain;
}

// Jinja's trim: whitespace (space, \t, \n, \r, \v, \f) off both ends.
std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

}  // namespace

std::string apply_chat_template(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer) {
  std::string out;
  switch (choose(tokenizer)) {
    case Template::Llama3:
      out = "<|begin_of_text|>";
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>";
        out += m.role;
        out += "<|end_header_id|>\n\n";
        out += trim(m.content);
        out += "<|eot_id|>";
      }
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case Template::ChatMl:
      for (const ChatMessage& m : messages) {
        out += "<|im_start|>";
        out += m.role;
        out += '\n';
        out += m.content;
        out += "<|im_end|>\n";
      }
      out += "<|im_start|>assistant\n";
      break;
    case Template::Plain:
      for (const ChatMessage& m : messages) {
        out += m.role;
        out += ": ";
        out += m.content;
        out += '\n';
      }
      out += "assistant: ";
      break;
  }
  return out;
}

std::string chat_template_name(const Tokenizer& tokenizer) {
  switch (choose(tokenizer)) {
    case Template::Llama3: return "llama-3";
    case Template::ChatMl: return "chatml";
    case Template::Plain: return "plain";
  }
  return "plain";
}

}  // namespace servesim
