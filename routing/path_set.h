// Path sets and the addressing plan: for a (source host, destination host)
// pair, the distinct paths through a Topology, each with a stable path id,
// its entropy value, its SRv6 encodings (uSID carrier, SRH) and the links it
// traverses.
//
// Addressing plan (docs/routing.md):
// - uSID locator block fcbb:bbbb::/32 (F3216). Node uSIDs, unique within a
//   plane: T0 i -> 0x1000 + i, T1 i -> 0x2000 + i, T2 i -> 0x3000 + i
//   (Node::usid). Adjacency (End.X) uSIDs are local to a switch:
//   0xE000 + port.
// - Host h on plane p owns fcbb:bbbb:HI:LO::/128 with
//   HI = 0x8000 | p << 9 | h >> 16, LO = h & 0xffff (HostAddress()).
// - Classic (SRH) SIDs: switch with uSID u on plane p is fc00:p:u::, its
//   adjacency SID for port n is fc00:p:u:(0xE000 + n)::.
//
// Paths (clos2, P planes, T1 spines, K parallel links):
// - different T0: P * T1 * K paths. Path id x: plane = x % P, q = x / P,
//   spine = (q + off[plane]) % T1, link = (q / T1 + off2) % K, where the
//   offsets are a deterministic mix of (src, dst, plane) so that different
//   pairs start on different spines while ids 0..n-1 of any prefix stay
//   spread over planes and spines. The same parallel-link index is used on
//   the up and the down hop.
// - same T0: P paths, one per plane, through the shared T0.
// fattree3 (one plane, k pods, h = k/2): same edge: 1 path; same pod: h
// (one per aggregation switch); different pods: h * h (aggregation position
// j x core m; core j*h + m connects aggregation j of every pod).
//
// Encodings of path x:
// - uSID carrier (K == 1): block : [T1 : T0dst] : HI : LO (node uSIDs; the
//   source T0 routes the first uSID by its /48). K > 1: block : uA(src T0
//   uplink port) : uA(T1 downlink port) : T0dst : HI : LO. Fat tree:
//   block : agg : core : agg : edge : HI : LO (6 uSIDs, the F3216 maximum).
//   After the path's switches have shifted it, the destination is
//   HostAddress(dst, plane): FinalDestination(x).
// - SRH: the same switches as classic SIDs, then HostAddress(dst, plane).
// - Entropy value: (udp source port << 16) | x with source port
//   0xC000 | ((x + salt) & 0x3fff), salt a mix of (src, dst); see
//   EntropyToFields() in srv6.h for the flow label.
//
// The sender-side state is a PathTemplate per destination (one address
// with the destination-specific uSIDs in place) plus per-plane offsets; the
// carrier of a path is the template with the plane bits and the
// uplink-dependent uSID(s) filled in (MRC's "template + plane + uplink").
// No per-path 128-bit address is stored.
//
// Lifetime: a PathSet points at its Topology, which must outlive it.
// Thread safety: immutable after Build(); safe to share for reading.
#ifndef PRISM_ROUTING_PATH_SET_H_
#define PRISM_ROUTING_PATH_SET_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "prism/types.h"
#include "routing/srv6.h"
#include "routing/topology.h"

namespace prism::routing {

inline constexpr uint16_t kUsidAdjacencyBase = 0xE000;
inline constexpr uint16_t kHostAddressMarker = 0x8000;
inline constexpr uint16_t kClassicSidPrefix = 0xfc00;
// Most links (host, fabric..., host) any path traverses (fat tree: 6).
inline constexpr int kMaxPathLinks = 6;
inline constexpr int kMaxPathSwitches = 5;

// Host h's address on plane p. REQUIRES: p < 64, h < 2^25.
Ipv6Address HostAddress(uint32_t host, uint16_t plane,
                        uint32_t block = kDefaultLocatorBlock);
// Inverse of HostAddress; false when `a` is not a host address.
bool ParseHostAddress(const Ipv6Address& a, uint32_t* host, uint16_t* plane,
                      uint32_t block = kDefaultLocatorBlock);
Ipv6Address ClassicSid(uint16_t plane, uint16_t usid);

// The per-(host pair, plane) spread of the pair's path ids: a deterministic
// 64-bit mix of the unordered pair and the plane, so PairSpread(a, b, p) ==
// PairSpread(b, a, p). PathSet's per-plane offsets are taken from it:
// different pairs start their path ids on different spines (senders that
// walk their ids in the same order do not all hit the same spine at once),
// and path x from b to a crosses the spine that path x from a to b does, so
// control packets sent back on the path id a packet arrived on take its
// mirror. The simulator rotates its carriers by it too.
uint64_t PairSpread(uint32_t src, uint32_t dst, uint16_t plane);

// Failure groups (fate sharing; the hint ConnectionOptions::path_groups
// hands the engine). Paths of a pair whose carriers leave the source T0
// (fat tree: edge) on the same uplink of the same plane cross the same
// T0-T1 link and T1 (and, their mirror, the same T1-T0 link at the other
// end), so one link or switch failure takes them all. The group of such a
// path is plane * uplinks + uplink, where `uplinks` is the number of
// uplinks the source switch spreads the pair's paths over (clos2: T1s x
// parallel links; fat tree: aggregation switches) and `uplink` the one it
// takes; kNoFailureGroup when there is no uplink (both hosts on one T0:
// only the host ports, which PLANE_STATUS covers) or the id would not fit
// in 16 bits. Both PathSet (FailureGroup / FailureGroups below) and the
// simulator's carriers (sim/prism_host.cc, uplink = its carrier choice mod
// the source T0's next-hop count) derive their groups with this rule, so
// path x from a to b and path x from b to a are in the same group
// whenever they cross the same T1 (PairSpread is symmetric).
uint16_t FailureGroupOf(uint16_t plane, uint32_t uplink, uint32_t uplinks);
Ipv6Address ClassicAdjacencySid(uint16_t plane, uint16_t usid, uint16_t port);

struct PathSetOptions {
  // Paths to keep: 0 = all distinct paths (capped at 65535, rounded down to
  // a multiple of the plane count so planes stay balanced). Otherwise the
  // first `max_paths` ids.
  uint32_t max_paths = 0;
  uint32_t block = kDefaultLocatorBlock;
};

// Where a path goes. Fields not used by the topology kind are 0.
struct PathInfo {
  uint16_t plane = 0;
  uint32_t t1 = 0;           // clos2: spine index; fattree: agg position in pod
  uint32_t link = 0;         // clos2: parallel link index
  uint32_t core = 0;         // fattree, different pods: core index
  uint8_t num_switches = 0;  // switches on the path (1, 3 or 5)
};

// The per-destination template (sender state). Carrier() is what the NIC /
// datapath does per packet: two word writes into a copy of the template.
struct PathTemplate {
  Ipv6Address base;        // block, destination-specific uSIDs, HI (no plane)
  uint8_t first_slot = 2;  // word index of the first path-dependent uSID
  uint8_t num_slots = 0;   // path-dependent uSIDs (0..3)
  uint8_t host_slot = 0;   // word index of HI (gets the plane bits)
};

class PathSet {
 public:
  static absl::StatusOr<PathSet> Build(const Topology& topo, uint32_t src,
                                       uint32_t dst,
                                       const PathSetOptions& opts = {});

  uint32_t src() const { return src_; }
  uint32_t dst() const { return dst_; }
  uint16_t num_paths() const { return num_paths_; }
  uint16_t num_planes() const { return num_planes_; }
  // Distinct paths before the max_paths / 65535 cap.
  uint64_t num_distinct() const { return num_distinct_; }
  const PathTemplate& path_template() const { return tmpl_; }

  // All per-path functions REQUIRE: path < num_paths().
  PathInfo info(PathId path) const;
  uint16_t plane(PathId path) const { return path % num_planes_; }
  // uSID carrier (the IPv6 destination the sender writes).
  Ipv6Address Carrier(PathId path) const;
  // uSIDs in the carrier that switches consume (shifts before arrival).
  int carrier_shifts(PathId path) const;
  // The destination the receiver sees (and the UDP checksum covers).
  Ipv6Address FinalDestination(PathId path) const;
  Ipv6Address SourceAddress(PathId path) const;
  // The SRH for the path (classic SIDs + host address), segments_left =
  // last_entry; the IPv6 destination to send to is srh.active().
  Srh MakeSrhFor(PathId path, uint8_t next_header = kIpProtoUdp) const;
  uint32_t Entropy(PathId path) const;
  EntropyFields EntropyFieldsFor(PathId path) const {
    return EntropyToFields(Entropy(path));
  }
  // The path's failure group (FailureGroupOf: plane, T1 and parallel link;
  // fat tree: plane and aggregation switch; kNoFailureGroup on one T0).
  uint16_t FailureGroup(PathId path) const;
  // FailureGroup of every path, in path id order: the hint for
  // ConnectionOptions::path_groups.
  std::vector<uint16_t> FailureGroups() const;
  // Link ids in travel order; returns how many (<= kMaxPathLinks).
  int Links(PathId path, std::span<uint32_t, kMaxPathLinks> out) const;
  // Switch node ids in travel order; returns how many.
  int Switches(PathId path, std::span<uint32_t, kMaxPathSwitches> out) const;

 private:
  enum class Shape : uint8_t { kSameT0, kClos, kFatSamePod, kFatCrossPod };
  const Topology* topo_ = nullptr;
  uint32_t src_ = 0, dst_ = 0;
  uint32_t src_t0_ = 0, dst_t0_ = 0;
  Shape shape_ = Shape::kSameT0;
  uint16_t num_paths_ = 0;
  uint16_t num_planes_ = 1;
  uint64_t num_distinct_ = 0;
  uint32_t block_ = kDefaultLocatorBlock;
  uint16_t salt_ = 0;
  PathTemplate tmpl_;
  std::vector<uint32_t> offset_;   // per plane: first spine / agg position
  std::vector<uint32_t> offset2_;  // per plane: first parallel link / core m
};

}  // namespace prism::routing

#endif  // PRISM_ROUTING_PATH_SET_H_
