#include "transport/nccl/comm.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/base/random.h"
#include "transport/nccl/gpu.h"
#include "transport/nccl/log.h"
#include "transport/nccl/socket.h"

#ifdef PRISM_NCCL_HAVE_ENDPOINT
#include "prism/endpoint.h"
#include "transport/nccl/endpoint_pool.h"
#endif

namespace prism::nccl {
namespace {

constexpr uint32_t kCommMagic = 0x4d4d4f43;
constexpr uint32_t kReqMagic = 0x51455250;
constexpr uint32_t kMrMagic = 0x4745524d;
constexpr uint32_t kDeadMagic = 0xdeadbeef;

// The wire layouts (WireHandle, HelloMsg, the frames) are in wire.h.
#ifdef PRISM_NCCL_HAVE_ENDPOINT
static_assert(1 + ConnectionBlob::kMaxBytes <= sizeof(HelloMsg::info));
#endif

enum class CommKind : uint32_t { kListen, kSend, kRecv };

// Counters of rejected input (protocol violations, API misuse), for logs.
std::atomic<uint64_t> g_protocol_errors{0};
std::atomic<uint64_t> g_api_errors{0};
// Staged GPU copies reported as stalled (CommBase::StagingStalled).
std::atomic<uint64_t> g_staging_stalls{0};
// Side-channel handshakes given up after PRISM_CONNECT_TIMEOUT_MS: a
// connect() whose Ack did not come, a connection accept() dropped because
// its Hello did not.
std::atomic<uint64_t> g_handshake_timeouts{0};
// Prism WRITEs (isend payloads and CTS frames) that Endpoint::PostWrite
// refused for a full queue (ResourceExhausted) and that were tried again
// later: isend answered "try again", or the pending WRITE/CTS waited.
std::atomic<uint64_t> g_writes_refused{0};
constexpr std::chrono::milliseconds kStagingStallWarn{1000};

// PRISM_NCCL_CALL_LOG=N (PluginConfig::call_log, set by SetCallLog at the
// first init): the first N data calls that change state -- regMr, a posted
// irecv or isend, the first "try again" of a comm in a row and its reason, a
// completed test, iflush -- are logged at INFO, to see where a real NCCL
// stalls. 0 (default): nothing.
std::atomic<int64_t> g_call_log{0};
bool CallLogTake() {
  int64_t v = g_call_log.load(std::memory_order_relaxed);
  while (v > 0) {
    if (g_call_log.compare_exchange_weak(v, v - 1)) return true;
  }
  return false;
}
#define PRISM_NCCL_CALL(fmt, ...)                               \
  do {                                                          \
    if (CallLogTake()) {                                        \
      PRISM_NCCL_INFO("call: " fmt __VA_OPT__(, ) __VA_ARGS__); \
    }                                                           \
  } while (0)

uint64_t NewNonce() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

#ifdef PRISM_NCCL_HAVE_ENDPOINT
using SinkBase = CompletionSink;
#else
struct SinkBase {
  virtual ~SinkBase() = default;
};
#endif

struct CommBase : SinkBase {
  explicit CommBase(CommKind k) : kind(k) {}
  uint32_t magic = kCommMagic;
  CommKind kind;
  std::mutex mu;
  int fd = -1;
  DataMode mode = DataMode::kTcpInterim;
  int dev = 0;
  bool failed = false;
  PrismNcclResult failure = kPrismNcclSuccess;
  uint64_t nonce = 0;
  Rng rng{1};
  int live_mrs = 0;
  uint32_t test_polls = 0;  // polling isend/irecv/test calls (ReadSideNow)
  // This comm's figures, logged when it is closed (CloseSend / CloseRecv):
  // requests test() reported done (successful or not) and the bytes of the
  // successful ones (send: its size; receive: what arrived).
  uint64_t requests_done = 0;
  uint64_t requests_failed = 0;
  uint64_t bytes_done = 0;
  // Prism WRITEs of this comm (send: payloads; receive: CTS frames)
  // refused for a full queue and tried again (g_writes_refused counts all).
  uint64_t writes_refused = 0;
  // PRISM_NCCL_CALL_LOG: the reason of the "try again" in a row being
  // answered (0: none), so that a polling loop logs it once.
  int again = 0;
  void Again(int reason, const char* what, uint32_t seq) {
    if (again == reason) return;
    again = reason;
    PRISM_NCCL_CALL("%p try again: %s (seq %u)", static_cast<void*>(this), what,
                    seq);
  }

  // Whether this call also reads the side channel (a system call). On the
  // Prism data paths it only carries rare events (a send error, the peer
  // closing) -- the CTS and the data come through Prism -- so it is read on
  // every kSideReadEvery-th isend/irecv/test call, saving a system call on
  // the others (NCCL's proxy polls in a tight loop, so such an event is
  // still seen within 64 polls, tens to hundreds of microseconds); on the
  // INTERIM tcp path always.
  static constexpr uint32_t kSideReadEvery = 64;
  bool ReadSideNow() {
    return mode == DataMode::kTcpInterim ||
           (++test_polls % kSideReadEvery) == 0;
  }

  // The peer closed the side channel. On the Prism data paths a request of
  // ours may still be on its way to completion then: the peer saw its own
  // completion of our last transfer (and closed) before our endpoint's
  // loop thread surfaced ours. So the comm fails only when nothing is
  // outstanding (a normal teardown: quiet) or after kPeerCloseGrace with
  // something still outstanding; on the INTERIM tcp path everything before
  // the close has been read, so at once. CheckPeerClosed runs on every
  // progress call.
  static constexpr auto kPeerCloseGrace = std::chrono::milliseconds(500);
  bool peer_closed = false;
  std::chrono::steady_clock::time_point peer_closed_at{};
  void PeerClosed() {
    if (peer_closed) return;
    peer_closed = true;
    peer_closed_at = std::chrono::steady_clock::now();
  }
  void CheckPeerClosed() {
    if (!peer_closed || failed) return;
    if (mode == DataMode::kTcpInterim || !HasOutstanding() ||
        std::chrono::steady_clock::now() - peer_closed_at > kPeerCloseGrace) {
      Fail(kPrismNcclRemoteError, "peer closed the connection", 0);
    }
  }

  // GPU memory (gpu.h): the runtime, a stream created by the first
  // NCCL_PTR_CUDA registration, and host mirrors whose deregMr came while
  // requests were outstanding (freed at close).
  GpuRuntime* const gpu = Gpu();
  GpuStream stream = nullptr;
  std::vector<void*> deferred_mirrors;

  absl::Status EnsureStream() {
    if (stream != nullptr) return absl::OkStatus();
    auto s = gpu->CreateStream();
    if (!s.ok()) return s.status();
    stream = *s;
    return absl::OkStatus();
  }
  // Enqueues a copy and records the request's event after it.
  template <typename Req>
  absl::Status StartCopy(Req* r, void* dst, const void* src, uint64_t n,
                         bool to_device) {
    if (r->ev == nullptr) {
      auto e = gpu->CreateEvent();
      if (!e.ok()) return e.status();
      r->ev = *e;
    }
    if (absl::Status st = gpu->CopyAsync(dst, src, n, to_device, stream);
        !st.ok()) {
      return st;
    }
    return gpu->Record(r->ev, stream);
  }
  // A staged copy whose event is still not complete kStagingStallWarn after
  // it was enqueued is reported once (WARN, counted): the GPU has not run
  // the plugin's stream, and NCCL waits on this request. Seen on an H200
  // (docs/nccl.md, "GPU run"); the copy may still complete later.
  template <typename Req>
  void StagingStalled(Req* r, const char* what) {
    if (r->stall_warned) return;
    const auto waited = std::chrono::steady_clock::now() - r->staged_at;
    if (waited < kStagingStallWarn) return;
    r->stall_warned = true;
    ++g_staging_stalls;
    PRISM_NCCL_WARN(
        "dev %d: %s copy of request %p not complete after %lld ms (the GPU "
        "has not run the plugin's CUDA stream; see docs/nccl.md, GPU memory)",
        dev, what, static_cast<void*>(r),
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(waited)
                .count()));
  }
  // Teardown: waits for copies, destroys events and stream, frees mirrors.
  template <typename Req>
  void ReleaseGpu(Req* reqs, int n) {
    if (gpu == nullptr) return;
    if (stream != nullptr) {
      if (absl::Status st = gpu->Synchronize(stream); !st.ok()) {
        PRISM_NCCL_WARN("close: %s", std::string(st.message()).c_str());
      }
    }
    for (int i = 0; i < n; ++i) {
      if (reqs[i].ev != nullptr) gpu->DestroyEvent(reqs[i].ev);
      reqs[i].ev = nullptr;
    }
    if (stream != nullptr) gpu->DestroyStream(stream);
    stream = nullptr;
    for (void* p : deferred_mirrors) gpu->FreePinned(p);
    deferred_mirrors.clear();
  }

#ifdef PRISM_NCCL_HAVE_ENDPOINT
  // Prism data path: the device's endpoint and this comm's connection.
  DeviceEndpoint* dep = nullptr;
  ConnId conn = kInvalidConn;
  std::vector<uint32_t> deferred_lkeys;  // deregMr with WRITEs in flight
  // Completions routed here by DeviceEndpoint::Poll (bounded: one per
  // outstanding WRITE or received slot).
  static constexpr int kInboxCap = 2 * kMaxRequests * kMaxRecvs;
  std::mutex inbox_mu;
  Completion inbox[kInboxCap];
  int inbox_head = 0;
  int inbox_count = 0;
  bool inbox_overflow = false;

  void Deliver(const Completion& c) override {
    std::lock_guard<std::mutex> lock(inbox_mu);
    if (inbox_count == kInboxCap) {
      inbox_overflow = true;
      return;
    }
    inbox[(inbox_head + inbox_count) % kInboxCap] = c;
    ++inbox_count;
  }
  // Polls the endpoint and hands this comm's completions to `fn`.
  // Completions being handed to `fn` (guarded by `mu`, which every caller
  // of DrainInbox holds; a member, not a per-call array, which test() would
  // initialise on every poll).
  Completion drain_batch[64];
  template <typename Fn>
  void DrainInbox(Fn fn) {
    if (dep == nullptr) return;
    dep->Poll();
    Completion* const batch = drain_batch;
    for (;;) {
      int n = 0;
      {
        std::lock_guard<std::mutex> lock(inbox_mu);
        if (inbox_count == 0 && !inbox_overflow) return;
        if (inbox_overflow) {
          // An honest peer cannot cause this: a comm has at most
          // kMaxRequests CTS and kMaxRequests * kMaxRecvs data WRITEs
          // outstanding, each with one completion here until it is
          // drained (288 of kInboxCap). So the peer WROTE with immediate
          // more than the protocol lets it: a remote error, counted and
          // warned about like any protocol violation. The completions that
          // did not fit are dropped (their data was placed by Prism inside
          // the registered region their rkey names, as for any WRITE).
          inbox_overflow = false;
          char what[192];
          snprintf(what, sizeof(what),
                   "completion inbox overflow: more than %d Prism completions "
                   "(its capacity) waiting for this comm; the peer wrote "
                   "with immediate more than the protocol allows",
                   kInboxCap);
          ProtocolError(what);
        }
        while (n < 64 && inbox_count > 0) {
          batch[n++] = inbox[inbox_head];
          inbox_head = (inbox_head + 1) % kInboxCap;
          --inbox_count;
        }
      }
      for (int i = 0; i < n; ++i) fn(batch[i]);
      if (n < 64) return;
    }
  }
  // One INFO line about the Prism connection of a comm being closed: its
  // retransmissions, trims and retired paths (ConnectionStats); "" when the
  // comm has none (tcp-interim) or the endpoint no longer knows it.
  std::string ConnectionFigures() {
    if (dep == nullptr) return "";
    auto cs = dep->ep()->connection_stats(conn);
    if (!cs.ok()) return "";
    char b[256];
    snprintf(
        b, sizeof(b),
        "; Prism connection: %llu packets retransmitted, %llu trimmed "
        "(%llu NACKs as sender, %llu headers as receiver), %llu paths "
        "retired",
        static_cast<unsigned long long>(cs->retransmitted_packets),
        static_cast<unsigned long long>(cs->trims_received + cs->rx_trimmed),
        static_cast<unsigned long long>(cs->trims_received),
        static_cast<unsigned long long>(cs->rx_trimmed),
        static_cast<unsigned long long>(cs->paths_retired));
    return b;
  }
  void ReleaseConnection() {
    if (dep == nullptr) return;
    dep->RemoveRoute(conn);
    (void)dep->ep()->CloseConnection(conn);
    for (uint32_t lkey : deferred_lkeys) {
      if (absl::Status s = dep->ep()->DeregisterMemory(lkey); !s.ok()) {
        PRISM_NCCL_WARN("deregMr after close: %s",
                        std::string(s.message()).c_str());
      }
    }
    deferred_lkeys.clear();
    dep->Release();
    dep = nullptr;
  }
#else
  std::string ConnectionFigures() { return ""; }
  void ReleaseConnection() {}
#endif

  // The peer broke the protocol (a malformed or unexpected frame, CTS or
  // WRITE): counted, and always logged as a warning -- Fail() logs a remote
  // error on a comm with nothing outstanding at INFO (a peer's normal
  // close), which hid these.
  void ProtocolError(const char* what) {
    ++g_protocol_errors;
    Fail(kPrismNcclRemoteError, what, 0, /*loud=*/true);
  }

  // True while some request of this comm is not complete.
  virtual bool HasOutstanding() const { return false; }

#ifdef PRISM_NCCL_HAVE_ENDPOINT
  // A WRITE completed with an error. The one that met a connection failure
  // carries the cause and is a warning; the others the failure flushed
  // (kAborted) or a close cancelled (kCancelled) are its consequences,
  // logged at INFO (the kConnectionError that follows names the cause once).
  void WriteFailed(const Completion& c, const char* what, uint64_t bytes) {
    const bool flushed = c.status == absl::StatusCode::kAborted ||
                         c.status == absl::StatusCode::kCancelled;
    PRISM_NCCL_LOG(flushed ? kPrismNcclLogInfo : kPrismNcclLogWarn,
                   kPrismNcclFlagNet, "dev %d: Prism %s %llu bytes %s (%s)",
                   dev, what, static_cast<unsigned long long>(bytes),
                   flushed ? "flushed" : "failed",
                   absl::StatusCodeToString(c.status).c_str());
  }
  // The connection failed: the comm fails, naming the cause and the WRITE
  // that met it (the kConnectionError carries its length and MSN).
  void ConnectionFailed(const Completion& c, const char* writes) {
    char what[192];
    snprintf(what, sizeof(what),
             "Prism connection failed: %s (at the %sWRITE of %llu bytes, "
             "msn %u)",
             absl::StatusCodeToString(c.status).c_str(), writes,
             static_cast<unsigned long long>(c.byte_len), c.msn);
    Fail(kPrismNcclRemoteError, what, 0);
  }
#endif

  // Fails the comm: every later call reports `r`. The first failure is the
  // root cause and stays what the comm reports; later ones (often its
  // consequences, e.g. the protocol errors of the completions that follow
  // an inbox overflow) are only logged, at INFO, the first
  // kLaterFailuresLogged of them. (Before 2026-12-05 the last one won.)
  // `loud`: a warning also when nothing is outstanding.
  static constexpr int kLaterFailuresLogged = 3;
  int later_failures = 0;
  void Fail(PrismNcclResult r, const char* what, int err, bool loud = false) {
    const char* const kind_name = kind == CommKind::kSend ? "send" : "recv";
    if (failed) {
      if (++later_failures <= kLaterFailuresLogged) {
        PRISM_NCCL_INFO(
            "dev %d %s comm: also %s%s%s (result %d), after the first failure "
            "(result %d, which the comm keeps reporting)%s",
            dev, kind_name, what, err != 0 ? ": " : "",
            err != 0 ? strerror(err) : "", static_cast<int>(r),
            static_cast<int>(failure),
            later_failures == kLaterFailuresLogged ? "; further ones not logged"
                                                   : "");
      }
      return;
    }
    // A peer that closes after all traffic completed is a normal teardown.
    const bool quiet = !loud && r == kPrismNcclRemoteError && !HasOutstanding();
    PRISM_NCCL_LOG(quiet ? kPrismNcclLogInfo : kPrismNcclLogWarn,
                   kPrismNcclFlagNet, "dev %d %s comm: %s%s%s", dev, kind_name,
                   what, err != 0 ? ": " : "", err != 0 ? strerror(err) : "");
    failed = true;
    failure = r;
  }
};

struct MemHandle {
  uint32_t magic = kMrMagic;
  CommBase* comm = nullptr;
  uint8_t* addr = nullptr;
  size_t size = 0;
  int type = kPrismNcclPtrHost;
  // What the data path reads and writes: `addr` for host memory, the pinned
  // host mirror of the device range for NCCL_PTR_CUDA.
  uint8_t* host = nullptr;
  uint32_t lkey = 0;  // Prism data path
  uint32_t rkey = 0;
};

struct Slot {
  uint8_t* addr = nullptr;  // where the data path writes (a mirror if staged)
  uint8_t* dev = nullptr;   // staged: the device buffer NCCL posted
  uint64_t size = 0;
  uint32_t rkey = 0;
  int tag = 0;
  uint64_t received = 0;
  bool done = false;
};

struct Request {
  uint32_t magic = kReqMagic;
  CommBase* comm = nullptr;
  bool in_use = false;
  bool done = false;
  uint32_t gen = 0;  // send: generation, part of the WRITE's wr_id
  PrismNcclResult result = kPrismNcclSuccess;
  uint64_t size = 0;  // send: bytes
  uint32_t seq = 0;   // recv: CTS sequence
  int n = 0;
  int ndone = 0;
  Slot slots[kMaxRecvs];
  // GPU staging: a copy for this request is in flight until `ev` completes
  // (send: device -> mirror before the WRITE; recv: mirror -> device before
  // test() reports done).
  bool staging = false;
  GpuEvent ev = nullptr;
  // When the copy was enqueued, and whether its stall was reported
  // (CommBase::StagingStalled).
  std::chrono::steady_clock::time_point staged_at;
  bool stall_warned = false;
  // Its copy has been enqueued: pending until `ev` completes.
  void BeginStaging() {
    staging = true;
    staged_at = std::chrono::steady_clock::now();
    stall_warned = false;
  }
  // Send on the Prism data path, posted once staged (or once earlier
  // pending WRITEs are posted).
  const uint8_t* src = nullptr;
  uint64_t remote_addr = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
};

// The data path's address for (data, mh): the mirror when staged.
const uint8_t* HostAddr(const MemHandle* mh, const void* data) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (mh == nullptr || mh->host == mh->addr) return p;
  return mh->host + (p - mh->addr);
}

bool InRegion(const MemHandle* mh, const void* data, uint64_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  return p >= mh->addr && size <= mh->size &&
         static_cast<uint64_t>(p - mh->addr) <= mh->size - size;
}

// Validates a (data, size, mhandle) triple against `comm`.
PrismNcclResult CheckBuffer(CommBase* comm, const void* data, uint64_t size,
                            void* mhandle, const MemHandle** out) {
  auto* mh = static_cast<const MemHandle*>(mhandle);
  *out = mh;
  if (size == 0 && mh == nullptr) return kPrismNcclSuccess;
  if (mh == nullptr || mh->magic != kMrMagic || mh->comm != comm) {
    ++g_api_errors;
    PRISM_NCCL_WARN("buffer %p (%llu bytes) has no memory handle of this comm",
                    data, static_cast<unsigned long long>(size));
    return kPrismNcclInvalidArgument;
  }
  if (!InRegion(mh, data, size)) {
    ++g_api_errors;
    PRISM_NCCL_WARN(
        "buffer %p (%llu bytes) lies outside its registration "
        "[%p, +%zu)",
        data, static_cast<unsigned long long>(size), mh->addr, mh->size);
    return kPrismNcclInvalidArgument;
  }
  return kPrismNcclSuccess;
}

// ---------------------------------------------------------------------------
// Send side.
struct SendComm : CommBase {
  SendComm() : CommBase(CommKind::kSend) {
    for (int i = 0; i < kPool; ++i) {
      reqs[i].comm = this;
      free_list[i] = kPool - 1 - i;
    }
    nfree = kPool;
  }
  static constexpr int kPool = kMaxRequests * kMaxRecvs;

  Request reqs[kPool];
  int free_list[kPool];
  int nfree = 0;

  struct CtsGroup {
    bool valid = false;
    uint32_t seq = 0;
    int n = 0;
    int nmatched = 0;
    CtsEntry e[kMaxRecvs];
    bool matched[kMaxRecvs];
  };
  CtsGroup cts[kMaxRequests];
  uint32_t next_send_seq = 0;  // CTS group being matched by isend
  uint32_t next_cts_seq = 0;   // expected sequence of the next CTS frame

  // Prism data paths: the CTS ring the receiver WRITEs into (registered
  // remote-writable at connect; its address and rkey went in the Hello).
  std::unique_ptr<uint8_t[]> cts_ring;
  uint32_t cts_ring_lkey = 0;
  // CTS frames taken from the ring / from the side channel, and bytes read
  // from the side channel after the handshake (logged at close).
  uint64_t cts_via_prism = 0;
  uint64_t cts_via_side = 0;
  uint64_t side_rx_bytes = 0;

  // Input parser (CTS frames on the INTERIM tcp data path).
  FrameHeader in_hdr{};
  size_t in_hdr_got = 0;
  CtsBody in_body{};
  size_t in_body_got = 0;

  // Output queue (fixed ring; one item per send or error).
  struct OutItem {
    uint8_t hdr[sizeof(FrameHeader) + sizeof(DataHeader)];
    uint32_t hdr_len = 0;
    const uint8_t* payload = nullptr;
    uint64_t payload_len = 0;
    uint64_t sent = 0;
    Request* req = nullptr;
  };
  static constexpr int kOutCap = 2 * kPool;
  OutItem out[kOutCap];
  int out_head = 0;
  int out_count = 0;

  // Prism WRITEs matched to a CTS but not posted yet, in posting order
  // (staged sends wait for their copy; later sends wait behind them).
  Request* pend[kPool];
  int pend_head = 0;
  int pend_count = 0;

  bool HasOutstanding() const override {
    for (const Request& r : reqs) {
      if (r.in_use && !r.done) return true;
    }
    return false;
  }

  Request* Alloc() {
    if (nfree == 0) return nullptr;
    Request* r = &reqs[free_list[--nfree]];
    r->in_use = true;
    ++r->gen;
    r->done = false;
    r->result = kPrismNcclSuccess;
    r->size = 0;
    r->n = 1;
    return r;
  }
  void Free(Request* r) {
    r->in_use = false;
    free_list[nfree++] = static_cast<int>(r - reqs);
  }
  OutItem* PushOut() {
    if (out_count == kOutCap) return nullptr;
    OutItem* it = &out[(out_head + out_count) % kOutCap];
    ++out_count;
    *it = OutItem();
    return it;
  }

  void Flush() {
    while (out_count > 0 && !failed) {
      OutItem& it = out[out_head];
      if (it.req != nullptr && it.req->staging) {
        const absl::Status st = gpu->Query(it.req->ev);
        if (absl::IsUnavailable(st)) {  // payload still being copied
          StagingStalled(it.req, "device -> host");
          return;
        }
        if (!st.ok()) {
          FailGpu(st);
          return;
        }
        it.req->staging = false;
      }
      const uint64_t total = it.hdr_len + it.payload_len;
      while (it.sent < total) {
        size_t moved = 0;
        int err = 0;
        Io io;
        if (it.sent < it.hdr_len) {
          io = SendSome(fd, it.hdr + it.sent, it.hdr_len - it.sent, &moved,
                        &err);
        } else {
          const uint64_t off = it.sent - it.hdr_len;
          io = SendSome(fd, it.payload + off, it.payload_len - off, &moved,
                        &err);
        }
        if (io == Io::kAgain) return;
        if (io != Io::kOk) {
          Fail(kPrismNcclRemoteError, "side channel send failed", err);
          return;
        }
        it.sent += moved;
      }
      if (it.req != nullptr) it.req->done = true;
      out_head = (out_head + 1) % kOutCap;
      --out_count;
    }
  }

  void FailGpu(const absl::Status& st) {
    PRISM_NCCL_WARN("dev %d send comm: %s", dev,
                    std::string(st.message()).c_str());
    Fail(kPrismNcclUnhandledCudaError, "GPU copy failed", 0);
  }

#ifdef PRISM_NCCL_HAVE_ENDPOINT
  // Posts the pending WRITEs whose payload is in host memory, in order.
  void PostPending() {
    while (pend_count > 0 && !failed) {
      Request* r = pend[pend_head];
      if (r->staging) {
        const absl::Status st = gpu->Query(r->ev);
        if (absl::IsUnavailable(st)) {
          StagingStalled(r, "device -> host");
          return;
        }
        if (!st.ok()) {
          FailGpu(st);
          return;
        }
        r->staging = false;
      }
      WriteRequest wr;
      wr.wr_id = (static_cast<uint64_t>(r->gen) << 16) |
                 static_cast<uint64_t>(r - reqs);
      wr.local_addr = r->src;
      wr.length = r->size;
      wr.lkey = r->lkey;
      wr.remote_addr = r->remote_addr;
      wr.rkey = r->rkey;
      wr.has_immediate = true;
      wr.immediate = r->imm;
      const absl::Status st = dep->ep()->PostWrite(conn, wr);
      if (absl::IsResourceExhausted(st)) {  // again at the next call
        WriteRefused();
        return;
      }
      pend_head = (pend_head + 1) % kPool;
      --pend_count;
      if (!st.ok()) {
        r->done = true;
        r->result = FailWrite(st, r->size);
        return;
      }
    }
  }

  // Endpoint::PostWrite refused a WRITE for a full queue (ResourceExhausted:
  // its submission queue, which fills while the engine holds WRITEs back
  // for a full completion queue or send window): transient, the WRITE is
  // tried again (counted).
  void WriteRefused() {
    ++writes_refused;
    g_writes_refused.fetch_add(1, std::memory_order_relaxed);
  }
  // Any other refusal is not transient (the WRITE's arguments or the
  // connection are bad): the comm fails with the NCCL error that matches
  // the cause -- ncclRemoteError when the connection is gone
  // (FailedPrecondition, Unavailable, Aborted), ncclInternalError
  // otherwise (the plugin built a WRITE the endpoint rejects) -- and every
  // later call on it reports that. Before 2026-12-05 only that one isend
  // returned ncclInternalError and the comm went on.
  PrismNcclResult FailWrite(const absl::Status& st, uint64_t bytes) {
    const PrismNcclResult r = absl::IsFailedPrecondition(st) ||
                                      absl::IsUnavailable(st) ||
                                      absl::IsAborted(st)
                                  ? kPrismNcclRemoteError
                                  : kPrismNcclInternalError;
    char what[256];
    snprintf(what, sizeof(what), "Prism refused the WRITE of %llu bytes: %s",
             static_cast<unsigned long long>(bytes), st.ToString().c_str());
    Fail(r, what, 0, /*loud=*/true);
    return failure;
  }
#endif

  // `len`: the frame's bytes (side-channel frame length or WRITE length).
  void ApplyCts(const CtsBody& b, uint64_t len) {
    if (b.n < 1 || b.n > static_cast<uint32_t>(kMaxRecvs) ||
        len != CtsLen(static_cast<int>(b.n)) || b.seq != next_cts_seq) {
      ProtocolError("malformed or out-of-order CTS");
      return;
    }
    CtsGroup& g = cts[b.seq % kMaxRequests];
    if (g.valid) {
      ProtocolError("peer exceeded 32 outstanding receives");
      return;
    }
    g.valid = true;
    g.seq = b.seq;
    g.n = static_cast<int>(b.n);
    g.nmatched = 0;
    for (int i = 0; i < g.n; ++i) {
      g.e[i] = b.e[i];
      g.matched[i] = false;
    }
    ++next_cts_seq;
  }

#ifdef PRISM_NCCL_HAVE_ENDPOINT
  // A CTS the receiver WROTE into ring slot seq % kMaxRequests (immediate =
  // seq). The slot cannot be overwritten before this copy: the receiver
  // writes CTS seq + kMaxRequests into it only once its request seq has
  // completed, i.e. once this side matched (and so consumed) CTS seq.
  void TakeCts(const Completion& c) {
    const uint32_t seq = c.immediate;
    const uint64_t off =
        static_cast<uint64_t>(seq % kMaxRequests) * kCtsSlotBytes;
    if (c.status != absl::StatusCode::kOk || cts_ring == nullptr ||
        c.remote_addr != reinterpret_cast<uintptr_t>(cts_ring.get()) + off ||
        c.byte_len < CtsLen(1) || c.byte_len > CtsLen(kMaxRecvs)) {
      ProtocolError("CTS WRITE does not match the CTS ring");
      return;
    }
    CtsBody b{};
    memcpy(&b, cts_ring.get() + off, c.byte_len);
    if (b.seq != seq) {
      ProtocolError("CTS immediate does not match its frame");
      return;
    }
    ApplyCts(b, c.byte_len);
    ++cts_via_prism;
  }
#endif

  void ReadInput() {
    while (!failed) {
      size_t moved = 0;
      int err = 0;
      Io io;
      if (in_hdr_got < sizeof(FrameHeader)) {
        io = RecvSome(fd, reinterpret_cast<uint8_t*>(&in_hdr) + in_hdr_got,
                      sizeof(FrameHeader) - in_hdr_got, &moved, &err);
        if (io == Io::kOk) {
          in_hdr_got += moved;
          side_rx_bytes += moved;
          // On the Prism data paths the CTS comes through Prism: the
          // receiver sends nothing on the side channel.
          if (in_hdr_got == sizeof(FrameHeader) &&
              (IsPrismMode(mode) || in_hdr.type != kFrameCts ||
               in_hdr.len < CtsLen(1) || in_hdr.len > CtsLen(kMaxRecvs))) {
            ProtocolError("unexpected frame from receiver");
            return;
          }
          in_body_got = 0;
          continue;
        }
      } else {
        io = RecvSome(fd, reinterpret_cast<uint8_t*>(&in_body) + in_body_got,
                      in_hdr.len - in_body_got, &moved, &err);
        if (io == Io::kOk) {
          in_body_got += moved;
          side_rx_bytes += moved;
          if (in_body_got == in_hdr.len) {
            ApplyCts(in_body, in_hdr.len);
            ++cts_via_side;
            in_hdr_got = 0;
          }
          continue;
        }
      }
      if (io == Io::kAgain) return;
      if (io == Io::kClosed) {
        PeerClosed();
        return;
      }
      Fail(kPrismNcclRemoteError, "side channel receive failed", err);
      return;
    }
  }

  // `read_side` false: skip the side channel's receive (a system call) when
  // nothing needs it now; see Test().
  void Progress(bool read_side = true) {
    // Completions first: a peer that closes right after its last ack is
    // then seen with nothing outstanding.
#ifdef PRISM_NCCL_HAVE_ENDPOINT
    DrainInbox([this](const Completion& c) {
      if (c.type == CompletionType::kConnectionError) {
        ConnectionFailed(c, "");
        return;
      }
      if (c.type == CompletionType::kRecvImmediate) {
        TakeCts(c);
        return;
      }
      if (c.type != CompletionType::kWrite) return;
      const uint64_t idx = c.wr_id & 0xffff;
      const uint32_t gen = static_cast<uint32_t>(c.wr_id >> 16);
      if (idx >= static_cast<uint64_t>(kPool)) return;
      Request& r = reqs[idx];
      if (!r.in_use || r.done || r.gen != gen) return;
      r.done = true;
      if (c.status != absl::StatusCode::kOk) {
        WriteFailed(c, "WRITE of", r.size);
        r.result = kPrismNcclRemoteError;
      }
    });
    PostPending();
#endif
    Flush();
    if (read_side) {
      ReadInput();
      Flush();
    }
    CheckPeerClosed();
  }
};

// ---------------------------------------------------------------------------
// Receive side.
struct RecvComm : CommBase {
  RecvComm() : CommBase(CommKind::kRecv) {
    for (Request& r : reqs) r.comm = this;
  }
  Request reqs[kMaxRequests];  // indexed by seq % kMaxRequests
  uint32_t next_seq = 0;

  // CTS frames not sent yet, in order; out[seq % kMaxRequests] holds CTS
  // seq. On the Prism data paths `out` is also the registered source of the
  // CTS WRITEs (lkey cts_src_lkey): entry i is reused only after the WRITE
  // from it completed (cts_busy[i] false).
  struct CtsOut {
    uint8_t bytes[sizeof(FrameHeader) + sizeof(CtsBody)];
    uint32_t len = 0;
    uint32_t sent = 0;
    uint32_t seq = 0;
  };
  CtsOut out[kMaxRequests];
  int out_head = 0;
  int out_count = 0;
  bool cts_busy[kMaxRequests] = {};
  // Prism data paths: the sender's CTS ring (from its Hello).
  uint64_t cts_remote_addr = 0;
  uint32_t cts_remote_rkey = 0;
  uint32_t cts_src_lkey = 0;

  enum class In { kHdr, kData, kPayload, kErr };
  In in_state = In::kHdr;
  FrameHeader in_hdr{};
  DataHeader in_data{};
  SendErrorBody in_err{};
  size_t in_got = 0;
  Request* cur_req = nullptr;
  Slot* cur_slot = nullptr;

#ifdef PRISM_NCCL_HAVE_ENDPOINT
  // Prism data paths: each CTS is a WRITE-with-immediate (immediate = seq)
  // of its CtsBody into the sender's ring slot seq % kMaxRequests.
  void PostCts() {
    while (out_count > 0 && !failed) {
      CtsOut& o = out[out_head];
      const uint32_t slot = o.seq % kMaxRequests;
      WriteRequest wr;
      wr.wr_id = o.seq;
      wr.local_addr = o.bytes + sizeof(FrameHeader);
      wr.length = o.len - sizeof(FrameHeader);
      wr.lkey = cts_src_lkey;
      wr.remote_addr = cts_remote_addr + slot * kCtsSlotBytes;
      wr.rkey = cts_remote_rkey;
      wr.has_immediate = true;
      wr.immediate = o.seq;
      const absl::Status st = dep->ep()->PostWrite(conn, wr);
      if (absl::IsResourceExhausted(st)) {  // again at the next call
        ++writes_refused;
        g_writes_refused.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      if (!st.ok()) {
        PRISM_NCCL_WARN("irecv: Prism PostWrite of a CTS: %s",
                        std::string(st.message()).c_str());
        Fail(kPrismNcclInternalError, "CTS WRITE rejected", 0);
        return;
      }
      cts_busy[slot] = true;
      out_head = (out_head + 1) % kMaxRequests;
      --out_count;
    }
  }
#endif

  void Flush() {
#ifdef PRISM_NCCL_HAVE_ENDPOINT
    if (IsPrismMode(mode)) {
      PostCts();
      return;
    }
#endif
    while (out_count > 0 && !failed) {
      CtsOut& o = out[out_head];
      while (o.sent < o.len) {
        size_t moved = 0;
        int err = 0;
        const Io io =
            SendSome(fd, o.bytes + o.sent, o.len - o.sent, &moved, &err);
        if (io == Io::kAgain) return;
        if (io != Io::kOk) {
          Fail(kPrismNcclRemoteError, "side channel send failed", err);
          return;
        }
        o.sent += static_cast<uint32_t>(moved);
      }
      out_head = (out_head + 1) % kMaxRequests;
      --out_count;
    }
  }

  bool HasOutstanding() const override {
    for (const Request& r : reqs) {
      if (r.in_use && !r.done) return true;
    }
    return false;
  }

  int nstaging = 0;  // requests whose mirror -> device copies are in flight

  void CompleteSlot(Request* r, Slot* s, bool ok) {
    s->done = true;
    if (!ok) r->result = kPrismNcclRemoteError;
    if (++r->ndone == r->n) FinishRecv(r);
  }

  // Every slot has arrived: copy staged slots to the device first.
  void FinishRecv(Request* r) {
    bool copies = false;
    if (r->result == kPrismNcclSuccess && gpu != nullptr) {
      for (int i = 0; i < r->n; ++i) {
        Slot& s = r->slots[i];
        if (s.dev == nullptr || s.received == 0) continue;
        if (absl::Status st =
                gpu->CopyAsync(s.dev, s.addr, s.received, true, stream);
            !st.ok()) {
          FailRecvGpu(r, st);
          return;
        }
        copies = true;
      }
    }
    if (copies) {
      if (r->ev == nullptr) {
        auto e = gpu->CreateEvent();
        if (!e.ok()) {
          FailRecvGpu(r, e.status());
          return;
        }
        r->ev = *e;
      }
      if (absl::Status st = gpu->Record(r->ev, stream); !st.ok()) {
        FailRecvGpu(r, st);
        return;
      }
      r->BeginStaging();
      ++nstaging;
      return;
    }
    r->done = true;
  }
  void FailRecvGpu(Request* r, const absl::Status& st) {
    PRISM_NCCL_WARN("dev %d recv comm: %s", dev,
                    std::string(st.message()).c_str());
    r->result = kPrismNcclUnhandledCudaError;
    r->done = true;
  }
  // Completes the requests whose device copies have finished.
  void PollStaging() {
    for (Request& r : reqs) {
      if (nstaging == 0) return;
      if (!r.staging) continue;
      const absl::Status st = gpu->Query(r.ev);
      if (absl::IsUnavailable(st)) {
        StagingStalled(&r, "host -> device");
        continue;
      }
      r.staging = false;
      --nstaging;
      if (!st.ok()) {
        FailRecvGpu(&r, st);
      } else {
        r.done = true;
      }
    }
  }

  // Finds the posted, not yet filled slot (seq, idx); nullptr if none.
  Slot* FindSlot(uint32_t seq, uint32_t idx, Request** req) {
    Request& r = reqs[seq % kMaxRequests];
    if (!r.in_use || r.done || (r.seq & kImmSeqMask) != (seq & kImmSeqMask) ||
        idx >= static_cast<uint32_t>(r.n) || r.slots[idx].done) {
      return nullptr;
    }
    *req = &r;
    return &r.slots[idx];
  }

  // Reads into `dst` until `want` bytes are in; false when it must stop.
  bool ReadPart(void* dst, size_t want, bool* complete) {
    *complete = false;
    while (in_got < want) {
      size_t moved = 0;
      int err = 0;
      const Io io = RecvSome(fd, static_cast<uint8_t*>(dst) + in_got,
                             want - in_got, &moved, &err);
      if (io == Io::kAgain) return false;
      if (io == Io::kClosed) {
        PeerClosed();
        return false;
      }
      if (io != Io::kOk) {
        Fail(kPrismNcclRemoteError, "side channel receive failed", err);
        return false;
      }
      in_got += moved;
    }
    *complete = true;
    return true;
  }

  void ReadInput() {
    while (!failed) {
      bool complete = false;
      switch (in_state) {
        case In::kHdr:
          if (!ReadPart(&in_hdr, sizeof(in_hdr), &complete)) return;
          in_got = 0;
          if (in_hdr.type == kFrameData && mode == DataMode::kTcpInterim &&
              in_hdr.len >= sizeof(DataHeader)) {
            in_state = In::kData;
          } else if (in_hdr.type == kFrameSendError &&
                     in_hdr.len == sizeof(SendErrorBody)) {
            in_state = In::kErr;
          } else {
            ProtocolError("unexpected frame from sender");
            return;
          }
          break;
        case In::kData: {
          if (!ReadPart(&in_data, sizeof(in_data), &complete)) return;
          in_got = 0;
          Request* r = nullptr;
          Slot* s = FindSlot(in_data.seq, in_data.idx, &r);
          if (s == nullptr ||
              in_data.addr != reinterpret_cast<uintptr_t>(s->addr) ||
              in_data.rkey != s->rkey || in_data.size > s->size ||
              in_hdr.len != sizeof(DataHeader) + in_data.size) {
            ProtocolError(
                "DATA frame does not match a posted receive (not written)");
            return;
          }
          cur_req = r;
          cur_slot = s;
          s->received = in_data.size;
          if (in_data.size == 0) {
            CompleteSlot(r, s, true);
            in_state = In::kHdr;
          } else {
            in_state = In::kPayload;
          }
          break;
        }
        case In::kPayload:
          if (!ReadPart(cur_slot->addr, cur_slot->received, &complete)) {
            return;
          }
          in_got = 0;
          CompleteSlot(cur_req, cur_slot, true);
          in_state = In::kHdr;
          break;
        case In::kErr: {
          if (!ReadPart(&in_err, sizeof(in_err), &complete)) return;
          in_got = 0;
          Request* r = nullptr;
          Slot* s = FindSlot(in_err.seq, in_err.idx, &r);
          if (s == nullptr) {
            ProtocolError("send error for an unknown receive");
            return;
          }
          PRISM_NCCL_WARN(
              "dev %d: peer sent %llu bytes for a %llu-byte receive (tag %d); "
              "receive failed",
              dev, static_cast<unsigned long long>(in_err.size),
              static_cast<unsigned long long>(s->size), s->tag);
          CompleteSlot(r, s, false);
          in_state = In::kHdr;
          break;
        }
      }
    }
  }

  void Progress(bool read_side = true) {
    Flush();
#ifdef PRISM_NCCL_HAVE_ENDPOINT
    DrainInbox([this](const Completion& c) {
      if (c.type == CompletionType::kConnectionError) {
        ConnectionFailed(c, "CTS ");
        return;
      }
      if (c.type == CompletionType::kWrite) {  // a CTS WRITE was delivered
        cts_busy[c.wr_id % kMaxRequests] = false;
        if (c.status != absl::StatusCode::kOk) {
          WriteFailed(c, "CTS WRITE of", c.byte_len);
          Fail(kPrismNcclRemoteError, "CTS WRITE failed", 0);
        }
        return;
      }
      if (c.type != CompletionType::kRecvImmediate) return;
      Request* r = nullptr;
      Slot* s = FindSlot(c.immediate >> 3, c.immediate & 7, &r);
      if (s == nullptr ||
          c.remote_addr != reinterpret_cast<uintptr_t>(s->addr) ||
          c.byte_len > s->size) {
        ProtocolError("Prism WRITE does not match a posted receive");
        return;
      }
      s->received = c.byte_len;
      CompleteSlot(r, s, c.status == absl::StatusCode::kOk);
    });
#endif
    if (read_side) ReadInput();
    if (nstaging > 0) PollStaging();
    CheckPeerClosed();
  }
};

// ---------------------------------------------------------------------------
// Connection setup.
// One connection being accepted: its Hello coming in, then its Ack going
// out.
struct PendingAccept {
  int fd = -1;
  uint64_t order = 0;  // ListenComm::accepted when it was accepted
  // When it was accepted: its Hello must arrive (and its Ack go out) within
  // PluginConfig::connect_timeout_ms.
  std::chrono::steady_clock::time_point since{};
  HelloMsg hello{};
  size_t got = 0;
  bool ack_ready = false;  // Hello checked, Ack built (Prism connection made)
  HelloMsg ack{};
  size_t sent = 0;
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  DeviceEndpoint* dep = nullptr;
  ConnId conn = kInvalidConn;
#endif
};

struct ListenComm : CommBase {
  ListenComm() : CommBase(CommKind::kListen) {}
  DeviceContext dev_ctx;
  DataMode cfg_mode = DataMode::kTcpInterim;
  int sock_buf = 0;
  // Connections being accepted, each advanced on every accept() call: one
  // that never completes its Hello (a port scanner, a stray or stalled
  // client) does not hold up the others. When all are taken, a new
  // connection replaces the oldest.
  static constexpr int kMaxPending = 8;
  PendingAccept pending[kMaxPending];
  uint64_t accepted = 0;
};

struct ConnectState {
  uint32_t magic = kCommMagic;
  // Written into the handle next to the state's address (WireHandle::
  // connect_token); unique in the process (NextConnectToken).
  uint64_t token = 0;
  // The init context (v11) whose connect() started it: its finalize
  // releases it (ReleaseConnectStates); nullptr for the older tables.
  const void* owner = nullptr;
  int fd = -1;
  enum class Stage {
    kConnecting,
    kSendHello,
    kRecvAck
  } stage = Stage::kConnecting;
  // The end of the first connect() call of this handle (after the local
  // setup): the handshake must complete within
  // PluginConfig::connect_timeout_ms of it.
  std::chrono::steady_clock::time_point started =
      std::chrono::steady_clock::now();
  HelloMsg hello{};
  size_t sent = 0;
  HelloMsg ack{};
  size_t got = 0;
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  DeviceEndpoint* dep = nullptr;
  ConnId conn = kInvalidConn;
  std::unique_ptr<uint8_t[]> cts_ring;  // handed to the SendComm
  uint32_t cts_lkey = 0;
#endif
};

// The connect states this process keeps in handles between connect()
// calls, each with its token. A handle crosses processes (NCCL's bootstrap
// carries it from the listener), so its `connect_state` is followed only
// when it names one of these AND carries that state's token: a handle from
// another process, a corrupted one, or one used again after its connect
// finished is refused with a warning instead of dereferenced -- also when a
// later connect's state was allocated at the address the stale copy names
// (before 2026-12-06 the address alone was compared, so such a copy took
// over the later connect). A connect() call takes its state out of the map
// for the call's length (ConnectStateHold puts it back), so copies of one
// handle driven on two threads at once never share it: the second call is
// refused too. Guarded by g_connect_states_mu (connect() may run on several
// threads for different handles).
std::mutex g_connect_states_mu;
std::unordered_map<const ConnectState*, uint64_t> g_connect_states;

// Tokens of new connect states: a process-wide counter from a random start
// (so a handle from another process is unlikely to carry a live one), never
// 0, never repeated within the process.
uint64_t NextConnectToken() {
  static std::atomic<uint64_t> next{NewNonce() | 1};
  uint64_t t = next.fetch_add(1, std::memory_order_relaxed);
  if (t == 0) t = next.fetch_add(1, std::memory_order_relaxed);
  return t;
}

void TrackConnectState(const ConnectState* st) {
  std::lock_guard<std::mutex> lock(g_connect_states_mu);
  g_connect_states[st] = st->token;
}

enum class Take { kTaken, kUnknown, kStale };

// Takes the live connect state a handle names (its address `bits` and
// `token`) out of the map. kUnknown: no such state (none, or another call
// holds it); kStale: a live state sits at that address but it is a later
// connect's (another token) -- it stays where it is.
Take TakeConnectState(uint64_t bits, uint64_t token, ConnectState** out) {
  *out = nullptr;
  auto* st = reinterpret_cast<ConnectState*>(static_cast<uintptr_t>(bits));
  std::lock_guard<std::mutex> lock(g_connect_states_mu);
  auto it = g_connect_states.find(st);
  if (it == g_connect_states.end()) return Take::kUnknown;
  if (it->second != token) return Take::kStale;
  g_connect_states.erase(it);
  *out = st;
  return Take::kTaken;
}

// Puts the state one connect() call holds back into the set when the call
// returns, unless the call deleted it (st reset to nullptr).
struct ConnectStateHold {
  ConnectState* st = nullptr;
  ~ConnectStateHold() {
    if (st != nullptr) TrackConnectState(st);
  }
};

void DeleteConnectState(ConnectState* st) {
  {
    std::lock_guard<std::mutex> lock(g_connect_states_mu);
    g_connect_states.erase(st);
  }
  st->magic = kDeadMagic;
  delete st;
}

// Connect states released by finalize: NCCL gave up on their connect (an
// abort) after a call that returned success with a NULL comm and never
// called again.
std::atomic<uint64_t> g_abandoned_connects{0};

#ifdef PRISM_NCCL_HAVE_ENDPOINT
void PutBlob(const ConnectionBlob& b, HelloMsg* m) {
  m->info[0] = b.size;
  memcpy(m->info + 1, b.bytes, b.size);
}
absl::StatusOr<ConnectionBlob> GetBlob(const HelloMsg& m) {
  if (m.info[0] > ConnectionBlob::kMaxBytes) {
    return absl::InvalidArgumentError("connection blob too long");
  }
  return ConnectionBlob::FromBytes(
      absl::string_view(reinterpret_cast<const char*>(m.info + 1), m.info[0]));
}
// Creates the local half of a Prism connection on `dev`.
absl::StatusOr<ConnId> NewConnection(const DeviceContext& dev,
                                     DeviceEndpoint** dep) {
  auto d = DeviceEndpoint::Acquire(dev);
  if (!d.ok()) return d.status();
  auto conn = (*d)->ep()->CreateConnection();
  if (!conn.ok()) {
    (*d)->Release();
    return conn.status();
  }
  *dep = *d;
  return *conn;
}
void DropConnection(DeviceEndpoint** dep, ConnId* conn,
                    uint32_t extra_lkey = 0) {
  if (*dep == nullptr) return;
  (void)(*dep)->ep()->CloseConnection(*conn);
  if (extra_lkey != 0) (void)(*dep)->ep()->DeregisterMemory(extra_lkey);
  (*dep)->Release();
  *dep = nullptr;
  *conn = kInvalidConn;
}
#endif

// Frees a connect state nobody will advance any more: its socket, its half
// of the Prism connection and its CTS ring (deregistered first).
void ReleaseAbandoned(ConnectState* st) {
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  DropConnection(&st->dep, &st->conn, st->cts_lkey);
#endif
  CloseFd(st->fd);
  st->fd = -1;
  st->magic = kDeadMagic;
  delete st;
}

void InitCommonFromConfig(CommBase* c, const DeviceContext& dev) {
  c->mode = dev.config->mode;
  c->dev = dev.index;
}

template <typename T>
T* AsComm(void* p, CommKind kind) {
  auto* c = static_cast<CommBase*>(p);
  if (c == nullptr || c->magic != kCommMagic || c->kind != kind) {
    ++g_api_errors;
    return nullptr;
  }
  return static_cast<T*>(c);
}

}  // namespace

int SupportedPtrTypes() { return GpuInit(/*staging=*/false); }

void SetCallLog(int64_t calls) {
  g_call_log.store(calls, std::memory_order_relaxed);
}

namespace {

// Releases (ReleaseAbandoned) the connect states in the registry that
// `doomed_if` picks -- never one a connect() call holds right now, that one
// is out of the registry -- and logs and counts them ("<who>: released N
// connect(s) abandoned mid-handshake <why>").
template <typename Pred>
int ReleaseConnectStatesIf(Pred doomed_if, const char* who, const char* why) {
  std::vector<ConnectState*> doomed;
  {
    std::lock_guard<std::mutex> lock(g_connect_states_mu);
    for (auto it = g_connect_states.begin(); it != g_connect_states.end();) {
      if (doomed_if(*it->first)) {
        doomed.push_back(const_cast<ConnectState*>(it->first));
        it = g_connect_states.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Outside the registry's lock: closing a Prism connection waits for the
  // endpoint's loop thread.
  for (ConnectState* st : doomed) ReleaseAbandoned(st);
  if (!doomed.empty()) {
    const uint64_t total =
        g_abandoned_connects.fetch_add(doomed.size()) + doomed.size();
    PRISM_NCCL_INFO(
        "%s: released %zu connect(s) abandoned mid-handshake%s (socket, "
        "Prism connection, CTS ring); %llu in this process",
        who, doomed.size(), why, static_cast<unsigned long long>(total));
  }
  return static_cast<int>(doomed.size());
}

// Connects nobody has called for twice PRISM_CONNECT_TIMEOUT_MS since their
// first call: a connect still being polled fails at its own bound (once
// past it, at its next call), so only an abandoned one lives that long.
// This is what releases the abandoned connects of the v10 and older tables
// (no finalize; their init keeps the plugin's reference for good, so the
// last finalize never comes) and those of a v11 context that lives on.
// Called when a connect starts and at listen.
void ReleaseExpiredConnectStates(uint32_t timeout_ms) {
  const auto now = std::chrono::steady_clock::now();
  const auto limit = 2 * std::chrono::milliseconds(timeout_ms);
  ReleaseConnectStatesIf(
      [&](const ConnectState& st) { return now - st.started >= limit; },
      "connect", " (no call for twice PRISM_CONNECT_TIMEOUT_MS)");
}

}  // namespace

int ReleaseConnectStates(const void* owner, bool every) {
  return ReleaseConnectStatesIf(
      [&](const ConnectState& st) { return every || st.owner == owner; },
      "finalize", "");
}

PluginCounters Counters() {
  PluginCounters c;
  c.protocol_errors = g_protocol_errors.load();
  c.api_errors = g_api_errors.load();
  c.handshake_timeouts = g_handshake_timeouts.load();
  c.staging_stalls = g_staging_stalls.load();
  c.writes_refused = g_writes_refused.load();
  c.abandoned_connects = g_abandoned_connects.load();
  return c;
}

void ReleaseIdleResources() {
  // First the connects NCCL abandoned: they hold endpoint references.
  ReleaseConnectStates(nullptr, /*every=*/true);
  const PluginCounters c = Counters();
  PRISM_NCCL_INFO(
      "rejected so far: %llu protocol errors, %llu API misuses, %llu "
      "handshake timeouts; %llu staged GPU copies reported stalled; %llu "
      "Prism WRITEs refused for a full queue and tried again; %llu "
      "connects abandoned mid-handshake released",
      static_cast<unsigned long long>(c.protocol_errors),
      static_cast<unsigned long long>(c.api_errors),
      static_cast<unsigned long long>(c.handshake_timeouts),
      static_cast<unsigned long long>(c.staging_stalls),
      static_cast<unsigned long long>(c.writes_refused),
      static_cast<unsigned long long>(c.abandoned_connects));
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  DeviceEndpoint::ReleaseIdleEndpoints();
#endif
}

PrismNcclResult Listen(const DeviceContext& dev, void* handle,
                       void** listen_comm) {
  if (handle == nullptr || listen_comm == nullptr) {
    return kPrismNcclInvalidArgument;
  }
  *listen_comm = nullptr;
  ReleaseExpiredConnectStates(dev.config->connect_timeout_ms);
  sockaddr_storage bound{};
  socklen_t bound_len = 0;
  auto fd =
      TcpListen(dev.device->addr, dev.device->addr_len, &bound, &bound_len);
  if (!fd.ok()) {
    PRISM_NCCL_WARN("listen on %s (%s) failed: %s", dev.device->name.c_str(),
                    AddrToString(dev.device->addr).c_str(),
                    std::string(fd.status().message()).c_str());
    return kPrismNcclSystemError;
  }
  auto* l = new (std::nothrow) ListenComm();
  if (l == nullptr) {
    CloseFd(*fd);
    return kPrismNcclSystemError;
  }
  InitCommonFromConfig(l, dev);
  l->fd = *fd;
  l->dev_ctx = dev;
  l->sock_buf = dev.config->sock_buf_bytes;
  l->nonce = NewNonce();

  WireHandle h;
  memset(&h, 0, sizeof(h));
  h.magic = kHandleMagic;
  h.version = kProtoVersion;
  h.family = bound.ss_family;
  h.dev = static_cast<uint16_t>(dev.index);
  h.mode = static_cast<uint32_t>(l->mode);
  h.nonce = l->nonce;
  if (bound.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&bound);
    h.port = a->sin_port;
    memcpy(h.addr, &a->sin_addr, 4);
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&bound);
    h.port = a->sin6_port;
    memcpy(h.addr, &a->sin6_addr, 16);
  }
  memset(handle, 0, kPrismNcclHandleMaxSize);
  memcpy(handle, &h, sizeof(h));
  PRISM_NCCL_INFO("dev %d listening on %s port %u (data path %s)", dev.index,
                  AddrToString(bound).c_str(), ntohs(h.port),
                  DataModeName(l->mode));
  *listen_comm = static_cast<CommBase*>(l);
  return kPrismNcclSuccess;
}

PrismNcclResult Connect(const DeviceContext& dev, void* handle,
                        void** send_comm, const void* owner) {
  if (handle == nullptr || send_comm == nullptr) {
    return kPrismNcclInvalidArgument;
  }
  *send_comm = nullptr;
  WireHandle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kHandleMagic || h.version != kProtoVersion) {
    ++g_api_errors;
    PRISM_NCCL_WARN(
        "connect: handle is not a Prism listen handle (magic "
        "0x%08x version %u)",
        h.magic, h.version);
    return kPrismNcclInvalidArgument;
  }
  if (h.mode != static_cast<uint32_t>(dev.config->mode)) {
    PRISM_NCCL_WARN(
        "connect: peer uses data path %s, this process %s; set "
        "the same PRISM_DATAPATH everywhere",
        DataModeName(static_cast<DataMode>(h.mode)),
        DataModeName(dev.config->mode));
    return kPrismNcclInvalidUsage;
  }
  ConnectState* st = nullptr;
  ConnectStateHold hold;
  if (h.connect_state != 0) {
    const Take took = TakeConnectState(h.connect_state, h.connect_token, &st);
    if (took == Take::kStale) {
      ++g_api_errors;
      PRISM_NCCL_WARN(
          "connect: stale handle refused: it names connect state 0x%llx with "
          "token %llu, but the connect in progress there now is a later one "
          "(another token); the handle's own connect has finished and its "
          "state's memory was reused (a copy of a handle used again after "
          "its connect completed, failed or was released)",
          static_cast<unsigned long long>(h.connect_state),
          static_cast<unsigned long long>(h.connect_token));
      return kPrismNcclInvalidArgument;
    }
    if (took != Take::kTaken) {
      ++g_api_errors;
      PRISM_NCCL_WARN(
          "connect: the handle names a connect in progress (0x%llx) that this "
          "process did not start, has finished, or is advancing in another "
          "call right now (a handle from another process, a corrupted one, "
          "one used again after its connect completed, or copies of one "
          "handle driven on two threads)",
          static_cast<unsigned long long>(h.connect_state));
      return kPrismNcclInvalidArgument;
    }
    hold.st = st;
  }
  auto save = [&](ConnectState* s) {
    h.connect_state = reinterpret_cast<uintptr_t>(s);
    h.connect_token = s != nullptr ? s->token : 0;
    memcpy(handle, &h, sizeof(h));
  };
  auto fail = [&](const char* what, int err) {
    PRISM_NCCL_WARN("connect dev %d: %s%s%s", dev.index, what, err ? ": " : "",
                    err ? strerror(err) : "");
    if (st != nullptr) {
#ifdef PRISM_NCCL_HAVE_ENDPOINT
      DropConnection(&st->dep, &st->conn, st->cts_lkey);
#endif
      CloseFd(st->fd);
      DeleteConnectState(st);
      hold.st = nullptr;
    }
    save(nullptr);
    return kPrismNcclRemoteError;
  };
  if (st == nullptr) {
    ReleaseExpiredConnectStates(dev.config->connect_timeout_ms);
    sockaddr_storage peer{};
    socklen_t len = 0;
    if (h.family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&peer);
      a->sin_family = AF_INET;
      a->sin_port = h.port;
      memcpy(&a->sin_addr, h.addr, 4);
      len = sizeof(sockaddr_in);
    } else if (h.family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&peer);
      a->sin6_family = AF_INET6;
      a->sin6_port = h.port;
      memcpy(&a->sin6_addr, h.addr, 16);
      len = sizeof(sockaddr_in6);
    } else {
      ++g_api_errors;
      PRISM_NCCL_WARN(
          "connect: the handle names address family %u (neither IPv4 nor "
          "IPv6): a corrupted handle",
          static_cast<unsigned>(h.family));
      return kPrismNcclInvalidArgument;
    }
    auto fd = TcpConnectStart(peer, len, dev.config->sock_buf_bytes);
    if (!fd.ok()) {
      PRISM_NCCL_WARN("connect to %s port %u: %s", AddrToString(peer).c_str(),
                      ntohs(h.port),
                      std::string(fd.status().message()).c_str());
      return kPrismNcclRemoteError;
    }
    st = new (std::nothrow) ConnectState();
    if (st == nullptr) {
      CloseFd(*fd);
      return kPrismNcclSystemError;
    }
    st->fd = *fd;
    st->owner = owner;
    st->token = NextConnectToken();
    st->hello.magic = kHelloMagic;
    st->hello.version = kProtoVersion;
    st->hello.nonce = h.nonce;
    st->hello.mode = h.mode;
#ifdef PRISM_NCCL_HAVE_ENDPOINT
    if (IsPrismMode(dev.config->mode)) {
      auto conn = NewConnection(dev, &st->dep);
      absl::StatusOr<ConnectionBlob> blob =
          conn.ok() ? st->dep->ep()->LocalInfo(*conn) : conn.status();
      if (conn.ok()) st->conn = *conn;
      // The CTS ring the receiver WRITEs into (see SendComm::TakeCts).
      absl::StatusOr<MemoryRegion> ring =
          absl::ResourceExhaustedError("out of memory");
      if (!blob.ok()) {
        ring = blob.status();
      } else {
        st->cts_ring.reset(new (std::nothrow) uint8_t[kCtsRingBytes]());
        if (st->cts_ring != nullptr) {
          ring =
              st->dep->ep()->RegisterMemory(st->cts_ring.get(), kCtsRingBytes,
                                            kAccessLocal | kAccessRemoteWrite);
        }
      }
      if (!ring.ok()) {
        PRISM_NCCL_WARN("connect dev %d: Prism connection: %s", dev.index,
                        std::string(ring.status().message()).c_str());
        DropConnection(&st->dep, &st->conn);
        CloseFd(st->fd);
        delete st;
        return kPrismNcclSystemError;
      }
      st->cts_lkey = ring->lkey;
      st->hello.cts_addr = reinterpret_cast<uintptr_t>(st->cts_ring.get());
      st->hello.cts_rkey = ring->rkey;
      st->hello.cts_slots = kMaxRequests;
      PutBlob(*blob, &st->hello);
    }
#endif
    // The bound counts from here, not from the call's start: the first
    // connect() of a device also creates its endpoint (hundreds of
    // milliseconds under the sanitizers), which is not waiting for the peer.
    st->started = std::chrono::steady_clock::now();
    hold.st = st;  // tracked from the call's return on
    save(st);
  } else if (st->magic != kCommMagic) {
    ++g_api_errors;
    return kPrismNcclInvalidArgument;
  }

  // Nothing more to do now: success with a NULL comm, NCCL calls again --
  // unless the handshake has taken longer than PRISM_CONNECT_TIMEOUT_MS
  // (a listener that accepted the TCP connection but never answers, or a
  // TCP connect nobody answers): then connect fails instead of letting
  // NCCL poll forever. Before 2026-12-05 there was no bound.
  auto again = [&]() -> PrismNcclResult {
    const auto waited = std::chrono::steady_clock::now() - st->started;
    const auto limit =
        std::chrono::milliseconds(dev.config->connect_timeout_ms);
    if (waited < limit) return kPrismNcclSuccess;
    const uint64_t n = ++g_handshake_timeouts;
    const char* stage =
        st->stage == ConnectState::Stage::kConnecting  ? "the TCP connect"
        : st->stage == ConnectState::Stage::kSendHello ? "sending the hello"
                                                       : "the ack";
    char what[256];
    snprintf(what, sizeof(what),
             "timed out after %u ms waiting for %s (%zu of %zu ack bytes "
             "received) from the listener at port %u "
             "(PRISM_CONNECT_TIMEOUT_MS); handshake timeouts in this "
             "process: %llu",
             dev.config->connect_timeout_ms, stage, st->got, sizeof(HelloMsg),
             ntohs(h.port), static_cast<unsigned long long>(n));
    return fail(what, 0);
  };
  int err = 0;
  if (st->stage == ConnectState::Stage::kConnecting) {
    const Io io = TcpConnectPoll(st->fd, &err);
    if (io == Io::kAgain) return again();
    if (io != Io::kOk) return fail("TCP connect failed", err);
    st->stage = ConnectState::Stage::kSendHello;
  }
  if (st->stage == ConnectState::Stage::kSendHello) {
    while (st->sent < sizeof(HelloMsg)) {
      size_t moved = 0;
      const Io io =
          SendSome(st->fd, reinterpret_cast<uint8_t*>(&st->hello) + st->sent,
                   sizeof(HelloMsg) - st->sent, &moved, &err);
      if (io == Io::kAgain) return again();
      if (io != Io::kOk) return fail("sending hello failed", err);
      st->sent += moved;
    }
    st->stage = ConnectState::Stage::kRecvAck;
  }
  while (st->got < sizeof(HelloMsg)) {
    size_t moved = 0;
    const Io io =
        RecvSome(st->fd, reinterpret_cast<uint8_t*>(&st->ack) + st->got,
                 sizeof(HelloMsg) - st->got, &moved, &err);
    if (io == Io::kAgain) return again();
    if (io != Io::kOk) {
      return fail(io == Io::kClosed ? "listener closed the connection"
                                    : "receiving ack failed",
                  err);
    }
    st->got += moved;
  }
  // The Ack must echo this handle's protocol version, nonce and data path
  // (before, only the magic and nonce were checked: an Ack of another
  // version or data path was taken, its blob read as this one's).
  if (st->ack.magic != kHelloMagic || st->ack.version != kProtoVersion ||
      st->ack.nonce != h.nonce || st->ack.mode != h.mode) {
    ++g_protocol_errors;
    PRISM_NCCL_WARN(
        "connect dev %d: the ack is not from this handle's listener (magic "
        "0x%08x version %u mode %u nonce %016llx; expected version %u mode "
        "%u)",
        dev.index, st->ack.magic, st->ack.version, st->ack.mode,
        static_cast<unsigned long long>(st->ack.nonce), kProtoVersion, h.mode);
    return fail("malformed ack", 0);
  }
  if (st->ack.status != 0) {
    ++g_protocol_errors;
    return fail("listener rejected the connection", 0);
  }
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  if (st->dep != nullptr) {
    auto blob = GetBlob(st->ack);
    absl::Status cs =
        blob.ok() ? st->dep->ep()->Connect(st->conn, *blob) : blob.status();
    if (!cs.ok()) {
      PRISM_NCCL_WARN("connect dev %d: Prism Connect: %s", dev.index,
                      std::string(cs.message()).c_str());
      return fail("bad connection info from the listener", 0);
    }
  }
#endif
  auto* s = new (std::nothrow) SendComm();
  if (s == nullptr) return fail("out of memory", 0);
  InitCommonFromConfig(s, dev);
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  s->dep = st->dep;
  s->conn = st->conn;
  s->cts_ring = std::move(st->cts_ring);
  s->cts_ring_lkey = st->cts_lkey;
  st->dep = nullptr;
  if (s->dep != nullptr) s->dep->AddRoute(s->conn, s);
#endif
  s->fd = st->fd;
  s->nonce = h.nonce;
  s->rng.Seed(h.nonce ^ 0x5345u);
  st->fd = -1;
  DeleteConnectState(st);
  hold.st = nullptr;
  save(nullptr);
  PRISM_NCCL_TRACE("dev %d connected (nonce %016llx)", dev.index,
                   static_cast<unsigned long long>(h.nonce));
  *send_comm = static_cast<CommBase*>(s);
  return kPrismNcclSuccess;
}

namespace {

// Closes a connection being accepted and frees its slot.
void ResetPending(PendingAccept* p) {
  CloseFd(p->fd);
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  DropConnection(&p->dep, &p->conn);
#endif
  *p = PendingAccept();
}

// Drops a connection being accepted whose peer misbehaved or went away.
void DropPending(ListenComm* l, PendingAccept* p, const char* what) {
  ++g_protocol_errors;
  PRISM_NCCL_WARN("accept dev %d: dropped a connection: %s", l->dev, what);
  ResetPending(p);
}

// Drops p when its handshake has taken longer than PRISM_CONNECT_TIMEOUT_MS
// (a client that connected and stalled before finishing its Hello, or that
// does not read its Ack): its socket and Prism connection are released
// instead of being held until eight newer connections evict it. True when
// dropped.
bool ExpirePending(ListenComm* l, PendingAccept* p,
                   std::chrono::steady_clock::time_point now) {
  const uint32_t limit_ms = l->dev_ctx.config->connect_timeout_ms;
  if (now - p->since < std::chrono::milliseconds(limit_ms)) return false;
  const uint64_t n = ++g_handshake_timeouts;
  PRISM_NCCL_WARN(
      "accept dev %d: dropped a connection: handshake timed out after %u ms "
      "(%zu of %zu hello bytes received, %zu of %zu ack bytes sent; "
      "PRISM_CONNECT_TIMEOUT_MS); handshake timeouts in this process: %llu",
      l->dev, limit_ms, p->got, sizeof(HelloMsg), p->sent, sizeof(HelloMsg),
      static_cast<unsigned long long>(n));
  ResetPending(p);
  return true;
}

enum class AcceptStep { kWaiting, kDropped, kReady, kError };

// Reads p's Hello, checks it, builds and sends the Ack. kReady: the Ack is
// out, p is ready to become a recv comm. kError: *result says why (p stays,
// to be retried by the next call).
AcceptStep AdvancePending(ListenComm* l, PendingAccept* p,
                          PrismNcclResult* result) {
  int err = 0;
  while (p->got < sizeof(HelloMsg)) {
    size_t moved = 0;
    const Io io =
        RecvSome(p->fd, reinterpret_cast<uint8_t*>(&p->hello) + p->got,
                 sizeof(HelloMsg) - p->got, &moved, &err);
    if (io == Io::kAgain) return AcceptStep::kWaiting;
    if (io != Io::kOk) {
      DropPending(l, p, "closed before hello");
      return AcceptStep::kDropped;
    }
    p->got += moved;
  }
  if (!p->ack_ready) {
    if (p->hello.magic != kHelloMagic || p->hello.version != kProtoVersion ||
        p->hello.nonce != l->nonce ||
        p->hello.mode != static_cast<uint32_t>(l->mode)) {
      DropPending(l, p, "hello does not match this listener");
      return AcceptStep::kDropped;
    }
    p->ack = HelloMsg();
    p->ack.magic = kHelloMagic;
    p->ack.version = kProtoVersion;
    p->ack.nonce = l->nonce;
    p->ack.mode = p->hello.mode;
    p->ack.status = 0;
#ifdef PRISM_NCCL_HAVE_ENDPOINT
    if (IsPrismMode(l->mode)) {
      if (p->hello.cts_slots != static_cast<uint32_t>(kMaxRequests) ||
          p->hello.cts_addr == 0 || p->hello.cts_rkey == 0) {
        DropPending(l, p, "no CTS ring in the hello");
        return AcceptStep::kDropped;
      }
      auto conn = NewConnection(l->dev_ctx, &p->dep);
      if (!conn.ok()) {
        PRISM_NCCL_WARN("accept dev %d: Prism connection: %s", l->dev,
                        std::string(conn.status().message()).c_str());
        *result = kPrismNcclSystemError;
        return AcceptStep::kError;
      }
      p->conn = *conn;
      auto theirs = GetBlob(p->hello);
      absl::Status cs =
          theirs.ok() ? p->dep->ep()->Connect(*conn, *theirs) : theirs.status();
      auto mine = p->dep->ep()->LocalInfo(*conn);
      if (!cs.ok() || !mine.ok()) {
        DropPending(l, p, "bad connection info from the connecting peer");
        return AcceptStep::kDropped;
      }
      PutBlob(*mine, &p->ack);
    }
#endif
    p->ack_ready = true;
  }
  while (p->sent < sizeof(HelloMsg)) {
    size_t moved = 0;
    const Io io = SendSome(p->fd, reinterpret_cast<uint8_t*>(&p->ack) + p->sent,
                           sizeof(HelloMsg) - p->sent, &moved, &err);
    if (io == Io::kAgain) return AcceptStep::kWaiting;
    if (io != Io::kOk) {
      DropPending(l, p, "closed before ack");
      return AcceptStep::kDropped;
    }
    p->sent += moved;
  }
  return AcceptStep::kReady;
}

// Turns the acknowledged connection p into a recv comm.
PrismNcclResult FinishAccept(ListenComm* l, PendingAccept* p,
                             void** recv_comm) {
  auto* r = new (std::nothrow) RecvComm();
  if (r == nullptr) return kPrismNcclSystemError;
  r->mode = l->mode;
  r->dev = l->dev;
  r->fd = p->fd;
  r->nonce = l->nonce;
  r->rng.Seed(l->nonce ^ 0x5245u);
  p->fd = -1;
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  r->dep = p->dep;
  r->conn = p->conn;
  p->dep = nullptr;
  p->conn = kInvalidConn;
  if (r->dep != nullptr) {
    // The CTS WRITEs' source (RecvComm::out) and the sender's ring.
    auto src =
        r->dep->ep()->RegisterMemory(r->out, sizeof(r->out), kAccessLocal);
    if (!src.ok()) {
      PRISM_NCCL_WARN("accept dev %d: CTS buffer: %s", l->dev,
                      std::string(src.status().message()).c_str());
      CloseFd(r->fd);
      r->ReleaseConnection();
      r->magic = kDeadMagic;
      delete r;
      ResetPending(p);
      return kPrismNcclSystemError;
    }
    r->cts_src_lkey = src->lkey;
    r->cts_remote_addr = p->hello.cts_addr;
    r->cts_remote_rkey = p->hello.cts_rkey;
    r->dep->AddRoute(r->conn, r);
  }
#endif
  ResetPending(p);
  *recv_comm = static_cast<CommBase*>(r);
  return kPrismNcclSuccess;
}

}  // namespace

PrismNcclResult Accept(void* listen_comm, void** recv_comm) {
  if (recv_comm == nullptr) return kPrismNcclInvalidArgument;
  *recv_comm = nullptr;
  auto* l = AsComm<ListenComm>(listen_comm, CommKind::kListen);
  if (l == nullptr) return kPrismNcclInvalidArgument;
  std::lock_guard<std::mutex> lock(l->mu);
  const auto now = std::chrono::steady_clock::now();
  for (;;) {
    for (PendingAccept& p : l->pending) {
      if (p.fd < 0) continue;
      PrismNcclResult result = kPrismNcclSuccess;
      const AcceptStep step = AdvancePending(l, &p, &result);
      if (step == AcceptStep::kError) return result;
      if (step == AcceptStep::kReady) return FinishAccept(l, &p, recv_comm);
      if (step == AcceptStep::kWaiting) ExpirePending(l, &p, now);
    }
    Io io;
    int err = 0;
    const int fd = TcpAccept(l->fd, l->sock_buf, &io, &err);
    if (fd < 0) {
      if (io == Io::kAgain) return kPrismNcclSuccess;
      PRISM_NCCL_WARN("accept failed: %s", strerror(err));
      return kPrismNcclSystemError;
    }
    PendingAccept* slot = nullptr;
    PendingAccept* oldest = nullptr;
    for (PendingAccept& p : l->pending) {
      if (p.fd < 0) {
        slot = &p;
        break;
      }
      if (oldest == nullptr || p.order < oldest->order) oldest = &p;
    }
    if (slot == nullptr) {
      DropPending(l, oldest,
                  "evicted: too many connections waiting for their hello "
                  "(the oldest goes)");
      slot = oldest;
    }
    slot->fd = fd;
    slot->order = ++l->accepted;
    slot->since = now;
  }
}

PrismNcclResult CloseListen(void* listen_comm) {
  auto* l = AsComm<ListenComm>(listen_comm, CommKind::kListen);
  if (l == nullptr) return kPrismNcclInvalidArgument;
  for (PendingAccept& p : l->pending) ResetPending(&p);
  CloseFd(l->fd);
  l->magic = kDeadMagic;
  delete l;
  return kPrismNcclSuccess;
}

PrismNcclResult CloseSend(void* send_comm) {
  auto* s = AsComm<SendComm>(send_comm, CommKind::kSend);
  if (s == nullptr) return kPrismNcclInvalidArgument;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    CloseFd(s->fd);
    s->fd = -1;
    PRISM_NCCL_INFO(
        "dev %d send comm closed: %llu requests done (%llu failed), %llu "
        "bytes sent; %llu CTS through Prism, %llu CTS and %llu bytes on the "
        "side channel after the handshake; %llu WRITEs refused for a full "
        "queue and tried again%s",
        s->dev, static_cast<unsigned long long>(s->requests_done),
        static_cast<unsigned long long>(s->requests_failed),
        static_cast<unsigned long long>(s->bytes_done),
        static_cast<unsigned long long>(s->cts_via_prism),
        static_cast<unsigned long long>(s->cts_via_side),
        static_cast<unsigned long long>(s->side_rx_bytes),
        static_cast<unsigned long long>(s->writes_refused),
        s->ConnectionFigures().c_str());
#ifdef PRISM_NCCL_HAVE_ENDPOINT
    // Deregistered after the connection is closed (ReleaseConnection).
    if (s->cts_ring_lkey != 0) s->deferred_lkeys.push_back(s->cts_ring_lkey);
#endif
    s->ReleaseConnection();
    s->ReleaseGpu(s->reqs, SendComm::kPool);
    if (s->live_mrs != 0) {
      PRISM_NCCL_INFO("closeSend with %d registrations left", s->live_mrs);
    }
  }
  s->magic = kDeadMagic;
  delete s;
  return kPrismNcclSuccess;
}

PrismNcclResult CloseRecv(void* recv_comm) {
  auto* r = AsComm<RecvComm>(recv_comm, CommKind::kRecv);
  if (r == nullptr) return kPrismNcclInvalidArgument;
  {
    std::lock_guard<std::mutex> lock(r->mu);
    CloseFd(r->fd);
    r->fd = -1;
    PRISM_NCCL_INFO(
        "dev %d recv comm closed: %llu requests done (%llu failed), %llu "
        "bytes received; %llu CTS WRITEs refused for a full queue and tried "
        "again%s",
        r->dev, static_cast<unsigned long long>(r->requests_done),
        static_cast<unsigned long long>(r->requests_failed),
        static_cast<unsigned long long>(r->bytes_done),
        static_cast<unsigned long long>(r->writes_refused),
        r->ConnectionFigures().c_str());
#ifdef PRISM_NCCL_HAVE_ENDPOINT
    if (r->cts_src_lkey != 0) r->deferred_lkeys.push_back(r->cts_src_lkey);
#endif
    r->ReleaseConnection();
    r->ReleaseGpu(r->reqs, kMaxRequests);
    if (r->live_mrs != 0) {
      PRISM_NCCL_INFO("closeRecv with %d registrations left", r->live_mrs);
    }
  }
  r->magic = kDeadMagic;
  delete r;
  return kPrismNcclSuccess;
}

// ---------------------------------------------------------------------------
// Memory.
PrismNcclResult RegMr(void* comm, void* data, size_t size, int type,
                      void** mhandle) {
  if (mhandle == nullptr) return kPrismNcclInvalidArgument;
  *mhandle = nullptr;
  auto* c = static_cast<CommBase*>(comm);
  if (c == nullptr || c->magic != kCommMagic || c->kind == CommKind::kListen) {
    ++g_api_errors;
    return kPrismNcclInvalidArgument;
  }
  const int supported = SupportedPtrTypes();
  if ((type != kPrismNcclPtrHost && type != kPrismNcclPtrCuda) ||
      (type & supported) == 0 ||
      (type == kPrismNcclPtrCuda && c->gpu == nullptr)) {
    ++g_api_errors;
    PRISM_NCCL_WARN(
        "regMr: pointer type %d not supported (supported mask "
        "%d)",
        type, supported);
    return kPrismNcclInvalidArgument;
  }
  if (data == nullptr && size > 0) return kPrismNcclInvalidArgument;
  auto* mh = new (std::nothrow) MemHandle();
  if (mh == nullptr) return kPrismNcclSystemError;
  std::lock_guard<std::mutex> lock(c->mu);
  uint8_t* host = static_cast<uint8_t*>(data);
  if (type == kPrismNcclPtrCuda && size > 0) {
    // Device memory: the data path uses a pinned host mirror (gpu.h).
    absl::Status st = c->gpu->CheckDevicePointer(data, size);
    if (st.ok()) st = c->EnsureStream();
    absl::StatusOr<void*> mirror =
        st.ok() ? c->gpu->AllocPinned(size) : absl::StatusOr<void*>(st);
    if (!mirror.ok()) {
      ++g_api_errors;
      PRISM_NCCL_WARN("regMr %p +%zu (CUDA): %s", data, size,
                      std::string(mirror.status().message()).c_str());
      delete mh;
      return kPrismNcclInvalidArgument;
    }
    host = static_cast<uint8_t*>(*mirror);
  }
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  if (c->dep != nullptr && size > 0) {
    // Only a receive buffer is written by the peer; a send buffer is only
    // read here, so its registration gives the peer no key to write with.
    const uint32_t access = c->kind == CommKind::kRecv
                                ? kAccessLocal | kAccessRemoteWrite
                                : kAccessLocal;
    auto mr = c->dep->ep()->RegisterMemory(host, size, access);
    if (!mr.ok()) {
      PRISM_NCCL_WARN("regMr %p +%zu: %s", data, size,
                      std::string(mr.status().message()).c_str());
      if (host != data) c->gpu->FreePinned(host);
      delete mh;
      return kPrismNcclSystemError;
    }
    mh->lkey = mr->lkey;
    mh->rkey = mr->rkey;
  }
#endif
  mh->comm = c;
  mh->addr = static_cast<uint8_t*>(data);
  mh->host = host;
  mh->size = size;
  mh->type = type;
  if (mh->lkey == 0) mh->rkey = c->rng.Next32() | 1u;
  ++c->live_mrs;
  *mhandle = mh;
  PRISM_NCCL_CALL("%p regMr %p +%zu type %d -> mh %p (data path at %p)", comm,
                  data, size, type, static_cast<void*>(mh),
                  static_cast<void*>(host));
  return kPrismNcclSuccess;
}

PrismNcclResult DeregMr(void* comm, void* mhandle) {
  auto* c = static_cast<CommBase*>(comm);
  auto* mh = static_cast<MemHandle*>(mhandle);
  if (c == nullptr || c->magic != kCommMagic || mh == nullptr ||
      mh->magic != kMrMagic || mh->comm != c) {
    ++g_api_errors;
    return kPrismNcclInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(c->mu);
  bool deferred = false;
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  if (c->dep != nullptr && mh->lkey != 0) {
    if (absl::Status s = c->dep->ep()->DeregisterMemory(mh->lkey); !s.ok()) {
      // Still the source of WRITEs in flight (NCCL is tearing down with
      // requests outstanding): deregister after the connection is closed.
      PRISM_NCCL_INFO("deregMr deferred to close: %s",
                      std::string(s.message()).c_str());
      c->deferred_lkeys.push_back(mh->lkey);
      deferred = true;
    }
  }
#endif
  if (mh->host != mh->addr) {
    // A mirror may still be read or written (a WRITE, a side-channel send
    // or a copy of an outstanding request): then it is freed at close.
    if (deferred || c->HasOutstanding()) {
      c->deferred_mirrors.push_back(mh->host);
    } else {
      c->gpu->FreePinned(mh->host);
    }
  }
  --c->live_mrs;
  mh->magic = kDeadMagic;
  delete mh;
  return kPrismNcclSuccess;
}

// ---------------------------------------------------------------------------
// Data.
PrismNcclResult Isend(void* send_comm, void* data, size_t size, int tag,
                      void* mhandle, void** request) {
  if (request == nullptr) return kPrismNcclInvalidArgument;
  *request = nullptr;
  auto* s = AsComm<SendComm>(send_comm, CommKind::kSend);
  if (s == nullptr) return kPrismNcclInvalidArgument;
  std::lock_guard<std::mutex> lock(s->mu);
  const MemHandle* mh = nullptr;
  if (PrismNcclResult r = CheckBuffer(s, data, size, mhandle, &mh);
      r != kPrismNcclSuccess) {
    return r;
  }
  // The CTS comes from the endpoint's completions on the Prism data paths.
  s->Progress(s->ReadSideNow());
  if (s->failed) return s->failure;
  SendComm::CtsGroup& g = s->cts[s->next_send_seq % kMaxRequests];
  if (!g.valid || g.seq != s->next_send_seq) {
    s->Again(1, "isend: no CTS yet", s->next_send_seq);
    return kPrismNcclSuccess;
  }
  int idx = -1;
  for (int i = 0; i < g.n; ++i) {
    if (!g.matched[i] && g.e[i].tag == tag) {
      idx = i;
      break;
    }
  }
  if (idx < 0) {  // that tag's receive not posted
    s->Again(2, "isend: tag not in the oldest CTS", g.seq);
    return kPrismNcclSuccess;
  }
  if (s->nfree == 0 || s->out_count == SendComm::kOutCap) {
    s->Again(3, "isend: no free request", g.seq);
    return kPrismNcclSuccess;
  }
  const CtsEntry& e = g.e[idx];
  Request* req = s->Alloc();
  req->size = size;
  req->staging = false;
  FrameHeader fh{};
  // Device memory: copy it to its host mirror first (gpu.h).
  const uint8_t* src = HostAddr(mh, data);
  const bool staged = size > 0 && size <= e.size && src != data;
  if (staged) {
    if (absl::Status st = s->StartCopy(req, const_cast<uint8_t*>(src), data,
                                       size, /*to_device=*/false);
        !st.ok()) {
      s->Free(req);
      s->FailGpu(st);
      return s->failure;
    }
    req->BeginStaging();
  }
  if (size > e.size) {
    ++g_api_errors;
    PRISM_NCCL_WARN(
        "isend: %zu bytes (tag %d) exceed the posted receive of %llu bytes; "
        "the send fails",
        size, tag, static_cast<unsigned long long>(e.size));
    req->done = true;
    req->result = kPrismNcclInvalidUsage;
    SendComm::OutItem* it = s->PushOut();
    SendErrorBody eb{g.seq, static_cast<uint32_t>(idx), size};
    fh.type = kFrameSendError;
    fh.len = sizeof(eb);
    memcpy(it->hdr, &fh, sizeof(fh));
    memcpy(it->hdr + sizeof(fh), &eb, sizeof(eb));
    it->hdr_len = sizeof(fh) + sizeof(eb);
  } else if (s->mode == DataMode::kTcpInterim) {
    // INTERIM data path: the payload follows on the side-channel socket.
    SendComm::OutItem* it = s->PushOut();
    DataHeader dh{g.seq, static_cast<uint32_t>(idx), e.addr, size, e.rkey, 0};
    fh.type = kFrameData;
    fh.len = sizeof(dh) + size;
    memcpy(it->hdr, &fh, sizeof(fh));
    memcpy(it->hdr + sizeof(fh), &dh, sizeof(dh));
    it->hdr_len = sizeof(fh) + sizeof(dh);
    it->payload = src;  // Flush waits for a staged payload's copy
    it->payload_len = size;
    it->req = req;
  } else {
#ifdef PRISM_NCCL_HAVE_ENDPOINT
    // Prism WRITE-with-immediate straight into the posted buffer.
    req->src = src;
    req->lkey = mh != nullptr ? mh->lkey : 0;
    req->remote_addr = e.addr;
    req->rkey = e.rkey;
    req->imm = MakeImmediate(g.seq, static_cast<uint32_t>(idx));
    if (staged || s->pend_count > 0) {
      // Posted by Progress once the copy (and every earlier one) is done.
      s->pend[(s->pend_head + s->pend_count) % SendComm::kPool] = req;
      ++s->pend_count;
    } else {
      WriteRequest wr;
      wr.wr_id = (static_cast<uint64_t>(req->gen) << 16) |
                 static_cast<uint64_t>(req - s->reqs);
      wr.local_addr = src;
      wr.length = size;
      wr.lkey = req->lkey;
      wr.remote_addr = e.addr;
      wr.rkey = e.rkey;
      wr.has_immediate = true;
      wr.immediate = req->imm;
      const absl::Status st = s->dep->ep()->PostWrite(s->conn, wr);
      if (!st.ok()) {
        // Nothing consumed: the CTS entry stays unmatched for the retry.
        s->Free(req);
        if (absl::IsResourceExhausted(st)) {
          s->WriteRefused();
          s->Again(4, "isend: Prism send queue full", g.seq);
          return kPrismNcclSuccess;
        }
        return s->FailWrite(st, size);
      }
    }
#else
    s->Free(req);
    return kPrismNcclInternalError;
#endif
  }
  s->again = 0;
  PRISM_NCCL_CALL(
      "%p isend %p %zu B tag %d -> CTS %u[%d] (%llu B at %llx)%s req %p",
      send_comm, data, size, tag, g.seq, idx,
      static_cast<unsigned long long>(e.size),
      static_cast<unsigned long long>(e.addr), staged ? " staged" : "",
      static_cast<void*>(req));
  g.matched[idx] = true;
  if (++g.nmatched == g.n) {
    g.valid = false;
    ++s->next_send_seq;
  }
  s->Flush();
  *request = req;
  return kPrismNcclSuccess;
}

PrismNcclResult Irecv(void* recv_comm, int n, void** data, const size_t* sizes,
                      const int* tags, void** mhandles, void** request) {
  if (request == nullptr) return kPrismNcclInvalidArgument;
  *request = nullptr;  // overwrites NCCL's (void*)0x1 preset
  auto* rc = AsComm<RecvComm>(recv_comm, CommKind::kRecv);
  if (rc == nullptr) return kPrismNcclInvalidArgument;
  if (n < 1 || n > kMaxRecvs || data == nullptr || sizes == nullptr ||
      tags == nullptr || mhandles == nullptr) {
    ++g_api_errors;
    PRISM_NCCL_WARN("irecv: bad arguments (n=%d, max %d)", n, kMaxRecvs);
    return kPrismNcclInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(rc->mu);
  if (rc->failed) return rc->failure;
  for (int i = 0; i < n; ++i) {
    const MemHandle* mh = nullptr;
    if (PrismNcclResult r =
            CheckBuffer(rc, data[i], sizes[i], mhandles[i], &mh);
        r != kPrismNcclSuccess) {
      return r;
    }
  }
  Request& req = rc->reqs[rc->next_seq % kMaxRequests];
  if (req.in_use || rc->out_count == kMaxRequests ||
      rc->cts_busy[rc->next_seq % kMaxRequests]) {
    rc->Again(req.in_use ? 5 : 6,
              req.in_use ? "irecv: 32 receives outstanding"
                         : "irecv: previous CTS from this slot unacknowledged",
              rc->next_seq);
    rc->Progress(rc->ReadSideNow());
    return rc->failed ? rc->failure : kPrismNcclSuccess;  // try again
  }
  req.in_use = true;
  req.done = false;
  req.result = kPrismNcclSuccess;
  req.seq = rc->next_seq;
  req.n = n;
  req.ndone = 0;
  req.staging = false;
  RecvComm::CtsOut& o = rc->out[(rc->out_head + rc->out_count) % kMaxRequests];
  CtsBody body{};
  body.seq = req.seq;
  body.n = static_cast<uint32_t>(n);
  for (int i = 0; i < n; ++i) {
    const auto* mh = static_cast<const MemHandle*>(mhandles[i]);
    Slot& s = req.slots[i];
    s = Slot();
    // Device memory: the sender writes the host mirror (gpu.h).
    s.addr = const_cast<uint8_t*>(HostAddr(mh, data[i]));
    if (s.addr != data[i]) s.dev = static_cast<uint8_t*>(data[i]);
    s.size = sizes[i];
    s.rkey = mh != nullptr ? mh->rkey : 0;
    s.tag = tags[i];
    body.e[i] = CtsEntry{reinterpret_cast<uintptr_t>(s.addr), sizes[i], s.rkey,
                         tags[i]};
  }
  FrameHeader fh{kFrameCts, 0, CtsLen(n)};
  memcpy(o.bytes, &fh, sizeof(fh));
  memcpy(o.bytes + sizeof(fh), &body, CtsLen(n));
  o.len = static_cast<uint32_t>(sizeof(fh) + CtsLen(n));
  o.sent = 0;
  o.seq = req.seq;
  ++rc->out_count;
  ++rc->next_seq;
  rc->again = 0;
  PRISM_NCCL_CALL("%p irecv n %d: %p %zu B tag %d%s -> CTS %u req %p",
                  recv_comm, n, data[0], sizes[0], tags[0], n > 1 ? " ..." : "",
                  req.seq, static_cast<void*>(&req));
  rc->Progress(rc->ReadSideNow());
  *request = &req;
  return kPrismNcclSuccess;
}

PrismNcclResult Iflush(void* recv_comm, int n, void** data, int* sizes,
                       void** mhandles, void** request) {
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  if (request == nullptr) return kPrismNcclInvalidArgument;
  // Nothing to flush: host memory is written by the data path itself, and
  // device memory is staged, its mirror -> device copy complete before
  // test() reported the receive done. NCCL (v8..v11) reads a NULL request
  // as "flush complete".
  *request = nullptr;
  if (AsComm<RecvComm>(recv_comm, CommKind::kRecv) == nullptr) {
    return kPrismNcclInvalidArgument;
  }
  PRISM_NCCL_CALL("%p iflush n %d -> done", recv_comm, n);
  return kPrismNcclSuccess;
}

PrismNcclResult Test(void* request, int* done, int* sizes) {
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || done == nullptr || r->magic != kReqMagic ||
      r->comm == nullptr) {
    ++g_api_errors;
    return kPrismNcclInvalidArgument;
  }
  *done = 0;
  CommBase* c = r->comm;
  std::lock_guard<std::mutex> lock(c->mu);
  if (!r->in_use) {
    ++g_api_errors;
    PRISM_NCCL_WARN("test: request %p is not outstanding", request);
    return kPrismNcclInvalidArgument;
  }
  if (!r->done) {
    const bool read_side = c->ReadSideNow();
    if (c->kind == CommKind::kSend) {
      static_cast<SendComm*>(c)->Progress(read_side);
    } else {
      static_cast<RecvComm*>(c)->Progress(read_side);
    }
  }
  if (!r->done) return c->failed ? c->failure : kPrismNcclSuccess;
  *done = 1;
  const PrismNcclResult result = r->result;
  ++c->requests_done;
  if (result != kPrismNcclSuccess) ++c->requests_failed;
  PRISM_NCCL_CALL(
      "%p test %s req %p done: %llu B, result %d", static_cast<void*>(c),
      c->kind == CommKind::kSend ? "send" : "recv", request,
      static_cast<unsigned long long>(
          c->kind == CommKind::kSend ? r->size : r->slots[0].received),
      static_cast<int>(result));
  if (c->kind == CommKind::kSend) {
    if (sizes != nullptr) sizes[0] = static_cast<int>(r->size);
    if (result == kPrismNcclSuccess) c->bytes_done += r->size;
    static_cast<SendComm*>(c)->Free(r);
  } else {
    for (int i = 0; i < r->n; ++i) {
      if (sizes != nullptr) sizes[i] = static_cast<int>(r->slots[i].received);
      if (result == kPrismNcclSuccess) c->bytes_done += r->slots[i].received;
    }
    r->in_use = false;
  }
  return result;
}

}  // namespace prism::nccl
