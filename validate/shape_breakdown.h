// Where a cost model is wrong: the per-iteration error of a validation broken
// down by the shape of the iteration — its kind (prefill, decode, mixed), how
// many sequences it ran and how long their contexts were. A profile that is
// right on average can be 20% wrong on the batches a workload builds; this
// says which.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "validate/record.h"

namespace servesim {

// Buckets: sequences 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65+; context (the
// mean over the iteration's sequences of cached + new tokens) up to 128,
// 256, 512, 1024, 2048, 4096, 8192, above.
struct ShapeBucket {
  IterationKind kind = IterationKind::Decode;
  int sequences_bucket = 0;  // index into sequence_bucket_label
  int context_bucket = -1;   // index into context_bucket_label; -1: every context
};
int sequence_bucket_of(int64_t sequences);
int context_bucket_of(double mean_context);
std::string sequence_bucket_label(int bucket);  // "1", "2", "3-4", ..., "65+"
std::string context_bucket_label(int bucket);   // "1-128", "129-256", ..., "8193+"
int num_sequence_buckets();
int num_context_buckets();

struct ShapeErrors {
  ShapeBucket bucket;
  int64_t count = 0;
  double median_ratio = 0;  // median of predicted / measured
  double mape = 0;          // mean of |predicted / measured - 1|
  double bias = 0;          // mean of predicted / measured - 1
};

// Rows (kind x sequences) with context_bucket -1, then (kind x sequences x
// context), each list in kind, then sequences, then context order; empty
// buckets are left out. Iterations whose measured time is <= 0 are skipped.
struct ShapeBreakdown {
  std::vector<ShapeErrors> by_sequences;
  std::vector<ShapeErrors> by_sequences_context;
  // The (kind x sequences) rows with at least `min_count` iterations whose
  // median ratio is furthest from 1: the worst shape a user should know of.
  const ShapeErrors* worst(int64_t min_count) const;
};
ShapeBreakdown shape_breakdown(const std::vector<RecordedIteration>& iterations, std::span<const double> predicted);

// The mean context of one recorded iteration (cached + new tokens, averaged
// over its sequences); 0 without sequences.
double mean_context(const RecordedIteration& iteration);

nlohmann::json shape_breakdown_json(const ShapeBreakdown& b);
// iteration_breakdown.csv: kind,sequences,context,count,median_ratio,mape,bias
// ("all" in context for the kind x sequences rows).
std::string shape_breakdown_csv(const ShapeBreakdown& b);
// The stdout table: one line per (kind x sequences) bucket.
std::string format_shape_breakdown(const ShapeBreakdown& b);

}  // namespace servesim
