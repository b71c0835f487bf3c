// parse_duration_s: durations with units from the command line.
#include <catch2/catch.hpp>

#include <string>

#include "sim/errors.h"
#include "sim/units.h"

using servesim::InputError;
using servesim::parse_duration_s;

TEST_CASE("parse_duration_s: seconds, milliseconds, microseconds, bare numbers", "[units]") {
  CHECK(parse_duration_s("500ms", "--x") == Approx(0.5).epsilon(1e-15));
  CHECK(parse_duration_s("0.5s", "--x") == Approx(0.5).epsilon(1e-15));
  CHECK(parse_duration_s("200us", "--x") == Approx(200e-6).epsilon(1e-15));
  CHECK(parse_duration_s("2", "--x") == 2.0);
  CHECK(parse_duration_s("2s", "--x") == 2.0);
  CHECK(parse_duration_s("1.5", "--x") == 1.5);
  CHECK(parse_duration_s("30ms", "--x") == Approx(0.030).epsilon(1e-15));
  CHECK(parse_duration_s("1e-3s", "--x") == Approx(1e-3).epsilon(1e-15));
  CHECK(parse_duration_s("0", "--x") == 0.0);
  CHECK(parse_duration_s("0ms", "--x") == 0.0);
}

TEST_CASE("parse_duration_s rejects malformed, negative and non-finite values", "[units]") {
  const char* bad[] = {"",    "abc", "ms",  "5 ms", " 5",  "5h",   "5sec", "5m",
                       "-1",  "-5ms", "nan", "inf",  "1e999", "5ms5", "0.5.5s"};
  for (const char* text : bad) {
    INFO("'" << text << "'");
    try {
      parse_duration_s(text, "--slo-ttft");
      FAIL("accepted");
    } catch (const InputError& e) {
      const std::string msg = e.what();
      CHECK_THAT(msg, Catch::Contains("--slo-ttft"));
      CHECK_THAT(msg, Catch::Contains("'" + std::string(text) + "'"));
    }
  }
}
