// A fake NCCL-plugin peer for tests: its own prism::Endpoint on the udp
// data path and a raw TCP side channel, speaking the plugin's wire format
// (transport/nccl/wire.h) so that a test can act as a well-behaved or a
// misbehaving peer of the plugin: WRITE crafted CTS frames into the plugin's
// CTS ring (the peer as receiver), crafted WRITE-with-immediates into a
// posted receive (the peer as sender), or floods of either. Used by
// nccl_fake_peer_test (the plugin loaded as NCCL does) and nccl_gpu_test (the
// plugin's core linked in, with a fake GPU runtime).
#ifndef PRISM_TESTS_NCCL_FAKE_PEER_H_
#define PRISM_TESTS_NCCL_FAKE_PEER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "prism/endpoint.h"
#include "tests/nccl/mini_nccl.h"
#include "transport/nccl/wire.h"

namespace prism::nccl_test {

// Wire layouts: the plugin's own (transport/nccl/wire.h).
using Hello = nccl::HelloMsg;
using nccl::CtsEntry;
using nccl::CtsLen;
using nccl::kHelloMagic;
using nccl::kProtoVersion;
inline constexpr size_t kHandlePortOffset = offsetof(nccl::WireHandle, port);
inline constexpr size_t kHandleNonceOffset = offsetof(nccl::WireHandle, nonce);
inline constexpr size_t kHandleModeOffset = offsetof(nccl::WireHandle, mode);
inline constexpr size_t kHandleAddrOffset = offsetof(nccl::WireHandle, addr);
// A CTS frame {seq, n, (addr, size, rkey, tag) x n} with room for more
// entries than the protocol allows (crafted frames with n = 9).
struct Cts {
  uint32_t seq;
  uint32_t n;
  CtsEntry e[nccl::kMaxRecvs + 2];
};
static_assert(offsetof(Cts, e) == offsetof(nccl::CtsBody, e));
inline constexpr uint64_t kSlotBytes = nccl::kCtsSlotBytes;

using FakeClock = std::chrono::steady_clock;

// The fake peer's endpoint, its side-channel socket and the Prism
// connection to the plugin's comm.
struct FakePeer {
  std::unique_ptr<Endpoint> ep;
  ConnId conn = kInvalidConn;
  int fd = -1;
  // The peer's own CTS ring (peer as sender) and a buffer the plugin
  // writes into (peer as receiver), both remote-writable.
  std::vector<uint8_t> ring = std::vector<uint8_t>(32 * kSlotBytes);
  MemoryRegion ring_mr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(1 << 16);
  MemoryRegion buf_mr;
  // Where crafted frames and payloads are WRITTEN from.
  std::vector<uint8_t> src = std::vector<uint8_t>(1 << 16, 0xab);
  MemoryRegion src_mr;
  // The plugin's CTS ring (peer as receiver: from its Hello).
  uint64_t cts_addr = 0;
  uint32_t cts_rkey = 0;

  void Setup() {
    EndpointOptions o;
    o.datapath = "udp";
    auto e = Endpoint::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    ep = std::move(*e);
    auto c = ep->CreateConnection();
    ASSERT_TRUE(c.ok()) << c.status();
    conn = *c;
    auto r = ep->RegisterMemory(ring.data(), ring.size(),
                                kAccessLocal | kAccessRemoteWrite);
    ASSERT_TRUE(r.ok());
    ring_mr = *r;
    r = ep->RegisterMemory(buf.data(), buf.size(),
                           kAccessLocal | kAccessRemoteWrite);
    ASSERT_TRUE(r.ok());
    buf_mr = *r;
    r = ep->RegisterMemory(src.data(), src.size(), kAccessLocal);
    ASSERT_TRUE(r.ok());
    src_mr = *r;
  }
  ~FakePeer() {
    // The endpoint first: its loop thread may still read src or write the
    // buffers.
    ep.reset();
    if (fd >= 0) close(fd);
  }
  void FillBlob(Hello* h) {
    auto blob = ep->LocalInfo(conn);
    ASSERT_TRUE(blob.ok());
    h->info[0] = blob->size;
    memcpy(h->info + 1, blob->bytes, blob->size);
  }
  void ConnectTo(const Hello& h) {
    auto blob = ConnectionBlob::FromBytes(absl::string_view(
        reinterpret_cast<const char*>(h.info + 1), h.info[0]));
    ASSERT_TRUE(blob.ok());
    ASSERT_TRUE(ep->Connect(conn, *blob).ok());
  }
  // The WRITE-with-immediate of src[0, len) to (addr, rkey).
  WriteRequest SrcWrite(uint64_t addr, uint32_t rkey, uint64_t len,
                        uint32_t imm, uint64_t wr_id) const {
    WriteRequest wr;
    wr.wr_id = wr_id;
    wr.local_addr = src.data();
    wr.length = len;
    wr.lkey = src_mr.lkey;
    wr.remote_addr = addr;
    wr.rkey = rkey;
    wr.has_immediate = true;
    wr.immediate = imm;
    return wr;
  }
  // WRITE-with-immediate of src[0, len) to (addr, rkey).
  void Write(uint64_t addr, uint32_t rkey, uint64_t len, uint32_t imm) {
    ASSERT_TRUE(ep->PostWrite(conn, SrcWrite(addr, rkey, len, imm, 1)).ok());
  }
  // `count` WRITE-with-immediates of src[0, len) to (addr, rkey), posted as
  // fast as the endpoint takes them; true once all completed.
  bool Flood(uint64_t addr, uint32_t rkey, uint64_t len, uint32_t imm,
             int count) {
    WriteRequest wr = SrcWrite(addr, rkey, len, imm, 0);
    int posted = 0, done = 0;
    const auto start = FakeClock::now();
    while (done < count &&
           FakeClock::now() - start < std::chrono::seconds(20)) {
      if (posted < count) {
        wr.wr_id = static_cast<uint64_t>(posted);
        const absl::Status st = ep->PostWrite(conn, wr);
        if (st.ok()) ++posted;
        if (!st.ok() && !absl::IsResourceExhausted(st)) return false;
      }
      Completion c;
      while (ep->PollCompletions(&c, 1) == 1) {
        if (c.type == CompletionType::kWrite) ++done;
      }
    }
    return done == count;
  }
  // Waits for the next WRITE-with-immediate from the plugin.
  bool WaitImmediate(Completion* out) {
    const auto start = FakeClock::now();
    while (FakeClock::now() - start < std::chrono::seconds(10)) {
      Completion c;
      if (ep->PollCompletions(&c, 1) == 1 &&
          c.type == CompletionType::kRecvImmediate) {
        *out = c;
        return true;
      }
    }
    return false;
  }
};

// A TCP listener on 127.0.0.1 standing in for the plugin's: `handle` (a
// listen handle of the plugin's, IPv4) is pointed at it.
struct FakeListener {
  int fd = -1;
  ~FakeListener() {
    if (fd >= 0) close(fd);
  }
  void Open(char* handle) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(listen(fd, 8), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen), 0);
    memcpy(handle + kHandlePortOffset, &a.sin_port, sizeof(a.sin_port));
    memcpy(handle + kHandleAddrOffset, &a.sin_addr, 4);
  }
};

// The peer as the receiver: the plugin connects (`connect`, called until it
// gives a comm or an error) to a fake listener (`handle`, a listen handle of
// the plugin's, pointed at the fake's port), which answers its Hello with an
// Ack carrying the fake endpoint's blob.
inline void ConnectPluginTo(FakePeer* peer, char* handle,
                            const std::function<int(char*, void**)>& connect,
                            void** send) {
  FakeListener l;
  ASSERT_NO_FATAL_FAILURE(l.Open(handle));
  bool ok = false;
  std::thread fake([&] {
    peer->fd = accept(l.fd, nullptr, nullptr);
    Hello h;
    if (peer->fd < 0 || !ReadAll(peer->fd, &h, sizeof(h))) return;
    peer->cts_addr = h.cts_addr;
    peer->cts_rkey = h.cts_rkey;
    auto blob = ConnectionBlob::FromBytes(absl::string_view(
        reinterpret_cast<const char*>(h.info + 1), h.info[0]));
    if (!blob.ok() || !peer->ep->Connect(peer->conn, *blob).ok()) return;
    Hello ack = h;
    ack.status = 0;
    memset(ack.info, 0, sizeof(ack.info));
    auto mine = peer->ep->LocalInfo(peer->conn);
    if (!mine.ok()) return;
    ack.info[0] = mine->size;
    memcpy(ack.info + 1, mine->bytes, mine->size);
    ok = WriteAll(peer->fd, &ack, sizeof(ack));
  });
  const auto start = FakeClock::now();
  int r = kPrismNcclSuccess;
  while (r == kPrismNcclSuccess && *send == nullptr &&
         FakeClock::now() - start < std::chrono::seconds(10)) {
    r = connect(handle, send);
  }
  fake.join();
  ASSERT_TRUE(ok);
  ASSERT_EQ(r, kPrismNcclSuccess);
  ASSERT_NE(*send, nullptr);
}

}  // namespace prism::nccl_test

#endif  // PRISM_TESTS_NCCL_FAKE_PEER_H_
