// Kernel-fabric tests: two Prism endpoints in two network namespaces joined
// by one veth pair per plane (tests/udp/netns_fabric.sh builds it and
// exports its description). Each endpoint's sockets are created inside its
// namespace (setns on the creating thread), so its traffic crosses the
// veths. Skipped with a message when not run through the script.
//
//   FabricTest.MultiGiBMixedSizesByteExactAndSprayed
//   FabricTest.LinkDownRetiresPathsFastAndLinkUpRestoresThem
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "prism/endpoint.h"
#include "transport/base/random.h"

namespace prism {
namespace {

struct Fabric {
  std::string ns[2];
  int planes = 0;
  std::vector<std::string> addr[2], dev[2];
};

bool GetFabric(Fabric* f) {
  const char* a = getenv("PRISM_NS_A");
  const char* b = getenv("PRISM_NS_B");
  const char* p = getenv("PRISM_PLANES");
  if (!a || !b || !p) return false;
  f->ns[0] = a;
  f->ns[1] = b;
  f->planes = atoi(p);
  f->addr[0] = absl::StrSplit(getenv("PRISM_ADDR_A"), ',');
  f->addr[1] = absl::StrSplit(getenv("PRISM_ADDR_B"), ',');
  f->dev[0] = absl::StrSplit(getenv("PRISM_DEV_A"), ',');
  f->dev[1] = absl::StrSplit(getenv("PRISM_DEV_B"), ',');
  return f->planes > 0;
}

#define REQUIRE_FABRIC(f)                                                      \
  Fabric f;                                                                    \
  if (!GetFabric(&f))                                                          \
  GTEST_SKIP() << "kernel-fabric test: run through tests/udp/netns_fabric.sh " \
                  "as root (ctest -L fabric does)"

// Creates an endpoint whose sockets live in namespace `ns`.
std::unique_ptr<Endpoint> CreateIn(const std::string& ns,
                                   const EndpointOptions& o) {
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int target = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(self, 0);
  EXPECT_GE(target, 0) << ns;
  EXPECT_EQ(setns(target, CLONE_NEWNET), 0) << strerror(errno);
  auto ep = Endpoint::Create(o);
  EXPECT_EQ(setns(self, CLONE_NEWNET), 0);
  close(self);
  close(target);
  EXPECT_TRUE(ep.ok()) << ep.status();
  return ep.ok() ? std::move(*ep) : nullptr;
}

std::string Sh(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[256];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  pclose(p);
  return out;
}

uint64_t DevCounter(const std::string& ns, const std::string& dev,
                    const char* stat) {
  return strtoull(Sh(absl::StrCat("ip netns exec ", ns, " cat /sys/class/net/",
                                  dev, "/statistics/", stat))
                      .c_str(),
                  nullptr, 10);
}

struct Pair {
  std::unique_ptr<Endpoint> a, b;
  ConnId ca = 0, cb = 0;
};

Pair Connect(const Fabric& f, uint16_t paths, uint32_t mtu) {
  Pair p;
  EndpointOptions o;
  o.link_mtu = mtu;
  o.connection.num_paths = paths;
  o.connection.num_planes = f.planes;
  o.connection.base_rtt = 50 * kMicrosecond;
  o.connection.rto_min = 2 * kMillisecond;
  o.connection.probe_interval = 2 * kMillisecond;
  o.connection.link_rate_bps = 10'000'000'000ull;
  o.local_addrs = f.addr[0];
  p.a = CreateIn(f.ns[0], o);
  o.local_addrs = f.addr[1];
  o.seed = 2;
  p.b = CreateIn(f.ns[1], o);
  if (!p.a || !p.b) return p;
  p.ca = *p.a->CreateConnection();
  p.cb = *p.b->CreateConnection();
  EXPECT_TRUE(p.a->Connect(p.ca, *p.b->LocalInfo(p.cb)).ok());
  EXPECT_TRUE(p.b->Connect(p.cb, *p.a->LocalInfo(p.ca)).ok());
  return p;
}

// Streams `rounds` x region bytes of mixed-size WRITEs from a to b; after
// every round the whole destination region is compared with what was sent
// (each round sends a different window of the source pattern).
class Streamer {
 public:
  Streamer(Pair& p, uint64_t region) : p_(p), region_(region) {
    src_.resize(region + (1 << 20));
    dst_.assign(region, 0);
    Rng rng(11);
    for (auto& x : src_) x = rng.Next32();
    ms_ = *p.a->RegisterMemory(src_.data(), src_.size(), kAccessLocal);
    md_ = *p.b->RegisterMemory(dst_.data(), dst_.size(), kAccessRemoteWrite);
  }

  // Returns false on a failed/stuck write or a content mismatch.
  bool Round(uint64_t r) {
    const uint64_t shift = (r * 40961) % (1 << 20);
    const uint64_t sizes[] = {64, 1500, 4096, 8000, 65536, 200000, 1 << 20};
    Rng rng(100 + r);
    uint64_t off = 0;
    size_t outstanding = 0;
    Completion c[64];
    while (off < region_ || outstanding > 0) {
      while (off < region_ && outstanding < 64) {
        const uint64_t len = std::min(sizes[rng.Uniform(7)], region_ - off);
        WriteRequest w;
        w.wr_id = off;
        w.local_addr = src_.data() + shift + off;
        w.length = len;
        w.lkey = ms_.lkey;
        w.remote_addr = md_.addr + off;
        w.rkey = md_.rkey;
        if (!p_.a->PostWrite(p_.ca, w).ok()) break;
        off += len;
        ++outstanding;
      }
      const size_t n = p_.a->WaitCompletions(c, 64, 5 * kSecond);
      if (n == 0) {
        ADD_FAILURE() << "no completion for 5 s in round " << r;
        return false;
      }
      for (size_t i = 0; i < n; ++i) {
        if (c[i].status != absl::StatusCode::kOk) {
          ADD_FAILURE() << "write failed: " << static_cast<int>(c[i].status);
          return false;
        }
        bytes_ += c[i].byte_len;
      }
      outstanding -= n;
    }
    if (memcmp(dst_.data(), src_.data() + shift, region_) != 0) {
      ADD_FAILURE() << "round " << r << " not byte-exact";
      return false;
    }
    return true;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  Pair& p_;
  uint64_t region_;
  std::vector<uint8_t> src_, dst_;
  MemoryRegion ms_, md_;
  std::atomic<uint64_t> bytes_{0};
};

TEST(FabricTest, MultiGiBMixedSizesByteExactAndSprayed) {
  REQUIRE_FABRIC(f);
  constexpr uint16_t kPaths = 16;
  Pair p = Connect(f, kPaths, 9000);
  ASSERT_TRUE(p.a && p.b);
  std::vector<uint64_t> tx0(f.planes);
  for (int pl = 0; pl < f.planes; ++pl)
    tx0[pl] = DevCounter(f.ns[0], f.dev[0][pl], "tx_packets");
  Streamer s(p, 64 << 20);
  const Time t0 = Endpoint::Now();
  constexpr int kRounds = 32;  // 2 GiB
  for (int r = 0; r < kRounds; ++r) ASSERT_TRUE(s.Round(r));
  const double secs = (Endpoint::Now() - t0) / 1e12;
  printf(
      "[fabric] %d planes, %u paths: %.2f GiB byte-exact in %.2f s = "
      "%.2f Gb/s\n",
      f.planes, kPaths, s.bytes() / double(1 << 30), secs,
      s.bytes() * 8 / secs / 1e9);
  EXPECT_EQ(s.bytes(), uint64_t{kRounds} * (64 << 20));
  // Per-path counters: every path carried a fair share.
  uint64_t total = 0, minp = UINT64_MAX, maxp = 0;
  for (PathId path = 0; path < kPaths; ++path) {
    auto ps = p.a->path_stats(p.ca, path);
    ASSERT_TRUE(ps.ok());
    total += ps->tx_packets;
    minp = std::min(minp, ps->tx_packets);
    maxp = std::max(maxp, ps->tx_packets);
  }
  printf("[fabric] per-path tx packets: min %llu max %llu total %llu\n",
         (unsigned long long)minp, (unsigned long long)maxp,
         (unsigned long long)total);
  EXPECT_GT(minp, total / kPaths / 2) << "a path was starved";
  // And the planes' links both carried it (kernel veth counters).
  for (int pl = 0; pl < f.planes; ++pl) {
    const uint64_t d =
        DevCounter(f.ns[0], f.dev[0][pl], "tx_packets") - tx0[pl];
    printf("[fabric] plane %d (%s) tx packets: %llu\n", pl,
           f.dev[0][pl].c_str(), (unsigned long long)d);
    EXPECT_GT(d, total / f.planes / 2) << "plane " << pl;
  }
  auto cs = p.a->connection_stats(p.ca);
  ASSERT_TRUE(cs.ok());
  printf("[fabric] %s\n", cs->ToString().c_str());
}

TEST(FabricTest, LinkDownRetiresPathsFastAndLinkUpRestoresThem) {
  REQUIRE_FABRIC(f);
  ASSERT_GE(f.planes, 2);
  constexpr uint16_t kPaths = 16;
  const int kDownPlane = 1;
  const uint16_t on_plane = kPaths / f.planes;
  Pair p = Connect(f, kPaths, 9000);
  ASSERT_TRUE(p.a && p.b);
  Streamer s(p, 32 << 20);
  std::atomic<bool> stop{false}, ok{true};
  std::atomic<int> rounds{0};
  std::thread writer([&] {
    for (int r = 0; !stop.load(); ++r) {
      if (!s.Round(r)) {
        ok = false;
        return;
      }
      rounds = r + 1;
    }
  });
  while (rounds.load() < 2 && ok.load()) usleep(1000);
  ASSERT_TRUE(ok.load());
  const uint64_t retired0 = p.a->connection_stats(p.ca)->paths_retired;
  // Take the far end of plane 1 down: packets on it vanish silently.
  const std::string dev = f.dev[1][kDownPlane];
  Sh(absl::StrCat("ip -n ", f.ns[1], " link set ", dev, " down"));
  const Time t_down = Endpoint::Now();
  Time t_retired = 0;
  while (Endpoint::Now() - t_down < 5 * kSecond) {
    auto cs = p.a->connection_stats(p.ca);
    if (cs->paths_retired - retired0 >= on_plane) {
      t_retired = Endpoint::Now();
      break;
    }
    usleep(200);
  }
  ASSERT_NE(t_retired, 0) << "paths not retired within 5 s";
  const double ms = (t_retired - t_down) / 1e9;
  printf("[fabric] link %s down -> %u paths retired in %.2f ms\n", dev.c_str(),
         on_plane, ms);
  EXPECT_LT(ms, 250.0);
  for (PathId path = kDownPlane; path < kPaths; path += f.planes)
    EXPECT_GE(p.a->path_stats(p.ca, path)->retired, 1u) << path;
  for (PathId path = 0; path < kPaths; path += f.planes)
    EXPECT_EQ(p.a->path_stats(p.ca, path)->retired, 0u) << path;
  // The transfer continues on the other plane.
  const int r_down = rounds.load();
  while (rounds.load() < r_down + 3 && ok.load()) usleep(1000);
  ASSERT_TRUE(ok.load());
  std::vector<uint64_t> tx_down(kPaths);
  for (PathId path = 0; path < kPaths; ++path)
    tx_down[path] = p.a->path_stats(p.ca, path)->tx_packets;
  // Link back: probes return the paths to service.
  Sh(absl::StrCat("ip -n ", f.ns[1], " link set ", dev, " up"));
  const Time t_up = Endpoint::Now();
  bool restored = false;
  while (Endpoint::Now() - t_up < 10 * kSecond) {
    int good = 0;
    for (PathId path = kDownPlane; path < kPaths; path += f.planes) {
      auto ps = p.a->path_stats(p.ca, path);
      good += ps->restored >= 1 && ps->state == 0;  // kGood
    }
    if (good == on_plane) {
      restored = true;
      break;
    }
    usleep(1000);
  }
  const double up_ms = (Endpoint::Now() - t_up) / 1e9;
  ASSERT_TRUE(restored) << "paths not restored within 10 s of link up";
  printf("[fabric] link %s up -> paths restored by probes in %.1f ms\n",
         dev.c_str(), up_ms);
  const int r_up = rounds.load();
  while (rounds.load() < r_up + 3 && ok.load()) usleep(1000);
  stop = true;
  writer.join();
  ASSERT_TRUE(ok.load());
  // Restored paths carry data again.
  for (PathId path = kDownPlane; path < kPaths; path += f.planes)
    EXPECT_GT(p.a->path_stats(p.ca, path)->tx_packets, tx_down[path] + 10)
        << path;
  auto cs = p.a->connection_stats(p.ca);
  printf("[fabric] %s\n", cs->ToString().c_str());
}

}  // namespace
}  // namespace prism
