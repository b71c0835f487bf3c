#include "engine/client/openai_protocol.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/errors.h"

namespace servesim {

using nlohmann::json;

OpenAiEndpoint parse_openai_endpoint(const std::string& name) {
  if (name == "completions") return OpenAiEndpoint::Completions;
  if (name == "chat") return OpenAiEndpoint::Chat;
  throw InputError(fmt::format("--endpoint: '{}' is not one of completions, chat", name));
}

std::string to_string(OpenAiEndpoint e) { return e == OpenAiEndpoint::Completions ? "completions" : "chat"; }

std::string endpoint_route(OpenAiEndpoint e) {
  return e == OpenAiEndpoint::Completions ? "/v1/completions" : "/v1/chat/completions";
}

namespace {

json common_fields(const SamplingRequest& r) {
  json j = {{"model", r.model},
            {"max_tokens", r.max_tokens},
            {"temperature", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  if (r.ignore_eos) j["ignore_eos"] = true;
  return j;
}

// Invalid UTF-8 in a server's text (a character split across chunks is
// legal) must not throw while the event is kept.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string completions_body(const SamplingRequest& r, std::span<const int32_t> prompt_ids) {
  json j = common_fields(r);
  j["prompt"] = std::vector<int32_t>(prompt_ids.begin(), prompt_ids.end());
  return dump(j);
}

std::string chat_body(const SamplingRequest& r, const std::string& prompt_text) {
  json j = common_fields(r);
  j["messages"] = json::array({{{"role", "user"}, {"content", prompt_text}}});
  return dump(j);
}

namespace {

std::optional<int64_t> integer_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

std::string text_of_error(const json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object()) {
    auto m = e.find("message");
    if (m != e.end() && m->is_string()) return m->get<std::string>();
  }
  return dump(e);
}

}  // namespace

StreamEvent parse_stream_event(std::string_view data) {
  StreamEvent ev;
  if (data == "[DONE]") {
    ev.done = true;
    return ev;
  }
  const json j = json::parse(data.begin(), data.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    ev.error = fmt::format("the stream sent data that is not a JSON object: {:.200}", data);
    return ev;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    ev.error = text_of_error(*e);
    return ev;
  }
  if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
    ev.token_chunk = true;
    const json& choice = (*c)[0];
    if (choice.is_object()) {
      if (auto t = choice.find("text"); t != choice.end() && t->is_string()) ev.text = t->get<std::string>();
      if (auto d = choice.find("delta"); d != choice.end() && d->is_object())
        if (auto t = d->find("content"); t != d->end() && t->is_string()) ev.text = t->get<std::string>();
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    ev.completion_tokens = integer_field(*u, "completion_tokens");
    ev.prompt_tokens = integer_field(*u, "prompt_tokens");
  }
  return ev;
}

std::string error_message_of_body(std::string_view body) {
  const json j = json::parse(body.begin(), body.end(), nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) return text_of_error(*e);
    if (auto m = j.find("message"); m != j.end() && m->is_string()) return m->get<std::string>();
    if (auto d = j.find("detail"); d != j.end()) return d->is_string() ? d->get<std::string>() : dump(*d);
  }
  std::string s(body.substr(0, 200));
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace servesim
