#include "validate/shape_breakdown.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace servesim {
namespace {

// Upper edges of the buckets; the last bucket is open.
constexpr int64_t kSequenceEdges[] = {1, 2, 4, 8, 16, 32, 64};
constexpr double kContextEdges[] = {128, 256, 512, 1024, 2048, 4096, 8192};
constexpr int kSequenceBuckets = int(std::size(kSequenceEdges)) + 1;
constexpr int kContextBuckets = int(std::size(kContextEdges)) + 1;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

ShapeErrors summarise(const ShapeBucket& bucket, const std::vector<double>& ratios) {
  ShapeErrors e;
  e.bucket = bucket;
  e.count = int64_t(ratios.size());
  double abs = 0, signed_ = 0;
  for (double r : ratios) {
    abs += std::fabs(r - 1);
    signed_ += r - 1;
  }
  e.mape = abs / double(ratios.size());
  e.bias = signed_ / double(ratios.size());
  e.median_ratio = median_of(ratios);
  return e;
}

std::string kind_name(IterationKind k) { return to_string(k); }

}  // namespace

int num_sequence_buckets() { return kSequenceBuckets; }
int num_context_buckets() { return kContextBuckets; }

int sequence_bucket_of(int64_t sequences) {
  for (int i = 0; i < kSequenceBuckets - 1; ++i)
    if (sequences <= kSequenceEdges[i]) return i;
  return kSequenceBuckets - 1;
}

int context_bucket_of(double mean_context) {
  for (int i = 0; i < kContextBuckets - 1; ++i)
    if (mean_context <= kContextEdges[i]) return i;
  return kContextBuckets - 1;
}

std::string sequence_bucket_label(int b) {
  if (b < 0 || b >= kSequenceBuckets) throw std::out_of_range("sequence bucket");
  if (b == kSequenceBuckets - 1) return fmt::format("{}+", kSequenceEdges[b - 1] + 1);
  const int64_t lo = b == 0 ? 1 : kSequenceEdges[b - 1] + 1, hi = kSequenceEdges[b];
  return lo == hi ? fmt::format("{}", hi) : fmt::format("{}-{}", lo, hi);
}

std::string context_bucket_label(int b) {
  if (b < 0 || b >= kContextBuckets) throw std::out_of_range("context bucket");
  if (b == kContextBuckets - 1) return fmt::format("{}+", int64_t(kContextEdges[b - 1]) + 1);
  const int64_t lo = b == 0 ? 1 : int64_t(kContextEdges[b - 1]) + 1;
  return fmt::format("{}-{}", lo, int64_t(kContextEdges[b]));
}

double mean_context(const RecordedIteration& it) {
  if (it.sequences.empty()) return 0;
  double sum = 0;
  for (const RecordedSequence& s : it.sequences) sum += double(s.num_cached_tokens) + double(s.num_query_tokens);
  return sum / double(it.sequences.size());
}

ShapeBreakdown shape_breakdown(const std::vector<RecordedIteration>& iterations, std::span<const double> predicted) {
  if (iterations.size() != predicted.size())
    throw std::invalid_argument("shape_breakdown: iterations and predicted differ in length");
  using Key = std::tuple<int, int, int>;  // kind, sequences bucket, context bucket (-1: all)
  std::map<Key, std::vector<double>> ratios;
  for (size_t i = 0; i < iterations.size(); ++i) {
    const RecordedIteration& it = iterations[i];
    if (!(it.measured_s > 0) || !std::isfinite(predicted[i])) continue;
    const double r = predicted[i] / it.measured_s;
    const int kind = int(it.kind());
    const int sb = sequence_bucket_of(int64_t(it.sequences.size()));
    ratios[{kind, sb, -1}].push_back(r);
    ratios[{kind, sb, context_bucket_of(mean_context(it))}].push_back(r);
  }
  ShapeBreakdown b;
  for (const auto& [key, v] : ratios) {  // std::map: kind, sequences, context order
    const auto [kind, sb, cb] = key;
    ShapeErrors e = summarise(ShapeBucket{IterationKind(kind), sb, cb}, v);
    (cb < 0 ? b.by_sequences : b.by_sequences_context).push_back(e);
  }
  return b;
}

const ShapeErrors* ShapeBreakdown::worst(int64_t min_count) const {
  const ShapeErrors* w = nullptr;
  for (const ShapeErrors& e : by_sequences)
    if (e.count >= min_count && (!w || std::fabs(std::log(e.median_ratio)) > std::fabs(std::log(w->median_ratio))))
      w = &e;
  return w;
}

nlohmann::json shape_breakdown_json(const ShapeBreakdown& b) {
  auto rows = [](const std::vector<ShapeErrors>& list) {
    nlohmann::json a = nlohmann::json::array();
    for (const ShapeErrors& e : list) {
      nlohmann::json r = {{"kind", kind_name(e.bucket.kind)},
                          {"sequences", sequence_bucket_label(e.bucket.sequences_bucket)},
                          {"count", e.count},
                          {"median_ratio", e.median_ratio},
                          {"mape", e.mape},
                          {"bias", e.bias}};
      if (e.bucket.context_bucket >= 0) r["context"] = context_bucket_label(e.bucket.context_bucket);
      a.push_back(r);
    }
    return a;
  };
  return {{"by_kind_sequences", rows(b.by_sequences)},
          {"by_kind_sequences_context", rows(b.by_sequences_context)},
          {"definitions",
           {{"median_ratio", "median over the bucket's iterations of predicted cost / measured time (1: right, "
                             "above 1: predicted too slow)"},
            {"mape", "mean of |predicted / measured - 1|"},
            {"bias", "mean of predicted / measured - 1"},
            {"sequences", "the iteration's number of sequences"},
            {"context", "the mean over the iteration's sequences of cached + new tokens"}}}};
}

std::string shape_breakdown_csv(const ShapeBreakdown& b) {
  std::string t = "kind,sequences,context,count,median_ratio,mape,bias\n";
  for (const auto* list : {&b.by_sequences, &b.by_sequences_context})
    for (const ShapeErrors& e : *list)
      t += fmt::format("{},{},{},{},{},{},{}\n", kind_name(e.bucket.kind),
                       sequence_bucket_label(e.bucket.sequences_bucket),
                       e.bucket.context_bucket < 0 ? "all" : context_bucket_label(e.bucket.context_bucket), e.count,
                       e.median_ratio, e.mape, e.bias);
  return t;
}

std::string format_shape_breakdown(const ShapeBreakdown& b) {
  std::string t = "  iteration time by shape: predicted / measured (median), MAPE, iterations\n";
  t += fmt::format("    {:<8} {:>9} {:>8} {:>8} {:>10}\n", "kind", "sequences", "median", "MAPE", "iterations");
  for (const ShapeErrors& e : b.by_sequences)
    t += fmt::format("    {:<8} {:>9} {:>8.3f} {:>7.1f}% {:>10}\n", kind_name(e.bucket.kind),
                     sequence_bucket_label(e.bucket.sequences_bucket), e.median_ratio, e.mape * 100, e.count);
  return t;
}

}  // namespace servesim
