// Child processes for `servesim sweep`: this binary run with other
// arguments (no shell), what it wrote, and a pool of worker threads that
// keeps up to N of them running.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace servesim::cli {

struct ProcessResult {
  int exit_code = -1;  // when the child exited
  int signal = 0;      // when a signal killed it
  std::string out, err;
};

// This binary: /proc/self/exe, else argv[0] looked up on PATH.
struct Executable {
  std::string path;
  bool search_path = false;
};
Executable self_executable(const char* argv0);

// Runs exe with args (no shell), stdin from /dev/null, and returns what it
// wrote to stdout and stderr. Safe to call from several threads: the pipes
// are close-on-exec, so no child inherits another child's pipe. Throws
// std::runtime_error when the child cannot be started.
ProcessResult run_process(const Executable& exe, const std::vector<std::string>& args);

// work(i) for i = first .. count - 1 on `jobs` threads, each taking the next
// index when it is done with one; returns when all are done.
void run_parallel(size_t first, size_t count, size_t jobs, const std::function<void(size_t)>& work);

}  // namespace servesim::cli
