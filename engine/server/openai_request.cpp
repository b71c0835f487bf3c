#include "engine/server/openai_request.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/text/chat_template.h"

namespace servesim {

using nlohmann::json;

std::string ApiError::type() const {
  if (!type_.empty()) return type_;
  return status_ >= 400 && status_ < 500 ? "invalid_request_error" : "server_error";
}

std::string ApiError::body() const {
  json error = {{"message", what()}, {"type", type()}, {"code", status_}};
  error["param"] = param_.empty() ? json(nullptr) : json(param_);
  return json{{"error", error}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

ApiError bad(const std::string& param, const std::string& message) { return ApiError(400, message, param); }

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

// The field's value when present and not null.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

int64_t integer(const json& v, const char* name, int64_t lo, int64_t hi) {
  // JSON has one number type: 3.0 is an integer, 3.5 is not.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d != std::floor(d) || !std::isfinite(d))
      throw bad(name, fmt::format("'{}' must be an integer (got {})", name, v.dump()));
  } else if (!v.is_number_integer() && !v.is_number_unsigned()) {
    throw bad(name, fmt::format("'{}' must be an integer (got {})", name, type_name(v)));
  }
  const double d = v.get<double>();
  if (d < double(lo) || d > double(hi))
    throw bad(name, fmt::format("'{}' must be in {} .. {} (got {})", name, lo, hi, v.dump()));
  return v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
}

double number(const json& v, const char* name, double lo, double hi) {
  if (!v.is_number()) throw bad(name, fmt::format("'{}' must be a number (got {})", name, type_name(v)));
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi)) throw bad(name, fmt::format("'{}' must be in [{}, {}] (got {})", name, lo, hi, v.dump()));
  return d;
}

bool boolean(const json& v, const char* name) {
  if (!v.is_boolean()) throw bad(name, fmt::format("'{}' must be a boolean (got {})", name, type_name(v)));
  return v.get<bool>();
}

std::vector<int32_t> token_ids(const json& array, const char* name, int64_t vocab) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (const json& v : array) {
    if (!v.is_number_integer() && !v.is_number_unsigned())
      throw bad(name, fmt::format("'{}' token ids must be integers (got {})", name, type_name(v)));
    const int64_t id = v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(INT64_MAX)))
                                              : v.get<int64_t>();
    if (id < 0 || id >= vocab)
      throw bad(name, fmt::format("token id {} in '{}' is outside the vocabulary (0 .. {})", id, name, vocab - 1));
    ids.push_back(int32_t(id));
  }
  return ids;
}

// The completions API's prompt: a string, token ids, or a batch of one of either.
std::vector<int32_t> completion_prompt(const json& prompt, const ApiContext& context) {
  if (prompt.is_string()) {
    // As Hugging Face's encode (and so vLLM) does for a Llama-3 vocabulary:
    // a text prompt starts with <|begin_of_text|> unless it already does.
    std::vector<int32_t> ids = context.tokenizer->encode(prompt.get<std::string>());
    if (const auto bos = context.tokenizer->special_token_id("<|begin_of_text|>"); bos && (ids.empty() || ids[0] != *bos))
      ids.insert(ids.begin(), *bos);
    return ids;
  }
  if (!prompt.is_array()) throw bad("prompt", fmt::format("'prompt' must be a string or token ids (got {})", type_name(prompt)));
  if (prompt.empty()) throw bad("prompt", "'prompt' is empty");
  if (prompt[0].is_string() || prompt[0].is_array()) {
    if (prompt.size() > 1) throw bad("prompt", "a batch of several prompts is not supported: send one prompt per request");
    return completion_prompt(prompt[0], context);
  }
  return token_ids(prompt, "prompt", context.vocab_size);
}

std::string message_content(const json& content, size_t index) {
  if (content.is_string()) return content.get<std::string>();
  // An array of content parts: text parts only.
  if (content.is_array()) {
    std::string text;
    for (const json& part : content) {
      const bool text_part = part.is_object() && part.contains("type") && part["type"] == "text" &&
                             part.contains("text") && part["text"].is_string();
      if (!text_part)
        throw bad("messages", fmt::format("messages[{}].content: only parts of type 'text' are supported", index));
      text += part["text"].get<std::string>();
    }
    return text;
  }
  throw bad("messages", fmt::format("messages[{}].content must be a string or an array of text parts (got {})", index,
                                    type_name(content)));
}

std::vector<int32_t> chat_prompt(const json& messages, const ApiContext& context) {
  if (!messages.is_array()) throw bad("messages", fmt::format("'messages' must be an array (got {})", type_name(messages)));
  if (messages.empty()) throw bad("messages", "'messages' is empty");
  std::vector<ChatMessage> chat;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object()) throw bad("messages", fmt::format("messages[{}] must be an object", i));
    const json* role = field(m, "role");
    if (!role || !role->is_string()) throw bad("messages", fmt::format("messages[{}].role must be a string", i));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "developer" && r != "tool")
      throw bad("messages", fmt::format("messages[{}].role '{}' is not one of system, developer, user, assistant, tool", i, r));
    const json* content = field(m, "content");
    chat.push_back(ChatMessage{r, content ? message_content(*content, i) : std::string()});
  }
  return context.tokenizer->encode(apply_chat_template(chat, *context.tokenizer));
}

}  // namespace

namespace {
CompletionRequest parse_checked(std::string_view body, ApiEndpoint endpoint, const ApiContext& context);
}  // namespace

CompletionRequest parse_completion_request(std::string_view body, ApiEndpoint endpoint, const ApiContext& context) {
  try {
    return parse_checked(body, endpoint, context);
  } catch (const json::exception& e) {
    // A value of a type no check above expected (every field is checked:
    // this is the net under them, so a body never escapes as a 500).
    throw ApiError(400, fmt::format("the request body has a value of the wrong type: {}", e.what()));
  }
}

namespace {

CompletionRequest parse_checked(std::string_view body, ApiEndpoint endpoint, const ApiContext& context) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, fmt::format("the request body must be a JSON object (got {})", type_name(j)));

  CompletionRequest r;
  r.endpoint = endpoint;
  if (const json* m = field(j, "model")) {
    if (!m->is_string()) throw bad("model", fmt::format("'model' must be a string (got {})", type_name(*m)));
    r.model = m->get<std::string>();
    if (r.model != context.model_name)
      throw ApiError(404, fmt::format("The model `{}` does not exist (this server serves `{}`).", r.model,
                                      context.model_name), "model", "NotFoundError");
  } else {
    r.model = context.model_name;
  }

  if (endpoint == ApiEndpoint::Completions) {
    const json* prompt = field(j, "prompt");
    if (!prompt) throw bad("prompt", "'prompt' is required");
    r.prompt_ids = completion_prompt(*prompt, context);
    if (const json* v = field(j, "echo")) r.echo = boolean(*v, "echo");
  } else {
    const json* messages = field(j, "messages");
    if (!messages) throw bad("messages", "'messages' is required");
    r.prompt_ids = chat_prompt(*messages, context);
  }
  if (r.prompt_ids.empty()) throw bad(endpoint == ApiEndpoint::Completions ? "prompt" : "messages", "the prompt is empty");
  const int64_t prompt = int64_t(r.prompt_ids.size());

  // max_tokens: the completions API's default is 16; chat's, what the
  // context leaves (as vLLM does). max_completion_tokens is chat's newer name.
  const char* max_name = "max_tokens";
  const json* max_tokens = field(j, "max_tokens");
  if (endpoint == ApiEndpoint::ChatCompletions && field(j, "max_completion_tokens")) {
    max_tokens = field(j, "max_completion_tokens");
    max_name = "max_completion_tokens";
  }
  if (max_tokens) {
    r.max_tokens = int32_t(integer(*max_tokens, max_name, 1, std::numeric_limits<int32_t>::max()));
  } else {
    r.max_tokens = endpoint == ApiEndpoint::Completions ? 16 : int32_t(std::max<int64_t>(1, context.max_model_len - prompt));
  }
  if (prompt + r.max_tokens > context.max_model_len)
    throw bad(max_tokens ? max_name : (endpoint == ApiEndpoint::Completions ? "prompt" : "messages"),
              fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in "
                          "the prompt, {} in the completion). Please reduce the length of the prompt or completion.",
                          context.max_model_len, prompt + r.max_tokens, prompt, r.max_tokens));

  if (const json* v = field(j, "temperature")) r.temperature = number(*v, "temperature", 0.0, 2.0);
  if (const json* v = field(j, "top_p")) {
    r.top_p = number(*v, "top_p", 0.0, 1.0);
    if (r.top_p <= 0) throw bad("top_p", "'top_p' must be in (0, 1] (got 0)");
  }
  if (const json* v = field(j, "seed"))
    r.seed = uint64_t(integer(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const json& s : *v) {
        if (!s.is_string()) throw bad("stop", fmt::format("'stop' entries must be strings (got {})", type_name(s)));
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      throw bad("stop", fmt::format("'stop' must be a string or an array of strings (got {})", type_name(*v)));
    }
    if (r.stop.size() > 16) throw bad("stop", fmt::format("at most 16 stop strings (got {})", r.stop.size()));
    for (const std::string& s : r.stop)
      if (s.empty()) throw bad("stop", "a stop string is empty");
  }
  if (const json* v = field(j, "stop_token_ids")) {
    if (!v->is_array()) throw bad("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    r.stop_token_ids = token_ids(*v, "stop_token_ids", context.vocab_size);
  }
  if (const json* v = field(j, "ignore_eos")) r.ignore_eos = boolean(*v, "ignore_eos");
  if (const json* v = field(j, "min_tokens")) r.min_tokens = int32_t(integer(*v, "min_tokens", 0, r.max_tokens));
  if (const json* v = field(j, "stream")) r.stream = boolean(*v, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) throw bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) throw bad("stream_options", "'stream_options' is only allowed with \"stream\": true");
    if (const json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  if (const json* v = field(j, "n"))
    if (integer(*v, "n", 1, 1) != 1) throw bad("n", "only n = 1 is supported");
  if (const json* v = field(j, "best_of"))
    if (integer(*v, "best_of", 1, 1) != 1) throw bad("best_of", "only best_of = 1 is supported");
  for (const char* unsupported : {"logprobs", "top_logprobs", "tools", "response_format", "suffix"}) {
    const json* v = field(j, unsupported);
    if (v && !(v->is_boolean() && !v->get<bool>()))
      throw bad(unsupported, fmt::format("'{}' is not supported by this server", unsupported));
  }
  return r;
}

}  // namespace

}  // namespace servesim
