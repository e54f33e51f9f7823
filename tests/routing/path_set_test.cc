// Tests for routing/path_set: path counts and plane balance, stable ids,
// entropy values, the per-destination template, and — by walking every path
// hop by hop through a model of the switches' static tables — that the uSID
// carrier and the SRH of each path steer a packet over exactly the links
// Links() reports and arrive at FinalDestination() (the address the UDP
// checksum covers). Includes the 131,072-host MRC fabric.
#include "routing/path_set.h"

#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace prism::routing {
namespace {

TopologySpec Clos(uint32_t planes, uint32_t t0, uint32_t t1, uint32_t hpt0,
                  uint32_t k = 1) {
  TopologySpec s;
  s.kind = "clos2";
  s.planes = planes;
  s.t0_per_plane = t0;
  s.t1_per_plane = t1;
  s.hosts_per_t0 = hpt0;
  s.parallel_links = k;
  return s;
}

Topology MustBuild(const TopologySpec& s) {
  absl::StatusOr<Topology> t = Topology::Build(s);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// A switch's view of the world: its node uSID, its adjacency uSIDs
// (0xE000 + port) and a route from every neighbour's uSID / classic SID /
// the attached hosts' addresses to the port.
struct Walk {
  std::vector<uint32_t> links;
  Ipv6Address final_dst;
  bool delivered = false;
  uint32_t host = 0;
};

// Forwarding step shared by both encodings: the port of `node` whose peer is
// the switch with uSID `usid`, or whose peer host owns `addr`.
int PortToUsid(const Topology& t, uint32_t node, uint16_t usid) {
  const auto& ports = t.ports(node);
  for (size_t i = 0; i < ports.size(); ++i) {
    uint32_t peer = t.peer(ports[i], node);
    if (t.node(peer).kind != NodeKind::kHost && t.node(peer).usid == usid) {
      return static_cast<int>(i);
    }
  }
  return -1;
}
int PortToHost(const Topology& t, uint32_t node, const Ipv6Address& a) {
  uint32_t h;
  uint16_t p;
  if (!ParseHostAddress(a, &h, &p)) return -1;
  const auto& ports = t.ports(node);
  for (size_t i = 0; i < ports.size(); ++i) {
    if (t.peer(ports[i], node) == h && t.link(ports[i]).plane == p) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

Walk WalkCarrier(const Topology& t, uint32_t src, uint16_t plane,
                 Ipv6Address dst) {
  Walk w;
  uint32_t link = t.host_link(src, plane);
  uint32_t at = t.peer(link, src);
  w.links.push_back(link);
  for (int hop = 0; hop < 10; ++hop) {
    const Node& n = t.node(at);
    if (n.kind == NodeKind::kHost) {
      w.delivered = true;
      w.host = at;
      w.final_dst = dst;
      return w;
    }
    int port = -1;
    const uint16_t first = dst.word(2);
    if (first == n.usid) {
      EXPECT_EQ(UsidShift(&dst, n.usid), UsidAction::kShifted);
      continue;  // look up the shifted address on the same switch
    }
    if (first >= kUsidAdjacencyBase &&
        first - kUsidAdjacencyBase < static_cast<int>(t.ports(at).size())) {
      port = first - kUsidAdjacencyBase;  // End.X: shift, out of this port
      EXPECT_EQ(UsidShift(&dst, first), UsidAction::kShifted);
    } else if (first & kHostAddressMarker) {
      port = PortToHost(t, at, dst);
    } else {
      port = PortToUsid(t, at, first);
    }
    if (port < 0) return w;  // no route: dropped
    link = t.ports(at)[port];
    w.links.push_back(link);
    at = t.peer(link, at);
  }
  return w;
}

Walk WalkSrh(const Topology& t, uint32_t src, uint16_t plane, Srh srh) {
  Walk w;
  Ipv6Address dst = srh.active();
  uint32_t link = t.host_link(src, plane);
  uint32_t at = t.peer(link, src);
  w.links.push_back(link);
  for (int hop = 0; hop < 12; ++hop) {
    const Node& n = t.node(at);
    if (n.kind == NodeKind::kHost) {
      w.delivered = srh.segments_left == 0;
      w.host = at;
      w.final_dst = dst;
      return w;
    }
    int port = -1;
    if (dst == ClassicSid(n.plane, n.usid)) {  // End
      EXPECT_TRUE(SrhAdvance(&srh, &dst));
      continue;
    }
    bool adj = false;
    for (size_t i = 0; i < t.ports(at).size(); ++i) {
      if (dst == ClassicAdjacencySid(n.plane, n.usid, uint16_t(i))) {  // End.X
        EXPECT_TRUE(SrhAdvance(&srh, &dst));
        port = static_cast<int>(i);
        adj = true;
      }
    }
    if (!adj) {
      if (dst.word(0) == kClassicSidPrefix) {
        port = PortToUsid(t, at, dst.word(2));
      } else {
        port = PortToHost(t, at, dst);
      }
    }
    if (port < 0) return w;
    link = t.ports(at)[port];
    w.links.push_back(link);
    at = t.peer(link, at);
  }
  return w;
}

// Checks every path of (src, dst): both encodings reach dst over Links().
void CheckAllPaths(const Topology& t, uint32_t src, uint32_t dst) {
  absl::StatusOr<PathSet> ps = PathSet::Build(t, src, dst);
  ASSERT_TRUE(ps.ok()) << ps.status();
  std::set<std::vector<uint32_t>> distinct;
  for (PathId x = 0; x < ps->num_paths(); ++x) {
    SCOPED_TRACE(testing::Message()
                 << "src " << src << " dst " << dst << " path " << x);
    std::array<uint32_t, kMaxPathLinks> lk;
    const int nl = ps->Links(x, lk);
    std::vector<uint32_t> want(lk.begin(), lk.begin() + nl);
    EXPECT_TRUE(distinct.insert(want).second);
    for (uint32_t l : want) EXPECT_EQ(t.link(l).plane, ps->plane(x));
    std::array<uint32_t, kMaxPathSwitches> sw;
    EXPECT_EQ(ps->Switches(x, sw), nl - 1);
    EXPECT_EQ(nl - 1, ps->info(x).num_switches);

    Walk wc = WalkCarrier(t, src, ps->plane(x), ps->Carrier(x));
    EXPECT_TRUE(wc.delivered);
    EXPECT_EQ(wc.host, dst);
    EXPECT_EQ(wc.links, want);
    EXPECT_EQ(wc.final_dst, ps->FinalDestination(x));
    EXPECT_EQ(UsidShifted(ps->Carrier(x), ps->carrier_shifts(x)),
              ps->FinalDestination(x));
    UsidCarrier c;
    EXPECT_EQ(DecodeUsidCarrier(ps->Carrier(x), &c), UsidStatus::kOk);

    Srh srh = ps->MakeSrhFor(x);
    EXPECT_EQ(srh.segments[0], ps->FinalDestination(x));
    Walk ws = WalkSrh(t, src, ps->plane(x), srh);
    EXPECT_TRUE(ws.delivered);
    EXPECT_EQ(ws.host, dst);
    EXPECT_EQ(ws.links, want);
    EXPECT_EQ(ws.final_dst, ps->FinalDestination(x));
  }
  EXPECT_EQ(distinct.size(), ps->num_paths());
}

TEST(PathSetTest, SmallClosEveryPairEveryPath) {
  Topology t = MustBuild(Clos(2, 3, 2, 2));
  for (uint32_t s = 0; s < t.num_hosts(); ++s) {
    for (uint32_t d = 0; d < t.num_hosts(); ++d) {
      if (s != d) CheckAllPaths(t, s, d);
    }
  }
}

TEST(PathSetTest, ParallelLinksUseAdjacencySids) {
  Topology t = MustBuild(Clos(2, 3, 2, 2, 3));
  absl::StatusOr<PathSet> ps = PathSet::Build(t, 0, 5);
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->num_paths(), 2 * 2 * 3);  // planes x T1 x parallel links
  std::set<std::pair<uint32_t, uint32_t>> spine_link[2];
  for (PathId x = 0; x < ps->num_paths(); ++x) {
    PathInfo in = ps->info(x);
    EXPECT_TRUE(spine_link[in.plane].insert({in.t1, in.link}).second);
    EXPECT_GE(ps->Carrier(x).word(2), kUsidAdjacencyBase);
    EXPECT_EQ(ps->carrier_shifts(x), 3);
  }
  for (uint32_t s : {0u, 1u, 2u}) {
    for (uint32_t d : {3u, 4u, 5u, 1u}) {
      if (s != d) CheckAllPaths(t, s, d);
    }
  }
}

TEST(PathSetTest, FatTreeEveryShape) {
  TopologySpec s;
  s.kind = "fattree3";
  s.fattree_k = 4;
  s.hosts_per_t0 = 0;
  Topology t = MustBuild(s);
  // k=4: same edge (hosts 0,1): 1 path; same pod (0, 2): 2; other pod: 4.
  auto count = [&](uint32_t a, uint32_t b) {
    return PathSet::Build(t, a, b)->num_paths();
  };
  EXPECT_EQ(count(0, 1), 1);
  EXPECT_EQ(count(0, 2), 2);
  EXPECT_EQ(count(0, 15), 4);
  for (uint32_t a = 0; a < t.num_hosts(); ++a) {
    for (uint32_t b = 0; b < t.num_hosts(); ++b) {
      if (a != b) CheckAllPaths(t, a, b);
    }
  }
  absl::StatusOr<PathSet> ps = PathSet::Build(t, 0, 15);
  UsidCarrier c;
  ASSERT_EQ(DecodeUsidCarrier(ps->Carrier(0), &c), UsidStatus::kOk);
  EXPECT_EQ(c.num_usids, 6);  // agg, core, agg, edge, host HI, host LO
}

TEST(PathSetTest, FailureGroupsFollowTheUplinkAndAreSymmetric) {
  // clos2, 2 planes, 4 T0, 3 T1, 2 parallel links; hosts 0, 1 on T0 0.
  Topology t = MustBuild(Clos(2, 4, 3, 2, 2));
  // Same T0: no uplink, no group.
  absl::StatusOr<PathSet> same = PathSet::Build(t, 0, 1);
  ASSERT_TRUE(same.ok());
  for (PathId x = 0; x < same->num_paths(); ++x) {
    EXPECT_EQ(same->FailureGroup(x), kNoFailureGroup);
  }
  // Engine-wide ids: from one source, a group is one (plane, T1, link)
  // uplink whatever the destination; two paths share a group exactly when
  // they take the same uplink, which is also the mirror's (b -> a).
  std::map<uint16_t, std::tuple<uint16_t, uint32_t, uint32_t>> uplink_of;
  for (uint32_t d : {2u, 3u, 4u, 5u, 6u, 7u}) {
    absl::StatusOr<PathSet> ab = PathSet::Build(t, 0, d);
    absl::StatusOr<PathSet> ba = PathSet::Build(t, d, 0);
    ASSERT_TRUE(ab.ok() && ba.ok());
    const std::vector<uint16_t> groups = ab->FailureGroups();
    ASSERT_EQ(groups.size(), ab->num_paths());
    for (PathId x = 0; x < ab->num_paths(); ++x) {
      const PathInfo in = ab->info(x);
      const uint16_t g = groups[x];
      EXPECT_EQ(g, ab->FailureGroup(x));
      EXPECT_EQ(g, ba->FailureGroup(x)) << "path " << x << " to " << d;
      EXPECT_EQ(g, FailureGroupOf(in.plane, in.t1 * 2 + in.link, 3 * 2));
      const auto key = std::make_tuple(in.plane, in.t1, in.link);
      auto [it, fresh] = uplink_of.emplace(g, key);
      EXPECT_EQ(it->second, key) << "group " << g << " names two uplinks";
    }
  }
  EXPECT_EQ(uplink_of.size(), 2u * 3 * 2);  // every uplink, one id each
  // Fat tree: the group is the aggregation switch of the source's pod.
  TopologySpec s;
  s.kind = "fattree3";
  s.fattree_k = 4;
  s.hosts_per_t0 = 0;
  Topology ft = MustBuild(s);
  absl::StatusOr<PathSet> cross = PathSet::Build(ft, 0, 15);
  ASSERT_TRUE(cross.ok());
  for (PathId x = 0; x < cross->num_paths(); ++x) {
    EXPECT_EQ(cross->FailureGroup(x), FailureGroupOf(0, cross->info(x).t1, 2));
  }
  EXPECT_EQ(PathSet::Build(ft, 0, 1)->FailureGroup(0), kNoFailureGroup);
  // Ids that do not fit 16 bits are no group.
  EXPECT_EQ(FailureGroupOf(31, 5000, 5001), kNoFailureGroup);
  EXPECT_EQ(FailureGroupOf(0, 3, 3), kNoFailureGroup);
}

TEST(PathSetTest, Errors) {
  Topology t = MustBuild(Clos(2, 2, 2, 2));
  EXPECT_FALSE(PathSet::Build(t, 1, 1).ok());
  EXPECT_FALSE(PathSet::Build(t, 0, 4).ok());
  EXPECT_FALSE(PathSet::Build(t, 99, 0).ok());
}

TEST(PathSetTest, TemplatePlusPlaneAndUplink) {
  Topology t = MustBuild(Clos(4, 4, 8, 2));
  absl::StatusOr<PathSet> ps = PathSet::Build(t, 0, 7);
  ASSERT_TRUE(ps.ok());
  const PathTemplate& tp = ps->path_template();
  EXPECT_EQ(tp.num_slots, 1);
  EXPECT_EQ(tp.first_slot, 2);
  for (PathId x = 0; x < ps->num_paths(); ++x) {
    Ipv6Address c = ps->Carrier(x);
    for (int w = 0; w < 8; ++w) {
      if (w == tp.first_slot) {
        EXPECT_EQ(c.word(w),
                  t.node(t.t1_node(ps->plane(x), ps->info(x).t1)).usid);
      } else if (w == tp.host_slot) {
        EXPECT_EQ(c.word(w), tp.base.word(w) | ps->plane(x) << 9);
      } else {
        EXPECT_EQ(c.word(w), tp.base.word(w));
      }
    }
  }
}

TEST(PathSetTest, EntropyValues) {
  Topology t = MustBuild(Clos(8, 4, 16, 2));
  absl::StatusOr<PathSet> ps = PathSet::Build(t, 0, 7);
  ASSERT_TRUE(ps.ok());
  std::set<uint32_t> evs;
  std::set<uint16_t> ports;
  for (PathId x = 0; x < ps->num_paths(); ++x) {
    uint32_t ev = ps->Entropy(x);
    EXPECT_TRUE(evs.insert(ev).second);
    EXPECT_EQ(ev & 0xFFFF, x);  // the path id is the EV's low half
    EntropyFields f = ps->EntropyFieldsFor(x);
    EXPECT_GE(f.udp_src_port, 0xC000);  // ephemeral range
    EXPECT_EQ(FieldsToEntropy(f), ev);
    ports.insert(f.udp_src_port);
  }
  EXPECT_EQ(ports.size(), ps->num_paths());  // 128 paths < 16384 ports
}

// The MRC fabric: 8 planes x (512 T0 x 256 T1), 256 hosts per T0.
// Arithmetic: a pair on different T0s has one path per (plane, T1) = 8 x 256
// = 2048 distinct paths, 256 per plane, each T1 of a plane exactly once.
// A pair on the same T0 has one path per plane: 8. With max_paths = 256
// (MRC's EV profile size) the first 256 ids give 256 / 8 = 32 per plane,
// on 32 distinct T1s of that plane.
class Mrc131kTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    topo_ = new Topology(MustBuild(Clos(8, 512, 256, 256)));
  }
  static void TearDownTestSuite() { delete topo_; }
  static Topology* topo_;
};
Topology* Mrc131kTest::topo_ = nullptr;

TEST_F(Mrc131kTest, CrossT0PathCountsAndBalance) {
  const Topology& t = *topo_;
  ASSERT_EQ(t.num_hosts(), 131072u);
  for (auto [s, d] :
       {std::pair<uint32_t, uint32_t>{0, 131071}, {256, 512}, {70000, 3}}) {
    absl::StatusOr<PathSet> ps = PathSet::Build(t, s, d);
    ASSERT_TRUE(ps.ok()) << ps.status();
    EXPECT_EQ(ps->num_distinct(), 2048u);
    EXPECT_EQ(ps->num_paths(), 2048);
    std::vector<std::set<uint32_t>> t1s(8);
    std::vector<int> per_plane(8);
    for (PathId x = 0; x < ps->num_paths(); ++x) {
      EXPECT_EQ(ps->plane(x), x % 8);
      ++per_plane[ps->plane(x)];
      t1s[ps->plane(x)].insert(ps->info(x).t1);
    }
    for (int p = 0; p < 8; ++p) {
      EXPECT_EQ(per_plane[p], 256);
      EXPECT_EQ(t1s[p].size(), 256u);  // every spine exactly once
    }
  }
}

TEST_F(Mrc131kTest, SameT0OnePathPerPlane) {
  absl::StatusOr<PathSet> ps = PathSet::Build(*topo_, 512, 767);  // T0 2
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->num_paths(), 8);
  for (PathId x = 0; x < 8; ++x) {
    std::array<uint32_t, kMaxPathLinks> lk;
    EXPECT_EQ(ps->Links(x, lk), 2);
    EXPECT_EQ(lk[0], topo_->host_link(512, x));
    EXPECT_EQ(lk[1], topo_->host_link(767, x));
  }
}

TEST_F(Mrc131kTest, ProfileOf256IsBalanced) {
  PathSetOptions o;
  o.max_paths = 256;
  absl::StatusOr<PathSet> ps = PathSet::Build(*topo_, 12345, 98765, o);
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(ps->num_paths(), 256);
  std::vector<std::set<uint32_t>> t1s(8);
  for (PathId x = 0; x < 256; ++x) t1s[ps->plane(x)].insert(ps->info(x).t1);
  for (int p = 0; p < 8; ++p) EXPECT_EQ(t1s[p].size(), 32u);
  // Spot-check the encodings of a few paths against the switch model.
  for (PathId x : {0, 1, 7, 128, 255}) {
    std::array<uint32_t, kMaxPathLinks> lk;
    const int nl = ps->Links(x, lk);
    Walk w = WalkCarrier(*topo_, 12345, ps->plane(x), ps->Carrier(x));
    EXPECT_EQ(w.links, std::vector<uint32_t>(lk.begin(), lk.begin() + nl));
    EXPECT_EQ(w.host, 98765u);
    Walk s = WalkSrh(*topo_, 12345, ps->plane(x), ps->MakeSrhFor(x));
    EXPECT_EQ(s.links, w.links);
  }
}

TEST_F(Mrc131kTest, StableIdsAndSpreadAcrossPairs) {
  absl::StatusOr<PathSet> a = PathSet::Build(*topo_, 1, 100000);
  absl::StatusOr<PathSet> b = PathSet::Build(*topo_, 1, 100000);
  for (PathId x = 0; x < a->num_paths(); x += 97) {
    EXPECT_EQ(a->Carrier(x), b->Carrier(x));
    EXPECT_EQ(a->Entropy(x), b->Entropy(x));
  }
  // Path 0 of different pairs starts on different spines: 2000 pairs whose
  // first path would all hit T1 0 without the per-pair offset.
  std::set<uint32_t> first;
  for (uint32_t i = 0; i < 2000; ++i) {
    absl::StatusOr<PathSet> ps = PathSet::Build(*topo_, i, 131071 - i);
    first.insert(ps->info(0).t1);
  }
  EXPECT_GT(first.size(), 200u);
  // The offsets are the unordered pair's: path x back from the destination
  // crosses the spine (and parallel link) path x out did, so a SACK sent on
  // the path id its data arrived on takes the mirrored route.
  for (uint32_t i = 0; i < 200; ++i) {
    absl::StatusOr<PathSet> out = PathSet::Build(*topo_, i, 131071 - i);
    absl::StatusOr<PathSet> back = PathSet::Build(*topo_, 131071 - i, i);
    ASSERT_TRUE(out.ok() && back.ok());
    for (PathId x = 0; x < out->num_paths(); x += 31) {
      EXPECT_EQ(out->info(x).t1, back->info(x).t1) << i << " " << x;
      EXPECT_EQ(out->info(x).link, back->info(x).link) << i << " " << x;
    }
  }
}

}  // namespace
}  // namespace prism::routing
