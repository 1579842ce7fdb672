#include "watchdog.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <vector>

#include "kvtier/core/unique_fd.h"
#include "kvtier/store/uri.h"
#include "progress.h"

namespace kvtier::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The deadline of `location` in ms (0: none): the flag's, else the URI's, else 10000. nullopt
// when the location or its deadline_ms does not parse (the command itself says why).
std::optional<uint64_t> deadline_of(const StoreLocation& loc, const std::optional<uint64_t>& flag) {
  if (loc.storage_class != StorageClass::kFile) return 0;
  if (flag) return *flag;
  auto it = loc.store_params.find("deadline_ms");
  if (it == loc.store_params.end()) return 10000;
  uint64_t ms = 0;
  const std::string& v = it->second;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return ms;
}

bool is_pipe(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

// Writes all of `data` to `fd`; a reader gone is not an error here.
void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= static_cast<size_t>(w);
  }
}

// The command's process, which this one's SIGINTs go to (forward()).
std::atomic<pid_t> g_child{0};

// Each SIGINT this process gets goes to the child, once: the child runs in a process group of
// its own, so a Ctrl-C at the terminal reaches it only this way, and as many times as pressed
// (the first stops the command cleanly, a second ends it: progress.h).
void forward(int sig) {
  const int saved = errno;
  if (const pid_t p = g_child.load(std::memory_order_relaxed); p > 0) ::kill(p, sig);
  errno = saved;
}

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};
std::optional<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// The child: the command on this thread, the bases asked on another; the exit status goes to
// the parent on `beats` ("x" and the status) before the child exits.
[[noreturn]] void child(const StoreLocation& loc, uint64_t deadline_ms, int beats,
                        const std::function<int()>& command) {
  ::signal(SIGPIPE, SIG_IGN);  // a parent gone: output fails, the work goes on
  const auto interval = std::chrono::milliseconds(std::max<uint64_t>(deadline_ms / 4, 1));
  std::thread([bases = loc.bases, beats, interval] {
    for (;;) {
      bool all = true;
      for (const std::string& b : bases) {
        struct statfs fs {};
        // An answer, even a refusal, is an answer; only a call that does not return is not.
        all = (::statfs(b.c_str(), &fs) == 0 || errno != EINTR) && all;
      }
      if (all) write_all(beats, "b", 1);
      std::this_thread::sleep_for(interval);
    }
  }).detach();
  int rc = 1;
  try {
    rc = command();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvtier: %s\n", e.what());
  }
  std::fflush(nullptr);
  const std::string done = fmt::format("x{}\n", rc);
  write_all(beats, done.data(), done.size());
  ::_exit(rc);
}

}  // namespace

int run_watched(const char* name, const std::string& location,
                const std::optional<uint64_t>& deadline_flag, const std::function<int()>& command) {
  Result<StoreLocation> loc = parse_store_uri(location);
  if (!loc.ok()) return command();
  const std::optional<uint64_t> deadline_ms = deadline_of(*loc, deadline_flag);
  if (!deadline_ms || *deadline_ms == 0) return command();
  std::optional<Pipe> beats = make_pipe();
  std::optional<Pipe> out, err;
  if (is_pipe(STDOUT_FILENO)) out = make_pipe();
  if (is_pipe(STDERR_FILENO)) err = make_pipe();
  if (!beats || (is_pipe(STDOUT_FILENO) && !out) || (is_pipe(STDERR_FILENO) && !err)) {
    return command();  // no pipes to watch it by: as it is
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return command();
  if (pid == 0) {
    ::setpgid(0, 0);  // SIGINT comes from this process alone (forward())
    if (out) ::dup2(out->write.get(), STDOUT_FILENO);
    if (err) ::dup2(err->write.get(), STDERR_FILENO);
    child(*loc, *deadline_ms, beats->write.get(), command);
  }
  g_child.store(pid, std::memory_order_relaxed);
  // SIGINT goes to the child from now on, unless it was ignored on entry (a background job of a
  // shell without job control), which the child inherited.
  struct sigaction current {};
  if (::sigaction(SIGINT, nullptr, &current) == 0 && current.sa_handler != SIG_IGN) {
    struct sigaction sa {};
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    if (interrupted()) ::kill(pid, SIGINT);  // one that came before the handler did
  }
  beats->write.reset();
  if (out) out->write.reset();
  if (err) err->write.reset();

  const auto deadline = std::chrono::milliseconds(*deadline_ms);
  auto last = Clock::now();
  std::optional<int> rc;  // the child's, once it said
  std::string said;       // what came on `beats` after "x"
  bool out_open = out.has_value(), err_open = err.has_value(), beats_open = true;
  auto relay = [](UniqueFd& from, int to, bool& open) {
    char buf[65536];
    const ssize_t n = ::read(from.get(), buf, sizeof buf);
    if (n > 0) {
      write_all(to, buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      open = false;
    }
  };
  for (;;) {
    std::vector<pollfd> fds;
    if (beats_open) fds.push_back({beats->read.get(), POLLIN, 0});
    if (out_open) fds.push_back({out->read.get(), POLLIN, 0});
    if (err_open) fds.push_back({err->read.get(), POLLIN, 0});
    if (fds.empty()) break;
    // Once the child said it is done, only what it wrote before is left to relay.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(last + deadline - Clock::now());
    const int wait = rc ? 0 : static_cast<int>(std::max<int64_t>(left.count(), 0));
    const int n = ::poll(fds.data(), fds.size(), wait);
    if (n < 0 && errno == EINTR) continue;  // Ctrl-C, forwarded: the child stops at its next step
    if (n <= 0) {
      if (rc) break;
      if (Clock::now() - last < deadline) continue;
      fmt::print(stderr,
                 "kvtier {}: location {} did not answer within the deadline of {} ms "
                 "(--deadline-ms, or the URI's deadline_ms); stopped waiting for it. Its "
                 "process {} goes on alone and ends once the location answers{}\n",
                 name, location, *deadline_ms, pid,
                 std::string_view(name) == "stat" || std::string_view(name) == "ls"
                     ? ""
                     : " (what it removes is then removed whole)");
      return kExitNotAnswering;
    }
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == beats->read.get()) {
        char buf[64];
        const ssize_t r = ::read(p.fd, buf, sizeof buf);
        if (r <= 0) {
          if (r == 0 || errno != EINTR) beats_open = false;
          continue;
        }
        last = Clock::now();
        for (ssize_t i = 0; i < r; ++i) {
          if (buf[i] == 'x' || !said.empty()) said += buf[i];
        }
        if (!said.empty() && said.back() == '\n') rc = std::atoi(said.c_str() + 1);
      } else if (out && p.fd == out->read.get()) {
        relay(out->read, STDOUT_FILENO, out_open);
      } else if (err && p.fd == err->read.get()) {
        relay(err->read, STDERR_FILENO, err_open);
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, rc ? WNOHANG : 0) < 0 && errno == EINTR) {
  }
  if (rc) return *rc;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace kvtier::cli
