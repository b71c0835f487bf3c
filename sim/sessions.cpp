#include "sim/sessions.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string_view>

#include "sim/errors.h"
#include "sim/units.h"

namespace servesim {

namespace {

constexpr int64_t kMaxPromptTokens = std::numeric_limits<int32_t>::max();
constexpr const char* kThinkSyntax =
    "expected D | fixed:D | uniform:LO:HI | exponential:MEAN, each a duration such as 2s, "
    "500ms or 1.5";

std::vector<std::string> split_colons(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon - start));
    if (colon == std::string::npos) return parts;
    start = colon + 1;
  }
}

}  // namespace

ThinkTime ThinkTime::parse(const std::string& spec, const std::string& flag) {
  const std::vector<std::string> parts = split_colons(spec);
  auto bad = [&](const std::string& why) -> InputError {
    return InputError(fmt::format("{}: '{}' {} ({})", flag, spec, why, kThinkSyntax));
  };
  auto duration = [&](const std::string& text) {
    if (text.empty()) throw bad("has an empty duration");
    return parse_duration_s(text, flag);
  };
  ThinkTime t;
  const std::string& kind = parts[0];
  if (parts.size() == 1) {
    t.a_ = duration(kind);
  } else if (kind == "fixed" && parts.size() == 2) {
    t.a_ = duration(parts[1]);
  } else if (kind == "uniform" && parts.size() == 3) {
    t.kind_ = Kind::Uniform;
    t.a_ = duration(parts[1]);
    t.b_ = duration(parts[2]);
    if (t.b_ < t.a_) throw bad("has HI < LO");
  } else if (kind == "exponential" && parts.size() == 2) {
    t.kind_ = Kind::Exponential;
    t.a_ = duration(parts[1]);
    if (!(t.a_ > 0)) throw bad("needs a mean > 0");
  } else {
    throw bad("is not a think-time distribution");
  }
  return t;
}

double ThinkTime::sample(Rng& rng) const {
  switch (kind_) {
    case Kind::Fixed:
      return a_;
    case Kind::Uniform:
      return a_ + (b_ - a_) * rng.uniform();
    case Kind::Exponential:
      return rng.exponential(1.0 / a_);
  }
  return a_;
}

std::string ThinkTime::describe() const {
  switch (kind_) {
    case Kind::Fixed:
      return fmt::format("fixed:{}", a_);
    case Kind::Uniform:
      return fmt::format("uniform:{}:{}", a_, b_);
    case Kind::Exponential:
      return fmt::format("exponential:{}", a_);
  }
  return "unknown";
}

std::vector<int32_t> split_into_sessions(const LengthDistribution& turns, int64_t num_requests,
                                         Rng& rng) {
  std::vector<int32_t> sessions;
  for (int64_t left = num_requests; left > 0;) {
    const auto t = int32_t(std::min<int64_t>(turns.sample(rng), left));
    sessions.push_back(t);
    left -= t;
  }
  return sessions;
}

std::vector<Request> build_session_requests(const SessionInputs& in) {
  const bool prefixed = !in.prefix_groups.empty();
  // Turn t holds (prefix) + 2t + 1 spans: count them before allocating.
  int64_t spans = 0;
  for (const int32_t t : in.turns) spans += int64_t(t) * (prefixed ? 2 : 1) + int64_t(t) * (t - 1);
  if (spans > kMaxSessionSpans) {
    throw InputError(fmt::format(
        "--session-turns: these sessions would hold {} token spans in all (at most {}: each turn "
        "repeats its whole history); use fewer turns per session or fewer --num-requests",
        spans, kMaxSessionSpans));
  }
  std::vector<Request> out;
  out.reserve(in.lengths.size());
  for (size_t s = 0; s < in.turns.size(); ++s) {
    for (int32_t turn = 0; turn < in.turns[s]; ++turn) {
      const auto id = int64_t(out.size());
      const auto [message, output] = in.lengths[size_t(id)];
      Request r;
      r.id = id;
      r.output_tokens = output;
      r.tokens.output_source = token_source(TokenSourceKind::Output, uint64_t(id));
      auto& prompt = r.tokens.prompt_spans;
      if (turn == 0) {
        r.arrival_s = in.first_arrivals_s[s];
        if (prefixed) {
          prompt.push_back({token_source(TokenSourceKind::SharedPrefix, uint64_t(in.prefix_groups[s])),
                            0, in.prefix_len});
        }
      } else {
        const Request& previous = out.back();
        r.follows = previous.id;
        r.think_time_s = in.think_times_s[size_t(id)];
        prompt.reserve(previous.tokens.prompt_spans.size() + 2);
        prompt = previous.tokens.prompt_spans;
        prompt.push_back({previous.tokens.output_source, 0, previous.output_tokens});
      }
      prompt.push_back({token_source(TokenSourceKind::UserMessage, s, uint64_t(turn)), 0, message});
      const int64_t tokens = r.tokens.prompt_tokens();
      if (tokens > kMaxPromptTokens) {
        throw InputError(fmt::format(
            "--session-turns: turn {} of session {} would have a prompt of {} tokens (at most "
            "{}); use fewer turns or shorter --prompt-len / --output-len",
            turn + 1, s, tokens, kMaxPromptTokens));
      }
      r.prompt_tokens = int32_t(tokens);
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace servesim
