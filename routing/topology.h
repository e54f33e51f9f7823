// Topology model: multi-plane two-tier Clos fabrics (MRC's shape) and a
// single-plane three-tier fat tree, as explicit node and link tables.
// Loaded from the same JSON the simulator's scenarios use.
//
// Multi-plane two-tier Clos: P independent planes. In each plane there are
// t0_per_plane T0 (leaf) switches and t1_per_plane T1 (spine) switches; every
// T0 connects to every T1 with `parallel_links` links. Host h attaches to T0
// h / hosts_per_t0 in every plane through its NIC port for that plane.
// Fat tree (kind "fattree3", planes = 1): k-ary three-tier fat tree, k pods of
// k/2 T0 + k/2 T1 (aggregation), (k/2)^2 T2 (core), k/2 hosts per T0 unless
// hosts_per_t0 says otherwise.
//
// Addressing plan (see docs/routing.md): every switch has a 16-bit uSID,
// unique within its plane; host h's plane-p address is derived from the
// locator block, the plane and h.
//
// Invariants: node ids are dense [0, num_nodes); hosts come first (node id ==
// host index); link ids dense [0, num_links); links are full duplex.
#ifndef PRISM_ROUTING_TOPOLOGY_H_
#define PRISM_ROUTING_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "prism/types.h"

namespace prism::json {
class Value;
}

namespace prism::routing {

enum class NodeKind : uint8_t { kHost, kT0, kT1, kT2 };

struct Node {
  NodeKind kind = NodeKind::kHost;
  uint16_t plane = 0;  // hosts: 0 (they span all planes)
  uint32_t index = 0;  // index within (kind, plane)
  uint16_t usid = 0;   // switches: 16-bit uSID, unique within the plane
};

struct Link {
  uint32_t a = 0;  // node ids; for host links a is the host
  uint32_t b = 0;
  uint16_t plane = 0;
  uint64_t rate_bps = 0;
  Time delay = 0;  // propagation delay, one way
};

struct TopologySpec {
  std::string kind = "clos2";  // "clos2" | "fattree3"
  uint32_t planes = 1;
  uint32_t t0_per_plane = 2;
  uint32_t t1_per_plane = 2;
  uint32_t hosts_per_t0 = 2;
  uint32_t parallel_links = 1;                  // T0-T1 links per (T0, T1) pair
  uint32_t fattree_k = 4;                       // fattree3 only
  uint64_t host_link_bps = 100'000'000'000ull;  // per NIC port (per plane)
  uint64_t fabric_link_bps = 100'000'000'000ull;
  Time host_link_delay = 500 * kNanosecond;
  Time fabric_link_delay = 500 * kNanosecond;
};

class Topology {
 public:
  static absl::StatusOr<Topology> Build(const TopologySpec& spec);
  // The "topology" object of a scenario / topology JSON file (docs/routing.md).
  static absl::StatusOr<TopologySpec> SpecFromJson(const json::Value& v);
  static absl::StatusOr<Topology> FromJson(std::string_view text);

  const TopologySpec& spec() const { return spec_; }
  uint32_t num_hosts() const { return num_hosts_; }
  uint32_t num_planes() const { return spec_.planes; }
  size_t num_nodes() const { return nodes_.size(); }
  size_t num_links() const { return links_.size(); }
  const Node& node(uint32_t id) const { return nodes_[id]; }
  const Link& link(uint32_t id) const { return links_[id]; }
  // Links incident to a node, in a fixed order (port number = position).
  const std::vector<uint32_t>& ports(uint32_t node) const {
    return ports_[node];
  }

  // T0 index (within a plane) that host h attaches to.
  uint32_t host_t0_index(uint32_t host) const;
  // Node id of a switch. REQUIRES: indices in range.
  uint32_t t0_node(uint16_t plane, uint32_t index) const;
  uint32_t t1_node(uint16_t plane, uint32_t index) const;
  // Link id of host h's NIC port on `plane`.
  uint32_t host_link(uint32_t host, uint16_t plane) const;
  // Link id of the k-th parallel link between T0 and T1 in a plane (clos2).
  uint32_t fabric_link(uint16_t plane, uint32_t t0, uint32_t t1,
                       uint32_t k) const;

  // --- Additions (routing engineer; see docs/routing.md) ---
  bool is_fattree() const { return fattree_; }
  // Node id of a fat-tree core (T2) switch. REQUIRES: fattree3, in range.
  uint32_t t2_node(uint32_t index) const;
  // Fat tree geometry (k/2 edge and k/2 aggregation switches per pod). T0 and
  // T1 indices are global: pod * (k/2) + position in the pod.
  uint32_t fattree_half() const { return spec_.fattree_k / 2; }
  uint32_t fattree_pod_of_t0(uint32_t t0) const { return t0 / fattree_half(); }
  // Link between edge (T0) `t0` and aggregation (T1) switch `agg` of its pod
  // (agg = position 0 .. k/2-1 in the pod). REQUIRES: fattree3.
  uint32_t fattree_edge_agg_link(uint32_t t0, uint32_t agg) const;
  // Link between aggregation switch `agg` (position in the pod) of `pod` and
  // its m-th core switch, core index agg * (k/2) + m. REQUIRES: fattree3.
  uint32_t fattree_agg_core_link(uint32_t pod, uint32_t agg, uint32_t m) const;
  // The other end of link `l` seen from node `n`. REQUIRES: n is an end.
  uint32_t peer(uint32_t l, uint32_t n) const {
    return links_[l].a == n ? links_[l].b : links_[l].a;
  }

 private:
  TopologySpec spec_;
  uint32_t num_hosts_ = 0;
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::vector<std::vector<uint32_t>> ports_;
  // Index helpers filled by Build().
  std::vector<uint32_t> t0_base_;           // per plane: node id of T0 0
  std::vector<uint32_t> t1_base_;           // per plane: node id of T1 0
  std::vector<uint32_t> host_link_base_;    // per plane
  std::vector<uint32_t> fabric_link_base_;  // per plane
  bool fattree_ = false;
  uint32_t t2_base_ = 0;             // fattree3: node id of core 0
  uint32_t agg_core_link_base_ = 0;  // fattree3: link id of the first
                                     // aggregation-core link
};

}  // namespace prism::routing

#endif  // PRISM_ROUTING_TOPOLOGY_H_
