// The machine's ceilings: STREAM copy and triad on arrays of 4x the
// last-level cache, and a large fp32 GEMM (calib/ceilings.h).
#include <fmt/format.h>

#include "calib/ceilings.h"
#include "calib/cpu_calibration.h"

namespace servesim::cpu_calibration {

void measure_ceilings(FamilyContext& ctx, size_t stream_bytes, int64_t gemm_n) {
  ctx.announce("ceilings", fmt::format("STREAM copy and triad on 3 arrays of {:.0f} MiB, GEMM {}^3",
                                       double(stream_bytes) / double(size_t(1) << 20), gemm_n));
  auto arrays = std::make_shared<ceilings::StreamArrays>(stream_bytes);
  auto gemm = std::make_shared<ceilings::Gemm>(gemm_n);
  const double copy_b = ceilings::copy_bytes(*arrays), triad_b = ceilings::triad_bytes(*arrays);
  add_benchmark(ctx.session, "stream_copy", [arrays] { return [arrays](int64_t) { ceilings::copy_pass(*arrays); }; },
                0, copy_b);
  add_benchmark(ctx.session, "stream_triad",
                [arrays] { return [arrays](int64_t) { ceilings::triad_pass(*arrays); }; }, 0, triad_b);
  add_benchmark(ctx.session, fmt::format("gemm_peak/n:{}", gemm_n),
                [gemm] { return [gemm](int64_t) { gemm->pass(); }; }, gemm->flops());
  const auto r = ctx.session.run();
  ctx.profile.stream_copy_bytes_per_s = copy_b / r[0].median_s;
  ctx.profile.stream_triad_bytes_per_s = triad_b / r[1].median_s;
  ctx.profile.gemm_flops_per_s = gemm->flops() / r[2].median_s;
}

}  // namespace servesim::cpu_calibration
