#include "src/testing/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <stdexcept>
#include <utility>

extern char** environ;

namespace kvtier::testing {
namespace {

// argv[1] of a child: what tells main() to run a body instead of the tests.
constexpr std::string_view kChildFlag = "--kvtier-child";
// The child's end of its event pipe.
constexpr int kEventFd = 3;

std::map<std::string, ChildBody, std::less<>>& bodies() {
  static auto* registry = new std::map<std::string, ChildBody, std::less<>>;
  return *registry;
}

// The whole of `s` as a number of `strto*`'s kind.
template <typename Convert>
auto parse_number(const std::string& s, Convert convert) {
  errno = 0;
  char* end = nullptr;
  const auto v = convert(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0) {
    throw std::invalid_argument("child argument '" + s + "' is not a number");
  }
  return v;
}

}  // namespace

uint64_t ChildArgs::u64(size_t i) const {
  return parse_number(str(i), [](const char* p, char** end) { return std::strtoull(p, end, 10); });
}

int64_t ChildArgs::i64(size_t i) const {
  return parse_number(str(i), [](const char* p, char** end) { return std::strtoll(p, end, 10); });
}

bool register_child(const char* name, ChildBody body) {
  if (!bodies().emplace(name, body).second) {
    std::fprintf(stderr, "two child bodies are named %s\n", name);
    std::abort();
  }
  return true;
}

void child_event(char event) {
  ssize_t n;
  do {
    n = ::write(kEventFd, &event, 1);
  } while (n < 0 && errno == EINTR);
}

bool run_child_if_asked(int argc, char** argv, int* code) {
  if (argc < 3 || argv[1] != kChildFlag) return false;
  const auto it = bodies().find(std::string_view(argv[2]));
  if (it == bodies().end()) {
    std::fprintf(stderr, "no child body named %s in this test binary\n", argv[2]);
    *code = 127;
    return true;
  }
  // A parent that is gone must not kill a child that reports to it with SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  try {
    *code = it->second(ChildArgs(std::vector<std::string>(argv + 3, argv + argc)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %s threw: %s\n", argv[2], e.what());
    *code = kChildThrew;
  } catch (...) {
    std::fprintf(stderr, "child %s threw\n", argv[2]);
    *code = kChildThrew;
  }
  return true;
}

Child Child::start(std::string_view name, std::vector<std::string> args) {
  Child child;
  if (bodies().find(name) == bodies().end()) {
    ADD_FAILURE() << "no child body named " << name << " (KVTIER_CHILD)";
    return child;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return child;
  }
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  // dup2 onto the same number would leave close-on-exec set: move it off kEventFd first.
  if (write_end.get() == kEventFd) write_end = UniqueFd(::fcntl(kEventFd, F_DUPFD_CLOEXEC, 10));
  std::vector<std::string> words = {"/proc/self/exe", std::string(kChildFlag), std::string(name)};
  words.insert(words.end(), std::make_move_iterator(args.begin()),
               std::make_move_iterator(args.end()));
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), kEventFd);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn of child " << name << ": " << std::strerror(rc);
    return child;
  }
  child.pid_ = pid;
  // The child's copy is now the only write end: once it is gone, next() sees kEnd.
  child.events_ = std::move(read_end);
  return child;
}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), events_(std::move(other.events_)) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = std::exchange(other.pid_, -1);
    events_ = std::move(other.events_);
  }
  return *this;
}

Child::~Child() {
  reset();
}

void Child::reset() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait();
  }
  events_.reset();
}

int Child::next(std::chrono::milliseconds ceiling) {
  if (!events_.valid()) return kEnd;
  pollfd p{events_.get(), POLLIN, 0};
  for (;;) {
    const int n = ::poll(&p, 1, static_cast<int>(ceiling.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return kDeadlineExceeded;
    char c = 0;
    const ssize_t got = ::read(events_.get(), &c, 1);
    if (got < 0 && errno == EINTR) continue;
    return got == 1 ? static_cast<unsigned char>(c) : kEnd;
  }
}

void Child::kill(int signal) {
  if (pid_ > 0) ::kill(pid_, signal);
}

int Child::wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &status, 0);
  } while (got < 0 && errno == EINTR);
  pid_ = -1;
  if (got < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace kvtier::testing
