// Multi-turn sessions (conversations): each turn's prompt is the previous
// turn's prompt, then the previous turn's output, then a new user message,
// so a prefix cache can reuse everything but the new message. The next turn
// is sent a think time after the previous one finished; the serving loop
// releases it (Request::follows, Request::think_time_s).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/length_distribution.h"
#include "sim/random.h"
#include "sim/request.h"

namespace servesim {

// A user's think time between a turn's end and the next turn, in seconds.
// Spec syntax (D is a duration: "2s", "500ms", "200us" or plain seconds):
//   D | fixed:D        always D (0: the next turn is sent as the previous ends)
//   uniform:LO:HI      uniform on [LO, HI]
//   exponential:MEAN   exponential with mean MEAN (memoryless users)
class ThinkTime {
 public:
  enum class Kind { Fixed, Uniform, Exponential };

  // Throws InputError naming `flag` (e.g. "--think-time") and the bad part.
  static ThinkTime parse(const std::string& spec, const std::string& flag);

  double sample(Rng& rng) const;
  std::string describe() const;  // canonical, in seconds: "exponential:2"
  Kind kind() const { return kind_; }

 private:
  Kind kind_ = Kind::Fixed;
  double a_ = 0, b_ = 0;  // fixed: a; uniform: [a, b]; exponential: mean a
};

// Most token spans all sessions may hold together (a turn repeats its
// history's spans, so they grow with the square of the turns): 2^26, 1 GiB.
inline constexpr int64_t kMaxSessionSpans = int64_t(1) << 26;

// Splits `num_requests` requests into sessions: each session's turns are
// drawn from `turns` (>= 1 each) until they add up, and the last session is
// cut short so the total is exactly num_requests.
std::vector<int32_t> split_into_sessions(const LengthDistribution& turns, int64_t num_requests,
                                         Rng& rng);

// What build_session_requests needs, every vector drawn by the caller from
// its own random stream. Requests are numbered session by session: session
// s's turns are ids start_s .. start_s + turns[s] - 1, so `follows` (the
// previous turn) always names an earlier id.
struct SessionInputs {
  std::vector<int32_t> turns;                          // per session
  std::vector<double> first_arrivals_s;                // per session, non-decreasing
  std::vector<std::pair<int32_t, int32_t>> lengths;    // per request id: (new message, output) tokens
  std::vector<int64_t> prefix_groups;                  // per session; empty: no shared prefix
  int32_t prefix_len = 0;                              // tokens of a shared prefix
  std::vector<double> think_times_s;                   // per request id; used for turns after the first
};

// Turn 0 of session s: [SharedPrefix(group), 0, prefix_len] (with groups),
// then [UserMessage(s, 0), 0, message]. Turn t > 0: turn t-1's spans, then
// [Output(id of turn t-1), 0, its output tokens], then [UserMessage(s, t), 0,
// message]. Every turn's output source is Output(its id). Turn 0 arrives at
// the session's first arrival; a later turn follows the previous one
// (arrival_s 0 until the serving loop releases it). Throws InputError when
// the spans would exceed kMaxSessionSpans or a prompt 2^31 - 1 tokens.
std::vector<Request> build_session_requests(const SessionInputs& in);

}  // namespace servesim
