// prism::Engine — the pure multipath protocol engine.
//
// One Engine is one endpoint: it owns memory regions and connections, turns
// posted WRITEs into packets sprayed over each connection's paths, recovers
// losses selectively, places received payload at its final address, and
// reports completions.
//
// Contract (purity): the engine never reads a clock, never does I/O, never
// uses a global random generator. Every call that can change protocol state
// takes `now`. All randomness derives from EngineOptions::seed: the same seed
// and the same call sequence produce the same packets, byte for byte.
// Packets leave through PollTransmit and enter through OnReceive; the caller
// (a datapath driver, the simulator, a test) moves them.
//
// Thread safety: none. One thread drives one engine.
//
// Protocol contract (details: the comment block atop
// transport/engine/engine.cc):
// - Each connection numbers DATA packets with a PSN space of its own (32 bits
//   on the wire, starting at LocalInfo().initial_psn), at most 4096 packets
//   in flight; packets are sprayed over the path set by the PathSelector and
//   recovered selectively (SACK bitmap, per-path loss inference, TRIMMED
//   NACK -> immediate resend on another path, path timeout: a packet
//   outstanding for about srtt + 4 rttvar while one sent after it on another
//   path was acked is resent elsewhere and its path retired, without
//   touching the window; tail-loss probe; RTO with backoff, which cuts the
//   window only when nothing sent after the oldest packet was acked).
// - SACKs are coalesced: every 16 packets, at most base_rtt / 4 after the
//   first unacknowledged arrival (a timer NextEventTime() reports), and at
//   once on a gap, ECN CE or a duplicate.
// - kWrite completions are reported in posting order; kRecvImmediate in
//   message (MSN) order, each only after that message and all earlier ones of
//   the connection fully arrived.
// - Completion queue (bounded: EngineOptions::cq_capacity = C). Nothing is
//   ever dropped for want of room; work waits instead. Let Q be the
//   completions not yet polled and R the WRITEs posted and not yet
//   completed (each holds a reserved slot for its kWrite completion, OK or
//   failed). PostWrite refuses with ResourceExhausted (counted:
//   EngineStats::writes_refused_cq_full) while Q + R >= C; so every posted
//   WRITE's completion always fits. A WRITE-with-immediate message that
//   fully arrived is delivered (kRecvImmediate) only while Q + R < C;
//   otherwise the connection's in-order delivery holds at it (RNR-like;
//   EngineStats::cq_delivery_holds, ConnectionStats::cq_delivery_holds):
//   its bytes stay placed and acknowledged, later messages keep arriving
//   into the receive message ring (up to max_inflight_packets messages past
//   the held one), and a packet of a message beyond that is answered with
//   NACK NO_BUFFER (EngineStats::rx_drop_no_buffer) and not acknowledged:
//   the sender pauses the connection's data (rto_min, doubling while the
//   NACKs go on without an ack of a packet sent since, at most min(16
//   rto_min, rto_max); ConnectionStats::rnr_nacks_received). Each pause ends
//   with one RNR probe, the oldest refused packet alone
//   (ConnectionStats::rnr_probes_sent), whatever the window: NO_BUFFER
//   again starts the next pause; once it is acknowledged the window
//   reopens and the rest is resent. So a stalled receiver costs one packet
//   per pause, not a window. ConnectionOptions::rnr_timeout (default 0:
//   never, as InfiniBand's rnr_retry = 7) bounds how long such a streak may
//   last before the connection fails (kResourceExhausted for the oldest
//   outstanding WRITE and the kConnectionError, kAborted for the others;
//   see the failure item below).
//   PollCompletions resumes held connections, oldest hold first, as far as the
//   room it freed allows (before any later arrival can take that room).
//   Messages without an immediate need no slot but retire in MSN order behind a
//   held one. kConnectionError is the one completion that does not wait: posted
//   at once, beyond C if need be (at most one per connection in its life), so
//   the queue holds at most C completions plus the kConnectionError ones.
//   A connection that fails still delivers the messages it held (they were
//   acknowledged to the peer) as room appears, after its kConnectionError;
//   CloseConnection discards them.
// - Connection failure, as on an RDMA RC QP: one WRITE, the one that met
//   the failure, completes with the cause; every other outstanding WRITE
//   completes with kAborted (flushed, IBV_WC_WR_FLUSH_ERR: it may or may not
//   have been placed at the peer); then a kConnectionError completion
//   carries the cause too, and names the culprit: its wr_id, msn, byte_len
//   and remote_addr are those of that WRITE's completion (see Completion).
//   All in posting order. A WRITE posted to the failed connection later is
//   refused with kAborted, the flush code (a verbs QP in the error state
//   flushes it so). The causes:
//   - NACK BAD_KEY / BAD_RANGE (remote access error, e.g. a deregistered
//     or too small target region): the WRITE the NACK was for gets
//     kPermissionDenied / kOutOfRange (IBV_WC_REM_ACCESS_ERR).
//   - connection_timeout without any packet from the peer while WRITEs
//     are outstanding: the oldest outstanding WRITE (the one the peer
//     never acknowledged) gets kDeadlineExceeded (IBV_WC_RETRY_EXC_ERR).
//   - ConnectionOptions::rnr_timeout, when set, of NO_BUFFER answers
//     without an ack of anything sent since (the receiver did not poll its
//     completion queue for rnr_timeout): the oldest outstanding WRITE gets
//     kResourceExhausted (IBV_WC_RNR_RETRY_EXC_ERR).
//   CloseConnection is no failure: every outstanding WRITE completes with
//   kCancelled and no kConnectionError is posted.
//   prism::Endpoint completes the WRITEs it still held (not yet handed to
//   the engine) the same way, after the engine's: prism/endpoint.h.
//
// Typical driver loop (one timestamp per iteration):
//   now = clock();
//   n = datapath.RxBurst(now, rx, kBurst); engine.OnReceive(now, rx, n);
//   m = engine.PollTransmit(now, tx, kBurst); datapath.TxBurst(now, tx, m);
//   k = engine.PollCompletions(cq, kBurst);
//   sleep until min(engine.NextEventTime(), next packet);
#ifndef PRISM_ENGINE_H_
#define PRISM_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prism/packet.h"
#include "prism/stats.h"
#include "prism/types.h"

namespace prism {

// Memory access permissions (bit mask).
enum Access : uint32_t {
  kAccessLocal = 1u << 0,        // may be the source of local WRITEs
  kAccessRemoteWrite = 1u << 1,  // peers may WRITE into it
};

// A registered memory region. `rkey` is what a peer puts in its packets; it
// is random (32 bits from the engine's seeded generator), never sequential.
struct MemoryRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t access = 0;
};

// Placement of received payload into a registered region. The default copies
// with memcpy. A datapath whose NIC already wrote the bytes (RDMA WRITE on
// verbs) installs a no-op placer; GPU memory gets a device-copy placer.
class Placer {
 public:
  virtual ~Placer() = default;
  // Copies `len` bytes to `dst` (inside a region checked by the engine).
  // Returns false if placement failed (counted, packet dropped, not acked).
  virtual bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
                     const MemoryRegion& region) = 0;
};

// How the default placer copies a payload:
//   kVector: 64-byte blocks of 16-byte vector moves, the destination
//            prefetched ahead of the stores, the tail by memcpy;
//   kString: one `rep movsb` (x86 "fast short" string move) for payloads of
//            kStringCopyMinLen bytes or more, kVector below and whenever
//            the destination is 1 to kStringCopyAliasWindow - 1 bytes
//            ahead of the source modulo 4 KiB (there `rep movsb` measured
//            15-25% slower on AMD Zen 5 and up to 15x slower on Zen 4;
//            two large buffers malloc'd one after the other from the heap
//            are typically 16 bytes apart there);
//   kAuto:   DefaultCopyMethod().
// DefaultCopyMethod() is chosen once per process from the CPU (CPUID): kString
// on AMD family 1Ah (Zen 5) and later with ERMS and FSRM, where it measured
// faster than kVector inside the engine loopback; kVector elsewhere (on
// Intel it measured no faster; on AMD Zen 3/4 `rep movsb` is known to slow
// down several times when destination and source are close modulo 4 KiB).
// The choice changes speed only, never what is written: both write exactly
// the bytes memcpy writes (tests/engine/placement_copy_test.cc). Numbers:
// docs/benchmarks.md, "Placement copy method".
enum class CopyMethod : uint8_t { kAuto, kVector, kString };
inline constexpr uint32_t kStringCopyMinLen = 256;
inline constexpr uint32_t kStringCopyAliasWindow = 64;
CopyMethod DefaultCopyMethod();            // kVector or kString, never kAuto
const char* CopyMethodName(CopyMethod m);  // "auto", "vector", "string"

// The default placer's copy (DefaultCopyMethod()), exported for custom
// placers and for benchmarks that measure it against memcpy
// (bench/engine_bench.cc); PlacementCopyWith uses the given method (kString
// falls back to kVector on a CPU that is not x86-64).
void PlacementCopy(uint8_t* dst, const uint8_t* src, uint32_t len);
void PlacementCopyWith(CopyMethod m, uint8_t* dst, const uint8_t* src,
                       uint32_t len);
// Which copy PlacementCopyWith(m, dst, src, len) runs: kString (the string
// move) or kVector (the block loop), by the rules above. On a CPU that is
// not x86-64 kString's copy is the block loop, and in ASan/TSan builds it
// is memcpy.
CopyMethod PlacementCopyChoice(CopyMethod m, const uint8_t* dst,
                               const uint8_t* src, uint32_t len);

struct EngineOptions {
  uint64_t seed = 1;
  // Payload bytes per DATA packet. A DATA packet is wire::kDataHeaderSize
  // (64) + mtu_payload bytes on the datapath.
  uint32_t mtu_payload = 4096;
  // Largest header + payload the datapath carries in one packet
  // (Datapath::mtu()); 0 = not known, not checked. When set,
  // CreateConnection refuses (InvalidArgument, counted in
  // EngineStats::config_errors) while 64 + mtu_payload exceeds it: a
  // datapath drops and counts a packet above its MTU without telling the
  // engine (the burst API has no per-packet error), so an oversized
  // mtu_payload would otherwise retransmit with RTO back-off until
  // connection_timeout. prism::Endpoint sets it from its datapath.
  size_t max_packet_bytes = 0;
  // Upper bound on connections.
  uint32_t max_connections = 1024;
  // Largest cq_capacity (56-byte completions: 896 MiB at most).
  static constexpr uint32_t kMaxCqCapacity = 1u << 24;
  // Completion queue capacity: the most completions the engine holds for
  // PollCompletions, counting a slot reserved for every outstanding WRITE
  // (see "Completion queue" in the contract above). In [1, kMaxCqCapacity];
  // CreateConnection refuses (InvalidArgument, counted in
  // EngineStats::config_errors) otherwise. The queue's memory (56 bytes an
  // entry) grows on demand, by doubling, to the power of two at or above
  // the most entries it held: at most this many plus the kConnectionError
  // completions (one per failed connection).
  uint32_t cq_capacity = 65536;
  // Placement strategy; nullptr = the default placer (a copy by
  // `copy_method`). Not owned; must outlive the engine.
  Placer* placer = nullptr;
  // The default placer's copy (see CopyMethod above); kAuto = the CPU's.
  // Speed only: what lands in memory is the same either way.
  CopyMethod copy_method = CopyMethod::kAuto;
};

struct ConnectionOptions {
  // Opaque destination id copied into every TxPacket (see prism/packet.h).
  uint32_t peer = 0;
  uint16_t num_paths = 256;              // size of the path set (1 .. 65535)
  uint16_t num_planes = 1;               // path p is on plane p % num_planes
  std::string path_policy = "rotation";  // routing::PathSelectorConfig::policy
  std::string congestion = "nscc";  // congestion::ControllerConfig::algorithm
  uint64_t link_rate_bps = 100'000'000'000ull;  // local NIC rate (all planes)
  Time base_rtt = 10 * kMicrosecond;            // expected unloaded RTT
  // Whether a packet lost without a trim is a congestion signal for the
  // controller (congestion::ControllerConfig::loss_is_congestion). False for
  // fabrics that trim (MRC/UET): a plain loss is failure or corruption,
  // repaired by retransmission. Set true on drop-tail fabrics, where a
  // buffer overflow drop is the congestion signal.
  bool loss_is_congestion = false;
  // Minimum / maximum retransmission timeout; the RTO is derived from
  // measured RTT (at least rto_min), doubling on consecutive timeouts
  // without progress, never above max(rto_max, the measured RTO). rto_max
  // bounds recovery once a failed fabric heals: a stalled connection
  // retransmits (on another path each time) at least every rto_max (or
  // every measured RTO, where that is longer), so it resumes at most
  // rto_max + an RTT after the paths come back, and it keeps trying until
  // connection_timeout (about 7500 retries in 30 s of silence, one
  // packet each once the window is cut). 4 ms: a few ms, as datacenter
  // transports use (UCCL: a constant 500 us), against 100 ms before
  // (2026-12-03: a flow could sit on a 6.4 ms timer in an 8 ms run).
  // rto_max caps the backoff, not the measured RTO: a path whose srtt +
  // 4 rttvar is above rto_max keeps that RTO (and does not back off), so a
  // slow path is never timed out spuriously every rto_max.
  // rto_min <= rto_max is required (CreateConnection); raise rto_max with
  // rto_min on slow hosts (the runtime tools use max(rto_max, 8 rto_min)).
  Time rto_min = 50 * kMicrosecond;
  Time rto_max = 4 * kMillisecond;
  // Tail-loss probe: when nothing new has been acked for a PTO =
  // max(2 srtt + base_rtt / 4, base_rtt) (2 base_rtt before an RTT sample)
  // while data is in flight, every transmission older than the PTO is
  // retransmitted on another path (at most twice per stall, then the RTO
  // takes over). A failure then costs about two RTTs instead of rto_min.
  bool tail_loss_probe = true;
  // Tail resend: once every posted WRITE is fully sent (nothing new to
  // send), the oldest transmission in flight is resent on another path
  // when a transmission sent after it (on any plane) was acked and it is
  // older than the typical paths' loss timeout: srtt + max(4 rttvar,
  // srtt / 4) + the SACK delay (at least max(base_rtt, rto_min / 4)) over
  // RTT samples capped at kTypicalRttCap x their own smoothed value, so a
  // few slow routes (a degraded link, a deep queue) do not lift it as they
  // lift the connection's srtt, which the RTO, the tail-loss probe and the
  // path timeout use. Not a loss: no path is retired, the controller is
  // not told, the window is not cut; the copy that arrives first is taken
  // (ConnectionStats::tail_resends). Each transmission is resent so at
  // most once per such age, and only while later ones are acked (a
  // silent fabric resends nothing). docs/congestion.md ("Tail resend").
  bool tail_resend = true;
  // Spurious-loss undo: a transmission declared lost on its path (path
  // timeout, per-path inference, PTO, RTO) whose copy is acked after all
  // (the SACK's echo names it, or a duplicate re-acknowledged names an
  // earlier copy) was late, not lost: counted
  // (ConnectionStats::spurious_losses) and, with this set, the path that
  // declaration retired goes back into service at once, as a probe's
  // answer would put it, instead of waiting for its probe
  // (probe_interval). The controller is not told (a window cut a drop-tail
  // fabric's loss_is_congestion made is not undone).
  // docs/congestion.md ("Spurious-loss undo").
  bool spurious_undo = true;
  // Delayed SACK: an in-order packet is acknowledged at the latest this
  // long after it arrived (or with the 16th unacknowledged packet). 0:
  // base_rtt / 4. Longer means fewer SACKs per byte where packets arrive
  // further apart than base_rtt / 4 (soft-RoCE under TCG: one SACK per
  // 64 KiB chunk at 500 us), and RTT samples and loss reports up to this
  // much later.
  Time ack_delay = 0;
  // ASSUMED_BAD paths are probed this often.
  Time probe_interval = 50 * kMicrosecond;
  // The connection fails only when no packet from the peer has been received
  // for this long while data is outstanding (about an RC QP's retry budget):
  // the oldest outstanding WRITE then completes with kDeadlineExceeded, the
  // others with kAborted, and a kConnectionError with kDeadlineExceeded
  // follows.
  Time connection_timeout = 30 * kSecond;
  // How long the connection may go on being refused for want of room in
  // the receiver's completion queue (NACK NO_BUFFER: its application does
  // not poll; see "Completion queue" above) before it fails: measured from
  // the first NO_BUFFER of a streak that no ack of data sent since has
  // ended (the RNR probes go on meanwhile). Then the oldest outstanding
  // WRITE completes with kResourceExhausted, the others with kAborted, and
  // a kConnectionError completion with kResourceExhausted follows, meaning
  // "the receiver did not poll its completion queue for rnr_timeout"
  // (ConnectionStats::rnr_timeouts).
  // connection_timeout cannot catch this: the peer answers. 0 (default):
  // never, as InfiniBand's rnr_retry = 7 (what NCCL uses): a training job
  // must not die because one consumer stalled for a while (a checkpoint, a
  // debugger, a slow host); the sender only costs one packet per pause
  // (at most min(16 rto_min, rto_max)) while it waits. Set it where a
  // consumer that stops polling should be treated as failed. >= 0
  // (CreateConnection: InvalidArgument otherwise).
  Time rnr_timeout = 0;
  // Carry a CRC32C of the payload in every DATA packet (detects corruption on
  // datapaths without their own integrity check).
  bool payload_checksum = false;
  // Max unacknowledged WRITE messages per connection; PostWrite returns
  // ResourceExhausted beyond this.
  uint32_t max_outstanding_messages = 4096;
  // Window in packets: sizes the sender's slot ring (and its retransmit ring,
  // 2x), the receive window and its bitmap/message rings. A power of two in
  // [256, 65536]; CreateConnection returns InvalidArgument otherwise. The
  // sender never has more than min(this, the peer's value when it is given
  // in ConnectionInfo) packets beyond the cumulative ack, so with a datapath
  // that does not carry ConnectionInfo::max_inflight_packets use the same
  // value on both ends. Memory per connection: see docs/wire-format.md
  // ("Engine memory"); the sender's rings are allocated by the first
  // PostWrite, the receiver's message ring and the control ring grow on
  // demand, so an idle or receive-only connection costs a few KiB. The window
  // caps one connection at window * mtu / RTT (4096 x 4 KiB over 10 us = 13
  // Tb/s; 256 -> 0.8 Tb/s).
  uint32_t max_inflight_packets = 4096;
  // Fate sharing hint (optional; empty = none): path_groups[p] is the
  // failure group of path p, an opaque id from the routing layer
  // (routing::PathSet::FailureGroups(); the simulator derives its own
  // carriers' groups with the same rule, routing::FailureGroupOf; a UDP
  // Endpoint with uSID/SRH routes one group per plane and route,
  // EndpointOptions::route_failure_groups). Ids are
  // engine-wide: the same id on two connections of one engine names the
  // same fabric element (a plane's uplink from the local T0 to one T1 and
  // that T1), whose failure takes every path with that id.
  // kNoFailureGroup (prism/types.h), and paths beyond the vector, share
  // fate with no other path. When a path is retired (lost by path timeout,
  // tail-loss probe, RTO or per-path inference: routing ASSUMED_BAD), every
  // other connection of the engine resends at once, on other paths, its
  // transmissions in flight on that group that are older than its srtt
  // (on a live path they would have been acked), instead of waiting for
  // each one's own timeout (ConnectionStats::group_resends); the paths stay
  // in service (their own losses retire them). Both ends should use the
  // same mapping (path ids are symmetric: routing::PairSpread).
  std::vector<uint16_t> path_groups;
  // Group balance (with path_groups naming at least two groups; not with
  // path_policy "reps", whose clean-EV cache steers on its own): a failure
  // group that holds kGroupBalanceSlack or more transmissions in flight
  // above its share (the connection's in flight / the groups with any in
  // flight) gets no new transmission while another pick is within its
  // share: its path is passed over (ConnectionStats::group_balance_passes)
  // and the selector asked again, at most kGroupBalanceTries times; if every
  // pick is over, the first is used (never a stall). A route that drains
  // slowly (a degraded link, a deep queue, a dead hop before its paths are
  // retired) then holds about its share of the flight instead of its
  // share of every new packet. Probes ignore it. docs/congestion.md
  // ("Group balance").
  bool group_balance = true;
};

// Group balance (ConnectionOptions::group_balance): packets in flight a
// failure group may hold above its share before it is passed over, and the
// selector calls made for one transmission before the first pick is taken
// anyway.
inline constexpr uint32_t kGroupBalanceSlack = 3;
inline constexpr int kGroupBalanceTries = 8;

// Tail resend (ConnectionOptions::tail_resend): an RTT sample counts for
// the typical RTT as at most this many times the typical smoothed RTT.
inline constexpr int kTypicalRttCap = 2;

// What a peer needs to know to talk to a connection; exchanged out of band
// (or with the wire CONNECT exchange) and passed to Connect().
struct ConnectionInfo {
  ConnId conn_id = kInvalidConn;
  uint16_t num_paths = 0;
  uint16_t num_planes = 0;
  uint32_t mtu_payload = 0;
  bool payload_checksum = false;
  // First PSN this side sends (random per connection, from the engine seed).
  // The receiver starts its window here. Filled in by LocalInfo().
  uint32_t initial_psn = 0;
  // The peer's ConnectionOptions::max_inflight_packets (0: unknown, assume
  // ours). Filled in by LocalInfo(); the sender sends at most min(ours,
  // this) packets beyond the cumulative ack.
  uint32_t max_inflight_packets = 0;
};

struct WriteRequest {
  uint64_t wr_id = 0;  // returned in the completion
  const void* local_addr = nullptr;
  uint64_t length = 0;       // 0 .. 2^32-1 bytes
  uint32_t lkey = 0;         // local region holding [local_addr, +length)
  uint64_t remote_addr = 0;  // final address in the peer's region
  uint32_t rkey = 0;
  bool has_immediate = false;  // WRITE-with-immediate
  uint32_t immediate = 0;
};

enum class CompletionType : uint8_t {
  kWrite,            // sender: a posted WRITE was fully acknowledged
  kRecvImmediate,    // receiver: a WRITE-with-immediate fully arrived
  kConnectionError,  // the connection failed (status says why)
};

// One completion: a plain 56-byte struct, copied by value everywhere (the
// engine's ring, prism::Endpoint's queue, the NCCL plugin's inboxes).
// kConnectionError names the WRITE that met the failure (the culprit, the
// one whose kWrite completion carries the cause; see "Connection failure"
// above): wr_id, byte_len, remote_addr and msn are that WRITE's, as in its
// own kWrite completion, which precedes it. Should that WRITE no longer be
// outstanding when the failure takes effect (a BAD_KEY NACK for a
// retransmission of a WRITE already acknowledged), msn still names it and
// wr_id, byte_len and remote_addr are 0 (no kWrite carries the cause then).
struct Completion {
  CompletionType type = CompletionType::kWrite;
  absl::StatusCode status = absl::StatusCode::kOk;
  ConnId conn = kInvalidConn;
  // kWrite: the request's wr_id; kConnectionError: the culprit's.
  uint64_t wr_id = 0;
  uint32_t immediate = 0;  // kRecvImmediate
  uint64_t byte_len = 0;   // message length (kConnectionError: the culprit's)
  // kRecvImmediate: where the message landed; kWrite: the WRITE's target
  // (kConnectionError: the culprit's).
  uint64_t remote_addr = 0;
  // Message sequence number within the connection (of the WRITE or the
  // received message; kConnectionError: the culprit's).
  uint32_t msn = 0;
};
static_assert(sizeof(Completion) == 56,
              "Completion's size is part of the documented memory bounds");

class Engine {
 public:
  explicit Engine(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // --- memory -------------------------------------------------------------
  absl::StatusOr<MemoryRegion> RegisterMemory(void* addr, uint64_t length,
                                              uint32_t access);
  // Fails with NotFound for an unknown key. In-flight writes into a region
  // being deregistered are rejected from then on (BAD_KEY).
  // FailedPrecondition while the region is the source of outstanding local
  // WRITEs (their payload is read from it until they complete).
  absl::Status DeregisterMemory(uint32_t lkey);

  // --- connections --------------------------------------------------------
  // InvalidArgument (with the reason; counted in EngineStats::config_errors)
  // for a bad option, among them an EngineOptions::mtu_payload whose DATA
  // packets exceed EngineOptions::max_packet_bytes.
  absl::StatusOr<ConnId> CreateConnection(const ConnectionOptions& options);
  ConnectionInfo LocalInfo(ConnId conn) const;
  // Binds a local connection to the peer's. Paths and planes are the minimum
  // of both sides'. InvalidArgument (counted in EngineStats::config_errors)
  // for a bad `remote`. REQUIRES: called once per connection.
  absl::Status Connect(ConnId conn, const ConnectionInfo& remote);
  // Closes the connection; outstanding WRITEs complete with kCancelled.
  absl::Status CloseConnection(ConnId conn);

  // --- operations ---------------------------------------------------------
  // Queues a WRITE (or WRITE-with-immediate). Validates the local range and
  // key; never blocks. ResourceExhausted when the queue is full
  // (max_outstanding_messages) or when the completion queue has no slot to
  // reserve for its completion (EngineOptions::cq_capacity: poll
  // completions, then post again; CompletionQueueFull() tells the two
  // apart). NotFound for an unknown (or closed) connection,
  // FailedPrecondition before Connect, Aborted once the connection has
  // failed (the code its flushed WRITEs got).
  absl::Status PostWrite(Time now, ConnId conn, const WriteRequest& req);

  // --- packet I/O ---------------------------------------------------------
  // Hands received packets to the engine. Malformed, unknown-connection,
  // bad-key and out-of-range packets are dropped and counted, never written.
  void OnReceive(Time now, const RxPacket* pkts, size_t n);
  // Receive in place (for datapaths that can read a payload straight to its
  // final address, e.g. UDP after peeking the header). `hdr` is the header
  // of a received packet (hdr_len = wire::kDataHeaderSize for DATA) and
  // `payload_len` the bytes after it on the wire. Returns where OnReceive
  // would place that payload when it would place it, else nullptr: not
  // DATA, malformed, trimmed, unknown connection, bad key or range, beyond
  // the window, a duplicate, payload checksums in use, or a Placer other
  // than the default (the bytes must be checked or moved by it). The caller
  // may then read exactly payload_len payload bytes to that address and
  // must hand the packet to the next OnReceive as a split RxPacket whose
  // `payload` is that address and whose header bytes are `hdr`'s (OnReceive
  // then neither copies the payload again nor decodes or checksums the
  // header a second time). The acceptance rules are those of OnReceive (one
  // function). Every DATA header resolved since the last OnReceive is
  // remembered (up to 256; nullptr after that until the next OnReceive),
  // so within one batch a second copy of a PSN, a packet of a message whose
  // fields disagree with another of the batch, or more bytes than the
  // message holds, gets nullptr. The caller must pass every received
  // datagram of at least hdr_len bytes, header-only DATA (payload_len 0,
  // always nullptr) included, and make no other engine call before that
  // OnReceive; a BAD_KEY / BAD_RANGE NACK earlier in the batch that fails
  // the connection takes effect after the batch's packets read in place.
  // So nothing read in place is dropped: no stray write, no lost byte.
  // Reads no clock; the result depends only on engine state and the batch.
  uint8_t* RxDestination(const uint8_t* hdr, size_t hdr_len,
                         size_t payload_len);
  // Runs timers due at `now` and fills up to `max` packets to transmit.
  // Batch semantics: one call fills as many packets as are ready (up to
  // `max`); a return value < max means nothing more is sendable at `now`, so
  // callers need not poll again before new input or NextEventTime(). Cost:
  // connections untouched since the last call whose timers are not due and
  // that have nothing queued are skipped after a compare of cached values.
  size_t PollTransmit(Time now, TxPacket* out, size_t max);
  // Earliest time something new can happen without new input (a timer, a
  // paced send, a probe); kTimeInfinite when idle. When packets are ready to
  // send now it returns the latest `now` the engine has seen: call
  // PollTransmit again.
  // Cost: O(1) when nothing happened since the previous call (the result is
  // cached); otherwise each connection touched since then (by OnReceive,
  // PostWrite, PollTransmit, SetPlaneUp, Connect) is re-evaluated once and
  // the cached per-connection values are combined (a compare per
  // connection, no virtual calls). The value is the same as a full
  // evaluation.
  Time NextEventTime() const;

  // --- completions and stats ----------------------------------------------
  // Takes up to `max` completions, oldest first. The room it frees first
  // resumes the in-order delivery of connections held by a full completion
  // queue (oldest hold first); what they deliver is returned by the same
  // call while `max` allows. A return value < max means the queue is empty.
  size_t PollCompletions(Completion* out, size_t max);
  // Whether PostWrite would now refuse any WRITE for want of a completion
  // slot (queued + outstanding WRITEs >= cq_capacity; counted in
  // EngineStats::writes_refused_cq_full when it does). Only
  // PollCompletions makes it false again. A ResourceExhausted PostWrite
  // while this is false was the connection's max_outstanding_messages.
  // O(1), no copy: the signal prism::Endpoint's loop parks WRITEs by.
  bool CompletionQueueFull() const;
  // Completions queued and not yet taken by PollCompletions (kConnectionError
  // included). O(1). The queue is FIFO, so the next this many that
  // PollCompletions returns are the ones queued now.
  size_t CompletionsQueued() const;
  EngineStats stats() const;
  // Per-connection and per-path counters; NotFound for an unknown id.
  absl::StatusOr<ConnectionStats> connection_stats(ConnId conn) const;
  absl::StatusOr<PathStats> path_stats(ConnId conn, PathId path) const;

  // Local NIC port for `plane` went down / came back (tells the peer too).
  absl::Status SetPlaneUp(ConnId conn, uint16_t plane, bool up, Time now);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism

#endif  // PRISM_ENGINE_H_
