// The per-iteration error by shape (validate/shape_breakdown.h), on a
// hand-made recording whose every bucket's figures are worked out below.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "validate/shape_breakdown.h"

using namespace servesim;

namespace {

// An iteration of `decodes` decode sequences at `cached` tokens and
// `prefills` prefill sequences of `q` new tokens.
RecordedIteration iteration(int decodes, int cached, int prefills, int q, double measured_s) {
  RecordedIteration it;
  for (int i = 0; i < decodes; ++i) it.sequences.push_back({i, 1, cached, false, true});
  for (int i = 0; i < prefills; ++i) it.sequences.push_back({100 + i, q, 0, true, true});
  it.decode_sequences = decodes;
  it.prefill_sequences = prefills;
  it.decode_tokens = decodes;
  it.prefill_tokens = prefills * q;
  it.measured_s = measured_s;
  return it;
}

const ShapeErrors* find(const std::vector<ShapeErrors>& rows, IterationKind kind, int sb, int cb) {
  for (const ShapeErrors& e : rows)
    if (e.bucket.kind == kind && e.bucket.sequences_bucket == sb && e.bucket.context_bucket == cb) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("shape breakdown: bucket edges and labels") {
  CHECK(sequence_bucket_of(1) == 0);
  CHECK(sequence_bucket_of(2) == 1);
  CHECK(sequence_bucket_of(3) == 2);
  CHECK(sequence_bucket_of(4) == 2);
  CHECK(sequence_bucket_of(5) == 3);
  CHECK(sequence_bucket_of(64) == 6);
  CHECK(sequence_bucket_of(65) == 7);
  CHECK(sequence_bucket_label(0) == "1");
  CHECK(sequence_bucket_label(2) == "3-4");
  CHECK(sequence_bucket_label(7) == "65+");
  CHECK(context_bucket_of(128) == 0);
  CHECK(context_bucket_of(128.5) == 1);
  CHECK(context_bucket_of(9000) == num_context_buckets() - 1);
  CHECK(context_bucket_label(0) == "1-128");
  CHECK(context_bucket_label(1) == "129-256");
  CHECK(context_bucket_label(num_context_buckets() - 1) == "8193+");
}

TEST_CASE("shape breakdown: counts, medians, MAPE and bias per bucket") {
  std::vector<RecordedIteration> its;
  std::vector<double> predicted;
  // Decode, 1 sequence at context 100 (+1 new): ratios 1.0, 1.1, 0.9.
  for (double r : {1.0, 1.1, 0.9}) {
    its.push_back(iteration(1, 100, 0, 0, 0.01));
    predicted.push_back(0.01 * r);
  }
  // Decode, 6 sequences: at context 300 ratios 1.3, 1.2; at context 50 ratio 1.0.
  for (double r : {1.3, 1.2}) {
    its.push_back(iteration(6, 299, 0, 0, 0.02));
    predicted.push_back(0.02 * r);
  }
  its.push_back(iteration(6, 49, 0, 0, 0.02));
  predicted.push_back(0.02);
  // A prefill of 1 sequence, 200 tokens: ratio 0.8.
  its.push_back(iteration(0, 0, 1, 200, 0.05));
  predicted.push_back(0.04);
  // Mixed: 3 decodes at 99 cached, 1 prefill of 100: 4 sequences, mean context 100; ratio 1.05.
  its.push_back(iteration(3, 99, 1, 100, 0.03));
  predicted.push_back(0.0315);
  // A zero measured time is left out.
  its.push_back(iteration(1, 100, 0, 0, 0.0));
  predicted.push_back(0.01);

  const ShapeBreakdown b = shape_breakdown(its, predicted);
  REQUIRE(b.by_sequences.size() == 4);

  const ShapeErrors* d1 = find(b.by_sequences, IterationKind::Decode, 0, -1);
  REQUIRE(d1);
  CHECK(d1->count == 3);
  CHECK(d1->median_ratio == Approx(1.0));
  CHECK(d1->mape == Approx(0.2 / 3));
  CHECK(d1->bias == Approx(0.0).margin(1e-12));

  const ShapeErrors* d6 = find(b.by_sequences, IterationKind::Decode, 3, -1);
  REQUIRE(d6);
  CHECK(d6->count == 3);
  CHECK(d6->median_ratio == Approx(1.2));
  CHECK(d6->mape == Approx(0.5 / 3));
  CHECK(d6->bias == Approx(0.5 / 3));
  // ... and by context: 257-512 holds the two slow ones, 1-128 the right one.
  const ShapeErrors* d6_long = find(b.by_sequences_context, IterationKind::Decode, 3, 2);
  REQUIRE(d6_long);
  CHECK(d6_long->count == 2);
  CHECK(d6_long->median_ratio == Approx(1.25));  // even count: the mean of the middle two
  const ShapeErrors* d6_short = find(b.by_sequences_context, IterationKind::Decode, 3, 0);
  REQUIRE(d6_short);
  CHECK(d6_short->count == 1);
  CHECK(d6_short->median_ratio == Approx(1.0));

  const ShapeErrors* p1 = find(b.by_sequences, IterationKind::Prefill, 0, -1);
  REQUIRE(p1);
  CHECK(p1->median_ratio == Approx(0.8));
  CHECK(find(b.by_sequences_context, IterationKind::Prefill, 0, 1));  // context 200

  const ShapeErrors* m4 = find(b.by_sequences, IterationKind::Mixed, 2, -1);
  REQUIRE(m4);
  CHECK(m4->median_ratio == Approx(1.05));
  CHECK(find(b.by_sequences_context, IterationKind::Mixed, 2, 0));  // mean context (3 x 100 + 100) / 4

  SECTION("the worst bucket with enough iterations") {
    REQUIRE(b.worst(3));
    CHECK(b.worst(3) == d6);
    CHECK(b.worst(1)->median_ratio == Approx(0.8));  // |log 0.8| > |log 1.2|
    CHECK(b.worst(4) == nullptr);
  }
  SECTION("the CSV has one line per bucket") {
    const std::string csv = shape_breakdown_csv(b);
    CHECK(csv.rfind("kind,sequences,context,count,median_ratio,mape,bias\n", 0) == 0);
    size_t lines = 0;
    for (char c : csv) lines += c == '\n';
    CHECK(lines == 1 + b.by_sequences.size() + b.by_sequences_context.size());
    CHECK(csv.find("decode,5-8,all,3,") != std::string::npos);
    CHECK(csv.find("decode,5-8,257-512,2,1.2") != std::string::npos);
  }
  SECTION("the JSON names the buckets") {
    const nlohmann::json j = shape_breakdown_json(b);
    CHECK(j["by_kind_sequences"].size() == b.by_sequences.size());
    CHECK(j["by_kind_sequences"][0]["kind"] == "decode");
    CHECK(j["by_kind_sequences"][0]["sequences"] == "1");
    CHECK(j["by_kind_sequences_context"][0]["context"] == "1-128");
  }
}

TEST_CASE("shape breakdown: lengths must agree") {
  std::vector<RecordedIteration> its(2);
  std::vector<double> predicted(1, 0.1);
  CHECK_THROWS_AS(shape_breakdown(its, predicted), std::invalid_argument);
}
