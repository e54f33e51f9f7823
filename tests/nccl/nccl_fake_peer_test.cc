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

#include <algorithm>
#include <cerrno>
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
#include "tests/nccl/fake_peer.h"
#include "tests/nccl/mini_nccl.h"
#include "transport/nccl/wire.h"

namespace prism::nccl_test {
namespace {

constexpr int kOk = kPrismNcclSuccess;
using Clock = std::chrono::steady_clock;

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

// The peer as the receiver: the plugin connects to a fake listener.
void ConnectPluginTo(FakePeer* peer, void** send) {
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
  ASSERT_EQ(N()->close_listen(lc), kOk);
  ASSERT_NO_FATAL_FAILURE(prism::nccl_test::ConnectPluginTo(
      peer, handle,
      [](char* h, void** comm) {
        PrismNcclDeviceHandle* dh = nullptr;
        return N()->connect(g_ctx, 0, h, comm, &dh);
      },
      send));
}

// The peer as the sender: it connects to the plugin's listener with a
// well-formed Hello; the plugin accepts (*recv) and the peer takes its Ack.
void AcceptPluginFrom(FakePeer* p, void** recv) {
  FakePeer& peer = *p;
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
  const auto start = Clock::now();
  while (*recv == nullptr && Clock::now() - start < std::chrono::seconds(10)) {
    ASSERT_EQ(N()->accept(lc, recv, nullptr), kOk);
  }
  ASSERT_NE(*recv, nullptr);
  ASSERT_EQ(N()->close_listen(lc), kOk);
  Hello ack;
  ASSERT_TRUE(ReadAll(peer.fd, &ack, sizeof(ack)));
  ASSERT_NO_FATAL_FAILURE(peer.ConnectTo(ack));
}

// The plugin as the receiver: a 64 KiB registration filled with 0x5c
// (guard bytes after the receive) and one 4 KiB receive at its start (tag
// 7), whose CTS the peer has taken from its ring.
struct PostedReceive {
  std::vector<uint8_t> rbuf = std::vector<uint8_t>(1 << 16, 0x5c);
  void* mh = nullptr;
  void* req = nullptr;
  Cts cts{};
};
void PostOneReceive(FakePeer* peer, void* recv, PostedReceive* p) {
  ASSERT_EQ(N()->reg_mr(recv, p->rbuf.data(), p->rbuf.size(), kPrismNcclPtrHost,
                        &p->mh),
            kOk);
  void* data = p->rbuf.data();
  size_t size = 4096;
  int tag = 7;
  ASSERT_EQ(N()->irecv(recv, 1, &data, &size, &tag, &p->mh, nullptr, &p->req),
            kOk);
  ASSERT_NE(p->req, nullptr);
  Completion cts;
  ASSERT_TRUE(peer->WaitImmediate(&cts)) << "no CTS from the plugin";
  memcpy(&p->cts, peer->ring.data(), CtsLen(1));
  ASSERT_EQ(p->cts.n, 1u);
  ASSERT_EQ(p->cts.e[0].size, 4096u);
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
// overflows the comm's bounded completion inbox (512; an honest peer can
// have at most 288 completions there): the send comm fails with
// ncclRemoteError -- the peer broke the protocol -- and one warning saying
// what overflowed and its capacity, without a crash, a hang or a WRITE of
// the plugin's (the CTS it got names peer.buf, which stays untouched).
// Before 2026-12-05 the overflow was an ncclInternalError "completion inbox
// overflow" (without its capacity), hidden by the protocol errors of the
// completions after it because the last failure won (the flood test of the
// receive side below shows the same).
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
  EXPECT_EQ(WarningsSince(log_from,
                          "send comm: completion inbox overflow: more than "
                          "512 Prism completions (its capacity)"),
            1);
  // The comm keeps reporting it.
  EXPECT_EQ(N()->isend(send, sbuf.data(), 4096, 7, mh, nullptr, &req),
            kPrismNcclRemoteError);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(N()->dereg_mr(send, mh), kOk);
  EXPECT_EQ(N()->close_send(send), kOk);
  for (uint8_t b : peer.buf) ASSERT_EQ(b, 0) << "the plugin wrote peer.buf";
}

// The same against a receive: the peer floods 600 WRITE-with-immediates
// (slot index 5 of a one-buffer receive, 16 bytes at the posted buffer)
// before the plugin polls. The recv comm fails with ncclRemoteError and one
// warning naming the inbox overflow and its capacity (the first failure;
// the protocol errors of the completions drained after it are only logged
// at INFO); the registration past the bytes the peer wrote is untouched.
TEST(NcclFakePeer, DataFloodFailsTheReceive) {
  if (!UdpPath()) GTEST_SKIP() << "udp data path only";
  ASSERT_NO_FATAL_FAILURE(Init());
  FakePeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.Setup());
  void* recv = nullptr;
  ASSERT_NO_FATAL_FAILURE(AcceptPluginFrom(&peer, &recv));
  PostedReceive p;
  ASSERT_NO_FATAL_FAILURE(PostOneReceive(&peer, recv, &p));
  ASSERT_TRUE(peer.Flood(p.cts.e[0].addr, p.cts.e[0].rkey, 16, 5, 600));
  // Sent is not yet received: give the plugin's Prism loop time to take the
  // whole flood in before the first test() drains it (a test() while it is
  // still arriving sees the bad slot index first, a protocol error, and
  // the inbox never overflows; seen under TSan with parallel ctest load).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const size_t log_from = LogSnapshot().size();
  SetLogEcho(false);
  int got = -1;
  EXPECT_EQ(TestUntil(p.req, &got), kPrismNcclRemoteError);
  SetLogEcho(true);
  EXPECT_EQ(WarningsSince(log_from, "recv comm: "), 1);
  EXPECT_EQ(WarningsSince(log_from,
                          "recv comm: completion inbox overflow: more than "
                          "512 Prism completions (its capacity)"),
            1);
  for (size_t i = 16; i < p.rbuf.size(); ++i) {
    ASSERT_EQ(p.rbuf[i], 0x5c) << i;
  }
  EXPECT_EQ(N()->dereg_mr(recv, p.mh), kOk);
  EXPECT_EQ(N()->close_recv(recv), kOk);
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
    void* recv = nullptr;
    ASSERT_NO_FATAL_FAILURE(AcceptPluginFrom(&peer, &recv));

    PostedReceive p;
    ASSERT_NO_FATAL_FAILURE(PostOneReceive(&peer, recv, &p));
    ASSERT_NO_FATAL_FAILURE(peer.Write(p.cts.e[0].addr + c.addr_delta,
                                       p.cts.e[0].rkey, c.len, c.imm));
    int got = -1;
    const size_t log_from = LogSnapshot().size();
    SetLogEcho(good);
    EXPECT_EQ(TestUntil(p.req, &got), good ? kOk : kPrismNcclRemoteError)
        << c.what;
    EXPECT_EQ(WarningsSince(log_from, "recv comm: "), good ? 0 : 1) << c.what;
    SetLogEcho(true);
    if (good) {
      EXPECT_EQ(got, 4096);
    }
    EXPECT_EQ(N()->dereg_mr(recv, p.mh), kOk);
    EXPECT_EQ(N()->close_recv(recv), kOk);
  }
}

// True when the peer of `fd` closed it within `ms` (recv gives 0).
bool SeesEof(int fd, int ms) {
  const auto start = Clock::now();
  while (Clock::now() - start < std::chrono::milliseconds(ms)) {
    char b[512];
    const ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return errno == ECONNRESET;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// NCCL gives up on a connect mid-handshake (an abort: connect returned
// success with a NULL comm, the Hello went out, no Ack came) and never calls
// it again, then finalizes the init context it used: the finalize releases
// that connect -- its socket is closed (the listener sees EOF), its half of
// the Prism connection and its CTS ring are freed (the ASan build checks
// for leaks at exit), it is logged and counted -- and the stale handle is
// refused afterwards. Before 2026-12-05 the connect state, its socket and
// its Prism connection lived until the process exited.
TEST(NcclFakePeer, AbandonedConnectIsReleasedAtFinalize) {
  if (!UdpPath()) GTEST_SKIP() << "udp data path only";
  ASSERT_NO_FATAL_FAILURE(Init());
  // A context of its own: finalizing it is not the last finalize.
  void* ctx = nullptr;
  ASSERT_EQ(N()->init(&ctx, 0x78, nullptr, TestLogger, nullptr), kOk);
  ASSERT_NE(ctx, nullptr);
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
  ASSERT_EQ(N()->close_listen(lc), kOk);
  FakeListener l;
  ASSERT_NO_FATAL_FAILURE(l.Open(handle));
  void* send = nullptr;
  PrismNcclDeviceHandle* dh = nullptr;
  ASSERT_EQ(N()->connect(ctx, 0, handle, &send, &dh), kOk);
  ASSERT_EQ(send, nullptr);
  const int peer = accept(l.fd, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  // Poll connect until its whole Hello has arrived: mid-handshake, waiting
  // for the Ack that never comes.
  Hello hello;
  size_t got = 0;
  const auto start = Clock::now();
  while (got < sizeof(hello) &&
         Clock::now() - start < std::chrono::seconds(10)) {
    ASSERT_EQ(N()->connect(ctx, 0, handle, &send, &dh), kOk);
    ASSERT_EQ(send, nullptr);
    const ssize_t n = recv(peer, reinterpret_cast<char*>(&hello) + got,
                           sizeof(hello) - got, MSG_DONTWAIT);
    if (n > 0) got += static_cast<size_t>(n);
  }
  ASSERT_EQ(got, sizeof(hello));
  EXPECT_EQ(hello.magic, kHelloMagic);
  uint64_t state = 0;
  memcpy(&state, handle + offsetof(nccl::WireHandle, connect_state),
         sizeof(state));
  ASSERT_NE(state, 0u);
  const size_t log_from = LogSnapshot().size();
  ASSERT_EQ(N()->finalize(ctx), kOk);
  EXPECT_EQ(InfosSince(log_from,
                       "finalize: released 1 connect(s) abandoned "
                       "mid-handshake"),
            1);
  EXPECT_TRUE(SeesEof(peer, 2000)) << "the abandoned connect's socket is open";
  close(peer);
  // The handle now names a released state: refused, not followed.
  SetLogEcho(false);
  EXPECT_EQ(N()->connect(g_ctx, 0, handle, &send, &dh),
            kPrismNcclInvalidArgument);
  SetLogEcho(true);
  EXPECT_EQ(send, nullptr);
}

// --- The side-channel handshake's bound (PRISM_CONNECT_TIMEOUT_MS). ---
// These run as their own ctest entry, nccl_handshake_timeout_test, with
// PRISM_CONNECT_TIMEOUT_MS=300 (the plugin reads its configuration once per
// process); without the variable they are skipped.
int HandshakeTimeoutMs() {
  const char* v = std::getenv("PRISM_CONNECT_TIMEOUT_MS");
  return v == nullptr ? 0 : std::atoi(v);
}

// The count "handshake timeouts in this process: N" of the last warning
// containing `text`, or -1 when there is none.
int64_t LastTimeoutCount(const char* text) {
  const std::vector<LogLine> log = LogSnapshot();
  const std::string key = "handshake timeouts in this process: ";
  for (size_t i = log.size(); i-- > 0;) {
    if (log[i].level != kPrismNcclLogWarn ||
        log[i].text.find(text) == std::string::npos) {
      continue;
    }
    const size_t at = log[i].text.find(key);
    if (at == std::string::npos) return -1;
    return std::atoll(log[i].text.c_str() + at + key.size());
  }
  return -1;
}

// A listener that accepts the TCP connection and never answers the Hello:
// connect() returns success with a NULL comm (never blocking) until
// PRISM_CONNECT_TIMEOUT_MS after its first call, then ncclRemoteError with
// a warning that names the variable and counts the timeout; the handle's
// connect state is cleared and the socket closed (the listener sees EOF),
// so nothing is left behind (the ASan build checks for leaks). Twice: the
// count goes up by one. Before 2026-12-05 connect returned success forever
// and NCCL polled it forever.
TEST(NcclHandshakeTimeout, ConnectToSilentListenerTimesOut) {
  const int timeout_ms = HandshakeTimeoutMs();
  if (timeout_ms <= 0) GTEST_SKIP() << "needs PRISM_CONNECT_TIMEOUT_MS";
  ASSERT_NO_FATAL_FAILURE(Init());
  int64_t last = -1;
  for (int round = 0; round < 2; ++round) {
    char handle[kPrismNcclHandleMaxSize];
    void* lc = nullptr;
    ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
    ASSERT_EQ(N()->close_listen(lc), kOk);
    FakeListener l;
    ASSERT_NO_FATAL_FAILURE(l.Open(handle));
    const size_t log_from = LogSnapshot().size();
    SetLogEcho(false);
    void* send = nullptr;
    int r = kOk;
    int polls = 0;
    auto slowest = Clock::duration::zero();
    const auto start = Clock::now();
    while (r == kOk && send == nullptr &&
           Clock::now() - start < std::chrono::seconds(20)) {
      PrismNcclDeviceHandle* dh = nullptr;
      const auto t0 = Clock::now();
      r = N()->connect(g_ctx, 0, handle, &send, &dh);
      // The first call also creates the device's endpoint (slow under
      // the sanitizers); the others only poll.
      if (polls > 0) slowest = std::max(slowest, Clock::now() - t0);
      ++polls;
    }
    const auto waited = Clock::now() - start;
    SetLogEcho(true);
    EXPECT_EQ(r, kPrismNcclRemoteError);
    EXPECT_EQ(send, nullptr);
    EXPECT_GE(waited, std::chrono::milliseconds(timeout_ms));
    EXPECT_LT(waited,
              std::chrono::milliseconds(timeout_ms) + std::chrono::seconds(5));
    // Never blocking: many calls, none of them waiting out the bound.
    EXPECT_GE(polls, 10);
    EXPECT_LT(slowest, std::chrono::milliseconds(timeout_ms))
        << "connect blocked";
    EXPECT_EQ(WarningsSince(log_from, "PRISM_CONNECT_TIMEOUT_MS"), 1);
    EXPECT_EQ(WarningsSince(log_from, "waiting for the ack (0 of 296 ack"), 1);
    const int64_t count = LastTimeoutCount("waiting for the ack");
    ASSERT_GE(count, 1);
    if (last >= 0) {
      EXPECT_EQ(count, last + 1);
    }
    last = count;
    uint64_t state = 1;
    memcpy(&state, handle + offsetof(nccl::WireHandle, connect_state),
           sizeof(state));
    EXPECT_EQ(state, 0u);
    // The listener's side: accepted, then closed by the plugin.
    const int peer = accept(l.fd, nullptr, nullptr);
    ASSERT_GE(peer, 0);
    Hello hello;
    EXPECT_TRUE(ReadAll(peer, &hello, sizeof(hello)));
    EXPECT_TRUE(SeesEof(peer, 2000));
    close(peer);
  }
}

// Clients that connect to the plugin's listener and stall in the handshake
// (one sends 100 bytes of its Hello, one nothing): accept() keeps returning
// at once with a NULL comm, drops each with a warning naming
// PRISM_CONNECT_TIMEOUT_MS and counting it once the bound has passed
// (closing its socket: the client sees EOF), and a real connect on the same
// listener still completes. Before 2026-12-05 such a client held its slot
// (and socket) until eight newer connections evicted it.
TEST(NcclHandshakeTimeout, StalledHelloIsDroppedAndAcceptGoesOn) {
  const int timeout_ms = HandshakeTimeoutMs();
  if (timeout_ms <= 0) GTEST_SKIP() << "needs PRISM_CONNECT_TIMEOUT_MS";
  ASSERT_NO_FATAL_FAILURE(Init());
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  memcpy(&a.sin_port, handle + kHandlePortOffset, sizeof(a.sin_port));
  memcpy(&a.sin_addr, handle + kHandleAddrOffset, 4);
  int raw[2];
  for (int& fd : raw) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  Hello partial{};
  partial.magic = kHelloMagic;
  ASSERT_TRUE(WriteAll(raw[0], &partial, 100));
  const size_t log_from = LogSnapshot().size();
  SetLogEcho(false);
  void* recv = nullptr;
  auto slowest = Clock::duration::zero();
  const auto start = Clock::now();
  // Polled past the bound, as NCCL would while waiting for its real peer.
  while (Clock::now() - start <
         std::chrono::milliseconds(timeout_ms) + std::chrono::seconds(1)) {
    const auto t0 = Clock::now();
    ASSERT_EQ(N()->accept(lc, &recv, nullptr), kOk);
    slowest = std::max(slowest, Clock::now() - t0);
    ASSERT_EQ(recv, nullptr);
    if (WarningsSince(log_from, "PRISM_CONNECT_TIMEOUT_MS") == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  SetLogEcho(true);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(timeout_ms));
  EXPECT_LT(slowest, std::chrono::milliseconds(timeout_ms)) << "accept blocked";
  EXPECT_EQ(WarningsSince(log_from, "handshake timed out after"), 2);
  EXPECT_EQ(WarningsSince(log_from, "(100 of 296 hello bytes received"), 1);
  EXPECT_EQ(WarningsSince(log_from, "(0 of 296 hello bytes received"), 1);
  EXPECT_GE(LastTimeoutCount("hello bytes received"), 2);
  for (int fd : raw) {
    EXPECT_TRUE(SeesEof(fd, 2000));
    close(fd);
  }
  // The listener still works: a real connect completes.
  void* send = nullptr;
  const auto t1 = Clock::now();
  while ((send == nullptr || recv == nullptr) &&
         Clock::now() - t1 < std::chrono::seconds(10)) {
    PrismNcclDeviceHandle* dh = nullptr;
    if (send == nullptr) {
      ASSERT_EQ(N()->connect(g_ctx, 0, handle, &send, &dh), kOk);
    }
    if (recv == nullptr) {
      ASSERT_EQ(N()->accept(lc, &recv, nullptr), kOk);
    }
  }
  ASSERT_NE(send, nullptr);
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(N()->close_listen(lc), kOk);
  EXPECT_EQ(N()->close_send(send), kOk);
  EXPECT_EQ(N()->close_recv(recv), kOk);
}

// The v10 and older tables have no finalize, and their init keeps the
// plugin's reference for good, so the last finalize (which releases the
// connects without a context) never comes in a process that uses them. A
// connect NCCL abandons mid-handshake through the v10 table (Hello sent,
// no Ack, never called again) is released instead once nobody has called
// it for twice PRISM_CONNECT_TIMEOUT_MS, by the next listen or new
// connect: its socket is closed (the listener sees EOF), its half of the
// Prism connection and its CTS ring freed, logged and counted, and the
// stale handle refused afterwards. A listen before that leaves it alone.
// Before 2026-12-06 it lived until the process exited.
TEST(NcclHandshakeTimeout, AbandonedOldTableConnectIsReleasedLater) {
  const int timeout_ms = HandshakeTimeoutMs();
  if (timeout_ms <= 0) GTEST_SKIP() << "needs PRISM_CONNECT_TIMEOUT_MS";
  ASSERT_NO_FATAL_FAILURE(Init());
  const auto* v10 = static_cast<const PrismNcclNetV10*>(FindTable(g_net, 10));
  ASSERT_NE(v10, nullptr);
  ASSERT_EQ(v10->init(TestLogger, nullptr), kOk);
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(v10->listen(0, handle, &lc), kOk);
  ASSERT_EQ(v10->close_listen(lc), kOk);
  FakeListener l;
  ASSERT_NO_FATAL_FAILURE(l.Open(handle));
  PrismNcclCommConfig cfg{-1};
  void* send = nullptr;
  PrismNcclDeviceHandle* dh = nullptr;
  ASSERT_EQ(v10->connect(0, &cfg, handle, &send, &dh), kOk);
  ASSERT_EQ(send, nullptr);
  const int peer = accept(l.fd, nullptr, nullptr);
  ASSERT_GE(peer, 0);
  Hello hello;
  size_t got = 0;
  const auto start = Clock::now();
  while (got < sizeof(hello) &&
         Clock::now() - start < std::chrono::seconds(10)) {
    ASSERT_EQ(v10->connect(0, &cfg, handle, &send, &dh), kOk);
    ASSERT_EQ(send, nullptr);
    const ssize_t n = recv(peer, reinterpret_cast<char*>(&hello) + got,
                           sizeof(hello) - got, MSG_DONTWAIT);
    if (n > 0) got += static_cast<size_t>(n);
  }
  ASSERT_EQ(got, sizeof(hello));
  const auto abandoned = Clock::now();
  const std::string released =
      "connect: released 1 connect(s) abandoned mid-handshake (no call for "
      "twice PRISM_CONNECT_TIMEOUT_MS)";
  // Well within twice the bound: a listen leaves it alone.
  size_t log_from = LogSnapshot().size();
  char other[kPrismNcclHandleMaxSize];
  ASSERT_EQ(v10->listen(0, other, &lc), kOk);
  ASSERT_EQ(v10->close_listen(lc), kOk);
  if (Clock::now() - abandoned < std::chrono::milliseconds(timeout_ms)) {
    EXPECT_EQ(InfosSince(log_from, "released"), 0);
  }
  std::this_thread::sleep_for(2 * std::chrono::milliseconds(timeout_ms) +
                              std::chrono::milliseconds(100));
  log_from = LogSnapshot().size();
  ASSERT_EQ(v10->listen(0, other, &lc), kOk);
  ASSERT_EQ(v10->close_listen(lc), kOk);
  EXPECT_EQ(InfosSince(log_from, released), 1);
  EXPECT_TRUE(SeesEof(peer, 2000)) << "the abandoned connect's socket is open";
  close(peer);
  // The handle now names a released state: refused, not followed.
  SetLogEcho(false);
  EXPECT_EQ(v10->connect(0, &cfg, handle, &send, &dh),
            kPrismNcclInvalidArgument);
  SetLogEcho(true);
  EXPECT_EQ(send, nullptr);
}

}  // namespace
}  // namespace prism::nccl_test
