// kvtier_hangfs: a FUSE filesystem whose operations block on command, for the tests of
// locations that hang (src/store/store_hang_test.cc).
//
//   kvtier_hangfs BACKING MOUNTPOINT
//
// Mounts MOUNTPOINT as a pass-through of the directory BACKING and reads commands, one per
// line, on stdin:
//   hang      every operation that starts from now on blocks (those running finish)
//   release   blocked operations go on, new ones run
//   quit      release, unmount and exit (so does the end of stdin: a test that dies never
//             leaves a hung mount behind)
// and answers on stdout, one line each: "mounted" once the mount is up, "hung", "released",
// and "blocked N" each time an operation starts to wait (N: how many have so far), so a test
// waits for events, never for time. The kernel caches nothing (attributes, entries, pages):
// every call of the store reaches this process. Errors go to stderr with exit status 1.
#define FUSE_USE_VERSION 314

#include <dirent.h>
#include <fcntl.h>
#include <fuse3/fuse.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace {

// This helper is built without the sanitizers kvtier_core is built with, so it cannot use the
// library's UniqueFd; it owns its descriptors the same way. The descriptors of open files are
// held in fi->fh between the kernel's open and release, and handed to an OwnedFd in release.
class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

int g_root = -1;  // the backing directory (owned by main)
std::mutex g_mu;
std::condition_variable g_cv;
bool g_hung = false;
unsigned long g_blocked = 0;

void say(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::cout << line << std::endl;
}

// Every operation passes here first.
void gate() {
  std::unique_lock<std::mutex> lock(g_mu);
  if (!g_hung) return;
  ++g_blocked;
  std::cout << "blocked " << g_blocked << std::endl;
  g_cv.wait(lock, [] { return !g_hung; });
}

// "/a/b" -> "a/b", "/" -> "."
const char* rel(const char* path) {
  while (*path == '/') ++path;
  return *path ? path : ".";
}

int neg(int rc) {
  return rc < 0 ? -errno : rc;
}

void* hf_init(fuse_conn_info*, fuse_config* cfg) {
  cfg->use_ino = 0;
  cfg->entry_timeout = 0;
  cfg->attr_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->direct_io = 1;
  cfg->hard_remove = 1;
  return nullptr;
}

int hf_getattr(const char* path, struct stat* st, fuse_file_info* fi) {
  gate();
  if (fi != nullptr) return neg(::fstat(static_cast<int>(fi->fh), st));
  return neg(::fstatat(g_root, rel(path), st, AT_SYMLINK_NOFOLLOW));
}

int hf_access(const char* path, int mask) {
  gate();
  return neg(::faccessat(g_root, rel(path), mask, 0));
}

int hf_readdir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*,
               fuse_readdir_flags) {
  gate();
  OwnedFd fd(::openat(g_root, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return -errno;
  std::unique_ptr<DIR, DirCloser> d(::fdopendir(fd.get()));
  if (d == nullptr) return -errno;
  fd.release();  // the stream owns it now
  while (dirent* e = ::readdir(d.get())) {
    struct stat st {};
    st.st_ino = e->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(e->d_type));
    if (fill(buf, e->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) break;
  }
  return 0;
}

int hf_mkdir(const char* path, mode_t mode) {
  gate();
  return neg(::mkdirat(g_root, rel(path), mode));
}
int hf_rmdir(const char* path) {
  gate();
  return neg(::unlinkat(g_root, rel(path), AT_REMOVEDIR));
}
int hf_unlink(const char* path) {
  gate();
  return neg(::unlinkat(g_root, rel(path), 0));
}
int hf_rename(const char* from, const char* to, unsigned int flags) {
  gate();
  return neg(::renameat2(g_root, rel(from), g_root, rel(to), flags));
}
int hf_link(const char* from, const char* to) {
  gate();
  return neg(::linkat(g_root, rel(from), g_root, rel(to), 0));
}
int hf_chmod(const char* path, mode_t mode, fuse_file_info*) {
  gate();
  return neg(::fchmodat(g_root, rel(path), mode, 0));
}
int hf_truncate(const char* path, off_t size, fuse_file_info* fi) {
  gate();
  if (fi != nullptr) return neg(::ftruncate(static_cast<int>(fi->fh), size));
  const OwnedFd fd(::openat(g_root, rel(path), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return -errno;
  return neg(::ftruncate(fd.get(), size));
}
int hf_utimens(const char* path, const timespec tv[2], fuse_file_info* fi) {
  gate();
  if (fi != nullptr) return neg(::futimens(static_cast<int>(fi->fh), tv));
  return neg(::utimensat(g_root, rel(path), tv, AT_SYMLINK_NOFOLLOW));
}

int hf_open(const char* path, fuse_file_info* fi) {
  gate();
  const int fd = ::openat(g_root, rel(path), (fi->flags & ~O_DIRECT) | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = static_cast<uint64_t>(fd);
  return 0;
}
int hf_create(const char* path, mode_t mode, fuse_file_info* fi) {
  gate();
  const int fd = ::openat(g_root, rel(path), (fi->flags & ~O_DIRECT) | O_CREAT | O_CLOEXEC, mode);
  if (fd < 0) return -errno;
  fi->fh = static_cast<uint64_t>(fd);
  return 0;
}
int hf_read(const char*, char* buf, size_t size, off_t off, fuse_file_info* fi) {
  gate();
  const ssize_t n = ::pread(static_cast<int>(fi->fh), buf, size, off);
  return n < 0 ? -errno : static_cast<int>(n);
}
int hf_write(const char*, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  gate();
  const ssize_t n = ::pwrite(static_cast<int>(fi->fh), buf, size, off);
  return n < 0 ? -errno : static_cast<int>(n);
}
int hf_statfs(const char*, struct statvfs* st) {
  gate();
  return neg(::fstatvfs(g_root, st));
}
int hf_flush(const char*, fuse_file_info*) {
  gate();
  return 0;
}
int hf_release(const char*, fuse_file_info* fi) {
  // Not gated: the kernel sends it when a descriptor closes, and nothing waits for it. The
  // open file's descriptor comes back to an owner here, which closes it.
  const OwnedFd released(static_cast<int>(fi->fh));
  return 0;
}
int hf_fsync(const char*, int datasync, fuse_file_info* fi) {
  gate();
  const int fd = static_cast<int>(fi->fh);
  return neg(datasync ? ::fdatasync(fd) : ::fsync(fd));
}

void set_hung(bool hung) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_hung = hung;
  }
  g_cv.notify_all();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s BACKING MOUNTPOINT\n", argv[0]);
    return 2;
  }
  const OwnedFd root(::open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  g_root = root.get();
  if (g_root < 0) {
    std::fprintf(stderr, "kvtier_hangfs: %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  fuse_operations ops{};
  ops.init = hf_init;
  ops.getattr = hf_getattr;
  ops.access = hf_access;
  ops.readdir = hf_readdir;
  ops.mkdir = hf_mkdir;
  ops.rmdir = hf_rmdir;
  ops.unlink = hf_unlink;
  ops.rename = hf_rename;
  ops.link = hf_link;
  ops.chmod = hf_chmod;
  ops.truncate = hf_truncate;
  ops.utimens = hf_utimens;
  ops.open = hf_open;
  ops.create = hf_create;
  ops.read = hf_read;
  ops.write = hf_write;
  ops.statfs = hf_statfs;
  ops.flush = hf_flush;
  ops.release = hf_release;
  ops.fsync = hf_fsync;

  char arg0[] = "kvtier_hangfs";
  char* fuse_argv[] = {arg0, nullptr};
  fuse_args args = FUSE_ARGS_INIT(1, fuse_argv);
  fuse* fs = fuse_new(&args, &ops, sizeof(ops), nullptr);
  if (fs == nullptr) {
    std::fprintf(stderr, "kvtier_hangfs: fuse_new failed\n");
    return 1;
  }
  if (fuse_mount(fs, argv[2]) != 0) {
    std::fprintf(stderr, "kvtier_hangfs: cannot mount %s (is /dev/fuse there?)\n", argv[2]);
    fuse_destroy(fs);
    return 1;
  }
  std::thread loop([fs] {
    fuse_loop_config* cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(cfg, 64);
    fuse_loop_mt(fs, cfg);
    fuse_loop_cfg_destroy(cfg);
  });
  say("mounted");
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "hang") {
      set_hung(true);
      say("hung");
    } else if (line == "release") {
      set_hung(false);
      say("released");
    } else if (line == "quit") {
      break;
    }
  }
  set_hung(false);
  // Unmounting ends the loop; the loop thread then returns.
  fuse_unmount(fs);
  fuse_exit(fs);
  loop.join();
  fuse_destroy(fs);
  return 0;
}
