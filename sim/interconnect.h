// The links between the GPUs of one server and what tensor and pipeline
// parallelism's communication over them costs: all-reduce, all-gather and
// point-to-point sends. Formulas, figures and their sources:
// docs/parallelism.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace servesim {

// vLLM's CustomAllreduce takes a message only below its max_size (default
// 8192 * 1024 bytes; `inp_size < self.max_size`); larger ones go to NCCL.
inline constexpr double kCustomAllReduceMaxBytes = 8.0 * 1024 * 1024;

// The preset assumed for hardware without one of its own (a user's hardware
// JSON): see hardware_has_interconnect().
inline constexpr const char* kDefaultInterconnect = "pcie4";

// One collective at one rank count, in one of two forms: an alpha-beta line
// (a small-message floor and a large-message bus bandwidth), or measured
// points (the time at each of increasing message sizes).
struct CollectiveCurve {
  int ranks = 0;
  double latency_s = 0;         // alpha-beta: the floor, seconds
  double bus_bandwidth = 0;     // alpha-beta: bytes/s, nccl-tests' busbw convention
  std::vector<double> bytes;    // measured: message sizes, > 0, strictly increasing
  std::vector<double> seconds;  // measured: the time at each size, > 0
  bool has_points() const { return !bytes.empty(); }
};

struct Interconnect {
  std::string name;         // "nvlink4", or the user file's name
  std::string description;  // "NVLink 4 (H100/H200 SXM), 900 GB/s per GPU"
  std::string source;       // where the figures come from
  bool measured = false;    // from a user's table

  // A preset holds alpha-beta lines at 2, 4 and 8 ranks, interpolated in
  // log2(ranks) for other counts; custom_all_reduce is empty where vLLM
  // cannot use its custom kernel (no NVLink). A measured table holds its
  // curves in all_reduce (it replaces both implementations) and costs only
  // the rank counts it lists.
  std::vector<CollectiveCurve> custom_all_reduce;
  std::vector<CollectiveCurve> all_reduce;  // NCCL (preset) or measured
  // Empty in a measured table without one: an all-gather of S bytes then
  // costs what the table's all-reduce of S/2 bytes costs.
  std::vector<CollectiveCurve> all_gather;
  double p2p_latency_s = 0;  // one send between two GPUs
  double p2p_bandwidth = 0;  // bytes/s, one direction
  // False for a measured table that gives no p2p (nccl-tests' all_reduce_perf
  // never does): its p2p figures are a stand-in the caller should replace
  // with the hardware's (build_cost_models does).
  bool p2p_given = true;

  // One all-reduce of `bytes` (each rank's full message) over `ranks` GPUs:
  // floor + bytes * 2(ranks-1)/ranks / busbw. 0 for ranks == 1 or no bytes;
  // InputError for ranks < 1, bytes < 0 or a rank count a measured table
  // lacks (the message lists those it covers).
  double all_reduce_seconds(int ranks, double bytes) const;
  // An all-gather of `total_bytes` in all (each rank contributes
  // total_bytes / ranks): floor + total_bytes * (ranks-1)/ranks / busbw.
  double all_gather_seconds(int ranks, double total_bytes) const;
  // A point-to-point send of `bytes` (between pipeline stages).
  double send_seconds(double bytes) const;
  // Which implementation costs a message: "custom" (vLLM's custom
  // all-reduce), "nccl", "measured", or "none" for ranks == 1.
  std::string all_reduce_implementation(int ranks, double bytes) const;
  // The rank counts of the all-reduce table, ascending.
  std::vector<int> all_reduce_ranks() const;
  // name, description, source, measured, the tables (floors in us and bus
  // bandwidths in GB/s, or points in bytes and us) and p2p. A measured
  // table's JSON is a valid table file.
  nlohmann::json to_json() const;
};

const std::vector<Interconnect>& interconnect_presets();

// h100-sxm, h200 -> nvlink4; a100-80gb -> nvlink3; b200 -> nvlink5;
// l40s -> pcie4; rtx-4090 -> pcie4-consumer (case-insensitive); any other
// name -> the kDefaultInterconnect preset.
const Interconnect& interconnect_for_hardware(const std::string& hardware_name);
// False where interconnect_for_hardware() falls back to the default, so the
// caller can say that it assumed one.
bool hardware_has_interconnect(const std::string& hardware_name);

// A preset name (case-insensitive) or a table file (load_interconnect).
Interconnect resolve_interconnect(const std::string& preset_name_or_path);

// A user's measured table, the format detected by content: a JSON table, or
// the stdout of nccl-tests' all_reduce_perf (one or several runs one after
// another, one per rank count). InputError naming the file, line or entry
// and the field for anything wrong. Both in sim/interconnect_table.cpp.
Interconnect load_interconnect(const std::string& path);
// The same from the file's text; `source_name` names it in messages.
Interconnect parse_interconnect(const std::string& text, const std::string& source_name);

}  // namespace servesim
