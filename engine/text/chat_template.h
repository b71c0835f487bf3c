// The prompt text of a chat (/v1/chat/completions' messages), chosen by
// the special tokens the tokenizer has:
//   llama-3  (<|begin_of_text|>, <|start_header_id|>, <|end_header_id|>,
//            <|eot_id|>): Llama-3's format, each content trimmed of
//            surrounding whitespace as its template does:
//              <|begin_of_text|><|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>...
//              <|start_header_id|>assistant<|end_header_id|>\n\n
//            (Llama-3.1's default system message with its dates is not added.)
//   chatml   (<|im_start|>, <|im_end|>; Qwen2): <|im_start|>ROLE\nCONTENT<|im_end|>\n
//            per message then <|im_start|>assistant\n (no default system
//            message is added).
//   plain    otherwise (the byte-level tokenizer): "ROLE: CONTENT\n" per
//            message then "assistant: ".
// The text is then encoded with the same tokenizer, which matches the
// special tokens as such.
#pragma once

#include <string>
#include <vector>

#include "engine/text/tokenizer.h"

namespace servesim {

struct ChatMessage {
  std::string role;  // system, user, assistant, ...
  std::string content;
};

std::string apply_chat_template(const std::vector<ChatMessage>& messages, const Tokenizer& tokenizer);

// Which of the above apply_chat_template uses: "llama-3", "chatml" or "plain".
std::string chat_template_name(const Tokenizer& tokenizer);

}  // namespace servesim
