// prism::Endpoint — the public API: one Prism endpoint (an engine driven by
// its own event-loop thread over a datapath), with thread-safe submission
// and completion interfaces.
//
//   auto ep = prism::Endpoint::Create(opts);          // starts the thread
//   auto conn = (*ep)->CreateConnection();             // local half
//   prism::ConnectionBlob mine = *(*ep)->LocalInfo(*conn);
//   ... send `mine.bytes[0..size)` to the peer, receive its blob ...
//   (*ep)->Connect(*conn, theirs);
//   auto mr = (*ep)->RegisterMemory(buf, len, prism::kAccessLocal);
//   (*ep)->PostWrite(*conn, {.wr_id = 1, .local_addr = buf, .length = len,
//                            .lkey = mr->lkey, .remote_addr = raddr,
//                            .rkey = rkey});
//   prism::Completion c; while ((*ep)->PollCompletions(&c, 1) == 0) {}
//
// Contract:
// - Every method is thread-safe and may be called from any thread. Control
//   calls (CreateConnection, Connect, RegisterMemory, stats ...) run on the
//   loop thread and block the caller until done (microseconds).
// - PostWrite never blocks: it validates its arguments and queues the WRITE
//   (or refuses: full submission or completion queue, below);
//   the loop hands it to the engine at its next iteration. A WRITE the
//   engine rejects later (bad key, unknown connection: kNotFound) completes
//   with that error status; a full engine send queue is not an error (the
//   loop keeps the WRITE and retries, in order). A rejection on a live
//   connection (bad lkey, local range) completes in posting order, as a
//   verbs WR with a bad local key does: after the completions of the
//   connection's earlier WRITEs (the loop holds it, and the connection's
//   later WRITEs behind it, until those have completed), so a completion
//   still implies that every earlier WRITE of its connection completed.
//   Unlike verbs it fails only that WRITE, not the connection. (Before
//   2026-12-06 its completion was queued at once, possibly ahead of the
//   earlier WRITEs'.)
// - Connection failure and close (prism/engine.h "Connection failure"):
//   the WRITEs the endpoint still holds for the connection (queued, or
//   parked by backpressure or max_outstanding_messages: not yet handed to
//   the engine) complete exactly as the engine's outstanding ones do, after
//   them, in posting order, each exactly once: kAborted (flushed) when the
//   connection failed -- after its kConnectionError, which names the WRITE
//   that met the failure (Completion::wr_id, msn) -- and kCancelled when
//   CloseConnection closed it (kAborted if it had failed first; no
//   kConnectionError). A WRITE posted to a failed connection later
//   completes with kAborted too; one posted after CloseConnection returned,
//   with kNotFound (an unknown connection). Before 2026-12-06 the held
//   ones completed with kFailedPrecondition / kNotFound.
// - PollCompletions returns completions of every connection, in the order
//   the engine produced them. Completion::conn says whose.
// - The completion queue is bounded, end to end (EndpointOptions::
//   cq_capacity = C; the engine's queue has the same capacity). Nothing is
//   ever dropped; work waits instead. The endpoint's queue holds at most C
//   completions; the loop moves completions out of the engine only while it
//   has room. An application that stops polling therefore fills first this
//   queue, then the engine's, whose backpressure then engages
//   (prism/engine.h "Completion queue"): a fully arrived
//   WRITE-with-immediate is held undelivered (still acknowledged), later
//   data beyond the receive ring is NACKed NO_BUFFER and the peer's sender
//   pauses and resends. Memory stays bounded (about 2 C completions). When
//   the application polls again the loop is woken at once and moves the
//   rest; held deliveries resume in order, each exactly once.
//   kConnectionError completions (one per connection at most) are queued
//   by the engine beyond its capacity and reach the endpoint's queue in
//   order behind what was produced before them, as the application polls:
//   a connection that fails while the queue is full is reported, late but
//   never lost. PostWrite refuses with ResourceExhausted ("completion queue
//   full ... poll completions", counted in DatapathStats::
//   writes_refused_cq_full) while the endpoint's unpolled completions plus
//   its WRITEs accepted and not yet completed reach C, so every accepted
//   WRITE's completion is accounted for; poll, then post again.
// - The memory passed to PostWrite and to RegisterMemory must stay valid
//   until the WRITE completes / the region is deregistered.
// - Destroying the endpoint stops the loop thread and joins it; outstanding
//   WRITEs are abandoned (no completions).
// - ConnectionBlob: variable length (at most 255 bytes; its third byte is
//   its length), self-describing and versioned, position independent (plain
//   bytes): it carries the local connection id, initial PSN, path/plane
//   counts, payload MTU and the datapath addresses of every plane (udp,
//   36 bytes for one plane) or the verbs queue pairs (90 bytes for 8 QPs).
//   Layout: transport/runtime/conn_blob.h, docs/runtime.md. Connect()
//   rejects anything malformed with InvalidArgument.
#ifndef PRISM_ENDPOINT_H_
#define PRISM_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prism/engine.h"
#include "prism/packet.h"
#include "prism/stats.h"
#include "prism/types.h"

namespace prism {

// Serialised connection info, exchanged out of band.
struct ConnectionBlob {
  static constexpr size_t kMaxBytes = 255;
  uint8_t bytes[kMaxBytes] = {};
  uint8_t size = 0;

  absl::string_view view() const {
    return absl::string_view(reinterpret_cast<const char*>(bytes), size);
  }
  // InvalidArgument when longer than kMaxBytes (content checked by Connect).
  static absl::StatusOr<ConnectionBlob> FromBytes(absl::string_view b);
  std::string ToHex() const;
  static absl::StatusOr<ConnectionBlob> FromHex(absl::string_view hex);
};

struct EndpointOptions {
  // "udp" (UDP/IPv6 sockets), "loopback" (in-process; every loopback
  // endpoint of a process shares one virtual network) or "verbs"
  // (libibverbs, RDMA WRITE-with-immediate; only in builds with
  // libibverbs, else Create() says Unimplemented).
  std::string datapath = "udp";

  // --- verbs -------------------------------------------------------------
  // RDMA device ("rxe_lo", "mlx5_0"); empty: the first with an active port.
  std::string device;
  uint8_t device_port = 0;  // 0: the first active port
  int gid_index = -1;       // -1: RoCE v2 preferred (verbs::PickGid)
  // Data queue pairs per connection; engine path p uses QP p % verbs_qps.
  uint16_t verbs_qps = 8;
  // "auto" (UC, RC where UC is missing), "uc" or "rc".
  std::string verbs_mode = "auto";

  // --- udp ---------------------------------------------------------------
  // One local IPv6 address per NIC plane.
  std::vector<std::string> local_addrs = {"::1"};
  // UDP port bound on every plane address; 0 = ephemeral (per plane).
  uint16_t port = 0;
  // Optional interface per plane (SO_BINDTODEVICE), parallel to local_addrs.
  std::vector<std::string> ifnames;
  // "auto" (raw IPv6 when a route needs it — uSID or SRH — and CAP_NET_RAW
  // is held, else sockets), "raw" (also gives every path its own UDP source
  // port and flow label), "sockets".
  std::string tx_mode = "auto";
  // sockets mode: UDP source ports per plane (the entropy set).
  uint16_t sockets_per_plane = 8;
  // IP MTU of the links (IPv6 header included); 0 = the MTU of the
  // interfaces holding local_addrs (the smallest; 1500 if none is found).
  uint32_t link_mtu = 1500;
  // Optional route per path, applied to every connection: path p uses
  // routes[p % routes.size()]: "entropy", "usid:<carrier>" or
  // "srh:<seg>,<seg>,..." (the peer's plane address is the final segment).
  std::vector<std::string> routes;
  // With source routes (uSID or SRH): give each connection the failure
  // groups they imply (ConnectionOptions::path_groups, unless `connection`
  // or CreateConnection's options set their own): paths on one plane with
  // the same route share a group, so the engine's fate sharing and group
  // balance act on them (transport/runtime/route_groups.h). false: no
  // hint.
  bool route_failure_groups = true;
  // sockets mode: UDP GSO for runs of equal-size data packets (falls back
  // to plain sends by itself where the kernel refuses it).
  bool gso = false;
  // Receive coalesced UDP super-packets (UDP_GRO) and split them into
  // packets without copying (plain receives where the kernel refuses it).
  bool gro = true;
  // Receive in place: peek each datagram's Prism header, let the engine
  // validate it (key, range, window, duplicate) and read the payload
  // straight to its final address (no copy out of a receive buffer). Two
  // receive syscalls per packet and no GRO; see docs/runtime.md for when
  // it pays.
  bool rx_in_place = false;
  // Accept UDP packets with a zero checksum (needed by sockets-mode uSID).
  bool accept_zero_checksum = false;

  // --- engine ------------------------------------------------------------
  uint64_t seed = 1;
  // Payload bytes per DATA packet; 0 = the largest the datapath MTU allows.
  uint32_t mtu_payload = 0;
  uint32_t max_connections = 1024;
  // Defaults for CreateConnection() (ConnectionOptions::peer is ignored:
  // the endpoint assigns it).
  ConnectionOptions connection;

  // --- loop --------------------------------------------------------------
  // Spin instead of sleeping when idle (lowest latency, burns a core).
  bool busy_poll = false;
  // Pin the loop thread to this CPU (-1: no pinning).
  int cpu = -1;
  // Microseconds the loop keeps polling after its last useful iteration
  // before it sleeps; -1: the datapath's default (udp 0: on shared cores
  // polling steals the peer's CPU; loopback and verbs 50).
  int32_t idle_spin_us = -1;
  // Max WRITEs queued by PostWrite and not yet taken by the loop.
  size_t submit_queue_size = 1 << 16;
  // Completion queue capacity, of the endpoint's queue and of its engine's
  // (EngineOptions::cq_capacity): see "The completion queue is bounded" in
  // the contract above. In [1, kMaxCqCapacity]; Create() refuses anything
  // else with InvalidArgument. Memory grows on demand (56 bytes an entry,
  // by doubling) to the power of two at or above the most entries held.
  static constexpr uint32_t kMaxCqCapacity = EngineOptions::kMaxCqCapacity;
  uint32_t cq_capacity = 65536;
};

// Datapath-level counters (packets and bytes moved, back-pressure, drops).
struct DatapathStats {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t rx_ecn_ce = 0;
  uint64_t tx_backpressure = 0;
  uint64_t tx_errors = 0;
  uint64_t drops = 0;  // every other datapath drop, summed
  uint64_t loop_iterations = 0;
  uint64_t loop_sleeps = 0;
  // Event-loop iterations that started more than 2 ms after the previous
  // one (the loop thread not running: descheduled), their summed length
  // and the longest gap between two iterations.
  uint64_t loop_stalls = 0;
  Time loop_stall_time = 0;
  Time loop_max_gap = 0;
  // Hand-offs between application threads and the loop thread: eventfd
  // writes that woke the sleeping loop (PostWrite and control calls), and
  // notifications of threads blocked in WaitCompletions.
  uint64_t loop_wakeups = 0;
  uint64_t app_wakeups = 0;
  // The endpoint's completion queue (EndpointOptions::cq_capacity): PostWrite
  // calls refused because it was full (unpolled completions + outstanding
  // WRITEs); times the loop found it full and left completions in the
  // engine; completions queued now, and the most queued at once (never
  // above cq_capacity). The engine's own: EngineStats.
  uint64_t writes_refused_cq_full = 0;
  uint64_t cq_full_stalls = 0;
  uint64_t cq_depth = 0;
  uint64_t cq_peak = 0;
  std::string detail;  // the datapath's own counters, as text
};

class Endpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Endpoint>> Create(
      const EndpointOptions& options);
  virtual ~Endpoint() = default;

  // --- connections --------------------------------------------------------
  virtual absl::StatusOr<ConnId> CreateConnection() = 0;
  virtual absl::StatusOr<ConnId> CreateConnection(
      const ConnectionOptions& options) = 0;
  virtual absl::StatusOr<ConnectionBlob> LocalInfo(ConnId conn) = 0;
  // Binds `conn` to the peer described by `remote`. REQUIRES: once per conn.
  virtual absl::Status Connect(ConnId conn, const ConnectionBlob& remote) = 0;
  virtual absl::Status CloseConnection(ConnId conn) = 0;

  // --- memory -------------------------------------------------------------
  virtual absl::StatusOr<MemoryRegion> RegisterMemory(void* addr,
                                                      uint64_t length,
                                                      uint32_t access) = 0;
  virtual absl::Status DeregisterMemory(uint32_t lkey) = 0;

  // --- data ---------------------------------------------------------------
  // Non-blocking. InvalidArgument for a null address with length > 0 or an
  // invalid conn id; ResourceExhausted when the submission queue is full,
  // or when the completion queue is (unpolled completions + outstanding
  // WRITEs >= cq_capacity: poll completions, then post again).
  virtual absl::Status PostWrite(ConnId conn, const WriteRequest& req) = 0;
  // Non-blocking; returns up to `max` completions. Taking completions from
  // a full queue wakes the loop to move the ones waiting in the engine.
  virtual size_t PollCompletions(Completion* out, size_t max) = 0;
  // Waits up to `timeout` (picoseconds of wall time) for one completion.
  virtual size_t WaitCompletions(Completion* out, size_t max, Time timeout) = 0;

  // --- stats and control --------------------------------------------------
  virtual EngineStats stats() = 0;
  virtual absl::StatusOr<ConnectionStats> connection_stats(ConnId conn) = 0;
  virtual absl::StatusOr<PathStats> path_stats(ConnId conn, PathId path) = 0;
  virtual DatapathStats datapath_stats() = 0;
  // Tells the engine the local port of `plane` went down / came back.
  virtual absl::Status SetPlaneUp(ConnId conn, uint16_t plane, bool up) = 0;
  // Payload bytes per DATA packet this endpoint's engine uses.
  virtual uint32_t mtu_payload() const = 0;
  // The loop's clock (CLOCK_MONOTONIC in picoseconds).
  static Time Now();
};

}  // namespace prism

#endif  // PRISM_ENDPOINT_H_
