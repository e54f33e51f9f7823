// VerbsDatapath: Prism over libibverbs (RoCE NICs, soft-RoCE rdma_rxe).
//
// The NIC places data. Every DATA packet the engine emits (one packet-sized
// chunk of a WRITE) becomes one RDMA WRITE-with-immediate straight into the
// peer's registered region; the peer's NIC writes the bytes at their final
// address and the receive datapath rebuilds the DATA header for the engine
// from the 32-bit immediate plus a per-message descriptor (design and
// layout: docs/verbs.md, docs/wire-format.md "Verbs datapath: the 32-bit
// immediate"). The engine is unchanged: it is created with placer() (a
// Placer that does nothing when the bytes are already in place) and still
// decides spraying, loss recovery and congestion.
//
// Per peer (one engine connection per peer slot):
// - num_qps data queue pairs, one per path slot: engine path p uses QP
//   p % num_qps. UC by default (RoCEv2 gives each QP its own UDP source
//   port: per-path entropy); RC where UC is missing (DataQpMode::kAuto).
//   Data QPs carry DATA as WRITE-with-immediate and PROBE as a SEND, so a
//   probe tests the path it is for.
// - one RC control queue pair: per-message descriptors, region
//   advertisements, every other engine packet (SACK, NACK, PROBE_ACK,
//   CONNECT, PLANE_STATUS) as SENDs, and DATA whose target region the peer
//   has not advertised yet (sent whole, copied by the receiver's engine).
//
// Invariants:
// - TxBurst/RxBurst never allocate and never block. TxBurst accepts a
//   prefix (a full send queue is back-pressure); packets it cannot send
//   (unknown peer, retired path, malformed) are consumed and counted.
// - RxPacket views stay valid until the next RxBurst; receive buffers are
//   reposted in one batch at the start of the next RxBurst.
// - Hot path: work requests chained per queue pair and posted once per
//   burst, completions requested every `signal_every` WRs, SENDs up to the
//   inline limit inlined.
// - A data QP in error (a failed completion, IBV_EVENT_QP_FATAL, or
//   ForceQpError) is reported (stats, qp_alive(), stderr once) and retired:
//   packets for its paths are dropped (counted), so the engine sees loss on
//   those paths and retires them; the connection carries on over the other
//   QPs. Device loss (IBV_EVENT_DEVICE_FATAL) makes health() an error for
//   good, the port going down (IBV_EVENT_PORT_ERR) until it is active
//   again; meanwhile every packet offered is dropped and counted.
// - Message close (VerbsOptions::message_close; docs/verbs.md "Buffer
//   reuse: the message close"): with it, a NIC-placed WRITE of a message
//   can never land after the application was told the message is complete,
//   short of a packet outliving the close in the network. The sender closes
//   message M when the engine reported it acknowledged (kWrite) and, if any
//   packet of M was retransmitted, every work request posted until then
//   has completed locally; from then on it drops any DATA of M still
//   offered (tx_drop_acked), and tells the peer on the control QP (a
//   cumulative CLOSE frame). The receiver holds M's kRecvImmediate
//   completion until M is closed; the sender holds M's kWrite completion
//   until it closed M. The driver passes every engine completion through
//   OfferCompletions() and hands the application what PollCompletions()
//   returns (the Endpoint's loop does).
// - Start-up (docs/verbs.md "Start-up: the HELLO exchange"): each side
//   advertises its regions and then sends a HELLO on the control QP when it
//   connects, and answers the peer's first HELLO once. The control QP is RC,
//   so the first control SEND received from the peer proves that every
//   advertisement it posted when connecting has arrived. Until then DATA
//   for a region the peer has not advertised is held (TxBurst returns a
//   prefix, counted in tx_wait_ready), at most VerbsOptions::ready_wait;
//   after that it goes whole over the control QP as before (tx_fallback).
// - A peer that connects late (docs/verbs.md): until the peer's control QP
//   has acknowledged a SEND of ours, nothing but the start-up frames goes on
//   the control QP (other packets for the peer wait, at most ready_wait, then
//   are dropped and counted), so a control QP whose RC retries run out in
//   that phase can be recycled (RESET..RTS, same PSNs) and the start-up
//   frames replayed, until VerbsOptions::connect_wait after ConnectPeer.
//
// Thread safety: one thread drives the datapath (TxBurst, RxBurst, peers,
// memory). stats() may be called from any thread (relaxed atomics).
#ifndef PRISM_TRANSPORT_BACKENDS_VERBS_VERBS_DATAPATH_H_
#define PRISM_TRANSPORT_BACKENDS_VERBS_VERBS_DATAPATH_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prism/engine.h"
#include "prism/packet.h"
#include "transport/datapath.h"

namespace prism::verbs {

// --- device discovery -------------------------------------------------------

enum class GidType : uint8_t { kIb = 0, kRoceV1 = 1, kRoceV2 = 2 };

struct GidInfo {
  int index = 0;
  std::array<uint8_t, 16> gid{};
  GidType type = GidType::kIb;
  bool ipv4_mapped = false;  // ::ffff:a.b.c.d
};

struct PortInfo {
  uint8_t port = 0;
  bool active = false;
  uint32_t active_mtu = 0;  // bytes
  bool ethernet = false;    // RoCE (link layer Ethernet)
  std::vector<GidInfo> gids;
};

struct DeviceInfo {
  std::string name;
  std::vector<PortInfo> ports;
};

// Every RDMA device with its ports and non-zero GIDs. An empty list when the
// host has none (no error); Unavailable when libibverbs cannot be used.
absl::StatusOr<std::vector<DeviceInfo>> ListDevices();

// Preferred GID of a port: RoCE v2 IPv4-mapped, then any RoCE v2, then the
// first one. NotFound when the port has none.
absl::StatusOr<GidInfo> PickGid(const PortInfo& port);

// True when at least one active RDMA port exists; `why` says why not.
bool RdmaAvailable(std::string* why);

// --- options and connection info --------------------------------------------

enum class DataQpMode : uint8_t { kAuto = 0, kUc = 1, kRc = 2 };
const char* DataQpModeName(DataQpMode m);

struct VerbsOptions {
  std::string device;    // empty: the first device with an active port
  uint8_t port = 0;      // 0: the first active port
  int gid_index = -1;    // -1: PickGid()
  uint16_t num_qps = 8;  // data QPs per peer (path slots)
  DataQpMode mode = DataQpMode::kAuto;
  // The engine's EngineOptions::mtu_payload: bytes per DATA packet, i.e.
  // per WRITE-with-immediate (the NIC segments it to the path MTU). This is
  // the datapath's chunk size: the unit the engine sprays, acknowledges and
  // retransmits. A WRITE costs a work request, a receive completion and a
  // rebuilt header whatever its size, so the default is 64 KiB (16 RoCE
  // packets at a 4096 MTU: one WRITE per 64 KiB message, as ib_write_bw
  // posts); 4096 sprays every wire packet on its own, as MRC does, at 16x
  // the per-WRITE cost. At most wire::kMaxPayloadLen (1 MiB; payloads of 64
  // KiB and more use the DATA header's payload_len_hi).
  uint32_t mtu_payload = 65536;
  uint32_t sq_depth = 512;        // per data QP
  uint32_t data_rq_depth = 4096;  // shared receive queue of all data QPs
  // Control QP send ring / receive queue; capped so that each pool of
  // control buffers (header + mtu_payload bytes each) stays within 4 MiB.
  uint32_t ctrl_depth = 512;
  uint32_t signal_every = 16;  // one signalled WR per this many
  uint32_t max_inline = 128;   // requested inline size
  uint8_t traffic_class = 0;   // GRH traffic class (DSCP << 2 | ECN)
  // Descriptor ring per peer; must cover the messages one connection can
  // have in flight (ConnectionOptions::max_outstanding_messages).
  uint32_t desc_ring = 8192;
  // Tests only: handle received descriptor frames this many RxBurst calls
  // late, so WRITEs overtake their descriptors (as they may on a real
  // fabric, where the control QP and the data QPs are not ordered).
  uint32_t debug_defer_descriptors = 0;
  // Tests only: act as a device that cannot create UC queue pairs (kAuto
  // then falls back to RC; kUc fails with Unavailable).
  bool debug_refuse_uc = false;
  // The message close (see the file comment). Both ends announce it in
  // PeerInfo; a receiver holds completions only for a peer that sends
  // closes. REQUIRES when set: the driver routes the engine's completions
  // through OfferCompletions()/PollCompletions() and calls
  // BindConnection(). The Endpoint sets it; direct engine drivers opt in.
  bool message_close = false;
  // Tests only: data QP index whose work requests are parked instead of
  // posted (they count as posted, not as complete) until ReleaseParked():
  // a path whose packets are delayed in the NIC, so the engine resends them
  // elsewhere and the originals land late. -1: off.
  int debug_park_qp = -1;
  // Start-up: how long DATA for a region the peer has not advertised waits
  // for the peer's first control SEND (its HELLO, which follows its region
  // advertisements on the RC control QP) before it is sent whole over the
  // control QP instead (tx_fallback). Only for a peer that announces HELLO
  // in its PeerInfo. 0: never wait (the behaviour before HELLO; tests).
  Time ready_wait = 100 * kMillisecond;
  // Tests only: do not answer the peer's HELLO (a peer whose control QP
  // stays silent), so the bounded wait above runs out.
  bool debug_mute_hello = false;
  // A peer that connects late (docs/verbs.md "A peer that connects late"):
  // how long after ConnectPeer the control QP may be recycled when its RC
  // retry budget (7 x 67 ms) runs out before the peer's control QP ever
  // acknowledged anything. After that, the control QP fails for good with a
  // clear message. The Endpoint sets it to the engine's connection_timeout.
  Time connect_wait = 30 * kSecond;
  // RC retry count of the control QP (0..7; 7 retries x 67 ms is about
  // 0.5 s). Note that rdma_rxe treats 7 as "retry forever" (as the spec
  // does only for rnr_retry); tests use less to see retries run out there.
  uint8_t ctrl_retry_cnt = 7;
};

// What one side tells the other (out of band) to connect a peer slot.
struct PeerInfo {
  std::array<uint8_t, 16> gid{};
  uint32_t path_mtu = 0;              // bytes (active MTU of the port)
  DataQpMode mode = DataQpMode::kUc;  // resolved mode (never kAuto)
  uint32_t mtu_payload = 0;
  uint32_t ctrl_qpn = 0;
  uint32_t psn = 0;            // starting PSN of every QP of this side
  bool message_close = false;  // this side sends CLOSE frames
  bool hello = false;          // this side sends HELLO frames (start-up)
  std::vector<uint32_t> data_qpns;
};

// Little-endian byte encoding of PeerInfo (magic, version, counts).
std::string EncodePeerInfo(const PeerInfo& info);
absl::StatusOr<PeerInfo> DecodePeerInfo(const std::string& bytes);

struct VerbsStats {
  uint64_t tx_data = 0;  // WRITE-with-immediate posted
  uint64_t tx_data_bytes = 0;
  uint64_t tx_ctrl = 0;   // SENDs on control QPs
  uint64_t tx_probe = 0;  // PROBE SENDs on data QPs
  uint64_t tx_descriptors = 0;
  uint64_t tx_fallback = 0;        // DATA sent whole over control (no region)
  uint64_t tx_backpressure = 0;    // bursts cut short by a full queue
  uint64_t tx_drop_dead_path = 0;  // for a retired QP
  uint64_t tx_drop_unknown_peer = 0;
  uint64_t tx_drop_device_lost = 0;  // after health() turned bad
  uint64_t tx_drop_malformed = 0;
  uint64_t tx_post_errors = 0;
  uint64_t tx_frames_queued = 0;  // region frames that waited for ring room
  uint64_t tx_closes = 0;         // CLOSE frames sent
  uint64_t tx_drop_acked = 0;     // DATA of an acknowledged message, not sent
  uint64_t close_waits = 0;       // closes that waited for local completions
  // Start-up: bursts cut short because DATA for a region the peer has not
  // advertised waited for the peer's HELLO; HELLO frames sent / received;
  // peers whose HELLO did not come within ready_wait (DATA then fell back).
  uint64_t tx_wait_ready = 0;
  uint64_t tx_hellos = 0;
  uint64_t rx_hellos = 0;
  uint64_t ready_timeouts = 0;
  // A peer that connects late: control QPs recycled after RC's retry budget
  // ran out before the peer's QP acknowledged anything; packets dropped
  // because the peer's control QP had not acknowledged anything yet after
  // ready_wait (the engine resends them).
  uint64_t ctrl_qp_recycles = 0;
  uint64_t tx_drop_not_ready = 0;
  // SACKs not sent because a later SACK of the same burst, to the same
  // connection, carries the same state (see TxBurst): control SENDs saved.
  uint64_t tx_sacks_merged = 0;
  // Data WRs posted signalled (one per signal_every per QP, plus, with the
  // message close, the last WR of every chain): send completions.
  uint64_t tx_data_signalled = 0;
  uint64_t rx_data = 0;  // NIC-placed DATA handed to the engine
  uint64_t rx_data_bytes = 0;
  uint64_t rx_ctrl = 0;  // engine packets from SENDs
  uint64_t rx_descriptors = 0;
  uint64_t rx_pending = 0;  // WRITEs that waited for their descriptor
  uint64_t rx_drop_no_descriptor = 0;  // pending ring overflow
  uint64_t rx_drop_bad_imm = 0;  // length/PSN inconsistent with descriptor
  uint64_t rx_drop_unknown = 0;  // unknown QP / region / malformed control
  uint64_t rx_closes = 0;        // CLOSE frames received
  // NIC-placed WRITEs of a message the peer had already closed: the
  // residual hazard (a packet that outlived the close); counted, then
  // dropped by the engine as a duplicate.
  uint64_t rx_after_close = 0;
  uint64_t completions_held = 0;  // completions delayed by the close
  uint64_t cq_errors = 0;         // failed completions
  uint64_t qp_errors = 0;         // QPs retired
  uint64_t async_events = 0;
  std::string ToString() const;
};

// --- the datapath
// -------------------------------------------------------------

class VerbsDatapath : public Datapath {
 public:
  // Opens the device, allocates PD, CQs and shared receive queues.
  static absl::StatusOr<std::unique_ptr<VerbsDatapath>> Create(
      const VerbsOptions& options);
  ~VerbsDatapath() override;

  size_t mtu() const override;
  size_t TxBurst(Time now, const TxPacket* pkts, size_t n) override;
  size_t RxBurst(Time now, RxPacket* pkts, size_t n) override;

  // Creates a peer slot (its QPs, in INIT) and returns its id (>= 1): the
  // ConnectionOptions::peer of the engine connection it carries.
  absl::StatusOr<uint32_t> AddPeer();
  absl::StatusOr<PeerInfo> LocalInfo(uint32_t peer) const;
  // Brings the slot's QPs to RTS towards `remote` and advertises every
  // registered region to it. FailedPrecondition on a mode / MTU mismatch.
  absl::Status ConnectPeer(uint32_t peer, const PeerInfo& remote);
  absl::Status RemovePeer(uint32_t peer);

  // Registers [addr, addr + mr.length) with the NIC for the engine region
  // `mr` (from Engine::RegisterMemory on the same memory) and advertises it
  // to every connected peer. Remote-write regions get remote write access.
  absl::Status RegisterMemory(const MemoryRegion& mr, void* addr);
  // GPU memory (a dma-buf fd exported by the GPU driver): ibv_reg_dmabuf_mr.
  absl::Status RegisterDmabuf(const MemoryRegion& mr, int fd, uint64_t offset);
  absl::Status DeregisterMemory(uint32_t engine_lkey);

  // The engine's placer for this datapath: a no-op when the NIC already
  // wrote the bytes, memcpy for data that arrived in a buffer.
  Placer* placer();

  // Sleeping without spinning: a descriptor that becomes readable when a
  // completion arrives (the CQs' completion channel). Protocol: call
  // ArmWait(), then RxBurst/TxBurst once more; only if that found nothing,
  // poll() wait_fd() (with the engine's NextEventTime as the timeout). The
  // next RxBurst consumes the channel's events.
  int wait_fd() const;
  void ArmWait();

  // Test and operations hook: moves data QP `qp` of `peer` to the error
  // state (as a NIC fault would); it is retired at the next burst.
  absl::Status ForceQpError(uint32_t peer, uint16_t qp);
  bool qp_alive(uint32_t peer, uint16_t qp) const;

  // --- message close (VerbsOptions::message_close) ---
  // Tells the datapath which engine connection peer slot `peer` carries.
  absl::Status BindConnection(uint32_t peer, ConnId conn);
  // Takes every engine completion (Engine::PollCompletions), in order.
  // Completions of unbound connections pass through unchanged.
  void OfferCompletions(const Completion* c, size_t n);
  // Completions the application may see now: per connection, kWrite in
  // posting order and kRecvImmediate in MSN order (a held kRecvImmediate
  // does not hold back the same connection's kWrite completions).
  size_t PollCompletions(Completion* out, size_t max);
  // Engine completions held back right now.
  size_t held_completions() const;
  // True while a kWrite completion of `conn` taken by OfferCompletions has
  // not been returned by PollCompletions (held, or ready and not polled).
  bool HoldsWriteCompletions(ConnId conn) const;
  // Tests (debug_park_qp): posts the parked work requests.
  void ReleaseParked();

  // OK, or why the device cannot be used any more.
  absl::Status health() const;
  VerbsStats stats() const;
  const std::string& device_name() const;
  DataQpMode mode() const;
  uint32_t max_inline() const;

  class Impl;

 private:
  explicit VerbsDatapath(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::verbs

#endif  // PRISM_TRANSPORT_BACKENDS_VERBS_VERBS_DATAPATH_H_
