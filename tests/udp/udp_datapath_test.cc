// Unit tests of the UDP/IPv6 datapath on [::1]: batching, per-path source
// ports, ECN marking and CE parsing, checksums, burst cap, bad input.
#include "transport/backends/udp/udp_datapath.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/base/random.h"

namespace prism::udp {
namespace {

// Reference checksum: byte-by-byte 16-bit big-endian words.
uint16_t RefChecksum(const Ip6& src, const Ip6& dst,
                     const std::vector<uint8_t>& udp) {
  std::vector<uint8_t> b(src.begin(), src.end());
  b.insert(b.end(), dst.begin(), dst.end());
  uint32_t len = udp.size();
  b.push_back(len >> 24);
  b.push_back(len >> 16);
  b.push_back(len >> 8);
  b.push_back(len);
  b.push_back(0);
  b.push_back(0);
  b.push_back(0);
  b.push_back(17);
  b.insert(b.end(), udp.begin(), udp.end());
  if (b.size() & 1) b.push_back(0);
  uint32_t sum = 0;
  for (size_t i = 0; i < b.size(); i += 2) sum += (b[i] << 8) | b[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  uint16_t c = ~sum & 0xffff;
  if (c == 0) c = 0xffff;
  return htons(c);  // in memory (network) order
}

TEST(UdpChecksum, MatchesReferenceForOddSplits) {
  Rng rng(7);
  Ip6 src = *ParseIp6("fd00::1"), dst = *ParseIp6("fcbb:bbbb:2::");
  for (int t = 0; t < 300; ++t) {
    std::vector<uint8_t> udp(8 + rng.Uniform(3000));
    for (auto& x : udp) x = rng.Next32();
    udp[6] = udp[7] = 0;
    const size_t data = udp.size() - 8;
    size_t a = data ? rng.Uniform(data + 1) : 0;
    size_t b = a + (data - a ? rng.Uniform(data - a + 1) : 0);
    iovec iov[3] = {{udp.data() + 8, a},
                    {udp.data() + 8 + a, b - a},
                    {udp.data() + 8 + b, data - b}};
    EXPECT_EQ(Udp6Checksum(src, dst, udp.data(), iov, 3),
              RefChecksum(src, dst, udp))
        << "len " << udp.size() << " split " << a << "," << b;
  }
}

TEST(UdpParse, AddressesAndRoutes) {
  EXPECT_TRUE(ParseIp6("[::1]").ok());
  EXPECT_FALSE(ParseIp6("10.0.0.1").ok());
  EXPECT_FALSE(ParseIp6("nonsense").ok());
  // A NUL ends inet_pton's C string: what follows it must not be ignored.
  EXPECT_FALSE(ParseIp6(absl::string_view("fd00::1\0junk", 12)).ok());
  EXPECT_FALSE(ParseRoute(absl::string_view("usid:fd00::1\0", 13)).ok());
  auto r = ParseRoute("usid:fcbb:bbbb:a1:a2:a4:2::");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, RouteKind::kUsid);
  r = ParseRoute("srh:fc00::a1,fc00::a2,fc00::a4");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->segments.size(), 3u);
  EXPECT_FALSE(ParseRoute("srh:").ok());
  EXPECT_FALSE(ParseRoute("mpls:1").ok());
  EXPECT_FALSE(ParseRoute("srh:1::,2::,3::,4::,5::,6::,7::,8::,9::").ok());
}

TEST(UdpOptionsTest, RejectsBadConfigs) {
  UdpOptions o;
  o.planes.clear();
  EXPECT_FALSE(UdpDatapath::Create(o).ok());
  o = UdpOptions{};
  o.planes[0].addr = "not-an-address";
  EXPECT_FALSE(UdpDatapath::Create(o).ok());
  o = UdpOptions{};
  o.sockets_per_plane = 0;
  EXPECT_FALSE(UdpDatapath::Create(o).ok());
  o = UdpOptions{};
  o.link_mtu = 100;
  EXPECT_FALSE(UdpDatapath::Create(o).ok());
  o = UdpOptions{};
  o.tx_mode = TxMode::kSockets;
  auto dp = UdpDatapath::Create(o);
  ASSERT_TRUE(dp.ok());
  EXPECT_FALSE((*dp)->AddPeer(PeerConfig{}).ok());
  PeerConfig pc;
  pc.planes.push_back({*ParseIp6("::1"), 1});
  pc.routes.push_back(*ParseRoute("srh:fc00::a1"));
  EXPECT_FALSE((*dp)->AddPeer(pc).ok()) << "SRH needs raw mode";
  EXPECT_FALSE((*dp)->RemovePeer(9).ok());
}

std::unique_ptr<UdpDatapath> Make(TxMode mode, uint16_t socks = 1,
                                  size_t planes = 1, uint32_t mtu = 9000) {
  UdpOptions o;
  o.tx_mode = mode;
  o.sockets_per_plane = socks;
  o.link_mtu = mtu;
  o.planes.assign(planes, LocalPlane{});
  auto dp = UdpDatapath::Create(o);
  EXPECT_TRUE(dp.ok()) << dp.status();
  return dp.ok() ? std::move(*dp) : nullptr;
}

uint32_t Connect(UdpDatapath& from, const UdpDatapath& to) {
  PeerConfig pc;
  for (const auto& p : to.local()) pc.planes.push_back(p);
  auto id = from.AddPeer(pc);
  EXPECT_TRUE(id.ok());
  return *id;
}

// Receives until `want` packets arrived or ~2 s passed, `burst` at a time.
std::vector<std::vector<uint8_t>> Drain(UdpDatapath& dp, size_t want,
                                        std::vector<bool>* ce = nullptr,
                                        size_t burst = 64) {
  std::vector<std::vector<uint8_t>> out;
  RxPacket rx[64];
  burst = std::min<size_t>(burst, 64);
  for (int spins = 0; out.size() < want && spins < 2000; ++spins) {
    size_t n = dp.RxBurst(0, rx, burst);
    for (size_t i = 0; i < n; ++i) {
      out.emplace_back(rx[i].data, rx[i].data + rx[i].len);
      if (ce) ce->push_back(rx[i].ecn_ce);
    }
    if (n == 0) {
      std::vector<pollfd> p;
      for (int fd : dp.rx_fds()) p.push_back({fd, POLLIN, 0});
      poll(p.data(), p.size(), 1);
    }
  }
  return out;
}

bool HaveRaw() {
  int fd = socket(AF_INET6, SOCK_RAW, IPPROTO_RAW);
  if (fd < 0) return false;
  close(fd);
  return true;
}

void RoundTrip(TxMode mode) {
  auto a = Make(mode, 4, 2);
  auto b = Make(mode, 4, 2);
  ASSERT_TRUE(a && b);
  const uint32_t peer = Connect(*a, *b);
  Rng rng(3);
  std::vector<uint8_t> payload(64 * 2000);
  for (auto& x : payload) x = rng.Next32();
  std::vector<TxPacket> tx(64);
  for (size_t i = 0; i < tx.size(); ++i) {
    tx[i].header_len = 16 + (i % 7);  // odd lengths too
    for (size_t k = 0; k < tx[i].header_len; ++k) tx[i].header[k] = i + k;
    tx[i].payload = payload.data() + i * 2000;
    tx[i].payload_len = (i * 37) % 1999;  // includes 0 and odd sizes
    tx[i].peer = peer;
    tx[i].path = i;
  }
  ASSERT_EQ(a->TxBurst(0, tx.data(), tx.size()), tx.size());
  auto got = Drain(*b, tx.size());
  ASSERT_EQ(got.size(), tx.size());
  std::multiset<std::vector<uint8_t>> want, have(got.begin(), got.end());
  for (const auto& t : tx) {
    std::vector<uint8_t> v(t.header, t.header + t.header_len);
    v.insert(v.end(), t.payload, t.payload + t.payload_len);
    want.insert(v);
  }
  EXPECT_EQ(want, have);
  const UdpStats s = a->stats();
  EXPECT_EQ(s.tx_packets, 64u);
  // Batched: 64 packets over (planes x sockets) = 8 sockets -> <= 8 calls.
  EXPECT_LE(s.tx_syscalls, 8u) << s.ToString();
  EXPECT_EQ(b->stats().rx_packets, 64u);
  EXPECT_LT(b->stats().rx_syscalls, 64u);
}

TEST(UdpDatapathTest, SocketsModeRoundTripBatched) {
  RoundTrip(TxMode::kSockets);
}

TEST(UdpDatapathTest, GsoMergesEqualSizedRunsByteExact) {
  UdpOptions o;
  o.tx_mode = TxMode::kSockets;
  o.sockets_per_plane = 1;
  o.link_mtu = 9000;
  o.gso = true;
  auto a = std::move(*UdpDatapath::Create(o));
  o.gso = false;
  auto b = std::move(*UdpDatapath::Create(o));
  const uint32_t peer = Connect(*a, *b);
  Rng rng(5);
  std::vector<uint8_t> payload(64 * 1400);
  for (auto& x : payload) x = rng.Next32();
  std::vector<TxPacket> tx(40);
  for (size_t i = 0; i < tx.size(); ++i) {
    tx[i].header_len = 64;
    for (size_t k = 0; k < 64; ++k) tx[i].header[k] = i * 3 + k;
    tx[i].payload = payload.data() + i * 1400;
    // Runs of equal sizes, short ones, a control packet in between.
    tx[i].payload_len = (i == 17 || i == 39) ? 333 : 1400;
    tx[i].tclass = i == 25 ? TrafficClass::kControl : TrafficClass::kData;
    tx[i].peer = peer;
  }
  ASSERT_EQ(a->TxBurst(0, tx.data(), tx.size()), tx.size());
  auto got = Drain(*b, tx.size());
  ASSERT_EQ(got.size(), tx.size());
  std::multiset<std::vector<uint8_t>> want, have(got.begin(), got.end());
  for (const auto& t : tx) {
    std::vector<uint8_t> v(t.header, t.header + t.header_len);
    v.insert(v.end(), t.payload, t.payload + t.payload_len);
    want.insert(v);
  }
  EXPECT_EQ(want, have);
  const UdpStats s = a->stats();
  EXPECT_EQ(s.tx_packets, tx.size());
  EXPECT_GE(s.tx_gso_batches, 3u) << s.ToString();
  EXPECT_EQ(s.tx_syscalls, 1u) << s.ToString();
}

TEST(UdpDatapathTest, RawModeRoundTripWithOwnChecksums) {
  if (!HaveRaw()) GTEST_SKIP() << "needs CAP_NET_RAW (run as root)";
  RoundTrip(TxMode::kRaw);
}

// A plain UDP socket on [::1] that records source ports and traffic class.
struct Sniffer {
  int fd = -1;
  uint16_t port = 0;
  Sniffer() {
    fd = socket(AF_INET6, SOCK_DGRAM, 0);
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_addr = in6addr_loopback;
    bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    socklen_t sl = sizeof(sa);
    getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &sl);
    port = ntohs(sa.sin6_port);
    int one = 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~Sniffer() { close(fd); }
  // Returns false on timeout.
  bool Recv(uint16_t* sport, int* tclass, std::vector<uint8_t>* data) {
    uint8_t buf[9000];
    alignas(cmsghdr) uint8_t ctl[64];
    sockaddr_in6 from{};
    iovec iov{buf, sizeof(buf)};
    msghdr mh{};
    mh.msg_name = &from;
    mh.msg_namelen = sizeof(from);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl;
    mh.msg_controllen = sizeof(ctl);
    ssize_t r = recvmsg(fd, &mh, 0);
    if (r < 0) return false;
    *sport = ntohs(from.sin6_port);
    *tclass = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
      if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS)
        memcpy(tclass, CMSG_DATA(c), sizeof(int));
    if (data) data->assign(buf, buf + r);
    return true;
  }
};

void SourcePortsPerPath(TxMode mode, size_t expect_distinct) {
  auto a = Make(mode, 4, 1);
  ASSERT_TRUE(a);
  Sniffer sn;
  PeerConfig pc;
  pc.planes.push_back({*ParseIp6("::1"), sn.port});
  const uint32_t peer = *a->AddPeer(pc);
  std::vector<TxPacket> tx(16);
  for (size_t i = 0; i < tx.size(); ++i) {
    tx[i].header_len = 2;
    tx[i].header[0] = i;
    tx[i].header[1] = i % 3 == 0;  // control marker
    tx[i].peer = peer;
    tx[i].path = i;
    tx[i].tclass = i % 3 == 0 ? TrafficClass::kControl : TrafficClass::kData;
  }
  ASSERT_EQ(a->TxBurst(0, tx.data(), tx.size()), tx.size());
  std::set<uint16_t> ports;
  for (size_t k = 0; k < tx.size(); ++k) {
    uint16_t sport;
    int tclass;
    std::vector<uint8_t> d;
    ASSERT_TRUE(sn.Recv(&sport, &tclass, &d));
    ASSERT_EQ(d.size(), 2u);
    const PathId path = d[0];
    EXPECT_EQ(sport, a->SourcePort(peer, path)) << "path " << path;
    ports.insert(sport);
    EXPECT_EQ(tclass & 3, 2) << "ECT(0) expected";
    EXPECT_EQ(tclass >> 2, d[1] ? 46 : 0) << "DSCP per traffic class";
  }
  EXPECT_EQ(ports.size(), expect_distinct);
}

TEST(UdpDatapathTest, SocketsModeSourcePortPerPathAndEct) {
  SourcePortsPerPath(TxMode::kSockets, 4);
}

TEST(UdpDatapathTest, RawModeSourcePortPerPathAndEct) {
  if (!HaveRaw()) GTEST_SKIP() << "needs CAP_NET_RAW (run as root)";
  SourcePortsPerPath(TxMode::kRaw, 16);
}

void SendTclass(uint16_t port, int tclass, const char* msg) {
  int fd = socket(AF_INET6, SOCK_DGRAM, 0);
  setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tclass, sizeof(tclass));
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_addr = in6addr_loopback;
  sa.sin6_port = htons(port);
  sendto(fd, msg, strlen(msg), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  close(fd);
}

TEST(UdpDatapathTest, EcnCeParsedFromTrafficClass) {
  auto b = Make(TxMode::kSockets);
  ASSERT_TRUE(b);
  const uint16_t port = b->local()[0].port;
  SendTclass(port, 0x3, "ce");            // CE
  SendTclass(port, 0x2, "ect0");          // ECT(0)
  SendTclass(port, 0xb8 | 0x3, "ef-ce");  // EF + CE
  SendTclass(port, 0x0, "not-ect");
  std::vector<bool> ce;
  auto got = Drain(*b, 4, &ce);
  ASSERT_EQ(got.size(), 4u);
  std::map<std::string, bool> by;
  for (size_t i = 0; i < got.size(); ++i)
    by[std::string(got[i].begin(), got[i].end())] = ce[i];
  EXPECT_TRUE(by["ce"]);
  EXPECT_FALSE(by["ect0"]);
  EXPECT_TRUE(by["ef-ce"]);
  EXPECT_FALSE(by["not-ect"]);
  EXPECT_EQ(b->stats().rx_ecn_ce, 2u);
}

TEST(UdpDatapathTest, BurstCapIsBackPressureAndBadPacketsAreCounted) {
  auto a = Make(TxMode::kSockets, 2);
  auto b = Make(TxMode::kSockets);
  ASSERT_TRUE(a && b);
  const uint32_t peer = Connect(*a, *b);
  std::vector<uint8_t> big(a->mtu() + 1, 7);
  std::vector<TxPacket> tx(UdpDatapath::kMaxTxBurst + 10);
  for (size_t i = 0; i < tx.size(); ++i) {
    tx[i].header_len = 4;
    tx[i].peer = peer;
    tx[i].path = i;
  }
  tx[1].peer = 77;  // unknown peer: consumed, counted
  tx[2].payload = big.data();
  tx[2].payload_len = big.size();  // too big: consumed, counted
  // Only kMaxTxBurst are taken per call; the caller offers the rest again.
  EXPECT_EQ(a->TxBurst(0, tx.data(), tx.size()), UdpDatapath::kMaxTxBurst);
  EXPECT_EQ(a->TxBurst(0, tx.data() + UdpDatapath::kMaxTxBurst, 10), 10u);
  const UdpStats s = a->stats();
  EXPECT_EQ(s.tx_drop_unknown_peer, 1u);
  EXPECT_EQ(s.tx_drop_too_big, 1u);
  EXPECT_EQ(s.tx_packets, tx.size() - 2);
  EXPECT_EQ(Drain(*b, tx.size() - 2).size(), tx.size() - 2);
}

TEST(UdpDatapathTest, OversizedDatagramIsTruncatedAndDropped) {
  auto b = Make(TxMode::kSockets, 1, 1, 1500);
  ASSERT_TRUE(b);
  std::string huge(4000, 'x');
  SendTclass(b->local()[0].port, 0, huge.c_str());
  SendTclass(b->local()[0].port, 0, "small");
  auto got = Drain(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(std::string(got[0].begin(), got[0].end()), "small");
  EXPECT_EQ(b->stats().rx_truncated, 1u);
}

// Kernel drops at a full receive socket are counted (SO_RXQ_OVFL): every
// datagram sent is either received or counted as dropped.
TEST(UdpDatapathTest, KernelReceiveBufferDropsAreCounted) {
  auto a = Make(TxMode::kSockets);
  UdpOptions o;
  o.tx_mode = TxMode::kSockets;
  o.sockets_per_plane = 1;
  o.link_mtu = 9000;
  o.gro = false;
  o.planes.assign(1, LocalPlane{});
  o.socket_buffer_bytes = 4096;  // a few datagrams fit, the rest drop
  auto bs = UdpDatapath::Create(o);
  ASSERT_TRUE(a && bs.ok()) << bs.status();
  auto b = std::move(*bs);
  const uint32_t peer = Connect(*a, *b);
  std::vector<uint8_t> payload(1000, 5);
  auto send = [&](size_t n) {
    std::vector<TxPacket> tx(n);
    for (auto& t : tx) {
      t.header_len = 16;
      t.payload = payload.data();
      t.payload_len = payload.size();
      t.peer = peer;
    }
    size_t sent = 0;
    while (sent < n) sent += a->TxBurst(0, tx.data() + sent, n - sent);
  };
  // Drains until 50 ms pass with nothing new.
  auto drain = [&] {
    size_t got = 0;
    RxPacket rx[64];
    for (int idle = 0; idle < 50;) {
      const size_t n = b->RxBurst(0, rx, 64);
      got += n;
      if (n == 0) {
        ++idle;
        pollfd p{b->rx_fds()[0], POLLIN, 0};
        poll(&p, 1, 1);
      } else {
        idle = 0;
      }
    }
    return got;
  };
  send(200);
  size_t got = drain();
  EXPECT_LT(got, 200u);
  // The count rides on the next datagram the socket takes.
  send(1);
  got += drain();
  const UdpStats s = b->stats();
  EXPECT_GT(s.rx_kernel_drops, 0u) << s.ToString();
  EXPECT_EQ(got + s.rx_kernel_drops, 201u) << s.ToString();
  EXPECT_EQ(s.rx_packets, got);
}

TEST(UdpDatapathTest, UnreachablePeerDropsOnlyThatPacket) {
  auto a = Make(TxMode::kSockets, 1);
  auto b = Make(TxMode::kSockets);
  ASSERT_TRUE(a && b);
  const uint32_t good = Connect(*a, *b);
  PeerConfig pc;
  // Destination port 0: sendmsg fails with EINVAL, always.
  pc.planes.push_back({*ParseIp6("::1"), 0});
  const uint32_t bad = *a->AddPeer(pc);
  TxPacket tx[3];
  for (auto& t : tx) t.header_len = 8;
  tx[0].peer = good;
  tx[1].peer = bad;
  tx[2].peer = good;
  EXPECT_EQ(a->TxBurst(0, tx, 3), 3u);
  EXPECT_EQ(a->stats().tx_errors, 1u);
  EXPECT_EQ(Drain(*b, 2).size(), 2u);
}

// --- GRO: super-packets split into engine packets ------------------------

struct GroPair {
  std::unique_ptr<UdpDatapath> a, b;  // a sends with GSO, b receives
  uint32_t peer = 0;
};

GroPair MakeGroPair(bool gro, uint32_t rx_buffer_bytes = 0) {
  GroPair g;
  UdpOptions o;
  o.tx_mode = TxMode::kSockets;
  o.sockets_per_plane = 1;
  o.link_mtu = 9000;
  o.gso = true;
  o.gro = false;
  g.a = std::move(*UdpDatapath::Create(o));
  o.gso = false;
  o.gro = gro;
  o.rx_buffer_bytes = rx_buffer_bytes;
  g.b = std::move(*UdpDatapath::Create(o));
  g.peer = Connect(*g.a, *g.b);
  return g;
}

// Packets with distinct contents; sizes[i] = header (64) + payload bytes.
std::vector<TxPacket> SizedPackets(const std::vector<uint32_t>& sizes,
                                   uint32_t peer, std::vector<uint8_t>* store,
                                   uint32_t seed) {
  Rng rng(seed);
  size_t total = 0;
  for (uint32_t sz : sizes) total += sz;
  store->resize(total);
  for (auto& x : *store) x = rng.Next32();
  std::vector<TxPacket> tx(sizes.size());
  size_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    tx[i].header_len = 64;
    for (size_t k = 0; k < 64; ++k) tx[i].header[k] = (*store)[off + k];
    tx[i].payload = store->data() + off + 64;
    tx[i].payload_len = sizes[i] - 64;
    tx[i].peer = peer;
    off += sizes[i];
  }
  return tx;
}

std::vector<std::vector<uint8_t>> Bytes(const std::vector<TxPacket>& tx) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& t : tx) {
    std::vector<uint8_t> v(t.header, t.header + t.header_len);
    v.insert(v.end(), t.payload, t.payload + t.payload_len);
    out.push_back(v);
  }
  return out;
}

TEST(UdpGroTest, SuperPacketsSplitInOrderWithMixedSizesAndShortTails) {
  GroPair g = MakeGroPair(true);
  if (!g.b->gro_enabled()) GTEST_SKIP() << "kernel refuses UDP_GRO";
  // GSO runs of one size each, the last of a run shorter (a message's
  // tail), then a run of another size: one super-packet per run.
  std::vector<uint32_t> sizes;
  for (int i = 0; i < 9; ++i) sizes.push_back(1464);
  sizes.push_back(400);  // short tail of the 1464 run
  for (int i = 0; i < 6; ++i) sizes.push_back(1000);
  for (int i = 0; i < 5; ++i) sizes.push_back(2100);
  sizes.push_back(2099);  // tail one byte short
  sizes.push_back(77);    // a lone small packet
  std::vector<uint8_t> store;
  auto tx = SizedPackets(sizes, g.peer, &store, 11);
  ASSERT_EQ(g.a->TxBurst(0, tx.data(), tx.size()), tx.size());
  EXPECT_GE(g.a->stats().tx_gso_batches, 3u);
  auto got = Drain(*g.b, tx.size());
  // One socket, one flow: order is kept, so compare in order.
  EXPECT_EQ(got, Bytes(tx));
  const UdpStats s = g.b->stats();
  EXPECT_EQ(s.rx_packets, tx.size());
  EXPECT_GE(s.rx_gro_batches, 3u) << s.ToString();
  EXPECT_LE(s.rx_syscalls, 8u) << "super-packets: few receives";
  EXPECT_EQ(s.rx_truncated, 0u);
}

TEST(UdpGroTest, SegmentsBeyondTheCallersArrayStayPending) {
  GroPair g = MakeGroPair(true);
  if (!g.b->gro_enabled()) GTEST_SKIP() << "kernel refuses UDP_GRO";
  // Three bursts of 40 packets (several super-packets each) received three
  // packets at a time: segments left over by one RxBurst come out first in
  // the next, and nothing received later overwrites them.
  std::vector<std::vector<uint8_t>> want;
  std::vector<std::vector<uint8_t>> stores(3);
  for (int round = 0; round < 3; ++round) {
    std::vector<uint32_t> sizes(40, 1200 + 100 * round);
    sizes[19] = 300;
    auto tx = SizedPackets(sizes, g.peer, &stores[round], 20 + round);
    ASSERT_EQ(g.a->TxBurst(0, tx.data(), tx.size()), tx.size());
    for (auto& v : Bytes(tx)) want.push_back(v);
  }
  auto got = Drain(*g.b, want.size(), nullptr, 3);
  EXPECT_EQ(got, want);
  EXPECT_GE(g.b->stats().rx_gro_batches, 3u) << g.b->stats().ToString();
  // Every view of one call stays intact until the next call.
  std::vector<uint32_t> sizes(30, 900);
  auto tx = SizedPackets(sizes, g.peer, &stores[0], 99);
  ASSERT_EQ(g.a->TxBurst(0, tx.data(), tx.size()), tx.size());
  auto bytes = Bytes(tx);
  RxPacket rx[7];
  size_t seen = 0;
  for (int spins = 0; seen < tx.size() && spins < 2000; ++spins) {
    const size_t n = g.b->RxBurst(0, rx, 7);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::vector<uint8_t>(rx[i].data, rx[i].data + rx[i].len),
                bytes[seen + i])
          << "packet " << seen + i;
    }
    seen += n;
    if (n == 0) usleep(500);
  }
  EXPECT_EQ(seen, tx.size());
}

TEST(UdpGroTest, TruncatedSuperPacketKeepsItsWholeSegments) {
  // A receive buffer of 5000 bytes: a super-packet of 8 x 1000 is cut by
  // the kernel (MSG_TRUNC); the first five whole segments are handed out,
  // the cut rest counts once as rx_truncated.
  GroPair g = MakeGroPair(true, 5000);
  if (!g.b->gro_enabled()) GTEST_SKIP() << "kernel refuses UDP_GRO";
  std::vector<uint8_t> store;
  auto tx = SizedPackets(std::vector<uint32_t>(8, 1000), g.peer, &store, 5);
  ASSERT_EQ(g.a->TxBurst(0, tx.data(), tx.size()), tx.size());
  ASSERT_EQ(g.a->stats().tx_gso_batches, 1u);
  std::vector<uint8_t> store2;
  auto tail = SizedPackets({333}, g.peer, &store2, 6);  // then a plain one
  ASSERT_EQ(g.a->TxBurst(0, tail.data(), 1), 1u);
  auto got = Drain(*g.b, 6);
  auto want = Bytes(tx);
  want.resize(5);
  want.push_back(Bytes(tail)[0]);
  EXPECT_EQ(got, want);
  EXPECT_EQ(g.b->stats().rx_truncated, 1u);
}

TEST(UdpGroTest, DisabledGroReceivesOneDatagramPerPacket) {
  GroPair g = MakeGroPair(false);
  EXPECT_FALSE(g.b->gro_enabled());
  std::vector<uint32_t> sizes(20, 1400);
  sizes.push_back(100);
  std::vector<uint8_t> store;
  auto tx = SizedPackets(sizes, g.peer, &store, 8);
  ASSERT_EQ(g.a->TxBurst(0, tx.data(), tx.size()), tx.size());
  EXPECT_GE(g.a->stats().tx_gso_batches, 1u);
  // The kernel segments the GSO send for a socket without UDP_GRO.
  auto got = Drain(*g.b, tx.size());
  EXPECT_EQ(got, Bytes(tx));
  EXPECT_EQ(g.b->stats().rx_gro_batches, 0u);
  EXPECT_EQ(g.b->stats().rx_packets, tx.size());
}

TEST(UdpGroTest, GroReceiverTakesPlainPacketsAndDropsOversizedOnes) {
  // With GRO the buffers are 64 KiB, but a datagram longer than mtu() + 64
  // is still dropped and counted, as without GRO.
  UdpOptions o;
  o.tx_mode = TxMode::kSockets;
  o.link_mtu = 1500;
  auto b = std::move(*UdpDatapath::Create(o));
  std::string huge(4000, 'x');
  SendTclass(b->local()[0].port, 0, huge.c_str());
  SendTclass(b->local()[0].port, 0, "small");
  auto got = Drain(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(std::string(got[0].begin(), got[0].end()), "small");
  EXPECT_EQ(b->stats().rx_truncated, 1u);
}

TEST(UdpMtuTest, LinkMtuZeroFollowsTheInterface) {
  auto lo = DetectLinkMtu(*ParseIp6("::1"));
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_GE(*lo, 1280u);
  EXPECT_FALSE(DetectLinkMtu(*ParseIp6("fd99:1:2:3::77")).ok());
  UdpOptions o;
  o.tx_mode = TxMode::kSockets;
  o.link_mtu = 0;
  auto dp = UdpDatapath::Create(o);
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ((*dp)->mtu(), std::min<size_t>(*lo - 48, 65507));
  // An address no interface holds ("::", the wildcard): 1500.
  o.planes[0].addr = "::";
  dp = UdpDatapath::Create(o);
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_EQ((*dp)->mtu(), 1500u - 48);
}

}  // namespace
}  // namespace prism::udp
