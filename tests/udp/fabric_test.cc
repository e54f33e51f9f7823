// Kernel-fabric tests: two Prism endpoints in two network namespaces joined
// by one veth pair per plane (tests/udp/netns_fabric.sh builds it and
// exports its description). Each endpoint's sockets are created inside its
// namespace (setns on the creating thread), so its traffic crosses the
// veths. Skipped with a message when not run through the script.
//
//   FabricTest.MultiGiBMixedSizesByteExactAndSprayed
//   FabricTest.LinkDownRetiresPathsFastAndLinkUpRestoresThem
//   FabricTest.ReceiveInPlaceByteExactAcrossTheVeths
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
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

bool GetFabric(Fabric* f, bool srv6 = false) {
  const char* a = getenv("PRISM_NS_A");
  const char* b = getenv("PRISM_NS_B");
  const char* p = getenv("PRISM_PLANES");
  if (!a || !b || !p) return false;
  if (getenv("PRISM_SRV6") && !srv6) return false;  // the other fabric
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

Pair Connect(const Fabric& f, uint16_t paths, uint32_t mtu,
             bool in_place = false) {
  Pair p;
  EndpointOptions o;
  o.link_mtu = mtu;
  if (in_place) {
    o.tx_mode = "sockets";
    o.gso = true;  // the receiver's kernel splits the super-packets
    o.rx_in_place = true;
  }
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
  // A quarter of a fair share, not half: the selector moves packets off
  // paths that run slow, and on a loaded host one veth queue can (once,
  // 2026-12-04 at load ~8: min 6212 against half a share 7736); a starved
  // path carries next to nothing.
  EXPECT_GT(minp, total / kPaths / 4) << "a path was starved";
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

TEST(FabricTest, ReceiveInPlaceByteExactAcrossTheVeths) {
  // Receive in place across the veths (GSO sender, every plane): 512 MiB
  // of mixed sizes byte-exact; nearly every data packet is read straight
  // into the region, never more than the engine accepted, nothing dropped.
  REQUIRE_FABRIC(f);
  constexpr uint16_t kPaths = 16;
  Pair p = Connect(f, kPaths, 9000, /*in_place=*/true);
  ASSERT_TRUE(p.a && p.b);
  Streamer s(p, 64 << 20);
  for (int r = 0; r < 8; ++r) ASSERT_TRUE(s.Round(r));
  EXPECT_EQ(s.bytes(), uint64_t{8} * (64 << 20));
  const DatapathStats ds = p.b->datapath_stats();
  const auto cs = p.b->connection_stats(p.cb);
  ASSERT_TRUE(cs.ok());
  const size_t at = ds.detail.find("rx_in_place=");
  ASSERT_NE(at, std::string::npos) << ds.detail;
  const uint64_t in_place = std::stoull(ds.detail.substr(at + 12));
  printf("[fabric] in place: %llu of %llu accepted data packets; %s\n",
         (unsigned long long)in_place, (unsigned long long)cs->rx_data_packets,
         ds.detail.c_str());
  EXPECT_NE(ds.detail.find("in_place=1 "), std::string::npos);
  EXPECT_GE(in_place, cs->rx_data_packets * 9 / 10);
  EXPECT_LE(in_place, cs->rx_data_packets);
  EXPECT_EQ(ds.drops, 0u) << ds.detail;
}

struct PathSnap {
  std::vector<uint64_t> tx, acked, retired, restored;
  std::vector<uint8_t> state;
};

PathSnap Snap(Pair& p, uint16_t paths) {
  PathSnap s;
  for (PathId path = 0; path < paths; ++path) {
    auto ps = p.a->path_stats(p.ca, path);
    s.tx.push_back(ps->tx_packets);
    s.acked.push_back(ps->acked_packets);
    s.retired.push_back(ps->retired);
    s.restored.push_back(ps->restored);
    s.state.push_back(ps->state);
  }
  return s;
}

// Streams from a to b while the paths for which `affected` is true are cut
// (`down`) and restored (`up`). Checks: every affected path is retired
// (ASSUMED_BAD) within milliseconds; while down, nothing is acknowledged on
// the affected paths, the others carry the transfer, which completes
// byte-exact; after `up`, probes return the affected paths to service and
// they carry acknowledged data again. (Spurious retirements from a starved
// CPU are tolerated: the checks use per-path deltas, not totals.)
void Failover(Pair& p, uint16_t kPaths, uint64_t region, const char* tag,
              const std::function<bool(PathId)>& affected,
              const std::function<void()>& down,
              const std::function<void()>& up) {
  Streamer st(p, region);
  std::atomic<bool> stop{false}, ok{true};
  std::atomic<int> rounds{0};
  std::thread writer([&] {
    for (int r = 0; !stop.load(); ++r) {
      if (!st.Round(r)) {
        ok = false;
        return;
      }
      rounds = r + 1;
    }
  });
  struct Joiner {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Joiner() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } joiner{stop, writer};
  auto wait_rounds = [&](int n) {
    const int r0 = rounds.load();
    while (rounds.load() < r0 + n && ok.load()) usleep(1000);
  };
  wait_rounds(2);
  ASSERT_TRUE(ok.load());
  size_t n_aff = 0;
  for (PathId path = 0; path < kPaths; ++path) n_aff += affected(path);
  const PathSnap before = Snap(p, kPaths);
  down();
  const Time t_down = Endpoint::Now();
  Time t_retired = 0;
  while (Endpoint::Now() - t_down < 5 * kSecond) {
    const PathSnap now = Snap(p, kPaths);
    size_t done = 0;
    for (PathId path = 0; path < kPaths; ++path)
      done += affected(path) && now.retired[path] > before.retired[path];
    if (done == n_aff) {
      t_retired = Endpoint::Now();
      break;
    }
    usleep(200);
  }
  ASSERT_NE(t_retired, 0) << "affected paths not all retired within 5 s";
  const double ms = (t_retired - t_down) / 1e9;
  printf("[%s] link down -> %zu affected paths retired in %.2f ms\n", tag,
         n_aff, ms);
  EXPECT_LT(ms, 250.0);
  usleep(20000);  // in-flight acks of packets sent before the cut drain
  const PathSnap mid0 = Snap(p, kPaths);
  wait_rounds(3);
  ASSERT_TRUE(ok.load()) << "transfer did not survive the link loss";
  const PathSnap mid1 = Snap(p, kPaths);
  for (PathId path = 0; path < kPaths; ++path) {
    if (affected(path)) {
      EXPECT_EQ(mid1.acked[path], mid0.acked[path])
          << "path " << path << " is cut, yet acknowledged";
    } else {
      EXPECT_GT(mid1.acked[path], mid0.acked[path])
          << "path " << path << " should carry the transfer";
    }
  }
  up();
  const Time t_up = Endpoint::Now();
  bool restored = false;
  while (!restored && Endpoint::Now() - t_up < 10 * kSecond) {
    const PathSnap now = Snap(p, kPaths);
    size_t back = 0;
    for (PathId path = 0; path < kPaths; ++path)
      back += affected(path) && now.restored[path] > mid1.restored[path] &&
              now.acked[path] > mid1.acked[path];
    restored = back == n_aff;
    if (!restored) usleep(1000);
  }
  EXPECT_TRUE(restored) << "paths not back in service within 10 s of link up";
  printf(
      "[%s] link up -> paths restored by probes, carrying data, in %.1f "
      "ms\n",
      tag, (Endpoint::Now() - t_up) / 1e9);
  wait_rounds(2);
  stop = true;
  writer.join();
  EXPECT_TRUE(ok.load());
  printf("[%s] %s\n", tag, p.a->connection_stats(p.ca)->ToString().c_str());
}

TEST(FabricTest, LinkDownRetiresPathsFastAndLinkUpRestoresThem) {
  REQUIRE_FABRIC(f);
  ASSERT_GE(f.planes, 2);
  constexpr uint16_t kPaths = 16;
  const int kDownPlane = 1;
  Pair p = Connect(f, kPaths, 9000);
  ASSERT_TRUE(p.a && p.b);
  // The far end of plane 1's link goes down: its packets vanish silently.
  const std::string cmd =
      absl::StrCat("ip -n ", f.ns[1], " link set ", f.dev[1][kDownPlane]);
  Failover(
      p, kPaths, 32 << 20, "netns",
      [&](PathId path) { return path % f.planes == kDownPlane; },
      [&] { Sh(cmd + " down"); }, [&] { Sh(cmd + " up"); });
}

// --- SRv6 fabric (tests/udp/srv6_fabric.sh over tests/fabric/fabric.sh) ---

struct Srv6 {
  Fabric f;
  std::vector<std::string> usid[2], srh[2];
  // Per route (h0 -> h1): namespace, device and id of its T0 -> T1 link.
  std::vector<std::string> link_ns, link_dev, link_id;
  std::string ctl;
};

bool GetSrv6(Srv6* s) {
  if (!getenv("PRISM_SRV6") || !GetFabric(&s->f, true)) return false;
  auto split = [](const char* v) {
    return std::vector<std::string>(absl::StrSplit(v ? v : "", ';'));
  };
  s->usid[0] = split(getenv("PRISM_ROUTES_USID_A"));
  s->usid[1] = split(getenv("PRISM_ROUTES_USID_B"));
  s->srh[0] = split(getenv("PRISM_ROUTES_SRH_A"));
  s->srh[1] = split(getenv("PRISM_ROUTES_SRH_B"));
  for (const auto& l : split(getenv("PRISM_PATH_LINKS"))) {
    std::vector<std::string> v = absl::StrSplit(l, ':');
    if (v.size() != 3) return false;
    s->link_ns.push_back(v[0]);
    s->link_dev.push_back(v[1]);
    s->link_id.push_back(v[2]);
  }
  s->ctl = getenv("PRISM_FABRIC_CTL") ? getenv("PRISM_FABRIC_CTL") : "";
  return !s->usid[0].empty() && s->link_dev.size() == s->usid[0].size();
}

#define REQUIRE_SRV6(s)                                                     \
  Srv6 s;                                                                   \
  if (!GetSrv6(&s))                                                         \
  GTEST_SKIP() << "SRv6 fabric test: run through tests/udp/srv6_fabric.sh " \
                  "as root (ctest -L fabric does)"

Pair ConnectSrv6(const Srv6& s, bool usid, uint16_t paths) {
  Pair p;
  EndpointOptions o;
  o.link_mtu = 1500;
  o.tx_mode = "raw";
  o.connection.num_paths = paths;
  o.connection.num_planes = s.f.planes;
  o.connection.base_rtt = 100 * kMicrosecond;
  o.connection.rto_min = 3 * kMillisecond;
  o.connection.probe_interval = 2 * kMillisecond;
  o.connection.link_rate_bps = 10'000'000'000ull;
  for (int side = 0; side < 2; ++side) {
    o.local_addrs = s.f.addr[side];
    o.ifnames = s.f.dev[side];
    o.routes = usid ? s.usid[side] : s.srh[side];
    o.seed = 1 + side;
    (side == 0 ? p.a : p.b) = CreateIn(s.f.ns[side], o);
  }
  if (!p.a || !p.b) return p;
  p.ca = *p.a->CreateConnection();
  p.cb = *p.b->CreateConnection();
  EXPECT_TRUE(p.a->Connect(p.ca, *p.b->LocalInfo(p.cb)).ok());
  EXPECT_TRUE(p.b->Connect(p.cb, *p.a->LocalInfo(p.ca)).ok());
  return p;
}

void Srv6Stream(const Srv6& s, bool usid) {
  const size_t nroutes = s.usid[0].size();
  const uint16_t kPaths = 4 * nroutes;
  Pair p = ConnectSrv6(s, usid, kPaths);
  ASSERT_TRUE(p.a && p.b);
  std::vector<uint64_t> link0(nroutes);
  for (size_t r = 0; r < nroutes; ++r)
    link0[r] = DevCounter(s.link_ns[r], s.link_dev[r], "tx_packets");
  Streamer st(p, 32 << 20);
  const Time t0 = Endpoint::Now();
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(st.Round(r));
  const double secs = (Endpoint::Now() - t0) / 1e12;
  printf(
      "[srv6 %s] %u paths over %zu fabric routes: %.0f MiB byte-exact in "
      "%.2f s = %.2f Gb/s\n",
      usid ? "uSID" : "SRH", kPaths, nroutes, st.bytes() / 1048576.0, secs,
      st.bytes() * 8 / secs / 1e9);
  uint64_t total = 0;
  for (PathId path = 0; path < kPaths; ++path) {
    auto ps = p.a->path_stats(p.ca, path);
    ASSERT_TRUE(ps.ok());
    EXPECT_GT(ps->tx_packets, 0u) << "path " << path;
    total += ps->tx_packets;
  }
  // Every fabric route's spine link carried about its share: the kernel
  // forwarded our carriers / SRHs along the encoded path.
  for (size_t r = 0; r < nroutes; ++r) {
    const uint64_t d =
        DevCounter(s.link_ns[r], s.link_dev[r], "tx_packets") - link0[r];
    printf("[srv6 %s] route %zu (%s) T0->T1 link %s: %llu packets\n",
           usid ? "uSID" : "SRH", r,
           (usid ? s.usid[0][r] : s.srh[0][r]).c_str(), s.link_dev[r].c_str(),
           (unsigned long long)d);
    EXPECT_GT(d, total / nroutes / 2) << "route " << r;
  }
  DatapathStats ds = p.a->datapath_stats();
  EXPECT_EQ(ds.tx_errors, 0u) << ds.detail;
  printf("[srv6 %s] %s\n", usid ? "uSID" : "SRH",
         p.a->connection_stats(p.ca)->ToString().c_str());
}

TEST(Srv6FabricTest, UsidCarriersByteExactOverEveryPath) {
  REQUIRE_SRV6(s);
  Srv6Stream(s, true);
}

TEST(Srv6FabricTest, SrhByteExactOverEveryPath) {
  REQUIRE_SRV6(s);
  Srv6Stream(s, false);
}

TEST(Srv6FabricTest, SpineLinkDownRetiresOnlyItsPathsAndProbesRestore) {
  REQUIRE_SRV6(s);
  ASSERT_FALSE(s.ctl.empty());
  const size_t nroutes = s.usid[0].size();
  const uint16_t kPaths = 4 * nroutes;
  const size_t kRoute = 0;  // the T0->T1 link of this route goes down
  Pair p = ConnectSrv6(s, true, kPaths);
  ASSERT_TRUE(p.a && p.b);
  Failover(
      p, kPaths, 8 << 20, "srv6 uSID",
      [&](PathId path) { return path % nroutes == kRoute; },
      [&] { Sh(s.ctl + " down " + s.link_id[kRoute]); },
      [&] { Sh(s.ctl + " up " + s.link_id[kRoute]); });
}

}  // namespace
}  // namespace prism
