// Runs fn(0) .. fn(count - 1) on `jobs` threads (the calling one among them),
// each index once; results go where fn puts them (by index), so they do not
// depend on the number of threads. `progress` (optional) hears (done,
// count) on the calling thread after each index it runs, and at the end.
// An exception of fn(i) is rethrown once every index ran (the lowest i's).
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace servesim {

inline void parallel_for(int count, int jobs, const std::function<void(int)>& fn,
                         const std::function<void(int, int)>& progress = {}) {
  std::atomic<int> next{0}, done{0};
  int reported = -1;  // the calling thread's last report
  std::vector<std::exception_ptr> errors(size_t(std::max(count, 0)));
  auto take = [&](bool report) {
    for (int i = next++; i < count; i = next++) {
      try {
        fn(i);
      } catch (...) {
        errors[size_t(i)] = std::current_exception();
      }
      ++done;
      if (report && progress) progress(reported = done.load(), count);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min(jobs, count); ++t) pool.emplace_back(take, false);
  take(true);
  for (std::thread& t : pool) t.join();
  if (progress && reported != count) progress(count, count);
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace servesim
