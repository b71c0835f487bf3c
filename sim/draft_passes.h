// The passes a draft model makes in one iteration of a speculative run: one
// rule shared by the simulator's cost model (sim/speculative_cost.h) and the
// real engine's speculative executor, so a prediction costs exactly the draft
// work the engine does.
//
// The draft keeps its own KV cache, addressed by the target's block tables
// (same block ids, the draft's own layer shapes). It always lags the target
// by at least one token: the target's newest token (position c of a decode
// item with c cached tokens) is never in the draft's cache at the start of
// an iteration. For a target plan whose decode item i verifies k'_i =
// num_query_tokens - 1 drafts (k'_i = 0: a plain decode) and whose draft
// cache holds d_i <= c_i tokens:
//   pass 1: every prefill item as the target runs it (same chunk, same cached
//           tokens, no sampling: the draft builds its KV of the prompt);
//           every decode item catches up: q = c_i + 1 - d_i tokens (its
//           newest token, plus the last accepted draft if the previous step
//           accepted everything) from position d_i, sampling draft 1 if
//           k'_i >= 1;
//   pass j = 2 .. max k'_i: each decode item with k'_i >= j feeds draft j - 1
//           (q = 1 at position c_i + j - 1) and samples draft j.
// Plain decodes of a speculative run (k'_i = 0) still make pass 1, so the
// draft stays in step with the target (as vLLM's proposer does when
// speculation is disabled by batch size).
// After verification accepted a_i drafts, the draft's cache holds
//   prefill item: c + q (as the target);
//   decode item:  c_i + min(k'_i, a_i + 1) for k'_i >= 1, c_i + 1 for k'_i = 0
// tokens: it computed positions up to c_i + k'_i - 1 and the target keeps
// positions up to c_i + a_i.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/iteration_plan.h"

namespace servesim {

// Draft tokens item verifies: num_query_tokens - 1 for a decode, 0 for a prefill.
inline int32_t proposed_drafts(const ScheduledSequence& item) {
  return item.is_prefill ? 0 : item.num_query_tokens - 1;
}

// Fills `passes` (resized; plans reused) with the draft passes for `target`.
// draft_cached[i] is d_i for decode item i of target.sequences (ignored for
// prefill items). Each pass's sequences keep the target's request ids and
// block tables; plan indices are 0, 1, ...  Throws std::logic_error if some
// d_i > c_i.
void plan_draft_passes(const IterationPlan& target, std::span<const int32_t> draft_cached,
                       std::vector<IterationPlan>& passes);

// Tokens in the draft's cache after `item` accepted `accepted` drafts (see above).
int32_t draft_cached_after(const ScheduledSequence& item, int32_t accepted);

}  // namespace servesim
