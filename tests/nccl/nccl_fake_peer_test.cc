// The plugin against a misbehaving peer that speaks Prism: the test is the
// peer itself (its own prism::Endpoint on ::1 and a raw TCP side channel),
// loads libnccl-net-prism.so as NCCL does and WRITEs crafted clear-to-send
// frames into the plugin's CTS ring (the peer as receiver) or crafted
// WRITE-with-immediates into a posted receive (the peer as sender). Every
// one must fail the comm with an error from isend/test -- never a crash, a
// hang or a write of the plugin's outside the posted buffer. Udp data path
// only (skipped with PRISM_DATAPATH set to anything else).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "prism/endpoint.h"
#include "tests/nccl/mini_nccl.h"
#include "transport/nccl/wire.h"

namespace prism::nccl_test {
namespace {

constexpr int kOk = kPrismNcclSuccess;
using Clock = std::chrono::steady_clock;

// Wire layouts: the plugin's own (transport/nccl/wire.h).
using Hello = nccl::HelloMsg;
using nccl::CtsEntry;
using nccl::CtsLen;
using nccl::kHelloMagic;
using nccl::kProtoVersion;
constexpr size_t kHandlePortOffset = offsetof(nccl::WireHandle, port);
constexpr size_t kHandleNonceOffset = offsetof(nccl::WireHandle, nonce);
constexpr size_t kHandleModeOffset = offsetof(nccl::WireHandle, mode);
constexpr size_t kHandleAddrOffset = offsetof(nccl::WireHandle, addr);
// A CTS frame {seq, n, (addr, size, rkey, tag) x n} with room for more
// entries than the protocol allows (crafted frames with n = 9).
struct Cts {
  uint32_t seq;
  uint32_t n;
  CtsEntry e[nccl::kMaxRecvs + 2];
};
static_assert(offsetof(Cts, e) == offsetof(nccl::CtsBody, e));
constexpr uint64_t kSlotBytes = nccl::kCtsSlotBytes;

Net g_net;
void* g_ctx = nullptr;
const PrismNcclNetV11* N() { return g_net.v11(); }

bool UdpPath() {
  const char* d = std::getenv("PRISM_DATAPATH");
  return d == nullptr || *d == '\0' || std::string(d) == "udp";
}

void Init() {
  if (g_ctx != nullptr) return;
  std::string err;
  ASSERT_TRUE(LoadNet(std::string("prism,") + PRISM_NCCL_PLUGIN, &g_net, &err))
      << err;
  ASSERT_EQ(g_net.version, 11);
  ASSERT_EQ(N()->init(&g_ctx, 0x77, nullptr, TestLogger, nullptr), kOk);
}

// Warnings logged since log line `from` that contain `text`.
int WarningsSince(size_t from, const char* text) {
  const std::vector<LogLine> log = LogSnapshot();
  int n = 0;
  for (size_t i = from; i < log.size(); ++i) {
    if (log[i].level == kPrismNcclLogWarn &&
        log[i].text.find(text) != std::string::npos) {
      ++n;
    }
  }
  return n;
}

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
  // WRITE-with-immediate of src[0, len) to (addr, rkey).
  void Write(uint64_t addr, uint32_t rkey, uint64_t len, uint32_t imm) {
    WriteRequest wr;
    wr.wr_id = 1;
    wr.local_addr = src.data();
    wr.length = len;
    wr.lkey = src_mr.lkey;
    wr.remote_addr = addr;
    wr.rkey = rkey;
    wr.has_immediate = true;
    wr.immediate = imm;
    ASSERT_TRUE(ep->PostWrite(conn, wr).ok());
  }
  // `count` WRITE-with-immediates of src[0, len) to (addr, rkey), posted as
  // fast as the endpoint takes them; true once all completed.
  bool Flood(uint64_t addr, uint32_t rkey, uint64_t len, uint32_t imm,
             int count) {
    WriteRequest wr;
    wr.local_addr = src.data();
    wr.length = len;
    wr.lkey = src_mr.lkey;
    wr.remote_addr = addr;
    wr.rkey = rkey;
    wr.has_immediate = true;
    wr.immediate = imm;
    int posted = 0, done = 0;
    const auto start = Clock::now();
    while (done < count && Clock::now() - start < std::chrono::seconds(20)) {
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
    const auto start = Clock::now();
    while (Clock::now() - start < std::chrono::seconds(10)) {
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

// The peer as the receiver: the plugin connects to a fake listener (a
// handle of the plugin's with the fake's port), which answers its Hello
// with an Ack carrying the fake endpoint's blob.
void ConnectPluginTo(FakePeer* peer, void** send) {
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
  ASSERT_EQ(N()->close_listen(lc), kOk);
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(a);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(lfd, 1), 0);
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  memcpy(handle + kHandlePortOffset, &a.sin_port, sizeof(a.sin_port));
  memcpy(handle + kHandleAddrOffset, &a.sin_addr, 4);
  bool ok = false;
  std::thread fake([&] {
    peer->fd = accept(lfd, nullptr, nullptr);
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
  PrismNcclDeviceHandle* dh = nullptr;
  const auto start = Clock::now();
  int r = kOk;
  while (r == kOk && *send == nullptr &&
         Clock::now() - start < std::chrono::seconds(10)) {
    r = N()->connect(g_ctx, 0, handle, send, &dh);
  }
  fake.join();
  close(lfd);
  ASSERT_TRUE(ok);
  ASSERT_EQ(r, kOk);
  ASSERT_NE(*send, nullptr);
}

// isend until it returns a request or an error; the result.
int IsendUntil(void* send, void* data, size_t size, int tag, void* mh,
               void** req) {
  const auto start = Clock::now();
  *req = nullptr;
  while (Clock::now() - start < std::chrono::seconds(10)) {
    const int r = N()->isend(send, data, size, tag, mh, nullptr, req);
    if (r != kOk || *req != nullptr) return r;
  }
  return -1;  // neither: the test fails on it
}

// test() until done or an error; the result (-1: neither within 10 s).
int TestUntil(void* req, int* size) {
  const auto start = Clock::now();
  while (Clock::now() - start < std::chrono::seconds(10)) {
    int done = 0;
    const int r = N()->test(req, &done, size);
    if (r != kOk) return r;
    if (done) return kOk;
  }
  return -1;
}

struct CtsCase {
  const char* what;
  uint32_t seq, n;  // the frame's fields
  size_t len;       // bytes written
  uint32_t imm;     // immediate
  uint64_t offset;  // into the plugin's ring
};

// Crafted CTS frames WRITTEN into the plugin's CTS ring: each fails the send
// comm (isend returns ncclRemoteError); a well-formed one is used.
TEST(NcclFakePeer, CraftedCtsFailsTheSendComm) {
  if (!UdpPath()) GTEST_SKIP() << "udp data path only";
  ASSERT_NO_FATAL_FAILURE(Init());
  const CtsCase cases[] = {
      {"n = 0", 0, 0, CtsLen(0), 0, 0},
      {"n = 9 (above 8)", 0, 9, CtsLen(9), 0, 0},
      {"n far above 8, length of one entry", 0, 1u << 30, CtsLen(1), 0, 0},
      {"length does not match n", 0, 2, CtsLen(1), 0, 0},
      {"longer than any CTS", 0, 1, kSlotBytes, 0, 0},
      {"immediate is not the frame's seq", 0, 1, CtsLen(1), 1, kSlotBytes},
      {"written to another slot", 0, 1, CtsLen(1), 0, kSlotBytes},
      {"not at a slot's start", 0, 1, CtsLen(1), 0, 100},
      {"last slot, past its start", 31, 1, CtsLen(1), 31, 31 * kSlotBytes + 50},
      {"out of order", 5, 1, CtsLen(1), 5, 5 * kSlotBytes},
      {"immediate far past the ring", 1000, 1, CtsLen(1), 1000,
       (1000 % 32) * kSlotBytes},
  };
  std::vector<uint8_t> sbuf(4096, 0x11);
  SetLogEcho(false);
  for (const CtsCase& c : cases) {
    FakePeer peer;
    ASSERT_NO_FATAL_FAILURE(peer.Setup());
    void* send = nullptr;
    ASSERT_NO_FATAL_FAILURE(ConnectPluginTo(&peer, &send));
    void* mh = nullptr;
    ASSERT_EQ(
        N()->reg_mr(send, sbuf.data(), sbuf.size(), kPrismNcclPtrHost, &mh),
        kOk);
    Cts f{};
    f.seq = c.seq;
    f.n = c.n;
    for (auto& e : f.e) {
      e = CtsEntry{reinterpret_cast<uintptr_t>(peer.buf.data()), 4096,
                   peer.buf_mr.rkey, 7};
    }
    ASSERT_LE(c.len, sizeof(f) + 16);
    memcpy(peer.src.data(), &f, std::min(c.len, sizeof(f)));
    const size_t log_from = LogSnapshot().size();
    ASSERT_NO_FATAL_FAILURE(
        peer.Write(peer.cts_addr + c.offset, peer.cts_rkey, c.len, c.imm));
    void* req = nullptr;
    EXPECT_EQ(IsendUntil(send, sbuf.data(), 4096, 7, mh, &req),
              kPrismNcclRemoteError)
        << c.what;
    EXPECT_EQ(req, nullptr) << c.what;
    // A warning although no send was outstanding yet.
    EXPECT_EQ(WarningsSince(log_from, "send comm: "), 1) << c.what;
    EXPECT_EQ(N()->dereg_mr(send, mh), kOk);
    EXPECT_EQ(N()->close_send(send), kOk);
  }
  SetLogEcho(true);

  // A well-formed CTS is used, and one naming memory the peer never
  // registered fails that send (the peer's endpoint refuses the WRITE).
  for (const bool bogus : {false, true}) {
    FakePeer peer;
    ASSERT_NO_FATAL_FAILURE(peer.Setup());
    void* send = nullptr;
    ASSERT_NO_FATAL_FAILURE(ConnectPluginTo(&peer, &send));
    void* mh = nullptr;
    ASSERT_EQ(
        N()->reg_mr(send, sbuf.data(), sbuf.size(), kPrismNcclPtrHost, &mh),
        kOk);
    Cts f{};
    f.seq = 0;
    f.n = 1;
    f.e[0] = CtsEntry{
        bogus ? uint64_t{0x1000} : reinterpret_cast<uintptr_t>(peer.buf.data()),
        bogus ? uint64_t{1} << 40 : 4096, peer.buf_mr.rkey, 7};
    memcpy(peer.src.data(), &f, CtsLen(1));
    ASSERT_NO_FATAL_FAILURE(
        peer.Write(peer.cts_addr, peer.cts_rkey, CtsLen(1), 0));
    void* req = nullptr;
    ASSERT_EQ(IsendUntil(send, sbuf.data(), 4096, 7, mh, &req), kOk);
    ASSERT_NE(req, nullptr);
    int size = -1;
    SetLogEcho(!bogus);
    EXPECT_EQ(TestUntil(req, &size), bogus ? kPrismNcclRemoteError : kOk);
    SetLogEcho(true);
    if (!bogus) {
      Completion cpl;
      ASSERT_TRUE(peer.WaitImmediate(&cpl));
      EXPECT_EQ(cpl.byte_len, 4096u);
      EXPECT_EQ(0, memcmp(peer.buf.data(), sbuf.data(), 4096));
    }
    EXPECT_EQ(N()->dereg_mr(send, mh), kOk);
    EXPECT_EQ(N()->close_send(send), kOk);
  }
}

// A peer that WRITEs with immediates far beyond what it may have
// outstanding (here 600 CTS WRITEs into the ring before the plugin polls)
// overflows the comm's bounded completion inbox: the send comm fails with
// ncclRemoteError and a warning, without a crash or a hang.
TEST(NcclFakePeer, ImmediateFloodFailsTheSendComm) {
  if (!UdpPath()) GTEST_SKIP() << "udp data path only";
  ASSERT_NO_FATAL_FAILURE(Init());
  FakePeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.Setup());
  void* send = nullptr;
  ASSERT_NO_FATAL_FAILURE(ConnectPluginTo(&peer, &send));
  std::vector<uint8_t> sbuf(4096, 0x22);
  void* mh = nullptr;
  ASSERT_EQ(N()->reg_mr(send, sbuf.data(), sbuf.size(), kPrismNcclPtrHost, &mh),
            kOk);
  Cts f{};
  f.seq = 0;
  f.n = 1;
  f.e[0] = CtsEntry{reinterpret_cast<uintptr_t>(peer.buf.data()), 4096,
                    peer.buf_mr.rkey, 7};
  memcpy(peer.src.data(), &f, CtsLen(1));
  ASSERT_TRUE(peer.Flood(peer.cts_addr, peer.cts_rkey, CtsLen(1), 0, 600));
  const size_t log_from = LogSnapshot().size();
  SetLogEcho(false);
  void* req = nullptr;
  EXPECT_EQ(IsendUntil(send, sbuf.data(), 4096, 7, mh, &req),
            kPrismNcclRemoteError);
  SetLogEcho(true);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(WarningsSince(log_from, "inbox overflow"), 1);
  EXPECT_EQ(N()->dereg_mr(send, mh), kOk);
  EXPECT_EQ(N()->close_send(send), kOk);
}

struct DataCase {
  const char* what;
  int64_t addr_delta;  // from the posted buffer
  uint64_t len;
  uint32_t imm;
};

// The peer as the sender: crafted WRITE-with-immediates into a posted
// receive (wrong slot index, sequence, address, or longer than the posted
// size though inside the registration) fail the receive; a good one
// completes.
TEST(NcclFakePeer, CraftedDataWritesFailTheReceive) {
  if (!UdpPath()) GTEST_SKIP() << "udp data path only";
  ASSERT_NO_FATAL_FAILURE(Init());
  const DataCase cases[] = {
      {"slot index 5 of a one-buffer receive", 0, 16, 5},
      {"slot index 7", 0, 16, 7},
      {"wrong sequence", 0, 16, 3u << 3},
      {"sequence far ahead", 0, 16, 0xfffffff8u},
      {"not at the posted address", 64, 16, 0},
      {"longer than the posted size", 0, 8192, 0},
      {"good", 0, 4096, 0},
  };
  for (const DataCase& c : cases) {
    const bool good = std::string(c.what) == "good";
    FakePeer peer;
    ASSERT_NO_FATAL_FAILURE(peer.Setup());
    char handle[kPrismNcclHandleMaxSize];
    void* lc = nullptr;
    ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
    Hello h{};
    h.magic = kHelloMagic;
    h.version = kProtoVersion;
    memcpy(&h.nonce, handle + kHandleNonceOffset, sizeof(h.nonce));
    memcpy(&h.mode, handle + kHandleModeOffset, sizeof(h.mode));
    ASSERT_NO_FATAL_FAILURE(peer.FillBlob(&h));
    h.cts_addr = reinterpret_cast<uintptr_t>(peer.ring.data());
    h.cts_rkey = peer.ring_mr.rkey;
    h.cts_slots = 32;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    memcpy(&a.sin_port, handle + kHandlePortOffset, sizeof(a.sin_port));
    memcpy(&a.sin_addr, handle + kHandleAddrOffset, 4);
    peer.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(connect(peer.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_TRUE(WriteAll(peer.fd, &h, sizeof(h)));
    void* recv = nullptr;
    const auto start = Clock::now();
    while (recv == nullptr && Clock::now() - start < std::chrono::seconds(10)) {
      ASSERT_EQ(N()->accept(lc, &recv, nullptr), kOk);
    }
    ASSERT_NE(recv, nullptr);
    ASSERT_EQ(N()->close_listen(lc), kOk);
    Hello ack;
    ASSERT_TRUE(ReadAll(peer.fd, &ack, sizeof(ack)));
    ASSERT_NO_FATAL_FAILURE(peer.ConnectTo(ack));

    // One 4 KiB receive at the start of a 64 KiB registration (guard
    // bytes after it).
    std::vector<uint8_t> rbuf(1 << 16, 0x5c);
    void* mh = nullptr;
    ASSERT_EQ(
        N()->reg_mr(recv, rbuf.data(), rbuf.size(), kPrismNcclPtrHost, &mh),
        kOk);
    void* data = rbuf.data();
    size_t size = 4096;
    int tag = 7;
    void* req = nullptr;
    ASSERT_EQ(N()->irecv(recv, 1, &data, &size, &tag, &mh, nullptr, &req), kOk);
    ASSERT_NE(req, nullptr);
    Completion cts;
    ASSERT_TRUE(peer.WaitImmediate(&cts)) << "no CTS from the plugin";
    Cts f{};
    memcpy(&f, peer.ring.data(), CtsLen(1));
    ASSERT_EQ(f.n, 1u);
    ASSERT_EQ(f.e[0].size, 4096u);
    ASSERT_NO_FATAL_FAILURE(
        peer.Write(f.e[0].addr + c.addr_delta, f.e[0].rkey, c.len, c.imm));
    int got = -1;
    const size_t log_from = LogSnapshot().size();
    SetLogEcho(good);
    EXPECT_EQ(TestUntil(req, &got), good ? kOk : kPrismNcclRemoteError)
        << c.what;
    EXPECT_EQ(WarningsSince(log_from, "recv comm: "), good ? 0 : 1) << c.what;
    SetLogEcho(true);
    if (good) {
      EXPECT_EQ(got, 4096);
    }
    EXPECT_EQ(N()->dereg_mr(recv, mh), kOk);
    EXPECT_EQ(N()->close_recv(recv), kOk);
  }
}

}  // namespace
}  // namespace prism::nccl_test
