// Interconnect: the presets' alpha-beta costs checked against hand-computed
// values, the hardware mapping, and the two measured-table formats (JSON and
// nccl-tests' all_reduce_perf stdout) with their errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sim/errors.h"
#include "sim/hardware_spec.h"
#include "sim/interconnect.h"

#include "support/test_support.h"

using servesim::Interconnect;
using servesim::InputError;
using servesim::interconnect_for_hardware;
using servesim::interconnect_presets;
using servesim::kCustomAllReduceMaxBytes;
using servesim::load_interconnect;
using servesim::parse_interconnect;
using servesim::resolve_interconnect;
using servesim::test::TempFile;

// Both the exception's type and a phrase of its message.
#define REQUIRE_INPUT_ERROR(expr, phrase)               \
  do {                                                  \
    REQUIRE_THROWS_AS(expr, InputError);                \
    REQUIRE_THROWS_WITH(expr, Catch::Contains(phrase)); \
  } while (0)

namespace {

const std::string kSample = SERVESIM_TEST_DATA_DIR "/interconnect/all_reduce_perf_8xh100.txt";
const std::string kJsonSample = SERVESIM_TEST_DATA_DIR "/interconnect/measured_table.json";
constexpr double kMiB = 1024.0 * 1024.0;

// A short all_reduce_perf run in the current format: `gpus` ranks in one
// process, one row per (bytes, out-of-place us).
std::string nccl_run(int gpus, const std::vector<std::pair<long, std::string>>& rows) {
  std::string s = "# nThread 1 nGpus " + std::to_string(gpus) +
                  " minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 "
                  "graph: 0\n#\n# Using devices\n";
  for (int r = 0; r < gpus; ++r)
    s += "#  Rank  " + std::to_string(r) + " Group  0 Pid   4242 on       box device  " + std::to_string(r) +
         " [0x1" + std::to_string(r) + "] NVIDIA L40S\n";
  s += "#\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
       "busbw #wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
       "(us)  (GB/s)  (GB/s)\n";
  for (const auto& [bytes, us] : rows)
    s += "  " + std::to_string(bytes) + "  " + std::to_string(bytes / 4) + "  float  sum  -1  " + us +
         "  0.00  0.00  0  " + us + "  0.00  0.00  0\n";
  return s + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.5\n#\n";
}

}  // namespace

TEST_CASE("Interconnect presets: names, sources and sane figures", "[interconnect]") {
  std::set<std::string> names;
  for (const Interconnect& ic : interconnect_presets()) {
    INFO(ic.name);
    CHECK(names.insert(ic.name).second);
    CHECK_FALSE(ic.measured);
    CHECK_FALSE(ic.description.empty());
    CHECK_FALSE(ic.source.empty());
    REQUIRE(ic.all_reduce_ranks() == std::vector<int>{2, 4, 8});
    CHECK(ic.p2p_bandwidth > 1e9);
    CHECK(ic.p2p_latency_s > 0);
    for (size_t i = 0; i < ic.all_reduce.size(); ++i) {
      CHECK(ic.all_reduce[i].bus_bandwidth >= 5e9);
      CHECK(ic.all_reduce[i].bus_bandwidth <= 1000e9);
      if (i > 0) CHECK(ic.all_reduce[i].latency_s > ic.all_reduce[i - 1].latency_s);
    }
    // vLLM's custom all-reduce needs NVLink (or P2P) beyond two GPUs.
    CHECK(ic.custom_all_reduce.empty() == (ic.name.rfind("pcie", 0) == 0));
  }
  CHECK(names == std::set<std::string>{"nvlink4", "nvlink3", "nvlink5", "pcie4", "pcie4-consumer", "pcie5"});
  CHECK(kCustomAllReduceMaxBytes == 8388608.0);
}

TEST_CASE("NVLink 4 all-reduce: hand-computed alpha-beta costs", "[interconnect]") {
  const Interconnect& ic = resolve_interconnect("nvlink4");
  const double f8 = 2.0 * 7 / 8;  // 1.75
  // 1 MiB at n = 8: vLLM's custom all-reduce, floor 5 us.
  CHECK(ic.all_reduce_implementation(8, kMiB) == "custom");
  CHECK(ic.all_reduce_seconds(8, kMiB) == Approx(5e-6 + 1048576 * 1.75 / 460e9).epsilon(1e-12));
  // 64 MiB at n = 8: NCCL, floor 16 us.
  CHECK(ic.all_reduce_implementation(8, 64 * kMiB) == "nccl");
  CHECK(ic.all_reduce_seconds(8, 64 * kMiB) == Approx(16e-6 + 67108864 * 1.75 / 460e9).epsilon(1e-12));
  // 16 MiB at n = 2: NCCL, 2(n-1)/n = 1.
  CHECK(ic.all_reduce_seconds(2, 16 * kMiB) == Approx(6e-6 + 16777216 * 1.0 / 320e9).epsilon(1e-12));
  // n = 1 communicates nothing.
  CHECK(ic.all_reduce_seconds(1, 64 * kMiB) == 0);
  CHECK(ic.all_reduce_implementation(1, 64 * kMiB) == "none");
  CHECK(ic.all_reduce_seconds(8, 0) == 0);
  SECTION("the switch at 8 MiB: vLLM takes inp_size < max_size") {
    const double below = kCustomAllReduceMaxBytes - 16;
    CHECK(ic.all_reduce_implementation(8, below) == "custom");
    CHECK(ic.all_reduce_seconds(8, below) == Approx(5e-6 + below * f8 / 460e9).epsilon(1e-12));
    CHECK(ic.all_reduce_implementation(8, kCustomAllReduceMaxBytes) == "nccl");
    CHECK(ic.all_reduce_seconds(8, kCustomAllReduceMaxBytes) ==
          Approx(16e-6 + 8388608 * f8 / 460e9).epsilon(1e-12));
  }
  SECTION("other degrees: linear in log2(n); custom only at vLLM's world sizes 2, 4, 6, 8") {
    const double u = std::log2(6.0) - 2;  // between n = 4 and 8
    CHECK(ic.all_reduce_implementation(6, kMiB) == "custom");
    CHECK(ic.all_reduce_seconds(6, kMiB) ==
          Approx(5e-6 + kMiB * (10.0 / 6) / ((350 + u * 110) * 1e9)).epsilon(1e-12));
    CHECK(ic.all_reduce_seconds(6, 64 * kMiB) ==
          Approx((9 + u * 7) * 1e-6 + 64 * kMiB * (10.0 / 6) / ((350 + u * 110) * 1e9)).epsilon(1e-12));
    const double v = std::log2(3.0) - 1;  // between n = 2 and 4
    CHECK(ic.all_reduce_implementation(3, kMiB) == "nccl");
    CHECK(ic.all_reduce_seconds(3, kMiB) ==
          Approx((6 + v * 3) * 1e-6 + kMiB * (4.0 / 3) / ((320 + v * 30) * 1e9)).epsilon(1e-12));
    // n = 16: the floor extrapolated (16 + 7 us), the bandwidth held at 460.
    CHECK(ic.all_reduce_implementation(16, kMiB) == "nccl");
    CHECK(ic.all_reduce_seconds(16, kMiB) == Approx(23e-6 + kMiB * (30.0 / 16) / 460e9).epsilon(1e-12));
  }
}

TEST_CASE("All-gather and point-to-point formulas", "[interconnect]") {
  const Interconnect& nv = resolve_interconnect("nvlink4");
  const double S = 64 * kMiB;
  // NCCL floors; busbw capped at the 370 GB/s link rate (no SHARP for all-gather).
  CHECK(nv.all_gather_seconds(8, S) == Approx(16e-6 + S * 7.0 / 8 / 370e9).epsilon(1e-12));
  CHECK(nv.all_gather_seconds(2, S) == Approx(6e-6 + S * 0.5 / 320e9).epsilon(1e-12));
  CHECK(nv.all_gather_seconds(1, S) == 0);
  CHECK(nv.send_seconds(S) == Approx(8e-6 + S / 370e9).epsilon(1e-12));
  CHECK(nv.send_seconds(0) == 0);
  const Interconnect& pcie = resolve_interconnect("pcie4");
  CHECK(pcie.all_gather_seconds(4, S) == Approx(20e-6 + S * 0.75 / 18e9).epsilon(1e-12));
  CHECK(pcie.all_reduce_implementation(2, kMiB) == "nccl");
  CHECK(pcie.all_reduce_seconds(2, kMiB) == Approx(12e-6 + kMiB / 20e9).epsilon(1e-12));
  CHECK(pcie.send_seconds(kMiB) == Approx(12e-6 + kMiB / 20e9).epsilon(1e-12));
}

TEST_CASE("Costs never fall as messages grow", "[interconnect]") {
  std::vector<Interconnect> all = interconnect_presets();
  all.push_back(load_interconnect(kSample));
  for (const Interconnect& ic : all) {
    for (int n : {2, 3, 4, 6, 8, 16}) {
      if (ic.measured && n != 8) continue;
      INFO(ic.name << " n = " << n);
      double prev_ar = 0, prev_ag = 0, prev_p2p = 0;
      std::vector<double> sizes = {kCustomAllReduceMaxBytes - 1, kCustomAllReduceMaxBytes};
      for (double s = 1; s <= 8.0 * 1024 * kMiB; s *= 2) sizes.push_back(s);
      std::sort(sizes.begin(), sizes.end());
      for (double s : sizes) {
        const double ar = ic.all_reduce_seconds(n, s), ag = ic.all_gather_seconds(n, s), p = ic.send_seconds(s);
        CHECK(ar >= prev_ar);
        CHECK(ag >= prev_ag);
        CHECK(p >= prev_p2p);
        prev_ar = ar, prev_ag = ag, prev_p2p = p;
      }
    }
  }
}

TEST_CASE("Hardware presets map to interconnect presets, others to pcie4", "[interconnect]") {
  CHECK(interconnect_for_hardware("h100-sxm").name == "nvlink4");
  CHECK(interconnect_for_hardware("H200").name == "nvlink4");
  CHECK(interconnect_for_hardware("a100-80gb").name == "nvlink3");
  CHECK(interconnect_for_hardware("b200").name == "nvlink5");
  CHECK(interconnect_for_hardware("l40s").name == "pcie4");
  CHECK(interconnect_for_hardware("rtx-4090").name == "pcie4-consumer");
  for (const servesim::HardwareSpec& h : servesim::hardware_presets())
    CHECK(servesim::hardware_has_interconnect(h.name));
  CHECK_FALSE(servesim::hardware_has_interconnect("my-gpu.json"));
  CHECK(interconnect_for_hardware("my-gpu.json").name == servesim::kDefaultInterconnect);
  CHECK(resolve_interconnect("NVLink4").name == "nvlink4");
}

TEST_CASE("nccl-tests all_reduce_perf output: the sample parses and interpolates", "[interconnect]") {
  const Interconnect ic = load_interconnect(kSample);
  CHECK(ic.measured);
  CHECK(ic.name == "all_reduce_perf_8xh100");
  CHECK_THAT(ic.description, Catch::Contains("NVIDIA H100 80GB HBM3"));
  REQUIRE(ic.all_reduce_ranks() == std::vector<int>{8});
  const servesim::CollectiveCurve& c = ic.all_reduce[0];
  REQUIRE(c.bytes.size() == 28);  // 8 B .. 1 GiB, factor 2
  CHECK(c.bytes.front() == 8);
  CHECK(c.bytes.back() == 1073741824);
  CHECK(ic.all_reduce_implementation(8, kMiB) == "measured");
  // At a row: that row's out-of-place time (19.99 us; in-place is 19.89).
  CHECK(ic.all_reduce_seconds(8, kMiB) == Approx(19.99e-6).epsilon(1e-12));
  // Between rows: log-log, so the geometric mid-size gets the geometric mean.
  const double mid = ic.all_reduce_seconds(8, kMiB * std::sqrt(2.0));
  CHECK(mid > 19.99e-6);
  CHECK(mid < 23.98e-6);
  CHECK(mid == Approx(std::sqrt(19.99e-6 * 23.98e-6)).epsilon(1e-12));
  // Below the smallest size: its time; above the largest: at its busbw.
  CHECK(ic.all_reduce_seconds(8, 1) == Approx(16.00e-6).epsilon(1e-12));
  CHECK(ic.all_reduce_seconds(8, 2 * 1073741824.0) == Approx(2 * 4100.89e-6).epsilon(1e-12));
  // No all-gather table: an all-gather of S costs the all-reduce of S/2.
  CHECK(ic.all_gather_seconds(8, 2 * kMiB) == Approx(19.99e-6).epsilon(1e-12));
  // p2p: the pcie4 preset's, and the source says so.
  CHECK(ic.send_seconds(kMiB) == Approx(resolve_interconnect("pcie4").send_seconds(kMiB)));
  CHECK_THAT(ic.source, Catch::Contains("pcie4"));
  REQUIRE_INPUT_ERROR(ic.all_reduce_seconds(4, kMiB), "covers 8 ranks");
}

TEST_CASE("nccl-tests output: older layouts and several runs in one file", "[interconnect]") {
  SECTION("no root column, 'error' column, Rank lines without Group, NCCL log lines between") {
    const std::string old =
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
        "#\n# Using devices\n"
        "#   Rank  0 Pid   1821 on       node2 device  0 [0x07] NVIDIA A100-SXM4-80GB\n"
        "#   Rank  1 Pid   1822 on       node2 device  1 [0x0b] NVIDIA A100-SXM4-80GB\n"
        "node2:1821:1821 [0] NCCL INFO Bootstrap : Using eth0\nNCCL version 2.9.6+cuda11.2\n#\n"
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "           8             2   float     sum    11.50    0.00    0.00  0e+00    11.20    0.00    0.00  0e+00\n"
        "        1024           256   float     sum    12.50    0.08    0.08  0e+00    12.40    0.08    0.08  0e+00\n";
    const Interconnect ic = parse_interconnect(old, "old.txt");
    REQUIRE(ic.all_reduce_ranks() == std::vector<int>{2});  // two Rank lines (MPI, nGpus 1)
    CHECK(ic.all_reduce_seconds(2, 8) == Approx(11.5e-6).epsilon(1e-12));
    CHECK(ic.all_reduce_seconds(2, 1024) == Approx(12.5e-6).epsilon(1e-12));
  }
  SECTION("-g 2 and -g 4 outputs concatenated") {
    const Interconnect ic = parse_interconnect(nccl_run(2, {{8, "12.00"}, {1024, "13.00"}}) +
                                                   nccl_run(4, {{8, "20.00"}, {1024, "22.00"}}),
                                               "cat.txt");
    REQUIRE(ic.all_reduce_ranks() == std::vector<int>{2, 4});
    CHECK(ic.all_reduce_seconds(2, 1024) == Approx(13e-6).epsilon(1e-12));
    CHECK(ic.all_reduce_seconds(4, 1024) == Approx(22e-6).epsilon(1e-12));
  }
}

TEST_CASE("JSON table: points and alpha-beta entries, all-gather and p2p", "[interconnect]") {
  const Interconnect ic = load_interconnect(kJsonSample);
  CHECK(ic.measured);
  CHECK(ic.name == "example-table");
  CHECK_THAT(ic.source, Catch::Contains("user file"));
  REQUIRE(ic.all_reduce_ranks() == std::vector<int>{2, 4});
  CHECK(ic.all_reduce_seconds(2, 16 * kMiB) == Approx(6e-6 + 16 * kMiB / 320e9).epsilon(1e-12));
  CHECK(ic.all_reduce_seconds(4, 65536) == Approx(10e-6).epsilon(1e-12));
  CHECK(ic.all_reduce_seconds(4, 100) == Approx(9e-6).epsilon(1e-12));
  CHECK(ic.all_reduce_seconds(4, 32 * kMiB) == Approx(162e-6).epsilon(1e-12));
  CHECK(ic.all_gather_seconds(4, 16 * kMiB) == Approx(8e-6 + 16 * kMiB * 0.75 / 300e9).epsilon(1e-12));
  REQUIRE_INPUT_ERROR(ic.all_gather_seconds(2, kMiB), "covers 4 ranks");
  CHECK(ic.send_seconds(kMiB) == Approx(8e-6 + kMiB / 370e9).epsilon(1e-12));
  SECTION("no p2p: the pcie4 preset's, said in the source") {
    const Interconnect t = parse_interconnect(R"({"all_reduce": [{"ranks": 2, "latency_us": 5,
                                                  "bus_bandwidth_gbps": 100}]})", "t.json");
    CHECK(t.name == "t.json");
    CHECK(t.p2p_bandwidth == resolve_interconnect("pcie4").p2p_bandwidth);
    CHECK_THAT(t.source, Catch::Contains("pcie4"));
  }
}

TEST_CASE("to_json: presets show their tables and a measured table round-trips", "[interconnect]") {
  const nlohmann::json p = resolve_interconnect("nvlink4").to_json();
  CHECK(p["name"] == "nvlink4");
  CHECK(p["measured"] == false);
  CHECK(p["custom_all_reduce_max_bytes"] == 8388608);
  CHECK(p["all_reduce"][2]["ranks"] == 8);
  CHECK(p["all_reduce"][2]["latency_us"].get<double>() == Approx(16));
  CHECK(p["all_reduce"][2]["bus_bandwidth_gbps"].get<double>() == Approx(460));
  CHECK(p["p2p"]["bandwidth_gbps"].get<double>() == Approx(370));
  for (const std::string& file : {kSample, kJsonSample}) {
    const Interconnect a = load_interconnect(file);
    TempFile copy("interconnect_roundtrip", a.to_json().dump(2), ".json");
    const Interconnect b = resolve_interconnect(copy.path());
    CHECK(b.measured);
    CHECK(b.all_reduce_ranks() == a.all_reduce_ranks());
    for (double s : {1.0, 1000.0, kMiB, 3 * kMiB, 4096 * kMiB}) {
      const int n = a.all_reduce_ranks().back();
      CHECK(b.all_reduce_seconds(n, s) == Approx(a.all_reduce_seconds(n, s)).epsilon(1e-12));
      CHECK(b.all_gather_seconds(n, s) == Approx(a.all_gather_seconds(n, s)).epsilon(1e-12));
      CHECK(b.send_seconds(s) == Approx(a.send_seconds(s)).epsilon(1e-12));
    }
  }
}

TEST_CASE("Bad interconnect inputs: each an InputError naming the problem", "[interconnect]") {
  const Interconnect& nv = resolve_interconnect("nvlink4");
  REQUIRE_INPUT_ERROR(nv.all_reduce_seconds(0, kMiB), "rank count must be >= 1");
  REQUIRE_INPUT_ERROR(nv.all_reduce_seconds(2, -1), "bytes >= 0");
  REQUIRE_INPUT_ERROR(nv.send_seconds(std::nan("")), "bytes >= 0");
  REQUIRE_INPUT_ERROR(resolve_interconnect("nvlink9"), "'nvlink9' is neither a preset (nvlink4");
  REQUIRE_INPUT_ERROR(load_interconnect("/nonexistent/table.json"), "cannot read");
  REQUIRE_INPUT_ERROR(parse_interconnect("hello\n1 2 3\n", "x.txt"), "x.txt: not an interconnect table");
  REQUIRE_INPUT_ERROR(parse_interconnect("", "empty.txt"), "not an interconnect table");
  SECTION("nccl-tests output") {
    const std::string bad_row = nccl_run(2, {{8, "12.00"}, {1024, "abc"}});
    REQUIRE_INPUT_ERROR(parse_interconnect(bad_row, "r.txt"), "out-of-place time (us) in column 6");
    REQUIRE_INPUT_ERROR(parse_interconnect(bad_row, "r.txt"), "r.txt: line 10");
    REQUIRE_INPUT_ERROR(parse_interconnect(nccl_run(2, {{1024, "12.00"}, {512, "13.00"}}), "d.txt"),
                        "sizes must strictly increase");
    REQUIRE_INPUT_ERROR(parse_interconnect(nccl_run(2, {{8, "-3.00"}}), "n.txt"), "time must be > 0");
    REQUIRE_INPUT_ERROR(parse_interconnect(nccl_run(1, {{8, "3.00"}}), "one.txt"), "needs 2 or more");
    REQUIRE_INPUT_ERROR(parse_interconnect(nccl_run(2, {{8, "3.00"}}) + nccl_run(2, {{8, "3.00"}}), "twice.txt"),
                        "a second run on 2 ranks");
    REQUIRE_INPUT_ERROR(parse_interconnect("#       size  count  type  redop  root  time\n  8  2  float  sum  -1  "
                                           "3.0\n",
                                           "nr.txt"),
                        "cannot tell how many ranks");
    REQUIRE_INPUT_ERROR(parse_interconnect("# Collective test starting: all_gather_perf\n" + nccl_run(2, {}), "g.txt"),
                        "output of all_gather_perf; expected all_reduce_perf");
    REQUIRE_INPUT_ERROR(parse_interconnect(nccl_run(2, {}), "e.txt"), "no data rows");
  }
  SECTION("JSON table") {
    const std::string pre = R"({"all_reduce": [{"ranks": 2, )";
    REQUIRE_INPUT_ERROR(parse_interconnect(pre + R"("points": [{"bytes": 1024, "time_us": 7},
                          {"bytes": 512, "time_us": 8}]}]})", "t.json"),
                        "t.json: all_reduce[0] (ranks 2): points[1]: sizes must strictly increase");
    REQUIRE_INPUT_ERROR(parse_interconnect(pre + R"("points": [{"bytes": 1024, "time_us": -1}]}]})", "t.json"),
                        "points[0]: field 'time_us' must be > 0 (got -1)");
    REQUIRE_INPUT_ERROR(parse_interconnect(pre + R"("points": [{"bytes": 1024}]}]})", "t.json"),
                        "missing field 'time_us'");
    REQUIRE_INPUT_ERROR(parse_interconnect(pre + R"("latency_us": 5, "points": []}]})", "t.json"), "not both");
    REQUIRE_INPUT_ERROR(parse_interconnect(pre + R"("latency_us": 5}]})", "t.json"), "'bus_bandwidth_gbps'");
    REQUIRE_INPUT_ERROR(parse_interconnect(R"({"all_reduce": [{"ranks": 1, "latency_us": 5,
                          "bus_bandwidth_gbps": 9}]})", "t.json"),
                        "all_reduce[0]: field 'ranks' must be an integer >= 2");
    REQUIRE_INPUT_ERROR(parse_interconnect(R"({"all_reduce": [{"ranks": 2, "latency_us": 5, "bus_bandwidth_gbps": 9},
                          {"ranks": 2, "latency_us": 5, "bus_bandwidth_gbps": 9}]})", "t.json"),
                        "a second entry for 2 ranks");
    REQUIRE_INPUT_ERROR(parse_interconnect(R"({"name": "x"})", "t.json"), "missing field 'all_reduce'");
    REQUIRE_INPUT_ERROR(parse_interconnect(R"({"all_reduce": [], "p2p": 3})", "t.json"),
                        "all_reduce: must be a non-empty list");
    REQUIRE_INPUT_ERROR(parse_interconnect(R"({"allreduce": []})", "t.json"), "unknown field 'allreduce'");
    REQUIRE_INPUT_ERROR(parse_interconnect(R"({"all_reduce": )", "t.json"), "not valid JSON");
  }
}

TEST_CASE("Interconnect table parser: mutated inputs give a table or an InputError", "[interconnect]") {
  std::ifstream in(kSample);
  const std::string sample((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(sample.size() > 1000);
  std::mt19937 rng(20240611);
  const std::string alphabet = " #0123456789.-+eE\nabcNR{}[]\":,";
  int parsed = 0;
  for (int i = 0; i < 400; ++i) {
    std::string text = sample;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
    if (i % 5 == 0) text.resize(rng() % text.size());
    try {
      const Interconnect ic = parse_interconnect(text, "fuzz.txt");
      ++parsed;
      for (int n : ic.all_reduce_ranks()) {
        const double t = ic.all_reduce_seconds(n, kMiB);
        CHECK(std::isfinite(t));
        CHECK(t > 0);
      }
    } catch (const InputError& e) {
      CHECK_FALSE(std::string(e.what()).empty());
    }
  }
  CHECK(parsed > 0);
}
