// prism::Engine implementation: memory regions, connections, the sender
// (segmentation, spraying, window, loss recovery) and the receiver
// (validation, placement, duplicate suppression, SACK/NACK, ordered
// completions).
//
// Design (see also prism/engine.h):
//
// PSN space. Every connection numbers its DATA packets with a 64-bit PSN
// starting at 2^32 + initial_psn (random 32 bits from the engine seed); only
// the low 32 bits travel on the wire and are extended against a local
// reference (snd_una on the sender, rcv_nxt on the receiver). PSNs are
// assigned when a WRITE is posted: message k owns the contiguous range
// [first_psn, first_psn + npkts), npkts = max(1, ceil(len / mtu)). A packet's
// PSN therefore never changes; retransmissions reuse it.
//
// Sender. A ring of W TxSlots (W = ConnectionOptions::max_inflight_packets,
// a power of two) indexed by psn % W covers [snd_una, snd_una + W); no PSN
// beyond snd_una + min(W, peer's W) is ever sent, which also bounds the
// receiver's window (the receiver's own W). Each slot in flight is linked in
// two intrusive doubly-linked lists: the connection's send-time order (the head
// is the oldest transmission: the RTO timer) and its path's send order (for
// per-path loss inference). Lost packets go to a retransmit ring and are sent
// before new data. Payload is never copied: TxPacket::payload points into the
// registered source region, and a retransmission re-reads it.
//
// Path choice. The PathSelector is asked for a path for every DATA packet
// (retransmissions of a trimmed packet avoid the path it was trimmed on). It
// is told about every packet: kGood/kEcn when acked, kTrimmed on a TRIMMED
// NACK, kLost when inferred lost, kTimeout when its RTO fired, kProbeOk when
// a PROBE on an ASSUMED_BAD path came back.
//
// Loss inference (reordering-tolerant, RACK-style per path). Spraying makes
// packets on different paths arrive in any order, so cross-path order says
// nothing. Packets on one path usually keep their order, so a packet sent on
// path p is declared lost when, on the same path, kDupThresh packets sent
// after it were acked, or one sent after it was acked and it was sent more
// than a reordering window (max(srtt_p / 4, base_rtt / 4)) earlier than that
// packet. A path that died (a link or switch down: packets vanish without a
// trim) leaves nothing acked behind its packets, so across paths: a packet is
// lost by path timeout when one sent after it on another path of the same
// plane was acked and it has been out for LossTimeout() = srtt + max(4
// rttvar, srtt / 4) + the SACK delay (at least max(base_rtt, rto_min / 4)): it
// is resent at once on another path and its path gets kTimeout (ASSUMED_BAD
// until a probe comes back), as MRC retires an EV after a loss by timeout. That
// is a path failure, not congestion: the window is left alone. (A copy so
// declared whose ack comes back after all, named by the SACK's echo, was
// late: ConnectionStats::spurious_losses, and the path is restored at once,
// ConnectionOptions::spurious_undo.) Anything else is
// recovered by the tail-loss probe and the RTO: srtt + 4 * rttvar from echoed
// timestamps, at least rto_min, doubled per consecutive timeout without
// progress up to max(rto_max, that RTO); when it fires every transmission older
// than the RTO is retransmitted and its path gets kTimeout. (The timer is the
// backed-off RTO; the age that makes a transmission "timed out" is the plain
// one.) Only an RTO with nothing acked since the oldest transmission left is a
// connection-level timeout (window cut, backoff); one that fires while other
// paths deliver is a path failure like the path timeout above.
//
// Fate sharing. ConnectionOptions::path_groups names each path's failure
// group (opaque ids from the routing layer, engine-wide: paths that cross
// the same uplink and T1). When a path is retired, every other connection
// of the engine with paths in its group resends at once the transmissions
// it has in flight on that group that are older than its srtt
// (ResendGroup): one connection's detection stands for the others, instead
// of each waiting for its own path timeout or RTO. The paths themselves
// stay in service.
//
// Failure. A NACK BAD_KEY / BAD_RANGE for a PSN in flight is a remote access
// error (as on an RDMA RC queue pair): the WRITE completes with
// kPermissionDenied / kOutOfRange, every other outstanding WRITE with kAborted,
// and a kConnectionError completion is posted; the connection stops. The
// other ways a connection fails: silence, nothing received from the peer
// for connection_timeout while WRITEs are outstanding (kDeadlineExceeded;
// idle time does not count: the clock starts when the connection becomes
// busy), and, only with ConnectionOptions::rnr_timeout set, an RNR streak
// (NACK NO_BUFFER, nothing sent since acked) that long
// (kResourceExhausted). Either way the oldest outstanding WRITE (the one
// the peer never acknowledged) and the kConnectionError completion carry
// the cause, every other outstanding WRITE kAborted (FlushWrites); the
// kConnectionError names that WRITE (its wr_id, msn, byte_len and
// remote_addr). PostWrite on a failed connection says Aborted.
//
// Receiver. DATA is checked in this order: decodes (header CRC, lengths),
// known and connected connection, payload no larger than the peer's MTU,
// trimmed (-> TRIMMED NACK, nothing placed), rkey known with remote-write
// access (BAD_KEY), the whole message range inside the region, checked
// overflow-safe (BAD_RANGE),
// payload CRC32C when present/required (CORRUPT), PSN window (duplicate below
// rcv_nxt or already in the received bitmap -> suppressed and re-acked;
// beyond rcv_nxt + W -> OUT_OF_WINDOW), message slot consistency; then
// the Placer writes it. Each message's bytes are counted; a message is
// complete when all its bytes arrived, and messages are retired strictly in
// MSN order, so a kRecvImmediate completion for message k is only reported
// after messages < k are complete.
//
// SACKs are coalesced: one per kAckEvery placed packets, one at the latest
// ack_delay (default base_rtt / 4) after the first unacknowledged arrival
// (delayed-SACK timer,
// visible in NextEventTime), and one immediately for a packet that opens a
// gap (out of order), carried ECN CE, or was a duplicate (the sender is
// retransmitting: tell it at once). A SACK carries
// the cumulative PSN plus a 256-bit bitmap starting at cum (aligned down to
// 64) or, when the triggering packet is further ahead, ending at its word.
// SACK/NACK/PROBE_ACK leave on the path the triggering packet arrived on.
//
// Allocation. A connection costs what it uses: Connect() allocates the
// receive bitmap (window / 8 bytes); the first PostWrite the sender's slot
// ring, retransmit ring and per-path state; the sender's message ring
// doubles (16 entries first) up to max_outstanding_messages, in PostWrite.
// On the per-packet path only two rings can grow, by doubling and only up
// to a fixed bound: the receive message ring (8 entries first, at most the
// window; it grows when a message starts further ahead than it reaches) and
// the control ring (16 first, at most min(1024, window)). So a connection
// allocates at most log2(window) times on that path in its whole life and
// never in steady state. The completion queue (a ring) also grows by
// doubling, only as far as it is filled: at most log2(cq_capacity) + 1
// times in the engine's life (beyond the capacity only kConnectionError
// completions go); holding a connection's delivery uses a slot of held_,
// sized with the connections.
//
// Completion queue (bounded by EngineOptions::cq_capacity; contract in
// prism/engine.h). cq_reserved_ counts the WRITEs posted and not completed:
// each holds a slot for its kWrite completion, taken at PostWrite (refused
// while queued + reserved >= capacity) and turned into the queued
// completion when it completes (PushWriteCompletion), so a WRITE's
// completion always fits, failures included. DeliverInOrder queues a
// kRecvImmediate only while queued + reserved < capacity (CqRoom); else the
// connection is held (cq_held, on held_ once, in hold order) at that
// complete message. Its later packets are placed and acknowledged as usual
// (rcv_nxt moves on; the message ring keeps the complete messages with
// their immediates) until a message would be win messages past the held
// one: then AcceptData answers kNoBuffer (NACK NO_BUFFER, nothing placed
// or acked) and the sender pauses (Conn::rnr_until), then sends one RNR
// probe per pause (the oldest refused packet, OldestRetxFirst) until one is
// acked (OnSack ends the streak; ConnectionOptions::rnr_timeout may fail
// the connection first, RunTimers). Only PollCompletions
// frees room (a WRITE completing turns a reserved slot into a queued one),
// and it gives that room to held_ first (ResumeHeld), so a connection
// never overtakes one held before it. kConnectionError is pushed without a
// check (one per connection in its life).
//
// NextEventTime cache. Every entry point that can change a connection's
// timers, queues or sender state marks it dirty (Touch); NextEventTime
// re-evaluates only dirty connections and keeps the combined minimum until
// the next Touch. PollTransmit runs timers only for connections whose
// timers' inputs changed (stale: Touch, but not a send that left them alone,
// TouchSent) or whose cached deadline is <= now, and asks only connections that
// may emit (dirty, control queued, a probe due, data queued) for packets;
// the others would neither emit nor change (RunTimers / EmitConn are no-ops
// for them), so the packets, their order and the round-robin cursor are
// exactly those of polling everything. Hash maps (rkey/lkey -> region, id ->
// connection) are only used for lookups, never iterated for decisions:
// connections are polled in id order from a rotating cursor.
#include "prism/engine.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "congestion/controller.h"
#include "routing/path_selector.h"
#include "transport/base/random.h"
#include "transport/wire/packet.h"
#include "transport/wire/packet_inline.h"

namespace prism {
namespace {

// Windows are per connection (ConnectionOptions::max_inflight_packets, a
// power of two in [kMinWindow, kMaxWindow]); the retransmit ring holds
// 2 * window entries and the control ring min(kCtrlRing, window).
constexpr uint64_t kMinWindow = 256;  // >= wire::kSackBitmapBits
constexpr uint64_t kMaxWindow = 1u << 16;
constexpr uint32_t kNil = 0xFFFFFFFFu;
// PathInfo::bgroup / Conn::path_bgroup of a path that is not balanced.
constexpr uint16_t kNoBalance = 0xFFFF;
constexpr uint32_t kAckEvery = 16;
constexpr uint32_t kDupThresh = 3;
constexpr size_t kCtrlRing = 1024;
constexpr int kMaxBackoff = 16;
constexpr uint8_t kMaxTlp = 2;        // tail-loss probes per stall
constexpr uint32_t kTlpPackets = 1;   // transmissions resent per probe
constexpr uint8_t kPlaneRepeats = 8;  // PLANE_STATUS repeats per change
constexpr uint32_t kMaxPlanes = 32;
// The longest NO_BUFFER pause is rto_min << kMaxRnrShift (Conn::rnr_until).
constexpr uint8_t kMaxRnrShift = 4;
// EngineOptions::cq_capacity's upper bound: EngineOptions::kMaxCqCapacity
// (prism/engine.h; 56 bytes a completion: 896 MiB).
constexpr uint32_t kMaxCqCapacity = EngineOptions::kMaxCqCapacity;
// AckEvent::stranded_bytes looks at most this many of the oldest
// transmissions in flight.
constexpr uint32_t kStrandedScan = 64;

enum SlotState : uint8_t { kFree = 0, kInFlight, kLost, kAcked };

// A PSN's packet index in its message is not kept: it is psn -
// TxMsg::first_psn (PSNs are assigned per message, contiguously).
struct TxSlot {
  Time sent_time = 0;
  uint32_t msn = 0;
  uint32_t path_seq = 0;  // the low 32 bits of its path's tx_seq
  uint32_t prev_path = kNil, next_path = kNil;
  uint32_t prev_all = kNil, next_all = kNil;
  uint32_t len = 0;  // payload bytes (up to wire::kMaxPayloadLen)
  uint16_t path = 0;
  uint8_t state = kFree;
  // Transmissions so far (kTxCountMask bits, saturating) and, in
  // kDeclaredLost, whether a copy was declared lost on its path (path
  // timeout, per-path inference, PTO or RTO: DeclareLost) since.
  uint8_t tx_count = 0;
};
constexpr uint8_t kDeclaredLost = 0x80;
constexpr uint8_t kTxCountMask = 0x7f;

// A slot's state and tx_count in one load (adjacent bytes, state first);
// kInFlightOnce: in flight, sent once.
static_assert(offsetof(TxSlot, tx_count) == offsetof(TxSlot, state) + 1);
static_assert(std::endian::native == std::endian::little);
constexpr uint16_t kInFlightOnce = kInFlight | (1u << 8);
[[gnu::always_inline]] inline uint16_t StateAndCount(const TxSlot& s) {
  uint16_t v;
  memcpy(&v, &s.state, sizeof(v));
  return v;
}

// Per-path sender state (allocated with the sender state, one per path):
// PathInfo holds what every transmission and its ack touch, in one 64-byte
// cache line per path (at the packed 104-byte stride of the earlier single
// struct the hot fields of most paths straddled two lines); the counters of
// rarer events are in PathCold, a parallel array. Same footprint. (The
// path's transmissions are counted by tx_seq, PathStats::tx_packets.)
struct PathCounters {
  uint64_t tx_bytes = 0;
  uint64_t acked_packets = 0;
};

struct PathCold {
  uint64_t lost_packets = 0;
  uint64_t trimmed_packets = 0;
  uint64_t ecn_marked = 0;
  uint64_t retired = 0;
  uint64_t restored = 0;
};

struct alignas(64) PathInfo {
  uint32_t head = kNil, tail = kNil;
  uint64_t tx_seq = 0;  // transmissions on the path (each one's path_seq)
  uint32_t acked_seq_hi = 0;
  // Group balance: the path's index in Conn::group_inflight, kNoBalance
  // when the connection does not balance or the path has no group.
  uint16_t bgroup = kNoBalance;
  Time last_acked_sent = 0;
  Time srtt = 0;
  bool any_acked = false;
  bool dirty = false;
  PathCounters st;
};
static_assert(sizeof(PathInfo) == 64, "PathInfo is one cache line");

struct TxMsg {
  uint64_t wr_id = 0;
  const uint8_t* src = nullptr;
  uint64_t remote_addr = 0;
  uint64_t first_psn = 0;
  uint32_t len = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  uint32_t npkts = 0;
  uint32_t acked = 0;
  uint32_t region = 0;  // index of the source region (reference held)
  bool has_imm = false;
  bool done = false;
  bool hdr_ok = false;  // hdr holds the template
  // EmitData's header template: the first DATA header it encoded for the
  // message (unsealed); its other packets copy it and write their fields.
  uint8_t hdr[wire::kDataHeaderSize];
};

struct RxMsg {
  uint64_t received = 0;
  uint64_t base_addr = 0;
  uint32_t msn = 0;
  uint32_t len = 0;
  uint32_t imm = 0;
  bool active = false;
  bool has_imm = false;
  bool complete = false;
};

enum class CtrlType : uint8_t { kSack, kNack, kProbe, kProbeAck, kPlane };

struct CtrlItem {
  CtrlType type = CtrlType::kSack;
  wire::NackReason reason = wire::NackReason::kTrimmed;
  uint8_t ecn = 0;
  uint16_t path = 0;
  uint16_t coalesced = 0;
  uint32_t psn = 0;  // trigger / nacked PSN (low 32), probe seq, plane seq
  uint64_t psn64 = 0;
  uint64_t ts = 0;
  uint32_t planes_down = 0;
};

struct Region {
  MemoryRegion mr;
  uint8_t* base = nullptr;
  uint32_t refs = 0;  // outstanding local WRITEs using it as a source
  bool live = false;
};

inline uint64_t Ext(uint64_t ref, uint32_t v) {
  return ref + static_cast<int64_t>(
                   static_cast<int32_t>(v - static_cast<uint32_t>(ref)));
}

// How far ahead of its stores the placement copy prefetches the
// destination. Without it, each store that misses waits for its line to be
// fetched for writing and the copy's stores back up; with it the lines are
// on their way while the preceding ones are copied. The distance runs past
// the packet's end on purpose: in-order placement writes the next packet
// there. Prefetches never fault, so lines past the region cost at most a
// wasted fetch. Measured on the 2026-12-05 machine (Intel, 2 MiB L2 per
// core): BM_EngineLoopback_4KiBPackets_... 52-58 us -> 39-43 us per MiB,
// BM_Memcpy_1MiB_PlacerLoop4KiB 44-46 -> 31-34 us, any distance from 256
// to 4096 alike; prefetching the source as well changed nothing; 32- and
// 64-byte (AVX2, AVX-512) moves measured the same (docs/benchmarks.md,
// "Placement prefetch").
constexpr uint32_t kPlacePrefetchAhead = 512;

// The 64-byte blocks by pointers to their end and an index from -blocks up
// to 0: the loop's add sets the flags its branch tests (no compare, one
// index for both sides). The tail (len % 64 bytes) by memcpy. The first
// kPlacePrefetchAhead bytes of the destination are prefetched before the
// loop, each later line kPlacePrefetchAhead bytes before it is stored.
inline __attribute__((always_inline)) void CopyBlocks(uint8_t* dst,
                                                      const uint8_t* src,
                                                      uint32_t len) {
  using V = long long __attribute__((vector_size(16)));
  const uint32_t blocks = len & ~uint32_t{63};
  for (uint32_t k = 0; k < kPlacePrefetchAhead && k < len; k += 64) {
    __builtin_prefetch(dst + k, 1, 3);
  }
  uint8_t* const dend = dst + blocks;
  const uint8_t* const send = src + blocks;
  for (intptr_t i = -static_cast<intptr_t>(blocks); i < 0; i += 64) {
    // As an integer: the address may lie past the destination's object.
    __builtin_prefetch(
        reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(dend) + i +
                                      kPlacePrefetchAhead),
        1, 3);
    V a, b, c, d;  // 16-byte unaligned loads/stores (movdqu)
    __builtin_memcpy(&a, send + i, 16);
    __builtin_memcpy(&b, send + i + 16, 16);
    __builtin_memcpy(&c, send + i + 32, 16);
    __builtin_memcpy(&d, send + i + 48, 16);
    __builtin_memcpy(dend + i, &a, 16);
    __builtin_memcpy(dend + i + 16, &b, 16);
    __builtin_memcpy(dend + i + 32, &c, 16);
    __builtin_memcpy(dend + i + 48, &d, 16);
  }
  if (blocks < len) std::memcpy(dend, send, len - blocks);
}

// One `rep movsb`: the CPU's string move, which with ERMS/FSRM moves whole
// lines without the per-instruction cost of a vector loop (and, on AMD Zen
// 5, faster than it: docs/benchmarks.md, "Placement copy method").
inline __attribute__((always_inline)) void CopyString(uint8_t* dst,
                                                      const uint8_t* src,
                                                      uint32_t len) {
#if defined(__has_feature)
#define PRISM_COPY_SANITIZED \
  (__has_feature(address_sanitizer) || __has_feature(thread_sanitizer))
#else
#define PRISM_COPY_SANITIZED 0
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || \
    PRISM_COPY_SANITIZED
  // Sanitizers do not see inside inline assembly: memcpy, which they
  // check, keeps a placement out of bounds visible in those builds.
  std::memcpy(dst, src, len);
#elif defined(__x86_64__)
  size_t n = len;
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
#else
  CopyBlocks(dst, src, len);
#endif
}

// DefaultCopyMethod's CPU test (see engine.h): AMD, family 1Ah or later
// (base family 0Fh plus the extended family), ERMS (CPUID 7.0 EBX bit 9)
// and FSRM (CPUID 7.0 EDX bit 4).
CopyMethod DetectCopyMethod() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0 || a < 7) return CopyMethod::kVector;
  const bool amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;
  if (!amd) return CopyMethod::kVector;  // "AuthenticAMD"
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return CopyMethod::kVector;
  const unsigned base = (a >> 8) & 0xF;
  const unsigned family = base == 0xF ? base + ((a >> 20) & 0xFF) : base;
  if (family < 0x1A) return CopyMethod::kVector;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return CopyMethod::kVector;
  const bool erms = (b >> 9) & 1, fsrm = (d >> 4) & 1;
  return erms && fsrm ? CopyMethod::kString : CopyMethod::kVector;
#else
  return CopyMethod::kVector;
#endif
}

// Whether `m` (kAuto: the process's choice) copies with CopyString.
inline bool UsesString(CopyMethod m) {
  return (m == CopyMethod::kAuto ? DefaultCopyMethod() : m) ==
         CopyMethod::kString;
}

// Whether `dst` lies 1 to kStringCopyAliasWindow - 1 bytes ahead of `src`
// modulo 4 KiB, where `rep movsb` slows down (engine.h, CopyMethod): one
// subtraction, mask and compare (0 wraps to the largest value).
inline bool StringCopyAliases(const uint8_t* dst, const uint8_t* src) {
  const uintptr_t ahead =
      (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) &
      4095;
  return ahead - 1 < uintptr_t{kStringCopyAliasWindow} - 1;
}

// Whether the placement copy runs CopyString: kStringCopyMinLen bytes or
// more when `string` and the pair does not alias (StringCopyAliases).
inline bool CopiesByString(bool string, const uint8_t* dst, const uint8_t* src,
                           uint32_t len) {
  return string && len >= kStringCopyMinLen && !StringCopyAliases(dst, src);
}

// The placement copy: CopyString where CopiesByString, else CopyBlocks.
// Shared by MemcpyPlacer and PlacementCopyWith.
inline __attribute__((always_inline)) void CopyBy(bool string, uint8_t* dst,
                                                  const uint8_t* src,
                                                  uint32_t len) {
  if (CopiesByString(string, dst, src, len)) {
    CopyString(dst, src, len);
  } else {
    CopyBlocks(dst, src, len);
  }
}

// Default placement: CopyBlocks (kVector) or CopyString (kString) as the
// method chosen once per process (DefaultCopyMethod) says, fixed when the
// engine is constructed. Not glibc's memcpy: glibc uses `rep movsb` for
// packet-sized copies whatever the CPU, which on AMD Zen 3/4 runs several
// times slower when destination and source are close modulo 4 KiB, as
// placement into a region often makes them (BM_EngineLoopback_GlibcPlacer_
// ... measured ~7x slower than the vector loop on 2026-12-02's machine). A
// 32-byte AVX2 variant with aligned stores measured the same as the 16-byte
// loop (2026-12-02), as did AVX-512 moves on Zen 5 (2026-12-06).
class MemcpyPlacer final : public Placer {
 public:
  explicit MemcpyPlacer(CopyMethod method) : string_(UsesString(method)) {}
  bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
             const MemoryRegion&) override {
    CopyBy(string_, dst, src, len);
    return true;
  }

 private:
  bool string_;
};
// A connection's cached share of NextEventTime and what PollTransmit needs
// to know to skip it (see Impl::Touch / Impl::Refresh). Kept in a dense array
// parallel to Impl::order_ so that scanning it touches a few cache lines, not
// every connection. Valid while !dirty; a dirty connection is on
// Impl::dirty_.
constexpr uint8_t kClean = 0, kDirty = 1, kStale = 2;
struct Sched {
  Time deadline = kTimeInfinite;  // earliest timer (ack, RTO, TLP, ...)
  Time probe = kTimeInfinite;     // sel->NextProbeTime()
  Time send = kTimeInfinite;      // next_send_time when data is sendable
  // kClean; kDirty: to be re-read (on Impl::dirty_), `deadline` still
  // exact (a send that left the timers' inputs alone, Impl::TouchSent);
  // kStale: dirty and the timers' inputs may have changed too (Touch).
  uint8_t dirty = 0;
  bool ctrl = false;  // control packets queued
  bool work = false;  // control, retransmissions or new data queued
};

struct Conn {
  ConnId id = kInvalidConn;
  ConnectionOptions opt;
  ConnectionInfo remote;
  bool connected = false;
  bool failed = false;
  uint16_t num_paths = 0;
  uint16_t num_planes = 0;
  uint32_t mtu = 0;         // our DATA payload size
  uint32_t remote_mtu = 0;  // the peer's
  bool tx_crc = false;
  bool rx_crc_required = false;
  bool clean_acks_matter = true;  // sel->CleanAcksMatter()
  uint32_t initial_psn = 0;
  std::unique_ptr<routing::PathSelector> sel;
  std::unique_ptr<congestion::Controller> cc;
  ConnectionStats st;

  // --- window geometry (fixed at Connect)
  uint64_t win = 0;           // local window: tx slots, receive window
  uint64_t win_mask = 0;      // win - 1
  uint64_t rx_word_mask = 0;  // win / 64 - 1
  uint64_t snd_win = 0;       // send limit: min(win, peer's window)
  uint64_t retx_size = 0;     // 2 * win
  uint64_t ctrl_size = 0;     // min(kCtrlRing, win): control ring capacity

  // --- sender (slots, paths, retx: allocated by the first PostWrite; msgs
  // grows by doubling up to max_outstanding_messages)
  std::vector<TxSlot> slots;
  std::vector<PathInfo> paths;
  std::vector<PathCold> path_cold;  // parallel to paths
  std::vector<uint8_t> plane_of;    // path % num_planes (no division per ack)
  std::vector<TxMsg> msgs;
  uint32_t msg_mask = 0;
  uint32_t max_msgs = 0;
  uint32_t msg_una = 0;   // oldest uncompleted message
  uint32_t post_msn = 0;  // next MSN to assign
  uint32_t send_msn = 0;  // message holding the next new packet
  uint32_t send_idx = 0;  // its next packet index
  uint64_t next_assign_psn = 0;
  uint64_t snd_una = 0;
  uint64_t snd_nxt = 0;  // one past the highest PSN ever sent
  uint32_t all_head = kNil, all_tail = kNil;
  std::vector<uint64_t> retx;  // ring of PSNs to retransmit
  uint64_t retx_head = 0, retx_tail = 0;
  uint64_t inflight_bytes = 0;
  uint64_t cwnd = 0;    // cc->window_bytes() (ReadCc)
  uint64_t pacing = 0;  // cc->pacing_rate_bps(), 0: window only (ReadCc)
  Time srtt = 0, rttvar = 0;
  // The typical paths' RTT (tail resend): srtt / rttvar over samples
  // capped at kTypicalRttCap x typ_srtt.
  Time typ_srtt = 0, typ_rttvar = 0;
  int backoff = 0;
  Time last_progress = 0;  // last time a SACK acked something new
  Time rack_sent = 0;      // latest send time of a transmission acked
  uint8_t tlp_fired = 0;   // tail-loss probes since then
  uint8_t tlp_credit = 0;  // retransmissions the probe may send beyond cwnd
  Time tlp_at = 0;         // when the latest tail-loss probe fired
  Time tlp_stall_at = 0;   // when the stall's first probe fired
  Time tlp_rack = 0;       // the latest probe time answered by an ack of a
                           // transmission sent at or after it (0: none)
  // The probe's PSN and the path of the transmission it replaced, while the
  // blame for that path waits for the probe's answer (OnSack).
  uint64_t tlp_psn = 0;
  uint16_t tlp_orig_path = 0;
  bool tlp_blame = false;
  bool any_acked_sent = false;  // rack_sent is valid
  // The same, per plane (PlaneRackSent): planes below kInlinePlanes here,
  // the rest (connections with more planes) in plane_rack_more, allocated
  // by Connect, so that the common case keeps this state small.
  static constexpr uint32_t kInlinePlanes = 8;
  Time plane_rack_sent[kInlinePlanes] = {};
  std::unique_ptr<Time[]> plane_rack_more;
  Time next_send_time = 0;
  // NACK NO_BUFFER (the receiver's completion queue is full): data waits
  // until rnr_until, rto_min << rnr_streak from the first such NACK after
  // the previous pause (at most rto_min << kMaxRnrShift and rto_max). While
  // the streak lasts (rnr_streak > 0, since rnr_since) each pause ends with
  // one RNR probe (rnr_probe_psn, sent at rnr_probe_at; kTimeInfinite: none
  // yet) and nothing else until it is answered: a NO_BUFFER starts the next
  // pause, an ack of it (of a transmission sent at or after rnr_probe_at)
  // ends the streak and the window reopens (OnSack). Acks of what was sent
  // before the first NACK do not end it: the receiver took those before it
  // filled up, they say nothing about room now.
  Time rnr_until = 0;
  Time rnr_since = 0;
  Time rnr_probe_at = kTimeInfinite;
  uint64_t rnr_probe_psn = 0;
  uint8_t rnr_streak = 0;
  bool no_path = false;
  Time last_heard = 0;
  uint32_t probe_seq = 0;
  std::vector<uint16_t> dirty_paths;

  // --- receiver (rx_msgs grows by doubling up to win, on demand)
  std::vector<uint64_t> rx_bits;
  std::vector<RxMsg> rx_msgs;
  uint32_t rx_msg_mask = 0;  // rx_msgs.size() - 1 (when non-empty)
  uint64_t rcv_nxt = 0;
  uint64_t rcv_high = 0;  // one past the highest PSN received
  uint32_t rcv_msn_next = 0;
  // In-order delivery stopped at message rcv_msn_next (complete, with an
  // immediate) because the completion queue had no room; the connection is
  // on Impl::held_ (once).
  bool cq_held = false;
  uint64_t rx_bytes_total = 0;
  uint32_t ooo_count = 0;
  uint32_t ack_pending = 0;
  uint32_t trig_psn = 0;
  uint64_t trig_psn64 = 0;
  uint16_t trig_path = 0;
  uint64_t trig_ts = 0;
  uint8_t trig_ecn = 0;
  Time ack_deadline = kTimeInfinite;  // delayed-SACK timer
  uint32_t last_rkey = 0;
  uint32_t last_region = kNil;
  uint64_t last_region_gen = 0;
  // A BAD_KEY / BAD_RANGE failure held until the end of the batch (packets
  // of the connection read in place are still ahead in it).
  bool fail_deferred = false;
  absl::StatusCode deferred_code = absl::StatusCode::kOk;
  uint32_t deferred_culprit = 0;  // the failing WRITE's MSN

  // --- control queue (grows by doubling up to ctrl_size)
  std::vector<CtrlItem> ctrl;
  uint64_t ctrl_head = 0, ctrl_tail = 0;
  uint32_t planes_down_local = 0;
  uint32_t plane_seq = 0;
  uint32_t peer_plane_seq = 0;
  uint32_t peer_planes_down = 0;
  // Plane `plane` (< kMaxPlanes) is down here or at the peer.
  bool PlaneDown(uint32_t plane) const {
    return (((planes_down_local | peer_planes_down) >> plane) & 1) != 0;
  }
  Time plane_resend_at = kTimeInfinite;  // next repeat of our PLANE_STATUS
  Time plane_resend_gap = 0;
  uint8_t plane_repeats_left = 0;

  // Index of this connection in Impl::order_ and Impl::sched_.
  uint32_t pos = 0;
  // Fate sharing: the paths that have a failure group (opt.path_groups[p]
  // != kNoFailureGroup), sorted by (group, path); built by CreateConnection.
  std::vector<uint16_t> group_paths;
  // Group balance (ConnectionOptions::group_balance; empty when off): per
  // path its group's index here (PathInfo::bgroup is a copy in the sender
  // state), per group its transmissions in flight (linked on a path list),
  // the groups with any, and their sum. Kept by LinkSlot / UnlinkSlot and
  // the sender's and the ack path's inlined forms of them.
  std::vector<uint16_t> path_bgroup;
  std::vector<uint32_t> group_inflight;
  uint32_t groups_active = 0;
  uint32_t group_total = 0;
  void GroupAdd(uint16_t g) {
    if (group_inflight[g]++ == 0) ++groups_active;
    ++group_total;
  }
  void GroupSub(uint16_t g) {
    if (--group_inflight[g] == 0) --groups_active;
    --group_total;
  }
  // True when a new transmission on `path` should go elsewhere: its group
  // holds kGroupBalanceSlack or more above its share of what is in flight.
  bool OverShare(uint16_t path) const {
    const uint16_t g = paths[path].bgroup;
    if (g == kNoBalance || group_inflight[g] == 0) return false;
    return uint64_t{group_inflight[g]} * groups_active >=
           group_total + uint64_t{kGroupBalanceSlack} * groups_active;
  }

  bool Outstanding() const { return msg_una != post_msn; }
  TxSlot& Slot(uint64_t psn) { return slots[psn & win_mask]; }
  PathCold& Cold(const PathInfo& p) { return path_cold[&p - paths.data()]; }
  TxMsg& Msg(uint32_t msn) { return msgs[msn & msg_mask]; }
  const TxMsg& Msg(uint32_t msn) const { return msgs[msn & msg_mask]; }
  // RTO without backoff: srtt + 4 rttvar, at least rto_min. Not capped by
  // rto_max: a path whose measured RTT is above rto_max (a loaded host, a
  // long or emulated link) would otherwise time out spuriously every
  // rto_max; rto_max bounds the backoff, not the measurement.
  Time RtoBase() const {
    const Time base =
        srtt == 0 ? std::max(opt.rto_min, 3 * opt.base_rtt) : srtt + 4 * rttvar;
    return std::max(base, opt.rto_min);
  }
  // Tail-loss probe timeout: max(2 srtt + SACK delay, base_rtt); before the
  // first RTT sample 2 base_rtt.
  Time Pto() const {
    if (srtt == 0) return 2 * opt.base_rtt;
    return std::max(2 * srtt + opt.base_rtt / 4, opt.base_rtt);
  }
  // When the tail-loss probe fires (kTimeInfinite: not armed).
  Time TlpTime() const {
    if (!opt.tail_loss_probe || tlp_fired >= kMaxTlp || all_head == kNil) {
      return kTimeInfinite;
    }
    // Re-armed by a probe: the next one a PTO after it, not at once (the
    // flight's next-oldest transmission is as old as the probed one).
    return std::max({last_progress, slots[all_head].sent_time, tlp_at}) + Pto();
  }
  // Age at which a packet is lost by path timeout once a packet sent after
  // it on its plane was acked: srtt + max(4 rttvar, srtt / 4) + the SACK
  // delay, at least max(base_rtt, rto_min / 4); before an RTT sample 2
  // base_rtt. (Without the rto_min / 4 floor, delay spikes as a 128-host
  // permutation starts made it fire spuriously: 0.871 of ideal instead of
  // 0.977, paths retired by the thousand.)
  Time LossTimeout() const {
    if (srtt == 0) return 2 * opt.base_rtt;
    return LossAge(srtt, rttvar);
  }
  // The loss timeout's formula over given RTT statistics.
  Time LossAge(Time s, Time v) const {
    return std::max(s + std::max(4 * v, s / 4) + opt.base_rtt / 4,
                    std::max(opt.base_rtt, opt.rto_min / 4));
  }
  // True when a transmission sent after `sent_time` was acked, on any path
  // or plane.
  bool Overtaken(Time sent_time) const {
    return any_acked_sent && sent_time < rack_sent;
  }
  // Tail resend (ConnectionOptions::tail_resend): LossTimeout over the
  // typical RTT statistics.
  Time TailResendAge() const { return LossAge(typ_srtt, typ_rttvar); }
  // When the oldest transmission in flight is due for a tail resend
  // (kTimeInfinite: off, no RTT sample yet, new data left to send, nothing
  // in flight, or nothing sent after it acked, on any plane: unlike the
  // path timeout, which blames a path and so wants evidence from its own
  // plane, a resend blames nothing). Only the
  // oldest is timed: O(1), as PathLossTime.
  Time TailResendTime() const {
    if (!opt.tail_resend || typ_srtt == 0 || all_head == kNil ||
        send_msn != post_msn) {
      return kTimeInfinite;
    }
    const TxSlot& s = slots[all_head];
    if (!Overtaken(s.sent_time)) return kTimeInfinite;
    return s.sent_time + TailResendAge();
  }
  // The same for a transmission on `path`: a path whose own smoothed RTT
  // (echoed timestamps of its packets) is known to be well above the
  // connection's is slow, not dead (a degraded link, a deep queue): its
  // packets get 2 x its srtt + the SACK delay before they count as lost, so
  // they come back and the selector sees their slow RTT (SKIP for passes in
  // proportion) instead of retiring the path and restoring it at the next
  // probe, again and again.
  Time PathLossTimeout(uint16_t path) const {
    return std::max(LossTimeout(), SlowPathGrace(path));
  }
  // For a path whose own srtt is over twice the connection's: 2 x that
  // srtt + the SACK delay; no timer declares a transmission on it lost
  // younger than that. 0 for an ordinary path (or before a sample).
  Time SlowPathGrace(uint16_t path) const {
    const Time ps = paths[path].srtt;
    return ps > 2 * srtt ? 2 * ps + opt.base_rtt / 4 : 0;
  }
  // When the RTO fires for the oldest transmission (or the latest tail-loss
  // probe, if later): the backed-off RTO, or later when its path is known
  // to be slow (SlowPathGrace).
  // REQUIRES: all_head != kNil.
  Time RtoTime() const {
    const TxSlot& h = slots[all_head];
    // A tail-loss probe re-arms it (RFC 8985 7.3): the probed flight's
    // head stays as old as it was.
    return std::max(h.sent_time, tlp_at) +
           std::max(Rto(), SlowPathGrace(h.path));
  }
  // True when a transmission sent after `s` on another path of its plane was
  // acked (the planes' NIC port queues differ in depth: a later packet on an
  // emptier plane says nothing; within a plane both queued behind the same
  // ports).
  bool SentBeforeLatestAcked(const TxSlot& s) const {
    return s.sent_time < PlaneRackSent(plane_of[s.path]);
  }
  Time& PlaneRackSent(uint32_t plane) {
    return plane < kInlinePlanes ? plane_rack_sent[plane]
                                 : plane_rack_more[plane - kInlinePlanes];
  }
  Time PlaneRackSent(uint32_t plane) const {
    return plane < kInlinePlanes ? plane_rack_sent[plane]
                                 : plane_rack_more[plane - kInlinePlanes];
  }
  // When `s` is lost by path timeout (kTimeInfinite: not overtaken yet):
  // PathLossTimeout() after it was sent once a later transmission on its
  // plane was acked, or once it was sent before a tail-loss probe that was
  // answered (tlp_rack: RFC 8985, the probe's ack lets RACK mark the rest of
  // the flight, on any plane). The probe's ack does not shorten the deadline:
  // a probe fired before the first RTT sample (2 base_rtt) on a queued fabric
  // comes back over an emptier path while the flight is still queued, and
  // srtt + the SACK delay then declared whole flights lost (256-host bench:
  // 32,760 of 35,219 path timeouts, none a real loss; docs/benchmarks.md).
  Time LossDeadline(const TxSlot& s) const {
    if (SentBeforeLatestAcked(s) || s.sent_time < tlp_rack) {
      return s.sent_time + PathLossTimeout(s.path);
    }
    return kTimeInfinite;
  }
  // When the oldest transmission times out across paths (kTimeInfinite: not
  // overtaken yet). Only the oldest is timed, so this is O(1).
  Time PathLossTime() const {
    if (all_head == kNil) return kTimeInfinite;
    return LossDeadline(slots[all_head]);
  }
  // The timer: RtoBase() doubled per consecutive timeout, at most
  // max(rto_max, RtoBase()): backoff never lifts it above rto_max, and a
  // measured RTT above rto_max is never cut below itself.
  Time Rto() const {
    const Time base = RtoBase();
    const Time cap = std::max(base, opt.rto_max);
    Time r = base;
    for (int i = 0; i < backoff && r < cap; ++i) r *= 2;
    return std::min(r, cap);
  }
  bool CtrlFull() const { return ctrl_tail - ctrl_head >= ctrl_size; }
  CtrlItem* PushCtrl() {
    if (CtrlFull()) return nullptr;
    if (ctrl_tail - ctrl_head >= ctrl.size()) GrowCtrl();
    return &ctrl[(ctrl_tail++) & (ctrl.size() - 1)];
  }
  CtrlItem& CtrlAt(uint64_t i) { return ctrl[i & (ctrl.size() - 1)]; }
  // Doubles the control ring (16 entries first), keeping its order. At most
  // log2(ctrl_size / 16) times in a connection's life.
  void GrowCtrl() {
    const size_t n =
        std::min<size_t>(ctrl_size, std::max<size_t>(16, 2 * ctrl.size()));
    std::vector<CtrlItem> grown(n);
    for (uint64_t i = ctrl_head; i != ctrl_tail; ++i) {
      grown[i & (n - 1)] = ctrl[i & (ctrl.size() - 1)];
    }
    ctrl.swap(grown);
  }
  // Sender state, allocated when the first WRITE is posted.
  void EnsureSender() {
    if (!slots.empty()) return;
    slots.assign(win, TxSlot{});
    paths.assign(num_paths, PathInfo{});
    for (size_t p = 0; p < path_bgroup.size() && p < num_paths; ++p) {
      paths[p].bgroup = path_bgroup[p];
    }
    path_cold.assign(num_paths, PathCold{});
    plane_of.resize(num_paths);
    for (uint32_t p = 0; p < num_paths; ++p) {
      plane_of[p] = static_cast<uint8_t>(p % num_planes);
    }
    retx.assign(retx_size, 0);
    dirty_paths.reserve(num_paths);
  }
  // Doubles the message ring (16 entries first) up to max_outstanding_messages
  // rounded up to a power of two, keeping every outstanding message at
  // msn & msg_mask.
  void GrowMsgs() {
    uint32_t cap = 1;
    while (cap < max_msgs) cap <<= 1;
    const uint32_t n = std::min<uint32_t>(
        cap, std::max<uint32_t>(16, 2 * static_cast<uint32_t>(msgs.size())));
    std::vector<TxMsg> grown(n);
    for (uint32_t m = msg_una; m != post_msn; ++m) grown[m & (n - 1)] = Msg(m);
    msgs.swap(grown);
    msg_mask = n - 1;
  }
  // Makes the receive message ring hold MSN offsets [0, md] from
  // rcv_msn_next (doubling, 8 entries first, at most win). Active entries
  // keep msn & rx_msg_mask. At most log2(win / 8) times per connection.
  void GrowRxMsgs(uint64_t md) {
    size_t n = std::max<size_t>(8, rx_msgs.size());
    while (n <= md && n < win) n *= 2;
    if (n == rx_msgs.size()) return;
    std::vector<RxMsg> grown(n);
    for (const RxMsg& m : rx_msgs) {
      if (m.active) grown[m.msn & (n - 1)] = m;
    }
    rx_msgs.swap(grown);
    rx_msg_mask = static_cast<uint32_t>(n - 1);
  }
};

// A DATA header resolved by RxDestination since the last OnReceive: its
// bytes and decoded fields (OnReceive matches the packet read in place to
// it and does not decode it again) and where its payload went (nullptr:
// not in place).
struct RxClaim {
  ConnId conn;
  uint64_t psn;
  uint64_t base_addr;
  uint8_t* dst;
  uint32_t plen;
  bool has_imm;
  wire::DataHeader h;
  uint8_t raw[wire::kDataHeaderSize];
};

}  // namespace

class Engine::Impl {
 public:
  explicit Impl(const EngineOptions& o) : opt_(o), rng_(o.seed) {
    placer_ = o.placer != nullptr ? o.placer : &memcpy_placer_;
  }

  // ---------------------------------------------------------------- memory
  absl::StatusOr<MemoryRegion> RegisterMemory(void* addr, uint64_t length,
                                              uint32_t access) {
    if (addr == nullptr) return absl::InvalidArgumentError("null address");
    if (length == 0) return absl::InvalidArgumentError("zero-length region");
    const uint64_t a = reinterpret_cast<uint64_t>(addr);
    if (a + length < a) {
      return absl::InvalidArgumentError("region wraps the address space");
    }
    if (access == 0 || (access & ~(kAccessLocal | kAccessRemoteWrite)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad access mask ", access));
    }
    Region r;
    r.mr.addr = a;
    r.mr.length = length;
    r.mr.access = access;
    r.mr.lkey = FreshKey();
    r.mr.rkey = FreshKey();
    r.base = static_cast<uint8_t*>(addr);
    r.live = true;
    uint32_t idx;
    if (!free_regions_.empty()) {
      idx = free_regions_.back();
      free_regions_.pop_back();
      regions_[idx] = r;
    } else {
      idx = static_cast<uint32_t>(regions_.size());
      regions_.push_back(r);
    }
    by_lkey_[r.mr.lkey] = idx;
    by_rkey_[r.mr.rkey] = idx;
    ++stats_.memory_regions;
    return r.mr;
  }

  absl::Status DeregisterMemory(uint32_t lkey) {
    auto it = by_lkey_.find(lkey);
    if (it == by_lkey_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown lkey ", lkey));
    }
    Region& r = regions_[it->second];
    if (r.refs != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("region lkey ", lkey, " is the source of ", r.refs,
                       " outstanding WRITEs"));
    }
    by_rkey_.erase(r.mr.rkey);
    free_regions_.push_back(it->second);
    by_lkey_.erase(it);
    r.live = false;
    ++region_gen_;
    --stats_.memory_regions;
    return absl::OkStatus();
  }

  // ----------------------------------------------------------- connections
  void CountConfigError() { ++stats_.config_errors; }

  absl::StatusOr<ConnId> CreateConnection(const ConnectionOptions& o) {
    if (opt_.mtu_payload == 0 || opt_.mtu_payload > wire::kMaxPayloadLen) {
      return absl::InvalidArgumentError(
          absl::StrCat("EngineOptions::mtu_payload must be in [1, ",
                       wire::kMaxPayloadLen, "], got ", opt_.mtu_payload));
    }
    if (opt_.max_packet_bytes != 0 &&
        wire::kDataHeaderSize + opt_.mtu_payload > opt_.max_packet_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "EngineOptions::mtu_payload ", opt_.mtu_payload, " + the ",
          wire::kDataHeaderSize, "-byte DATA header exceeds the datapath's ",
          opt_.max_packet_bytes,
          "-byte packet limit (EngineOptions::max_packet_bytes); at most ",
          opt_.max_packet_bytes > wire::kDataHeaderSize
              ? opt_.max_packet_bytes - wire::kDataHeaderSize
              : 0,
          " payload bytes fit"));
    }
    if (opt_.cq_capacity == 0 || opt_.cq_capacity > kMaxCqCapacity) {
      return absl::InvalidArgumentError(
          absl::StrCat("EngineOptions::cq_capacity must be in [1, ",
                       kMaxCqCapacity, "], got ", opt_.cq_capacity));
    }
    if (stats_.connections >= opt_.max_connections) {
      return absl::ResourceExhaustedError(
          absl::StrCat("max_connections (", opt_.max_connections, ") reached"));
    }
    if (o.num_paths == 0) return absl::InvalidArgumentError("num_paths == 0");
    if (o.num_planes == 0 || o.num_planes > o.num_paths ||
        o.num_planes > kMaxPlanes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "num_planes must be in [1, min(num_paths, 32)], got ", o.num_planes));
    }
    if (o.rto_min <= 0 || o.rto_max < o.rto_min) {
      return absl::InvalidArgumentError(absl::StrCat(
          "need 0 < rto_min <= rto_max, got rto_min ", o.rto_min / kNanosecond,
          " ns, rto_max ", o.rto_max / kNanosecond,
          " ns (rto_max defaults to 4 ms: raise it with rto_min)"));
    }
    if (o.connection_timeout <= 0 || o.probe_interval <= 0 || o.base_rtt <= 0) {
      return absl::InvalidArgumentError(
          "connection_timeout, probe_interval and base_rtt must be > 0");
    }
    if (o.rnr_timeout < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rnr_timeout must be >= 0 (0: never), got ",
                       o.rnr_timeout / kNanosecond, " ns"));
    }
    if (o.max_outstanding_messages == 0 ||
        o.max_outstanding_messages > (1u << 20)) {
      return absl::InvalidArgumentError(
          "max_outstanding_messages must be in [1, 2^20]");
    }
    if (o.max_inflight_packets < kMinWindow ||
        o.max_inflight_packets > kMaxWindow ||
        (o.max_inflight_packets & (o.max_inflight_packets - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_inflight_packets must be a power of two in [", kMinWindow, ", ",
          kMaxWindow, "], got ", o.max_inflight_packets));
    }
    // Validate the policy names now (with the local path count).
    auto sel = MakeSelector(o, o.num_paths, o.num_planes, 1);
    if (!sel.ok()) return sel.status();
    auto cc = MakeCc(o);
    if (!cc.ok()) return cc.status();

    auto c = std::make_unique<Conn>();
    c->id = next_conn_id_++;
    c->opt = o;
    c->initial_psn = rng_.Next32();
    Conn* raw = c.get();
    if (by_id_.size() <= raw_id(c->id))
      by_id_.resize(raw_id(c->id) + 1, nullptr);
    by_id_[c->id] = c.get();
    conns_[c->id] = std::move(c);
    raw->pos = static_cast<uint32_t>(order_.size());
    IndexGroups(raw);
    order_.push_back(raw);  // ids increase: order_ stays sorted
    sched_.emplace_back();
    // One slot per connection (a connection is on dirty_ at most once), so
    // Touch() neither allocates nor checks capacity.
    dirty_.resize(order_.size());
    held_.resize(order_.size());
    ++stats_.connections;
    return raw->id;
  }

  ConnectionInfo LocalInfo(ConnId id) const {
    ConnectionInfo info;
    const Conn* c = Find(id);
    if (c == nullptr) return info;
    info.conn_id = c->id;
    info.num_paths = c->opt.num_paths;
    info.num_planes = c->opt.num_planes;
    info.mtu_payload = opt_.mtu_payload;
    info.payload_checksum = c->opt.payload_checksum;
    info.initial_psn = c->initial_psn;
    info.max_inflight_packets = c->opt.max_inflight_packets;
    return info;
  }

  absl::Status Connect(ConnId id, const ConnectionInfo& remote) {
    Conn* c = Find(id);
    if (c == nullptr) return absl::NotFoundError(UnknownConn(id));
    if (c->connected) {
      return absl::FailedPreconditionError(
          absl::StrCat("connection ", id, " is already connected"));
    }
    if (remote.conn_id == kInvalidConn) {
      return absl::InvalidArgumentError("remote conn_id is 0");
    }
    if (remote.mtu_payload == 0 || remote.mtu_payload > wire::kMaxPayloadLen) {
      return absl::InvalidArgumentError(
          absl::StrCat("remote mtu_payload ", remote.mtu_payload,
                       " outside [1, ", wire::kMaxPayloadLen, "]"));
    }
    uint16_t np = c->opt.num_paths;
    if (remote.num_paths != 0) np = std::min(np, remote.num_paths);
    uint16_t planes = c->opt.num_planes;
    if (remote.num_planes != 0) planes = std::min(planes, remote.num_planes);
    planes = std::min<uint16_t>(planes, np);
    auto sel = MakeSelector(c->opt, np, planes, rng_.Next());
    if (!sel.ok()) return sel.status();
    auto cc = MakeCc(c->opt);
    if (!cc.ok()) return cc.status();
    c->sel = std::move(*sel);
    c->clean_acks_matter = c->sel->CleanAcksMatter();
    c->cc = std::move(*cc);
    c->remote = remote;
    c->num_paths = np;
    c->num_planes = planes;
    if (planes > Conn::kInlinePlanes) {
      c->plane_rack_more =
          std::make_unique<Time[]>(planes - Conn::kInlinePlanes);
    }
    c->mtu = opt_.mtu_payload;
    c->remote_mtu = remote.mtu_payload;
    c->tx_crc = c->opt.payload_checksum || remote.payload_checksum;
    c->rx_crc_required = c->tx_crc;
    // Sender state.
    c->win = c->opt.max_inflight_packets;
    c->win_mask = c->win - 1;
    c->rx_word_mask = c->win / 64 - 1;
    c->snd_win = c->win;
    if (remote.max_inflight_packets != 0) {
      c->snd_win = std::min<uint64_t>(c->win, remote.max_inflight_packets);
    }
    c->retx_size = 2 * c->win;
    c->ctrl_size = std::min<uint64_t>(kCtrlRing, c->win);
    // Sender rings (slots, paths, retransmit ring, messages) are allocated
    // by the first PostWrite, the receiver's message ring and the control
    // ring on demand: a connection costs what it uses (docs/benchmarks.md,
    // "Simulator speed and scale").
    c->max_msgs = c->opt.max_outstanding_messages;
    const uint64_t start = (uint64_t{1} << 32) + c->initial_psn;
    c->next_assign_psn = c->snd_una = c->snd_nxt = start;
    ReadCc(c);
    // Receiver state.
    c->rx_bits.assign(c->win / 64, 0);
    c->rcv_nxt = c->rcv_high = (uint64_t{1} << 32) + remote.initial_psn;
    c->connected = true;
    Touch(c);
    return absl::OkStatus();
  }

  absl::Status CloseConnection(ConnId id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return absl::NotFoundError(UnknownConn(id));
    Conn* c = it->second.get();
    FlushWrites(c, absl::StatusCode::kCancelled, absl::StatusCode::kCancelled,
                c->msg_una);
    if (c->cq_held) {  // its held messages are discarded with it
      Conn** const end = held_.data() + held_n_;
      Conn** const at = std::find(held_.data(), end, c);
      std::copy(at + 1, end, at);
      --held_n_;
    }
    if (sched_[c->pos].dirty != kClean) {
      Conn** const end = dirty_.data() + dirty_n_;
      Conn** const at = std::find(dirty_.data(), end, c);
      std::copy(at + 1, end, at);
      --dirty_n_;
    }
    order_.erase(order_.begin() + c->pos);
    sched_.erase(sched_.begin() + c->pos);
    for (size_t k = c->pos; k < order_.size(); ++k) {
      order_[k]->pos = static_cast<uint32_t>(k);
    }
    valid_ = 0;  // timer_min_ is recomputed at the next pass
    if (cursor_ >= order_.size()) cursor_ = 0;
    UnindexGroups(c);
    by_id_[id] = nullptr;
    conns_.erase(it);
    --stats_.connections;
    return absl::OkStatus();
  }

  // -------------------------------------------------------------- PostWrite
  absl::Status PostWrite(Time now, ConnId id, const WriteRequest& req) {
    Observe(now);
    Conn* c = Find(id);
    if (c == nullptr) return absl::NotFoundError(UnknownConn(id));
    if (!c->connected) {
      return absl::FailedPreconditionError(
          absl::StrCat("connection ", id, " is not connected"));
    }
    if (c->failed) {
      // As a verbs QP in the error state flushes what is posted to it
      // (IBV_WC_WR_FLUSH_ERR): the same code as the WRITEs the failure
      // flushed (see prism/engine.h).
      return absl::AbortedError(absl::StrCat("connection ", id, " has failed"));
    }
    if (req.length > 0xFFFFFFFFull) {
      return absl::InvalidArgumentError("WRITE longer than 2^32-1 bytes");
    }
    if (req.remote_addr + req.length < req.remote_addr) {
      return absl::InvalidArgumentError("remote range wraps around 2^64");
    }
    auto it = by_lkey_.find(req.lkey);
    if (it == by_lkey_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown lkey ", req.lkey));
    }
    Region& r = regions_[it->second];
    if ((r.mr.access & kAccessLocal) == 0) {
      return absl::PermissionDeniedError("region lacks kAccessLocal");
    }
    const uint64_t la = reinterpret_cast<uint64_t>(req.local_addr);
    if (req.length > 0 && (req.local_addr == nullptr || la < r.mr.addr ||
                           req.length > r.mr.length ||
                           la - r.mr.addr > r.mr.length - req.length)) {
      return absl::OutOfRangeError("local range is outside the region of lkey");
    }
    if (c->post_msn - c->msg_una >= c->max_msgs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "max_outstanding_messages (", c->max_msgs, ") WRITEs outstanding"));
    }
    if (!CqRoom()) {
      ++stats_.writes_refused_cq_full;
      ++c->st.writes_refused_cq_full;
      return absl::ResourceExhaustedError(
          absl::StrCat("completion queue full: ", cq_tail_ - cq_head_,
                       " completions not polled + ", cq_reserved_,
                       " WRITEs outstanding >= cq_capacity ", opt_.cq_capacity,
                       "; poll completions"));
    }
    ++cq_reserved_;  // this WRITE's completion slot
    c->EnsureSender();
    if (c->post_msn - c->msg_una >= c->msgs.size()) c->GrowMsgs();
    if (!c->Outstanding()) c->last_heard = std::max(c->last_heard, now);
    Touch(c);
    TxMsg& m = c->Msg(c->post_msn);
    m = TxMsg{};
    m.wr_id = req.wr_id;
    m.src = static_cast<const uint8_t*>(req.local_addr);
    m.remote_addr = req.remote_addr;
    m.len = static_cast<uint32_t>(req.length);
    m.rkey = req.rkey;
    m.imm = req.immediate;
    m.has_imm = req.has_immediate;
    m.npkts = m.len == 0 ? 1 : (m.len + c->mtu - 1) / c->mtu;
    m.first_psn = c->next_assign_psn;
    m.region = it->second;
    c->next_assign_psn += m.npkts;
    ++r.refs;
    ++c->post_msn;
    return absl::OkStatus();
  }

  // -------------------------------------------------------------- receive
  // Packets of a burst whose header checksums OnReceive computes at once
  // (and so the most a DataRun call gets).
  static constexpr size_t kRxChunk = 64;
  // Header checksums are computed for a chunk of the burst at once
  // (interleaved CRC32C chains, wire::HeaderCrcs), then each packet is
  // decoded and handled in order, exactly as one at a time. A split packet
  // whose payload was read in place after RxDestination is matched to that
  // claim and not decoded nor checksummed again (its header bytes are
  // compared with those RxDestination decoded).
  void OnReceive(Time now, const RxPacket* pkts, size_t n) {
    Observe(now);
    constexpr size_t kChunk = kRxChunk;
    // Packet j of the chunk: its header checksum crc[j] (when it has one: a
    // checksum span, and not read in place; with claims has_crc[j] says
    // which, without them hdr[j] != kNoHeader) and its claim. hdr/span: what
    // HeaderCrcs checksums: each packet's header (a zero one for a packet
    // without a span), or, with claims, only those of the packets not read
    // in place (their checksums then spread to crc[j]).
    static constexpr uint8_t kNoHeader[wire::kDataHeaderSize] = {};
    const uint8_t* hdr[kChunk];
    size_t span[kChunk];
    uint32_t crc[kChunk];
    bool has_crc[kChunk];
    const RxClaim* claim[kChunk];
    const bool batch = in_batch_ = nclaims_ > 0;
    claim_next_ = claim_done_ = 0;
    for (size_t i = 0; i < n; i += kChunk) {
      const size_t k = std::min(kChunk, n - i);
      if (!batch) {
        // Each packet's checksum span; and the connections of the chunk's
        // packets start loading (a packet with a span holds at least the
        // common header), each once per stretch of packets of one
        // connection, while the checksums are computed and the packets
        // before them handled. Prefetches only: no effect on results.
        uint32_t prev_id = 0xFFFFFFFFu;
        for (size_t j = 0; j < k; ++j) {
          const RxPacket& rx = pkts[i + j];
          const size_t sp = wire::internal::HeaderCrcSpanImpl(rx.data, rx.len);
          hdr[j] = sp != 0 ? rx.data : kNoHeader;
          span[j] = sp != 0 ? sp : sizeof(kNoHeader);
          if (sp == 0) continue;
          const uint32_t id = Get32(rx.data + wire::internal::off::kDstConn);
          if (id == prev_id) continue;
          prev_id = id;
          const Conn* c = Find(id);
          if (c == nullptr) continue;
          __builtin_prefetch(&c->connected);
          __builtin_prefetch(&c->snd_una);
          __builtin_prefetch(&c->all_head);
          __builtin_prefetch(&c->rcv_nxt);
          __builtin_prefetch(&c->ack_deadline);
        }
        wire::HeaderCrcs(hdr, span, k, crc);
      } else {
        // Only the packets not read in place are checksummed (m of them).
        size_t m = 0;
        for (size_t j = 0; j < k; ++j) {
          const RxPacket& rx = pkts[i + j];
          claim[j] = MatchClaim(rx);
          const size_t sp =
              claim[j] != nullptr
                  ? 0
                  : wire::internal::HeaderCrcSpanImpl(rx.data, rx.len);
          has_crc[j] = sp != 0;
          if (sp != 0) {
            hdr[m] = rx.data;
            span[m++] = sp;
          }
        }
        wire::HeaderCrcs(hdr, span, m, crc);
        for (size_t j = k; j-- > 0;) crc[j] = has_crc[j] ? crc[--m] : 0;
      }
      for (size_t j = 0; j < k; ++j) {
        if (run_c_ != nullptr && (batch ? has_crc[j] : hdr[j] != kNoHeader) &&
            MayContinueRun(pkts[i + j].data)) {
          // The packets continuing the receive run, in one call.
          j += DataRun(now, pkts + i + j, k - j, crc + j);
          if (j == k) break;
        }
        const bool hc = batch ? has_crc[j] : hdr[j] != kNoHeader;
        if (!batch && j + 1 < k && hdr[j + 1] != kNoHeader)
          PrefetchRxNext(hdr[j + 1]);
        ReceiveOne(now, pkts[i + j], hc ? &crc[j] : nullptr,
                   batch ? claim[j] : nullptr);
      }
    }
    // Connection failures held back while packets of the connection read in
    // place were still ahead in the batch (see OnNack).
    for (Conn* c : deferred_fail_) {
      if (!c->failed && c->connected)
        FlushWrites(c, absl::StatusCode::kAborted, c->deferred_code,
                    c->deferred_culprit);
      c->fail_deferred = false;
      Touch(c);
    }
    deferred_fail_.clear();
    run_c_ = nullptr;
    in_batch_ = false;
    nclaims_ = 0;  // RxDestination claims live until the next OnReceive
    claims_full_ = false;
  }

  // Prefetches only (no effect on results): for the next packet of a chunk
  // (its connection's lines were prefetched with the chunk), what handling
  // it reads through that connection: a DATA packet's receive-bitmap word
  // and message entry (the PSN's and MSN's low bits index them, as the
  // extended values would), another packet's oldest send slot.
  // REQUIRES: `hdr` holds at least the DATA header for a DATA type byte, the
  // common header otherwise (a header with a checksum span does).
  __attribute__((always_inline)) void PrefetchRxNext(const uint8_t* hdr) {
    const Conn* c = Find(Get32(hdr + wire::internal::off::kDstConn));
    if (c == nullptr) return;
    if (hdr[wire::internal::off::kType] ==
        static_cast<uint8_t>(wire::PacketType::kData)) {
      if (!c->rx_bits.empty()) {
        const uint32_t psn = Get32(hdr + wire::internal::off::kDPsn);
        __builtin_prefetch(&c->rx_bits[(psn / 64) & c->rx_word_mask]);
      }
      if (!c->rx_msgs.empty()) {
        const uint32_t msn = Get32(hdr + wire::internal::off::kDMsn);
        __builtin_prefetch(&c->rx_msgs[msn & c->rx_msg_mask]);
      }
    } else if (!c->slots.empty()) {
      __builtin_prefetch(&c->slots[c->snd_una & c->win_mask]);
    }
  }

  // The claim of a split packet whose payload RxDestination resolved and
  // the datapath read in place: same header bytes, payload at the resolved
  // address. Claims are made in the order packets are handed over, so the
  // search goes forward from the last match; nullptr when none matches (the
  // packet is then decoded as any other).
  const RxClaim* MatchClaim(const RxPacket& rx) {
    if (rx.payload == nullptr || rx.len != wire::kDataHeaderSize)
      return nullptr;
    for (size_t i = claim_next_; i < nclaims_; ++i) {
      const RxClaim& k = claims_[i];
      if (k.dst == rx.payload && k.plen == rx.payload_len &&
          memcmp(k.raw, rx.data, wire::kDataHeaderSize) == 0) {
        claim_next_ = i + 1;
        return &k;
      }
    }
    return nullptr;
  }

  // Whether a packet of `c` read in place is still ahead in this batch.
  bool InPlaceAhead(const Conn* c) const {
    if (!in_batch_) return false;
    for (size_t i = claim_done_; i < nclaims_; ++i)
      if (claims_[i].conn == c->id && claims_[i].dst != nullptr) return true;
    return false;
  }

  // Receive in place (Engine::RxDestination): the acceptance rules of
  // OnData (AcceptData, the same function), read only, against the
  // connection state plus the claims of this batch (packets resolved since
  // the last OnReceive, not yet seen by OnData).
  uint8_t* RxDestination(const uint8_t* hdr, size_t hdr_len,
                         size_t payload_len) {
    if (placer_ != &memcpy_placer_ || claims_full_ ||
        hdr_len != wire::kDataHeaderSize || payload_len > wire::kMaxPayloadLen)
      return nullptr;
    // Decode the header alone: DecodeSplit checks the declared payload
    // length against payload_len and never reads the payload pointer.
    wire::Packet& p = rxd_pkt_;
    if (wire::DecodeSplit(hdr, hdr_len, hdr, payload_len, &p) !=
            wire::DecodeError::kOk ||
        p.type != wire::PacketType::kData || p.trimmed)
      return nullptr;
    const wire::DataHeader& h = p.data;
    const Conn* c = Find(h.dst_conn);
    if (c == nullptr || !c->connected || c->failed) return nullptr;
    // Allocated on first use, so an engine that never receives in place
    // stays small (Engine.TenThousandIdleEnginesFitInABoundedFootprint).
    if (claims_.empty()) claims_.resize(kMaxRxClaims);
    if (nclaims_ == claims_.size()) {
      claims_full_ = true;  // unknown claims from here on: no more in place
      return nullptr;
    }
    const uint64_t psn = Ext(c->rcv_nxt, h.psn);
    const uint64_t base_addr = h.remote_addr - h.msg_offset;
    const bool has_imm = (h.flags & wire::kFlagHasImmediate) != 0;
    // Claims of this batch for the same connection: a second copy of a
    // PSN, or a message whose fields disagree, is never placed in place;
    // the bytes claimed for one message must fit in it.
    uint64_t claimed = 0;
    bool conflict = false;
    for (size_t i = 0; i < nclaims_; ++i) {
      const RxClaim& k = claims_[i];
      if (k.conn != h.dst_conn) continue;
      if (k.psn == psn) conflict = true;
      if (k.h.msn == h.msn) {
        claimed += k.plen;
        if (k.h.msg_len != h.msg_len || k.base_addr != base_addr ||
            k.has_imm != has_imm || (has_imm && k.h.immediate != h.immediate))
          conflict = true;
      }
    }
    // Claimed whatever the outcome (zero-length packets too): a packet
    // refused now (e.g. beyond the window) may still be accepted by OnData
    // after earlier ones moved it, and must not be overtaken unseen.
    RxClaim& k = claims_[nclaims_++];
    k.conn = h.dst_conn;
    k.psn = psn;
    k.base_addr = base_addr;
    k.plen = h.payload_len;
    k.has_imm = has_imm;
    k.dst = nullptr;
    k.h = h;
    memcpy(k.raw, hdr, wire::kDataHeaderSize);
    if (conflict || payload_len == 0) return nullptr;
    RxAccept a;
    if (AcceptData(c, h, psn, /*trimmed=*/false, /*payload=*/nullptr, claimed,
                   &a) != RxVerdict::kAccept)
      return nullptr;
    k.dst = a.dst;
    return a.dst;
  }

  // ------------------------------------------------------------- transmit
  size_t PollTransmit(Time now, TxPacket* out, size_t max) {
    Observe(now);
    size_t n = 0;
    const size_t nc = order_.size();
    if (nc == 0 || max == 0) return 0;
    // Timers first (deterministic id order). A connection whose deadline is
    // known (not stale) and in the future has nothing due: skipped
    // (RunTimers would not change it). One that ran them gets its deadline
    // now, so that the next call (the simulator pulls about one packet per
    // call) skips it unless something changed its timers meanwhile. With
    // no connection stale and the earliest deadline in the future
    // (timer_min_, the minimum the previous pass left) the whole pass is
    // skipped.
    if (!(valid_ & kTimersValid) || timer_min_ <= now) {
      Time min = kTimeInfinite;
      cross_touched_ = false;
      for (size_t k = 0; k < nc; ++k) {
        Sched& q = sched_[k];
        if (q.dirty == kStale || q.deadline <= now) {
          Conn* c = order_[k];
          RunTimers(now, c);
          Touch(c);
          q.deadline = TimerDeadline(c);
          q.dirty = kDirty;
        }
        min = std::min(min, q.deadline);
      }
      // (A retirement may have resent transmissions of connections the pass
      // had already left behind (fate sharing), making them stale: then
      // the next call runs the pass again.)
      if (!cross_touched_) valid_ |= kTimersValid;
      timer_min_ = min;
    }
    // Then packets, round-robin from a rotating cursor. A connection that
    // cannot emit (nothing queued, no probe due, no data to send; all of it
    // unchanged since its cache was refreshed) is skipped: EmitConn would
    // return 0 without side effects.
    bool progress = true;
    while (n < max && progress) {
      progress = false;
      // j = (cursor_ + k) % nc without a division (cursor_ < nc).
      for (size_t k = 0, j = cursor_; k < nc && n < max;
           ++k, j = j + 1 == nc ? 0 : j + 1) {
        const Sched& q = sched_[j];
        if (!MayEmit(q, now)) continue;
        Conn* c = order_[j];
        const size_t before = n;
        const uint32_t head = c->all_head;
        const Time ack_deadline = c->ack_deadline;
        const bool all_sent = c->send_msn == c->post_msn;
        // A clean connection's cached probe time is its selector's: none
        // due before it (NextProbe would return -1).
        const bool probe_due = q.dirty != kClean || q.probe <= now;
        n += EmitConn(now, c, out + n, max - n, probe_due);
        // Sending appends to the send-order list and consumes queues; of the
        // timers' inputs (TimerDeadline) it can change only the list's head
        // (an empty list), whether new data is left (the tail resend's
        // condition) and, for completeness, the delayed-SACK deadline.
        TouchSent(c, c->all_head != head || c->ack_deadline != ack_deadline ||
                         (c->send_msn == c->post_msn) != all_sent);
        if (n != before) progress = true;
      }
      cursor_ = cursor_ + 1 == nc ? 0 : cursor_ + 1;
    }
    // Header checksums of the whole burst at once (the encoders left them
    // zero): interleaved CRC32C chains, see wire::SealHeaders.
    // (A burst too short for the interleaved chains, as the simulator's
    // one packet per call, is sealed header by header.)
    if (n < 4) {
      for (size_t i = 0; i < n; ++i)
        wire::internal::Seal(out[i].header, out[i].header_len);
      stats_.tx_packets += n;
      return n;
    }
    // (Read in place from the TxPackets: no pointer and length arrays.)
    static_assert(sizeof(TxPacket::header_len) == 2 &&
                  offsetof(TxPacket, header_len) >=
                      offsetof(TxPacket, header) + TxPacket::kMaxHeaderBytes);
    wire::SealEncodedHeadersStrided(
        out[0].header, sizeof(TxPacket),
        offsetof(TxPacket, header_len) - offsetof(TxPacket, header), n);
    stats_.tx_packets += n;
    return n;
  }

  // Earliest event over all connections. Each connection's share is cached
  // (Refresh) and recomputed only after something touched it; the engine's
  // minimum is cached too, so a call without intervening input costs O(1).
  // Result: last_now_ when any control packet is queued, else
  // min(min deadline, max(last_now_, min next_send_time of connections with
  // sendable data)) -- the same value as evaluating every connection.
  Time NextEventTime() {
    if (!(valid_ & kNextValid)) {
      for (size_t i = 0; i < dirty_n_; ++i) Refresh(dirty_[i]);
      dirty_n_ = 0;
      bool ctrl = false;
      Time t = kTimeInfinite, send = kTimeInfinite;
      for (const Sched& q : sched_) {
        ctrl |= q.ctrl;
        t = std::min(t, std::min(q.deadline, q.probe));
        send = std::min(send, q.send);
      }
      next_ctrl_ = ctrl;
      next_deadline_ = t;
      next_send_ = send;
      valid_ |= kNextValid;
    }
    if (next_ctrl_) return last_now_;
    return next_send_ == kTimeInfinite
               ? next_deadline_
               : std::min(next_deadline_, std::max(last_now_, next_send_));
  }

  size_t PollCompletions(Completion* out, size_t max) {
    size_t n = 0;
    for (;;) {
      const size_t k =
          static_cast<size_t>(std::min<uint64_t>(max - n, cq_tail_ - cq_head_));
      const uint64_t mask = cq_.size() - 1;
      for (size_t i = 0; i < k; ++i) out[n + i] = cq_[(cq_head_ + i) & mask];
      cq_head_ += k;
      n += k;
      // The room just freed goes first to the connections held by a full
      // queue; what they deliver is returned too while `max` allows.
      if (held_n_ == 0 || !ResumeHeld() || n == max) return n;
    }
  }

  // Whether one more completion other than kConnectionError may be queued
  // (or a slot reserved): the queued ones and the reserved ones stay below
  // the capacity.
  bool CqRoom() const {
    return cq_tail_ - cq_head_ + cq_reserved_ < opt_.cq_capacity;
  }
  size_t CompletionsQueued() const {
    return static_cast<size_t>(cq_tail_ - cq_head_);
  }

  // Re-runs in-order delivery for the held connections, oldest hold first,
  // while the completion queue has room. A connection that runs out of room
  // again stays first. Returns whether anything was queued.
  bool ResumeHeld() {
    const uint64_t before = cq_tail_;
    size_t i = 0;
    while (i < held_n_ && CqRoom()) {
      Conn* c = held_[i];
      c->cq_held = false;
      if (!Deliver(c)) {
        c->cq_held = true;
        break;
      }
      ++i;
    }
    std::copy(held_.data() + i, held_.data() + held_n_, held_.data());
    held_n_ -= i;
    return cq_tail_ != before;
  }

  EngineStats stats() const { return stats_; }

  // Marks a connection's cached NextEventTime share stale (anything that may
  // have changed its timers, queues or sender state calls this).
  __attribute__((always_inline)) void Touch(Conn* c) {
    valid_ = 0;
    Sched& q = sched_[c->pos];
    const uint8_t was = q.dirty;
    q.dirty = kStale;
    if (was != kClean) return;
    dirty_[dirty_n_++] = c;
  }
  // Touch after EmitConn: Touch itself when it changed the timers' inputs
  // (`timers`); otherwise its queues and send state are re-read and its
  // deadline is kept when it is known. (One function for both, so that
  // PollTransmit keeps the list's append inlined.)
  __attribute__((always_inline)) void TouchSent(Conn* c, bool timers) {
    valid_ &= timers ? 0 : kTimersValid;
    Sched& q = sched_[c->pos];
    const uint8_t was = q.dirty;
    if (timers) {
      q.dirty = kStale;
    } else if (was == kClean) {
      q.dirty = kDirty;
    }
    if (was != kClean) return;
    dirty_[dirty_n_++] = c;
  }

  absl::StatusOr<ConnectionStats> connection_stats(ConnId id) const {
    const Conn* c = Find(id);
    if (c == nullptr) return absl::NotFoundError(UnknownConn(id));
    ConnectionStats s = c->st;
    s.inflight_bytes = c->inflight_bytes;
    s.cwnd_bytes = c->cwnd;
    s.srtt = c->srtt;
    s.rto = c->connected ? c->Rto() : 0;
    uint16_t active = 0;
    if (c->sel) {
      for (uint16_t p = 0; p < c->num_paths; ++p) {
        const auto st = c->sel->state(p);
        if (st == routing::PathState::kGood || st == routing::PathState::kSkip)
          ++active;
      }
    }
    s.paths_active = active;
    return s;
  }

  absl::StatusOr<PathStats> path_stats(ConnId id, PathId path) const {
    const Conn* c = Find(id);
    if (c == nullptr) return absl::NotFoundError(UnknownConn(id));
    if (!c->connected) {
      return absl::FailedPreconditionError("connection not connected");
    }
    if (path >= c->num_paths) {
      return absl::NotFoundError(
          absl::StrCat("path ", path, " >= num_paths ", c->num_paths));
    }
    PathStats s;
    if (!c->paths.empty()) {  // sender state allocated (something was sent)
      const PathInfo& pi = c->paths[path];
      s.tx_packets = pi.tx_seq;
      s.tx_bytes = pi.st.tx_bytes;
      s.acked_packets = pi.st.acked_packets;
      s.lost_packets = c->path_cold[path].lost_packets;
      s.trimmed_packets = c->path_cold[path].trimmed_packets;
      s.ecn_marked = c->path_cold[path].ecn_marked;
      s.retired = c->path_cold[path].retired;
      s.restored = c->path_cold[path].restored;
      s.srtt = pi.srtt;
    }
    s.state = static_cast<uint8_t>(c->sel->state(path));
    return s;
  }

  absl::Status SetPlaneUp(ConnId id, uint16_t plane, bool up, Time now) {
    Observe(now);
    Conn* c = Find(id);
    if (c == nullptr) return absl::NotFoundError(UnknownConn(id));
    if (!c->connected) {
      return absl::FailedPreconditionError("connection not connected");
    }
    if (plane >= c->num_planes) {
      return absl::InvalidArgumentError(
          absl::StrCat("plane ", plane, " >= num_planes ", c->num_planes));
    }
    const uint32_t bit = 1u << plane;
    const uint32_t before = c->planes_down_local;
    if (up) {
      c->planes_down_local &= ~bit;
    } else {
      c->planes_down_local |= bit;
    }
    if (before == c->planes_down_local) return absl::OkStatus();
    Touch(c);
    ApplyPlane(c, plane, up, now);
    ++c->plane_seq;
    // Tell the peer over every plane that is up on both sides, then repeat
    // it kPlaneRepeats times with doubling gaps from the RTO (there is no
    // acknowledgement on the wire; the receiver ignores repeats by seq).
    QueuePlaneStatus(c);
    c->plane_repeats_left = kPlaneRepeats;
    c->plane_resend_gap = c->RtoBase();
    c->plane_resend_at = now + c->plane_resend_gap;
    return absl::OkStatus();
  }

 private:
  // ------------------------------------------------------------ helpers
  // Recomputes a connection's cached share of NextEventTime.
  void Refresh(Conn* c) {
    Sched& q = sched_[c->pos];
    const Time deadline = q.dirty == kStale ? TimerDeadline(c) : q.deadline;
#ifndef NDEBUG
    if (deadline != TimerDeadline(c)) std::abort();  // a missed Touch
#endif
    q = Sched{};
    q.deadline = deadline;
    if (!c->connected || c->failed) return;
    q.ctrl = c->ctrl_tail != c->ctrl_head;
    q.work =
        q.ctrl || c->retx_head != c->retx_tail || c->send_msn != c->post_msn;
    q.probe = c->sel->NextProbeTime();
    if (HasSendable(c) && !c->no_path) q.send = c->next_send_time;
  }
  // The earliest of a connection's timers (what RunTimers acts on; it does
  // nothing before then). kTimeInfinite when not connected or failed.
  Time TimerDeadline(const Conn* c) const {
    if (!c->connected || c->failed) return kTimeInfinite;
    Time t = c->ack_deadline;
    if (c->all_head != kNil) {
      t = std::min(t, c->RtoTime());
      t = std::min(t, c->TlpTime());
      t = std::min(t, c->PathLossTime());
      t = std::min(t, c->TailResendTime());
    }
    t = std::min(t, c->plane_resend_at);
    if (c->Outstanding()) {
      t = std::min(t, c->last_heard + c->opt.connection_timeout);
      if (c->rnr_streak > 0 && c->opt.rnr_timeout > 0) {
        t = std::min(t, c->rnr_since + c->opt.rnr_timeout);
      }
    }
    return t;
  }
  // False when EmitConn(now, c) would emit nothing and change nothing.
  // (A clean connection's queues and selector are as Refresh saw them; one
  // that is not connected or failed has work == false and probe == inf.)
  static bool MayEmit(const Sched& q, Time now) {
    return q.dirty != kClean || q.work || q.probe <= now;
  }
  void QueuePlaneStatus(Conn* c) {
    for (uint16_t p = 0; p < c->num_planes; ++p) {
      if (c->PlaneDown(p)) continue;
      CtrlItem* it = c->PushCtrl();
      if (it == nullptr) break;
      *it = CtrlItem{};
      it->type = CtrlType::kPlane;
      it->path = p;  // path p is on plane p
      it->psn = c->plane_seq;
      it->planes_down = c->planes_down_local;
    }
  }
  void Observe(Time now) {
    if (now > last_now_) last_now_ = now;
  }
  static std::string UnknownConn(ConnId id) {
    return absl::StrCat("unknown connection ", id);
  }
  static size_t raw_id(ConnId id) { return static_cast<size_t>(id); }
  // Ids are assigned 1, 2, 3, ... and never reused, so a dense vector is the
  // per-packet lookup (closed ids hold nullptr).
  Conn* Find(ConnId id) {
    return raw_id(id) < by_id_.size() ? by_id_[id] : nullptr;
  }
  const Conn* Find(ConnId id) const {
    return raw_id(id) < by_id_.size() ? by_id_[id] : nullptr;
  }
  uint32_t FreshKey() {
    for (;;) {
      const uint32_t k = rng_.Next32();
      if (k != 0 && !by_lkey_.contains(k) && !by_rkey_.contains(k)) return k;
    }
  }
  absl::StatusOr<std::unique_ptr<routing::PathSelector>> MakeSelector(
      const ConnectionOptions& o, uint16_t np, uint16_t planes, uint64_t seed) {
    routing::PathSelectorConfig sc;
    sc.num_paths = np;
    sc.num_planes = planes;
    sc.policy = o.path_policy;
    sc.probe_interval = o.probe_interval;
    sc.seed = seed;
    return routing::MakePathSelector(sc);
  }
  absl::StatusOr<std::unique_ptr<congestion::Controller>> MakeCc(
      const ConnectionOptions& o) {
    congestion::ControllerConfig cc;
    cc.algorithm = o.congestion;
    cc.link_rate_bps = o.link_rate_bps;
    cc.base_rtt = o.base_rtt;
    cc.mtu_bytes = opt_.mtu_payload;
    cc.loss_is_congestion = o.loss_is_congestion;
    return congestion::MakeController(cc);
  }
  // Queues a completion. The caller checked the room (CqRoom) or holds a
  // reserved slot, except for kConnectionError (see prism/engine.h).
  void PushCompletion(const Completion& cpl) {
    if (cq_tail_ - cq_head_ == cq_.size()) GrowCq();
    cq_[cq_tail_++ & (cq_.size() - 1)] = cpl;
    stats_.cq_peak = std::max<uint64_t>(stats_.cq_peak, cq_tail_ - cq_head_);
  }
  // Doubles the completion ring (16 entries first), keeping the queued
  // completions at their positions modulo the new size.
  __attribute__((noinline)) void GrowCq() {
    const size_t n = std::max<size_t>(16, 2 * cq_.size());
    std::vector<Completion> grown(n);
    for (uint64_t i = cq_head_; i != cq_tail_; ++i) {
      grown[i & (n - 1)] = cq_[i & (cq_.size() - 1)];
    }
    cq_.swap(grown);
  }
  // A WRITE completes (OK or not): its reserved slot becomes the queued
  // completion.
  void PushWriteCompletion(const Completion& cpl) {
    --cq_reserved_;
    PushCompletion(cpl);
  }

  // The controller's outputs that the sender reads, cached in the
  // connection: read again after each of its events (OnAck, OnTimeout), the
  // only calls that change them.
  static void ReadCc(Conn* c) {
    c->cwnd = c->cc->window_bytes();
    c->pacing = c->cc->pacing_rate_bps();
  }

  // ------------------------------------------------------ lists (sender)
  void LinkSlot(Conn* c, uint32_t idx) {
    TxSlot& s = c->slots[idx];
    PathInfo& p = c->paths[s.path];
    if (p.bgroup != kNoBalance) c->GroupAdd(p.bgroup);
    s.next_path = kNil;
    s.prev_path = p.tail;
    if (p.tail != kNil) {
      c->slots[p.tail].next_path = idx;
    } else {
      p.head = idx;
    }
    p.tail = idx;
    s.next_all = kNil;
    s.prev_all = c->all_tail;
    if (c->all_tail != kNil) {
      c->slots[c->all_tail].next_all = idx;
    } else {
      c->all_head = idx;
    }
    c->all_tail = idx;
  }
  void UnlinkSlot(Conn* c, uint32_t idx) {
    TxSlot& s = c->slots[idx];
    PathInfo& p = c->paths[s.path];
    if (p.bgroup != kNoBalance) c->GroupSub(p.bgroup);
    if (s.prev_path != kNil) {
      c->slots[s.prev_path].next_path = s.next_path;
    } else {
      p.head = s.next_path;
    }
    if (s.next_path != kNil) {
      c->slots[s.next_path].prev_path = s.prev_path;
    } else {
      p.tail = s.prev_path;
    }
    if (s.prev_all != kNil) {
      c->slots[s.prev_all].next_all = s.next_all;
    } else {
      c->all_head = s.next_all;
    }
    if (s.next_all != kNil) {
      c->slots[s.next_all].prev_all = s.prev_all;
    } else {
      c->all_tail = s.prev_all;
    }
    s.prev_path = s.next_path = s.prev_all = s.next_all = kNil;
  }

  // After slots were cut off the head of the send-order list (OnSack): the
  // new head has no predecessor, an empty list no tail.
  static void FixAllHead(Conn* c) {
    if (c->all_head != kNil) {
      c->slots[c->all_head].prev_all = kNil;
    } else {
      c->all_tail = kNil;
    }
  }

  // Slot in flight -> lost: out of the lists, queued for retransmission.
  void MarkLost(Conn* c, uint64_t psn, bool front) {
    const uint32_t idx = static_cast<uint32_t>(psn & c->win_mask);
    TxSlot& s = c->slots[idx];
    UnlinkSlot(c, idx);
    s.state = kLost;
    c->inflight_bytes -= s.len;
    if (c->retx_tail - c->retx_head >= c->retx_size) CompactRetx(c);
    if (front && c->retx_head != c->retx_tail) {
      --c->retx_head;
      c->retx[c->retx_head % c->retx_size] = psn;
    } else {
      c->retx[(c->retx_tail++) % c->retx_size] = psn;
    }
  }

  // MarkLost for a loss declared against the slot's path (path timeout,
  // per-path inference, PTO, RTO): the slot remembers it, so that an ack
  // of that very copy later shows the declaration was wrong (AckSlot,
  // SpuriousLoss).
  void DeclareLost(Conn* c, uint64_t psn) {
    MarkLost(c, psn, false);
    c->Slot(psn).tx_count |= kDeclaredLost;
  }

  // Drops stale entries (acked meanwhile) from the retransmit ring, keeping
  // order. Live entries are distinct PSNs of the window, so they fit.
  void CompactRetx(Conn* c) {
    uint64_t w = c->retx_head;
    for (uint64_t r = c->retx_head; r != c->retx_tail; ++r) {
      const uint64_t psn = c->retx[r % c->retx_size];
      if (psn >= c->snd_una && c->Slot(psn).state == kLost) {
        c->retx[(w++) % c->retx_size] = psn;
      }
    }
    c->retx_tail = w;
  }

  // ----------------------------------------------------------- receive
  // `hdr_crc`: the header checksum computed by OnReceive, or nullptr.
  // `claim`: the RxDestination claim of a packet read in place (its header
  // already decoded and checked there), or nullptr.
  __attribute__((always_inline)) void ReceiveOne(Time now, const RxPacket& rx,
                                                 const uint32_t* hdr_crc,
                                                 const RxClaim* claim) {
    run_c_ = nullptr;  // OnData sets it again when it accepts a packet
    ++stats_.rx_packets;
    wire::DecodeError e;
    if (claim != nullptr) {
      claim_done_ = static_cast<size_t>(claim - claims_.data()) + 1;
      pkt_.type = wire::PacketType::kData;
      pkt_.data = claim->h;
      pkt_.payload = rx.payload;
      pkt_.payload_len = rx.payload_len;
      pkt_.trimmed = false;
      e = wire::DecodeError::kOk;
    } else if (hdr_crc != nullptr) {
      e = rx.payload != nullptr
              ? wire::internal::DecodeSplitWithCrcImpl(
                    rx.data, rx.len, rx.payload, rx.payload_len, *hdr_crc,
                    &pkt_)
              : wire::DecodeWithCrc(rx.data, rx.len, *hdr_crc, &pkt_);
    } else if (rx.payload != nullptr) {
      e = wire::DecodeSplit(rx.data, rx.len, rx.payload, rx.payload_len, &pkt_);
    } else {
      e = wire::Decode(rx.data, rx.len, &pkt_);
    }
    if (e != wire::DecodeError::kOk) {
      switch (e) {
        case wire::DecodeError::kBadMagic:
          ++stats_.rx_drop_bad_magic;
          return;
        case wire::DecodeError::kBadVersion:
          ++stats_.rx_drop_bad_version;
          return;
        case wire::DecodeError::kBadChecksum:
          ++stats_.rx_drop_bad_checksum;
          return;
        default:
          ++stats_.rx_drop_malformed;
          return;
      }
    }
    if (pkt_.type == wire::PacketType::kData) {
      // DATA (most packets): the steps of the general dispatch below.
      Conn* c = Find(pkt_.data.dst_conn);
      if (c == nullptr || !c->connected || c->failed) {
        ++stats_.rx_drop_unknown_conn;
        return;
      }
      Touch(c);
      OnData(now, c, rx);
      return;
    }
    uint32_t dst = 0;
    switch (pkt_.type) {
      case wire::PacketType::kData:
        dst = pkt_.data.dst_conn;
        break;
      case wire::PacketType::kSack:
        dst = pkt_.sack.dst_conn;
        break;
      case wire::PacketType::kNack:
        dst = pkt_.nack.dst_conn;
        break;
      case wire::PacketType::kProbe:
      case wire::PacketType::kProbeAck:
        dst = pkt_.probe.dst_conn;
        break;
      case wire::PacketType::kPlaneStatus:
        dst = pkt_.plane.dst_conn;
        break;
      case wire::PacketType::kConnect:
      case wire::PacketType::kConnectAck:
        // In-band setup is not handled by the engine (out-of-band Connect()).
        ++stats_.rx_drop_inband_setup;
        return;
    }
    Conn* c = Find(dst);
    if (c == nullptr || !c->connected || c->failed) {
      ++stats_.rx_drop_unknown_conn;
      return;
    }
    Touch(c);
    switch (pkt_.type) {
      case wire::PacketType::kData:  // handled above
        return;
      case wire::PacketType::kSack:
        c->last_heard = now;
        OnSack(now, c, pkt_.sack);
        return;
      case wire::PacketType::kNack:
        c->last_heard = now;
        OnNack(now, c, pkt_.nack);
        return;
      case wire::PacketType::kProbe: {
        c->last_heard = now;
        if (pkt_.probe.path_id >= c->num_paths) {
          ++stats_.rx_drop_malformed;
          return;
        }
        CtrlItem* it = c->PushCtrl();
        if (it != nullptr) {
          *it = CtrlItem{};
          it->type = CtrlType::kProbeAck;
          it->path = pkt_.probe.path_id;
          it->psn = pkt_.probe.probe_seq;
          it->ts = pkt_.probe.send_ts;
        }
        return;
      }
      case wire::PacketType::kProbeAck: {
        c->last_heard = now;
        const uint16_t p = pkt_.probe.path_id;
        if (p >= c->num_paths) {
          ++stats_.rx_drop_malformed;
          return;
        }
        ++c->st.probe_acks_received;
        const Time rtt = EchoRtt(c, now, pkt_.probe.send_ts);
        const auto before = c->sel->state(p);
        c->sel->OnFeedback(p, routing::PathFeedback::kProbeOk, now,
                           rtt > 0 ? rtt : 0);
        if (before == routing::PathState::kAssumedBad &&
            c->sel->state(p) != routing::PathState::kAssumedBad) {
          ++c->st.paths_restored;
          if (!c->paths.empty()) ++c->path_cold[p].restored;
        }
        c->no_path = false;
        return;
      }
      case wire::PacketType::kPlaneStatus: {
        c->last_heard = now;
        const auto& ps = pkt_.plane;
        if (static_cast<int32_t>(ps.seq - c->peer_plane_seq) <= 0) return;
        c->peer_plane_seq = ps.seq;
        const uint32_t mask =
            c->num_planes >= 32 ? 0xFFFFFFFFu : ((1u << c->num_planes) - 1);
        const uint32_t down = ps.planes_down & mask;
        for (uint16_t p = 0; p < c->num_planes; ++p) {
          const uint32_t bit = 1u << p;
          if ((down & bit) != (c->peer_planes_down & bit)) {
            c->peer_planes_down ^= bit;
            const bool up_now =
                ((c->peer_planes_down | c->planes_down_local) & bit) == 0;
            ApplyPlane(c, p, up_now, now);
          }
        }
        return;
      }
      default:
        return;
    }
  }

  // A plane went up/down (locally or at the peer): tell the selector and,
  // when it went down, retransmit what was in flight on it at once.
  void ApplyPlane(Conn* c, uint16_t plane, bool up, Time now) {
    const bool effective_up = up && !c->PlaneDown(plane);
    c->sel->SetPlaneUp(plane, effective_up, now);
    c->no_path = false;
    if (effective_up || c->paths.empty()) return;
    for (uint32_t p = plane; p < c->num_paths; p += c->num_planes) {
      while (c->paths[p].head != kNil) {
        const uint32_t idx = c->paths[p].head;
        const uint64_t psn = PsnOfSlot(c, idx);
        ++c->path_cold[p].lost_packets;
        MarkLost(c, psn, false);
      }
    }
  }

  uint64_t PsnOfSlot(Conn* c, uint32_t idx) const {
    // The slot ring covers [snd_una, snd_una + win).
    const uint64_t base = c->snd_una & ~c->win_mask;
    uint64_t psn = base + idx;
    if (psn < c->snd_una) psn += c->win;
    return psn;
  }

  void QueueNack(Conn* c, const wire::DataHeader& h, uint64_t psn64,
                 wire::NackReason reason, bool ecn) {
    CtrlItem* it = c->PushCtrl();
    if (it == nullptr) return;
    *it = CtrlItem{};
    it->type = CtrlType::kNack;
    it->reason = reason;
    it->ecn = ecn ? 1 : 0;
    it->path = h.path_id;
    it->psn = h.psn;
    it->psn64 = psn64;
    it->ts = h.send_ts;
    ++c->st.tx_nacks;
  }

  // The receive-side acceptance rules of a DATA packet: the checks that
  // keep a stray write out. One function, called by OnData and by
  // RxDestination (receive in place), so the two cannot drift apart. Read
  // only. The first rule that fails decides the verdict (and so the
  // counter and NACK OnData gives), in this order: fields (payload length,
  // path id), trimmed, key and access, range, payload checksum, PSN window
  // and duplicate bit, message slot and fields, bytes left in the message.
  // `payload`: the payload bytes, or nullptr when they have not arrived yet
  // (receive in place: a checksum then cannot be checked: kNeedPayload).
  // `claimed`: bytes of this message resolved in place by earlier packets
  // of the batch, not yet counted in RxMsg::received.
  enum class RxVerdict : uint8_t {
    kAccept,
    kMalformed,    // fields out of range: dropped, nothing else
    kTrimmed,      // handled by OnData (NACK or re-ack)
    kBadKey,       // NACK BAD_KEY
    kBadRange,     // NACK BAD_RANGE
    kNeedPayload,  // payload checksum, bytes not received yet
    kCorrupt,      // NACK CORRUPT
    kDuplicate,    // re-acknowledged
    kOutOfWindow,  // NACK OUT_OF_WINDOW
    kNoBuffer,     // beyond the message ring of a held connection: NO_BUFFER
    kMsgMismatch,  // message fields disagree or too many bytes: dropped
  };
  struct RxAccept {
    uint32_t ridx = kNil;
    bool cached = false;  // region from the connection's one-entry cache
    uint64_t base_addr = 0;
    bool has_imm = false;
    bool has_slot = false;  // false: the message ring must grow first
    uint32_t word = 0;      // the PSN's word in rx_bits
    uint64_t bits = 0;      // and its value
    uint8_t* dst = nullptr;
  };
  __attribute__((always_inline)) RxVerdict AcceptData(
      const Conn* c, const wire::DataHeader& h, uint64_t psn, bool trimmed,
      const uint8_t* payload, uint64_t claimed, RxAccept* a) const {
    if (h.payload_len > c->remote_mtu || h.path_id >= c->num_paths)
      return RxVerdict::kMalformed;
    if (trimmed) return RxVerdict::kTrimmed;
    // Key and access (by_rkey_ holds live regions only).
    if (c->last_region != kNil && c->last_rkey == h.rkey &&
        c->last_region_gen == region_gen_) {
      a->ridx = c->last_region;
      a->cached = true;
    } else {
      auto it = by_rkey_.find(h.rkey);
      if (it == by_rkey_.end() ||
          (regions_[it->second].mr.access & kAccessRemoteWrite) == 0)
        return RxVerdict::kBadKey;
      a->ridx = it->second;
    }
    const Region& r = regions_[a->ridx];
    const uint64_t plen = h.payload_len;
    // The whole message [remote_addr - msg_offset, +msg_len) must lie in the
    // region (the decoder guarantees msg_offset + payload_len <= msg_len, so
    // this packet does too). Overflow-safe: no addition can wrap.
    const uint64_t mlen = h.msg_len;
    if (h.remote_addr < h.msg_offset ||
        h.remote_addr - h.msg_offset < r.mr.addr || mlen > r.mr.length ||
        h.remote_addr - h.msg_offset - r.mr.addr > r.mr.length - mlen)
      return RxVerdict::kBadRange;
    // Payload integrity.
    const bool has_crc = (h.flags & wire::kFlagPayloadCrc) != 0;
    if (plen > 0 && (has_crc || c->rx_crc_required)) {
      if (payload == nullptr) return RxVerdict::kNeedPayload;
      if (!has_crc || wire::Crc32c(payload, plen) != h.payload_crc)
        return RxVerdict::kCorrupt;
    }
    // PSN window and duplicates.
    if (psn < c->rcv_nxt) return RxVerdict::kDuplicate;
    if (psn >= c->rcv_nxt + c->win) return RxVerdict::kOutOfWindow;
    a->word = static_cast<uint32_t>((psn >> 6) & c->rx_word_mask);
    a->bits = c->rx_bits[a->word];
    if ((a->bits >> (psn & 63)) & 1) return RxVerdict::kDuplicate;
    // Message slot.
    const int32_t md = static_cast<int32_t>(h.msn - c->rcv_msn_next);
    a->base_addr = h.remote_addr - h.msg_offset;
    a->has_imm = (h.flags & wire::kFlagHasImmediate) != 0;
    if (md < 0 || md >= static_cast<int32_t>(c->win))
      return md >= 0 && c->cq_held ? RxVerdict::kNoBuffer
                                   : RxVerdict::kOutOfWindow;
    uint64_t received = 0;
    a->has_slot = static_cast<uint64_t>(md) < c->rx_msgs.size();
    if (a->has_slot) {
      const RxMsg& m = c->rx_msgs[h.msn & c->rx_msg_mask];
      if (m.active) {
        if (m.msn != h.msn) return RxVerdict::kOutOfWindow;
        if (m.len != h.msg_len || m.base_addr != a->base_addr ||
            m.has_imm != a->has_imm || (a->has_imm && m.imm != h.immediate))
          return RxVerdict::kMsgMismatch;
        received = m.received;
      }
    }
    if (received + claimed + plen > mlen) return RxVerdict::kMsgMismatch;
    a->dst = r.base + (h.remote_addr - r.mr.addr);
    return RxVerdict::kAccept;
  }

  void OnData(Time now, Conn* c, const RxPacket& rx) {
    const wire::DataHeader& h = pkt_.data;
    const uint64_t psn = Ext(c->rcv_nxt, h.psn);
    RxAccept a;
    const RxVerdict v = AcceptData(c, h, psn, pkt_.trimmed || rx.trimmed,
                                   pkt_.payload, /*claimed=*/0, &a);
    if (v == RxVerdict::kMalformed) {
      ++stats_.rx_drop_malformed;
      return;
    }
    c->last_heard = now;
    switch (v) {
      case RxVerdict::kAccept:
        break;
      case RxVerdict::kTrimmed:
        ++c->st.rx_trimmed;
        if (psn < c->rcv_nxt || psn >= c->rcv_nxt + c->win ||
            (c->rx_bits[(psn >> 6) & (c->rx_word_mask)] >> (psn & 63)) & 1) {
          // Already have it (or cannot have it): just re-acknowledge.
          ++stats_.rx_duplicates;
          NoteAck(now, c, h, psn, rx.ecn_ce, true);
          return;
        }
        QueueNack(c, h, psn, wire::NackReason::kTrimmed, rx.ecn_ce);
        return;
      case RxVerdict::kBadKey:
        ++stats_.rx_drop_bad_key;
        QueueNack(c, h, psn, wire::NackReason::kBadKey, rx.ecn_ce);
        return;
      case RxVerdict::kBadRange:
        ++stats_.rx_drop_bad_range;
        QueueNack(c, h, psn, wire::NackReason::kBadRange, rx.ecn_ce);
        return;
      case RxVerdict::kNeedPayload:  // payload present here: not reached
      case RxVerdict::kCorrupt:
        ++stats_.rx_drop_payload_corrupt;
        QueueNack(c, h, psn, wire::NackReason::kCorrupt, rx.ecn_ce);
        return;
      case RxVerdict::kDuplicate:
        ++stats_.rx_duplicates;
        NoteAck(now, c, h, psn, rx.ecn_ce, true);
        return;
      case RxVerdict::kOutOfWindow:
        ++stats_.rx_drop_out_of_window;
        QueueNack(c, h, psn, wire::NackReason::kOutOfWindow, rx.ecn_ce);
        return;
      case RxVerdict::kNoBuffer:
        ++stats_.rx_drop_no_buffer;
        QueueNack(c, h, psn, wire::NackReason::kNoBuffer, rx.ecn_ce);
        return;
      case RxVerdict::kMsgMismatch:
      case RxVerdict::kMalformed:
        ++stats_.rx_drop_malformed;
        return;
    }
    CommitData(now, c, rx, psn, a);
  }

  // Places a DATA payload at dst unless it is already there (read in place
  // after RxDestination: not copied again). The default placer is called
  // directly (a final class: no virtual call), but gcc keeps its Place out
  // of line (one call per packet); the copy loop inlined here instead
  // (CopyBlocks called directly) measured worse, 438 -> 442 instructions
  // per packet without placement and 1092 -> 1146 with it (DataRun's
  // locals spilled around the loop). On failure counts the drop, ends the
  // receive run and returns false. Shared by CommitData and DataRun.
  [[gnu::always_inline]] bool PlaceOrDrop(uint8_t* dst, const uint8_t* src,
                                          uint32_t len,
                                          const MemoryRegion& mr) {
    if (src == dst ||
        (placer_ == &memcpy_placer_ ? memcpy_placer_.Place(dst, src, len, mr)
                                    : placer_->Place(dst, src, len, mr)))
      return true;
    ++stats_.rx_drop_placement;
    run_c_ = nullptr;
    return false;
  }

  // Accepts a placed DATA packet (psn in the window, its bit clear):
  // rcv_high, ooo_count, the bitmap (rx_bits == c->rx_bits, word_mask ==
  // c->rx_word_mask) and rcv_nxt (== c->rcv_nxt). The in-order packet whose
  // successor has not arrived moves rcv_nxt by one without touching the
  // bitmap (what setting its bit and AdvanceRcvNxt would do: set it,
  // consume it). `bits` is rx_bits[word] as the acceptance check read it
  // (placement does not touch rx_bits). Returns whether psn is past
  // rcv_high (a gap). Shared by CommitData and CommitRun.
  [[gnu::always_inline]] bool AcceptPsn(Conn* c, uint64_t psn, uint64_t rcv_nxt,
                                        uint64_t* rx_bits, uint64_t word_mask,
                                        uint32_t word, uint64_t bits) {
    const bool gap = psn > c->rcv_high;
    if (psn >= c->rcv_high) {
      c->rcv_high = psn + 1;
    } else {
      ++c->ooo_count;
    }
    if (psn == rcv_nxt) {
      // The successor's bit: in `bits` unless it starts the next word.
      const uint64_t nx = psn + 1;
      const uint64_t nbits =
          (nx & 63) != 0 ? bits : rx_bits[(nx >> 6) & word_mask];
      if ((nbits >> (nx & 63)) & 1) {
        rx_bits[word] |= uint64_t{1} << (psn & 63);
        AdvanceRcvNxt(c);
      } else {
        c->rcv_nxt = nx;
      }
    } else {
      rx_bits[word] |= uint64_t{1} << (psn & 63);
    }
    return gap;
  }

  // An accepted DATA packet (pkt_ holds its decoded header): placement,
  // the receive window, the message and the SACK bookkeeping. A packet
  // placed here is remembered for the run fast path (DataRun; the packets
  // it accepts do not come here, so the run's first packet stays its
  // reference, which is as good: same message, same region).
  __attribute__((always_inline)) void CommitData(Time now, Conn* c,
                                                 const RxPacket& rx,
                                                 uint64_t psn,
                                                 const RxAccept& a) {
    const wire::DataHeader& h = pkt_.data;
    if (!a.cached) {
      c->last_rkey = h.rkey;
      c->last_region = a.ridx;
      c->last_region_gen = region_gen_;
    }
    const Region& r = regions_[a.ridx];
    const uint64_t plen = h.payload_len;
    if (!a.has_slot)
      c->GrowRxMsgs(static_cast<uint32_t>(h.msn - c->rcv_msn_next));
    RxMsg& m = c->rx_msgs[h.msn & c->rx_msg_mask];
    if (plen > 0 &&
        !PlaceOrDrop(a.dst, pkt_.payload, static_cast<uint32_t>(plen), r.mr))
      return;
    const bool gap = AcceptPsn(c, psn, c->rcv_nxt, c->rx_bits.data(),
                               c->rx_word_mask, a.word, a.bits);
    ++c->st.rx_data_packets;
    c->st.rx_data_bytes += plen;
    c->rx_bytes_total += plen;
    if (!m.active) {
      m.active = true;
      m.complete = false;
      m.msn = h.msn;
      m.len = h.msg_len;
      m.received = 0;
      m.base_addr = a.base_addr;
      m.has_imm = a.has_imm;
      m.imm = h.immediate;
    }
    m.received += plen;
    if (m.received == m.len) {
      m.complete = true;
      if (h.msn == c->rcv_msn_next) DeliverInOrder(c);
    }
    NoteAck(now, c, h, psn, rx.ecn_ce, gap);
    // (A run needs no payload checksum: the flag is the same on all its
    // packets.)
    if (!in_batch_ && !(h.flags & wire::kFlagPayloadCrc) &&
        !c->rx_crc_required) {
      run_c_ = c;
      run_hdr_ = rx.data;
    }
  }

  // A cheap filter before DataRun (whose call costs more than the check when
  // packets of many messages are interleaved, as in the simulator): a DATA
  // header of the run's connection and message. `p`: a header whose
  // checksum span is known (so a DATA header is 64 bytes long).
  bool MayContinueRun(const uint8_t* p) const {
    namespace off = wire::internal::off;
    return p[off::kType] == static_cast<uint8_t>(wire::PacketType::kData) &&
           Get32(p + off::kDstConn) == Get32(run_hdr_ + off::kDstConn) &&
           Get32(p + off::kDMsn) == Get32(run_hdr_ + off::kDMsn);
  }

  // The receive run fast path, for consecutive packets pkts[0, n) (n <=
  // kRxChunk) of the message whose packet was accepted just before them in
  // this OnReceive call (run_c_; pkt_ holds that packet's decoded header).
  // The packets are taken in units, each the longest stretch of packets
  // with consecutive PSNs whose acceptance is known (ending at one with
  // ECN CE), handled in two steps: one pass that validates and places each
  // packet (the Placer interface is per packet), then one commit for the
  // unit (CommitRun). A header that differs from the run's first one only
  // in per-packet fields (wire::internal::SameDataMessage: same connection,
  // message, key, flags) has the outcome that packet had in the connection
  // lookup and the key, range and message-consistency checks of AcceptData
  // (nothing between the two changed the connection, its regions or the
  // message's slot): they are not repeated; the decoder's field checks, the
  // payload checks and the message's byte count are, per packet; the PSN
  // window and the duplicate bits once per unit, against the state before
  // it (its own packets change neither for one another; a packet beyond the
  // window's end as it was, which rcv_nxt moving during the unit may have
  // let in, starts the next unit). A packet out of sequence starts the next
  // unit. Returns how many packets it handled; it stops, having changed
  // nothing for it, at the first packet whose outcome it does not know to
  // be acceptance (ReceiveOne then handles it exactly as any other: a
  // duplicate, a packet of another message, beyond the window, without a
  // header checksum), at one whose message slot is no longer active (the
  // message was delivered), or after a failed placement (counted as
  // received; it ends the run, as in CommitData). `crc[j]`: packet j's
  // header checksum as OnReceive computed it (a run is only open outside a
  // batch of claims, so every packet with a checksum span has one). Whether
  // it has a span is not looked up: a packet without one has no data
  // (tested), fewer header bytes than a DATA header or another type than
  // DATA, and fails the length check or the lead compared with the run's
  // DATA header (SameDataMessage), whatever crc[j] holds.
  // Out of line, with the run's invariants in locals (the connection's
  // fields that no packet of the run changes, the message's receive slot).
  __attribute__((noinline)) size_t DataRun(Time now, const RxPacket* pkts,
                                           size_t n, const uint32_t* crc) {
    namespace off = wire::internal::off;
    Conn* const c = run_c_;
    wire::DataHeader& h = pkt_.data;  // the previous packet's fields
    const uint8_t* const run_hdr = run_hdr_;
    // The message's base address, its region (the one of the connection's
    // cache, set by CommitData for the run's first packet).
    const uint64_t run_base = h.remote_addr - h.msg_offset;
    const Region& r = regions_[c->last_region];
    // Where remote address 0 would be mapped (the bytes at remote address
    // a are at region_at + a).
    const uintptr_t region_at = reinterpret_cast<uintptr_t>(r.base) - r.mr.addr;
    const uint64_t msg_len = h.msg_len;
    const uint32_t remote_mtu = c->remote_mtu;
    const uint16_t num_paths = c->num_paths;
    const uint64_t win = c->win;
    // The message's slot: valid for the whole call (the ring grows only in
    // CommitData for a packet without a slot, never one of the run).
    const int32_t md0 = static_cast<int32_t>(h.msn - c->rcv_msn_next);
    if (md0 < 0 || md0 >= static_cast<int32_t>(win) ||
        static_cast<uint64_t>(md0) >= c->rx_msgs.size())
      return 0;
    RxMsg& m = c->rx_msgs[h.msn & c->rx_msg_mask];
    // The per-packet checks of packet i (the decoder's and the payload's):
    // true, with its payload, length and destination, when they pass. No
    // check that the address is at least the offset: addr - msg_off ==
    // run_base cannot hold by wrapping around, as the message ends below
    // 2^64 (RegisterMemory, AcceptData's range check) and msg_off is in it.
    // (plen - 1 >= remote_mtu: empty, or more than the peer's MTU.)
    const uint8_t* payload;
    uint32_t plen;
    uint8_t* dst;
    auto check = [&](size_t i) __attribute__((always_inline)) {
      const RxPacket& rx = pkts[i];
      const uint8_t* p = rx.data;
      if (p == nullptr || rx.trimmed) return false;
      payload = rx.payload;
      size_t payload_bytes = rx.payload_len;
      if (payload == nullptr) {
        if (rx.len <= wire::kDataHeaderSize) return false;
        payload = p + wire::kDataHeaderSize;
        payload_bytes = rx.len - wire::kDataHeaderSize;
      } else if (rx.len != wire::kDataHeaderSize) {
        return false;
      }
      if (Get32(p + off::kCrc) != crc[i] ||
          !wire::internal::SameDataMessage(p, run_hdr))
        return false;
      // Each field tested as it is read (fewer values live at once).
      plen = Get16(p + off::kDPayloadLen) |
             uint32_t{Get16(p + off::kDPayloadLenHi)} << 16;
      if (plen - 1 >= remote_mtu || payload_bytes != plen) return false;
      const uint32_t msg_off = Get32(p + off::kDMsgOffset);
      const uint64_t end = uint64_t{msg_off} + plen;
      if (end > msg_len) return false;
      const uint16_t flags = Get16(p + off::kDFlags);
      if ((flags & (wire::kFlagFirstOfMessage | wire::kFlagLastOfMessage)) &&
          (((flags & wire::kFlagFirstOfMessage) && msg_off != 0) ||
           ((flags & wire::kFlagLastOfMessage) && end != msg_len)))
        return false;
      if (Get16(p + off::kDPathId) >= num_paths) return false;
      const uint64_t addr = Get64(p + off::kDRemoteAddr);
      if (addr - msg_off != run_base) return false;
      dst = reinterpret_cast<uint8_t*>(region_at + addr);
      return true;
    };
    size_t j = 0;  // packets handled
    while (j < n && m.active && check(j)) {
      // One unit: pkts[j, i), PSNs p0 .. (32-bit: psn0 ..), up to lim (the
      // window's end or the first PSN received, as they were before it).
      const uint32_t psn0 = Get32(pkts[j].data + off::kDPsn);
      const uint64_t rcv_nxt = c->rcv_nxt;
      const uint64_t p0 = Ext(rcv_nxt, psn0);
      if (p0 < rcv_nxt || p0 >= rcv_nxt + win) break;
      const size_t lim =
          j +
          UnreceivedFrom(c, p0, std::min<uint64_t>(n - j, rcv_nxt + win - p0));
      if (lim == j) break;  // a duplicate
      const uint64_t room = msg_len - m.received;
      uint64_t left = room;  // the message's bytes not received yet
      size_t i = j;
      uint32_t psn = psn0;
      bool failed = false;
      for (;;) {
        if (plen > left) break;
        // Accepted: placed now, committed with the unit.
        if (!PlaceOrDrop(dst, payload, plen, r.mr)) {
          failed = true;
          break;
        }
        left -= plen;
        const bool ce = pkts[i].ecn_ce;
        ++i;
        ++psn;
        if (ce || i == lim || !check(i) ||
            Get32(pkts[i].data + off::kDPsn) != psn)
          break;
      }
      if (i > j) {
        CommitRun(now, c, m, pkts + j, i - j, psn0, p0, room - left,
                  pkts[i - 1].ecn_ce);
      }
      if (failed) {
        j = i + 1;  // the packet whose placement failed: received
        break;
      }
      if (i == j) break;
      j = i;
    }
    if (j > 0) {
      stats_.rx_packets += j;
      c->last_heard = now;
      // pkt_: the last packet's fields (as decoding it would).
      const RxPacket& last = pkts[j - 1];
      wire::internal::DecodeDataPacketFields(last.data, &h);
      pkt_.payload = last.payload != nullptr
                         ? last.payload
                         : last.data + wire::kDataHeaderSize;
      pkt_.payload_len = h.payload_len;
      pkt_.trimmed = false;
    }
    return j;
  }

  // How many of the k PSNs from p (all in the window) are not received yet
  // (their bits clear), counted up to the first received one.
  static uint64_t UnreceivedFrom(const Conn* c, uint64_t p, uint64_t k) {
    uint64_t done = 0;
    while (done < k) {
      const unsigned sh = static_cast<unsigned>(p & 63);
      const uint64_t w = c->rx_bits[(p >> 6) & c->rx_word_mask] >> sh;
      if (w != 0) return std::min<uint64_t>(k, done + std::countr_zero(w));
      done += 64 - sh;
      p += 64 - sh;
    }
    return k;
  }

  // Sets the bits of the k PSNs from p (all in the window).
  static void SetRxBits(Conn* c, uint64_t p, uint64_t k) {
    while (k > 0) {
      const unsigned sh = static_cast<unsigned>(p & 63);
      const uint64_t take = std::min<uint64_t>(k, 64 - sh);
      const uint64_t ones =
          take == 64 ? ~uint64_t{0} : (uint64_t{1} << take) - 1;
      c->rx_bits[(p >> 6) & c->rx_word_mask] |= ones << sh;
      p += take;
      k -= take;
    }
  }

  // The commit of one unit of DataRun: packets pkts[0, k) of message m,
  // PSNs p0 + i (32-bit: psn0 + i), all in the window and not received
  // before, placed; `bytes` payload bytes in all; no ECN CE but on the last
  // one (`ce_last`). Leaves the connection, the message and the control
  // queue as OnData and CommitData for each packet in turn would: AcceptPsn
  // (only the first packet can be past rcv_high, a gap; those below it are
  // out of order; rcv_nxt moves over the unit when it starts there, else
  // the unit's bits are set), the counters, the message's bytes and its
  // completion (at the last packet: the bytes end the unit there), and each
  // packet's NoteAck: the same SACKs pushed at the same packets (the first
  // one on a gap, the last one on ECN CE, each kAckEvery-th pending) with
  // the same fields, and the same delayed-SACK deadline.
  [[gnu::always_inline]] void CommitRun(Time now, Conn* c, RxMsg& m,
                                        const RxPacket* pkts, size_t k,
                                        uint32_t psn0, uint64_t p0,
                                        uint64_t bytes, bool ce_last) {
    namespace off = wire::internal::off;
    bool gap;
    if (k == 1) {
      // One packet (most units when packets arrive out of order).
      const uint32_t word = static_cast<uint32_t>((p0 >> 6) & c->rx_word_mask);
      gap = AcceptPsn(c, p0, c->rcv_nxt, c->rx_bits.data(), c->rx_word_mask,
                      word, c->rx_bits[word]);
    } else {
      const uint64_t pe = p0 + k;
      const uint64_t high = c->rcv_high;
      gap = p0 > high;
      if (p0 < high)
        c->ooo_count += static_cast<uint32_t>(std::min<uint64_t>(k, high - p0));
      if (pe > high) c->rcv_high = pe;
      if (p0 == c->rcv_nxt) {
        // Each packet's successor but the last one's is in the unit (not
        // received): rcv_nxt moves by one per packet; the last one's may
        // have been received (then set, and consumed with what follows).
        c->rcv_nxt = pe;
        if ((c->rx_bits[(pe >> 6) & c->rx_word_mask] >> (pe & 63)) & 1)
          AdvanceRcvNxt(c);
      } else {
        SetRxBits(c, p0, k);
      }
    }
    c->st.rx_data_packets += k;
    c->st.rx_data_bytes += bytes;
    c->rx_bytes_total += bytes;
    m.received += bytes;
    if (m.received == m.len) {
      m.complete = true;
      if (m.msn == c->rcv_msn_next) DeliverInOrder(c);
    }
    // NoteAck for each packet: ack_pending, the trigger fields (those of
    // the last packet noted before a flush, or of the unit), the
    // delayed-SACK timer (armed by a packet that does not flush) and the
    // flushes: the first packet on a gap, each kAckEvery-th pending, the
    // last one on ECN CE.
    uint32_t pending = c->ack_pending;
    auto note = [&](size_t i, size_t t) __attribute__((always_inline)) {
      const uint8_t* p = pkts[t].data;
      c->ack_pending = pending + static_cast<uint32_t>(t - i + 1);
      c->trig_psn = psn0 + static_cast<uint32_t>(t);
      c->trig_psn64 = p0 + t;
      c->trig_path = Get16(p + off::kDPathId);
      c->trig_ts = Get64(p + off::kDSendTs);
    };
    // Packets i..f noted, f flushes (with ECN CE: `ce`); those before it
    // arm the timer.
    auto flush_at = [&](size_t i, size_t f, bool ce)
        __attribute__((always_inline)) {
      note(i, f);
      if (f > i && c->ack_deadline == kTimeInfinite)
        c->ack_deadline = now + AckDelay(c);
      if (ce) c->trig_ecn = 1;
      FlushAck(c);
      pending = c->ack_pending;
    };
    size_t i = 0;
    if (gap) {
      flush_at(0, 0, ce_last && k == 1);
      i = 1;
    }
    while (i < k) {
      const size_t f =
          pending + 1 >= kAckEvery ? i : i + (kAckEvery - 1 - pending);
      if (f + 1 < k) {
        flush_at(i, f, false);
        i = f + 1;
        continue;
      }
      // None flushes before the last packet.
      if (f + 1 == k || ce_last) {
        flush_at(i, k - 1, ce_last);
      } else {
        note(i, k - 1);
        if (c->ack_deadline == kTimeInfinite)
          c->ack_deadline = now + AckDelay(c);
      }
      break;
    }
  }

  void AdvanceRcvNxt(Conn* c) {
    for (;;) {
      uint64_t& w = c->rx_bits[(c->rcv_nxt >> 6) & (c->rx_word_mask)];
      const unsigned sh = static_cast<unsigned>(c->rcv_nxt & 63);
      const uint64_t rest = ~(w >> sh);  // zero bits from rcv_nxt up
      if (rest == 0) {
        // All bits sh..63 are set: consume them.
        w &= sh == 0 ? 0 : ((uint64_t{1} << sh) - 1);
        c->rcv_nxt += 64 - sh;
        continue;
      }
      const unsigned run = static_cast<unsigned>(__builtin_ctzll(rest));
      if (run == 0) return;
      const uint64_t mask =
          (run >= 64 ? ~uint64_t{0} : ((uint64_t{1} << run) - 1)) << sh;
      w &= ~mask;
      c->rcv_nxt += run;
      if (sh + run < 64) return;
    }
  }

  // Retires the connection's complete messages in MSN order; one with an
  // immediate only while the completion queue has room, else the
  // connection is held (Impl::held_) until PollCompletions frees room.
  void DeliverInOrder(Conn* c) {
    if (!Deliver(c) && !c->cq_held) {
      c->cq_held = true;
      held_[held_n_++] = c;
      ++stats_.cq_delivery_holds;
      ++c->st.cq_delivery_holds;
    }
  }
  // DeliverInOrder's loop; false when it stopped for want of room.
  bool Deliver(Conn* c) {
    for (;;) {
      RxMsg& m = c->rx_msgs[c->rcv_msn_next & c->rx_msg_mask];
      if (!m.active || m.msn != c->rcv_msn_next || !m.complete) return true;
      if (m.has_imm) {
        if (!CqRoom()) return false;
        Completion cpl;
        cpl.type = CompletionType::kRecvImmediate;
        cpl.conn = c->id;
        cpl.immediate = m.imm;
        cpl.byte_len = m.len;
        cpl.remote_addr = m.base_addr;
        cpl.msn = m.msn;
        PushCompletion(cpl);
      }
      ++c->st.messages_received;
      m.active = false;
      ++c->rcv_msn_next;
    }
  }

  static Time AckDelay(const Conn* c) {
    return c->opt.ack_delay > 0 ? c->opt.ack_delay : c->opt.base_rtt / 4;
  }

  void NoteAck(Time now, Conn* c, const wire::DataHeader& h, uint64_t psn64,
               bool ecn, bool immediate) {
    ++c->ack_pending;
    c->trig_psn = h.psn;
    c->trig_psn64 = psn64;
    c->trig_path = h.path_id;
    c->trig_ts = h.send_ts;
    c->trig_ecn |= ecn ? 1 : 0;
    if (immediate || ecn || c->ack_pending >= kAckEvery) {
      FlushAck(c);
    } else if (c->ack_deadline == kTimeInfinite) {
      c->ack_deadline = now + AckDelay(c);
    }
  }

  void FlushAck(Conn* c) {
    if (c->ack_pending == 0) return;
    CtrlItem* it = c->PushCtrl();
    if (it == nullptr) return;  // next burst retries (ack_pending kept)
    CtrlItem k;                 // built whole, then stored at once
    k.type = CtrlType::kSack;
    k.psn = c->trig_psn;
    k.psn64 = c->trig_psn64;
    k.path = c->trig_path;
    k.ts = c->trig_ts;
    k.ecn = c->trig_ecn;
    k.coalesced =
        static_cast<uint16_t>(std::min<uint32_t>(c->ack_pending, 0xFFFF));
    *it = k;
    c->ack_pending = 0;
    c->trig_ecn = 0;
    c->ack_deadline = kTimeInfinite;
  }

  // --------------------------------------------------------- sender: acks
  // What one SACK's acks change in the connection beyond the slots and
  // paths, gathered while they are processed and applied once (OnSack): the
  // latest send time acked (rack_sent) and the clean acks' selector
  // feedback (dropped when the selector ignores it).
  struct SackRun {
    Time rack_sent;
    bool any_acked_sent;
    bool clean_fb;  // c->sel->CleanAcksMatter()
  };
  // What an ack of the copy of `s` that is in flight on path `p` says about
  // the path and the connection's send order: the path's highest acked send
  // sequence and latest acked send time, the run's and the plane's latest
  // acked send time, an answered tail-loss probe, and the path marked for
  // OnSack's per-path pass (when anything is left in flight on it). Shared by
  // AckSlot and OnSack's cumulative run loop (inlined into both).
  __attribute__((always_inline)) void NoteCopyAcked(Conn* c, PathInfo& p,
                                                    const TxSlot& s,
                                                    SackRun& run) {
    if (!p.any_acked || static_cast<int32_t>(s.path_seq - p.acked_seq_hi) > 0) {
      p.acked_seq_hi = s.path_seq;
      p.any_acked = true;
    }
    if (s.sent_time > p.last_acked_sent) p.last_acked_sent = s.sent_time;
    if (s.sent_time > run.rack_sent) run.rack_sent = s.sent_time;
    Time& pr = c->PlaneRackSent(c->plane_of[s.path]);
    if (s.sent_time > pr) pr = s.sent_time;
    if (c->tlp_stall_at > c->tlp_rack && s.sent_time >= c->tlp_stall_at) {
      c->tlp_rack = c->tlp_stall_at;  // a probe (or later data) got through
    }
    // (A path left with nothing in flight needs no pass: FinishAckBatch's
    // loss inference looks at what is still in flight on it, and nothing
    // joins a path's list while a SACK is processed.)
    if (!p.dirty && p.head != kNil) {
      p.dirty = true;
      c->dirty_paths.push_back(s.path);
    }
  }

  // Inlined into OnSack's two loops (cumulative part and bitmap), so the
  // SACK's fields and the connection's arrays stay in registers.
  __attribute__((always_inline)) void AckSlot(Conn* c, uint64_t psn,
                                              uint64_t trig, uint16_t echo_path,
                                              uint64_t echo_ts, bool ecn,
                                              Time rtt, Time now, SackRun& run,
                                              congestion::AckEvent& ev,
                                              bool cumulative) {
    const uint32_t idx = static_cast<uint32_t>(psn & c->win_mask);
    TxSlot& s = c->slots[idx];
    // Below the cumulative PSN the slot is freed at once (what AdvanceUna
    // would do once it is acked; OnSack moves snd_una there).
    const SlotState done = cumulative ? kFree : kAcked;
    if (s.state != kInFlight && s.state != kLost) {
      if (cumulative) s.state = kFree;  // acked before, by a bitmap
      return;
    }
    PathInfo& p = c->paths[s.path];
    const bool is_trig = psn == trig;
    if (s.state == kInFlight) {
      UnlinkSlot(c, idx);
      c->inflight_bytes -= s.len;
    }
    // Per-path order evidence only from an ack known to be for the current
    // transmission: a packet sent once, or the echoed (path, timestamp) of
    // the trigger. An ack of an earlier copy says nothing about this path.
    const bool this_copy =
        s.state == kInFlight &&
        (s.tx_count == 1 || (is_trig && echo_path == s.path &&
                             echo_ts == static_cast<uint64_t>(s.sent_time)));
    // The trigger's echo names a copy declared lost: one older than the
    // latest transmission, or the latest itself when it was declared lost
    // and not yet resent (a valid echo: rtt > 0).
    const bool spurious = is_trig && (s.tx_count & kDeclaredLost) != 0 &&
                          rtt > 0 && echo_path < c->num_paths &&
                          (echo_ts < static_cast<uint64_t>(s.sent_time) ||
                           (s.state == kLost && echo_path == s.path &&
                            echo_ts == static_cast<uint64_t>(s.sent_time)));
    // With or without an echo: the slot's only transmission, declared lost
    // and not resent yet (kLost), acked all the same.
    const bool sole_declared =
        s.state == kLost && s.tx_count == (kDeclaredLost | 1);
    if (this_copy) {
      NoteCopyAcked(c, p, s, run);
      run.any_acked_sent = true;
    }
    if (c->tlp_blame) {
      if (psn == c->tlp_psn) {
        tlp_answered_ = this_copy;
      } else if (s.sent_time < c->tlp_stall_at) {
        ++tlp_old_acked_;
      }
    }
    // (kLost: acked before its retransmission left; the retx entry is
    // skipped when popped.) last_progress, tlp_fired and tlp_credit are
    // reset by OnSack when anything was acked.
    s.state = done;
    ++p.st.acked_packets;
    const bool marked = is_trig && ecn;
    if (marked) {
      ++c->Cold(p).ecn_marked;
      ++c->st.ecn_echoes;
      ++ev.ecn_marked;
    }
    if (is_trig) {
      // The trigger carries the RTT sample (and ECN): the batched clean
      // acks before it go first, so the selector sees the same order.
      // Its echo names the copy that arrived (an earlier copy on another
      // path, when this packet was resent): its ECN and RTT are that
      // path's, not the path of the latest transmission.
      FlushGoodFeedback(c, now);
      const uint16_t fb_path = echo_path < c->num_paths ? echo_path : s.path;
      c->sel->OnFeedback(
          fb_path,
          marked ? routing::PathFeedback::kEcn : routing::PathFeedback::kGood,
          now, rtt);
      if (spurious) {
        SpuriousLoss(c, s, echo_path, rtt, now);
      } else if (sole_declared) {  // (an echo without a valid timestamp)
        SpuriousLoss(c, s, s.path, now - s.sent_time, now);
      }
    } else if (sole_declared) {
      // The only copy that left was declared lost, and it is acked before
      // its resend left: it was late, not lost, on its own path. Its delay
      // is known only up to this SACK (now - sent, an upper bound).
      FlushGoodFeedback(c, now);
      SpuriousLoss(c, s, s.path, now - s.sent_time, now);
    } else if ((s.tx_count & kTxCountMask) == 1 && c->srtt > 0 &&
               now - s.sent_time > 2 * c->srtt) {
      // A clean ack without an echoed timestamp, for a packet sent once,
      // that took over twice the connection's RTT: the selector gets its
      // delay (an upper bound on its RTT), the only sample of a slow path
      // whose packets are rarely a SACK's trigger. In order after the
      // batched acks before it.
      FlushGoodFeedback(c, now);
      c->sel->OnAckDelay(s.path, now, now - s.sent_time);
    } else if (run.clean_fb) {
      // A clean ack without an RTT sample: batched (OnFeedbackBatch), or
      // left out when the selector ignores those (CleanAcksMatter).
      if (good_fb_n_ == kGoodFbBatch) FlushGoodFeedback(c, now);
      good_fb_[good_fb_n_++] = s.path;
    }
    ev.acked_bytes += s.len;
    ++ev.acked_packets;
    TxMsg& m = c->Msg(s.msn);
    if (++m.acked == m.npkts) m.done = true;
  }

  // A copy of `s` declared lost on `path` arrived after all (AckSlot,
  // OnSack), `rtt` after it left: the declaration was wrong (the copy was
  // late, not lost). Counted; with spurious_undo, `path`, if it is retired
  // (and its plane up), goes back into service now, as a probe's answer
  // would put it: a path that delivered a packet after it was retired is
  // alive. Its slowness is the late copy's delay, given to the selector
  // after the restore (OnAckDelay), so a slow path sits out passes in
  // proportion (SKIP) instead of taking a full share at once; before the
  // restore the selector ignores samples of a retired path, and the
  // path's srtt moves 1/8 per sample. Rare: a trigger's echo, or the ack of
  // a slot's only copy before its resend left; once per slot. (The controller
  // is not told: a window cut a drop-tail fabric's loss_is_congestion made is
  // not undone.)
  void SpuriousLoss(Conn* c, TxSlot& s, uint16_t path, Time rtt, Time now) {
    s.tx_count &= kTxCountMask;
    ++c->st.spurious_losses;
    if (!c->opt.spurious_undo || c->PlaneDown(path % c->num_planes) ||
        c->sel->state(path) != routing::PathState::kAssumedBad) {
      return;
    }
    c->sel->OnFeedback(path, routing::PathFeedback::kProbeOk, now, 0);
    if (c->sel->state(path) != routing::PathState::kAssumedBad) {
      ++c->st.paths_unretired;
      ++c->path_cold[path].restored;
      c->sel->OnAckDelay(path, now, rtt);
    }
  }

  // `n` packets of message `msn` acked (AckSlot's per-packet count, added
  // at once).
  static void AckMsgPackets(Conn* c, uint32_t msn, uint32_t n) {
    AddMsgAcks(c->Msg(msn), n);
  }
  static void AddMsgAcks(TxMsg& m, uint32_t n) {
    m.acked += n;
    if (m.acked == m.npkts) m.done = true;
  }

  // PSNs [from, to) acked in a cumulative run, each one in flight and sent
  // once: what AckSlot counts per packet, per message at once (a message's
  // PSNs are contiguous). Returns their payload bytes: mtu each but a
  // message's last, which carries the rest of its length.
  static uint64_t AckRunMessages(Conn* c, uint64_t from, uint64_t to) {
    uint64_t bytes = 0;
    while (from < to) {
      TxMsg& m = c->Msg(c->slots[from & c->win_mask].msn);
      const uint64_t msg_end = m.first_psn + m.npkts;
      const uint64_t end = std::min(to, msg_end);
      const uint32_t n = static_cast<uint32_t>(end - from);
      bytes += uint64_t{n} * c->mtu;
      if (end == msg_end) bytes -= uint64_t{m.npkts} * c->mtu - m.len;
      AddMsgAcks(m, n);
      from = end;
    }
    return bytes;
  }

  // One more packet of message `slot_msn` in a cumulative run: the count
  // of the previous message (`*msn`, `*msn_pkts`) is added when it changes.
  [[gnu::always_inline]] static void CountRunMsgPacket(Conn* c,
                                                       uint32_t slot_msn,
                                                       uint32_t* msn,
                                                       uint32_t* msn_pkts) {
    if (slot_msn != *msn) {
      if (*msn_pkts > 0) AckMsgPackets(c, *msn, *msn_pkts);
      *msn = slot_msn;
      *msn_pkts = 0;
    }
    ++*msn_pkts;
  }

  // The bits b of a 64-bit word for PSNs first + b in [lo, hi).
  static uint64_t RangeBits(uint64_t first, uint64_t lo, uint64_t hi) {
    if (lo >= hi || hi <= first || lo >= first + 64) return 0;
    uint64_t m = ~uint64_t{0};
    if (lo > first) m <<= lo - first;
    if (hi < first + 64) m &= (uint64_t{1} << (hi - first)) - 1;
    return m;
  }

  // Hands the batched clean acks (kGood, no RTT) to the selector.
  void FlushGoodFeedback(Conn* c, Time now) {
    if (good_fb_n_ == 0) return;
    c->sel->OnFeedbackBatch(good_fb_, good_fb_n_, routing::PathFeedback::kGood,
                            now);
    good_fb_n_ = 0;
  }

  // Out of line: once per SACK, and ReceiveOne (every packet) stays small
  // enough to be inlined into OnReceive's loop.
  __attribute__((noinline)) void OnSack(Time now, Conn* c,
                                        const wire::SackHeader& h) {
    ++c->st.sacks_received;
    congestion::AckEvent ev;
    ev.now = now;
    const Time rtt = EchoRtt(c, now, h.echo_ts);
    const uint64_t trig = Ext(c->snd_una, h.trigger_psn);
    SackRun run{c->rack_sent, c->any_acked_sent, c->clean_acks_matter};
    const uint16_t echo_path = h.echo_path;
    const uint64_t echo_ts = h.echo_ts;
    const bool ecn = h.ecn_seen != 0;
    // Cumulative part.
    uint64_t cum = Ext(c->snd_una, h.cum_psn);
    if (cum > c->snd_nxt) cum = c->snd_nxt;  // never acks unsent PSNs
    uint64_t q = c->snd_una;
    if (!run.clean_fb && !c->tlp_blame) {
      // The common slot of a cumulative range: in flight, sent once, not
      // the trigger, acked within twice the RTT. What AckSlot does for it
      // (no selector call: its clean ack is left out), with the byte,
      // packet and per-message counts added once per run; any other slot
      // goes through AckSlot in place.
      const Time slow = c->srtt > 0 ? 2 * c->srtt : kTimeInfinite;
      uint64_t bytes = 0;
      uint32_t pkts = 0;
      // The message of the common slots counted one at a time so far (its
      // first slot's: a change of message, not an empty run, ends it) and
      // its packets among them; a run at the head of the send-order list
      // counts its own, per message (AckRunMessages).
      uint32_t msn = q < cum ? c->slots[q & c->win_mask].msn : 0;
      uint32_t msn_pkts = 0;
      while (q < cum) {
        // A run of such slots at the head of the send-order list (each one
        // then heads its path's list too: both lists are in send order):
        // cut off both heads without the general unlink, with the arrays
        // and the list head in locals; the new head's prev_all is set once
        // after the run, the freed slots' own links are left as they are
        // (LinkSlot sets all four when a slot is sent again; nothing reads
        // them before). The latest send time acked (rack_sent, and the
        // answered-probe test that depends on it) is taken once from the
        // run's maximum (what NoteCopyAcked does otherwise, per slot); its
        // bytes and per-message counts once from its PSN range.
        {
          TxSlot* const slots = c->slots.data();
          PathInfo* const paths = c->paths.data();
          const uint8_t* const plane_of = c->plane_of.data();
          const uint64_t mask = c->win_mask;
          const uint32_t head0 = c->all_head;
          uint32_t head = head0;
          Time max_sent = run.rack_sent;
          // The run stops at the trigger (AckSlot: its RTT sample and ECN)
          // and at a slot sent before `oldest` (acked after over twice the
          // RTT, now - s.sent_time > slow: AckSlot, the selector gets its
          // delay). Fewer values live across the loop.
          const uint64_t stop = trig >= q && trig < cum ? trig : cum;
          const Time oldest = slow == kTimeInfinite
                                  ? std::numeric_limits<Time>::min()
                                  : now - slow;
          const uint64_t q0 = q;
          while (q < stop) {
            const uint32_t idx = static_cast<uint32_t>(q & mask);
            TxSlot& s = slots[idx];
            if (idx != head || StateAndCount(s) != kInFlightOnce ||
                s.sent_time < oldest) {
              break;
            }
#ifndef NDEBUG
            if (s.prev_path != kNil) std::abort();  // lists out of order
#endif
            PathInfo& p = paths[s.path];
            if (p.bgroup != kNoBalance) c->GroupSub(p.bgroup);
            head = s.next_all;
            const uint32_t np = s.next_path;
            p.head = np;
            if (np != kNil) {
              slots[np].prev_path = kNil;
            } else {
              p.tail = kNil;
            }
            if (!p.any_acked ||
                static_cast<int32_t>(s.path_seq - p.acked_seq_hi) > 0) {
              p.acked_seq_hi = s.path_seq;
              p.any_acked = true;
            }
            const Time st = s.sent_time;
            if (st > p.last_acked_sent) p.last_acked_sent = st;
            max_sent = std::max(max_sent, st);
            Time& pr = c->PlaneRackSent(plane_of[s.path]);
            if (st > pr) pr = st;
            if (np != kNil && !p.dirty) {  // see NoteCopyAcked
              p.dirty = true;
              c->dirty_paths.push_back(s.path);
            }
            s.state = kFree;
            ++p.st.acked_packets;
            ++q;
          }
          pkts += static_cast<uint32_t>(q - q0);
          if (head != head0) {
            bytes += AckRunMessages(c, q0, q);
            c->all_head = head;
            FixAllHead(c);
            run.rack_sent = max_sent;
            if (c->tlp_stall_at > c->tlp_rack && max_sent >= c->tlp_stall_at) {
              c->tlp_rack = c->tlp_stall_at;  // a probe or data got through
            }
          }
        }
        if (q >= cum) break;
        const uint32_t idx = static_cast<uint32_t>(q & c->win_mask);
        TxSlot& s = c->slots[idx];
        if (StateAndCount(s) != kInFlightOnce || q == trig ||
            now - s.sent_time > slow) {
          AckSlot(c, q, trig, echo_path, echo_ts, ecn, rtt, now, run, ev,
                  /*cumulative=*/true);
          ++q;
          continue;
        }
        PathInfo& p = c->paths[s.path];
        UnlinkSlot(c, idx);
        NoteCopyAcked(c, p, s, run);
        s.state = kFree;
        ++p.st.acked_packets;
        bytes += s.len;
        ++pkts;
        CountRunMsgPacket(c, s.msn, &msn, &msn_pkts);
        ++q;
      }
      if (msn_pkts > 0) AckMsgPackets(c, msn, msn_pkts);
      if (pkts > 0) {
        run.any_acked_sent = true;
        c->inflight_bytes -= bytes;
        ev.acked_bytes += bytes;
        ev.acked_packets += pkts;
      }
    }
    for (; q < cum; ++q) {
      AckSlot(c, q, trig, echo_path, echo_ts, ecn, rtt, now, run, ev,
              /*cumulative=*/true);
    }
    // Bitmap part: its PSNs in [max(snd_una, cum), snd_nxt), each word's
    // others masked off at once (those below cum were just freed: AckSlot
    // would leave them as they are).
    const uint64_t base = Ext(c->snd_una, h.bitmap_base);
    const uint64_t lo = std::max(c->snd_una, cum);
    const uint64_t hi = c->snd_nxt;
    for (size_t w = 0; w < wire::kSackBitmapWords; ++w) {
      uint64_t bits = h.bitmap[w];
      if (bits == 0) continue;
      const uint64_t first = base + 64 * w;
      bits &= RangeBits(first, lo, hi);
      while (bits) {
        const unsigned b = static_cast<unsigned>(__builtin_ctzll(bits));
        bits &= bits - 1;
        AckSlot(c, first + b, trig, echo_path, echo_ts, ecn, rtt, now, run, ev,
                /*cumulative=*/false);
      }
    }
    // Every slot below cum is free now: snd_una moves there (AdvanceUna in
    // FinishAckBatch continues over the bitmap's acks beyond it). The ring
    // positions of the PSNs in flight, PsnOfSlot, are the same from either.
    if (cum > c->snd_una) c->snd_una = cum;
    FlushGoodFeedback(c, now);
    // A trigger acked before this SACK (a duplicate, re-acknowledged at
    // once: the receiver had the PSN already) whose echo names a copy
    // older than its latest transmission, declared lost: that copy was
    // late, not lost. Its slot still holds the PSN's record while no later
    // PSN took its ring position (trig + win >= snd_nxt).
    if (rtt > 0 && echo_path < c->num_paths && trig < c->snd_nxt &&
        trig + c->win >= c->snd_nxt) {
      TxSlot& s = c->Slot(trig);
      if ((s.state == kFree || s.state == kAcked) &&
          (s.tx_count & kDeclaredLost) != 0 &&
          echo_ts < static_cast<uint64_t>(s.sent_time)) {
        SpuriousLoss(c, s, echo_path, rtt, now);
      }
    }
    c->rack_sent = run.rack_sent;
    c->any_acked_sent = run.any_acked_sent;
    if (ev.acked_packets > 0) {
      c->last_progress = now;
      c->tlp_fired = 0;
      c->tlp_credit = 0;
      c->st.bytes_acked += ev.acked_bytes;
    }
    if (c->tlp_blame && c->Slot(c->tlp_psn).state != kInFlight &&
        c->Slot(c->tlp_psn).state != kLost) {
      // The probe's PSN was acked by this SACK. Its path is blamed when
      // the probe's own copy is what was acked and nothing else sent
      // before the probe came with it: the original was lost, not late.
      // (The receiver echoes the copy that triggered the SACK, so a stalled
      // host that delivers the original and the probe together names the
      // probe; the rest of that flight, acked in the same SACK, tells the
      // stall apart.)
      c->tlp_blame = false;
      if (tlp_answered_ && tlp_old_acked_ == 0) {
        RetireFeedback(c, c->tlp_orig_path, routing::PathFeedback::kLost, now);
      }
    }
    tlp_answered_ = false;
    tlp_old_acked_ = 0;
    // RTT from the echoed timestamp of the triggering transmission.
    if (rtt > 0) {
      UpdateRtt(c, rtt);
      if (h.echo_path < c->paths.size()) {
        PathInfo& p = c->paths[h.echo_path];
        if (p.srtt == 0) {
          p.srtt = rtt;
        } else {
          p.srtt += (rtt - p.srtt) / 8;
        }
      }
    }
    ev.rtt = rtt;
    FinishAckBatch(now, c, ev);
    // The RNR streak ends when the receiver took something sent since the
    // latest probe (it has room again; the window reopens), or when nothing
    // is left outstanding (a new WRITE must not start in probe mode, nor
    // inherit the streak's age for rnr_timeout).
    if (c->rnr_streak > 0 && ev.acked_packets > 0 &&
        (c->rack_sent >= c->rnr_probe_at || !c->Outstanding())) {
      c->rnr_streak = 0;
      c->rnr_probe_at = kTimeInfinite;
    }
  }

  // The RTT sample of an echoed send timestamp (SACK echo_ts, PROBE_ACK
  // send_ts), or 0 when there is none: 0 echoed, or a value this side
  // cannot have sent (later than now, or older than connection_timeout:
  // forged or corrupted; counted in rtt_samples_rejected). Computed without
  // signed overflow for any 64-bit echo.
  static Time EchoRtt(Conn* c, Time now, uint64_t echo_ts) {
    if (echo_ts == 0) return 0;
    if (now <= 0 || echo_ts > static_cast<uint64_t>(now) ||
        static_cast<uint64_t>(now) - echo_ts >
            static_cast<uint64_t>(c->opt.connection_timeout)) {
      ++c->st.rtt_samples_rejected;
      return 0;
    }
    return now - static_cast<Time>(echo_ts);
  }

  // RFC 6298's estimator: srtt / rttvar with gains 1/8 and 1/4; the first
  // sample sets srtt and half of it as rttvar.
  static void RttEstimate(Time& srtt, Time& rttvar, Time rtt) {
    if (srtt == 0) {
      srtt = rtt;
      rttvar = rtt / 2;
    } else {
      const Time d = rtt > srtt ? rtt - srtt : srtt - rtt;
      rttvar += (d - rttvar) / 4;
      srtt += (rtt - srtt) / 8;
    }
  }
  // The connection's RTT statistics, and the typical ones (tail resend)
  // over the sample capped at kTypicalRttCap x the typical srtt.
  void UpdateRtt(Conn* c, Time rtt) {
    RttEstimate(
        c->typ_srtt, c->typ_rttvar,
        c->typ_srtt == 0 ? rtt : std::min(rtt, kTypicalRttCap * c->typ_srtt));
    RttEstimate(c->srtt, c->rttvar, rtt);
  }

  // Loss inference on touched paths, window update, completions.
  void FinishAckBatch(Time now, Conn* c, congestion::AckEvent& ev) {
    if (ev.acked_packets > 0) c->backoff = 0;
    for (uint16_t pid : c->dirty_paths) {
      PathInfo& p = c->paths[pid];
      p.dirty = false;
      while (p.head != kNil) {
        const TxSlot& s = c->slots[p.head];
        const int32_t ahead = static_cast<int32_t>(p.acked_seq_hi - s.path_seq);
        if (!p.any_acked || ahead <= 0) break;  // nothing later acked on p
        const Time reo = std::max(p.srtt / 4, c->opt.base_rtt / 4);
        const bool lost = ahead >= static_cast<int32_t>(kDupThresh) ||
                          s.sent_time + reo <= p.last_acked_sent;
        if (!lost) break;
        const uint64_t psn = PsnOfSlot(c, p.head);
        ++c->Cold(p).lost_packets;
        ++ev.lost;
        DeclareLost(c, psn);
        RetireFeedback(c, pid, routing::PathFeedback::kLost, now);
      }
    }
    c->dirty_paths.clear();
    ev.lost += PathTimeouts(now, c);
    AdvanceUna(c);
    ev.inflight_bytes = c->inflight_bytes;
    ev.stranded = Stranded(c, now);
    ev.stranded_bytes = StrandedBytes(c, now);
    c->cc->OnAck(ev);
    ReadCc(c);
    CompleteWrites(c);
#ifndef NDEBUG
    // Group balance counts exactly the linked transmissions.
    if (!c->group_inflight.empty() && c->all_head == kNil &&
        (c->group_total != 0 || c->groups_active != 0)) {
      std::abort();
    }
#endif
  }

  // For the controller (AckEvent::stranded): the oldest transmission in
  // flight has been out longer than the connection's srtt and one sent
  // after it on its plane was acked, i.e. it is probably lost on a failed
  // path and waits for its path timeout. (With any later-sent ack across
  // planes, reordering over 256 paths sets it all the time in an
  // undisturbed all-to-all.) O(1): the all-list is in send order.
  static bool Stranded(const Conn* c, Time now) {
    if (c->srtt == 0 || c->all_head == kNil) return false;
    const TxSlot& s = c->slots[c->all_head];
    return s.sent_time + c->srtt <= now && c->SentBeforeLatestAcked(s);
  }

  // For the controller (AckEvent::stranded_bytes): the bytes of the oldest
  // transmissions in flight, in send order up to the first that is younger
  // than srtt or not overtaken (a later-sent one acked), at most
  // kStrandedScan of them. Bounded; no allocation.
  static uint64_t StrandedBytes(const Conn* c, Time now) {
    if (c->srtt == 0) return 0;
    // Younger than srtt (sent_time + srtt > now) or not overtaken
    // (sent_time >= rack_sent): sent after `last`, one compare per slot.
    const Time last = std::min(now - c->srtt, c->rack_sent - 1);
    const TxSlot* const slots = c->slots.data();
    uint64_t bytes = 0;
    uint32_t n = 0;
    for (uint32_t i = c->all_head; i != kNil && n < kStrandedScan;
         i = slots[i].next_all, ++n) {
      const TxSlot& s = slots[i];
      if (s.sent_time > last) break;
      bytes += s.len;
    }
    return bytes;
  }

  // Loss by path timeout (see the design notes): transmissions older than
  // LossTimeout() with a later-sent one acked are resent on other paths and
  // their paths retired; the window is not touched. Returns how many.
  uint32_t PathTimeouts(Time now, Conn* c) {
    uint32_t n = 0;
    while (c->all_head != kNil) {
      const uint32_t idx = c->all_head;
      const TxSlot& s = c->slots[idx];
      if (c->LossDeadline(s) > now) break;
      const uint16_t path = s.path;
      ++c->path_cold[path].lost_packets;
      ++c->st.path_timeouts;
      DeclareLost(c, PsnOfSlot(c, idx));
      RetireFeedback(c, path, routing::PathFeedback::kTimeout, now);
      ++n;
    }
    if (n > 0) c->no_path = false;
    return n;
  }

  // Whether the oldest transmission in flight is due for a tail resend at
  // `now`, before the path timeout would take it (TailResendTime, computed
  // once, is kTimeInfinite when nothing is in flight).
  static bool TailResendDue(const Conn* c, Time now) {
    const Time t = c->TailResendTime();
    return t <= now && t < c->PathLossTime();
  }

  // Tail resend: resends (on other paths, from the retransmit queue) the
  // oldest transmissions in flight while each is due (TailResendTime);
  // not a loss for the paths, the controller or the window.
  void TailResends(Time now, Conn* c) {
    uint32_t n = 0;
    while (TailResendDue(c, now)) {
      MarkLost(c, PsnOfSlot(c, c->all_head), false);
      ++n;
    }
    if (n > 0) {
      c->st.tail_resends += n;
      c->no_path = false;
    }
  }

  // A transmission that timed out (PTO or RTO) blames its path only if one
  // sent strictly after it was acked: then the fabric delivered that one
  // while this one was lost. One sent at the same time is no evidence (a GSO
  // burst shares one send time; a host dropping part of its receive queue
  // loses the burst's other packets on every path at once), the same rule as
  // the path timeout's (SentBeforeLatestAcked). When nothing sent after it
  // was acked, the whole connection is slow (a slow receiver or host, a
  // software NIC) or every path is down; the packet is resent either way, but
  // no path is retired for it (per-path inference and probes still handle a
  // dead path).
  static bool Overtaken(const Conn* c, Time sent_time) {
    return c->Overtaken(sent_time);
  }

  // With the fate sharing hint, other connections of the engine resend
  // their flight on the path's group (ResendGroup); `c` is left alone.
  void RetireFeedback(Conn* c, uint16_t path, routing::PathFeedback fb,
                      Time now) {
    const auto before = c->sel->state(path);
    c->sel->OnFeedback(path, fb, now, 0);
    if (before != routing::PathState::kAssumedBad &&
        c->sel->state(path) == routing::PathState::kAssumedBad) {
      ++c->st.paths_retired;
      if (!c->paths.empty()) ++c->path_cold[path].retired;
      if (path < c->opt.path_groups.size()) ResendGroup(c, path, now);
    }
  }

  // Fate sharing (ConnectionOptions::path_groups): `path` of `c` was just
  // retired. Every other connection of this engine with paths in its
  // failure group (ids are engine-wide: the same id names the same fabric
  // element) resends its transmissions in flight on the group that are
  // older than its srtt (they would have been acked by now on a live path)
  // on other paths at once, instead of waiting for each one's own path
  // timeout or the RTO. Not a loss for the window or the paths' loss
  // counts, and the paths are left in service (their own losses retire
  // them). `c` itself is left to its own loss detection: resending its
  // flight on the group as well, or excluding the group's other paths from
  // new data, measured worse (docs/benchmarks.md, "Fate sharing"). Cost
  // per retirement: a hash lookup, then per connection of the group a
  // binary search and its members; no allocation.
  // REQUIRES: path < c->opt.path_groups.size().
  void ResendGroup(Conn* c, uint16_t path, Time now) {
    const uint16_t g = c->opt.path_groups[path];
    if (g == kNoFailureGroup) return;
    const auto it = group_conns_.find(g);
    if (it == group_conns_.end()) return;
    for (Conn* d : it->second) {
      if (d == c || !d->connected || d->failed || d->paths.empty()) continue;
      if (ResendInGroup(d, g, now) > 0) {
        Touch(d);
        cross_touched_ = true;
      }
    }
  }

  // ResendGroup's work in one connection; returns the transmissions
  // resent. REQUIRES: the sender state exists (c->paths not empty).
  uint32_t ResendInGroup(Conn* c, uint16_t g, Time now) {
    const std::vector<uint16_t>& groups = c->opt.path_groups;
    auto at = std::lower_bound(
        c->group_paths.begin(), c->group_paths.end(), g,
        [&groups](uint16_t p, uint16_t v) { return groups[p] < v; });
    const Time young = now - c->srtt;  // sent after this: left in flight
    uint32_t n = 0;
    for (; at != c->group_paths.end() && groups[*at] == g; ++at) {
      const uint16_t q = *at;
      if (q >= c->num_paths) continue;
      PathInfo& pi = c->paths[q];
      while (pi.head != kNil && c->slots[pi.head].sent_time <= young) {
        MarkLost(c, PsnOfSlot(c, pi.head), false);
        ++n;
      }
    }
    if (n > 0) {
      c->st.group_resends += n;
      c->no_path = false;
    }
    return n;
  }

  // Fate sharing index: c's paths with a group, sorted by (group, path),
  // and c on group_conns_ for each of its groups.
  void IndexGroups(Conn* c) {
    const std::vector<uint16_t>& groups = c->opt.path_groups;
    const size_t n = std::min<size_t>(groups.size(), c->opt.num_paths);
    // (group << 16 | path) keys sorted as plain integers: by group, then
    // by path (what a stable sort by group gave, without its indirect
    // compares and buffer).
    std::vector<uint32_t> keys;
    keys.reserve(n);
    for (size_t p = 0; p < n; ++p) {
      if (groups[p] != kNoFailureGroup) {
        keys.push_back(uint32_t{groups[p]} << 16 | static_cast<uint32_t>(p));
      }
    }
    std::sort(keys.begin(), keys.end());
    IndexBalance(c, keys);
    c->group_paths.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      c->group_paths[i] = static_cast<uint16_t>(keys[i]);
      const uint16_t g = static_cast<uint16_t>(keys[i] >> 16);
      if (i > 0 && keys[i - 1] >> 16 == g) continue;
      std::vector<Conn*>& v = group_conns_[g];
      // Most of an engine's connections share its groups (one per plane
      // and uplink): room for several at once, not a regrowth per one.
      if (v.empty()) v.reserve(8);
      v.push_back(c);
    }
  }
  // Group balance: each group of `keys` (IndexGroups' sorted keys) gets
  // an index, in c->path_bgroup for its paths; nothing when the option is
  // off, the policy is "reps" or there are fewer than two groups.
  static void IndexBalance(Conn* c, const std::vector<uint32_t>& keys) {
    if (!c->opt.group_balance || c->opt.path_policy == "reps") return;
    uint16_t n = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i == 0 || keys[i - 1] >> 16 != keys[i] >> 16) ++n;
    }
    if (n < 2) return;
    c->path_bgroup.assign(c->opt.num_paths, kNoBalance);
    c->group_inflight.assign(n, 0);
    uint16_t g = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i > 0 && keys[i - 1] >> 16 != keys[i] >> 16) ++g;
      c->path_bgroup[keys[i] & 0xFFFF] = g;
    }
  }

  // Group balance for one transmission: `path` (the selector's pick), or
  // the first of up to kGroupBalanceTries further picks whose group is
  // within its share; `path` when none is (the balance never stalls the
  // sender). REQUIRES: c balances (group_inflight not empty).
  static int Balanced(Time now, Conn* c, uint16_t path) {
    int q = path;
    for (int t = 0;
         t < kGroupBalanceTries && c->OverShare(static_cast<uint16_t>(q));
         ++t) {
      ++c->st.group_balance_passes;
      q = c->sel->NextPath(now);
      if (q < 0) return path;
    }
    return c->OverShare(static_cast<uint16_t>(q)) ? path : q;
  }
  // The same for a run of n picks about to be sent at once: each judged
  // with the run's earlier picks counted in flight (added here and taken
  // back at the end, so the sender's own accounting is unchanged).
  static void BalanceRun(Time now, Conn* c, PathId* paths, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const int q = Balanced(now, c, paths[i]);
      paths[i] = static_cast<PathId>(q);
      const uint16_t g = c->paths[paths[i]].bgroup;
      if (g != kNoBalance) c->GroupAdd(g);
    }
    for (size_t i = 0; i < n; ++i) {
      const uint16_t g = c->paths[paths[i]].bgroup;
      if (g != kNoBalance) c->GroupSub(g);
    }
  }

  void UnindexGroups(Conn* c) {
    const std::vector<uint16_t>& groups = c->opt.path_groups;
    for (size_t i = 0; i < c->group_paths.size(); ++i) {
      const uint16_t g = groups[c->group_paths[i]];
      if (i > 0 && groups[c->group_paths[i - 1]] == g) continue;
      std::vector<Conn*>& v = group_conns_[g];
      v.erase(std::find(v.begin(), v.end(), c));
      if (v.empty()) group_conns_.erase(g);
    }
  }

  void AdvanceUna(Conn* c) {
    while (c->snd_una < c->snd_nxt && c->Slot(c->snd_una).state == kAcked) {
      c->Slot(c->snd_una).state = kFree;
      ++c->snd_una;
    }
  }

  void CompleteWrites(Conn* c) {
    while (c->msg_una != c->post_msn && c->Msg(c->msg_una).done) {
      TxMsg& m = c->Msg(c->msg_una);
      Completion cpl;
      cpl.type = CompletionType::kWrite;
      cpl.conn = c->id;
      cpl.wr_id = m.wr_id;
      cpl.byte_len = m.len;
      cpl.remote_addr = m.remote_addr;
      cpl.msn = c->msg_una;
      PushWriteCompletion(cpl);
      ++c->st.messages_completed;
      if (regions_[m.region].refs > 0) --regions_[m.region].refs;
      ++c->msg_una;
    }
  }

  void OnNack(Time now, Conn* c, const wire::NackHeader& h) {
    ++c->st.nacks_received;
    const uint64_t psn = Ext(c->snd_una, h.psn);
    if (psn < c->snd_una || psn >= c->snd_nxt) return;
    TxSlot& s = c->Slot(psn);
    if (s.state != kInFlight) return;  // stale: already handled
    const uint16_t path = s.path;
    congestion::AckEvent ev;
    ev.now = now;
    switch (h.reason) {
      case wire::NackReason::kTrimmed:
        ++c->st.trims_received;
        ++c->path_cold[path].trimmed_packets;
        MarkLost(c, psn, /*front=*/true);
        c->sel->OnFeedback(path, routing::PathFeedback::kTrimmed, now, 0);
        ev.trimmed = 1;
        break;
      case wire::NackReason::kCorrupt:
        ++c->path_cold[path].lost_packets;
        MarkLost(c, psn, /*front=*/true);
        RetireFeedback(c, path, routing::PathFeedback::kLost, now);
        ev.lost = 1;
        break;
      case wire::NackReason::kOutOfWindow:
        MarkLost(c, psn, /*front=*/false);
        break;
      case wire::NackReason::kNoBuffer:
        // The receiver holds completions its application has not polled
        // (RNR-like): resend after a pause, longer each time in a row (the
        // other NACKs of the burst that met the full queue arrive within
        // the pause and do not extend it). From the first one on, the
        // connection sends one RNR probe per pause (EmitConn) until one is
        // acked: resending the whole window into a queue that is still
        // full would only be refused again, at the receiver's expense.
        ++c->st.rnr_nacks_received;
        MarkLost(c, psn, /*front=*/false);
        if (c->rnr_streak == 0) {
          c->rnr_since = now;
          c->rnr_probe_at = kTimeInfinite;
        }
        if (c->rnr_streak == 0 || now >= c->rnr_until) {
          c->rnr_until = std::max(
              c->rnr_until,
              now + std::min(c->opt.rto_max, c->opt.rto_min << c->rnr_streak));
          if (c->rnr_streak < kMaxRnrShift) ++c->rnr_streak;
        }
        c->next_send_time = std::max(c->next_send_time, c->rnr_until);
        break;
      case wire::NackReason::kBadKey:
      case wire::NackReason::kBadRange: {
        const absl::StatusCode code = h.reason == wire::NackReason::kBadKey
                                          ? absl::StatusCode::kPermissionDenied
                                          : absl::StatusCode::kOutOfRange;
        if (InPlaceAhead(c)) {
          // A packet of this connection later in the batch was already
          // read in place (RxDestination accepted it against the live
          // connection): failing now would drop it with its bytes written.
          // The failure takes effect at the end of the batch, as if this
          // NACK had come last.
          if (!c->fail_deferred) {
            c->fail_deferred = true;
            c->deferred_code = code;
            c->deferred_culprit = s.msn;
            deferred_fail_.push_back(c);
          }
          return;
        }
        FlushWrites(c, absl::StatusCode::kAborted, code, s.msn);
        return;
      }
    }
    ev.inflight_bytes = c->inflight_bytes;
    c->cc->OnAck(ev);
    ReadCc(c);
  }

  // Completes every outstanding WRITE with `code` (kAborted: flushed), the
  // one with MSN `culprit_msn` with `culprit` (the cause), posts
  // kConnectionError with `culprit` (unless cancelled by Close: code ==
  // culprit == kCancelled) and stops the connection. As an RC QP: the WRITE
  // that met the failure gets its cause (IBV_WC_REM_ACCESS_ERR,
  // IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR), the others
  // IBV_WC_WR_FLUSH_ERR. For a timeout (connection_timeout, rnr_timeout)
  // that is the oldest outstanding one, msg_una: the one the peer never
  // acknowledged.
  // The kConnectionError names the culprit: its wr_id, byte_len,
  // remote_addr and msn are those of that WRITE's own completion (msn alone
  // when it is no longer outstanding).
  void FlushWrites(Conn* c, absl::StatusCode code, absl::StatusCode culprit,
                   uint32_t culprit_msn) {
    Completion err;
    err.type = CompletionType::kConnectionError;
    err.conn = c->id;
    err.status = culprit;
    err.msn = culprit_msn;
    while (c->msg_una != c->post_msn) {
      TxMsg& m = c->Msg(c->msg_una);
      Completion cpl;
      cpl.type = CompletionType::kWrite;
      cpl.conn = c->id;
      cpl.wr_id = m.wr_id;
      cpl.byte_len = m.len;
      cpl.remote_addr = m.remote_addr;
      cpl.msn = c->msg_una;
      cpl.status = code;
      if (c->msg_una == culprit_msn) {
        cpl.status = culprit;
        err.wr_id = cpl.wr_id;
        err.byte_len = cpl.byte_len;
        err.remote_addr = cpl.remote_addr;
      }
      PushWriteCompletion(cpl);
      if (regions_[m.region].refs > 0) --regions_[m.region].refs;
      ++c->msg_una;
    }
    if (c->connected && code != absl::StatusCode::kCancelled)
      PushCompletion(err);
    c->failed = true;
    c->all_head = c->all_tail = kNil;
    c->inflight_bytes = 0;
    c->ctrl_head = c->ctrl_tail;
  }

  // ------------------------------------------------------------- timers
  void RunTimers(Time now, Conn* c) {
    if (!c->connected || c->failed) return;
    if (c->ack_deadline <= now) FlushAck(c);
    if (c->Outstanding() && now - c->last_heard >= c->opt.connection_timeout) {
      // The oldest outstanding WRITE timed out (IBV_WC_RETRY_EXC_ERR); the
      // others are flushed.
      FlushWrites(c, absl::StatusCode::kAborted,
                  absl::StatusCode::kDeadlineExceeded, c->msg_una);
      return;
    }
    // The peer answers (so connection_timeout never fires) but its
    // application has not polled its completion queue for rnr_timeout:
    // give up as an RC QP does when rnr_retry runs out.
    if (c->rnr_streak > 0 && c->opt.rnr_timeout > 0 && c->Outstanding() &&
        now - c->rnr_since >= c->opt.rnr_timeout) {
      ++c->st.rnr_timeouts;
      // The oldest outstanding WRITE ran out of RNR retries
      // (IBV_WC_RNR_RETRY_EXC_ERR); the others are flushed.
      FlushWrites(c, absl::StatusCode::kAborted,
                  absl::StatusCode::kResourceExhausted, c->msg_una);
      return;
    }
    if (c->plane_resend_at <= now) {
      QueuePlaneStatus(c);
      ++c->st.plane_status_repeats;
      if (--c->plane_repeats_left == 0) {
        c->plane_resend_at = kTimeInfinite;
      } else {
        c->plane_resend_gap = std::min(2 * c->plane_resend_gap, c->opt.rto_max);
        c->plane_resend_at = now + c->plane_resend_gap;
      }
    }
    if (c->all_head == kNil) return;
    TailResends(now, c);  // (nothing unless the oldest is due)
    if (c->all_head == kNil) return;
    if (c->PathLossTime() <= now) {
      congestion::AckEvent ev;
      ev.now = now;
      ev.lost = PathTimeouts(now, c);
      ev.inflight_bytes = c->inflight_bytes;
      ev.stranded = Stranded(c, now);
      ev.stranded_bytes = StrandedBytes(c, now);
      c->cc->OnAck(ev);
      ReadCc(c);
      if (c->all_head == kNil) return;
    }
    const Time rto_time = c->RtoTime();
    const Time tlp_time = c->TlpTime();
    if (tlp_time <= now && tlp_time < rto_time) {
      // Tail-loss probe: nothing new was acked for a PTO (about two RTTs)
      // while data is in flight, well before the RTO.
      // - Transmissions older than a PTO with one sent after them acked
      //   (overtaken across the connection) are lost on their paths: all
      //   are resent (on other paths) and the paths get kLost, as in a
      //   fabric failure the rest of the connection keeps delivering.
      // - When none was overtaken, nothing says the fabric lost them (a
      //   stalled receiver or host holds the whole flight): RFC 8985's
      //   probe, the oldest transmission (kTlpPackets) resent alone, the
      //   rest kept in flight. The SACK answering it tells what arrived;
      //   what was sent before the stall's first probe and is still unacked
      //   then is lost by path timeout (LossDeadline, tlp_rack), and the
      //   probed packet's path is blamed only if the probe's copy came back
      //   alone (OnSack, tlp_blame).
      // At most kMaxTlp times per stall, then the RTO.
      const Time pto = c->Pto();
      congestion::AckEvent ev;  // the presumed losses, for the controller
      ev.now = now;
      while (c->all_head != kNil &&
             c->slots[c->all_head].sent_time + pto <= now &&
             c->slots[c->all_head].sent_time < c->rack_sent) {
        const uint32_t idx = c->all_head;
        const uint16_t path = c->slots[idx].path;
        ++c->path_cold[path].lost_packets;
        ++ev.lost;
        DeclareLost(c, PsnOfSlot(c, idx));
        RetireFeedback(c, path, routing::PathFeedback::kLost, now);
      }
      uint32_t probed = 0;
      while (ev.lost == 0 && probed < kTlpPackets && c->all_head != kNil &&
             c->slots[c->all_head].sent_time + pto <= now) {
        ++probed;
        const uint32_t idx = c->all_head;
        const uint16_t path = c->slots[idx].path;
        // Sent in the same burst as an acked one (or earlier): blamed
        // (kLost) once the probe's answer shows the original did not
        // arrive. Same-burst is enough here, unlike Overtaken: the probe's
        // copy, sent strictly later and acked alone, is the later evidence
        // (a dead path under bursty traffic is found this way).
        c->tlp_blame =
            c->any_acked_sent && c->slots[idx].sent_time <= c->rack_sent;
        c->tlp_psn = PsnOfSlot(c, idx);
        c->tlp_orig_path = path;
        ++c->path_cold[path].lost_packets;
        MarkLost(c, c->tlp_psn, false);
      }
      ev.lost += probed;
      if (ev.lost > 0 && c->opt.loss_is_congestion) {  // drop-tail fabric
        ev.inflight_bytes = c->inflight_bytes;
        c->cc->OnAck(ev);
        ReadCc(c);
      }
      ++c->tlp_fired;
      if (c->tlp_fired == 1) c->tlp_stall_at = now;
      c->tlp_at = now;
      c->tlp_credit = static_cast<uint8_t>(probed);
      ++c->st.tail_loss_probes;
      c->no_path = false;
      return;
    }
    if (rto_time > now) return;
    // The (backed-off) timer fired: every transmission older than the
    // un-backed-off RTO is presumed lost. (With the backed-off value here,
    // packets sent just after the oldest one would be stranded: each firing
    // doubles the age they must reach while they fill the window.)
    const Time age = c->RtoBase();
    // Something sent after the oldest transmission was acked: the
    // connection delivers, only its paths failed. No window cut, no backoff.
    const bool delivering = c->rack_sent > c->slots[c->all_head].sent_time;
    // (A transmission on a path known to be slow is left for its own
    // SlowPathGrace; the oldest one is past it, so at least it is resent.)
    uint32_t idx = c->all_head;
    while (idx != kNil && c->slots[idx].sent_time + age <= now) {
      const TxSlot& s = c->slots[idx];
      const uint32_t next = s.next_all;
      if (s.sent_time + c->SlowPathGrace(s.path) <= now) {
        const uint16_t path = s.path;
        const bool overtaken = Overtaken(c, s.sent_time);
        ++c->path_cold[path].lost_packets;
        if (overtaken) {
          DeclareLost(c, PsnOfSlot(c, idx));
          RetireFeedback(c, path, routing::PathFeedback::kTimeout, now);
        } else {
          MarkLost(c, PsnOfSlot(c, idx), false);
        }
      }
      idx = next;
    }
    // The oldest lost PSN goes first: the cumulative ack waits for it, and
    // after a timeout the window may allow one packet per RTO. (In ring
    // order, behind what earlier declarations queued, it could wait many
    // backed-off RTOs while packets the receiver already holds are resent:
    // ones beyond its SACK bitmap, which starts at its oldest missing PSN,
    // are never acked while that PSN is missing.)
    if (c->retx_head != c->retx_tail) OldestRetxFirst(c);
    ++c->st.rto_events;
    if (!delivering) {
      if (c->backoff < kMaxBackoff) ++c->backoff;
      c->cc->OnTimeout(now);
      ReadCc(c);
    }
    c->no_path = false;
  }

  // ------------------------------------------------------------- emit
  // The RNR probe of the current pause was sent and is unanswered (still
  // in flight: a NO_BUFFER or a loss marks it lost, an ack ends the
  // streak).
  static bool RnrProbeOut(const Conn* c) {
    return c->rnr_probe_at != kTimeInfinite && c->rnr_probe_psn >= c->snd_una &&
           c->rnr_probe_psn < c->snd_nxt &&
           c->slots[c->rnr_probe_psn & c->win_mask].state == kInFlight;
  }

  // Moves the oldest PSN waiting for retransmission to the head of the
  // retransmit ring (swapped with the entry there); an all-stale ring is
  // emptied. Before an RNR probe (the receiver refused everything beyond a
  // point, so the oldest refused packet is the first it can take once it
  // has room), O(ring) once per pause, and after an RTO (RunTimers), never
  // per packet.
  static void OldestRetxFirst(Conn* c) {
    uint64_t best_r = c->retx_tail;
    uint64_t best = std::numeric_limits<uint64_t>::max();
    for (uint64_t r = c->retx_head; r != c->retx_tail; ++r) {
      const uint64_t psn = c->retx[r % c->retx_size];
      if (psn >= c->snd_una && psn < best && c->Slot(psn).state == kLost) {
        best = psn;
        best_r = r;
        if (psn == c->snd_una) break;  // nothing older
      }
    }
    if (best_r == c->retx_tail) {
      c->retx_head = c->retx_tail;  // every entry stale
      return;
    }
    std::swap(c->retx[c->retx_head % c->retx_size],
              c->retx[best_r % c->retx_size]);
  }

  // True when PollTransmit would send a DATA packet now (window open).
  bool HasSendable(const Conn* c) const {
    if (c->rnr_streak > 0) {
      // One RNR probe at a time, whatever the window (EmitConn).
      if (RnrProbeOut(c)) return false;
      if (c->retx_head != c->retx_tail) return true;
      if (c->send_msn == c->post_msn) return false;
      const TxMsg& m = c->Msg(c->send_msn);
      return m.first_psn + c->send_idx < c->snd_una + c->snd_win;
    }
    uint32_t len;
    if (c->retx_head != c->retx_tail) {
      const uint64_t psn = c->retx[c->retx_head % c->retx_size];
      const TxSlot& s = c->slots[psn & c->win_mask];
      if (psn < c->snd_una || s.state != kLost) return true;  // stale: pop
      if (c->tlp_credit > 0) return true;  // a probe ignores the window
      const TxMsg& m = c->Msg(s.msn);
      const uint32_t pkt_idx = static_cast<uint32_t>(psn - m.first_psn);
      len = std::min<uint32_t>(c->mtu, m.len - pkt_idx * c->mtu);
    } else {
      if (c->send_msn == c->post_msn) return false;
      const TxMsg& m = c->Msg(c->send_msn);
      if (m.first_psn + c->send_idx >= c->snd_una + c->snd_win) return false;
      len = std::min<uint32_t>(c->mtu, m.len - c->send_idx * c->mtu);
    }
    return c->inflight_bytes == 0 || c->inflight_bytes + len <= c->cwnd;
  }

  // `probe_due`: false when the selector is known to have no probe due at
  // `now` (then NextProbe is not asked).
  size_t EmitConn(Time now, Conn* c, TxPacket* out, size_t max,
                  bool probe_due) {
    if (!c->connected || c->failed) return 0;
    size_t n = 0;
    // Control packets.
    while (n < max && c->ctrl_head != c->ctrl_tail) {
      const CtrlItem& it = c->CtrlAt(c->ctrl_head++);
      EmitCtrl(now, c, it, out[n]);
      ++n;
    }
    // Probes on ASSUMED_BAD paths.
#ifndef NDEBUG
    if (!probe_due && c->sel->NextProbeTime() <= now) std::abort();
#endif
    while (probe_due && n < max) {
      const int p = c->sel->NextProbe(now);
      if (p < 0) break;
      CtrlItem it;
      it.type = CtrlType::kProbe;
      it.path = static_cast<uint16_t>(p);
      it.psn = ++c->probe_seq;
      it.ts = static_cast<uint64_t>(now);
      EmitCtrl(now, c, it, out[n]);
      ++c->st.probes_sent;
      ++n;
    }
    // Data: retransmissions first, then new packets, window permitting.
    constexpr size_t kQuantum = 64;
    const uint64_t rate = c->pacing;  // 0: window only
    size_t data = 0;
    // Paths picked ahead for new packets that are certain to be sent (see
    // below): exactly the NextPath calls the loop would make, in one call.
    PathId path_buf[kQuantum];
    size_t path_pos = 0, path_have = 0;
    bool path_short = false;  // the batch's last call returned -1
    // In an RNR streak (NACK NO_BUFFER: the receiver's completion queue is
    // full) a pause ends with one packet, the oldest one refused, and
    // nothing more until it is answered (RnrProbeOut).
    const bool rnr = c->rnr_streak > 0;
    while (n < max && data < kQuantum) {
      if (c->next_send_time > now) break;
      if (rnr) {
        if (RnrProbeOut(c)) break;
        if (c->retx_head != c->retx_tail) OldestRetxFirst(c);
      }
      uint64_t psn;
      bool retx = false;
      if (c->retx_head != c->retx_tail) {
        psn = c->retx[c->retx_head % c->retx_size];
        if (c->Slot(psn).state != kLost || psn < c->snd_una) {
          ++c->retx_head;  // acked meanwhile
          continue;
        }
        retx = true;
      } else {
        if (c->send_msn == c->post_msn) break;
        const TxMsg& m = c->Msg(c->send_msn);
        psn = m.first_psn + c->send_idx;
        if (psn >= c->snd_una + c->snd_win) break;
      }
      const uint32_t idx = static_cast<uint32_t>(psn & c->win_mask);
      TxSlot& s = c->slots[idx];
      uint32_t msn, pkt_idx;
      if (retx) {
        msn = s.msn;
        pkt_idx = static_cast<uint32_t>(psn - c->Msg(msn).first_psn);
      } else {
        msn = c->send_msn;
        pkt_idx = c->send_idx;
      }
      TxMsg& m = c->Msg(msn);
      const uint32_t off = pkt_idx * c->mtu;
      const uint32_t len = std::min<uint32_t>(c->mtu, m.len - off);
      // A tail-loss probe goes out whatever the window (RFC 8985): the
      // flight it probes still counts as in flight. So does an RNR probe
      // (one packet; what is still in flight was sent before the pause).
      const bool probe = retx && c->tlp_credit > 0;
      if (c->inflight_bytes > 0 && c->inflight_bytes + len > c->cwnd &&
          !probe && !rnr) {
        break;
      }
      int path;
      if (path_pos < path_have) {
        path = path_buf[path_pos++];
      } else if (path_short) {
        path = -1;  // the batch already made this call
      } else if (!retx && rate == 0 && !rnr) {
        // New data, no pacing, nothing to retransmit: the next k packets
        // are all sent (none of the loop's conditions can change within
        // k), so their k NextPath calls happen back to back anyway.
        const uint64_t room = c->cwnd > c->inflight_bytes
                                  ? (c->cwnd - c->inflight_bytes) / c->mtu
                                  : 0;
        // (Pairwise: the initializer-list form ran a loop.)
        const uint64_t k = std::max<uint64_t>(
            1,
            std::min(std::min<uint64_t>(max - n, kQuantum - data),
                     std::min(std::min<uint64_t>(m.npkts - pkt_idx,
                                                 c->snd_una + c->snd_win - psn),
                              room)));
        path_have = c->sel->NextPaths(now, path_buf, k);
        if (!c->group_inflight.empty()) BalanceRun(now, c, path_buf, path_have);
        path_short = path_have < k;
        path_pos = path_have;
        if (path_have > 0) {
          // All path_have packets leave now: committed and emitted in one
          // run (the loop's per-packet checks cannot fail within it).
          EmitNewRun(now, c, m, msn, pkt_idx, psn, path_buf, path_have,
                     out + n);
          n += path_have;
          data += path_have;
          continue;
        }
        path = -1;
      } else {
        path = c->sel->NextPath(now);
        if (path >= 0 && !probe && !rnr && !c->group_inflight.empty()) {
          path = Balanced(now, c, static_cast<uint16_t>(path));
        }
      }
      if (path < 0) {
        c->no_path = true;
        break;
      }
      if (retx && path == s.path && c->num_paths > 1) {
        for (int t = 0; t < 4 && path == s.path; ++t) {
          const int q = c->sel->NextPath(now);
          if (q >= 0) path = q;
        }
      }
      c->no_path = false;
      if (rnr) {
        c->rnr_probe_at = now;
        c->rnr_probe_psn = psn;
        ++c->st.rnr_probes_sent;
      }
      // Commit.
      if (retx) {
        if (probe) --c->tlp_credit;
        ++c->retx_head;
        ++c->st.retransmitted_packets;
        c->st.retransmitted_bytes += len;
      } else {
        s = TxSlot{};
        s.msn = msn;
        s.tx_count = 0;
        if (++c->send_idx == m.npkts) {
          ++c->send_msn;
          c->send_idx = 0;
        }
        if (psn + 1 > c->snd_nxt) c->snd_nxt = psn + 1;
      }
      s.len = len;
      s.path = static_cast<uint16_t>(path);
      s.sent_time = now;
      s.state = kInFlight;
      if ((s.tx_count & kTxCountMask) < kTxCountMask) ++s.tx_count;
      PathInfo& pi = c->paths[path];
      s.path_seq = static_cast<uint32_t>(++pi.tx_seq);
      LinkSlot(c, idx);
      c->inflight_bytes += len;
      pi.st.tx_bytes += len;
      ++c->st.tx_data_packets;
      c->st.tx_data_bytes += len;
      EmitData(now, c, m, msn, off, len, psn, static_cast<uint16_t>(path), retx,
               out[n]);
      ++n;
      ++data;
      if (rate > 0) {
        c->next_send_time =
            std::max(c->next_send_time, now) +
            SerializationTime(len + wire::kDataHeaderSize, rate);
      }
    }
    return n;
  }

  // EmitConn's commit and EmitData for `cnt` new packets psn, psn + 1, ...
  // of message `msn` from packet `pkt_idx` on, on paths[0, cnt), without
  // pacing: what cnt iterations of EmitConn's loop do for them, with the
  // sender's totals added once. REQUIRES: all of them within the message,
  // the send window and cwnd (EmitConn's batch bound), no retransmission
  // queued.
  void EmitNewRun(Time now, Conn* c, TxMsg& m, uint32_t msn, uint32_t pkt_idx,
                  uint64_t psn, const PathId* paths, size_t cnt,
                  TxPacket* out) {
    // The first packet through EmitData (its header is the template), the
    // others in EmitNewRunRest.
    EmitNewSlot(now, c, msn, psn, paths[0],
                std::min<uint32_t>(c->mtu, m.len - pkt_idx * c->mtu));
    EmitData(now, c, m, msn, pkt_idx * c->mtu,
             std::min<uint32_t>(c->mtu, m.len - pkt_idx * c->mtu), psn,
             paths[0], /*retx=*/false, out[0]);
    uint64_t bytes = out[0].payload_len;
    if (cnt > 1)
      bytes += EmitNewRunRest(now, c, m, msn, pkt_idx, psn, paths, cnt, out);
    c->no_path = false;
    c->send_idx += static_cast<uint32_t>(cnt);
    if (c->send_idx == m.npkts) {
      ++c->send_msn;
      c->send_idx = 0;
    }
    if (psn + cnt > c->snd_nxt) c->snd_nxt = psn + cnt;
    c->inflight_bytes += bytes;
    c->st.tx_data_packets += cnt;
    c->st.tx_data_bytes += bytes;
  }

  // EmitNewRun's packets 1 .. cnt - 1 (out[0] is sent): their bytes. Out
  // of line: inlined into PollTransmit the loop ran short of registers
  // (locals spilled to the stack and reloaded per packet); the simulator's
  // one-packet runs do not pay for the call.
  __attribute__((noinline)) uint64_t EmitNewRunRest(
      Time now, Conn* c, TxMsg& m, uint32_t msn, uint32_t pkt_idx, uint64_t psn,
      const PathId* paths, size_t cnt, TxPacket* out) {
    uint64_t bytes = 0;
    if (c->tx_crc) {
      for (size_t i = 1; i < cnt; ++i) {
        const uint32_t pi_idx = pkt_idx + static_cast<uint32_t>(i);
        const uint32_t off = pi_idx * c->mtu;
        const uint32_t len = std::min<uint32_t>(c->mtu, m.len - off);
        EmitNewSlot(now, c, msn, psn + i, paths[i], len);
        EmitData(now, c, m, msn, off, len, psn + i, paths[i], /*retx=*/false,
                 out[i]);
        bytes += len;
      }
    } else {
      // A copy of the first packet's header (not sealed yet) with this
      // packet's fields: the same bytes as EmitData's (same message, same
      // send time, no retransmission, no payload checksum). The run's
      // invariants in locals (stores to slots and packets could alias the
      // members they come from), the header template in four vector
      // registers.
      using V = long long __attribute__((vector_size(16)));
      static_assert(4 * sizeof(V) == wire::kDataHeaderSize);
      V t0, t1, t2, t3;
      std::memcpy(&t0, out[0].header, 16);
      std::memcpy(&t1, out[0].header + 16, 16);
      std::memcpy(&t2, out[0].header + 32, 16);
      std::memcpy(&t3, out[0].header + 48, 16);
      const uint32_t mtu = c->mtu;
      const uint32_t mlen = m.len;
      const uint8_t* const src = m.src;
      const uint64_t raddr = m.remote_addr;
      const uint32_t peer = c->opt.peer;
      const uint16_t base_flags = m.has_imm ? wire::kFlagHasImmediate : 0;
      // The slot ring, the path array and the send-order list's tail in
      // locals too: EmitNewSlot and LinkSlot for each packet, with the
      // byte stores of the slots and headers (which may alias anything)
      // no longer forcing the connection's members to be reloaded. The
      // first packet's slot is linked, so the tail is a slot.
      TxSlot* const slots = c->slots.data();
      PathInfo* const pinfo = c->paths.data();
      const uint64_t win_mask = c->win_mask;
      uint32_t all_tail = c->all_tail;
      // Packet i of the run: `len` payload bytes, header flags `flags`.
      const auto emit = [&](size_t i, uint32_t len, uint16_t flags)
          __attribute__((always_inline)) {
        const uint32_t off = (pkt_idx + static_cast<uint32_t>(i)) * mtu;
        const uint16_t path = paths[i];
        const uint64_t q = psn + i;
        const uint32_t idx = static_cast<uint32_t>(q & win_mask);
        TxSlot& s = slots[idx];
        PathInfo& pi = pinfo[path];
        s.sent_time = now;
        s.msn = msn;
        s.path_seq = static_cast<uint32_t>(++pi.tx_seq);
        s.len = len;
        s.path = path;
        s.state = kInFlight;
        s.tx_count = 1;
        if (pi.bgroup != kNoBalance) c->GroupAdd(pi.bgroup);
        s.next_path = kNil;
        s.prev_path = pi.tail;
        if (pi.tail != kNil) {
          slots[pi.tail].next_path = idx;
        } else {
          pi.head = idx;
        }
        pi.tail = idx;
        s.next_all = kNil;
        s.prev_all = all_tail;
        slots[all_tail].next_all = idx;
        all_tail = idx;
        pi.st.tx_bytes += len;
        TxPacket& o = out[i];
        std::memcpy(o.header, &t0, 16);
        std::memcpy(o.header + 16, &t1, 16);
        std::memcpy(o.header + 32, &t2, 16);
        std::memcpy(o.header + 48, &t3, 16);
        // (off > 0: never the first packet of the message.)
        wire::internal::PatchDataHeader(o.header, static_cast<uint32_t>(q), off,
                                        raddr + off, len, path, flags);
        o.header_len = static_cast<uint16_t>(wire::kDataHeaderSize);
        o.payload = src + off;  // (len > 0: off < mlen within the message)
        o.payload_len = len;
        o.peer = peer;
        o.path = path;
        o.tclass = TrafficClass::kData;
      };
      // Every packet before the message's last carries mtu bytes and no
      // last-of-message flag: those two header fields are the same for
      // all of them (set up once); the last one, if in the run, after.
      const size_t full =
          std::min<size_t>(cnt, static_cast<size_t>(m.npkts - 1 - pkt_idx));
      for (size_t i = 1; i < full; ++i) emit(i, mtu, base_flags);
      bytes = static_cast<uint64_t>(full > 1 ? full - 1 : 0) * mtu;
      if (full < cnt) {  // the last packet: cnt == full + 1
        const uint32_t off = (pkt_idx + static_cast<uint32_t>(full)) * mtu;
        const uint32_t len = mlen - off;
        emit(full, len,
             static_cast<uint16_t>(base_flags | wire::kFlagLastOfMessage));
        bytes += len;
      }
      c->all_tail = all_tail;
    }
    return bytes;
  }

  // EmitConn's commit of a new packet's slot (sent once, now, on `path`),
  // linked in the send-order lists, and its path's counters.
  __attribute__((always_inline)) void EmitNewSlot(Time now, Conn* c,
                                                  uint32_t msn, uint64_t psn,
                                                  uint16_t path, uint32_t len) {
    const uint32_t idx = static_cast<uint32_t>(psn & c->win_mask);
    TxSlot& s = c->slots[idx];
    PathInfo& pi = c->paths[path];
    TxSlot n;
    n.sent_time = now;
    n.msn = msn;
    n.path_seq = static_cast<uint32_t>(++pi.tx_seq);
    n.len = len;
    n.path = path;
    n.state = kInFlight;
    n.tx_count = 1;
    s = n;
    LinkSlot(c, idx);
    pi.st.tx_bytes += len;
  }

  // A DATA packet's header (unsealed) and TxPacket. The first packet of a
  // message is encoded in full and kept as the template (TxMsg::hdr);
  // the others are a copy of it with their own fields written (the
  // per-packet fields: PSN, offset, address, send time, length, path,
  // flags, payload checksum): the same bytes.
  void EmitData(Time now, Conn* c, TxMsg& m, uint32_t msn, uint32_t off,
                uint32_t len, uint64_t psn, uint16_t path, bool retx,
                TxPacket& out) {
    uint16_t flags = 0;
    if (retx) flags |= wire::kFlagRetransmit;
    if (off == 0) flags |= wire::kFlagFirstOfMessage;
    if (off + len == m.len) flags |= wire::kFlagLastOfMessage;
    if (m.has_imm) flags |= wire::kFlagHasImmediate;
    const uint8_t* payload = len > 0 ? m.src + off : nullptr;
    uint32_t payload_crc = 0;
    if (c->tx_crc && len > 0) {
      flags |= wire::kFlagPayloadCrc;
      payload_crc = wire::Crc32c(payload, len);
    }
    if (m.hdr_ok) {
      namespace off_ = wire::internal::off;
      std::memcpy(out.header, m.hdr, wire::kDataHeaderSize);
      wire::internal::PatchDataHeader(out.header, static_cast<uint32_t>(psn),
                                      off, m.remote_addr + off, len, path,
                                      flags);
      Put64(out.header + off_::kDSendTs, static_cast<uint64_t>(now));
      Put32(out.header + off_::kDPayloadCrc, payload_crc);
      out.header_len = static_cast<uint16_t>(wire::kDataHeaderSize);
    } else {
      wire::DataHeader h;
      h.dst_conn = c->remote.conn_id;
      h.psn = static_cast<uint32_t>(psn);
      h.msn = msn;
      h.msg_offset = off;
      h.msg_len = m.len;
      h.remote_addr = m.remote_addr + off;
      h.rkey = m.rkey;
      h.payload_len = len;
      h.path_id = path;
      if (m.has_imm) h.immediate = m.imm;
      h.payload_crc = payload_crc;
      h.flags = flags;
      h.send_ts = static_cast<uint64_t>(now);
      out.header_len = static_cast<uint16_t>(wire::internal::EncodeDataImpl(
          h, out.header, TxPacket::kMaxHeaderBytes, /*seal=*/false));
      std::memcpy(m.hdr, out.header, wire::kDataHeaderSize);
      m.hdr_ok = true;
    }
    out.payload = payload;
    out.payload_len = len;
    out.peer = c->opt.peer;
    out.path = path;
    out.tclass = TrafficClass::kData;
  }

  void EmitCtrl(Time now, Conn* c, const CtrlItem& it, TxPacket& out) {
    out.payload = nullptr;
    out.payload_len = 0;
    out.peer = c->opt.peer;
    out.path = it.path;
    out.tclass = TrafficClass::kControl;
    const uint32_t dst = c->remote.conn_id;
    size_t len = 0;
    switch (it.type) {
      case CtrlType::kSack: {
        wire::SackHeader h;
        h.dst_conn = dst;
        h.cum_psn = static_cast<uint32_t>(c->rcv_nxt);
        // The bitmap starts at the 64-aligned rcv_nxt, or, for a trigger
        // beyond the 256 bits from there, ends with the trigger's word (its
        // PSN acknowledged whatever the hole at rcv_nxt; the PSNs between
        // are left to other SACKs whose bitmaps reach them).
        uint64_t base = c->rcv_nxt & ~uint64_t{63};
        if (it.psn64 >= base + wire::kSackBitmapBits) {
          base = (it.psn64 & ~uint64_t{63}) - (wire::kSackBitmapBits - 64);
        }
        h.bitmap_base = static_cast<uint32_t>(base);
        // Ring positions at or beyond rcv_nxt + win alias live bits of
        // PSNs one window lower: report them as zero (a SACK may be read
        // long after it was sent, when those PSNs are in the sender's window).
        const uint64_t limit = c->rcv_nxt + c->win;
        for (size_t w = 0; w < wire::kSackBitmapWords; ++w) {
          const uint64_t lo = base + 64 * w;
          uint64_t bits = c->rx_bits[((base >> 6) + w) & (c->rx_word_mask)];
          if (lo >= limit) {
            bits = 0;
          } else if (lo + 64 > limit) {
            bits &= (uint64_t{1} << (limit - lo)) - 1;
          }
          h.bitmap[w] = bits;
        }
        h.trigger_psn = it.psn;
        h.echo_path = it.path;
        h.ecn_seen = it.ecn;
        h.echo_ts = it.ts;
        h.bytes_received = c->rx_bytes_total;
        h.ooo_count = c->ooo_count;
        h.coalesced = it.coalesced;
        len = wire::EncodeSack(h, out.header, TxPacket::kMaxHeaderBytes,
                               /*seal=*/false);
        ++c->st.tx_sacks;
        break;
      }
      case CtrlType::kNack: {
        wire::NackHeader h;
        h.dst_conn = dst;
        h.psn = it.psn;
        h.cum_psn = static_cast<uint32_t>(c->rcv_nxt);
        h.reason = it.reason;
        h.ecn_seen = it.ecn;
        h.echo_path = it.path;
        h.echo_ts = it.ts;
        len = wire::EncodeNack(h, out.header, TxPacket::kMaxHeaderBytes,
                               /*seal=*/false);
        break;
      }
      case CtrlType::kProbe:
      case CtrlType::kProbeAck: {
        wire::ProbeHeader h;
        h.dst_conn = dst;
        h.path_id = it.path;
        h.probe_seq = it.psn;
        h.send_ts = it.ts;
        len = wire::EncodeProbe(h, it.type == CtrlType::kProbeAck, out.header,
                                TxPacket::kMaxHeaderBytes, /*seal=*/false);
        break;
      }
      case CtrlType::kPlane: {
        wire::PlaneStatusHeader h;
        h.dst_conn = dst;
        h.planes_down = it.planes_down;
        h.seq = it.psn;
        len = wire::EncodePlaneStatus(h, out.header, TxPacket::kMaxHeaderBytes,
                                      /*seal=*/false);
        break;
      }
    }
    (void)now;
    out.header_len = static_cast<uint16_t>(len);
  }

  EngineOptions opt_;
  Rng rng_;
  MemcpyPlacer memcpy_placer_{opt_.copy_method};
  Placer* placer_;
  EngineStats stats_;
  Time last_now_ = 0;

  std::vector<Region> regions_;
  std::vector<uint32_t> free_regions_;
  absl::flat_hash_map<uint32_t, uint32_t> by_lkey_;
  absl::flat_hash_map<uint32_t, uint32_t> by_rkey_;
  uint64_t region_gen_ = 1;

  absl::flat_hash_map<ConnId, std::unique_ptr<Conn>> conns_;  // owner
  // Fate sharing: failure group id -> the connections with a path in it,
  // in creation order (looked up, never iterated for a decision).
  absl::flat_hash_map<uint16_t, std::vector<Conn*>> group_conns_;
  // Set when fate sharing touched another connection during PollTransmit's
  // timer pass (that pass must not then mark the timers valid).
  bool cross_touched_ = false;
  std::vector<Conn*> by_id_;  // lookup
  std::vector<Conn*> order_;
  std::vector<Sched> sched_;  // parallel to order_
  size_t cursor_ = 0;
  ConnId next_conn_id_ = 1;

  // Completion queue: a ring (a power of two, grown by doubling as the
  // queue needs, so to about cq_capacity at most, plus kConnectionError
  // completions) holding completions [cq_head_, cq_tail_); cq_reserved_
  // slots are reserved for the kWrite completions of outstanding WRITEs.
  std::vector<Completion> cq_;
  uint64_t cq_head_ = 0, cq_tail_ = 0;
  uint64_t cq_reserved_ = 0;
  // Connections whose delivery a full completion queue holds (cq_held), in
  // the order they were held: the first held_n_ of held_, which has one
  // slot per connection (so holding one never allocates).
  std::vector<Conn*> held_;
  size_t held_n_ = 0;

  // NextEventTime cache: connections touched since the last call (the
  // first dirty_n_ of dirty_, which has one slot per connection), and the
  // combined minimum (valid while valid_ & kNextValid).
  std::vector<Conn*> dirty_;
  size_t dirty_n_ = 0;
  // kNextValid: NextEventTime's minimum is current. kTimersValid: no
  // connection is stale since PollTransmit's last timer pass, whose minimum
  // deadline timer_min_ is (no deadline changes until a Touch). Touch clears
  // both (one store), TouchSent only kNextValid.
  static constexpr uint8_t kNextValid = 1, kTimersValid = 2;
  uint8_t valid_ = 0;
  Time timer_min_ = kTimeInfinite;
  bool next_ctrl_ = false;
  Time next_deadline_ = kTimeInfinite;
  Time next_send_ = kTimeInfinite;

  wire::Packet pkt_;  // decode scratch, reused
  // The receive run (DataRun): the connection of the DATA packet
  // accepted last in this OnReceive call (nullptr: none, or anything else
  // came after it) and its header bytes.
  Conn* run_c_ = nullptr;
  const uint8_t* run_hdr_ = nullptr;

  // Clean acks of the SACK being processed, for one OnFeedbackBatch call
  // (flushed before any other selector call of that SACK).
  static constexpr size_t kGoodFbBatch = 64;
  PathId good_fb_[kGoodFbBatch];
  size_t good_fb_n_ = 0;
  // Within one OnSack with a probe's blame pending: whether the probe's own
  // copy was acked, and how many other transmissions sent before the probe.
  bool tlp_answered_ = false;
  uint32_t tlp_old_acked_ = 0;

  // RxDestination claims since the last OnReceive.
  static constexpr size_t kMaxRxClaims = 256;
  std::vector<RxClaim> claims_;  // kMaxRxClaims once RxDestination is used
  size_t nclaims_ = 0;
  bool claims_full_ = false;
  // OnReceive of a batch with claims: the next claim to match (packets are
  // matched a chunk ahead), the claims of packets already handled, and the
  // connections whose failure waits for the end of the batch.
  bool in_batch_ = false;
  size_t claim_next_ = 0;
  size_t claim_done_ = 0;
  std::vector<Conn*> deferred_fail_;
  wire::Packet rxd_pkt_;  // RxDestination's decode scratch
};

// --------------------------------------------------------------- Engine
Engine::Engine(const EngineOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
Engine::~Engine() = default;

absl::StatusOr<MemoryRegion> Engine::RegisterMemory(void* addr, uint64_t length,
                                                    uint32_t access) {
  return impl_->RegisterMemory(addr, length, access);
}
absl::Status Engine::DeregisterMemory(uint32_t lkey) {
  return impl_->DeregisterMemory(lkey);
}
absl::StatusOr<ConnId> Engine::CreateConnection(
    const ConnectionOptions& options) {
  absl::StatusOr<ConnId> id = impl_->CreateConnection(options);
  if (absl::IsInvalidArgument(id.status())) impl_->CountConfigError();
  return id;
}
ConnectionInfo Engine::LocalInfo(ConnId conn) const {
  return impl_->LocalInfo(conn);
}
absl::Status Engine::Connect(ConnId conn, const ConnectionInfo& remote) {
  absl::Status s = impl_->Connect(conn, remote);
  if (absl::IsInvalidArgument(s)) impl_->CountConfigError();
  return s;
}
absl::Status Engine::CloseConnection(ConnId conn) {
  return impl_->CloseConnection(conn);
}
absl::Status Engine::PostWrite(Time now, ConnId conn, const WriteRequest& req) {
  return impl_->PostWrite(now, conn, req);
}
void Engine::OnReceive(Time now, const RxPacket* pkts, size_t n) {
  impl_->OnReceive(now, pkts, n);
}
uint8_t* Engine::RxDestination(const uint8_t* hdr, size_t hdr_len,
                               size_t payload_len) {
  return impl_->RxDestination(hdr, hdr_len, payload_len);
}
size_t Engine::PollTransmit(Time now, TxPacket* out, size_t max) {
  return impl_->PollTransmit(now, out, max);
}
Time Engine::NextEventTime() const { return impl_->NextEventTime(); }
size_t Engine::PollCompletions(Completion* out, size_t max) {
  return impl_->PollCompletions(out, max);
}
bool Engine::CompletionQueueFull() const { return !impl_->CqRoom(); }
size_t Engine::CompletionsQueued() const { return impl_->CompletionsQueued(); }
EngineStats Engine::stats() const { return impl_->stats(); }
absl::StatusOr<ConnectionStats> Engine::connection_stats(ConnId conn) const {
  return impl_->connection_stats(conn);
}
absl::StatusOr<PathStats> Engine::path_stats(ConnId conn, PathId path) const {
  return impl_->path_stats(conn, path);
}
absl::Status Engine::SetPlaneUp(ConnId conn, uint16_t plane, bool up,
                                Time now) {
  return impl_->SetPlaneUp(conn, plane, up, now);
}

CopyMethod DefaultCopyMethod() {
  static const CopyMethod method = DetectCopyMethod();
  return method;
}

const char* CopyMethodName(CopyMethod m) {
  switch (m) {
    case CopyMethod::kAuto:
      return "auto";
    case CopyMethod::kVector:
      return "vector";
    case CopyMethod::kString:
      return "string";
  }
  return "?";
}

void PlacementCopyWith(CopyMethod m, uint8_t* dst, const uint8_t* src,
                       uint32_t len) {
  CopyBy(UsesString(m), dst, src, len);
}

void PlacementCopy(uint8_t* dst, const uint8_t* src, uint32_t len) {
  PlacementCopyWith(DefaultCopyMethod(), dst, src, len);
}

CopyMethod PlacementCopyChoice(CopyMethod m, const uint8_t* dst,
                               const uint8_t* src, uint32_t len) {
  return CopiesByString(UsesString(m), dst, src, len) ? CopyMethod::kString
                                                      : CopyMethod::kVector;
}

}  // namespace prism
