// Speculative decoding's acceptance rules on a vocabulary of 8 tokens:
// greedy prefix matching, rejection sampling (it must leave the emitted
// tokens distributed as the target's p, chi-square), controlled acceptance,
// and the seeding of every draw.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/decoder/sampler.h"
#include "kernels/decoder/speculative_sampling.h"

using namespace servesim;

namespace {

constexpr int64_t V = 8;

// Logits whose softmax at temperature 1 is `probabilities` (all > 0).
std::vector<float> logits_of(const std::vector<double>& probabilities) {
  std::vector<float> l;
  for (double p : probabilities) l.push_back(float(std::log(p)));
  return l;
}

// Rows stacked into one [rows, V] buffer.
std::vector<float> stack(const std::vector<std::vector<float>>& rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

std::vector<double> distribution(const std::vector<float>& logits, const SamplingParams& params) {
  std::vector<double> p(logits.size());
  sampling_distribution(logits, params, p);
  return p;
}

// Upper 0.1% points of the chi-square distribution by degrees of freedom
// (index 1 .. 7): a correct sampler exceeds them with probability 0.001.
const double kChi2Critical999[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322};

// Pearson's chi-square of `counts` (n draws) against `p`; tokens with p == 0
// must never be drawn. The draws are seeded, so the test always passes or
// always fails; the threshold is the upper 0.1% point.
void require_distributed_as(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  REQUIRE(n > 1000);
  double chi2 = 0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0) {
      INFO("token " << i << " is outside the target distribution");
      REQUIRE(counts[i] == 0);
      continue;
    }
    const double expected = double(n) * p[i];
    chi2 += (double(counts[i]) - expected) * (double(counts[i]) - expected) / expected;
    ++cells;
  }
  INFO("chi-square " << chi2 << " over " << cells << " tokens, " << n << " draws");
  REQUIRE(cells >= 2);
  REQUIRE(chi2 < kChi2Critical999[cells - 1]);
}

// Target and draft distributions that disagree: the draft favours tokens
// the target finds unlikely, so rejections and residual draws are frequent.
const std::vector<double> kP1 = {0.30, 0.05, 0.20, 0.02, 0.15, 0.08, 0.12, 0.08};
const std::vector<double> kQ1 = {0.10, 0.30, 0.05, 0.20, 0.15, 0.05, 0.05, 0.10};
const std::vector<double> kP2 = {0.05, 0.10, 0.10, 0.40, 0.05, 0.10, 0.15, 0.05};
const std::vector<double> kQ2 = {0.20, 0.10, 0.10, 0.10, 0.20, 0.10, 0.10, 0.10};
const std::vector<double> kP3 = {0.125, 0.125, 0.125, 0.125, 0.2, 0.1, 0.1, 0.1};

}  // namespace

TEST_CASE("speculative: uniforms depend on seed, request, position and purpose only", "[speculative]") {
  const double u = speculative_uniform(7, 3, 11, DrawPurpose::Accept);
  REQUIRE(u >= 0.0);
  REQUIRE(u < 1.0);
  REQUIRE(speculative_uniform(7, 3, 11, DrawPurpose::Accept) == u);
  REQUIRE(speculative_uniform(8, 3, 11, DrawPurpose::Accept) != u);
  REQUIRE(speculative_uniform(7, 4, 11, DrawPurpose::Accept) != u);
  REQUIRE(speculative_uniform(7, 3, 12, DrawPurpose::Accept) != u);
  REQUIRE(speculative_uniform(7, 3, 11, DrawPurpose::Residual) != u);
  REQUIRE(speculative_uniform(7, 3, 11, DrawPurpose::DraftToken) != u);
  // Their mean over many positions is 1/2 (standard error 0.0029 at 10^4).
  double sum = 0;
  for (int64_t pos = 0; pos < 10000; ++pos) sum += speculative_uniform(1, 2, pos, DrawPurpose::Controlled);
  REQUIRE(sum / 10000 == Approx(0.5).margin(0.015));
}

TEST_CASE("speculative: draw_from inverts the cumulative distribution", "[speculative]") {
  const std::vector<double> p = {0.0, 0.25, 0.0, 0.5, 0.25};
  REQUIRE(draw_from(p, 0.0) == 1);
  REQUIRE(draw_from(p, 0.2499) == 1);
  REQUIRE(draw_from(p, 0.25) == 3);
  REQUIRE(draw_from(p, 0.7499) == 3);
  REQUIRE(draw_from(p, 0.75) == 4);
  REQUIRE(draw_from(p, 0.99999999) == 4);
  REQUIRE(draw_from(p, 1.0) == 4);  // past the total by rounding: the last token with mass
}

TEST_CASE("speculative: greedy verification keeps the longest prefix that matches the argmax", "[speculative]") {
  // Row j's argmax: 4, 1, 6, 2 (the last row gives the bonus).
  std::vector<std::vector<float>> rows(4, std::vector<float>(V, 0.0f));
  const int32_t best[] = {4, 1, 6, 2};
  for (size_t j = 0; j < rows.size(); ++j) rows[j][size_t(best[j])] = 3.0f;
  const std::vector<float> logits = stack(rows);

  SECTION("all drafts match: every draft and the bonus") {
    const std::vector<int32_t> drafts = {4, 1, 6};
    const Verification v = verify_greedy(drafts, logits, V);
    REQUIRE(v.accepted == 3);
    REQUIRE(v.tokens == std::vector<int32_t>{4, 1, 6, 2});
  }
  SECTION("a mismatch at the second draft: the first draft and the target's token there") {
    const std::vector<int32_t> drafts = {4, 5, 6};
    const Verification v = verify_greedy(drafts, logits, V);
    REQUIRE(v.accepted == 1);
    REQUIRE(v.tokens == std::vector<int32_t>{4, 1});
  }
  SECTION("the first draft is wrong: only the target's token") {
    const std::vector<int32_t> drafts = {0, 1, 6};
    const Verification v = verify_greedy(drafts, logits, V);
    REQUIRE(v.accepted == 0);
    REQUIRE(v.tokens == std::vector<int32_t>{4});
  }
  SECTION("no drafts (a plain decode): the argmax") {
    const Verification v = verify_greedy({}, std::span<const float>(logits).first(V), V);
    REQUIRE(v.accepted == 0);
    REQUIRE(v.tokens == std::vector<int32_t>{4});
  }
  SECTION("ties go to the lowest id, as the sampler's greedy") {
    std::vector<float> tie(2 * V, 0.0f);
    tie[2] = tie[5] = 1.0f;
    tie[V + 7] = 1.0f;
    const std::vector<int32_t> drafts = {2};
    REQUIRE(verify_greedy(drafts, tie, V).tokens == std::vector<int32_t>{2, 7});
    const std::vector<int32_t> other = {5};
    REQUIRE(verify_greedy(other, tie, V).tokens == std::vector<int32_t>{2});
  }
  SECTION("a malformed logits buffer is a logic error") {
    const std::vector<int32_t> drafts = {4, 1, 6};
    REQUIRE_THROWS_AS(verify_greedy(drafts, std::span<const float>(logits).first(3 * V), V), std::logic_error);
  }
}

TEST_CASE("speculative: rejection sampling reproduces the target distribution (chi-square)", "[speculative]") {
  const int64_t n = 40000;
  for (const double top_p : {1.0, 0.8}) {
    INFO("top_p " << top_p);
    const SamplingParams params{1.0, top_p, 2024};
    const std::vector<float> p1 = logits_of(kP1), q1 = logits_of(kQ1), p2 = logits_of(kP2), q2 = logits_of(kQ2),
                             p3 = logits_of(kP3);
    const std::vector<double> P1 = distribution(p1, params), Q1 = distribution(q1, params),
                              P2 = distribution(p2, params), P3 = distribution(p3, params);
    // Closed form: P(accept draft 1) = sum_x min(p(x), q(x)).
    double overlap = 0;
    for (int64_t x = 0; x < V; ++x) overlap += std::min(P1[size_t(x)], Q1[size_t(x)]);

    SECTION("one draft: the first token, and the bonus after an acceptance") {
      const std::vector<float> target = stack({p1, p2});
      std::vector<int64_t> first(V, 0), bonus(V, 0);
      int64_t accepted = 0;
      std::vector<double> q(V);
      for (int64_t r = 0; r < n; ++r) {
        // Trial r is request r: its draws are independent of the others'.
        const int32_t x = propose_draft_token(q1, params, r, 10, q);
        REQUIRE(q == Q1);
        const std::vector<int32_t> drafts = {x};
        const Verification v = verify_rejection(drafts, q, target, V, params, r, 10);
        REQUIRE(int32_t(v.tokens.size()) == v.accepted + 1);
        ++first[size_t(v.tokens[0])];
        if (v.accepted == 1) {
          REQUIRE(v.tokens[0] == x);
          ++bonus[size_t(v.tokens[1])];
          ++accepted;
        }
      }
      require_distributed_as(first, P1);
      require_distributed_as(bonus, P2);
      // Acceptances are Bernoulli(overlap): 4 standard errors.
      const double se = std::sqrt(overlap * (1 - overlap) / double(n));
      REQUIRE(double(accepted) / double(n) == Approx(overlap).margin(4 * se));
    }
    SECTION("two drafts: the second position given the first was accepted, and the bonus") {
      const std::vector<float> target = stack({p1, p2, p3});
      std::vector<int64_t> first(V, 0), second(V, 0), bonus(V, 0);
      std::vector<double> q(2 * V);
      for (int64_t r = 0; r < n; ++r) {
        const int32_t x1 = propose_draft_token(q1, params, r, 20, std::span<double>(q).first(V));
        const int32_t x2 = propose_draft_token(q2, params, r, 21, std::span<double>(q).last(V));
        const std::vector<int32_t> drafts = {x1, x2};
        const Verification v = verify_rejection(drafts, q, target, V, params, r, 20);
        ++first[size_t(v.tokens[0])];
        if (v.accepted >= 1) ++second[size_t(v.tokens[1])];
        if (v.accepted == 2) ++bonus[size_t(v.tokens[2])];
      }
      require_distributed_as(first, P1);
      require_distributed_as(second, P2);
      require_distributed_as(bonus, P3);
    }
  }
}

TEST_CASE("speculative: with the draft's distribution equal to the target's every draft is accepted",
          "[speculative]") {
  for (const double temperature : {0.7, 1.0, 1.6}) {
    INFO("temperature " << temperature);
    const SamplingParams params{temperature, 0.9, 5};
    const std::vector<float> p1 = logits_of(kP1), p2 = logits_of(kP2), p3 = logits_of(kP3);
    const std::vector<float> target = stack({p1, p2, p3});
    std::vector<double> q(2 * V);
    for (int64_t r = 0; r < 2000; ++r) {
      const std::vector<int32_t> drafts = {propose_draft_token(p1, params, r, 0, std::span<double>(q).first(V)),
                                           propose_draft_token(p2, params, r, 1, std::span<double>(q).last(V))};
      const Verification v = verify_rejection(drafts, q, target, V, params, r, 0);
      REQUIRE(v.accepted == 2);
      REQUIRE(v.tokens[0] == drafts[0]);
      REQUIRE(v.tokens[1] == drafts[1]);
      // The bonus is the sampler's own draw at its position.
      REQUIRE(v.tokens[2] == sample_token(p3, params, r, 2));
    }
  }
}

TEST_CASE("speculative: a draft the target gives no mass is always rejected", "[speculative]") {
  // top-p 0.5 keeps only tokens 0 and 2 of kP1; the draft proposes 1.
  const SamplingParams params{1.0, 0.5, 9};
  const std::vector<float> p1 = logits_of(kP1), p2 = logits_of(kP2);
  const std::vector<double> P1 = distribution(p1, params);
  REQUIRE(P1[1] == 0.0);
  std::vector<double> q(V, 0.0);
  q[1] = 1.0;
  const std::vector<float> target = stack({p1, p2});
  std::vector<int64_t> counts(V, 0);
  for (int64_t r = 0; r < 5000; ++r) {
    const std::vector<int32_t> drafts = {1};
    const Verification v = verify_rejection(drafts, q, target, V, params, r, 3);
    REQUIRE(v.accepted == 0);
    ++counts[size_t(v.tokens[0])];
  }
  // The residual max(0, p - q) is p itself here.
  require_distributed_as(counts, P1);
}

TEST_CASE("speculative: controlled acceptance accepts each draft with the chosen probability", "[speculative]") {
  const SamplingParams params{0.0, 1.0, 77};
  const std::vector<float> target = stack({logits_of(kP1), logits_of(kP2), logits_of(kP3), logits_of(kP1)});
  const std::vector<int32_t> drafts = {7, 7, 7};  // never the target's argmax: acceptance is the coin alone

  SECTION("rate 1 accepts everything, then the bonus is the target's own token") {
    for (int64_t r = 0; r < 200; ++r) {
      const Verification v = verify_controlled(drafts, target, V, params, 1.0, r, 4);
      REQUIRE(v.accepted == 3);
      REQUIRE(v.tokens == std::vector<int32_t>{7, 7, 7, 0});  // argmax of the 4th row (kP1)
    }
  }
  SECTION("rate 0 accepts nothing; the target's own token is emitted") {
    for (int64_t r = 0; r < 200; ++r) {
      const Verification v = verify_controlled(drafts, target, V, params, 0.0, r, 4);
      REQUIRE(v.accepted == 0);
      REQUIRE(v.tokens == std::vector<int32_t>{0});
    }
  }
  SECTION("mean tokens per step is (1 - a^(k+1)) / (1 - a)") {
    const int64_t n = 20000;
    for (const double a : {0.3, 0.6, 0.9}) {
      double sum = 0, sum2 = 0;
      std::vector<int64_t> rejected_at(4, 0);
      for (int64_t r = 0; r < n; ++r) {
        const Verification v = verify_controlled(drafts, target, V, params, a, r, 4);
        const double tokens = double(v.tokens.size());
        sum += tokens;
        sum2 += tokens * tokens;
        ++rejected_at[size_t(v.accepted)];
        // At the rejection point (or for the bonus) the target's own token.
        const int32_t own[] = {0, 3, 4, 0};
        REQUIRE(v.tokens.back() == own[v.accepted]);
      }
      const double mean = sum / double(n), se = std::sqrt((sum2 / double(n) - mean * mean) / double(n));
      const double want = (1 - std::pow(a, 4)) / (1 - a);
      INFO("a = " << a << ": " << mean << " tokens per step, closed form " << want << ", s.e. " << se);
      REQUIRE(mean == Approx(want).margin(4 * se));
    }
  }
}
