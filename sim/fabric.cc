#include "sim/fabric.h"

#include <algorithm>
#include <deque>

#include "absl/strings/str_format.h"

namespace prism::sim {

using routing::NodeKind;

const char* DropReasonName(DropReason r) {
  switch (r) {
    case DropReason::kBufferOverflow:
      return "buffer_overflow";
    case DropReason::kControlOverflow:
      return "control_overflow";
    case DropReason::kLinkDown:
      return "link_down";
    case DropReason::kLinkDownInFlight:
      return "link_down_in_flight";
    case DropReason::kRandomLoss:
      return "random_loss";
    case DropReason::kSwitchDown:
      return "switch_down";
    case DropReason::kNoRoute:
      return "no_route";
    case DropReason::kUsidMismatch:
      return "usid_mismatch";
    case DropReason::kHopLimit:
      return "hop_limit";
    case DropReason::kNicOverflow:
      return "nic_overflow";
    case DropReason::kNicPortDown:
      return "nic_port_down";
    case DropReason::kReceiverDiscard:
      return "receiver_discard";
    case DropReason::kCount:
      break;
  }
  return "?";
}

Fabric::Fabric(const routing::Topology* topo, const FabricConfig& config,
               EventQueue* queue, PacketPool* pool, uint64_t seed,
               FabricClient* client)
    : topo_(topo),
      config_(config),
      q_(queue),
      pool_(pool),
      rng_(seed),
      client_(client) {}

absl::Status Fabric::Init() {
  const routing::Topology& t = *topo_;
  planes_ = t.num_planes();
  hosts_ = t.num_hosts();
  if (planes_ == 0 || planes_ > 64) {
    return absl::InvalidArgumentError("fabric: planes must be 1..64");
  }
  nic_pull_below_ = config_.nic_queue_packets - 1;
  if (config_.nic_pull_watermark >= 0) {
    nic_pull_below_ = std::min(
        static_cast<uint32_t>(config_.nic_pull_watermark), nic_pull_below_);
  }
  trim_threshold_ =
      config_.trim_threshold_bytes == 0
          ? config_.buffer_bytes
          : std::min(config_.trim_threshold_bytes, config_.buffer_bytes);
  const size_t n = t.num_nodes();
  nodes_.assign(n, NodeInfo{});
  uint64_t total_ports = 0;
  for (size_t i = 0; i < n; ++i) {
    nodes_[i].port_base = static_cast<uint32_t>(total_ports);
    nodes_[i].num_ports = static_cast<uint32_t>(t.ports(i).size());
    total_ports += t.ports(i).size();
    const routing::Node& nd = t.node(i);
    nodes_[i].kind = nd.kind;
    nodes_[i].plane = nd.plane;
    nodes_[i].usid = nd.usid;
    nodes_[i].seed = rng_.Next();
  }
  if (total_ports >= 0xffffffffull) {
    return absl::InvalidArgumentError("fabric: too many ports");
  }
  ports_.assign(total_ports, Port{});
  link_port_.assign(2 * t.num_links(), kNone);
  link_up_.assign(t.num_links(), 1);
  for (size_t i = 0; i < n; ++i) {
    const auto& pl = t.ports(i);
    for (size_t k = 0; k < pl.size(); ++k) {
      const uint32_t l = pl[k];
      const routing::Link& lk = t.link(l);
      const uint32_t id = nodes_[i].port_base + static_cast<uint32_t>(k);
      Port& p = ports_[id];
      const bool from_a = lk.a == i;
      p.from = static_cast<uint32_t>(i);
      p.to = from_a ? lk.b : lk.a;
      p.link = l;
      p.rate_bps = p.nominal_bps = lk.rate_bps;
      p.delay = lk.delay;
      p.host_port = nodes_[i].kind == NodeKind::kHost;
      p.last_hop = !p.host_port && p.to < hosts_;
      p.lazy = !p.host_port && config_.lazy_switch_ports;
      link_port_[2 * l + (from_a ? 0 : 1)] = id;
    }
  }
  port_to_.resize(ports_.size());
  port_from_.resize(ports_.size());
  for (size_t id = 0; id < ports_.size(); ++id) {
    port_to_[id] = ports_[id].to;
    port_from_[id] = ports_[id].from;
  }
  for (size_t l = 0; l < t.num_links(); ++l) {
    if (link_port_[2 * l] == kNone || link_port_[2 * l + 1] == kNone) {
      return absl::InternalError(
          absl::StrFormat("fabric: link %d not attached at both ends", l));
    }
  }
  // Host ports and T0 -> host ports.
  host_port_.assign(static_cast<size_t>(hosts_) * planes_, kNone);
  host_down_port_.assign(static_cast<size_t>(hosts_) * planes_, kNone);
  host_down_from_.assign(static_cast<size_t>(hosts_) * planes_, kNone);
  host_t0_index_.assign(hosts_, 0);
  for (uint32_t h = 0; h < hosts_; ++h) {
    host_t0_index_[h] = t.host_t0_index(h);
    for (uint32_t p = 0; p < planes_; ++p) {
      const uint32_t l = t.host_link(h, static_cast<uint16_t>(p));
      const routing::Link& lk = t.link(l);
      const int dir_from_host = lk.a == h ? 0 : 1;
      host_port_[h * planes_ + p] = link_port_[2 * l + dir_from_host];
      host_down_port_[h * planes_ + p] = link_port_[2 * l + 1 - dir_from_host];
      host_down_from_[h * planes_ + p] =
          ports_[host_down_port_[h * planes_ + p]].from;
    }
  }
  nic_room_.assign(static_cast<size_t>(hosts_) * planes_, 0);
  host_room_.assign(hosts_, 0);
  for (uint32_t h = 0; h < hosts_; ++h) {
    for (uint32_t p = 0; p < planes_; ++p) {
      Port& pt = ports_[host_port_[h * planes_ + p]];
      pt.plane = static_cast<uint8_t>(p);
      SetNicRoom(pt);
    }
  }
  absl::Status pst = BuildProfiles();
  if (!pst.ok()) return pst;
  // Neighbour tables and uSID maps.
  nbr_.resize(total_ports);
  for (size_t i = 0; i < n; ++i) {
    NodeInfo& ni = nodes_[i];
    ni.nbr_base = ni.port_base;
    for (uint32_t k = 0; k < ni.num_ports; ++k) {
      nbr_[ni.port_base + k] = {ports_[ni.port_base + k].to, ni.port_base + k};
    }
    std::sort(nbr_.begin() + ni.port_base,
              nbr_.begin() + ni.port_base + ni.num_ports);
  }
  usid_to_node_.assign(planes_, std::vector<uint32_t>());
  t0_nodes_.assign(planes_, std::vector<uint32_t>());
  plane_switches_.assign(planes_, std::vector<uint32_t>());
  for (uint32_t p = 0; p < planes_; ++p) usid_to_node_[p].assign(65536, kNone);
  for (size_t i = hosts_; i < n; ++i) {
    NodeInfo& ni = nodes_[i];
    if (ni.kind == NodeKind::kHost) continue;
    if (ni.plane >= planes_) {
      return absl::InternalError("fabric: switch plane out of range");
    }
    if (usid_to_node_[ni.plane][ni.usid] != kNone) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fabric: duplicate uSID %d in plane %d", ni.usid, ni.plane));
    }
    usid_to_node_[ni.plane][ni.usid] = static_cast<uint32_t>(i);
    plane_switches_[ni.plane].push_back(static_cast<uint32_t>(i));
    if (ni.kind == NodeKind::kT0) {
      const uint32_t idx = t.node(i).index;
      auto& v = t0_nodes_[ni.plane];
      if (v.size() <= idx) v.resize(idx + 1, kNone);
      v[idx] = static_cast<uint32_t>(i);
      ni.t0_index = idx;
    }
  }
  BuildDirect();
  // Tables: plane 0, shared with identical planes; others computed.
  routes_.assign(n, nullptr);
  for (Hop& h : hop_) h.r = nullptr;
  ComputeRoutes(0);
  for (uint32_t p = 1; p < planes_; ++p) {
    bool same = plane_switches_[p].size() == plane_switches_[0].size();
    for (size_t i = 0; same && i < plane_switches_[p].size(); ++i) {
      const uint32_t a = plane_switches_[0][i], b = plane_switches_[p][i];
      same = nodes_[a].kind == nodes_[b].kind &&
             t.node(a).index == t.node(b).index &&
             nodes_[a].num_ports == nodes_[b].num_ports;
    }
    if (!same) {
      ComputeRoutes(static_cast<uint16_t>(p));
      continue;
    }
    for (size_t i = 0; i < plane_switches_[p].size(); ++i) {
      SetRoutes(plane_switches_[p][i], routes_[plane_switches_[0][i]]);
    }
  }
  return absl::OkStatus();
}

absl::Status Fabric::BuildProfiles() {
  QueueProfile base;
  base.trimming = config_.trimming;
  base.ecn = config_.ecn;
  base.trim_threshold = trim_threshold_;
  base.kmin = config_.ecn_kmin_bytes;
  base.kmax = config_.ecn_kmax_bytes;
  base.pmax = config_.ecn_pmax;
  profiles_.assign(1, base);
  const routing::Topology& t = *topo_;
  for (size_t id = 0; id < ports_.size(); ++id) {
    Port& pt = ports_[id];
    if (pt.host_port) continue;  // NIC ports: no ECN, never trim
    QueueProfile q = base;
    if (pt.last_hop) {
      q.trimming = q.trimming && config_.trim_last_hop;
      q.ecn = q.ecn && config_.ecn_last_hop;
    }
    const routing::Node& from = t.node(pt.from);
    const bool down = static_cast<int>(nodes_[pt.to].kind) <
                      static_cast<int>(nodes_[pt.from].kind);
    for (const QueueOverride& o : config_.overrides) {
      if (o.tier >= 0 && o.tier != static_cast<int>(from.kind)) continue;
      if (o.plane >= 0 && o.plane != static_cast<int>(from.plane)) continue;
      if (o.index >= 0 && o.index != static_cast<int64_t>(from.index)) continue;
      if (o.ports == QueueOverride::Ports::kDown && !down) continue;
      if (o.ports == QueueOverride::Ports::kUp && down) continue;
      if (o.trimming) q.trimming = *o.trimming;
      if (o.trim_threshold_bytes) {
        q.trim_threshold =
            *o.trim_threshold_bytes == 0
                ? config_.buffer_bytes
                : std::min(*o.trim_threshold_bytes, config_.buffer_bytes);
      }
      if (o.ecn) q.ecn = *o.ecn;
      if (o.ecn_kmin_bytes) q.kmin = *o.ecn_kmin_bytes;
      if (o.ecn_kmax_bytes) q.kmax = *o.ecn_kmax_bytes;
      if (o.ecn_pmax) q.pmax = *o.ecn_pmax;
    }
    if (q.ecn && q.kmax <= q.kmin) {
      return absl::InvalidArgumentError(
          absl::StrFormat("fabric: port %d: ECN kmax %d must exceed kmin %d",
                          id, q.kmax, q.kmin));
    }
    size_t k = 0;
    while (k < profiles_.size() && !(profiles_[k] == q)) ++k;
    if (k == profiles_.size()) {
      if (profiles_.size() >= 256) {
        return absl::InvalidArgumentError(
            "fabric: more than 256 distinct queue profiles");
      }
      profiles_.push_back(q);
    }
    pt.profile = static_cast<uint8_t>(k);
  }
  return absl::OkStatus();
}

void Fabric::ComputeRoutes(uint16_t plane) {
  const std::vector<uint32_t>& sw = plane_switches_[plane];
  const std::vector<uint32_t>& t0s = t0_nodes_[plane];
  std::vector<std::unique_ptr<Routes>> built(sw.size());
  // Local index of each switch node within the plane.
  std::vector<int32_t> dist(nodes_.size(), -1);
  for (size_t i = 0; i < sw.size(); ++i) {
    built[i] = std::make_unique<Routes>();
    built[i]->dst_group.assign(t0s.size(), kNone);
    built[i]->group_begin.push_back(0);
  }
  std::vector<uint32_t> local(nodes_.size(), kNone);
  for (size_t i = 0; i < sw.size(); ++i)
    local[sw[i]] = static_cast<uint32_t>(i);
  auto usable = [&](const Port& p) {
    return p.up && p.to >= hosts_ && nodes_[p.to].up && nodes_[p.from].up;
  };
  std::vector<uint32_t> frontier;
  std::vector<uint16_t> group;
  for (size_t d = 0; d < t0s.size(); ++d) {
    const uint32_t dn = t0s[d];
    if (dn == kNone || !nodes_[dn].up) continue;
    for (uint32_t s : sw) dist[s] = -1;
    frontier.clear();
    frontier.push_back(dn);
    dist[dn] = 0;
    for (size_t head = 0; head < frontier.size(); ++head) {
      const uint32_t u = frontier[head];
      const NodeInfo& ni = nodes_[u];
      for (uint32_t k = 0; k < ni.num_ports; ++k) {
        const Port& p = ports_[ni.port_base + k];
        if (!usable(p) || dist[p.to] >= 0) continue;
        dist[p.to] = dist[u] + 1;
        frontier.push_back(p.to);
      }
    }
    for (size_t i = 0; i < sw.size(); ++i) {
      const uint32_t s = sw[i];
      if (s == dn || dist[s] <= 0) continue;
      const NodeInfo& ni = nodes_[s];
      group.clear();
      for (uint32_t k = 0; k < ni.num_ports; ++k) {
        const Port& p = ports_[ni.port_base + k];
        if (usable(p) && dist[p.to] == dist[s] - 1) {
          group.push_back(static_cast<uint16_t>(k));
        }
      }
      if (group.empty()) continue;
      Routes& r = *built[i];
      // Reuse one of the last few groups when identical (common case).
      uint32_t found = kNone;
      const uint32_t ng = static_cast<uint32_t>(r.group_begin.size() - 1);
      for (uint32_t g = ng; g > 0 && ng - g < 4; --g) {
        const uint32_t b = r.group_begin[g - 1], e = r.group_begin[g];
        if (e - b == group.size() &&
            std::equal(group.begin(), group.end(), r.group_ports.begin() + b)) {
          found = g - 1;
          break;
        }
      }
      if (found == kNone) {
        found = ng;
        r.group_ports.insert(r.group_ports.end(), group.begin(), group.end());
        r.group_begin.push_back(static_cast<uint32_t>(r.group_ports.size()));
      }
      r.dst_group[d] = found;
    }
  }
  for (size_t i = 0; i < sw.size(); ++i) {
    Routes& r = *built[i];
    r.dst.assign(r.dst_group.size(), Span());
    for (size_t d = 0; d < r.dst_group.size(); ++d) {
      const uint32_t g = r.dst_group[d];
      if (g == kNone) continue;
      r.dst[d] = {r.group_begin[g], r.group_begin[g + 1] - r.group_begin[g]};
    }
    std::vector<uint32_t>().swap(r.dst_group);  // (built; dst reads it)
    SetRoutes(sw[i], std::move(built[i]));
  }
}

void Fabric::RecomputeRoutes(uint16_t plane) {
  if (plane < planes_) ComputeRoutes(plane);
}

void Fabric::ScheduleConvergence(Time now, uint16_t plane) {
  q_->Push(now + config_.routing_convergence, kConvergeKind, plane, this);
}

void Fabric::HandleEvent(const Event& e) {
  switch (e.kind) {
    case kArriveKind:
      Arrive(e.time, e.arg, static_cast<SimPacket*>(e.ptr));
      break;
    case kPortDoneKind:
      PortDone(e.time, e.arg);
      break;
    case kWireKind:
      WireArrive(e.time, e.arg, static_cast<SimPacket*>(e.ptr));
      break;
    case kConvergeKind:
      RecomputeRoutes(static_cast<uint16_t>(e.arg));
      break;
    default:
      break;
  }
}

void Fabric::Drop(SimPacket* p, DropReason r) {
  ++drops_[static_cast<size_t>(r)];
  pool_->Free(p);
}

uint64_t Fabric::total_drops() const {
  uint64_t s = 0;
  for (uint64_t d : drops_) s += d;
  return s;
}

void Fabric::HostSend(Time now, uint32_t host, uint16_t plane, SimPacket* p) {
  const uint32_t id = host_port_[host * planes_ + plane];
  Port& pt = ports_[id];
  if (!pt.up) {
    Drop(p, DropReason::kNicPortDown);
    return;
  }
  p->plane = static_cast<uint8_t>(plane);
  p->hops = 0;
  const uint32_t size = WireSize(p);
  if (pt.dq_bytes + pt.cq_bytes + size > config_.nic_buffer_bytes) {
    ++pt.c.drops;
    Drop(p, DropReason::kNicOverflow);
    return;
  }
  p->next = nullptr;
  p->when = now;
  if (p->tclass == TrafficClass::kControl) {
    if (pt.cq_tail)
      pt.cq_tail->next = p;
    else
      pt.cq_head = p;
    pt.cq_tail = p;
    pt.cq_bytes += size;
    pt.max_cq_bytes = std::max(pt.max_cq_bytes, pt.cq_bytes);
  } else {
    if (pt.dq_tail)
      pt.dq_tail->next = p;
    else
      pt.dq_head = p;
    pt.dq_tail = p;
    pt.dq_bytes += size;
    pt.max_dq_bytes = std::max(pt.max_dq_bytes, pt.dq_bytes);
  }
  ++pt.q_packets;
  SetNicRoom(pt);
  ++queued_packets_;
  if (!pt.done_pending && now >= pt.busy_until) StartTx(now, id);
}

void Fabric::BuildDirect() {
  const size_t n = nodes_.size();
  direct_range_.assign(n, DirectRange());
  direct_.clear();
  hop_.assign(n, Hop());
  for (size_t i = 0; i < n; ++i) {
    hop_[i].port_base = nodes_[i].port_base;
    hop_[i].usid = nodes_[i].kind == NodeKind::kHost ? 0 : nodes_[i].usid;
  }
  for (size_t i = hosts_; i < n; ++i) {
    const NodeInfo& ni = nodes_[i];
    if (ni.kind == NodeKind::kHost || ni.num_ports == 0 ||
        ni.num_ports > 0xffff) {
      continue;
    }
    uint32_t lo = 0xffff, hi = 0;
    bool ok = true;
    for (uint32_t k = 0; k < ni.num_ports && ok; ++k) {
      const uint32_t to = nbr_[ni.port_base + k].first;
      if (to < hosts_) continue;  // hosts have no uSID
      const NodeInfo& nj = nodes_[to];
      ok = nj.kind != NodeKind::kHost && nj.plane == ni.plane;
      lo = std::min<uint32_t>(lo, nj.usid);
      hi = std::max<uint32_t>(hi, nj.usid);
    }
    if (!ok || lo > hi) continue;
    const uint32_t span = hi - lo + 1;
    // A short range only (clos2 / fat tree tiers are dense).
    if (span > 0xffff || span > 4 * ni.num_ports + 64) continue;
    DirectRange& dr = direct_range_[i];
    dr.base = static_cast<uint32_t>(direct_.size());
    dr.lo = static_cast<uint16_t>(lo);
    dr.span = static_cast<uint16_t>(span);
    dr.ok = true;
    direct_.resize(direct_.size() + span);
    for (uint32_t k = 0; k < ni.num_ports; ++k) {
      const auto& [to, port] = nbr_[ni.port_base + k];
      if (to < hosts_) continue;
      DirectSlot& s = direct_[dr.base + (nodes_[to].usid - lo)];
      if (s.cnt == 0) {
        s.port = port;
        s.off = static_cast<uint16_t>(k);
      }
      ++s.cnt;
    }
  }
}

uint32_t Fabric::NeighborPort(uint32_t node, uint32_t nbr,
                              uint64_t hash) const {
  const NodeInfo& ni = nodes_[node];
  auto b = nbr_.begin() + ni.nbr_base;
  auto e = b + ni.num_ports;
  auto lo = std::lower_bound(b, e, std::make_pair(nbr, 0u));
  if (lo == e || lo->first != nbr) return kNone;
  auto hi = lo + 1;
  while (hi != e && hi->first == nbr) ++hi;
  const size_t cnt = static_cast<size_t>(hi - lo);
  return cnt == 1 ? lo->second : (lo + static_cast<size_t>(hash % cnt))->second;
}

void Fabric::BuildCarrier(uint32_t src, uint32_t dst, uint16_t plane,
                          uint32_t choice, SimPacket* p) const {
  p->srv6 = true;
  p->usid_len = 0;
  p->usid_pos = 0;
  const std::vector<uint32_t>& t0s = t0_nodes_[plane];
  uint32_t cur = t0s[host_t0_index_[src]];
  const uint32_t dst_t0 = host_t0_index_[dst];
  const uint32_t target = t0s[dst_t0];
  const Hop* hop = hop_.data();
  p->usids[p->usid_len++] = hop[cur].usid;
  while (cur != target && p->usid_len < kMaxUsids) {
    const Hop& hc = hop[cur];
    // Static carriers come from the tables as built at start (or after the
    // last convergence); they do not follow later failures by themselves.
    if (hc.r == nullptr) break;
    const Span s = hc.r->dst[dst_t0];
    if (s.cnt == 0) break;
    uint32_t pick = 0;
    if (s.cnt > 1) {  // (a single next hop, e.g. T1 -> T0: no division)
      pick = choice % s.cnt;
      choice /= s.cnt;
    }
    cur = port_to_[hc.port_base + hc.r->group_ports[s.begin + pick]];
    // (hop[cur]: what the next step reads anyway)
    p->usids[p->usid_len++] = hop[cur].usid;
  }
}

uint32_t Fabric::CarrierFanout(uint32_t src, uint32_t dst,
                               uint16_t plane) const {
  const std::vector<uint32_t>& t0s = t0_nodes_[plane];
  const uint32_t cur = t0s[host_t0_index_[src]];
  const uint32_t dst_t0 = host_t0_index_[dst];
  if (cur == t0s[dst_t0]) return 0;
  const Hop& hc = hop_[cur];
  return hc.r == nullptr ? 0 : hc.r->dst[dst_t0].cnt;
}

Time Fabric::CarrierDownSince(uint32_t src, uint32_t dst, uint16_t plane,
                              const SimPacket* p, uint32_t* dead_port) const {
  if (ports_down_ == 0 || !p->srv6 || p->usid_len == 0 || src >= hosts_ ||
      dst >= hosts_ || plane >= planes_) {
    return -1;  // (every port up: no hop is dead)
  }
  Time since = -1;
  auto dead = [&](uint32_t id) {
    const Port& pt = ports_[id];
    if (pt.up || (since >= 0 && pt.down_since >= since)) return;
    since = pt.down_since;
    if (dead_port != nullptr) *dead_port = id;
  };
  dead(host_port_[src * planes_ + plane]);
  const std::vector<uint32_t>& by_usid = usid_to_node_[plane];
  uint32_t cur = by_usid[p->usids[0]];
  for (uint32_t i = 1; i < p->usid_len && cur != kNone; ++i) {
    const uint32_t next = by_usid[p->usids[i]];
    if (next == kNone) break;
    const uint32_t port = NeighborPort(cur, next, 0);
    if (port == kNone) break;
    dead(port);
    cur = next;
  }
  dead(host_down_port_[dst * planes_ + plane]);
  return since;
}

inline uint32_t Fabric::OutPort(uint32_t node, const NodeInfo& ni,
                                const SimPacket* p, uint32_t usid_pos) const {
  const uint32_t plane = p->plane;
  // The per-switch hash, computed only where a choice is made.
  auto hash = [&] {
    return Mix(ni.seed ^
               (static_cast<uint64_t>(p->entropy) << 32 ^
                (static_cast<uint64_t>(p->src) * 0x9e3779b97f4a7c15ull) ^
                p->dst));
  };
  if (p->srv6) {
    if (usid_pos < p->usid_len) {
      const uint16_t usid = p->usids[usid_pos];
      const DirectRange& dr = direct_range_[node];
      if (dr.ok && plane == ni.plane) {
        const uint32_t off = static_cast<uint32_t>(usid - dr.lo);
        if (off >= dr.span) return kNone;
        const DirectSlot& s = direct_[dr.base + off];
        if (s.cnt <= 1) return s.cnt == 1 ? s.port : kNone;
        return nbr_[ni.port_base + s.off + hash() % s.cnt].second;
      }
      const uint32_t next = usid_to_node_[plane][usid];
      return next != kNone ? NeighborPort(node, next, hash()) : kNone;
    }
    const size_t hi = static_cast<size_t>(p->dst) * planes_ + plane;
    return host_down_from_[hi] == node ? host_down_port_[hi] : kNone;
  }
  const size_t hi = static_cast<size_t>(p->dst) * planes_ + plane;
  if (host_down_from_[hi] == node) return host_down_port_[hi];
  const Routes* r = hop_[node].r;
  if (r == nullptr) return kNone;
  const Span s = r->dst[host_t0_index_[p->dst]];
  if (s.cnt == 0) return kNone;
  return ni.port_base +
         r->group_ports[s.begin + (s.cnt == 1 ? 0 : hash() % s.cnt)];
}

uint32_t Fabric::PeekOutPort(uint32_t wire_port, const SimPacket* p,
                             bool* exact) const {
  *exact = false;
  const uint32_t node = port_to_[wire_port];
  if (node < hosts_ || node >= nodes_.size()) return kNone;
  // Arrive matches the carrier's next uSID and shifts it first (a mismatch
  // is dropped there, before the port is used).
  const uint32_t pos =
      p->srv6 && p->usid_pos < p->usid_len ? p->usid_pos + 1 : p->usid_pos;
  *exact = true;  // (at this routes_epoch())
  return OutPort(node, nodes_[node], p, pos);
}

inline void Fabric::Arrive(Time now, uint32_t node, SimPacket* p,
                           uint32_t out) {
  --on_wire_;
  if (ports_[p->last_port].epoch != p->epoch) {
    Drop(p, DropReason::kLinkDownInFlight);
    return;
  }
  if (node < hosts_) {
    client_->DeliverToHost(now, node, p);
    return;
  }
  const NodeInfo& ni = nodes_[node];
  if (!ni.up) {
    Drop(p, DropReason::kSwitchDown);
    return;
  }
  if (++p->hops > config_.max_hops) {
    Drop(p, DropReason::kHopLimit);
    return;
  }
  if (p->srv6 && p->usid_pos < p->usid_len) {
    if (p->usids[p->usid_pos] != ni.usid) {
      Drop(p, DropReason::kUsidMismatch);
      return;
    }
    ++p->usid_pos;
  }
  if (out == kNone) out = OutPort(node, ni, p, p->usid_pos);
  if (out == kNone) {
    Drop(p, DropReason::kNoRoute);
    return;
  }
  Enqueue(now, out, p);
}

inline void Fabric::Enqueue(Time now, uint32_t id, SimPacket* p) {
  Port& pt = ports_[id];
  if (!pt.up) {
    ++pt.c.drops;
    Drop(p, DropReason::kLinkDown);
    return;
  }
  // What left before now is no longer queued (ECN and trimming look at the
  // queue as it is now).
  if (pt.lazy) CatchUp(now, id);
  uint32_t size = WireSize(p);
  bool control = p->tclass == TrafficClass::kControl || p->trimmed;
  if (!control) {
    const QueueProfile& qp = profiles_[pt.profile];
    if (pt.dq_bytes + size > qp.trim_threshold) {
      if (!qp.trimming) {
        ++pt.c.drops;
        Drop(p, DropReason::kBufferOverflow);
        return;
      }
      p->trimmed = true;
      p->payload = nullptr;
      p->payload_len = 0;
      size = WireSize(p);
      control = true;
      ++pt.c.trims;
      ++trims_;
    } else if (qp.ecn && pt.dq_bytes > qp.kmin) {
      bool mark = pt.dq_bytes >= qp.kmax;
      if (!mark) {
        const double frac = static_cast<double>(pt.dq_bytes - qp.kmin) /
                            static_cast<double>(qp.kmax - qp.kmin);
        mark = rng_.Bernoulli(frac * qp.pmax);
      }
      if (mark && !p->ecn_ce) {
        p->ecn_ce = true;
        ++pt.c.ecn_marked;
        ++ecn_marks_;
      }
    }
  }
  p->next = nullptr;
  p->when = now;
  if (control) {
    if (pt.cq_bytes + size > config_.control_buffer_bytes) {
      ++pt.c.drops;
      Drop(p, DropReason::kControlOverflow);
      return;
    }
    if (pt.cq_tail)
      pt.cq_tail->next = p;
    else
      pt.cq_head = p;
    pt.cq_tail = p;
    pt.cq_bytes += size;
    if (pt.cq_bytes > pt.max_cq_bytes) pt.max_cq_bytes = pt.cq_bytes;
  } else {
    if (pt.dq_tail)
      pt.dq_tail->next = p;
    else
      pt.dq_head = p;
    pt.dq_tail = p;
    pt.dq_bytes += size;
    if (pt.dq_bytes > pt.max_dq_bytes) pt.max_dq_bytes = pt.dq_bytes;
  }
  ++pt.q_packets;
  ++queued_packets_;
  if (pt.lazy) {
    // Caught up: a port still busy has a packet on the wire (or a port-done
    // pending) whose event will transmit what waits.
    if (now >= pt.busy_until) StartTx(now, id);
    return;
  }
  if (pt.done_pending) return;
  if (now >= pt.busy_until) {
    StartTx(now, id);
  } else {
    pt.done_pending = true;
    q_->Push(pt.busy_until, kPortDoneKind, id, &pt);
  }
}

void Fabric::CatchUp(Time now, uint32_t id) {
  Port& pt = ports_[id];
  while (pt.q_packets > 0 && pt.busy_until <= now) StartTx(pt.busy_until, id);
  // Nothing on the wire to come back for the rest (the last transmissions
  // were lost at random): wake when the port is free.
  if (pt.q_packets > 0 && pt.wire_tail == nullptr && !pt.done_pending) {
    pt.done_pending = true;
    q_->Push(pt.busy_until, kPortDoneKind, id, &pt);
  }
}

void Fabric::Settle(Time now) {
  for (uint32_t id = 0; id < ports_.size(); ++id) {
    if (ports_[id].lazy && ports_[id].q_packets > 0) CatchUp(now, id);
  }
}

uint32_t Fabric::DataQueueBytes(Time now, uint32_t id) const {
  const Port& pt = ports_[id];
  if (!pt.lazy) return pt.dq_bytes;
  // What CatchUp(now) would leave, without changing anything.
  uint32_t bytes = pt.dq_bytes;
  Time t = pt.busy_until;
  const SimPacket* c = pt.cq_head;
  const SimPacket* d = pt.dq_head;
  while (t <= now && (c || d)) {
    if (c && (c->when <= t || !d)) {
      t += SerializationTime(WireSize(c), pt.rate_bps);
      c = c->next;
    } else {
      bytes -= WireSize(d);
      t += SerializationTime(WireSize(d), pt.rate_bps);
      d = d->next;
    }
  }
  return bytes;
}

void Fabric::StartTx(Time now, uint32_t id) { StartTxInline(now, id); }

inline void Fabric::StartTxInline(Time now, uint32_t id) {
  Port& pt = ports_[id];
  SimPacket* p;
  // Control first, if it had arrived by `now` (a switch port transmits
  // lazily: CatchUp decides past transmissions, and a control packet queued
  // later must not overtake them). Whatever waits arrived before the port
  // went busy, so one of the two heads always had.
  uint32_t size;
  if (pt.cq_head && (pt.cq_head->when <= now || !pt.dq_head)) {
    p = pt.cq_head;
    pt.cq_head = p->next;
    if (!pt.cq_head) pt.cq_tail = nullptr;
    size = WireSize(p);
    pt.cq_bytes -= size;
  } else if (pt.dq_head) {
    p = pt.dq_head;
    pt.dq_head = p->next;
    if (!pt.dq_head) pt.dq_tail = nullptr;
    size = WireSize(p);
    pt.dq_bytes -= size;
  } else {
    return;
  }
  --pt.q_packets;
  if (pt.host_port) SetNicRoom(pt);
  --queued_packets_;
  p->next = nullptr;
  // SerializationTime divides in 128 bits; a packet (< 2 MiB) times 8e12
  // fits in 64, which gives the same quotient for less.
  const Time ser = size < (1u << 21) && pt.rate_bps != 0
                       ? static_cast<Time>(uint64_t{size} * 8 *
                                           1000000000000ull / pt.rate_bps)
                       : SerializationTime(size, pt.rate_bps);
  pt.busy_until = now + ser;
  ++pt.c.tx_packets;
  pt.c.tx_bytes += size;
  ++packet_hops_;
  if (pt.loss > 0 && rng_.NextDouble() < pt.loss) {
    ++pt.c.drops;
    Drop(p, DropReason::kRandomLoss);
  } else {
    p->last_port = id;
    p->epoch = pt.epoch;
    const Time arrive = pt.busy_until + pt.delay;
    ++on_wire_;
    // Arrivals on one port are in transmission order, so the queue holds
    // one event per busy wire rather than one per packet in flight.
    if (pt.wire_tail) {
      pt.wire_tail->next = p;
      pt.wire_tail->when = arrive;
    } else {
      q_->Push(arrive, kWireKind, id, p);
    }
    pt.wire_tail = p;
  }
  // A NIC port needs to know when it is free (to pull more); a switch port
  // only when something waits, and a lazy one not even then: it transmits
  // what waits when its wire's last packet arrives (WireArrive) or
  // something is queued (Enqueue), whichever comes first.
  if (pt.host_port || (!pt.lazy && pt.q_packets > 0)) {
    pt.done_pending = true;
    q_->Push(pt.busy_until, kPortDoneKind, id, &pt);
  }
}

void Fabric::WireArrive(Time now, uint32_t id, SimPacket* p, uint32_t out) {
  SimPacket* nx = p->next;
  if (nx == nullptr) {
    Port& pt = ports_[id];
    pt.wire_tail = nullptr;
    // The last packet on the wire arrives after the port went free (the
    // propagation delay is not negative): transmit what waited since.
    if (pt.lazy && pt.q_packets > 0) CatchUp(now, id);
  } else {
    q_->Push(p->when, kWireKind, id, nx);
  }
  p->next = nullptr;
  Arrive(now, port_to_[id], p, out);
}

void Fabric::PortDone(Time now, uint32_t id) {
  Port& pt = ports_[id];
  pt.done_pending = false;
  if (pt.lazy) {
    CatchUp(now, id);
    return;
  }
  if (now < pt.busy_until) {  // rate changed / stale: wait until free
    pt.done_pending = true;
    q_->Push(pt.busy_until, kPortDoneKind, id, &pt);
    return;
  }
  if (pt.up && pt.q_packets > 0) StartTxInline(now, id);
  if (pt.host_port && pt.up && pt.q_packets <= nic_pull_below_) {
    client_->HostPortIdle(now, pt.from,
                          static_cast<uint16_t>(nodes_[pt.to].plane));
  }
}

void Fabric::Flush(uint32_t id) {
  Port& pt = ports_[id];
  for (SimPacket** head : {&pt.cq_head, &pt.dq_head}) {
    SimPacket* p = *head;
    while (p) {
      SimPacket* nx = p->next;
      ++pt.c.drops;
      Drop(p, DropReason::kLinkDown);
      --queued_packets_;
      p = nx;
    }
    *head = nullptr;
  }
  pt.cq_tail = pt.dq_tail = nullptr;
  pt.cq_bytes = pt.dq_bytes = 0;
  pt.q_packets = 0;
  if (pt.host_port) SetNicRoom(pt);
}

void Fabric::UpdateLink(Time now, uint32_t link) {
  for (int dir = 0; dir < 2; ++dir) {
    const uint32_t id = link_port_[2 * link + dir];
    Port& pt = ports_[id];
    const bool up = link_up_[link] && nodes_[pt.from].up && nodes_[pt.to].up;
    if (up == pt.up) continue;
    pt.up = up;
    if (up) {
      --ports_down_;
    } else {
      ++ports_down_;
    }
    if (pt.host_port) SetNicRoom(pt);
    if (!up) {
      if (pt.lazy) CatchUp(now, id);
      pt.down_since = now;
      ++pt.epoch;
      Flush(id);
    } else if (pt.host_port) {
      if (!pt.done_pending) {
        pt.done_pending = true;
        q_->Push(std::max(now, pt.busy_until), kPortDoneKind, id, &pt);
      }
    }
  }
  const routing::Link& lk = topo_->link(link);
  if (lk.a < hosts_ || lk.b < hosts_) {
    const uint32_t host = lk.a < hosts_ ? lk.a : lk.b;
    const uint32_t id = host_port_[host * planes_ + lk.plane];
    client_->HostPortStatus(now, host, lk.plane, ports_[id].up);
  }
}

void Fabric::SetLinkUp(Time now, uint32_t link, bool up) {
  if (link >= link_up_.size()) return;
  link_up_[link] = up ? 1 : 0;
  UpdateLink(now, link);
  ScheduleConvergence(now, topo_->link(link).plane);
}

void Fabric::SetSwitchUp(Time now, uint32_t node, bool up) {
  if (node < hosts_ || node >= nodes_.size()) return;
  nodes_[node].up = up;
  const NodeInfo& ni = nodes_[node];
  for (uint32_t k = 0; k < ni.num_ports; ++k) {
    UpdateLink(now, ports_[ni.port_base + k].link);
  }
  ScheduleConvergence(now, ni.plane);
}

void Fabric::SetLinkRateFraction(uint32_t link, double fraction) {
  if (link >= link_up_.size()) return;
  fraction = std::clamp(fraction, 1e-6, 1.0);
  for (int dir = 0; dir < 2; ++dir) {
    const uint32_t id = link_port_[2 * link + dir];
    Port& pt = ports_[id];
    // Transmissions that started before now keep the old rate.
    if (pt.lazy) CatchUp(q_->now(), id);
    pt.rate_bps = std::max<uint64_t>(
        1,
        static_cast<uint64_t>(static_cast<double>(pt.nominal_bps) * fraction));
  }
}

void Fabric::SetLinkLoss(uint32_t link, double rate) {
  if (link >= link_up_.size()) return;
  for (int dir = 0; dir < 2; ++dir) {
    const uint32_t id = link_port_[2 * link + dir];
    if (ports_[id].lazy) CatchUp(q_->now(), id);
    ports_[id].loss = static_cast<float>(std::clamp(rate, 0.0, 1.0));
  }
}

absl::Status Fabric::CheckInvariants() const {
  uint64_t queued = 0;
  for (size_t i = 0; i < ports_.size(); ++i) {
    const Port& p = ports_[i];
    queued += p.q_packets;
    const uint32_t dlim =
        p.host_port ? config_.nic_buffer_bytes : config_.buffer_bytes;
    const uint32_t clim =
        p.host_port ? config_.nic_buffer_bytes : config_.control_buffer_bytes;
    if (p.max_dq_bytes > dlim || p.max_cq_bytes > clim) {
      return absl::InternalError(
          absl::StrFormat("port %d: queue peaked at %d/%d bytes, limit %d/%d",
                          i, p.max_dq_bytes, p.max_cq_bytes, dlim, clim));
    }
  }
  if (queued != queued_packets_) {
    return absl::InternalError(
        absl::StrFormat("queued packet count %d != sum over ports %d",
                        queued_packets_, queued));
  }
  return absl::OkStatus();
}

size_t Fabric::memory_bytes() const {
  return ports_.capacity() * sizeof(Port) +
         nodes_.capacity() * sizeof(NodeInfo) +
         nbr_.capacity() * sizeof(nbr_[0]) +
         direct_range_.capacity() * sizeof(DirectRange) +
         direct_.capacity() * sizeof(DirectSlot) +
         link_port_.capacity() * sizeof(uint32_t) +
         port_to_.capacity() * sizeof(uint32_t) +
         port_from_.capacity() * sizeof(uint32_t) +
         hop_.capacity() * sizeof(Hop) +
         nic_room_.capacity() * sizeof(uint16_t) +
         host_room_.capacity() * sizeof(uint32_t) +
         host_port_.capacity() * sizeof(uint32_t) * 3;
}

}  // namespace prism::sim
