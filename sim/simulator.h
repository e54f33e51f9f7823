// Simulator: one run of one transport over one fabric, workload and fault
// schedule. A scenario with several transports makes one Simulator per
// transport, each from the same seed (sim/scenario.h).
//
// The run: build the topology and the fabric, create one HostAgent per host
// for the transport (Prism engine adapter or a baseline), schedule flow
// starts, faults and samples, then pop events until every flow completed or
// `duration` passed: one at a time in (time, seq) order (Scheduler::kExact,
// the default), or a lookahead's worth at a time, node by node
// (Scheduler::kBatched, opt-in; what it changes is documented there). Results:
// per-flow completion times, goodput against the ideal, counters, time series,
// and the invariant check.
//
// Determinism: all randomness derives from ScenarioConfig::seed through
// forked Rng streams (fabric, workload, faults, each host); no globals, so
// several Simulators can run in one process (tests do).
//
// Thread safety: none; one thread per Simulator.
#ifndef PRISM_SIM_SIMULATOR_H_
#define PRISM_SIM_SIMULATOR_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "routing/topology.h"
#include "sim/event_queue.h"
#include "sim/fabric.h"
#include "sim/sim_packet.h"
#include "sim/verifier.h"
#include "sim/workload.h"
#include "transport/base/json.h"
#include "transport/base/random.h"

namespace prism::sim {

struct TransportConfig {
  std::string name = "prism";  // key in summary.json
  std::string type = "prism";  // "prism" | "roce" | "multiqp"
  uint32_t mtu = 4096;         // payload bytes per packet
  // prism
  std::string path_policy = "rotation";
  std::string congestion = "nscc";
  uint16_t num_paths = 256;
  Time rto_min = 50 * kMicrosecond;
  Time probe_interval = 50 * kMicrosecond;
  bool payload_checksum = false;
  // Engine window in packets (ConnectionOptions::max_inflight_packets, a
  // power of two in [256, 65536]) and outstanding-message cap
  // (max_outstanding_messages); 0 = the engine's default. Small values cut
  // the engine's per-connection memory for very large fabrics.
  uint32_t window_packets = 0;
  uint32_t max_messages = 0;
  // What-if for diagnosis, not a transport feature (default off, < 0): with
  // SRv6 forwarding, a packet the engine puts on a route through a hop that
  // is down is re-routed by the simulator through a live T1 of the same
  // plane (uniform, deterministic per host) once the host's first packet
  // into that hop's outage is at least this old. 0: an oracle that loses no
  // packet to a dead hop; d > 0: what a host-wide dead-hop table that learns
  // d after its first packet into the outage, and tells the engine nothing
  // else, could do. Bounds what dead-path avoidance can win
  // (docs/benchmarks.md, link-flaps). JSON: oracle_reroute_after_us.
  Time oracle_reroute_after = -1;
  // Fate sharing: give each connection its paths' failure groups
  // (ConnectionOptions::path_groups, routing::FailureGroupOf over the
  // carriers' first uplink; SRv6 forwarding only). JSON: fate_sharing.
  bool fate_sharing = true;
  // Group balance over those groups (ConnectionOptions::group_balance; needs
  // fate_sharing, which gives the groups). JSON: group_balance.
  bool group_balance = true;
  // Tail resend (ConnectionOptions::tail_resend). JSON: tail_resend.
  bool tail_resend = true;
  // Spurious-loss undo (ConnectionOptions::spurious_undo). JSON:
  // spurious_undo.
  bool spurious_undo = true;
  // baselines (roce, multiqp)
  uint32_t qps =
      0;         // QPs per connection; 0 = planes (roce), 4*planes (multiqp)
  Time rto = 0;  // 0: 500 us
  uint64_t window_bytes = 0;  // per QP in-flight cap; 0: 4 x BDP of a port
  bool dcqcn = true;
  uint32_t ack_every = 4;
  Time cnp_interval = 50 * kMicrosecond;
};

enum class FaultType : uint8_t {
  kLinkDown,
  kLinkUp,
  kSwitchDown,
  kSwitchUp,
  kLinkRate,  // value = fraction of nominal
  kLinkLoss,  // value = loss probability
};

struct FaultAction {
  Time at = 0;
  FaultType type = FaultType::kLinkDown;
  uint32_t target = 0;  // link id or node id
  double value = 0;
};

// How Simulator::Run orders events (docs/simulator.md, "Schedulers").
enum class Scheduler : uint8_t {
  // One event at a time, in (time, seq) order: the reference.
  kExact,
  // Node-batched: the events of [T, T + lookahead), lookahead = the least
  // link delay, are taken from the queue together and dispatched node by
  // node, each node's in (time, seq) order. Nodes interact only over links,
  // so no event of the batch can affect another node's within it; what
  // differs from kExact is the order of independent events, hence which
  // draw of the fabric's shared random stream each one gets, and (below)
  // two measurement details. Fewer cache misses on large fabrics (one
  // node's state is touched in one stretch). JSON "scheduler": "batched".
  kBatched,
};

struct ScenarioConfig {
  std::string name = "scenario";
  uint64_t seed = 1;
  routing::TopologySpec topology;
  FabricConfig fabric;
  bool srv6 = true;  // Prism packets: SRv6 carriers (else ECMP on entropy)
  Time duration = 10 * kMillisecond;  // simulated time limit
  Time sample_interval = 0;           // 0: duration / 200
  Time warmup = 0;  // goodput_fraction measured from first start + warmup
  bool timeseries = true;
  bool check_bytes = true;
  Scheduler scheduler = Scheduler::kExact;
  json::Value workload;  // the "workload" value
  json::Value faults;    // the "faults" value (array or null)
  std::string base_dir;  // for relative trace paths
  std::vector<TransportConfig> transports;
};

struct FlowResult {
  uint32_t id = 0;
  uint32_t src = 0, dst = 0;
  uint64_t bytes = 0;
  uint64_t delivered = 0;
  Time start = -1;       // when it started (after its dependencies)
  Time finish = -1;      // sender completion; -1 if not completed
  double ideal_bps = 0;  // max-min fair rate at line rate
  std::string group;
  int32_t step = -1;
};

struct Sample {
  Time t = 0;
  std::vector<uint64_t>
      flow_bytes;  // delivered so far, per flow (<= 2048 flows)
  std::vector<uint64_t>
      host_bytes;  // received so far, per host (<= 2048 hosts)
  uint64_t total_bytes = 0;
  uint32_t max_queue = 0;  // deepest data queue in the fabric
  uint64_t sum_queue = 0;  // bytes queued in switch data queues
};

struct TransportTotals {
  uint64_t data_packets = 0;
  uint64_t retransmissions = 0;  // packets
  uint64_t retransmitted_bytes = 0;
  uint64_t timeouts = 0;
  uint64_t path_retirements = 0;
  uint64_t path_timeouts = 0;  // Prism: packets lost by the path timeout
  uint64_t paths_restored = 0;
  // Prism: declared losses found spurious (the copy was acked after all),
  // and the paths that finding put back into service (ConnectionStats).
  uint64_t spurious_losses = 0;
  uint64_t paths_unretired = 0;
  uint64_t probes = 0;
  uint64_t trims_seen = 0;  // trimmed headers seen by receivers
  uint64_t ecn_echoes = 0;
  uint64_t receiver_discards = 0;
  uint64_t engine_rx_drops = 0;  // engine's rx_drop_* sum (Prism)
  uint64_t connection_errors = 0;
  uint64_t tail_loss_probes = 0;  // Prism: PTO firings
  // Prism completion-queue backpressure (EngineOptions::cq_capacity): the
  // senders' RNR side (ConnectionStats: NACK NO_BUFFER received, RNR probes
  // sent, connections failed by rnr_timeout) and the receivers' (EngineStats:
  // packets answered NO_BUFFER, deliveries held for a full queue) and
  // PostWrite calls refused for want of a completion slot.
  uint64_t rnr_nacks_received = 0;
  uint64_t rnr_probes_sent = 0;
  uint64_t rnr_timeouts = 0;
  uint64_t rx_drop_no_buffer = 0;
  uint64_t cq_delivery_holds = 0;
  uint64_t writes_refused_cq_full = 0;
  // Measurement only (Prism with SRv6; the fabric's view, which the engine
  // never sees): packets the sender put on a path whose carrier crossed a
  // hop that was down at send time (Fabric::CarrierDownSince), by kind.
  uint64_t dead_path_data = 0;             // DATA, first transmissions
  uint64_t dead_path_retransmissions = 0;  // DATA with kFlagRetransmit
  uint64_t dead_path_probes = 0;           // PROBE
  uint64_t dead_path_control = 0;          // SACK, NACK, PROBE_ACK, others
  // Per (sender, peer, path, outage) that got DATA while dead: time from
  // the hop going down to the last DATA packet the sender put on the path
  // during that outage (its size is the number of such path outages).
  std::vector<Time> dead_path_use_spans;
  // Distinct (sender, peer, route group, outage) and (sender, dead hop,
  // outage) that got DATA while dead; route group = (plane, T1 of the
  // carrier). DATA sends minus these bound what fate sharing per connection
  // (route group) or per sending host (hop) could save.
  uint64_t dead_route_group_outages = 0;
  uint64_t dead_hop_outages = 0;
};

struct RunResult {
  std::string transport;
  bool completed = false;
  Time end_time = 0;  // last completion, or duration
  Time first_start = 0;
  double goodput_fraction = 0;  // aggregate goodput in the window / ideal
  Time window_start = 0, window_end = 0;  // measurement window
  double makespan_goodput_fraction = 0;   // all bytes / makespan / ideal
  double raw_goodput_fraction = 0;  // goodput vs raw line rate (no headers)
  double ideal_bps = 0;             // ideal aggregate rate of the first class
  uint64_t delivered_bytes = 0;
  uint64_t total_bytes = 0;
  std::vector<FlowResult> flows;
  std::vector<Sample> samples;
  std::vector<std::pair<Time, std::string>> fault_log;
  std::array<uint64_t, static_cast<size_t>(DropReason::kCount)> drops{};
  uint64_t drops_total = 0;
  uint64_t trims = 0;
  uint64_t ecn_marks = 0;
  TransportTotals totals;
  uint64_t packets_created = 0;
  uint64_t packet_hops = 0;
  uint64_t events = 0;
  // Events popped by kind (measurement only): timers (engine wake-ups and
  // rx batches), fabric wire arrivals, port-done, other.
  uint64_t timer_events = 0, wire_events = 0, port_done_events = 0,
           other_events = 0;
  uint64_t duplicates = 0;
  uint64_t mismatches = 0;
  // Scheduler::kBatched: the batches run (measurement only), and events of
  // a batch's heap that were not the node's own (an invariant: 0).
  uint64_t batches = 0;
  uint64_t batch_violations = 0;
  std::string invariant_error;   // empty: all invariants held
  double wall_seconds = 0;       // Run(): wall clock (measurement only)
  double cpu_seconds = 0;        // Run(): this thread's CPU time
  double setup_cpu_seconds = 0;  // Init(): this thread's CPU time
  // Resident memory each stage added (measurement only): topology, fabric,
  // workload (flows and verifier), transport (agents, engines,
  // connections), run (packets, queues, engine state touched).
  std::vector<std::pair<std::string, double>> setup_rss_mib;
  size_t fabric_bytes = 0;  // Fabric::memory_bytes()
  size_t queue_bytes = 0;   // EventQueue::memory_bytes() at the end
  size_t pool_bytes = 0;    // packet pool capacity at the end
};

class Simulator;

// One host's transport endpoint in the simulation.
class HostAgent {
 public:
  virtual ~HostAgent() = default;
  // A packet arrived for this host (the agent owns it: free or reuse).
  virtual void OnReceive(Time now, SimPacket* p) = 0;
  // NIC port `plane` has room.
  virtual void OnPortIdle(Time now, uint16_t plane) = 0;
  virtual void OnPortStatus(Time now, uint16_t plane, bool up) = 0;
  // Flow `flow` (whose src is this host) starts now.
  virtual void StartFlow(Time now, uint32_t flow) = 0;
  // Adds this host's counters.
  virtual void AddTotals(TransportTotals* t) const = 0;
  // Packets received but not yet processed (an rx batch).
  virtual uint64_t held_packets() const { return 0; }
};

// Creates the per-host agents of one transport.
class TransportDriver {
 public:
  virtual ~TransportDriver() = default;
  virtual absl::Status Init(Simulator* sim) = 0;
  virtual HostAgent* agent(uint32_t host) = 0;
  // Wire bytes per data packet beyond the payload (transport header), used
  // for the ideal goodput.
  virtual uint32_t data_header_bytes() const = 0;
};

absl::StatusOr<std::unique_ptr<TransportDriver>> MakeTransportDriver(
    const TransportConfig& tc);

class Simulator : public FabricClient {
 public:
  static constexpr uint16_t kFlowStartKind = 10;
  static constexpr uint16_t kFaultKind = 11;
  static constexpr uint16_t kSampleKind = 12;
  static constexpr uint16_t kWarmupKind = 13;

  Simulator(const ScenarioConfig& sc, const TransportConfig& tc);
  ~Simulator() override;
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  absl::Status Init();
  // Runs to completion or the time limit. `progress` (may be empty) is
  // called now and then with the fraction of simulated time or flows done.
  absl::Status Run(const std::function<void(double)>& progress = {});
  const RunResult& result() const { return result_; }

  // --- for agents ---------------------------------------------------------
  EventQueue& queue() { return queue_; }
  Fabric& fabric() { return *fabric_; }
  PacketPool& pool() { return pool_; }
  Verifier& verifier() { return *verifier_; }
  const std::vector<Flow>& flows() const { return flows_; }
  const routing::Topology& topology() const { return *topo_; }
  const ScenarioConfig& scenario() const { return sc_; }
  const TransportConfig& transport() const { return tc_; }
  uint32_t planes() const { return topo_->num_planes(); }
  uint64_t host_rate_bps() const;  // all NIC ports of a host together
  Time base_rtt() const;           // unloaded cross-T1 RTT estimate
  // Derives a seed for a component (stable per (tag, index)).
  uint64_t SeedFor(uint64_t tag, uint64_t index) const;
  // Called by the source agent when a flow's last byte is acknowledged.
  void FlowCompleted(Time now, uint32_t flow);
  // Routes a prism/baseline packet onto the NIC port of its plane.
  void Send(Time now, uint32_t host, SimPacket* p) {
    fabric_->HostSend(now, host, p->plane, p);
  }

  // FabricClient.
  void DeliverToHost(Time now, uint32_t host, SimPacket* p) override;
  void HostPortIdle(Time now, uint32_t host, uint16_t plane) override;
  void HostPortStatus(Time now, uint32_t host, uint16_t plane,
                      bool up) override;

 private:
  absl::Status InitImpl();
  absl::Status BuildFaults();
  void ApplyFault(Time now, const FaultAction& a);
  void TakeSample(Time now);
  void Finish(Time now);
  // Run's loops (one per Scheduler); each returns the last event's time.
  Time RunExact(Time end, const std::function<void(double)>& progress);
  Time RunBatched(Time end, Time lookahead,
                  const std::function<void(double)>& progress);
  void Dispatch(const Event& e, uint32_t out_hint);
  void PrefetchAhead(const Event& ne) const;
  uint32_t PrefetchRoute(const Event& ne, bool* exact) const;
  void PrefetchTail(const Event& ne, uint32_t out) const;
  void Progress(const std::function<void(double)>& progress, Time now,
                Time end);
  // The node an event belongs to (RunBatched); kAllNodes: none (it runs
  // alone, between batches).
  static constexpr uint32_t kAllNodes = 0xffffffffu;
  uint32_t NodeOf(const Event& e) const;

  ScenarioConfig sc_;
  TransportConfig tc_;
  EventQueue queue_;
  PacketPool pool_;
  Rng rng_;
  std::unique_ptr<routing::Topology> topo_;
  std::unique_ptr<Fabric> fabric_;
  std::vector<Flow> flows_;
  std::unique_ptr<Verifier> verifier_;
  std::unique_ptr<TransportDriver> driver_;
  std::vector<HostAgent*> agents_;
  // Run's look-ahead (see there): how many events ahead each step runs,
  // and the out port found for an upcoming wire arrival (by its place in
  // the pop order; `seq` confirms it is still the same event: one pushed
  // meanwhile may have overtaken it; `epoch`, that the routes it was found
  // with are still those in use).
  static constexpr size_t kTail = 1, kRoute = 3, kAhead = 6, kHints = 8;
  struct Hint {
    uint64_t seq = ~0ull;
    uint32_t out = Fabric::kNoPort;         // exact: handed to the arrival
    uint32_t prefetched = Fabric::kNoPort;  // exact or a guess
    uint32_t epoch = 0;                     // Fabric::routes_epoch() then
  };
  Hint hints_[kHints];
  std::vector<FaultAction> faults_;
  std::vector<double> ideal_rate_;
  uint64_t InitialClassBytes() const;
  Time warm_time_ = -1;
  uint64_t win_start_bytes_ = 0;
  Time win_end_ = -1;
  uint64_t win_end_bytes_ = 0;
  std::vector<uint64_t> warm_bytes_;
  std::vector<uint32_t> pending_deps_;
  std::vector<std::vector<uint32_t>> dependents_;
  uint32_t flows_done_ = 0;
  uint64_t delivered_packets_ = 0;
  // RunBatched: the open batch's end (-1: none), the node being dispatched,
  // and a measurement-window end found in the batch (FlowCompleted).
  Time batch_end_ = -1;
  uint32_t batch_node_ = kAllNodes;
  bool win_end_due_ = false;
  RunResult result_;
};

}  // namespace prism::sim

#endif  // PRISM_SIM_SIMULATOR_H_
