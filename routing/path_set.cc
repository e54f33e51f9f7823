// Path sets. See path_set.h for the contract, the path arithmetic and the
// addressing plan.
#include "routing/path_set.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace prism::routing {

namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Mix3(uint64_t a, uint64_t b, uint64_t c) {
  return Mix(Mix(Mix(a) ^ b) ^ c);
}

}  // namespace

uint64_t PairSpread(uint32_t src, uint32_t dst, uint16_t plane) {
  return Mix3(std::min(src, dst), std::max(src, dst), plane);
}

uint16_t FailureGroupOf(uint16_t plane, uint32_t uplink, uint32_t uplinks) {
  if (uplinks == 0 || uplink >= uplinks) return kNoFailureGroup;
  const uint64_t g = uint64_t{plane} * uplinks + uplink;
  return g < kNoFailureGroup ? static_cast<uint16_t>(g) : kNoFailureGroup;
}

Ipv6Address HostAddress(uint32_t host, uint16_t plane, uint32_t block) {
  Ipv6Address a;
  a.set_word(0, static_cast<uint16_t>(block >> 16));
  a.set_word(1, static_cast<uint16_t>(block));
  a.set_word(2, static_cast<uint16_t>(kHostAddressMarker | (plane & 0x3F) << 9 |
                                      ((host >> 16) & 0x1FF)));
  a.set_word(3, static_cast<uint16_t>(host));
  return a;
}

bool ParseHostAddress(const Ipv6Address& a, uint32_t* host, uint16_t* plane,
                      uint32_t block) {
  if (a.word(0) != static_cast<uint16_t>(block >> 16) ||
      a.word(1) != static_cast<uint16_t>(block)) {
    return false;
  }
  const uint16_t hi = a.word(2);
  if ((hi & kHostAddressMarker) == 0) return false;
  for (int i = 4; i < 8; ++i) {
    if (a.word(i) != 0) return false;
  }
  *plane = static_cast<uint16_t>((hi >> 9) & 0x3F);
  *host = (uint32_t{hi & 0x1FFu} << 16) | a.word(3);
  return true;
}

Ipv6Address ClassicSid(uint16_t plane, uint16_t usid) {
  Ipv6Address a;
  a.set_word(0, kClassicSidPrefix);
  a.set_word(1, plane);
  a.set_word(2, usid);
  return a;
}

Ipv6Address ClassicAdjacencySid(uint16_t plane, uint16_t usid, uint16_t port) {
  Ipv6Address a = ClassicSid(plane, usid);
  a.set_word(3, static_cast<uint16_t>(kUsidAdjacencyBase + port));
  return a;
}

absl::StatusOr<PathSet> PathSet::Build(const Topology& topo, uint32_t src,
                                       uint32_t dst,
                                       const PathSetOptions& opts) {
  if (src >= topo.num_hosts() || dst >= topo.num_hosts()) {
    return absl::InvalidArgumentError(
        absl::StrCat("path set: host out of range (src ", src, ", dst ", dst,
                     ", hosts ", topo.num_hosts(), ")"));
  }
  if (src == dst) {
    return absl::InvalidArgumentError(
        absl::StrCat("path set: source and destination are both host ", src));
  }
  const TopologySpec& spec = topo.spec();
  PathSet ps;
  ps.topo_ = &topo;
  ps.src_ = src;
  ps.dst_ = dst;
  ps.block_ = opts.block;
  ps.src_t0_ = topo.host_t0_index(src);
  ps.dst_t0_ = topo.host_t0_index(dst);
  ps.num_planes_ = static_cast<uint16_t>(topo.num_planes());
  ps.salt_ = static_cast<uint16_t>(Mix3(src, dst, 0x5eed) & 0x3FFF);
  const uint32_t P = topo.num_planes();
  const uint32_t half = topo.is_fattree() ? topo.fattree_half() : 0;
  if (ps.src_t0_ == ps.dst_t0_) {
    ps.shape_ = Shape::kSameT0;
    ps.num_distinct_ = P;
  } else if (!topo.is_fattree()) {
    ps.shape_ = Shape::kClos;
    ps.num_distinct_ = uint64_t{P} * spec.t1_per_plane * spec.parallel_links;
  } else if (topo.fattree_pod_of_t0(ps.src_t0_) ==
             topo.fattree_pod_of_t0(ps.dst_t0_)) {
    ps.shape_ = Shape::kFatSamePod;
    ps.num_distinct_ = half;
  } else {
    ps.shape_ = Shape::kFatCrossPod;
    ps.num_distinct_ = uint64_t{half} * half;
  }
  uint64_t n = ps.num_distinct_;
  if (opts.max_paths != 0 && opts.max_paths < n) n = opts.max_paths;
  if (n > 65535) n = 65535 - 65535 % P;
  ps.num_paths_ = static_cast<uint16_t>(n);

  ps.offset_.resize(P);
  ps.offset2_.resize(P);
  for (uint32_t p = 0; p < P; ++p) {
    const uint64_t m = PairSpread(src, dst, static_cast<uint16_t>(p));
    switch (ps.shape_) {
      case Shape::kSameT0:
        break;
      case Shape::kClos:
        ps.offset_[p] = static_cast<uint32_t>(m % spec.t1_per_plane);
        ps.offset2_[p] = static_cast<uint32_t>((m >> 32) % spec.parallel_links);
        break;
      case Shape::kFatSamePod:
        ps.offset_[p] = static_cast<uint32_t>(m % half);
        break;
      case Shape::kFatCrossPod:
        ps.offset_[p] = static_cast<uint32_t>(m % half);
        ps.offset2_[p] = static_cast<uint32_t>((m >> 32) % half);
        break;
    }
  }

  // The template: block, destination-specific uSIDs, host id without plane.
  PathTemplate& t = ps.tmpl_;
  t.base = HostAddress(dst, 0, opts.block);  // block : HI : LO at words 2,3
  const uint16_t hi = t.base.word(2), lo = t.base.word(3);
  const uint16_t dst_t0_usid = topo.node(topo.t0_node(0, ps.dst_t0_)).usid;
  std::array<uint16_t, 8> w{};
  w[0] = static_cast<uint16_t>(opts.block >> 16);
  w[1] = static_cast<uint16_t>(opts.block);
  int slot = 2;
  switch (ps.shape_) {
    case Shape::kSameT0:
      t.num_slots = 0;
      break;
    case Shape::kClos:
      t.num_slots = spec.parallel_links == 1 ? 1 : 2;
      break;
    case Shape::kFatSamePod:
      t.num_slots = 1;
      break;
    case Shape::kFatCrossPod:
      t.num_slots = 3;
      break;
  }
  t.first_slot = 2;
  slot += t.num_slots;
  w[slot++] = dst_t0_usid;
  t.host_slot = static_cast<uint8_t>(slot);
  w[slot++] = hi;
  w[slot++] = lo;
  t.base = Ipv6Address::FromWords(w);
  return ps;
}

PathInfo PathSet::info(PathId path) const {
  PathInfo in;
  const uint16_t p = plane(path);
  in.plane = p;
  const uint32_t q = path / num_planes_;
  const TopologySpec& spec = topo_->spec();
  switch (shape_) {
    case Shape::kSameT0:
      in.num_switches = 1;
      break;
    case Shape::kClos:
      in.t1 = (q + offset_[p]) % spec.t1_per_plane;
      in.link = (q / spec.t1_per_plane + offset2_[p]) % spec.parallel_links;
      in.num_switches = 3;
      break;
    case Shape::kFatSamePod:
      in.t1 = (q + offset_[p]) % topo_->fattree_half();
      in.num_switches = 3;
      break;
    case Shape::kFatCrossPod: {
      const uint32_t half = topo_->fattree_half();
      in.t1 = (q + offset_[p]) % half;
      in.core = in.t1 * half + (q / half + offset2_[p]) % half;
      in.num_switches = 5;
      break;
    }
  }
  return in;
}

uint16_t PathSet::FailureGroup(PathId path) const {
  const PathInfo in = info(path);
  const TopologySpec& spec = topo_->spec();
  switch (shape_) {
    case Shape::kSameT0:
      break;
    case Shape::kClos:
      return FailureGroupOf(in.plane, in.t1 * spec.parallel_links + in.link,
                            spec.t1_per_plane * spec.parallel_links);
    case Shape::kFatSamePod:
    case Shape::kFatCrossPod:
      return FailureGroupOf(in.plane, in.t1, topo_->fattree_half());
  }
  return kNoFailureGroup;
}

std::vector<uint16_t> PathSet::FailureGroups() const {
  std::vector<uint16_t> g(num_paths_);
  for (uint32_t x = 0; x < num_paths_; ++x) {
    g[x] = FailureGroup(static_cast<PathId>(x));
  }
  return g;
}

Ipv6Address PathSet::Carrier(PathId path) const {
  const PathInfo in = info(path);
  const uint16_t p = in.plane;
  Ipv6Address a = tmpl_.base;
  a.set_word(tmpl_.host_slot,
             static_cast<uint16_t>(a.word(tmpl_.host_slot) | (p & 0x3F) << 9));
  const Topology& t = *topo_;
  const int s = tmpl_.first_slot;
  switch (shape_) {
    case Shape::kSameT0:
      break;
    case Shape::kClos: {
      const TopologySpec& spec = t.spec();
      if (spec.parallel_links == 1) {
        a.set_word(s, t.node(t.t1_node(p, in.t1)).usid);
      } else {
        const uint32_t up_port =
            spec.hosts_per_t0 + in.t1 * spec.parallel_links + in.link;
        const uint32_t down_port = dst_t0_ * spec.parallel_links + in.link;
        a.set_word(s, static_cast<uint16_t>(kUsidAdjacencyBase + up_port));
        a.set_word(s + 1,
                   static_cast<uint16_t>(kUsidAdjacencyBase + down_port));
      }
      break;
    }
    case Shape::kFatSamePod: {
      const uint32_t pod = t.fattree_pod_of_t0(src_t0_);
      a.set_word(s, t.node(t.t1_node(0, pod * t.fattree_half() + in.t1)).usid);
      break;
    }
    case Shape::kFatCrossPod: {
      const uint32_t half = t.fattree_half();
      a.set_word(
          s, t.node(t.t1_node(0, t.fattree_pod_of_t0(src_t0_) * half + in.t1))
                 .usid);
      a.set_word(s + 1, t.node(t.t2_node(in.core)).usid);
      a.set_word(
          s + 2,
          t.node(t.t1_node(0, t.fattree_pod_of_t0(dst_t0_) * half + in.t1))
              .usid);
      break;
    }
  }
  return a;
}

int PathSet::carrier_shifts(PathId /*path*/) const {
  // Every uSID before the host id is consumed by a switch: the path-
  // dependent ones plus the destination T0.
  return tmpl_.num_slots + 1;
}

Ipv6Address PathSet::FinalDestination(PathId path) const {
  return HostAddress(dst_, plane(path), block_);
}

Ipv6Address PathSet::SourceAddress(PathId path) const {
  return HostAddress(src_, plane(path), block_);
}

Srh PathSet::MakeSrhFor(PathId path, uint8_t next_header) const {
  const PathInfo in = info(path);
  const uint16_t p = in.plane;
  const Topology& t = *topo_;
  std::array<Ipv6Address, kMaxPathSwitches + 1> travel;
  size_t n = 0;
  const uint16_t dst_t0_usid = t.node(t.t0_node(p, dst_t0_)).usid;
  switch (shape_) {
    case Shape::kSameT0:
      break;
    case Shape::kClos: {
      const TopologySpec& spec = t.spec();
      if (spec.parallel_links == 1) {
        travel[n++] = ClassicSid(p, t.node(t.t1_node(p, in.t1)).usid);
      } else {
        const uint32_t up_port =
            spec.hosts_per_t0 + in.t1 * spec.parallel_links + in.link;
        const uint32_t down_port = dst_t0_ * spec.parallel_links + in.link;
        travel[n++] = ClassicAdjacencySid(p, t.node(t.t0_node(p, src_t0_)).usid,
                                          static_cast<uint16_t>(up_port));
        travel[n++] = ClassicAdjacencySid(p, t.node(t.t1_node(p, in.t1)).usid,
                                          static_cast<uint16_t>(down_port));
      }
      break;
    }
    case Shape::kFatSamePod: {
      const uint32_t pod = t.fattree_pod_of_t0(src_t0_);
      travel[n++] = ClassicSid(
          0, t.node(t.t1_node(0, pod * t.fattree_half() + in.t1)).usid);
      break;
    }
    case Shape::kFatCrossPod: {
      const uint32_t half = t.fattree_half();
      travel[n++] = ClassicSid(
          0, t.node(t.t1_node(0, t.fattree_pod_of_t0(src_t0_) * half + in.t1))
                 .usid);
      travel[n++] = ClassicSid(0, t.node(t.t2_node(in.core)).usid);
      travel[n++] = ClassicSid(
          0, t.node(t.t1_node(0, t.fattree_pod_of_t0(dst_t0_) * half + in.t1))
                 .usid);
      break;
    }
  }
  travel[n++] = ClassicSid(p, dst_t0_usid);
  travel[n++] = FinalDestination(path);
  Srh srh;
  MakeSrh(std::span<const Ipv6Address>(travel.data(), n), next_header, &srh);
  return srh;
}

uint32_t PathSet::Entropy(PathId path) const {
  const uint32_t sport = 0xC000u | ((uint32_t{path} + salt_) & 0x3FFFu);
  return (sport << 16) | path;
}

int PathSet::Links(PathId path, std::span<uint32_t, kMaxPathLinks> out) const {
  const PathInfo in = info(path);
  const uint16_t p = in.plane;
  const Topology& t = *topo_;
  int n = 0;
  out[n++] = t.host_link(src_, p);
  switch (shape_) {
    case Shape::kSameT0:
      break;
    case Shape::kClos:
      out[n++] = t.fabric_link(p, src_t0_, in.t1, in.link);
      out[n++] = t.fabric_link(p, dst_t0_, in.t1, in.link);
      break;
    case Shape::kFatSamePod:
      out[n++] = t.fattree_edge_agg_link(src_t0_, in.t1);
      out[n++] = t.fattree_edge_agg_link(dst_t0_, in.t1);
      break;
    case Shape::kFatCrossPod: {
      const uint32_t half = t.fattree_half();
      const uint32_t m = in.core - in.t1 * half;
      out[n++] = t.fattree_edge_agg_link(src_t0_, in.t1);
      out[n++] =
          t.fattree_agg_core_link(t.fattree_pod_of_t0(src_t0_), in.t1, m);
      out[n++] =
          t.fattree_agg_core_link(t.fattree_pod_of_t0(dst_t0_), in.t1, m);
      out[n++] = t.fattree_edge_agg_link(dst_t0_, in.t1);
      break;
    }
  }
  out[n++] = t.host_link(dst_, p);
  return n;
}

int PathSet::Switches(PathId path,
                      std::span<uint32_t, kMaxPathSwitches> out) const {
  std::array<uint32_t, kMaxPathLinks> links;
  const int nl = Links(path, links);
  // Walk the links from the source host: each next node is a switch until
  // the destination host.
  uint32_t at = src_;
  int n = 0;
  for (int i = 0; i + 1 < nl; ++i) {
    at = topo_->peer(links[i], at);
    out[n++] = at;
  }
  return n;
}

}  // namespace prism::routing
