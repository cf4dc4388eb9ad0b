#include "codegen/cpu/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

extern char** environ;

namespace kiln::codegen::cpu {
namespace {

// Closes a file descriptor when it goes out of scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

class SpawnFileActions {
 public:
  SpawnFileActions() { posix_spawn_file_actions_init(&actions_); }
  ~SpawnFileActions() { posix_spawn_file_actions_destroy(&actions_); }
  SpawnFileActions(const SpawnFileActions&) = delete;
  SpawnFileActions& operator=(const SpawnFileActions&) = delete;
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

std::string describe_command(const std::vector<std::string>& argv) {
  return argv.empty() ? std::string("(empty command)") : argv[0];
}

// Reads the child's output until it closes the pipe or the deadline passes; returns false on
// timeout.
bool drain(int fd, std::chrono::steady_clock::time_point deadline, std::string& output) {
  char chunk[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd ready{.fd = fd, .events = POLLIN, .revents = 0};
    const int polled = poll(&ready, 1, static_cast<int>(left.count()));
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0) return false;
    const ssize_t got = read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return true;  // end of file (or an error: the child's status tells)
    const size_t room = kMaxProcessOutput - std::min(output.size(), kMaxProcessOutput);
    output.append(chunk, std::min(room, static_cast<size_t>(got)));
  }
}

}  // namespace

Expected<ProcessResult> run_process(const std::vector<std::string>& argv,
                                    std::chrono::milliseconds timeout) {
  if (argv.empty()) return Status::error("cannot run an empty command");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return Status::errorf("cannot create a pipe for '{}': {}", argv[0], std::strerror(errno));
  }
  FileDescriptor read_end(pipe_fds[0]), write_end(pipe_fds[1]);

  SpawnFileActions actions;
  posix_spawn_file_actions_addopen(actions.get(), STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  // The child leads a process group of its own, so a timeout stops the programs it started
  // (the compiler's cc1plus, as, ld) too.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0].c_str(), actions.get(), &attributes,
                                   args.data(), environ);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    return Status::errorf("cannot run '{}': {}", describe_command(argv), std::strerror(spawned));
  }
  write_end.reset();  // the child holds the only write end: end of file when it exits

  ProcessResult result;
  const bool finished = drain(read_end.get(), std::chrono::steady_clock::now() + timeout,
                              result.output);
  if (!finished) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished) {
    return Status::errorf("'{}' did not finish within {} s and was stopped",
                          describe_command(argv), timeout.count() / 1000.0);
  }
  if (WIFSIGNALED(status)) {
    return Status::errorf("'{}' was killed by signal {}\n{}", describe_command(argv),
                          WTERMSIG(status), result.output);
  }
  result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace kiln::codegen::cpu
