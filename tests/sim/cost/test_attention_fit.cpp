// The attention tables' non-negative least-squares fit, and a profile's
// stored fits.
#include <catch2/catch.hpp>

#include <array>
#include <vector>

#include "sim/cost/attention_fit.h"
#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "support/synthetic_profile.h"

using namespace servesim;
using namespace servesim::test::synthetic;

namespace {

struct Grid {
  std::vector<std::array<double, 2>> features;
  std::vector<double> seconds;
};

// seconds = c0 + c1 f1 + c2 f2 on a grid of f1 in {1, 4, 16, 64}, f2 in {10, 1000, 1e5}.
Grid exact_grid(double c0, double c1, double c2) {
  Grid g;
  for (double f1 : {1.0, 4.0, 16.0, 64.0})
    for (double f2 : {10.0, 1000.0, 1e5}) {
      g.features.push_back({f1, f2});
      g.seconds.push_back(c0 + c1 * f1 + c2 * f2);
    }
  return g;
}

}  // namespace

TEST_CASE("attention fit: recovers the coefficients of an exact linear table") {
  const Grid g = exact_grid(2e-6, 3e-7, 4e-10);
  const AttentionFit f = fit_attention_nnls(g.features, g.seconds);
  CHECK(f.coefficients[0] == Approx(2e-6).epsilon(1e-9));
  CHECK(f.coefficients[1] == Approx(3e-7).epsilon(1e-9));
  CHECK(f.coefficients[2] == Approx(4e-10).epsilon(1e-9));
  CHECK(f.max_rel_residual < 1e-9);
  CHECK(f.rms_rel_residual <= f.max_rel_residual);
}

TEST_CASE("attention fit: no coefficient goes negative, and a column the data does not need is dropped") {
  // Exact with a negative intercept: the unconstrained fit would use it.
  const Grid g = exact_grid(-1e-7, 3e-7, 4e-10);
  const AttentionFit f = fit_attention_nnls(g.features, g.seconds);
  for (double c : f.coefficients) CHECK(c >= 0);
  CHECK(f.coefficients[0] == 0);
  CHECK(f.max_rel_residual > 0);  // no longer exact
  // A table that does not grow with f2 at all.
  const Grid flat = exact_grid(1e-6, 2e-7, 0);
  const AttentionFit g2 = fit_attention_nnls(flat.features, flat.seconds);
  CHECK(g2.coefficients[2] == Approx(0).margin(1e-18));
  CHECK(g2.coefficients[1] == Approx(2e-7).epsilon(1e-9));
}

TEST_CASE("attention fit: a rank-deficient grid (one value of f1) still gets a fit") {
  Grid g;
  for (double f2 : {10.0, 100.0, 1000.0}) {
    g.features.push_back({8.0, f2});
    g.seconds.push_back(1e-6 + 5e-9 * f2);
  }
  const AttentionFit f = fit_attention_nnls(g.features, g.seconds);
  for (size_t i = 0; i < g.seconds.size(); ++i)
    CHECK(f(g.features[i][0], g.features[i][1]) == Approx(g.seconds[i]).epsilon(1e-9));
}

TEST_CASE("profile model: a profile's stored fits are used where they agree with its tables, refitted where not") {
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m, 0.05);
  const ProfileModel fitted(p, m);
  // Stored fits one part in 1e12 away from the tables' own: used as stored.
  AttentionFit near = fitted.prefill_fit();
  near.coefficients[1] *= 1 + 1e-12;
  p.prefill_fit = near;
  p.decode_fit = fitted.decode_fit();
  CHECK(ProfileModel(p, m).prefill_fit().coefficients[1] == near.coefficients[1]);
  // Through the file too.
  const DeviceProfile back = DeviceProfile::from_json(p.to_json(), "test");
  REQUIRE(back.prefill_fit.has_value());
  CHECK(back.prefill_fit->coefficients == near.coefficients);
  // A stored fit the tables no longer support (the tables edited since): refitted.
  AttentionFit stale = fitted.prefill_fit();
  stale.coefficients[1] *= 2;
  p.prefill_fit = stale;
  CHECK(ProfileModel(p, m).prefill_fit().coefficients == fitted.prefill_fit().coefficients);
  // A malformed stored fit is refused by name.
  nlohmann::json bad = p.to_json();
  bad["tables"]["attention_fits"]["decode"]["coefficients"] = {1.0, -2.0, 0.0};
  CHECK_THROWS_AS(DeviceProfile::from_json(bad, "test"), InputError);
}
