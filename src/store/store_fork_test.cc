// A Store belongs to the process that opened it. A forked child holds a copy of its memory but
// none of its threads, and may hold its locks for good (held by threads that are not there),
// while its io_uring rings and registered buffers are still the parent's: every call there is
// refused at once with an error that says so, never a hang, and the child's copies, destroyed,
// release nothing of the parent's.
//
// This test forks on purpose, the only one that does (every other child process starts from
// exec: src/testing/child_process.h). At the fork the parent's threads hold a store lock and
// run a batch, each stopped where the test holds it (waiting, never inside the allocator),
// and the child calls only the store.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "kvtier/core/unique_fd.h"
#include "kvtier/store/store.h"
#include "store_test_util.h"

namespace kvtier {
namespace {

using testing::PagePool;

constexpr size_t kPage = 16384;

// What the child found, as its exit code: 0 when every call was refused as it must be.
enum ChildCheck : int {
  kAllRefused = 0,
  kPutNotRefused = 10,
  kGetNotRefused,
  kBatchPutNotRefused,
  kBatchGetNotRefused,
  kExistsNotRefused,
  kBatchExistsAnswered,
  kIndexedAnswered,
  kRemoveNotRefused,
  kClearNotRefused,
  kStatsNotRefused,
  kSubmitNotRefused,
  kRegisterNotRefused,
  kTicketNotRefused,
  kMessageUnclear,
};

bool refused(const Status& st) {
  return st.code() == StatusCode::kInvalidArgument &&
         st.message().find("forked child") != std::string::npos;
}

// The child's side: every call on the parent's store, then its copies destroyed.
int use_parents_store(std::unique_ptr<Store>& s, std::unique_ptr<PagePool>& pool,
                      BatchTicket& parents_batch) {
  const std::string key = "page-0";
  const std::string_view keys[] = {key};
  // A key no index holds: without the refusal, this lookup would wait for the look at the
  // segment directory the parent's thread holds (its lock came along, held for good).
  Result<bool> e = s->exists("absent-in-the-child");
  if (e.ok() || !refused(e.status())) return kExistsNotRefused;
  if (e.status().message().find(std::to_string(::getppid())) == std::string::npos) {
    return kMessageUnclear;
  }
  if (!refused(s->put(key, pool->slot(0), kPage))) return kPutNotRefused;
  if (!refused(s->get(key, pool->slot(1), kPage))) return kGetNotRefused;
  const ConstBuffer in[] = {pool->in(0, kPage)};
  if (!refused(s->batch_put(keys, in).status)) return kBatchPutNotRefused;
  const MutableBuffer out[] = {pool->out(1, kPage)};
  if (!refused(s->batch_get(keys, out).status)) return kBatchGetNotRefused;
  const std::string_view absent[] = {"absent-in-the-child"};
  if (s->batch_exists(absent) != 0) return kBatchExistsAnswered;
  if (s->indexed(keys) != std::vector<bool>{false}) return kIndexedAnswered;
  if (!refused(s->remove(key))) return kRemoveNotRefused;
  if (!refused(s->clear())) return kClearNotRefused;
  if (s->stats().health.find("forked child") == std::string::npos) return kStatsNotRefused;
  bool called = false;
  BatchTicket t =
      s->submit_get(keys, out, [&](const BatchResult& r) { called = refused(r.status); });
  if (!called || !t.done() || !refused(t.take().status)) return kSubmitNotRefused;
  // The parent's batch, held in its backend: it cannot finish here, and says so.
  if (!parents_batch.done() || !refused(parents_batch.take().status)) return kTicketNotRefused;
  Result<Registration> r = s->register_memory(pool->slot(0), kPage);
  if (r.ok() || !refused(r.status())) return kRegisterNotRefused;
  // The copies go, releasing nothing: the ticket (which would wait for the parent's batch),
  // the registration (on uring, the parent's fixed buffers) and the store (which would wait for
  // the parent's submitted batch, and join threads that are not here).
  parents_batch = BatchTicket();
  pool.reset();
  s.reset();
  return kAllRefused;
}

// A store of the segment layout through a fault injector, so that at the fork one of the
// parent's threads holds the lock of a look at the segment directory (stopped inside it) and
// another runs a submitted batch (held in the backend): a child that took either would wait
// forever.
class StoreFork : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    faults_ = std::make_shared<FaultInjector>();
    StoreConfig cfg{
        .location = *parse_store_uri(dir_.file("store") + "?layout=segments&backend=" + GetParam()),
        .ns = testing::test_namespace()};
    testing::decorate(cfg, faults_);
    Result<std::unique_ptr<Store>> s = Store::open(cfg);
    if (!s.ok() && GetParam() == "uring" && s.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << "no io_uring here: " << s.status().to_string();
    }
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store_ = std::move(s).value();
    pool_ = std::make_unique<PagePool>(*store_, 3, kPage);
    pool_->fill(0, kPage, 7);
    KVTIER_ASSERT_OK(store_->put("page-0", pool_->slot(0), kPage));
  }

  testing::TempDir dir_;
  std::shared_ptr<FaultInjector> faults_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<PagePool> pool_;
};

TEST_P(StoreFork, AForkedChildIsRefusedNeverHungAndTheParentsStoreStaysWhole) {
  // A submitted read, held in the backend.
  faults_->hold_batches();
  const std::string_view keys[] = {"page-0"};
  const MutableBuffer held_into[] = {pool_->out(2, kPage)};
  BatchTicket batch = store_->submit_get(keys, held_into);
  faults_->wait_held(1);
  // A lookup that misses, stopped inside its look at the segment directory (its lock held).
  std::promise<void> trapped, release;
  std::shared_future<void> released = release.get_future().share();
  faults_->set_trap(fault_trap_at(FaultOp::kStat, "/seg", 0, [&] {
    trapped.set_value();
    released.wait();
  }));
  std::thread looker(
      [&] { EXPECT_EQ(store_->batch_exists(std::vector<std::string_view>{"absent"}), 0u); });
  trapped.get_future().wait();

  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0) << std::strerror(errno);
  UniqueFd done_read(fds[0]), done_write(fds[1]);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const char code = static_cast<char>(use_parents_store(store_, pool_, batch));
    (void)!::write(done_write.get(), &code, 1);
    ::_exit(code);  // no test framework, no destructors: only what the child did above
  }
  ASSERT_GT(pid, 0) << std::strerror(errno);
  done_write.reset();
  // The child's answer, or the hang this guards against (then it is killed).
  pollfd p{done_read.get(), POLLIN, 0};
  const int ready =
      ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(testing::kHungCeiling).count()));
  done_read.reset();
  if (ready != 1) ::kill(pid, SIGKILL);
  int status = 0;
  const pid_t reaped = ::waitpid(pid, &status, 0);
  release.set_value();
  faults_->release_batches();
  looker.join();
  ASSERT_EQ(reaped, pid);
  ASSERT_EQ(ready, 1) << "the child hung on the parent's store";
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kAllRefused) << "see ChildCheck";

  // The parent's store, registration and memory are as they were: its held batch finishes
  // whole, pages read back into the registered pool, and the child's calls counted nothing.
  batch.wait();
  const BatchResult held = batch.take();
  ASSERT_TRUE(held.all_ok()) << held.status.to_string();
  EXPECT_TRUE(pool_->holds(2, kPage, 7));
  pool_->fill(0, kPage, 8);
  KVTIER_ASSERT_OK(store_->put("page-1", pool_->slot(0), kPage));
  KVTIER_ASSERT_OK(store_->get("page-1", pool_->slot(1), kPage));
  EXPECT_TRUE(pool_->holds(1, kPage, 8));
  const StoreStats st = store_->stats();
  EXPECT_EQ(st.put_pages, 2u);
  EXPECT_EQ(st.get_hits, 2u);
  EXPECT_EQ(st.invalid_requests, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreFork, ::testing::Values("posix", "uring"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvtier
