// The simulated network: links, output-queued switch ports with finite
// buffers, ECN marking, trimming or drop-tail, SRv6 uSID and ECMP
// forwarding, NIC ports, and the fault primitives (link/switch down and up,
// degraded rate, random loss).
//
// Model (see docs/simulator.md):
// - Every full-duplex topology link is two Ports (one per direction). A port
//   has a strict-priority control queue (SACK/NACK/probes/trimmed headers)
//   and a data queue, each with a byte limit. Serialization time is
//   wire_size * 8 / rate; the packet arrives at the far node after the
//   propagation delay. A packet's wire size is its header + payload +
//   FabricConfig::wire_overhead_bytes (Ethernet + IPv6 + UDP + FCS).
// - ECN: on enqueue to a data queue holding q bytes, mark CE with probability
//   0 below ecn_kmin, pmax*(q-kmin)/(kmax-kmin) between, 1 at/above kmax.
// - Trimming: a data packet that does not fit (q + size > trim threshold) is
//   cut to its header and queued in the control queue (never trimmed);
//   otherwise (drop-tail) it is dropped. Last-hop ports (T0 -> host) can be
//   exempt from ECN and/or trimming.
// - Per-switch settings: FabricConfig::overrides, applied in order, set
//   trimming on/off, the trim threshold and the ECN thresholds of the ports
//   of the switches they select (tier, plane, index; all, down- or up-facing
//   ports). Each switch port resolves to a QueueProfile at Init.
// - SRv6 forwarding: a packet carries up to six 16-bit uSIDs; a switch
//   matches its own uSID (mismatch: drop), shifts, and forwards to the
//   neighbour named by the next uSID (static table, never changes); when the
//   carrier is used up the switch delivers to the destination host's port.
// - ECMP forwarding: per destination T0, a group of shortest-path ports;
//   the port is chosen by a hash of (entropy, src, dst) with a per-switch
//   seed. Groups are recomputed from the live topology `routing_convergence`
//   after a link or switch changes state (a model of BGP convergence).
// - Faults: a link that goes down flushes its queues and loses what is on
//   the wire; a switch that goes down takes all its links down.
//
// Invariants: every packet handed to the fabric is delivered to a host,
// dropped with a DropReason counted, or still queued / on a wire; a queue
// never holds more bytes than its limit (checked by CheckInvariants).
//
// Thread safety: none.
#ifndef PRISM_SIM_FABRIC_H_
#define PRISM_SIM_FABRIC_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "routing/topology.h"
#include "sim/event_queue.h"
#include "sim/huge_alloc.h"
#include "sim/sim_packet.h"
#include "transport/base/random.h"

namespace prism::sim {

enum class DropReason : uint8_t {
  kBufferOverflow = 0,  // drop-tail data queue full
  kControlOverflow,     // control (priority) queue full
  kLinkDown,            // sent into / queued at a port whose link is down
  kLinkDownInFlight,    // on the wire when the link went down
  kRandomLoss,          // per-link random loss
  kSwitchDown,          // arrived at a rebooting switch
  kNoRoute,             // no table entry / next hop not adjacent
  kUsidMismatch,        // SRv6 carrier did not name this switch
  kHopLimit,            // forwarding loop guard
  kNicOverflow,         // NIC transmit queue full
  kNicPortDown,         // host sent on a NIC port that is down
  kReceiverDiscard,     // a transport discarded it on arrival (baselines)
  kCount
};
const char* DropReasonName(DropReason r);

// Queue settings for the ports of selected switches (scenario
// "fabric.overrides"). Unset fields keep what earlier settings gave.
struct QueueOverride {
  enum class Ports : uint8_t { kAll, kDown, kUp };
  int tier = -1;       // 1 = T0, 2 = T1, 3 = T2 (routing::NodeKind); -1: all
  int plane = -1;      // -1: every plane
  int64_t index = -1;  // switch index within its tier and plane; -1: all
  Ports ports = Ports::kAll;  // kDown: towards hosts (T0 -> host included)
  std::optional<bool> trimming;
  std::optional<uint32_t> trim_threshold_bytes;  // 0 = buffer
  std::optional<bool> ecn;
  std::optional<uint32_t> ecn_kmin_bytes;
  std::optional<uint32_t> ecn_kmax_bytes;
  std::optional<double> ecn_pmax;
};

// What one switch port does when its data queue fills (resolved from
// FabricConfig and its overrides).
struct QueueProfile {
  bool trimming = true;
  bool ecn = true;
  uint32_t trim_threshold = 0;  // bytes, <= buffer_bytes
  uint32_t kmin = 0, kmax = 0;
  double pmax = 0;
  bool operator==(const QueueProfile&) const = default;
};

struct FabricConfig {
  bool ecn = true;
  uint32_t ecn_kmin_bytes = 32 * 1024;
  uint32_t ecn_kmax_bytes = 128 * 1024;
  double ecn_pmax = 0.2;
  bool ecn_last_hop = true;  // mark on T0 -> host ports too
  bool trimming = true;      // trim instead of drop-tail
  bool trim_last_hop = true;
  uint32_t buffer_bytes = 512 * 1024;          // switch data queue per port
  uint32_t trim_threshold_bytes = 0;           // 0 = buffer_bytes
  uint32_t control_buffer_bytes = 256 * 1024;  // switch control queue
  uint32_t nic_buffer_bytes = 4 * 1024 * 1024;
  uint32_t nic_queue_packets = 4;  // a host pulls while a port is below this
  // A NIC port tells its host it has room when a transmit leaves it holding
  // at most this many packets (clamped to nic_queue_packets - 1); -1 (the
  // default) = nic_queue_packets - 1: the host pulls after every transmit.
  // A lower value makes the host pull a batch every few transmits (fewer
  // engine polls; see docs/simulator.md for what it changes).
  int32_t nic_pull_watermark = -1;
  // Switch ports decide their transmissions lazily, without a port-done
  // event per transmit (docs/simulator.md, "Links and ports"): the same
  // schedule except for the order of simultaneous events. Off by default.
  bool lazy_switch_ports = false;
  uint32_t wire_overhead_bytes = 66;
  Time routing_convergence = 1 * kSecond;
  uint8_t max_hops = 12;
  std::vector<QueueOverride> overrides;  // applied in order, after last_hop
};

struct PortCounters {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;  // wire bytes
  uint64_t ecn_marked = 0;
  uint64_t trims = 0;
  uint64_t drops = 0;
};

// Field order: what every hop touches (wire FIFO, queue heads, busy time,
// far node, epoch) shares the first cache line; counters and cold state
// follow.
struct Port {
  // Packets on the wire, in arrival order (FIFO: one event at a time, for
  // the head, which the event carries). Only the tail is kept: an arrival
  // takes the next packet from the head's `next`.
  SimPacket* wire_tail = nullptr;
  SimPacket* dq_head = nullptr;
  SimPacket* cq_head = nullptr;
  SimPacket* dq_tail = nullptr;
  SimPacket* cq_tail = nullptr;
  Time busy_until = 0;
  uint32_t to = 0;
  uint32_t epoch = 0;  // incremented when the link goes down
  // Second line: queue state and link parameters.
  uint64_t rate_bps = 0;
  Time delay = 0;
  uint32_t dq_bytes = 0;
  uint32_t cq_bytes = 0;
  uint32_t q_packets = 0;
  float loss = 0;
  bool up = true;
  bool done_pending = false;
  bool host_port = false;  // from a host (NIC port)
  bool last_hop = false;   // T0 -> host
  bool lazy = false;       // switch port with lazy_switch_ports
  uint8_t profile = 0;     // index into Fabric::profiles()
  uint8_t plane = 0;       // NIC port: its plane
  uint32_t from = 0;
  uint32_t max_dq_bytes = 0;
  uint32_t max_cq_bytes = 0;
  uint32_t link = 0;
  uint64_t nominal_bps = 0;
  Time down_since = -1;  // when the port last went down (measurement only)
  PortCounters c;
};

class FabricClient {
 public:
  virtual ~FabricClient() = default;
  // A packet reached host `host` (ownership passes to the client).
  virtual void DeliverToHost(Time now, uint32_t host, SimPacket* p) = 0;
  // A NIC port has room (queue below nic_queue_packets) after a transmit.
  virtual void HostPortIdle(Time now, uint32_t host, uint16_t plane) = 0;
  // A NIC port (host link) went down or came back.
  virtual void HostPortStatus(Time now, uint32_t host, uint16_t plane,
                              bool up) = 0;
};

class Fabric {
 public:
  static constexpr uint16_t kArriveKind = 1;
  static constexpr uint16_t kPortDoneKind = 2;  // arg = port id, ptr = port
  static constexpr uint16_t kConvergeKind = 3;
  // arg = port id, ptr = the packet at the head of that port's wire.
  static constexpr uint16_t kWireKind = 4;

  Fabric(const routing::Topology* topo, const FabricConfig& config,
         EventQueue* queue, PacketPool* pool, uint64_t seed,
         FabricClient* client);
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // Builds ports and forwarding tables. Must succeed before use.
  absl::Status Init();

  // Handles kArriveKind / kPortDoneKind / kConvergeKind events.
  void HandleEvent(const Event& e);

  // --- hosts --------------------------------------------------------------
  // Queues a packet on host's NIC port for `plane` (drops are counted).
  void HostSend(Time now, uint32_t host, uint16_t plane, SimPacket* p);
  bool HostPortUp(uint32_t host, uint16_t plane) const {
    return ports_[host_port_[host * planes_ + plane]].up;
  }
  bool HostPortHasRoom(uint32_t host, uint16_t plane) const {
    const Port& pt = ports_[host_port_[host * planes_ + plane]];
    return pt.up && pt.q_packets < config_.nic_queue_packets;
  }
  // Packets host's NIC ports can take before reaching nic_queue_packets,
  // summed over the ports that are up (kept per host as the ports change:
  // the host asks after every transmit).
  uint32_t HostRoom(uint32_t host) const { return host_room_[host]; }
  uint64_t HostPortRate(uint32_t host, uint16_t plane) const {
    return ports_[host_port_[host * planes_ + plane]].rate_bps;
  }
  // Fills p's SRv6 carrier for host src -> dst on `plane`, taking uplink
  // choices from the digits of `choice` (mixed radix over group sizes).
  void BuildCarrier(uint32_t src, uint32_t dst, uint16_t plane, uint32_t choice,
                    SimPacket* p) const;
  // How many next hops BuildCarrier's first choice (the digit choice %
  // fanout) picks among at src's T0 (edge) on `plane` for dst: its uplinks
  // toward dst's T0 (clos2: T1s x parallel links). 0 when src and dst share
  // the T0 or there is no route. Paths whose choices agree mod this leave
  // on the same uplink (routing::FailureGroupOf).
  uint32_t CarrierFanout(uint32_t src, uint32_t dst, uint16_t plane) const;
  // Measurement only (benchmarks; transports must not call it): -1 when
  // every hop of p's SRv6 carrier from host src (NIC port on `plane`, the
  // switches it names and their links, the last T0 -> dst link) is up now,
  // else the earliest time one of its dead hops went down (and *dead_port,
  // when not null, that hop's port). -1 for a packet without a carrier.
  Time CarrierDownSince(uint32_t src, uint32_t dst, uint16_t plane,
                        const SimPacket* p,
                        uint32_t* dead_port = nullptr) const;
  // Looks ahead (changes nothing): the port that p, at the head of wire
  // `wire_port`, will be queued on at the next switch, or kNoPort (it
  // reaches a host, or has no route). That is exactly the port its arrival
  // picks as long as routes_epoch() has not changed meanwhile (the SRv6
  // next-hop tables are static, ECMP's change only at convergence, and
  // nothing touches a packet on a wire): then *exact is set and OnWire may
  // be handed it.
  uint32_t PeekOutPort(uint32_t wire_port, const SimPacket* p,
                       bool* exact) const;
  // Changes whenever any switch's ECMP / carrier tables are replaced
  // (Init, convergence).
  uint32_t routes_epoch() const { return routes_epoch_; }
  // Handles a kWireKind event; `out` is PeekOutPort's exact answer for its
  // packet (found at the same routes_epoch()), or kNoPort (then the route
  // is looked up as usual).
  void OnWire(const Event& e, uint32_t out) {
    WireArrive(e.time, e.arg, static_cast<SimPacket*>(e.ptr), out);
  }
  // Handles a kPortDoneKind event (what HandleEvent does for it, without
  // the dispatch).
  void OnPortDone(const Event& e) { PortDone(e.time, e.arg); }
  // The nodes at the far end and at the near end of port `id` (compact
  // arrays: for the look-ahead and the batched scheduler's grouping).
  uint32_t port_to(uint32_t id) const { return port_to_[id]; }
  uint32_t port_from(uint32_t id) const { return port_from_[id]; }
  static constexpr uint32_t kNoPort = 0xffffffffu;
  uint32_t WireSize(const SimPacket* p) const {
    return p->header_len + p->payload_len + config_.wire_overhead_bytes;
  }
  // Drops a packet the fabric or a host discards, counting why.
  void Drop(SimPacket* p, DropReason r);

  // --- faults -------------------------------------------------------------
  void SetLinkUp(Time now, uint32_t link, bool up);
  void SetSwitchUp(Time now, uint32_t node, bool up);
  // Rate = nominal * fraction (fraction in (0, 1]).
  void SetLinkRateFraction(uint32_t link, double fraction);
  void SetLinkLoss(uint32_t link, double rate);
  // Recomputes ECMP groups of `plane` from the live topology now.
  void RecomputeRoutes(uint16_t plane);

  // --- stats and checks ---------------------------------------------------
  const std::array<uint64_t, static_cast<size_t>(DropReason::kCount)>& drops()
      const {
    return drops_;
  }
  uint64_t total_drops() const;
  uint64_t trims() const { return trims_; }
  uint64_t ecn_marks() const { return ecn_marks_; }
  uint64_t packet_hops() const { return packet_hops_; }
  uint64_t queued_packets() const { return queued_packets_; }
  uint64_t on_wire() const { return on_wire_; }
  // Makes every switch-port transmission that starts at or before `now`
  // (they are decided lazily, see docs/simulator.md), so that port counters
  // and packet_hops() are complete. Called at the end of a run.
  void Settle(Time now);
  // Bytes in port `id`'s data queue at `now` (a switch port's own dq_bytes
  // can lag: its transmissions are decided lazily). Changes nothing.
  uint32_t DataQueueBytes(Time now, uint32_t id) const;
  // OK when every queue stayed within its limit and counts add up.
  absl::Status CheckInvariants() const;
  const std::vector<Port, HugeAllocator<Port>>& ports() const { return ports_; }
  // Queue profiles of switch ports (Port::profile indexes this).
  const std::vector<QueueProfile>& profiles() const { return profiles_; }
  const routing::Topology& topology() const { return *topo_; }
  const FabricConfig& config() const { return config_; }
  uint32_t planes() const { return planes_; }
  // Port from T0 to host on `plane` and host's NIC port on `plane`.
  uint32_t host_down_port(uint32_t host, uint16_t plane) const {
    return host_down_port_[host * planes_ + plane];
  }
  uint32_t host_port(uint32_t host, uint16_t plane) const {
    return host_port_[host * planes_ + plane];
  }
  // Ports of a link: [0] a->b, [1] b->a.
  uint32_t link_port(uint32_t link, int dir) const {
    return link_port_[2 * link + dir];
  }
  size_t memory_bytes() const;

 private:
  struct NodeInfo {
    uint32_t port_base = 0;
    uint32_t num_ports = 0;
    uint32_t nbr_base = 0;  // into nbr_
    uint32_t t0_index = 0;  // kT0: index within plane
    uint64_t seed = 0;
    uint16_t usid = 0;
    uint16_t plane = 0;
    routing::NodeKind kind = routing::NodeKind::kHost;
    bool up = true;
  };
  struct Span {
    uint32_t begin = 0;
    uint32_t cnt = 0;  // 0: no route
  };
  struct Routes {
    // While built: per dst T0 index, its group; kNone if none (then
    // freed: `dst` has it).
    std::vector<uint32_t> dst_group;
    std::vector<uint32_t> group_begin;  // group g: [begin[g], begin[g+1])
    std::vector<uint16_t> group_ports;  // local port positions
    // Per dst T0 index: its group's [begin, begin + cnt) in group_ports
    // (dst_group and group_begin in one load; what forwarding reads).
    std::vector<Span> dst;
  };
  // What a route walk reads of a node, compact (BuildCarrier walks it per
  // packet): its tables (routes_[node].get()) and first port.
  struct Hop {
    const Routes* r = nullptr;
    uint32_t port_base = 0;
    uint16_t usid = 0;
  };
  static constexpr uint32_t kNone = 0xffffffffu;

  // `out`: the output port if already known (PeekOutPort), else kNone.
  // (Always inlined: WireArrive calls it once per hop; HandleEvent's
  // kArriveKind is rare.)
  [[gnu::always_inline]] inline void Arrive(Time now, uint32_t node,
                                            SimPacket* p, uint32_t out = kNone);
  // The port a packet at switch `node` leaves on (kNone: no route), with
  // its carrier at `usid_pos` (already shifted past this switch). Pure.
  // (Always inlined: the look-ahead's PeekOutPort and the arrival.)
  [[gnu::always_inline]] inline uint32_t OutPort(uint32_t node,
                                                 const NodeInfo& ni,
                                                 const SimPacket* p,
                                                 uint32_t usid_pos) const;
  // (Always inlined: Arrive is its only caller, once per switch hop.)
  [[gnu::always_inline]] inline void Enqueue(Time now, uint32_t port,
                                             SimPacket* p);
  // Transmits the next packet of `port` starting at `now`.
  void StartTx(Time now, uint32_t port);
  // StartTx's body, inlined into PortDone (most transmissions start there).
  [[gnu::always_inline]] inline void StartTxInline(Time now, uint32_t port);
  // A switch port's transmissions are decided lazily: this makes every one
  // that starts at or before `now` (in order, control first among what had
  // arrived by each start), and if packets still wait with nothing on the
  // wire to come back for them, schedules a port-done when it is free.
  void CatchUp(Time now, uint32_t port);
  void PortDone(Time now, uint32_t port);
  void WireArrive(Time now, uint32_t port, SimPacket* p, uint32_t out = kNone);
  void Flush(uint32_t port);
  // Refreshes nic_room_ and host_room_ for NIC port pt.
  void SetNicRoom(const Port& pt) {
    const uint32_t cap = config_.nic_queue_packets;
    uint16_t& r = nic_room_[static_cast<size_t>(pt.from) * planes_ + pt.plane];
    const uint16_t room = static_cast<uint16_t>(
        pt.up && pt.q_packets < cap ? cap - pt.q_packets : 0);
    host_room_[pt.from] = host_room_[pt.from] - r + room;
    r = room;
  }
  void UpdateLink(Time now, uint32_t link);
  void ScheduleConvergence(Time now, uint16_t plane);
  uint32_t NeighborPort(uint32_t node, uint32_t nbr, uint64_t hash) const;
  // Builds direct_range_ / direct_ from nbr_ and the nodes' uSIDs, and
  // hop_ (tables aside).
  void BuildDirect();
  // routes_[node] = r, keeping hop_[node].r in step.
  void SetRoutes(uint32_t node, std::shared_ptr<const Routes> r) {
    ++routes_epoch_;
    hop_[node].r = r.get();
    routes_[node] = std::move(r);
  }
  // Fills routes_ for every switch of `plane` from the live topology.
  void ComputeRoutes(uint16_t plane);
  // Resolves each switch port's QueueProfile from config_ and overrides.
  absl::Status BuildProfiles();
  static uint64_t Mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
  }

  const routing::Topology* topo_;
  FabricConfig config_;
  EventQueue* q_;
  PacketPool* pool_;
  Rng rng_;
  FabricClient* client_;
  uint32_t planes_ = 1;
  uint32_t hosts_ = 0;
  uint32_t trim_threshold_ = 0;
  uint32_t nic_pull_below_ = 0;  // resolved nic_pull_watermark
  uint64_t ports_down_ = 0;      // ports with up == false

  std::vector<QueueProfile> profiles_;
  std::vector<NodeInfo> nodes_;
  std::vector<Port, HugeAllocator<Port>> ports_;
  std::vector<uint32_t> link_port_;  // 2 per link
  // Port::to of every port, compact (BuildCarrier walks it per packet; the
  // 168-byte ports would cost a cache miss per hop).
  std::vector<uint32_t> port_to_;
  std::vector<uint32_t> port_from_;  // Port::from, compact
  std::vector<uint8_t> link_up_;     // administrative link state
  std::vector<uint32_t> host_port_;  // host*planes + plane
  // Room of each NIC port (host*planes + plane): up ? nic_queue_packets -
  // queued (at least 0) : 0, and its sum over each host's ports (per host).
  // Maintained by SetNicRoom.
  std::vector<uint16_t> nic_room_;
  std::vector<uint32_t> host_room_;
  std::vector<uint32_t> host_down_port_;  // host*planes + plane
  // The T0 each of those ports leaves from (Port::from, compact: the
  // last hop's check reads it per packet; the port is a cache miss).
  std::vector<uint32_t> host_down_from_;  // host*planes + plane
  std::vector<uint32_t> host_t0_index_;   // per host
  // Sorted (neighbour node, port id) per node, for uSID next hops.
  std::vector<std::pair<uint32_t, uint32_t>> nbr_;
  // Direct next-hop table by uSID (what NeighborPort(node,
  // usid_to_node_[plane][usid]) answers, without the binary search): a
  // switch whose switch neighbours are all in its plane and whose uSIDs
  // span a short range [lo, lo + span) gets `span` slots at `base` in
  // direct_; slot usid - lo says the neighbour's first port and how many
  // parallel ports (0: no neighbour with that uSID) from which position of
  // the node's nbr_ run. `ok` false: NeighborPort as before.
  struct DirectRange {
    uint32_t base = 0;
    uint16_t lo = 0;
    uint16_t span = 0;
    bool ok = false;
  };
  struct DirectSlot {
    uint32_t port = 0;  // the first (or only) parallel port
    uint16_t off = 0;   // its position in the node's nbr_ run
    uint16_t cnt = 0;   // parallel ports to the neighbour; 0 = none
  };
  std::vector<DirectRange> direct_range_;  // per node
  std::vector<DirectSlot> direct_;
  std::vector<std::vector<uint32_t>> usid_to_node_;    // per plane, 65536
  std::vector<std::vector<uint32_t>> t0_nodes_;        // per plane, by index
  std::vector<std::vector<uint32_t>> plane_switches_;  // per plane
  // Routes per switch node (shared between identical planes).
  std::vector<std::shared_ptr<const Routes>> routes_;
  std::vector<Hop> hop_;       // per node; r follows routes_ (SetRoutes)
  uint32_t routes_epoch_ = 0;  // incremented by SetRoutes

  std::array<uint64_t, static_cast<size_t>(DropReason::kCount)> drops_{};
  uint64_t trims_ = 0;
  uint64_t ecn_marks_ = 0;
  uint64_t packet_hops_ = 0;
  uint64_t queued_packets_ = 0;
  uint64_t on_wire_ = 0;
};

}  // namespace prism::sim

#endif  // PRISM_SIM_FABRIC_H_
