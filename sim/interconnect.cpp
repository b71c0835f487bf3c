#include "sim/interconnect.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {
namespace {

// Dividing by an exact power of ten rounds once, so 5 us is exactly 5e-6 s.
double from_us(double us) { return us / 1e6; }
double to_us(double s) { return s * 1e6; }
constexpr double kGiga = 1e9;  // nccl-tests' GB/s are 1e9 bytes/s

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

CollectiveCurve line(int ranks, double latency_us, double bus_gbps) {
  CollectiveCurve c;
  c.ranks = ranks;
  c.latency_s = from_us(latency_us);
  c.bus_bandwidth = bus_gbps * kGiga;
  return c;
}

// Lines at 2, 4 and 8 ranks; custom_floor_us 0: no vLLM custom all-reduce.
// vLLM's custom kernel moves the same bytes over the same links as NCCL, so
// it shares NCCL's bus bandwidth and differs only in its floor.
Interconnect preset(std::string name, std::string description, std::string source, double custom_floor_us,
                    const double (&nccl_floor_us)[3], const double (&bus_gbps)[3], double p2p_latency_us,
                    double p2p_gbps) {
  Interconnect ic{std::move(name), std::move(description), std::move(source), false, {}, {}, {},
                  from_us(p2p_latency_us), p2p_gbps * kGiga};
  const int ranks[3] = {2, 4, 8};
  for (int i = 0; i < 3; ++i) {
    if (custom_floor_us > 0) ic.custom_all_reduce.push_back(line(ranks[i], custom_floor_us, bus_gbps[i]));
    ic.all_reduce.push_back(line(ranks[i], nccl_floor_us[i], bus_gbps[i]));
    // NVLink SHARP lifts only all-reduce's busbw above what one link
    // achieves; other collectives stay at or below it (nccl-tests#212).
    ic.all_gather.push_back(line(ranks[i], nccl_floor_us[i], std::min(bus_gbps[i], p2p_gbps)));
  }
  return ic;
}

struct Line {
  double latency_s, bus_bandwidth;
};

// A preset's line at `ranks`: the floor linear in log2(ranks), extrapolated
// past the table's ends; the bus bandwidth likewise between entries and held
// at the nearest end's value outside them.
Line interpolate(const Interconnect& ic, const std::vector<CollectiveCurve>& table, int ranks) {
  if (table.empty()) throw InputError(fmt::format("interconnect '{}' has no table for this collective", ic.name));
  for (const CollectiveCurve& c : table)
    if (c.ranks == ranks) return {c.latency_s, c.bus_bandwidth};
  if (table.size() == 1) return {table[0].latency_s, table[0].bus_bandwidth};
  size_t hi = 1;
  while (hi + 1 < table.size() && table[hi].ranks < ranks) ++hi;
  const CollectiveCurve& a = table[hi - 1];
  const CollectiveCurve& b = table[hi];
  const double u = (std::log2(ranks) - std::log2(a.ranks)) / (std::log2(b.ranks) - std::log2(a.ranks));
  const double uc = std::clamp(u, 0.0, 1.0);
  return {std::max(0.0, a.latency_s + u * (b.latency_s - a.latency_s)),
          a.bus_bandwidth + uc * (b.bus_bandwidth - a.bus_bandwidth)};
}

// A measured curve at `bytes`: log-log between points; below the smallest
// size, its time (the latency floor); above the largest, its time plus the
// extra bytes at its bus bandwidth, t_last + (S - S_last) * f / (S_last * f
// / t_last), which is t_last * S / S_last for any busbw factor f.
double curve_seconds(const CollectiveCurve& c, double bytes, double factor) {
  if (!c.has_points()) return c.latency_s + bytes * factor / c.bus_bandwidth;
  const std::vector<double>& x = c.bytes;
  const std::vector<double>& t = c.seconds;
  if (bytes <= x.front()) return t.front();
  if (bytes >= x.back()) return t.back() * (bytes / x.back());
  const size_t i = size_t(std::upper_bound(x.begin(), x.end(), bytes) - x.begin());  // x[i-1] <= bytes < x[i]
  if (bytes == x[i - 1]) return t[i - 1];
  const double u = std::log(bytes / x[i - 1]) / std::log(x[i] / x[i - 1]);
  return t[i - 1] * std::pow(t[i] / t[i - 1], u);
}

const CollectiveCurve& covered(const Interconnect& ic, const std::vector<CollectiveCurve>& table, const char* what,
                               int ranks) {
  std::string list;
  for (const CollectiveCurve& c : table) {
    if (c.ranks == ranks) return c;
    list += fmt::format("{}{}", list.empty() ? "" : ", ", c.ranks);
  }
  throw InputError(fmt::format("interconnect '{}': its {} table has no entry for {} ranks; it covers {} ranks "
                               "(measure {} ranks with all_reduce_perf -b 8 -e 1G -f 2 -g {}, or use a preset)",
                               ic.name, what, ranks, list, ranks, ranks));
}

void check(const Interconnect& ic, int ranks, double bytes, const char* what) {
  if (ranks < 1) throw InputError(fmt::format("interconnect '{}': rank count must be >= 1 (got {})", ic.name, ranks));
  if (!(bytes >= 0) || !std::isfinite(bytes))
    throw InputError(fmt::format("interconnect '{}': {} must be a finite number of bytes >= 0 (got {})", ic.name,
                                 what, bytes));
}

// vLLM uses its custom kernel at world sizes 2, 4, 6 and 8
// (_SUPPORTED_WORLD_SIZES) for messages below its max_size.
bool uses_custom(const Interconnect& ic, int ranks, double bytes) {
  const bool supported = ranks == 2 || ranks == 4 || ranks == 6 || ranks == 8;
  return !ic.measured && !ic.custom_all_reduce.empty() && supported && bytes < kCustomAllReduceMaxBytes;
}

nlohmann::json curves_json(const std::vector<CollectiveCurve>& table) {
  nlohmann::json out = nlohmann::json::array();
  for (const CollectiveCurve& c : table) {
    nlohmann::json e = {{"ranks", c.ranks}};
    if (c.has_points()) {
      nlohmann::json points = nlohmann::json::array();
      for (size_t i = 0; i < c.bytes.size(); ++i) {
        const double b = c.bytes[i];
        nlohmann::json size = b == std::floor(b) && b < 9e15 ? nlohmann::json(int64_t(b)) : nlohmann::json(b);
        points.push_back({{"bytes", size}, {"time_us", to_us(c.seconds[i])}});
      }
      e["points"] = points;
    } else {
      e["latency_us"] = to_us(c.latency_s);
      e["bus_bandwidth_gbps"] = c.bus_bandwidth / kGiga;
    }
    out.push_back(e);
  }
  return out;
}

const Interconnect& preset_named(const std::string& name) {
  for (const Interconnect& ic : interconnect_presets())
    if (ic.name == name) return ic;
  throw InputError(fmt::format("no interconnect preset '{}'", name));
}


}  // namespace

const std::vector<Interconnect>& interconnect_presets() {
  // Every preset: t = floor + S * f(n) / busbw, f = 2(n-1)/n for all-reduce
  // and (n-1)/n for all-gather, nccl-tests' bus-bandwidth convention
  // (doc/PERFORMANCE.md). Per-figure reasoning: docs/parallelism.md.
  static const std::vector<Interconnect> presets = {
      preset("nvlink4", "NVLink 4 (H100/H200 SXM), 900 GB/s per GPU",
             "Link: NVLink 4, 18 links, 900 GB/s per GPU bidirectional, 450 GB/s per direction (NVIDIA H100 "
             "datasheet). Bus bandwidth 320/350/460 GB/s at n = 2/4/8 for NCCL and vLLM's custom all-reduce alike: "
             "estimate, below the ~480 GB/s peak 8-GPU all-reduce busbw with NVLink SHARP and the ~370 GB/s "
             "effective NVLink rate NCCL's maintainer gives (NVIDIA/nccl-tests#212, 2024). Floors: NCCL 6/9/16 us, "
             "custom all-reduce 5 us: estimates. All-gather: NCCL floors, busbw capped at the 370 GB/s link rate "
             "(no SHARP; nccl-tests#212). p2p: 370 GB/s achieved (nccl-tests#212), 8 us latency: assumption.",
             5, {6, 9, 16}, {320, 350, 460}, 8, 370),
      preset("nvlink3", "NVLink 3 (A100 SXM), 600 GB/s per GPU",
             "Link: NVLink 3, 12 links, 600 GB/s per GPU bidirectional, 300 GB/s per direction (NVIDIA A100 "
             "datasheet). Bus bandwidth 230/240/230 GB/s at n = 2/4/8: estimate; 8-GPU all_reduce_perf on A100 "
             "SXM reports 232.5 GB/s (NVIDIA/nccl-tests#175) and ~200 GB/s (nccl-tests#149); NVSwitch gives every "
             "GPU its full link rate, so n = 2 and 4 are taken alike. Floors: NCCL 8/12/20 us, custom all-reduce "
             "6 us: estimates, ~1.3x NVLink 4's for the older GPU and NVSwitch. p2p: 240 GB/s (80% of 300, the "
             "protocol overhead seen on NVLink 4) and 10 us: estimates.",
             6, {8, 12, 20}, {230, 240, 230}, 10, 240),
      preset("nvlink5", "NVLink 5 (B200), 1.8 TB/s per GPU",
             "Link: NVLink 5, 18 links, 1.8 TB/s per GPU bidirectional, 900 GB/s per direction (NVIDIA HGX B200 "
             "datasheet). Bus bandwidth 700/750/800 GB/s at n = 2/4/8: estimates, ~1.7x NVLink 4's in proportion "
             "to the link rate, not measurements. Floors as NVLink 4 (NCCL 6/9/16 us, custom 5 us): assumption. "
             "p2p: 770 GB/s, nvbandwidth GPU-to-GPU on GB200 (Azure/AI-benchmarking-guide#7, 2025); 8 us latency: "
             "assumption. All-gather busbw capped at the p2p rate.",
             5, {6, 9, 16}, {700, 750, 800}, 8, 770),
      preset("pcie4", "PCIe Gen4 x16 with P2P (L40S), 64 GB/s per GPU",
             "Link: PCIe Gen4 x16, 32 GB/s per direction, 64 GB/s bidirectional (NVIDIA L40S datasheet). NCCL only: "
             "vLLM disables its custom all-reduce on more than two GPUs without NVLink (custom_all_reduce.py). Bus "
             "bandwidth 20/18/15 GB/s and floors 12/20/35 us at n = 2/4/8: estimates; on PCIe the CPU and memory "
             "bound the rate (NVIDIA/nccl#1639). p2p: the n = 2 figures (one link): 20 GB/s, 12 us.",
             0, {12, 20, 35}, {20, 18, 15}, 12, 20),
      preset("pcie4-consumer", "PCIe Gen4 x16 without P2P (GeForce RTX 4090), 64 GB/s per GPU",
             "Link: PCIe Gen4 x16, no NVLink and no GPU peer-to-peer on GeForce, so NCCL stages traffic through "
             "host memory; NCCL only (vLLM's custom all-reduce needs P2P). Floors 15/25/40 us at n = 2/4/8: "
             "estimate; 8x RTX 4090 measure 42 us for an 8-byte all-reduce (NVIDIA/nccl#1530). Bus bandwidth "
             "12/10/8 GB/s: estimates (staging through host memory halves the usable PCIe rate). p2p: the n = 2 "
             "figures: 12 GB/s, 15 us.",
             0, {15, 25, 40}, {12, 10, 8}, 15, 12),
      preset("pcie5", "PCIe Gen5 x16, 128 GB/s per GPU",
             "Link: PCIe Gen5 x16, 64 GB/s per direction, 128 GB/s bidirectional (PCIe 5.0 specification). Bus "
             "bandwidth 35/28 GB/s at n = 4/8: 8x RTX 5090 on PCIe Gen5, all_reduce_perf -b 1g -e 8g -g 8 "
             "(NVIDIA/nccl#1639, 2025); 40 GB/s at n = 2: estimate. Floors 12/20/35 us: as pcie4 (estimate: set by "
             "PCIe round trips and NCCL's protocol, not the link rate). NCCL only. p2p: the n = 2 figures: 40 GB/s, "
             "12 us.",
             0, {12, 20, 35}, {40, 35, 28}, 12, 40),
  };
  return presets;
}

double Interconnect::all_reduce_seconds(int ranks, double bytes) const {
  check(*this, ranks, bytes, "an all-reduce's message");
  if (ranks == 1 || bytes == 0) return 0;
  const double factor = 2.0 * (ranks - 1) / ranks;
  if (measured) return curve_seconds(covered(*this, all_reduce, "all_reduce", ranks), bytes, factor);
  const Line l = interpolate(*this, uses_custom(*this, ranks, bytes) ? custom_all_reduce : all_reduce, ranks);
  return l.latency_s + bytes * factor / l.bus_bandwidth;
}

double Interconnect::all_gather_seconds(int ranks, double total_bytes) const {
  check(*this, ranks, total_bytes, "an all-gather's total");
  if (ranks == 1 || total_bytes == 0) return 0;
  // Same floor and busbw: S * (n-1)/n is what an all-reduce of S/2 moves.
  if (measured && all_gather.empty()) return all_reduce_seconds(ranks, total_bytes / 2);
  const double factor = double(ranks - 1) / ranks;
  if (measured) return curve_seconds(covered(*this, all_gather, "all_gather", ranks), total_bytes, factor);
  const Line l = interpolate(*this, all_gather, ranks);
  return l.latency_s + total_bytes * factor / l.bus_bandwidth;
}

double Interconnect::send_seconds(double bytes) const {
  check(*this, 2, bytes, "a send's message");
  if (bytes == 0) return 0;
  if (!(p2p_bandwidth > 0))
    throw InputError(fmt::format("interconnect '{}': no point-to-point bandwidth", name));
  return p2p_latency_s + bytes / p2p_bandwidth;
}

std::string Interconnect::all_reduce_implementation(int ranks, double bytes) const {
  check(*this, ranks, bytes, "an all-reduce's message");
  if (ranks == 1) return "none";
  if (measured) return "measured";
  return uses_custom(*this, ranks, bytes) ? "custom" : "nccl";
}

std::vector<int> Interconnect::all_reduce_ranks() const {
  std::vector<int> out;
  for (const CollectiveCurve& c : all_reduce) out.push_back(c.ranks);
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json Interconnect::to_json() const {
  nlohmann::json j = {{"name", name}, {"description", description}, {"source", source}, {"measured", measured}};
  if (!custom_all_reduce.empty()) {
    j["custom_all_reduce"] = curves_json(custom_all_reduce);
    j["custom_all_reduce_max_bytes"] = int64_t(kCustomAllReduceMaxBytes);
  }
  j["all_reduce"] = curves_json(all_reduce);
  if (!all_gather.empty()) j["all_gather"] = curves_json(all_gather);
  j["p2p"] = {{"latency_us", to_us(p2p_latency_s)}, {"bandwidth_gbps", p2p_bandwidth / kGiga}};
  return j;
}

namespace {
const char* preset_for_hardware(const std::string& hardware_name) {
  static const std::pair<const char*, const char*> kMap[] = {
      {"h100-sxm", "nvlink4"}, {"h200", "nvlink4"}, {"a100-80gb", "nvlink3"},
      {"b200", "nvlink5"},     {"l40s", "pcie4"},   {"rtx-4090", "pcie4-consumer"},
  };
  const std::string key = lower(hardware_name);
  for (const auto& [hw, ic] : kMap)
    if (key == hw) return ic;
  return nullptr;
}
}  // namespace

const Interconnect& interconnect_for_hardware(const std::string& hardware_name) {
  const char* name = preset_for_hardware(hardware_name);
  return preset_named(name ? name : kDefaultInterconnect);
}

bool hardware_has_interconnect(const std::string& hardware_name) {
  return preset_for_hardware(hardware_name) != nullptr;
}

Interconnect resolve_interconnect(const std::string& preset_name_or_path) {
  const std::string key = lower(preset_name_or_path);
  for (const Interconnect& ic : interconnect_presets())
    if (ic.name == key) return ic;
  if (std::filesystem::is_regular_file(preset_name_or_path)) return load_interconnect(preset_name_or_path);
  std::string names;
  for (const Interconnect& ic : interconnect_presets()) names += (names.empty() ? "" : ", ") + ic.name;
  throw InputError(fmt::format("--interconnect: '{}' is neither a preset ({}) nor a file (a JSON table or the "
                               "stdout of nccl-tests' all_reduce_perf)",
                               preset_name_or_path, names));
}

}  // namespace servesim
