// The transfer agent: backend selection, registration, descriptor validation, request
// lifecycle (post, wait, cancel, destruction in flight) and ownership of everything opened.
#include "kvtier/transfer/agent.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "kvtier/backends/builtin.h"
#include "kvtier/backends/dram/dram_backend.h"
#include "kvtier/backends/fault/fault_backend.h"
#include "kvtier/backends/posix/posix_backend.h"
#include "src/testing/test_util.h"

namespace kvtier {
namespace {

using namespace std::chrono_literals;
using testing::open_fds;

Agent make_agent(std::string backend = "posix", std::shared_ptr<FaultInjector> faults = nullptr) {
  AgentConfig c;
  c.backend = std::move(backend);
  c.registry = &builtin_backends();
  if (faults) {
    c.decorate = [faults](std::unique_ptr<Backend> b) {
      return make_fault_backend(std::move(b), faults);
    };
  }
  Result<Agent> a = Agent::create(c);
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  return std::move(a).value();
}

// Writes `bytes` of `buf` to a new object at `path` and publishes it.
Status write_object(Agent& agent, const std::string& path, void* buf, uint64_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(Target t, agent.open_target({path, TargetMode::kCreate, bytes, {}}));
  MemDesc m{buf, bytes};
  StorageDesc s{&t, 0, bytes};
  KVTIER_ASSIGN_OR_RETURN(Transfer x, agent.make_request(TransferOp::kWrite, {&m, 1}, {&s, 1}));
  KVTIER_RETURN_IF_ERROR(x.post());
  x.wait();
  KVTIER_RETURN_IF_ERROR(x.first_error());
  return t.publish();
}

// ---- selection ----

Result<std::unique_ptr<Backend>> failing_factory(const BackendParams&) {
  return unavailable_error("io_uring_setup: Operation not permitted", false);
}

TEST(AgentSelection, AutoTakesTheHighestPriorityThatStartsAndReportsSkips) {
  BackendRegistry reg;
  KVTIER_ASSERT_OK(reg.add("posix", StorageClass::kFile, 10, create_posix_backend));
  KVTIER_ASSERT_OK(reg.add("fancy", StorageClass::kFile, 20, failing_factory));
  KVTIER_ASSERT_OK(reg.add("dram", StorageClass::kMemory, 10, create_dram_backend));
  AgentConfig c;
  c.registry = &reg;
  KVTIER_ASSERT_OK_AND_ASSIGN(Agent a, Agent::create(c));
  EXPECT_EQ(a.backend_name(), "posix");
  EXPECT_TRUE(a.selection().automatic);
  ASSERT_EQ(a.selection().rejected.size(), 1u);
  EXPECT_NE(a.selection().rejected[0].find("fancy"), std::string::npos);
  EXPECT_NE(a.selection().summary().find("Operation not permitted"), std::string::npos);
}

TEST(AgentSelection, AutoFailsWhenNothingStarts) {
  BackendRegistry reg;
  KVTIER_ASSERT_OK(reg.add("fancy", StorageClass::kFile, 20, failing_factory));
  AgentConfig c;
  c.registry = &reg;
  Result<Agent> a = Agent::create(c);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("fancy"), std::string::npos);
}

TEST(AgentSelection, ExplicitNameIsHonouredAndUnknownNamesListTheKnownOnes) {
  AgentConfig c;
  c.registry = &builtin_backends();
  c.backend = "dram";
  KVTIER_ASSERT_OK_AND_ASSIGN(Agent a, Agent::create(c));
  EXPECT_EQ(a.backend_name(), "dram");
  EXPECT_FALSE(a.selection().automatic);

  c.backend = "nixl";
  Result<Agent> bad = Agent::create(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("posix"), std::string::npos);
}

TEST(AgentSelection, BadParametersAreReported) {
  AgentConfig c;
  c.registry = &builtin_backends();
  c.backend = "posix";
  c.params["io_threads"] = "many";
  Result<Agent> a = Agent::create(c);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("io_threads"), std::string::npos);
}

// Whether `s` is kInvalidArgument and its message names `what`.
::testing::AssertionResult names_bad_parameter(const Status& s, std::string_view what) {
  if (s.code() != StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "expected INVALID_ARGUMENT, got " << s.to_string();
  }
  if (s.message().find(what) == std::string_view::npos) {
    return ::testing::AssertionFailure() << "'" << what << "' not in " << s.to_string();
  }
  return ::testing::AssertionSuccess();
}

// Every built-in backend rejects a parameter it does not know and a value it cannot parse,
// naming the parameter, before it starts (s3 needs no server to say so).
TEST(AgentSelection, UnknownParametersAndUnparsableValuesAreRejectedByEveryBackend) {
  struct Case {
    std::string backend;
    StorageClass storage_class;
    std::string bad_value_param;  // a numeric or boolean parameter of that backend
  };
  const std::vector<Case> cases = {{"posix", StorageClass::kFile, "io_threads"},
                                   {"uring", StorageClass::kFile, "queue_depth"},
                                   {"dram", StorageClass::kMemory, ""},
                                   {"s3", StorageClass::kObject, "max_parallel"}};
  for (const Case& k : cases) {
    if (builtin_backends().find(k.backend) == nullptr) continue;  // not built here
    SCOPED_TRACE(k.backend);
    AgentConfig c;
    c.registry = &builtin_backends();
    c.backend = k.backend;
    c.storage_class = k.storage_class;
    if (k.backend == "s3") c.params["bucket"] = "kvtier-test";
    c.params["queue_dept"] = "128";
    EXPECT_TRUE(names_bad_parameter(Agent::create(c).status(), "queue_dept"));
    c.backend = "auto";
    EXPECT_TRUE(names_bad_parameter(Agent::create(c).status(), "queue_dept"));
    c.params.erase("queue_dept");
    if (k.bad_value_param.empty()) continue;
    c.backend = k.backend;
    c.params[k.bad_value_param] = "abc";
    EXPECT_TRUE(names_bad_parameter(Agent::create(c).status(), k.bad_value_param));
    c.backend = "auto";
    EXPECT_TRUE(names_bad_parameter(Agent::create(c).status(), k.bad_value_param));
  }
}

// `auto` must not take a bad value as "this backend cannot start" and fall back to the next.
TEST(AgentSelection, AutoDoesNotFallBackOnABadParameter) {
  BackendRegistry reg;
  KVTIER_ASSERT_OK(
      reg.add("posix", StorageClass::kFile, 10, create_posix_backend, posix_backend_params()));
  KVTIER_ASSERT_OK(reg.add("picky", StorageClass::kFile, 20,
                           [](const BackendParams& p) -> Result<std::unique_ptr<Backend>> {
                             KVTIER_ASSIGN_OR_RETURN(uint64_t depth, param_u64(p, "depth", 1));
                             if (depth > 8)
                               return invalid_argument_error("depth must be at most 8");
                             return unavailable_error("picky cannot start here", false);
                           },
                           {{"depth", ParamType::kUnsigned}}));
  AgentConfig c;
  c.registry = &reg;
  c.params["depth"] = "4";
  KVTIER_ASSERT_OK_AND_ASSIGN(Agent a, Agent::create(c));
  EXPECT_EQ(a.backend_name(), "posix");  // picky could not start: fall back
  c.params["depth"] = "9";
  EXPECT_TRUE(names_bad_parameter(Agent::create(c).status(), "depth"));
  c.params["depth"] = "nine";
  EXPECT_TRUE(names_bad_parameter(Agent::create(c).status(), "depth"));
  // A parameter only the other backend knows is still checked under `auto`.
  c.params.erase("depth");
  c.params["io_threads"] = "x";
  EXPECT_TRUE(names_bad_parameter(Agent::create(c).status(), "io_threads"));
}

TEST(BackendRegistry, RejectsDuplicatesAndReservedNames) {
  BackendRegistry reg;
  KVTIER_ASSERT_OK(reg.add("posix", StorageClass::kFile, 10, create_posix_backend));
  EXPECT_EQ(reg.add("posix", StorageClass::kFile, 1, create_posix_backend).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(reg.add("auto", StorageClass::kFile, 1, create_posix_backend).code(),
            StatusCode::kInvalidArgument);
}

// ---- registration ----

TEST(AgentRegistration, RegistersOnceAndDeregistersOnDestruction) {
  Agent a = make_agent();
  AlignedBuffer buf = testing::make_buffer(1 << 20);
  {
    KVTIER_ASSERT_OK_AND_ASSIGN(Registration r, a.register_memory(buf.data(), buf.size()));
    EXPECT_TRUE(r.valid());
    EXPECT_EQ(a.registered_region_count(), 1u);
    KVTIER_EXPECT_OK(a.check_registered(buf.data() + 100, 1000));
    Registration moved = std::move(r);
    EXPECT_EQ(a.registered_region_count(), 1u);
  }
  EXPECT_EQ(a.registered_region_count(), 0u);
  EXPECT_EQ(a.check_registered(buf.data(), 10).code(), StatusCode::kInvalidArgument);
}

TEST(AgentRegistration, RejectsNullEmptyAndOverlappingRegions) {
  Agent a = make_agent();
  AlignedBuffer buf = testing::make_buffer(8192);
  EXPECT_EQ(a.register_memory(nullptr, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.register_memory(buf.data(), 0).status().code(), StatusCode::kInvalidArgument);
  KVTIER_ASSERT_OK_AND_ASSIGN(Registration r, a.register_memory(buf.data() + 4096, 4096));
  EXPECT_EQ(a.register_memory(buf.data(), 4097).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.register_memory(buf.data() + 8191, 1).status().code(), StatusCode::kInvalidArgument);
  // Adjacent is fine.
  KVTIER_ASSERT_OK_AND_ASSIGN(Registration r2, a.register_memory(buf.data(), 4096));
  EXPECT_EQ(a.registered_region_count(), 2u);
  // Overlap inside one call: the whole call fails and leaves nothing registered.
  r.reset();
  r2.reset();
  const MemoryRegion both[] = {{buf.data(), 4096}, {buf.data() + 1000, 10}};
  EXPECT_EQ(a.register_memory(both).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.registered_region_count(), 0u);
}

TEST(AgentRegistration, CheckRegisteredRejectsRangesThatStraddleTheEnd) {
  Agent a = make_agent();
  AlignedBuffer buf = testing::make_buffer(8192);
  KVTIER_ASSERT_OK_AND_ASSIGN(Registration r, a.register_memory(buf.data(), 4096));
  KVTIER_EXPECT_OK(a.check_registered(buf.data(), 4096));
  EXPECT_EQ(a.check_registered(buf.data() + 1, 4096).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.check_registered(buf.data() + 4096, 1).code(), StatusCode::kInvalidArgument);
}

TEST(AgentRegistration, FailedBackendRegistrationLeavesNothingRegistered) {
  auto faults = std::make_shared<FaultInjector>();
  faults->add(FaultRule{.op = FaultOp::kRegister, .error = ENOMEM, .skip = 1});
  Agent a = make_agent("posix", faults);
  AlignedBuffer buf = testing::make_buffer(8192);
  const MemoryRegion two[] = {{buf.data(), 4096}, {buf.data() + 4096, 4096}};
  Result<Registration> r = a.register_memory(two);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(a.registered_region_count(), 0u);
}

// ---- descriptors ----

class AgentRequest : public ::testing::Test {
 protected:
  void SetUp() override {
    agent_ = std::make_unique<Agent>(make_agent());
    buf_ = testing::make_buffer(64 * 1024);
    auto r = agent_->register_memory(buf_.data(), buf_.size());
    ASSERT_TRUE(r.ok());
    reg_ = std::move(r).value();
    testing::fill_pattern(buf_.data(), 16384, 1);
    KVTIER_ASSERT_OK(write_object(*agent_, dir_.file("obj"), buf_.data(), 16384));
    auto t = agent_->open_target({dir_.file("obj"), TargetMode::kRead, 0, {}});
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    target_ = std::move(t).value();
  }

  Status make(TransferOp op, MemDesc m, StorageDesc s) {
    return agent_->make_request(op, {&m, 1}, {&s, 1}).status();
  }

  testing::TempDir dir_;
  std::unique_ptr<Agent> agent_;
  AlignedBuffer buf_;
  Registration reg_;
  Target target_;
};

TEST_F(AgentRequest, ValidDescriptorsReadBackWhatWasWritten) {
  std::byte* dst = buf_.data() + 32768;
  MemDesc m[2] = {{dst, 4096}, {dst + 4096, 12288}};
  StorageDesc s[2] = {{&target_, 0, 4096}, {&target_, 4096, 12288}};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, agent_->make_request(TransferOp::kRead, m, s));
  EXPECT_EQ(x.state(), TransferState::kPrepared);
  KVTIER_ASSERT_OK(x.post());
  KVTIER_ASSERT_OK(x.wait(testing::kHungCeiling));
  EXPECT_EQ(x.state(), TransferState::kDone);
  ASSERT_EQ(x.results().size(), 2u);
  KVTIER_EXPECT_OK(x.results()[0]);
  KVTIER_EXPECT_OK(x.results()[1]);
  EXPECT_EQ(testing::find_pattern_mismatch(dst, 16384, 1), SIZE_MAX);
}

TEST_F(AgentRequest, CallbacksReportEveryDescriptorThenTheEndBeforeWaitReturns) {
  constexpr size_t kDescs = 16;
  std::vector<MemDesc> m;
  std::vector<StorageDesc> s;
  for (size_t i = 0; i < kDescs; ++i) {
    m.push_back({buf_.data() + 32768 + i * 1024, 1024});
    s.push_back({&target_, i * 1024, 1024});
  }
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, agent_->make_request(TransferOp::kRead, m, s));
  std::vector<std::atomic<int>> seen(kDescs);
  std::atomic<int> done_calls{0};
  std::atomic<bool> all_seen_at_done{false};
  TransferCallbacks cb;
  cb.on_descriptor = [&](size_t i, const Status& st) {
    EXPECT_TRUE(st.ok()) << st.to_string();
    // The bytes of a completed descriptor are in memory when it is reported.
    EXPECT_EQ(std::memcmp(buf_.data() + 32768 + i * 1024, buf_.data() + i * 1024, 1024), 0);
    ++seen[i];
  };
  cb.on_done = [&] {
    bool all = true;
    for (auto& v : seen) all = all && v.load() == 1;
    all_seen_at_done = all;
    ++done_calls;
  };
  KVTIER_ASSERT_OK(x.post(std::move(cb)));
  x.wait();
  EXPECT_EQ(done_calls.load(), 1);
  EXPECT_TRUE(all_seen_at_done.load());
  for (auto& v : seen) EXPECT_EQ(v.load(), 1);
  // A second post without callbacks calls none of the old ones.
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  EXPECT_EQ(done_calls.load(), 1);
}

TEST_F(AgentRequest, RejectsUnregisteredAndStraddlingMemory) {
  AlignedBuffer other = testing::make_buffer(4096);
  EXPECT_EQ(make(TransferOp::kRead, {other.data(), 4096}, {&target_, 0, 4096}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      make(TransferOp::kRead, {buf_.data() + buf_.size() - 100, 200}, {&target_, 0, 200}).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(make(TransferOp::kRead, {nullptr, 10}, {&target_, 0, 10}).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(AgentRequest, RejectsReadsBeyondTheObjectAndWritesToReadTargets) {
  Status beyond = make(TransferOp::kRead, {buf_.data(), 4096}, {&target_, 16000, 4096});
  EXPECT_EQ(beyond.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.message().find("beyond the end"), std::string::npos) << beyond.message();
  EXPECT_EQ(make(TransferOp::kWrite, {buf_.data(), 10}, {&target_, 0, 10}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make(TransferOp::kRead, {buf_.data(), 10}, {&target_, UINT64_MAX - 5, 10}).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(AgentRequest, AppendTargetsWriteOnlyPastTheirEndAndNeverPublish) {
  KVTIER_ASSERT_OK_AND_ASSIGN(Target t,
                              agent_->open_target({dir_.file("obj"), TargetMode::kAppend, 0, {}}));
  EXPECT_EQ(t.size(), 16384u);
  // Bytes that were there when it was opened cannot be changed through it.
  Status over = make(TransferOp::kWrite, {buf_.data(), 4096}, {&t, 12288, 4096});
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.message().find("only past them"), std::string::npos) << over.message();
  EXPECT_EQ(make(TransferOp::kWrite, {buf_.data(), 4096}, {&t, 16383, 4096}).code(),
            StatusCode::kInvalidArgument);
  // Reads stay within the object as opened.
  EXPECT_EQ(make(TransferOp::kRead, {buf_.data(), 4096}, {&t, 16384, 4096}).code(),
            StatusCode::kInvalidArgument);
  // Appending at the end (and past it) works, and leaves the old bytes as they were.
  testing::fill_pattern(buf_.data() + 16384, 8192, 2);
  MemDesc m{buf_.data() + 16384, 8192};
  StorageDesc s{&t, 16384, 8192};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kWrite, {&m, 1}, {&s, 1}));
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_ASSERT_OK(x.first_error());
  EXPECT_EQ(t.publish().code(), StatusCode::kInvalidArgument);
  KVTIER_ASSERT_OK_AND_ASSIGN(Target r,
                              agent_->open_target({dir_.file("obj"), TargetMode::kRead, 0, {}}));
  EXPECT_EQ(r.size(), 24576u);
  std::byte* dst = buf_.data() + 32768;
  MemDesc rm{dst, 24576};
  StorageDesc rs{&r, 0, 24576};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer y,
                              agent_->make_request(TransferOp::kRead, {&rm, 1}, {&rs, 1}));
  KVTIER_ASSERT_OK(y.post());
  y.wait();
  KVTIER_ASSERT_OK(y.first_error());
  EXPECT_EQ(testing::find_pattern_mismatch(dst, 16384, 1), SIZE_MAX);
  EXPECT_EQ(testing::find_pattern_mismatch(dst + 16384, 8192, 2), SIZE_MAX);
  // A missing object is not created.
  EXPECT_EQ(agent_->open_target({dir_.file("absent"), TargetMode::kAppend, 0, {}}).status().code(),
            StatusCode::kNotFound);
}

TEST_F(AgentRequest, DirectTargetsRejectMisalignedDescriptors) {
  TargetSpec spec{dir_.file("obj"), TargetMode::kRead, 0, {}};
  spec.direct = true;
  Result<Target> t = agent_->open_target(spec);
  if (!t.ok() && t.status().code() == StatusCode::kUnsupported) {
    GTEST_SKIP() << t.status().to_string();
  }
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  KVTIER_EXPECT_OK(make(TransferOp::kRead, {buf_.data(), 4096}, {&*t, 4096, 4096}));
  Status mem = make(TransferOp::kRead, {buf_.data() + 1, 4096}, {&*t, 0, 4096});
  EXPECT_EQ(mem.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mem.message().find("direct I/O"), std::string::npos) << mem.message();
  EXPECT_EQ(make(TransferOp::kRead, {buf_.data(), 4096}, {&*t, 1, 4096}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make(TransferOp::kRead, {buf_.data(), 1000}, {&*t, 0, 1000}).code(),
            StatusCode::kInvalidArgument);
  // And the aligned one really moves the bytes, bypassing the cache.
  MemDesc m{buf_.data() + 32768, 16384};
  StorageDesc s{&*t, 0, 16384};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1}));
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_ASSERT_OK(x.first_error());
  EXPECT_EQ(testing::find_pattern_mismatch(buf_.data() + 32768, 16384, 1), SIZE_MAX);
}

TEST_F(AgentRequest, RejectsMismatchedListsLengthsAndMissingTargets) {
  MemDesc m[2] = {{buf_.data(), 10}, {buf_.data() + 10, 10}};
  StorageDesc s[1] = {{&target_, 0, 10}};
  EXPECT_EQ(agent_->make_request(TransferOp::kRead, m, s).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make(TransferOp::kRead, {buf_.data(), 10}, {&target_, 0, 20}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make(TransferOp::kRead, {buf_.data(), 0}, {&target_, 0, 0}).code(),
            StatusCode::kInvalidArgument);
  Target empty;
  EXPECT_EQ(make(TransferOp::kRead, {buf_.data(), 10}, {&empty, 0, 10}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make(TransferOp::kRead, {buf_.data(), 10}, {nullptr, 0, 10}).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(AgentRequest, RejectsTargetsOfAnotherAgent) {
  Agent other = make_agent();
  KVTIER_ASSERT_OK_AND_ASSIGN(Target t,
                              other.open_target({dir_.file("obj"), TargetMode::kRead, 0, {}}));
  Status st = make(TransferOp::kRead, {buf_.data(), 10}, {&t, 0, 10});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("another agent"), std::string::npos);
}

TEST_F(AgentRequest, EmptyRequestCompletesAtOnce) {
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x, agent_->make_request(TransferOp::kRead, {}, {}));
  KVTIER_ASSERT_OK(x.post());
  KVTIER_EXPECT_OK(x.wait(testing::kHungCeiling));
  EXPECT_TRUE(x.results().empty());
}

TEST_F(AgentRequest, DoneRequestCanBePostedAgain) {
  MemDesc m{buf_.data() + 32768, 100};
  StorageDesc s{&target_, 0, 100};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1}));
  for (int i = 0; i < 3; ++i) {
    std::memset(buf_.data() + 32768, 0, 100);
    KVTIER_ASSERT_OK(x.post());
    x.wait();
    KVTIER_EXPECT_OK(x.first_error());
    EXPECT_EQ(std::memcmp(buf_.data() + 32768, buf_.data(), 100), 0);
  }
}

TEST_F(AgentRequest, WaitOnAnUnpostedRequestIsAnError) {
  MemDesc m{buf_.data(), 100};
  StorageDesc s{&target_, 0, 100};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1}));
  EXPECT_EQ(x.wait(1ms).code(), StatusCode::kInvalidArgument);
}

TEST_F(AgentRequest, PostAfterTheRegistrationIsReleasedFails) {
  MemDesc m{buf_.data(), 100};
  StorageDesc s{&target_, 0, 100};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1}));
  reg_.reset();
  Status st = x.post();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("deregistered"), std::string::npos);
}

TEST_F(AgentRequest, TransferKeepsItsTargetOpenAfterTheHandleIsGone) {
  const size_t with_target = open_fds();
  MemDesc m{buf_.data() + 32768, 16384};
  StorageDesc s{&target_, 0, 16384};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1}));
  target_.reset();
  EXPECT_EQ(open_fds(), with_target);  // still held by the request
  KVTIER_ASSERT_OK(x.post());
  x.wait();
  KVTIER_EXPECT_OK(x.first_error());
  EXPECT_EQ(testing::find_pattern_mismatch(buf_.data() + 32768, 16384, 1), SIZE_MAX);
  x = Transfer();
  EXPECT_EQ(open_fds(), with_target - 1);
}

// ---- in flight: delays, cancel, destruction ----

class AgentInFlight : public ::testing::Test {
 protected:
  void SetUp() override {
    faults_ = std::make_shared<FaultInjector>();
    agent_ = std::make_unique<Agent>(make_agent("posix", faults_));
    buf_ = testing::make_buffer(1 << 20);
    auto r = agent_->register_memory(buf_.data(), buf_.size());
    ASSERT_TRUE(r.ok());
    reg_ = std::move(r).value();
    KVTIER_ASSERT_OK(write_object(*agent_, dir_.file("obj"), buf_.data(), 4096));
    auto t = agent_->open_target({dir_.file("obj"), TargetMode::kRead, 0, {}});
    ASSERT_TRUE(t.ok());
    target_ = std::move(t).value();
  }

  // A read posted while the fault injector holds batches: in flight until
  // faults_->release_batches() (or a cancel).
  Transfer held_read(TransferCallbacks callbacks = {}) {
    faults_->hold_batches();
    Transfer x = read(std::move(callbacks));
    faults_->wait_held(1);
    return x;
  }

  Transfer read(TransferCallbacks callbacks = {}) {
    MemDesc m{buf_.data(), 4096};
    StorageDesc s{&target_, 0, 4096};
    Result<Transfer> x = agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1});
    EXPECT_TRUE(x.ok());
    EXPECT_TRUE(x->post(std::move(callbacks)).ok());
    return std::move(x).value();
  }

  testing::TempDir dir_;
  std::shared_ptr<FaultInjector> faults_;
  std::unique_ptr<Agent> agent_;
  AlignedBuffer buf_;
  Registration reg_;
  Target target_;
};

// What the calling thread alone has used (other threads' work does not count).
struct ThreadUsage {
  double cpu_s = 0;
  long voluntary_switches = 0;  // times it blocked
};
ThreadUsage thread_usage() {
  rusage u{};
  EXPECT_EQ(getrusage(RUSAGE_THREAD, &u), 0);
  return {static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
              static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6,
          u.ru_nvcsw};
}

TEST_F(AgentInFlight, WaitTimesOutWithoutBusyPollingThenCompletes) {
  Transfer x = held_read();
  EXPECT_EQ(x.state(), TransferState::kInFlight);
  const ThreadUsage before = thread_usage();
  Status st = x.wait(50ms);
  const ThreadUsage after = thread_usage();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  // Blocked once, the waiting thread uses microseconds of its 50 ms. Spinning uses several ms
  // of them even on a loaded machine; sleeping in a polling loop blocks once per round. (CPU
  // time and switches of this thread, not wall time: a slower machine only lowers both.)
  EXPECT_LT(after.cpu_s - before.cpu_s, 0.005) << "waiting burned CPU";
  EXPECT_LE(after.voluntary_switches - before.voluntary_switches, 10) << "waiting polled";
  faults_->release_batches();
  KVTIER_ASSERT_OK(x.wait(testing::kHungCeiling));
  KVTIER_EXPECT_OK(x.first_error());
}

TEST_F(AgentInFlight, PostWhileInFlightIsRejected) {
  Transfer x = held_read();
  EXPECT_EQ(x.post().code(), StatusCode::kInvalidArgument);
  faults_->release_batches();
  x.wait();
  KVTIER_EXPECT_OK(x.first_error());
}

TEST_F(AgentInFlight, CancelCompletesPendingDescriptorsAsCancelled) {
  const size_t before = open_fds();
  Transfer x = held_read();  // never released: only the cancel can end it
  x.cancel();
  KVTIER_ASSERT_OK(x.wait(testing::kHungCeiling));
  ASSERT_EQ(x.results().size(), 1u);
  EXPECT_EQ(x.results()[0].code(), StatusCode::kCancelled);
  x = Transfer();
  EXPECT_EQ(open_fds(), before);
}

TEST_F(AgentInFlight, DestroyingAnInFlightRequestCancelsAndDrains) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    Transfer x = held_read();  // never released: only the cancel can end it
    EXPECT_EQ(x.state(), TransferState::kInFlight);
  }  // must neither hang nor leave the backend writing into freed state
  // Never released: had the destructor waited for the batch instead of cancelling it, it would
  // not have returned at all.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, testing::kHungCeiling);
  EXPECT_EQ(faults_->held(), 0u);
  // The agent still works afterwards.
  faults_->release_batches();
  Transfer y = read();
  y.wait();
  KVTIER_EXPECT_OK(y.first_error());
}

TEST_F(AgentInFlight, DeregistrationWaitsForTransfersUsingTheMemory) {
  std::atomic<bool> io_done{false};
  TransferCallbacks callbacks;
  callbacks.on_done = [&] { io_done = true; };  // after every descriptor's I/O
  Transfer x = held_read(std::move(callbacks));
  std::atomic<bool> released{false};
  std::atomic<bool> io_done_at_release{false};
  std::thread t([&] {
    reg_.reset();
    io_done_at_release = io_done.load();
    released = true;
  });
  // The deregistration has begun once the region is out of the lookup map; the transfer is
  // held, so it cannot finish before the gate opens below.
  while (agent_->check_registered(buf_.data(), 4096).ok()) std::this_thread::yield();
  EXPECT_FALSE(released.load()) << "deregistered while a transfer was using the memory";
  faults_->release_batches();
  x.wait();
  t.join();
  EXPECT_TRUE(released.load());
  EXPECT_TRUE(io_done_at_release.load())
      << "deregistration returned while a transfer was using the memory";
  KVTIER_EXPECT_OK(x.first_error());
}

TEST_F(AgentInFlight, SyncWaitsForNoWriteAndItsFailureIsReported) {
  KVTIER_ASSERT_OK_AND_ASSIGN(Target t,
                              agent_->open_target({dir_.file("obj"), TargetMode::kAppend, 0, {}}));
  faults_->hold_batches();
  MemDesc m{buf_.data(), 4096};
  StorageDesc s{&t, 4096, 4096};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kWrite, {&m, 1}, {&s, 1}));
  KVTIER_ASSERT_OK(x.post());
  Status early = t.sync();
  EXPECT_EQ(early.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(early.message().find("in flight"), std::string::npos) << early.message();
  faults_->release_batches();
  x.wait();
  KVTIER_EXPECT_OK(x.first_error());
  const uint64_t before = faults_->calls(FaultOp::kSync);
  KVTIER_EXPECT_OK(t.sync());
  EXPECT_EQ(faults_->calls(FaultOp::kSync), before + 1);
  faults_->add(FaultRule{.op = FaultOp::kSync, .error = EIO, .count = 1});
  Status failed = t.sync();
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("fdatasync"), std::string::npos) << failed.to_string();
  KVTIER_EXPECT_OK(t.sync());  // the rule is spent
}

TEST_F(AgentInFlight, PublishWhileAWriteIsInFlightIsRejected) {
  KVTIER_ASSERT_OK_AND_ASSIGN(
      Target t, agent_->open_target({dir_.file("new"), TargetMode::kCreate, 4096, {}}));
  faults_->hold_batches();
  MemDesc m{buf_.data(), 4096};
  StorageDesc s{&t, 0, 4096};
  KVTIER_ASSERT_OK_AND_ASSIGN(Transfer x,
                              agent_->make_request(TransferOp::kWrite, {&m, 1}, {&s, 1}));
  KVTIER_ASSERT_OK(x.post());
  EXPECT_EQ(t.publish().code(), StatusCode::kInvalidArgument);
  faults_->release_batches();
  x.wait();
  KVTIER_EXPECT_OK(x.first_error());
  KVTIER_EXPECT_OK(t.publish());
  EXPECT_EQ(t.publish().code(), StatusCode::kInvalidArgument);  // twice
  EXPECT_EQ(x.post().code(), StatusCode::kInvalidArgument);     // write after publish
}

TEST_F(AgentInFlight, ConcurrentRequestsFromManyThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        MemDesc m{buf_.data() + 8192 + t * 4096, 4096};
        StorageDesc s{&target_, 0, 4096};
        auto x = agent_->make_request(TransferOp::kRead, {&m, 1}, {&s, 1});
        if (!x.ok() || !x->post().ok()) {
          ++failures;
          continue;
        }
        x->wait();
        if (!x->first_error().ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// ---- ownership: fd accounting on every agent path ----

TEST(AgentOwnership, NoDescriptorOutlivesItsHandle) {
  testing::TempDir dir;
  Agent a = make_agent();
  AlignedBuffer buf = testing::make_buffer(1 << 16);
  const size_t base = open_fds();
  {
    KVTIER_ASSERT_OK_AND_ASSIGN(Registration r, a.register_memory(buf.data(), buf.size()));
    EXPECT_EQ(open_fds(), base) << "register";
    for (int i = 0; i < 20; ++i) {
      KVTIER_ASSERT_OK(write_object(a, dir.file(std::to_string(i)), buf.data(), 4096));
    }
    EXPECT_EQ(open_fds(), base) << "write + publish";
    {
      std::vector<TargetSpec> specs;
      for (int i = 0; i < 20; ++i)
        specs.push_back({dir.file(std::to_string(i)), TargetMode::kRead, 0, {}});
      specs.push_back({dir.file("missing"), TargetMode::kRead, 0, {}});
      auto targets = a.open_targets(specs);
      EXPECT_EQ(open_fds(), base + 20) << "open_targets";
      EXPECT_EQ(targets.back().status().code(), StatusCode::kNotFound);
    }
    EXPECT_EQ(open_fds(), base) << "targets released";
    {
      KVTIER_ASSERT_OK_AND_ASSIGN(Target t,
                                  a.open_target({dir.file("x"), TargetMode::kCreate, 10, {}}));
      EXPECT_EQ(open_fds(), base + 1);
    }
    EXPECT_EQ(open_fds(), base) << "unpublished create";
    EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
  }
  EXPECT_EQ(open_fds(), base) << "deregister";
}

TEST(AgentOwnership, HandlesMayOutliveTheAgentObject) {
  testing::TempDir dir;
  AlignedBuffer buf = testing::make_buffer(4096);
  Registration r;
  Target t;
  {
    Agent a = make_agent();
    KVTIER_ASSERT_OK_AND_ASSIGN(r, a.register_memory(buf.data(), buf.size()));
    KVTIER_ASSERT_OK_AND_ASSIGN(t, a.open_target({dir.file("y"), TargetMode::kCreate, 4096, {}}));
  }
  // The backend lives on in the handles: publishing and releasing still work.
  KVTIER_EXPECT_OK(t.publish());
  t.reset();
  r.reset();
  EXPECT_TRUE(std::filesystem::exists(dir.file("y")));
}

}  // namespace
}  // namespace kvtier
