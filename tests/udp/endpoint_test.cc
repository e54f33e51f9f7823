// End-to-end tests of prism::Endpoint (runtime + engine + datapath) in one
// process: byte-exact mixed-size streams over UDP on [::1] and over the
// in-process loopback, concurrent submitters, API misuse, shutdown.
#include "prism/endpoint.h"

#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/random.h"

namespace prism {
namespace {

struct Pair {
  std::unique_ptr<Endpoint> a, b;
  ConnId ca = 0, cb = 0;
};

Pair MakePair(const EndpointOptions& o, const ConnectionOptions& co) {
  Pair p;
  auto a = Endpoint::Create(o);
  auto b = Endpoint::Create(o);
  EXPECT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(b.ok()) << b.status();
  if (!a.ok() || !b.ok()) return p;
  p.a = std::move(*a);
  p.b = std::move(*b);
  auto ca = p.a->CreateConnection(co);
  auto cb = p.b->CreateConnection(co);
  EXPECT_TRUE(ca.ok() && cb.ok());
  p.ca = *ca;
  p.cb = *cb;
  auto ia = p.a->LocalInfo(p.ca);
  auto ib = p.b->LocalInfo(p.cb);
  EXPECT_TRUE(ia.ok() && ib.ok());
  EXPECT_LT(ia->size, 64);
  EXPECT_TRUE(p.a->Connect(p.ca, *ib).ok());
  EXPECT_TRUE(p.b->Connect(p.cb, *ia).ok());
  return p;
}

ConnectionOptions Conn(uint16_t paths, uint16_t planes) {
  ConnectionOptions co;
  co.num_paths = paths;
  co.num_planes = planes;
  co.base_rtt = 50 * kMicrosecond;
  co.rto_min = 2 * kMillisecond;
  co.link_rate_bps = 10'000'000'000ull;
  return co;
}

// Writes `total` bytes as messages of mixed sizes from a to b, every byte
// at its own offset, some with immediates; checks every byte and every
// completion.
void Stream(Pair& p, uint64_t total, uint64_t seed) {
  ASSERT_TRUE(p.a && p.b);
  std::vector<uint8_t> src(total), dst(total, 0);
  Rng rng(seed);
  for (auto& x : src) x = rng.Next32();
  auto ms = p.a->RegisterMemory(src.data(), src.size(), kAccessLocal);
  auto md = p.b->RegisterMemory(dst.data(), dst.size(),
                                kAccessLocal | kAccessRemoteWrite);
  ASSERT_TRUE(ms.ok()) << ms.status();
  ASSERT_TRUE(md.ok()) << md.status();
  const uint64_t sizes[] = {1,    7,     100,    1000,   4095,   4096,
                            9001, 65536, 100000, 262144, 1 << 20};
  uint64_t off = 0, wr = 0;
  std::set<uint64_t> outstanding;
  uint64_t immediates = 0;
  Completion c[64];
  bool failed = false;
  auto reap = [&]() -> size_t {
    size_t n = p.a->PollCompletions(c, 64);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(c[i].type, CompletionType::kWrite);
      EXPECT_EQ(c[i].status, absl::StatusCode::kOk) << c[i].wr_id;
      if (outstanding.erase(c[i].wr_id) != 1u) failed = true;
      if (c[i].status != absl::StatusCode::kOk) failed = true;
    }
    return n;
  };
  while (off < total) {
    uint64_t len = std::min(sizes[rng.Uniform(11)], total - off);
    WriteRequest r;
    r.wr_id = ++wr;
    r.local_addr = src.data() + off;
    r.length = len;
    r.lkey = ms->lkey;
    r.remote_addr = md->addr + off;
    r.rkey = md->rkey;
    r.has_immediate = (wr % 5) == 0;
    r.immediate = static_cast<uint32_t>(wr);
    immediates += r.has_immediate;
    while (outstanding.size() >= 64 && !failed) reap();
    ASSERT_FALSE(failed);
    ASSERT_TRUE(p.a->PostWrite(p.ca, r).ok());
    outstanding.insert(wr);
    off += len;
  }
  const Time deadline = Endpoint::Now() + 60 * kSecond;
  while (!outstanding.empty() && Endpoint::Now() < deadline) {
    if (reap() == 0) std::this_thread::yield();
  }
  ASSERT_TRUE(outstanding.empty()) << outstanding.size() << " never completed";
  // Receiver side: immediates in message order.
  uint64_t got_imm = 0;
  uint32_t last_msn = 0;
  while (got_imm < immediates && Endpoint::Now() < deadline) {
    size_t n = p.b->WaitCompletions(c, 64, 100 * kMillisecond);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(c[i].type, CompletionType::kRecvImmediate);
      if (got_imm) {
        EXPECT_GT(c[i].msn, last_msn);
      }
      last_msn = c[i].msn;
      ++got_imm;
    }
  }
  EXPECT_EQ(got_imm, immediates);
  EXPECT_EQ(memcmp(src.data(), dst.data(), total), 0) << "not byte-exact";
}

TEST(EndpointUdp, ByteExactMixedSizesOverLoopbackAddress) {
  EndpointOptions o;
  o.local_addrs = {"::1", "::1"};  // two planes, distinct ports
  o.link_mtu = 9000;
  o.tx_mode = "sockets";
  Pair p = MakePair(o, Conn(16, 2));
  Stream(p, 24 << 20, 1);
  auto cs = p.a->connection_stats(p.ca);
  ASSERT_TRUE(cs.ok());
  EXPECT_GE(cs->bytes_acked, 24u << 20);
  // Spraying: every path carried data.
  for (PathId path = 0; path < 16; ++path) {
    auto ps = p.a->path_stats(p.ca, path);
    ASSERT_TRUE(ps.ok());
    EXPECT_GT(ps->tx_packets, 0u) << "path " << path;
  }
  DatapathStats ds = p.a->datapath_stats();
  EXPECT_GT(ds.tx_packets, 0u);
  EXPECT_EQ(ds.drops, 0u) << ds.detail;
}

TEST(EndpointUdp, GsoAndGroByteExactAtTheInterfaceMtu) {
  // GSO on send, GRO on receive, the payload size following lo's MTU
  // (link_mtu 0): super-packets end to end, every byte in place.
  EndpointOptions o;
  o.local_addrs = {"::1", "::1"};
  o.link_mtu = 0;
  o.tx_mode = "sockets";
  o.gso = true;
  o.sockets_per_plane = 2;
  Pair p = MakePair(o, Conn(16, 2));
  ASSERT_TRUE(p.a && p.b);
  EXPECT_GT(p.a->mtu_payload(), 9000u) << "lo's MTU is large";
  Stream(p, 24 << 20, 3);
  // And at a 9000-byte MTU, where one GSO send carries several packets.
  EndpointOptions o9 = o;
  o9.link_mtu = 9000;
  Pair q = MakePair(o9, Conn(16, 2));
  Stream(q, 24 << 20, 4);
  const DatapathStats sa = q.a->datapath_stats(), sb = q.b->datapath_stats();
  EXPECT_EQ(sa.drops, 0u) << sa.detail;
  EXPECT_EQ(sb.drops, 0u) << sb.detail;
  EXPECT_NE(sa.detail.find("gso=1"), std::string::npos) << sa.detail;
  EXPECT_EQ(sa.detail.find("tx_gso_batches=0 "), std::string::npos)
      << sa.detail;
  if (sb.detail.find("gro=1") != std::string::npos) {
    EXPECT_EQ(sb.detail.find("rx_gro_batches=0"), std::string::npos)
        << sb.detail;
  }
}

TEST(EndpointUdp, GsoWithoutGroByteExact) {
  EndpointOptions o;
  o.link_mtu = 9000;
  o.tx_mode = "sockets";
  o.gso = true;
  o.gro = false;
  Pair p = MakePair(o, Conn(16, 1));
  Stream(p, 16 << 20, 5);
  const DatapathStats sb = p.b->datapath_stats();
  EXPECT_NE(sb.detail.find("gro=0"), std::string::npos) << sb.detail;
  EXPECT_NE(sb.detail.find("rx_gro_batches=0"), std::string::npos) << sb.detail;
}

TEST(EndpointUdp, ReceiveInPlaceByteExact) {
  // Payloads read straight into the region (header peeked, resolved by the
  // engine): byte-exact at lo's MTU and at 9000, two planes, with GSO on the
  // sender; nearly every data packet lands in place, none is dropped.
  for (uint32_t mtu : {0u, 9000u}) {
    EndpointOptions o;
    o.local_addrs = {"::1", "::1"};
    o.link_mtu = mtu;
    o.tx_mode = "sockets";
    o.gso = true;
    o.rx_in_place = true;
    Pair p = MakePair(o, Conn(16, 2));
    ASSERT_TRUE(p.a && p.b);
    Stream(p, 24 << 20, 6 + mtu);
    const DatapathStats sb = p.b->datapath_stats();
    EXPECT_EQ(sb.drops, 0u) << sb.detail;
    EXPECT_NE(sb.detail.find("in_place=1 "), std::string::npos) << sb.detail;
    EXPECT_NE(sb.detail.find("gro=0"), std::string::npos) << sb.detail;
    auto field = [&](const std::string& key) -> uint64_t {
      const size_t at = sb.detail.find(key + "=");
      EXPECT_NE(at, std::string::npos) << key;
      return at == std::string::npos
                 ? 0
                 : std::stoull(sb.detail.substr(at + key.size() + 1));
    };
    const auto cs = p.b->connection_stats(p.cb);
    ASSERT_TRUE(cs.ok());
    // Every accepted data packet that was not a duplicate of one in the
    // same batch landed in place (the rest are control packets).
    EXPECT_GE(field("rx_in_place"), cs->rx_data_packets * 9 / 10) << sb.detail;
    // Nothing was read in place that the engine then refused.
    EXPECT_LE(field("rx_in_place"), cs->rx_data_packets) << sb.detail;
  }
}

TEST(EndpointUdp, RawModeByteExact) {
  EndpointOptions o;
  o.link_mtu = 9000;
  o.tx_mode = "raw";
  auto probe = Endpoint::Create(o);
  if (!probe.ok()) GTEST_SKIP() << "raw mode unavailable: " << probe.status();
  probe->reset();
  Pair p = MakePair(o, Conn(32, 1));
  Stream(p, 16 << 20, 2);
}

TEST(EndpointLoopback, ByteExactMixedSizes) {
  EndpointOptions o;
  o.datapath = "loopback";
  o.link_mtu = 4200;
  Pair p = MakePair(o, Conn(8, 2));
  Stream(p, 8 << 20, 3);
}

TEST(EndpointUdp, ConcurrentSubmittersAndPollers) {
  EndpointOptions o;
  o.link_mtu = 9000;
  o.tx_mode = "sockets";
  Pair p = MakePair(o, Conn(8, 1));
  ASSERT_TRUE(p.a);
  constexpr int kThreads = 4, kPerThread = 200, kLen = 3000;
  std::vector<uint8_t> src(kThreads * kPerThread * kLen), dst(src.size());
  Rng rng(9);
  for (auto& x : src) x = rng.Next32();
  auto ms = *p.a->RegisterMemory(src.data(), src.size(), kAccessLocal);
  auto md = *p.b->RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  std::atomic<int> done{0};
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t) {
    th.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const size_t off = (t * kPerThread + i) * size_t{kLen};
        WriteRequest r;
        r.wr_id = off;
        r.local_addr = src.data() + off;
        r.length = kLen;
        r.lkey = ms.lkey;
        r.remote_addr = md.addr + off;
        r.rkey = md.rkey;
        while (!p.a->PostWrite(p.ca, r).ok()) std::this_thread::yield();
      }
    });
  }
  std::set<uint64_t> seen;
  std::thread poller([&] {
    Completion c[16];
    const Time deadline = Endpoint::Now() + 30 * kSecond;
    while (seen.size() < size_t{kThreads * kPerThread} &&
           Endpoint::Now() < deadline) {
      size_t n = p.a->WaitCompletions(c, 16, 10 * kMillisecond);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(c[i].status, absl::StatusCode::kOk);
        EXPECT_TRUE(seen.insert(c[i].wr_id).second) << "duplicate completion";
      }
    }
    done = 1;
  });
  for (auto& t : th) t.join();
  poller.join();
  EXPECT_EQ(seen.size(), size_t{kThreads * kPerThread});
  EXPECT_EQ(memcmp(src.data(), dst.data(), src.size()), 0);
}

TEST(EndpointApi, MisuseGetsClearErrors) {
  EndpointOptions o;
  o.tx_mode = "sockets";
  EndpointOptions bad = o;
  bad.datapath = "carrier-pigeon";
  EXPECT_FALSE(Endpoint::Create(bad).ok());
  bad = o;
  bad.local_addrs = {"999::zz"};
  EXPECT_FALSE(Endpoint::Create(bad).ok());
  bad = o;
  bad.tx_mode = "fast";
  EXPECT_FALSE(Endpoint::Create(bad).ok());
  bad = o;
  bad.mtu_payload = 60000;  // link_mtu 1500
  EXPECT_FALSE(Endpoint::Create(bad).ok());
  bad = o;
  bad.routes = {"srh:nope"};
  EXPECT_FALSE(Endpoint::Create(bad).ok());

  auto ep = *Endpoint::Create(o);
  EXPECT_FALSE(ep->LocalInfo(12345).ok());
  auto conn = *ep->CreateConnection(Conn(4, 1));
  ConnectionBlob junk;
  junk.size = 20;
  EXPECT_EQ(ep->Connect(conn, junk).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ep->Connect(999, *ep->LocalInfo(conn)).ok());
  WriteRequest r;
  r.length = 10;
  EXPECT_FALSE(ep->PostWrite(0, r).ok());
  EXPECT_FALSE(ep->PostWrite(conn, r).ok()) << "null address";
  uint8_t buf[16];
  r.local_addr = buf;
  r.lkey = 0xbad;
  r.wr_id = 42;
  // Queued fine; the engine rejects the key: an error completion.
  ASSERT_TRUE(ep->PostWrite(conn, r).ok());
  Completion c;
  ASSERT_EQ(ep->WaitCompletions(&c, 1, 2 * kSecond), 1u);
  EXPECT_EQ(c.wr_id, 42u);
  EXPECT_NE(c.status, absl::StatusCode::kOk);
  EXPECT_FALSE(ep->DeregisterMemory(0xbad).ok());

  // A loopback blob is refused by a udp endpoint.
  EndpointOptions lo;
  lo.datapath = "loopback";
  auto lep = *Endpoint::Create(lo);
  auto lconn = *lep->CreateConnection(Conn(4, 1));
  EXPECT_EQ(ep->Connect(conn, *lep->LocalInfo(lconn)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EndpointApi, ShutdownWithWritesInFlightDoesNotHang) {
  EndpointOptions o;
  o.tx_mode = "sockets";
  o.link_mtu = 9000;
  Pair p = MakePair(o, Conn(8, 1));
  ASSERT_TRUE(p.a);
  std::vector<uint8_t> src(8 << 20, 1), dst(8 << 20);
  auto ms = *p.a->RegisterMemory(src.data(), src.size(), kAccessLocal);
  auto md = *p.b->RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  for (int i = 0; i < 8; ++i) {
    WriteRequest r;
    r.wr_id = i;
    r.local_addr = src.data() + (i << 20);
    r.length = 1 << 20;
    r.lkey = ms.lkey;
    r.remote_addr = md.addr + (i << 20);
    r.rkey = md.rkey;
    ASSERT_TRUE(p.a->PostWrite(p.ca, r).ok());
  }
  p.b.reset();  // the receiver vanishes
  p.a.reset();  // joins its loop thread with writes outstanding
  SUCCEED();
}

}  // namespace
}  // namespace prism
