// Bad input over the wire: crafted malformed, forged-key, unknown-connection
// and out-of-range packets are sent from plain UDP sockets (and, as root,
// from a raw IPv6 socket with a spoofed source) at a running endpoint. The
// endpoint stays up, writes nothing (canary intact), counts every drop in
// exactly the counter for its reason, and still serves a legitimate WRITE.
// Run with the receive buffer path and with receive in place (payloads read
// straight into the region after the engine checked the peeked header);
// in place, duplicates of a received PSN (one batch or later) and packets
// whose message fields disagree must leave the region untouched too.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "prism/endpoint.h"
#include "transport/backends/udp/udp_datapath.h"
#include "transport/base/random.h"
#include "transport/runtime/conn_blob.h"
#include "transport/wire/packet.h"

namespace prism {
namespace {

uint64_t TotalDrops(const EngineStats& s) {
  return s.rx_drop_malformed + s.rx_drop_bad_magic + s.rx_drop_bad_version +
         s.rx_drop_bad_checksum + s.rx_drop_payload_corrupt +
         s.rx_drop_unknown_conn + s.rx_drop_bad_key + s.rx_drop_bad_range +
         s.rx_drop_out_of_window + s.rx_drop_placement;
}

class Attacker {
 public:
  explicit Attacker(uint16_t port) {
    fd_ = socket(AF_INET6, SOCK_DGRAM, 0);
    dst_.sin6_family = AF_INET6;
    dst_.sin6_addr = in6addr_loopback;
    dst_.sin6_port = htons(port);
  }
  ~Attacker() { close(fd_); }
  void Send(const std::vector<uint8_t>& b) {
    ASSERT_EQ(sendto(fd_, b.data(), b.size(), 0,
                     reinterpret_cast<sockaddr*>(&dst_), sizeof(dst_)),
              static_cast<ssize_t>(b.size()));
    ++sent_;
  }
  int sent() const { return sent_; }

 private:
  int fd_;
  sockaddr_in6 dst_{};
  int sent_ = 0;
};

std::vector<uint8_t> Data(const wire::DataHeader& h, size_t payload_bytes,
                          uint8_t fill = 0xAB) {
  std::vector<uint8_t> b(wire::kDataHeaderSize + payload_bytes, fill);
  EXPECT_EQ(wire::EncodeData(h, b.data(), wire::kDataHeaderSize),
            wire::kDataHeaderSize);
  return b;
}

// Sends a UDP datagram from a raw socket with any source address and a
// checksum that is right (good_csum) or deliberately wrong.
bool RawSend(const udp::Ip6& src, uint16_t dport,
             const std::vector<uint8_t>& payload, bool good_csum) {
  int fd = socket(AF_INET6, SOCK_RAW, IPPROTO_RAW);
  if (fd < 0) return false;
  std::vector<uint8_t> pkt(48 + payload.size());
  uint8_t* h = pkt.data();
  h[0] = 0x60;
  const uint16_t plen = htons(8 + payload.size());
  memcpy(h + 4, &plen, 2);
  h[6] = 17;
  h[7] = 64;
  memcpy(h + 8, src.data(), 16);
  const udp::Ip6 dst = *udp::ParseIp6("::1");
  memcpy(h + 24, dst.data(), 16);
  uint8_t* u = h + 40;
  const uint16_t sport = htons(4444), dp = htons(dport);
  memcpy(u, &sport, 2);
  memcpy(u + 2, &dp, 2);
  memcpy(u + 4, &plen, 2);
  memcpy(u + 8, payload.data(), payload.size());
  iovec iov{u + 8, payload.size()};
  uint16_t c = udp::Udp6Checksum(src, dst, u, &iov, 1);
  if (!good_csum) c ^= 0x1234;
  memcpy(u + 6, &c, 2);
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_addr = in6addr_loopback;
  const bool ok =
      sendto(fd, pkt.data(), pkt.size(), 0, reinterpret_cast<sockaddr*>(&sa),
             sizeof(sa)) == static_cast<ssize_t>(pkt.size());
  close(fd);
  return ok;
}

class BadInputTest : public ::testing::TestWithParam<bool> {};

TEST_P(BadInputTest, CraftedPacketsAreCountedNeverWritten) {
  EndpointOptions o;
  o.rx_in_place = GetParam();
  o.tx_mode = "sockets";
  o.link_mtu = 9000;
  o.connection.num_paths = 4;
  o.connection.rto_min = 2 * kMillisecond;
  auto server = *Endpoint::Create(o);
  auto client = *Endpoint::Create(o);
  const ConnId cs = *server->CreateConnection();
  const ConnId cc = *client->CreateConnection();
  const ConnectionBlob sblob = *server->LocalInfo(cs);
  const ConnectionBlob cblob = *client->LocalInfo(cc);
  ASSERT_TRUE(server->Connect(cs, cblob).ok());
  ASSERT_TRUE(client->Connect(cc, sblob).ok());
  const auto sinfo = *runtime::DecodeBlob(sblob);
  const auto cinfo = *runtime::DecodeBlob(cblob);
  const uint16_t port = sinfo.planes[0].port;

  // Registered region in the middle of a canary-filled buffer.
  constexpr size_t kRegion = 64 << 10;
  std::vector<uint8_t> buf(3 * kRegion, 0xEE);
  auto mr = *server->RegisterMemory(buf.data() + kRegion, kRegion,
                                    kAccessRemoteWrite);
  wire::DataHeader good;
  good.dst_conn = sinfo.info.conn_id;
  good.psn = cinfo.info.initial_psn;
  good.msn = 0;
  good.msg_offset = 0;
  good.msg_len = 100;
  good.remote_addr = mr.addr;
  good.rkey = mr.rkey;
  good.payload_len = 100;
  good.flags = wire::kFlagFirstOfMessage | wire::kFlagLastOfMessage;

  const EngineStats before = server->stats();
  Attacker atk(port);
  Rng rng(42);
  int n_malformed = 0, n_magic = 0, n_version = 0, n_csum = 0, n_conn = 0,
      n_key = 0, n_range = 0;
  // Short / empty datagrams.
  for (size_t len : {0, 1, 5, 11}) {
    std::vector<uint8_t> b(len, 0x52);
    if (len >= 2) b[1] = 0x50;
    atk.Send(b);
    ++n_malformed;
  }
  // Random garbage (any decoder verdict, but counted).
  int n_garbage = 0;
  for (int i = 0; i < 50; ++i) {
    std::vector<uint8_t> b(12 + rng.Uniform(300));
    for (auto& x : b) x = rng.Next32();
    atk.Send(b);
    ++n_garbage;
  }
  for (int i = 0; i < 10; ++i) {
    auto b = Data(good, 100);
    b[0] ^= 0xff;  // magic
    atk.Send(b);
    ++n_magic;
    b = Data(good, 100);
    b[2] = 9;  // version
    atk.Send(b);
    ++n_version;
    b = Data(good, 100);
    b[20] ^= 0x01;  // a header field without fixing the CRC
    atk.Send(b);
    ++n_csum;
    b = Data(good, 50);  // declares 100 bytes, carries 50
    atk.Send(b);
    ++n_malformed;
    wire::DataHeader h = good;
    h.dst_conn = good.dst_conn + 1000 + i;  // unknown connection
    atk.Send(Data(h, 100));
    ++n_conn;
    h = good;
    h.rkey = good.rkey ^ (0x5a5a0000u + i);  // forged key
    atk.Send(Data(h, 100));
    ++n_key;
    h = good;
    h.remote_addr = mr.addr + kRegion - 10;  // runs past the region's end
    atk.Send(Data(h, 100));
    ++n_range;
    h = good;
    h.remote_addr = mr.addr - 100;  // before the region
    atk.Send(Data(h, 100));
    ++n_range;
  }
  // From a raw socket, spoofed source: a forged key (counted by the engine)
  // and a datagram with a wrong UDP checksum (dropped by the kernel).
  const bool raw = RawSend(
      *udp::ParseIp6("fd00:dead::1"), port,
      [&] {
        wire::DataHeader h = good;
        h.rkey ^= 0x77;
        return Data(h, 100);
      }(),
      true);
  if (raw) {
    ++n_key;
    ASSERT_TRUE(
        RawSend(*udp::ParseIp6("fd00:dead::1"), port, Data(good, 100), false));
  }
  const int crafted = atk.sent() + (raw ? 1 : 0);
  // Wait until the endpoint has seen them all.
  EngineStats after;
  for (int i = 0; i < 2000; ++i) {
    after = server->stats();
    if (TotalDrops(after) - TotalDrops(before) >= uint64_t(crafted)) break;
    usleep(1000);
  }
  EXPECT_EQ(TotalDrops(after) - TotalDrops(before), uint64_t(crafted))
      << after.ToString();
  // Exact per-reason counts (the garbage lands in magic/malformed/...).
  EXPECT_GE(after.rx_drop_malformed - before.rx_drop_malformed,
            uint64_t(n_malformed));
  EXPECT_GE(after.rx_drop_bad_magic - before.rx_drop_bad_magic,
            uint64_t(n_magic));
  EXPECT_EQ(after.rx_drop_bad_version - before.rx_drop_bad_version,
            uint64_t(n_version));
  EXPECT_GE(after.rx_drop_bad_checksum - before.rx_drop_bad_checksum,
            uint64_t(n_csum));
  EXPECT_EQ(after.rx_drop_unknown_conn - before.rx_drop_unknown_conn,
            uint64_t(n_conn));
  EXPECT_EQ(after.rx_drop_bad_key - before.rx_drop_bad_key, uint64_t(n_key));
  EXPECT_EQ(after.rx_drop_bad_range - before.rx_drop_bad_range,
            uint64_t(n_range));
  EXPECT_EQ(after.rx_drop_malformed + after.rx_drop_bad_magic +
                after.rx_drop_bad_version + after.rx_drop_bad_checksum -
                (before.rx_drop_malformed + before.rx_drop_bad_magic +
                 before.rx_drop_bad_version + before.rx_drop_bad_checksum),
            uint64_t(n_malformed + n_magic + n_version + n_csum + n_garbage));
  // Nothing was written anywhere.
  for (size_t i = 0; i < buf.size(); ++i)
    ASSERT_EQ(buf[i], 0xEE) << "stray write at offset " << i;

  // Still up: a legitimate WRITE lands byte-exact.
  std::vector<uint8_t> src(kRegion);
  for (auto& x : src) x = rng.Next32();
  auto ms = *client->RegisterMemory(src.data(), src.size(), kAccessLocal);
  WriteRequest w;
  w.wr_id = 7;
  w.local_addr = src.data();
  w.length = kRegion;
  w.lkey = ms.lkey;
  w.remote_addr = mr.addr;
  w.rkey = mr.rkey;
  ASSERT_TRUE(client->PostWrite(cc, w).ok());
  Completion c;
  ASSERT_EQ(client->WaitCompletions(&c, 1, 10 * kSecond), 1u);
  EXPECT_EQ(c.status, absl::StatusCode::kOk);
  EXPECT_EQ(memcmp(buf.data() + kRegion, src.data(), kRegion), 0);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + kRegion,
                          [](uint8_t x) { return x == 0xEE; }));
  EXPECT_TRUE(std::all_of(buf.begin() + 2 * kRegion, buf.end(),
                          [](uint8_t x) { return x == 0xEE; }));
  if (GetParam()) {
    EXPECT_NE(server->datapath_stats().detail.find("in_place=1 "),
              std::string::npos);
  }

  // Duplicates. The WRITE above used PSNs [initial, initial + k); forge
  // copies of its first packet with other bytes: suppressed, not written.
  const std::vector<uint8_t> landed(buf.begin() + kRegion,
                                    buf.begin() + 2 * kRegion);
  const uint64_t dups0 = server->stats().rx_duplicates;
  wire::DataHeader d = good;
  d.msg_len = kRegion;
  d.payload_len = 100;
  d.flags = wire::kFlagFirstOfMessage;
  for (int i = 0; i < 8; ++i) atk.Send(Data(d, 100, 0x11));
  // A new PSN (the next message) sent twice back to back with different
  // bytes: the first copy lands, the second (often in the same receive
  // batch) is a duplicate and is not written.
  const uint32_t k = static_cast<uint32_t>(
      (kRegion + client->mtu_payload() - 1) / client->mtu_payload());
  wire::DataHeader n1 = good;
  n1.psn = good.psn + k;
  n1.msn = 1;
  n1.remote_addr = mr.addr + 1000;
  atk.Send(Data(n1, 100, 0x22));
  atk.Send(Data(n1, 100, 0x33));
  // Same message, other PSN, disagreeing length: malformed, not written.
  wire::DataHeader n2 = n1;
  n2.psn = n1.psn + 1;
  n2.msg_len = 200;
  n2.remote_addr = mr.addr + 3000;
  atk.Send(Data(n2, 100, 0x44));
  for (int i = 0; i < 2000; ++i) {
    if (server->stats().rx_duplicates - dups0 >= 9) break;
    usleep(1000);
  }
  const EngineStats fin = server->stats();
  // 9 forged duplicates. A tail-loss probe the client sent while its WRITE's
  // SACK was late (a loaded host) can land after dups0 was read and count
  // as one more: at most one per client retransmission.
  const ConnectionStats cst = *client->connection_stats(cc);
  EXPECT_GE(fin.rx_duplicates - dups0, 9u) << fin.ToString();
  EXPECT_LE(fin.rx_duplicates - dups0, 9u + cst.retransmitted_packets)
      << fin.ToString() << "\nclient " << cst.ToString();
  std::vector<uint8_t> want = landed;
  memset(want.data() + 1000, 0x22, 100);
  for (int i = 0;
       i < 2000 && memcmp(buf.data() + kRegion, want.data(), kRegion) != 0; ++i)
    usleep(1000);
  for (size_t i = 0; i < kRegion; ++i)
    ASSERT_EQ(buf[kRegion + i], want[i]) << "offset " << i;
  EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + kRegion,
                          [](uint8_t x) { return x == 0xEE; }));
  EXPECT_TRUE(std::all_of(buf.begin() + 2 * kRegion, buf.end(),
                          [](uint8_t x) { return x == 0xEE; }));
}

INSTANTIATE_TEST_SUITE_P(Receive, BadInputTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "InPlace" : "Buffered";
                         });

}  // namespace
}  // namespace prism
