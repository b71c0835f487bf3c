#include "cli/process_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace servesim::cli {
namespace {

std::runtime_error system_error(const std::string& what, int err) {
  return std::runtime_error(fmt::format("{}: {}", what, std::strerror(err)));
}

}  // namespace

Executable self_executable(const char* argv0) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) return {self.string(), false};
  return {argv0, std::string(argv0).find('/') == std::string::npos};
}

ProcessResult run_process(const Executable& exe, const std::vector<std::string>& args) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw system_error("pipe", errno);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    throw system_error("pipe", e);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.path.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = exe.search_path
                          ? posix_spawnp(&pid, exe.path.c_str(), &actions, nullptr, argv.data(), environ)
                          : posix_spawn(&pid, exe.path.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    throw system_error(fmt::format("cannot start {}", exe.path), spawned);
  }

  // Drain both pipes together: a child blocked on a full stderr pipe would
  // otherwise never close stdout.
  ProcessResult result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buffer[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw system_error("poll", errno);
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, size_t(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;  // poll ignores negative descriptors
        --open_fds;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw system_error("waitpid", errno);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

void run_parallel(size_t first, size_t count, size_t jobs, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{first};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) work(i);
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < std::min(jobs, count > first ? count - first : 0); ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
}

}  // namespace servesim::cli
