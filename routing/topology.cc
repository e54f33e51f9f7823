// Topology model. See topology.h for the contract and docs/routing.md for the
// JSON schema, the limits and the addressing plan.
//
// Layout (clos2), node ids:   [hosts][plane 0: T0s, T1s][plane 1: T0s, T1s]...
//                 link ids:   [plane 0: host links, fabric links][plane 1: ...]
//   host link (h, p)          = host_link_base_[p] + h
//   fabric link (p, t0, t1, k) = fabric_link_base_[p] + (t0 * T1 + t1) * K + k
// Ports: host: port p = its plane-p link. T0: its hosts in order, then uplinks
// (t1-major, parallel link minor). T1: downlinks (t0-major, parallel minor).
//
// Layout (fattree3, one plane; h = k/2): nodes [hosts][T0 edge: k*h][T1 agg:
// k*h][T2 core: h*h]; links [host links][edge-agg: k*h*h, (pod, edge, agg)]
// [agg-core: k*h*h, (pod, agg, m)]; core agg*h + m links to aggregation
// switch `agg` of every pod.
#include "routing/topology.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "transport/base/json.h"

namespace prism::routing {

namespace {

// Limits (docs/routing.md). uSIDs give each tier 4096 values per plane.
constexpr uint32_t kMaxPlanes = 64;
constexpr uint32_t kMaxSwitchesPerTier = 4096;
constexpr uint32_t kMaxHostsPerT0 = 65536;
constexpr uint32_t kMaxParallelLinks = 64;
constexpr uint64_t kMaxHosts = 1ull << 22;
constexpr uint64_t kMaxNodes = 1ull << 23;
constexpr uint64_t kMaxLinks = 1ull << 25;
constexpr uint32_t kMaxFattreeK = 64;

constexpr uint16_t kUsidT0Base = 0x1000;
constexpr uint16_t kUsidT1Base = 0x2000;
constexpr uint16_t kUsidT2Base = 0x3000;

absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("topology: ", std::string(what)));
}

absl::Status CheckCount(const char* name, uint64_t v, uint64_t lo,
                        uint64_t hi) {
  if (v < lo || v > hi) {
    return Invalid(
        absl::StrCat(name, " = ", v, " out of range [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCommon(const TopologySpec& s) {
  if (s.host_link_bps == 0) return Invalid("host link rate must be > 0");
  if (s.fabric_link_bps == 0) return Invalid("fabric link rate must be > 0");
  if (s.host_link_delay < 0) return Invalid("host link delay must be >= 0");
  if (s.fabric_link_delay < 0) return Invalid("fabric link delay must be >= 0");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Topology> Topology::Build(const TopologySpec& spec_in) {
  TopologySpec spec = spec_in;
  if (absl::Status s = ValidateCommon(spec); !s.ok()) return s;
  Topology t;
  if (spec.kind == "clos2") {
    if (absl::Status s = CheckCount("planes", spec.planes, 1, kMaxPlanes);
        !s.ok())
      return s;
    if (absl::Status s = CheckCount("t0_per_plane", spec.t0_per_plane, 1,
                                    kMaxSwitchesPerTier);
        !s.ok())
      return s;
    if (absl::Status s = CheckCount("t1_per_plane", spec.t1_per_plane, 1,
                                    kMaxSwitchesPerTier);
        !s.ok())
      return s;
    if (absl::Status s =
            CheckCount("hosts_per_t0", spec.hosts_per_t0, 1, kMaxHostsPerT0);
        !s.ok())
      return s;
    if (absl::Status s = CheckCount("parallel_links", spec.parallel_links, 1,
                                    kMaxParallelLinks);
        !s.ok())
      return s;
    const uint64_t P = spec.planes, T0 = spec.t0_per_plane,
                   T1 = spec.t1_per_plane, K = spec.parallel_links;
    const uint64_t H = T0 * spec.hosts_per_t0;
    if (H > kMaxHosts) {
      return Invalid(absl::StrCat("too many hosts: ", H, " > ", kMaxHosts));
    }
    const uint64_t nodes = H + P * (T0 + T1);
    const uint64_t fabric = T0 * T1 * K;
    const uint64_t links = P * (H + fabric);
    if (nodes > kMaxNodes || links > kMaxLinks) {
      return Invalid(absl::StrCat("topology too large: ", nodes, " nodes, ",
                                  links, " links (limits ", kMaxNodes, ", ",
                                  kMaxLinks, ")"));
    }
    if (spec.hosts_per_t0 + T1 * K > 65536) {
      return Invalid(
          "T0 radix (hosts_per_t0 + t1_per_plane * parallel_links) "
          "exceeds 65536 ports");
    }
    t.spec_ = spec;
    t.num_hosts_ = static_cast<uint32_t>(H);
    t.nodes_.reserve(nodes);
    t.links_.reserve(links);
    t.ports_.resize(nodes);
    for (uint32_t h = 0; h < H; ++h) {
      t.nodes_.push_back(Node{NodeKind::kHost, 0, h, 0});
      t.ports_[h].reserve(P);
    }
    for (uint32_t p = 0; p < P; ++p) {
      const uint16_t plane = static_cast<uint16_t>(p);
      t.t0_base_.push_back(static_cast<uint32_t>(t.nodes_.size()));
      for (uint32_t i = 0; i < T0; ++i) {
        t.ports_[t.nodes_.size()].reserve(spec.hosts_per_t0 + T1 * K);
        t.nodes_.push_back(Node{NodeKind::kT0, plane, i,
                                static_cast<uint16_t>(kUsidT0Base + i)});
      }
      t.t1_base_.push_back(static_cast<uint32_t>(t.nodes_.size()));
      for (uint32_t j = 0; j < T1; ++j) {
        t.ports_[t.nodes_.size()].reserve(T0 * K);
        t.nodes_.push_back(Node{NodeKind::kT1, plane, j,
                                static_cast<uint16_t>(kUsidT1Base + j)});
      }
    }
    for (uint32_t p = 0; p < P; ++p) {
      const uint16_t plane = static_cast<uint16_t>(p);
      t.host_link_base_.push_back(static_cast<uint32_t>(t.links_.size()));
      for (uint32_t h = 0; h < H; ++h) {
        const uint32_t t0 = t.t0_base_[p] + h / spec.hosts_per_t0;
        const uint32_t id = static_cast<uint32_t>(t.links_.size());
        t.links_.push_back(
            Link{h, t0, plane, spec.host_link_bps, spec.host_link_delay});
        t.ports_[h].push_back(id);
        t.ports_[t0].push_back(id);
      }
      t.fabric_link_base_.push_back(static_cast<uint32_t>(t.links_.size()));
      for (uint32_t i = 0; i < T0; ++i) {
        const uint32_t a = t.t0_base_[p] + i;
        for (uint32_t j = 0; j < T1; ++j) {
          const uint32_t b = t.t1_base_[p] + j;
          for (uint32_t k = 0; k < K; ++k) {
            const uint32_t id = static_cast<uint32_t>(t.links_.size());
            t.links_.push_back(Link{a, b, plane, spec.fabric_link_bps,
                                    spec.fabric_link_delay});
            t.ports_[a].push_back(id);
            t.ports_[b].push_back(id);
          }
        }
      }
    }
    return t;
  }

  if (spec.kind == "fattree3") {
    if (spec.planes != 1) return Invalid("fattree3 has exactly one plane");
    if (spec.fattree_k < 2 || spec.fattree_k > kMaxFattreeK ||
        spec.fattree_k % 2 != 0) {
      return Invalid(absl::StrCat("fattree_k = ", spec.fattree_k,
                                  " must be even, in [2, ", kMaxFattreeK, "]"));
    }
    const uint32_t k = spec.fattree_k, half = k / 2;
    if (spec.hosts_per_t0 == 0) spec.hosts_per_t0 = half;
    if (absl::Status s =
            CheckCount("hosts_per_t0", spec.hosts_per_t0, 1, kMaxHostsPerT0);
        !s.ok())
      return s;
    if (spec.parallel_links != 1) {
      return Invalid("fattree3 supports parallel_links = 1 only");
    }
    const uint64_t E = uint64_t{k} * half;  // edges = aggs
    const uint64_t C = uint64_t{half} * half;
    const uint64_t H = E * spec.hosts_per_t0;
    if (H > kMaxHosts) {
      return Invalid(absl::StrCat("too many hosts: ", H, " > ", kMaxHosts));
    }
    spec.t0_per_plane = static_cast<uint32_t>(E);
    spec.t1_per_plane = static_cast<uint32_t>(E);
    const uint64_t nodes = H + 2 * E + C;
    const uint64_t links = H + 2 * E * half;
    t.spec_ = spec;
    t.fattree_ = true;
    t.num_hosts_ = static_cast<uint32_t>(H);
    t.nodes_.reserve(nodes);
    t.links_.reserve(links);
    t.ports_.resize(nodes);
    for (uint32_t h = 0; h < H; ++h) {
      t.nodes_.push_back(Node{NodeKind::kHost, 0, h, 0});
    }
    t.t0_base_.push_back(static_cast<uint32_t>(t.nodes_.size()));
    for (uint32_t i = 0; i < E; ++i) {
      t.nodes_.push_back(
          Node{NodeKind::kT0, 0, i, static_cast<uint16_t>(kUsidT0Base + i)});
    }
    t.t1_base_.push_back(static_cast<uint32_t>(t.nodes_.size()));
    for (uint32_t i = 0; i < E; ++i) {
      t.nodes_.push_back(
          Node{NodeKind::kT1, 0, i, static_cast<uint16_t>(kUsidT1Base + i)});
    }
    t.t2_base_ = static_cast<uint32_t>(t.nodes_.size());
    for (uint32_t i = 0; i < C; ++i) {
      t.nodes_.push_back(
          Node{NodeKind::kT2, 0, i, static_cast<uint16_t>(kUsidT2Base + i)});
    }
    auto add = [&](uint32_t a, uint32_t b, uint64_t bps, Time d) {
      const uint32_t id = static_cast<uint32_t>(t.links_.size());
      t.links_.push_back(Link{a, b, 0, bps, d});
      t.ports_[a].push_back(id);
      t.ports_[b].push_back(id);
    };
    t.host_link_base_.push_back(0);
    for (uint32_t h = 0; h < H; ++h) {
      add(h, t.t0_base_[0] + h / spec.hosts_per_t0, spec.host_link_bps,
          spec.host_link_delay);
    }
    t.fabric_link_base_.push_back(static_cast<uint32_t>(t.links_.size()));
    for (uint32_t pod = 0; pod < k; ++pod) {
      for (uint32_t e = 0; e < half; ++e) {
        for (uint32_t a = 0; a < half; ++a) {
          add(t.t0_base_[0] + pod * half + e, t.t1_base_[0] + pod * half + a,
              spec.fabric_link_bps, spec.fabric_link_delay);
        }
      }
    }
    t.agg_core_link_base_ = static_cast<uint32_t>(t.links_.size());
    for (uint32_t pod = 0; pod < k; ++pod) {
      for (uint32_t a = 0; a < half; ++a) {
        for (uint32_t m = 0; m < half; ++m) {
          add(t.t1_base_[0] + pod * half + a, t.t2_base_ + a * half + m,
              spec.fabric_link_bps, spec.fabric_link_delay);
        }
      }
    }
    return t;
  }
  return Invalid(absl::StrCat("unknown kind \"", spec.kind,
                              "\" (expected \"clos2\" or \"fattree3\")"));
}

absl::StatusOr<TopologySpec> Topology::SpecFromJson(const json::Value& v) {
  if (!v.is_object()) return Invalid("topology must be a JSON object");
  absl::Status keys = v.CheckKeys(
      {"kind", "planes", "t0_per_plane", "t1_per_plane", "hosts_per_t0",
       "parallel_links", "fattree_k", "k", "host_link_gbps", "fabric_link_gbps",
       "host_link_delay_ns", "fabric_link_delay_ns", "oversubscription", "name",
       "comment"},
      "topology");
  if (!keys.ok()) return keys;
  TopologySpec s;
  absl::StatusOr<std::string> kind = v.GetString("kind", "clos2");
  if (!kind.ok()) return kind.status();
  s.kind = *kind;
  const bool fattree = s.kind == "fattree3";

  auto get_u32 = [&](const char* key, uint32_t def,
                     uint32_t* out) -> absl::Status {
    absl::StatusOr<int64_t> x = v.GetInt(key, def);
    if (!x.ok()) return x.status();
    if (*x < 0 || *x > std::numeric_limits<uint32_t>::max()) {
      return Invalid(absl::StrCat(key, " = ", *x, " out of range"));
    }
    *out = static_cast<uint32_t>(*x);
    return absl::OkStatus();
  };
  absl::Status st;
  if (!(st = get_u32("planes", 1, &s.planes)).ok()) return st;
  if (!(st = get_u32("t0_per_plane", s.t0_per_plane, &s.t0_per_plane)).ok())
    return st;
  if (!(st = get_u32("parallel_links", 1, &s.parallel_links)).ok()) return st;
  uint32_t k = s.fattree_k;
  if (v.Find("fattree_k") != nullptr && v.Find("k") != nullptr) {
    return Invalid("give only one of \"fattree_k\" and \"k\"");
  }
  if (!(st = get_u32(v.Find("k") != nullptr ? "k" : "fattree_k", k, &k)).ok())
    return st;
  s.fattree_k = k;
  if (!(st = get_u32("hosts_per_t0", fattree ? 0 : s.hosts_per_t0,
                     &s.hosts_per_t0))
           .ok())
    return st;

  auto get_gbps = [&](const char* key, uint64_t def_bps,
                      uint64_t* out) -> absl::Status {
    absl::StatusOr<double> g = v.GetDouble(key, def_bps / 1e9);
    if (!g.ok()) return g.status();
    if (!(*g > 0) || *g > 1e6) {
      return Invalid(absl::StrCat(key, " = ", *g, " must be in (0, 1e6]"));
    }
    *out = static_cast<uint64_t>(std::llround(*g * 1e9));
    return absl::OkStatus();
  };
  if (!(st = get_gbps("host_link_gbps", s.host_link_bps, &s.host_link_bps))
           .ok())
    return st;
  if (!(st =
            get_gbps("fabric_link_gbps", s.fabric_link_bps, &s.fabric_link_bps))
           .ok())
    return st;
  auto get_ns = [&](const char* key, Time def, Time* out) -> absl::Status {
    absl::StatusOr<double> ns =
        v.GetDouble(key, static_cast<double>(def) / kNanosecond);
    if (!ns.ok()) return ns.status();
    if (!(*ns >= 0) || *ns > 1e12) {
      return Invalid(absl::StrCat(key, " = ", *ns, " must be in [0, 1e12]"));
    }
    *out = static_cast<Time>(std::llround(*ns * kNanosecond));
    return absl::OkStatus();
  };
  if (!(st =
            get_ns("host_link_delay_ns", s.host_link_delay, &s.host_link_delay))
           .ok())
    return st;
  if (!(st = get_ns("fabric_link_delay_ns", s.fabric_link_delay,
                    &s.fabric_link_delay))
           .ok())
    return st;

  const bool has_t1 = v.Find("t1_per_plane") != nullptr;
  const bool has_oversub = v.Find("oversubscription") != nullptr;
  if (has_t1 && has_oversub) {
    return Invalid(
        "give only one of \"t1_per_plane\" and \"oversubscription\"");
  }
  if (has_oversub) {
    if (fattree) return Invalid("oversubscription applies to clos2 only");
    absl::StatusOr<double> o = v.GetDouble("oversubscription", 1.0);
    if (!o.ok()) return o.status();
    if (!(*o >= 1.0) || *o > 1e6) {
      return Invalid("oversubscription must be >= 1 (downlink : uplink)");
    }
    // T0 downlink capacity / uplink capacity = oversubscription:
    //   hosts_per_t0 * host_rate = o * t1 * parallel_links * fabric_rate.
    const double down = static_cast<double>(s.hosts_per_t0) *
                        static_cast<double>(s.host_link_bps);
    const double up_per_t1 = static_cast<double>(s.parallel_links) *
                             static_cast<double>(s.fabric_link_bps);
    const double t1 = std::ceil(down / (*o * up_per_t1) - 1e-9);
    if (!(t1 >= 1) || t1 > kMaxSwitchesPerTier) {
      return Invalid(absl::StrCat("oversubscription ", *o, " gives ", t1,
                                  " T1 switches per plane"));
    }
    s.t1_per_plane = static_cast<uint32_t>(t1);
  } else if (!(st = get_u32("t1_per_plane", s.t1_per_plane, &s.t1_per_plane))
                  .ok()) {
    return st;
  }
  return s;
}

absl::StatusOr<Topology> Topology::FromJson(std::string_view text) {
  absl::StatusOr<json::Value> v = json::Parse(text);
  if (!v.ok()) return v.status();
  // Accept a bare topology object or a scenario with a "topology" member.
  const json::Value* topo = &*v;
  if (const json::Value* inner = v->Find("topology"); inner != nullptr) {
    topo = inner;
  }
  absl::StatusOr<TopologySpec> spec = SpecFromJson(*topo);
  if (!spec.ok()) return spec.status();
  return Build(*spec);
}

uint32_t Topology::host_t0_index(uint32_t host) const {
  return host / spec_.hosts_per_t0;
}

uint32_t Topology::t0_node(uint16_t plane, uint32_t index) const {
  return t0_base_[plane] + index;
}

uint32_t Topology::t1_node(uint16_t plane, uint32_t index) const {
  return t1_base_[plane] + index;
}

uint32_t Topology::t2_node(uint32_t index) const { return t2_base_ + index; }

uint32_t Topology::host_link(uint32_t host, uint16_t plane) const {
  return host_link_base_[plane] + host;
}

uint32_t Topology::fabric_link(uint16_t plane, uint32_t t0, uint32_t t1,
                               uint32_t k) const {
  return fabric_link_base_[plane] +
         (t0 * spec_.t1_per_plane + t1) * spec_.parallel_links + k;
}

uint32_t Topology::fattree_edge_agg_link(uint32_t t0, uint32_t agg) const {
  // Edge-agg links are ordered (pod, edge, agg) == (t0, agg).
  return fabric_link_base_[0] + t0 * fattree_half() + agg;
}

uint32_t Topology::fattree_agg_core_link(uint32_t pod, uint32_t agg,
                                         uint32_t m) const {
  const uint32_t half = fattree_half();
  return agg_core_link_base_ + (pod * half + agg) * half + m;
}

}  // namespace prism::routing
