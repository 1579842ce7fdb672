// The guard around `make test`: its test passes run in a network namespace with only loopback
// up (scripts/loopback-only), so that a test reaching for any address but this machine's fails.
// These tests prove the namespace is really in place. They send nothing off the machine even
// where it is not: a UDP connect() only looks up a route, and the TCP attempt is made only
// once that lookup has found no route. The addresses are from the documentation ranges
// (RFC 5737, RFC 3849), which no network routes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "kvtier/core/unique_fd.h"

namespace kvtier {
namespace {

// Skips, with the reason, unless this process runs inside scripts/loopback-only's namespace.
class NetIsolation : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* v = std::getenv("KVTIER_TEST_NET_ISOLATION");
    const std::string state = v == nullptr ? "" : v;
    if (state.empty()) {
      GTEST_SKIP() << "not run by scripts/loopback-only (make test runs the suites there)";
    }
    if (state != "loopback-only") GTEST_SKIP() << "no loopback-only namespace: " << state;
  }
};

// errno of a connect() of a fresh socket of `type` to `addr`, or 0 if it connected.
int connect_errno(int family, int type, const sockaddr* addr, socklen_t len) {
  UniqueFd s(::socket(family, type | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(s.valid()) << std::strerror(errno);
  if (!s.valid()) return -1;
  return ::connect(s.get(), addr, len) == 0 ? 0 : errno;
}

sockaddr_in ipv4(const char* ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  EXPECT_EQ(::inet_pton(AF_INET, ip, &a.sin_addr), 1) << ip;
  return a;
}

TEST_F(NetIsolation, LoopbackIsTheOnlyInterface) {
  // if_nameindex asks the kernel over netlink, so it lists this namespace's interfaces (sysfs
  // would show those of the namespace it was mounted in).
  struct if_nameindex* list = ::if_nameindex();
  ASSERT_NE(list, nullptr) << std::strerror(errno);
  std::set<std::string> names;
  for (const struct if_nameindex* i = list; i->if_index != 0; ++i) names.insert(i->if_name);
  ::if_freenameindex(list);
  EXPECT_EQ(names, std::set<std::string>{"lo"});
}

TEST_F(NetIsolation, NoRouteLeavesTheMachine) {
  // IPv4: a route lookup first (UDP connect sends nothing) ...
  const sockaddr_in v4 = ipv4("192.0.2.1", 80);
  const auto* sa4 = reinterpret_cast<const sockaddr*>(&v4);
  const int udp = connect_errno(AF_INET, SOCK_DGRAM, sa4, sizeof v4);
  ASSERT_NE(udp, 0) << "a route to 192.0.2.1 exists: this is not a loopback-only namespace";
  EXPECT_EQ(udp, ENETUNREACH) << std::strerror(udp);
  // ... and, with no route, a TCP connection fails at once too.
  const int tcp = connect_errno(AF_INET, SOCK_STREAM, sa4, sizeof v4);
  EXPECT_EQ(tcp, ENETUNREACH) << std::strerror(tcp);
  // IPv6, where the kernel has it.
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(80);
  ASSERT_EQ(::inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr), 1);
  UniqueFd probe(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (probe.valid()) {
    const int udp6 =
        connect_errno(AF_INET6, SOCK_DGRAM, reinterpret_cast<const sockaddr*>(&v6), sizeof v6);
    EXPECT_TRUE(udp6 == ENETUNREACH || udp6 == EADDRNOTAVAIL) << std::strerror(udp6);
  }
}

TEST_F(NetIsolation, LoopbackStillWorks) {
  // The failures above are the namespace's doing, not a machine without networking.
  UniqueFd server(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(server.valid());
  sockaddr_in a = ipv4("127.0.0.1", 0);
  ASSERT_EQ(::bind(server.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0)
      << std::strerror(errno);
  ASSERT_EQ(::listen(server.get(), 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(server.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  EXPECT_EQ(connect_errno(AF_INET, SOCK_STREAM, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
}

}  // namespace
}  // namespace kvtier
