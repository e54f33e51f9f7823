#include "sim/prism_host.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "prism/engine.h"
#include "routing/path_set.h"
#include "sim/baseline.h"
#include "transport/base/bytes.h"
#include "transport/wire/packet.h"

namespace prism::sim {
namespace {

constexpr size_t kTxBurst = 16;
constexpr size_t kRxBurst = 32;
constexpr Time kRxBatch = 250 * kNanosecond;
constexpr uint32_t kWakeTag = 1;
constexpr uint32_t kRxTag = 2;
static_assert(wire::kMaxHeaderSize <= kSimHeaderBytes,
              "a SimPacket must hold every Prism header");

class PrismDriver;

// Sets the engine window when the engine has the option
// (ConnectionOptions::max_inflight_packets); returns false when it does not,
// so a configured window is reported instead of silently ignored.
template <typename Options>
bool SetWindow(Options& co, uint32_t window) {
  if constexpr (requires { co.max_inflight_packets = window; }) {
    co.max_inflight_packets = window;
    return true;
  } else {
    return false;
  }
}

struct FlowState {
  uint32_t conn = 0;  // local ConnId at the source
  uint32_t rkey = 0;  // region at the destination
  uint32_t msgs_left = 0;
};

class PrismHost : public HostAgent, public TimerClient {
 public:
  PrismHost(PrismDriver* d, uint32_t host, Placer* placer, uint64_t seed,
            uint32_t mtu, uint32_t max_conns)
      : d_(d),
        host_(host),
        engine_(MakeOptions(placer, seed, mtu, max_conns)),
        wake_(this, kWakeTag, host),
        rx_timer_(this, kRxTag, host),
        oracle_rng_(seed ^ 0x6f7261636c65ull) {}

  static EngineOptions MakeOptions(Placer* placer, uint64_t seed, uint32_t mtu,
                                   uint32_t max_conns) {
    EngineOptions o;
    o.seed = seed;
    o.mtu_payload = mtu;
    o.max_connections = max_conns;
    o.placer = placer;
    return o;
  }

  Engine& engine() { return engine_; }
  uint32_t lkey = 0;
  std::vector<ConnId> conns;                      // in creation order
  absl::flat_hash_map<uint32_t, ConnId> by_peer;  // lookup only

  void OnReceive(Time now, SimPacket* p) override {
    rx_.push_back(p);
    if (rx_.size() >= kRxBurst) {
      FlushRx(now);
    } else {
      rx_timer_.ArmEarlier(queue(), now + kRxBatch);
    }
  }
  void OnPortIdle(Time now, uint16_t /*plane*/) override { Pull(now); }
  void OnPortStatus(Time now, uint16_t plane, bool up) override {
    for (ConnId c : conns) {
      absl::Status st = engine_.SetPlaneUp(c, plane, up, now);
      if (!st.ok()) ++plane_errors_;
    }
    Pull(now);
  }
  void StartFlow(Time now, uint32_t flow) override;
  void AddTotals(TransportTotals* t) const override;
  uint64_t held_packets() const override { return rx_.size(); }
  void OnTimer(Time now, uint32_t tag) override {
    if (tag == kRxTag) {
      FlushRx(now);
    } else {
      Pull(now);
    }
  }
  void PostPending(Time now);
  void Pull(Time now);

 private:
  // sim::CarrierChoice for this host's connection endpoint `slot` (its
  // ConnectionOptions::peer, see PrismDriver::peer_host_), from the spread
  // cached at setup.
  uint32_t CarrierChoice(uint32_t slot, uint16_t path) const;
  // TransportConfig::oracle_reroute_after (what-if, off by default): moves
  // p (sent on connection slot `slot`), whose carrier crosses `dead_port`
  // (down since `down_since`), onto a live T1 of its plane once this host's
  // first packet into that outage is old enough. Returns true when it did.
  bool OracleReroute(SimPacket* p, uint32_t slot, uint32_t dead_port,
                     Time down_since, Time now);
  // Dead-path accounting of one sent packet (measurement only).
  void CountDeadPath(const SimPacket* p, Time down_since, uint32_t dead_port,
                     Time now);

  EventQueue& queue();
  void FlushRx(Time now);
  void Drain(Time now);

  PrismDriver* d_;
  uint32_t host_;
  Engine engine_;
  Timer wake_;
  Timer rx_timer_;
  std::vector<SimPacket*> rx_;
  // Messages waiting for PostWrite room: (flow, next message index).
  std::vector<std::pair<uint32_t, uint32_t>> pending_;
  uint64_t plane_errors_ = 0;
  uint64_t post_errors_ = 0;
  uint64_t conn_errors_ = 0;
  uint64_t spurious_ = 0;
  // Dead-path accounting (TransportTotals::dead_path_*).
  uint64_t dead_data_ = 0, dead_retx_ = 0, dead_probes_ = 0, dead_ctl_ = 0;
  struct DeadUse {
    Time since = 0, last = 0;
  };
  // (peer << 32 | path) -> the outage being used and its last DATA send.
  absl::flat_hash_map<uint64_t, DeadUse> dead_use_;
  std::vector<Time> dead_spans_;  // closed outages
  // (peer, plane << 16 | T1 uSID, outage) and (dead port, outage).
  absl::flat_hash_set<std::tuple<uint32_t, uint32_t, Time>> dead_groups_;
  absl::flat_hash_set<std::pair<uint32_t, Time>> dead_hops_;
  // Oracle re-routing: (dead port, outage) -> this host's first packet into
  // it; the generator picking the replacement T1.
  absl::flat_hash_map<std::pair<uint32_t, Time>, Time> oracle_first_;
  uint64_t oracle_rng_;
};

class PrismDriver : public TransportDriver {
 public:
  explicit PrismDriver(const TransportConfig& tc) : tc_(tc) {}

  absl::Status Init(Simulator* sim) override {
    sim_ = sim;
    placer_ = std::make_unique<VerifyingPlacer>(&sim->verifier());
    const uint32_t hosts = sim->topology().num_hosts();
    const std::vector<Flow>& flows = sim->flows();
    // Pairs (unordered) that need a connection, in flow order.
    absl::flat_hash_map<uint64_t, uint32_t> pair_index;
    std::vector<std::pair<uint32_t, uint32_t>> pairs;
    std::vector<uint32_t> conns_per_host(hosts, 0);
    flow_pair_.resize(flows.size());
    for (const Flow& f : flows) {
      const uint32_t a = std::min(f.src, f.dst), b = std::max(f.src, f.dst);
      const uint64_t key = (static_cast<uint64_t>(a) << 32) | b;
      auto it = pair_index.find(key);
      if (it == pair_index.end()) {
        it = pair_index.emplace(key, static_cast<uint32_t>(pairs.size())).first;
        pairs.emplace_back(a, b);
        ++conns_per_host[a];
        ++conns_per_host[b];
      }
      flow_pair_[f.id] = it->second;
    }
    hosts_.reserve(hosts);
    for (uint32_t h = 0; h < hosts; ++h) {
      hosts_.push_back(std::make_unique<PrismHost>(this, h, placer_.get(),
                                                   sim->SeedFor(10, h), tc_.mtu,
                                                   conns_per_host[h] + 1));
      Verifier& v = sim->verifier();
      absl::StatusOr<MemoryRegion> mr = hosts_[h]->engine().RegisterMemory(
          const_cast<uint8_t*>(v.pattern()), v.pattern_size(), kAccessLocal);
      if (!mr.ok()) return mr.status();
      hosts_[h]->lkey = mr->lkey;
    }
    ConnectionOptions co;
    co.num_paths = tc_.num_paths;
    co.num_planes = static_cast<uint16_t>(sim->planes());
    co.path_policy = tc_.path_policy;
    co.congestion = tc_.congestion;
    co.link_rate_bps = sim->host_rate_bps();
    co.base_rtt = sim->base_rtt();
    // Where some congestion drops are not trimmed (drop-tail fabric, or
    // trimming everywhere but the last hop), a loss is a congestion signal.
    const FabricConfig& fc = sim->scenario().fabric;
    co.loss_is_congestion = !(fc.trimming && fc.trim_last_hop);
    co.rto_min = tc_.rto_min;
    co.probe_interval = tc_.probe_interval;
    co.payload_checksum = tc_.payload_checksum;
    co.group_balance = tc_.group_balance;
    co.tail_resend = tc_.tail_resend;
    co.spurious_undo = tc_.spurious_undo;
    if (tc_.max_messages > 0) co.max_outstanding_messages = tc_.max_messages;
    if (tc_.window_packets > 0 && !SetWindow(co, tc_.window_packets)) {
      return absl::UnimplementedError(
          "window_packets: this engine has no ConnectionOptions window option");
    }
    // ConnectionOptions::peer is the connection endpoint's slot: 2i for
    // pair i's side a, 2i + 1 for side b (see peer_host_ / spread_).
    const bool groups = tc_.fate_sharing && sim->scenario().srv6;
    const uint32_t planes = sim->planes();
    peer_host_.resize(2 * pairs.size());
    spread_.resize(2 * pairs.size() * planes);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const auto [a, b] = pairs[i];
      peer_host_[2 * i] = b;
      peer_host_[2 * i + 1] = a;
      for (uint32_t pl = 0; pl < planes; ++pl) {
        // Path pl < planes has choice 0 + the spread; the unordered pair's,
        // so the same for both sides.
        const uint16_t s = static_cast<uint16_t>(
            sim::CarrierChoice(planes, a, b, static_cast<uint16_t>(pl)));
        spread_[2 * i * planes + pl] = s;
        spread_[(2 * i + 1) * planes + pl] = s;
      }
      if (groups) {
        co.path_groups =
            CarrierFailureGroups(sim->fabric(), a, b, co.num_paths);
      }
      co.peer = static_cast<uint32_t>(2 * i);
      absl::StatusOr<ConnId> ca = hosts_[a]->engine().CreateConnection(co);
      if (!ca.ok()) return ca.status();
      co.peer = static_cast<uint32_t>(2 * i + 1);
      absl::StatusOr<ConnId> cb = hosts_[b]->engine().CreateConnection(co);
      if (!cb.ok()) return cb.status();
      const ConnectionInfo ia = hosts_[a]->engine().LocalInfo(*ca);
      const ConnectionInfo ib = hosts_[b]->engine().LocalInfo(*cb);
      absl::Status st = hosts_[a]->engine().Connect(*ca, ib);
      if (!st.ok()) return st;
      st = hosts_[b]->engine().Connect(*cb, ia);
      if (!st.ok()) return st;
      hosts_[a]->conns.push_back(*ca);
      hosts_[b]->conns.push_back(*cb);
      hosts_[a]->by_peer[b] = *ca;
      hosts_[b]->by_peer[a] = *cb;
    }
    flow_.resize(flows.size());
    for (const Flow& f : flows) {
      PrismHost& dst = *hosts_[f.dst];
      absl::StatusOr<MemoryRegion> mr = dst.engine().RegisterMemory(
          reinterpret_cast<void*>(sim->verifier().DestAddr(f.id)), f.bytes,
          kAccessRemoteWrite);
      if (!mr.ok()) return mr.status();
      flow_[f.id].rkey = mr->rkey;
      flow_[f.id].conn = hosts_[f.src]->by_peer[f.dst];
      flow_[f.id].msgs_left = static_cast<uint32_t>(
          (f.bytes + f.message_bytes - 1) / f.message_bytes);
    }
    // The peer map is only needed to wire flows to connections.
    for (auto& h : hosts_)
      absl::flat_hash_map<uint32_t, ConnId>().swap(h->by_peer);
    return absl::OkStatus();
  }
  HostAgent* agent(uint32_t host) override { return hosts_[host].get(); }
  uint32_t data_header_bytes() const override {
    return static_cast<uint32_t>(wire::HeaderSize(wire::PacketType::kData));
  }

  Simulator* sim_ = nullptr;
  TransportConfig tc_;
  std::unique_ptr<VerifyingPlacer> placer_;
  std::vector<std::unique_ptr<PrismHost>> hosts_;
  std::vector<uint32_t> flow_pair_;
  std::vector<FlowState> flow_;
  // Per connection endpoint slot (ConnectionOptions::peer, which every
  // TxPacket carries; both sides of pair i are slots 2i and 2i + 1): the
  // peer host, and routing::PairSpread(a, b, plane)'s low 16 bits per plane
  // (slot * planes + plane), computed once at setup instead of per packet.
  // 20 bytes an endpoint at 8 planes (5 MiB for --bench-scale's 262,144).
  std::vector<uint32_t> peer_host_;
  std::vector<uint16_t> spread_;
  // Scratch arrays for the engine calls of whichever host runs (one thread,
  // never re-entered), shared so that a host costs no burst buffers: at
  // 131,072 hosts per-host copies would take ~0.8 GiB.
  RxPacket rxv_[kRxBurst];
  TxPacket txv_[kTxBurst];
  Completion cq_[64];
};

EventQueue& PrismHost::queue() { return d_->sim_->queue(); }

void PrismHost::StartFlow(Time now, uint32_t flow) {
  pending_.emplace_back(flow, 0);
  PostPending(now);
  Pull(now);
}

void PrismHost::PostPending(Time now) {
  Simulator& sim = *d_->sim_;
  size_t w = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    auto [flow, m] = pending_[i];
    const Flow& f = sim.flows()[flow];
    const FlowState& fs = d_->flow_[flow];
    const uint32_t nmsg = static_cast<uint32_t>(
        (f.bytes + f.message_bytes - 1) / f.message_bytes);
    bool blocked = false;
    for (; m < nmsg; ++m) {
      const uint64_t off = static_cast<uint64_t>(m) * f.message_bytes;
      WriteRequest wr;
      wr.wr_id = (static_cast<uint64_t>(flow) << 32) | m;
      wr.local_addr = sim.verifier().Source(flow);
      wr.length = std::min<uint64_t>(f.message_bytes, f.bytes - off);
      wr.lkey = lkey;
      wr.remote_addr = sim.verifier().DestAddr(flow) + off;
      wr.rkey = fs.rkey;
      absl::Status st = engine_.PostWrite(now, fs.conn, wr);
      if (absl::IsResourceExhausted(st)) {
        blocked = true;
        break;
      }
      if (!st.ok()) {
        ++post_errors_;
        m = nmsg;
        break;
      }
    }
    if (blocked) pending_[w++] = {flow, m};
  }
  pending_.resize(w);
}

void PrismHost::FlushRx(Time now) {
  rx_timer_.Cancel();
  if (rx_.empty()) return;
  const size_t n = rx_.size();
  for (size_t i = 0; i < n; ++i) {
    const SimPacket* p = rx_[i];
    RxPacket& r = d_->rxv_[i];
    r.data = p->header;
    r.len = p->header_len;
    r.payload = p->payload_len > 0 ? p->payload : nullptr;
    r.payload_len = p->payload_len;
    r.peer = p->src;
    r.ecn_ce = p->ecn_ce;
    r.trimmed = p->trimmed;
  }
  engine_.OnReceive(now, d_->rxv_, n);
  PacketPool& pool = d_->sim_->pool();
  for (size_t i = 0; i < n; ++i) pool.Free(rx_[i]);
  rx_.clear();
  Drain(now);
  Pull(now);
}

void PrismHost::Drain(Time now) {
  Simulator& sim = *d_->sim_;
  bool freed = false;
  while (true) {
    const size_t k = engine_.PollCompletions(d_->cq_, 64);
    for (size_t i = 0; i < k; ++i) {
      const Completion& c = d_->cq_[i];
      if (c.type == CompletionType::kConnectionError) {
        ++conn_errors_;
        continue;
      }
      if (c.type != CompletionType::kWrite) continue;
      freed = true;
      if (c.status != absl::StatusCode::kOk) {
        ++conn_errors_;
        continue;
      }
      const uint32_t flow = static_cast<uint32_t>(c.wr_id >> 32);
      if (flow >= d_->flow_.size()) continue;
      if (--d_->flow_[flow].msgs_left == 0) sim.FlowCompleted(now, flow);
    }
    if (k < 64) break;
  }
  if (freed && !pending_.empty()) PostPending(now);
}

uint32_t PrismHost::CarrierChoice(uint32_t slot, uint16_t path) const {
  const uint32_t planes = d_->sim_->planes();
  const uint32_t plane = path % planes;
  return path / planes +
         d_->spread_[static_cast<size_t>(slot) * planes + plane];
}

void PrismHost::Pull(Time now) {
  Simulator& sim = *d_->sim_;
  Fabric& fab = sim.fabric();
  const uint32_t planes = sim.planes();
  const bool srv6 = sim.scenario().srv6;
  while (true) {
    const size_t room = fab.HostRoom(host_);
    if (room == 0) break;
    const size_t want = std::min(room, kTxBurst);
    const size_t n = engine_.PollTransmit(now, d_->txv_, want);
    for (size_t i = 0; i < n; ++i) {
      const TxPacket& t = d_->txv_[i];
      SimPacket* p = sim.pool().Alloc();
      ResetPacket(p);
      if (t.header_len > kSimHeaderBytes) {  // not in this wire format
        ++post_errors_;
        fab.Drop(p, DropReason::kNoRoute);
        continue;
      }
      std::memcpy(p->header, t.header, t.header_len);
      p->header_len = t.header_len;
      p->payload = t.payload;
      p->payload_len = t.payload_len;
      // t.peer is the connection's slot (ConnectionOptions::peer, copied by
      // the engine); an unknown one is dropped as unroutable.
      const uint32_t slot = t.peer;
      const uint32_t peer =
          slot < d_->peer_host_.size() ? d_->peer_host_[slot] : 0xffffffffu;
      p->src = host_;
      p->dst = peer;
      p->path = t.path;
      p->tclass = t.tclass;
      const uint16_t plane = static_cast<uint16_t>(t.path % planes);
      p->plane = static_cast<uint8_t>(plane);
      const uint32_t a = std::min(host_, peer), b = std::max(host_, peer);
      uint64_t x = (static_cast<uint64_t>(a) << 40) ^
                   (static_cast<uint64_t>(b) << 16) ^ t.path;
      x *= 0x9e3779b97f4a7c15ull;
      p->entropy = static_cast<uint32_t>(x >> 32);
      if (peer >= sim.topology().num_hosts()) {
        fab.Drop(p, DropReason::kNoRoute);
        continue;
      }
      if (srv6) {
        fab.BuildCarrier(host_, peer, plane, CarrierChoice(slot, t.path), p);
        uint32_t dead_port = 0;
        const Time down =
            fab.CarrierDownSince(host_, peer, plane, p, &dead_port);
        if (down >= 0) {
          CountDeadPath(p, down, dead_port, now);
          if (d_->tc_.oracle_reroute_after >= 0) {
            OracleReroute(p, slot, dead_port, down, now);
          }
        }
      }
      sim.Send(now, host_, p);
    }
    if (n < want) break;
  }
  Drain(now);
  const Time next = engine_.NextEventTime();
  if (next == kTimeInfinite) {
    wake_.Cancel();
  } else if (next > now) {
    wake_.Arm(queue(), next);
  } else {
    ++spurious_;
    wake_.Arm(queue(), now + 100 * kNanosecond);
  }
}

bool PrismHost::OracleReroute(SimPacket* p, uint32_t slot, uint32_t dead_port,
                              Time down_since, Time now) {
  const auto it =
      oracle_first_.try_emplace(std::make_pair(dead_port, down_since), now)
          .first;
  if (now - it->second < d_->tc_.oracle_reroute_after) return false;
  Fabric& fab = d_->sim_->fabric();
  const uint16_t plane = p->plane;
  for (int k = 0; k < 64; ++k) {
    oracle_rng_ += 0x9e3779b97f4a7c15ull;  // splitmix64
    uint64_t z = oracle_rng_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    fab.BuildCarrier(host_, p->dst, plane, static_cast<uint32_t>(z >> 40), p);
    if (fab.CarrierDownSince(host_, p->dst, plane, p, nullptr) < 0) {
      return true;
    }
  }
  // No live route found: the packet takes its own.
  fab.BuildCarrier(host_, p->dst, plane, CarrierChoice(slot, p->path), p);
  return false;
}

void PrismHost::CountDeadPath(const SimPacket* p, Time down_since,
                              uint32_t dead_port, Time now) {
  if (p->header_len < wire::kCommonHeaderSize) return;
  const auto type = static_cast<wire::PacketType>(p->header[3]);
  if (type == wire::PacketType::kProbe) {
    ++dead_probes_;
    return;
  }
  if (type != wire::PacketType::kData || p->header_len < 54) {
    ++dead_ctl_;
    return;
  }
  if (Get16(p->header + 52) & wire::kFlagRetransmit) {
    ++dead_retx_;
  } else {
    ++dead_data_;
  }
  const uint32_t group = (static_cast<uint32_t>(p->plane) << 16) |
                         (p->usid_len > 1 ? p->usids[1] : 0);
  dead_groups_.emplace(p->dst, group, down_since);
  dead_hops_.emplace(dead_port, down_since);
  const uint64_t key = (static_cast<uint64_t>(p->dst) << 32) | p->path;
  auto [it, fresh] = dead_use_.try_emplace(key, DeadUse{down_since, now});
  if (!fresh) {
    if (it->second.since != down_since) {
      dead_spans_.push_back(it->second.last - it->second.since);
      it->second.since = down_since;
    }
    it->second.last = now;
  }
}

void PrismHost::AddTotals(TransportTotals* t) const {
  for (ConnId c : conns) {
    absl::StatusOr<ConnectionStats> s = engine_.connection_stats(c);
    if (!s.ok()) continue;
    t->data_packets += s->tx_data_packets;
    t->retransmissions += s->retransmitted_packets;
    t->retransmitted_bytes += s->retransmitted_bytes;
    t->timeouts += s->rto_events;
    t->path_retirements += s->paths_retired;
    t->path_timeouts += s->path_timeouts;
    t->paths_restored += s->paths_restored;
    t->spurious_losses += s->spurious_losses;
    t->paths_unretired += s->paths_unretired;
    t->probes += s->probes_sent;
    t->tail_loss_probes += s->tail_loss_probes;
    t->trims_seen += s->rx_trimmed;
    t->ecn_echoes += s->ecn_echoes;
    t->rnr_nacks_received += s->rnr_nacks_received;
    t->rnr_probes_sent += s->rnr_probes_sent;
    t->rnr_timeouts += s->rnr_timeouts;
  }
  const EngineStats e = engine_.stats();
  t->rx_drop_no_buffer += e.rx_drop_no_buffer;
  t->cq_delivery_holds += e.cq_delivery_holds;
  t->writes_refused_cq_full += e.writes_refused_cq_full;
  t->engine_rx_drops += e.rx_drop_malformed + e.rx_drop_bad_magic +
                        e.rx_drop_bad_version + e.rx_drop_bad_checksum +
                        e.rx_drop_payload_corrupt + e.rx_drop_unknown_conn +
                        e.rx_drop_bad_key + e.rx_drop_bad_range +
                        e.rx_drop_out_of_window + e.rx_drop_placement;
  t->connection_errors += conn_errors_ + post_errors_;
  t->dead_path_data += dead_data_;
  t->dead_path_retransmissions += dead_retx_;
  t->dead_path_probes += dead_probes_;
  t->dead_path_control += dead_ctl_;
  t->dead_route_group_outages += dead_groups_.size();
  t->dead_hop_outages += dead_hops_.size();
  t->dead_path_use_spans.insert(t->dead_path_use_spans.end(),
                                dead_spans_.begin(), dead_spans_.end());
  // Open outages in hash order: sort for a deterministic result.
  const size_t open_from = t->dead_path_use_spans.size();
  for (const auto& [key, u] : dead_use_) {
    t->dead_path_use_spans.push_back(u.last - u.since);
  }
  std::sort(t->dead_path_use_spans.begin() + open_from,
            t->dead_path_use_spans.end());
}

}  // namespace

uint32_t CarrierChoice(uint32_t planes, uint32_t host, uint32_t peer,
                       uint16_t path) {
  const uint16_t plane = static_cast<uint16_t>(path % planes);
  return path / planes +
         static_cast<uint32_t>(routing::PairSpread(host, peer, plane) & 0xFFFF);
}

std::vector<uint16_t> CarrierFailureGroups(const Fabric& fabric, uint32_t host,
                                           uint32_t peer, uint16_t num_paths) {
  const uint32_t planes = fabric.planes();
  std::vector<uint16_t> g(num_paths, kNoFailureGroup);
  for (uint32_t x = 0; x < num_paths; ++x) {
    const uint16_t plane = static_cast<uint16_t>(x % planes);
    const uint32_t fanout = fabric.CarrierFanout(host, peer, plane);
    if (fanout == 0) continue;
    const uint32_t choice =
        CarrierChoice(planes, host, peer, static_cast<uint16_t>(x));
    g[x] = routing::FailureGroupOf(plane, choice % fanout, fanout);
  }
  return g;
}

std::unique_ptr<TransportDriver> MakePrismDriver(const TransportConfig& tc) {
  return std::make_unique<PrismDriver>(tc);
}

absl::StatusOr<std::unique_ptr<TransportDriver>> MakeTransportDriver(
    const TransportConfig& tc) {
  if (tc.type == "prism") return MakePrismDriver(tc);
  if (tc.type == "roce" || tc.type == "multiqp") {
    return MakeBaselineDriver(tc);
  }
  return absl::InvalidArgumentError("unknown transport type '" + tc.type + "'");
}

}  // namespace prism::sim
