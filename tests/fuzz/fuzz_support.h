// Helpers for the libFuzzer targets (tests/fuzz/fuzz_*.cpp).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

namespace servesim::fuzz {

// A file of this process's own holding the input, for parsers that take a
// path; rewritten on every call and removed at exit. In
// $SERVESIM_FUZZ_TMPDIR (run_fuzzers.sh sets /dev/shm where it can: a
// tmpfs write is ~0.1 ms against ~3 ms on this disk), else $TMPDIR, /tmp.
inline const std::string& write_input(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("SERVESIM_FUZZ_TMPDIR");
    if (!dir || !*dir) dir = std::getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    return std::string(dir) + "/servesim_fuzz_" + std::to_string(getpid()) + suffix;
  }();
  static const bool removed_at_exit = [] {
    std::atexit([] { std::remove(path.c_str()); });
    return true;
  }();
  (void)removed_at_exit;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property of the parser that must hold: abort (a crash the fuzzer reports).
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace servesim::fuzz
