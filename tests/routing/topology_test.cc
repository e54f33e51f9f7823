// Tests for routing/topology: node/link tables, index helpers, port order,
// uSIDs, JSON loading and config validation, and the full 131,072-host MRC
// fabric.
#include "routing/topology.h"

#include <chrono>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/base/json.h"

namespace prism::routing {
namespace {

using ::testing::HasSubstr;

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

TEST(TopologyTest, SmallClosTables) {
  absl::StatusOr<Topology> t = Topology::Build(Clos(2, 3, 2, 4, 2));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_hosts(), 12u);
  EXPECT_EQ(t->num_planes(), 2u);
  EXPECT_EQ(t->num_nodes(), 12u + 2 * (3 + 2));
  EXPECT_EQ(t->num_links(), 2u * (12 + 3 * 2 * 2));
  for (uint32_t h = 0; h < 12; ++h) {
    EXPECT_EQ(t->node(h).kind, NodeKind::kHost);
    EXPECT_EQ(t->node(h).index, h);
    EXPECT_EQ(t->host_t0_index(h), h / 4);
    ASSERT_EQ(t->ports(h).size(), 2u);
    for (uint16_t p = 0; p < 2; ++p) {
      uint32_t l = t->host_link(h, p);
      EXPECT_EQ(t->ports(h)[p], l);
      EXPECT_EQ(t->link(l).a, h);
      EXPECT_EQ(t->link(l).b, t->t0_node(p, h / 4));
      EXPECT_EQ(t->link(l).plane, p);
      EXPECT_EQ(t->peer(l, h), t->t0_node(p, h / 4));
    }
  }
  for (uint16_t p = 0; p < 2; ++p) {
    std::set<uint16_t> usids;
    for (uint32_t i = 0; i < 3; ++i) {
      const uint32_t n = t->t0_node(p, i);
      EXPECT_EQ(t->node(n).kind, NodeKind::kT0);
      EXPECT_EQ(t->node(n).plane, p);
      EXPECT_EQ(t->node(n).index, i);
      EXPECT_TRUE(usids.insert(t->node(n).usid).second);
      // Ports: 4 hosts, then t1-major, parallel-minor uplinks.
      ASSERT_EQ(t->ports(n).size(), 4u + 2 * 2);
      for (uint32_t j = 0; j < 4; ++j) {
        EXPECT_EQ(t->ports(n)[j], t->host_link(i * 4 + j, p));
      }
      for (uint32_t j = 0; j < 2; ++j) {
        for (uint32_t k = 0; k < 2; ++k) {
          uint32_t l = t->fabric_link(p, i, j, k);
          EXPECT_EQ(t->ports(n)[4 + j * 2 + k], l);
          EXPECT_EQ(t->link(l).a, n);
          EXPECT_EQ(t->link(l).b, t->t1_node(p, j));
          EXPECT_EQ(t->link(l).plane, p);
        }
      }
    }
    for (uint32_t j = 0; j < 2; ++j) {
      const uint32_t n = t->t1_node(p, j);
      EXPECT_EQ(t->node(n).kind, NodeKind::kT1);
      EXPECT_TRUE(usids.insert(t->node(n).usid).second);
      ASSERT_EQ(t->ports(n).size(), 3u * 2);
      for (uint32_t i = 0; i < 3; ++i) {
        for (uint32_t k = 0; k < 2; ++k) {
          EXPECT_EQ(t->ports(n)[i * 2 + k], t->fabric_link(p, i, j, k));
        }
      }
    }
  }
  // Every link id is reachable through exactly two port entries.
  std::vector<int> seen(t->num_links(), 0);
  for (uint32_t n = 0; n < t->num_nodes(); ++n) {
    for (uint32_t l : t->ports(n)) ++seen[l];
  }
  for (int c : seen) EXPECT_EQ(c, 2);
}

TEST(TopologyTest, FatTree) {
  TopologySpec s;
  s.kind = "fattree3";
  s.fattree_k = 4;
  s.hosts_per_t0 = 0;  // 0 = k/2
  absl::StatusOr<Topology> t = Topology::Build(s);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->is_fattree());
  // k=4: 4 pods x 2 edges x 2 hosts = 16 hosts, 8 edge, 8 agg, 4 core.
  EXPECT_EQ(t->num_hosts(), 16u);
  EXPECT_EQ(t->num_nodes(), 16u + 8 + 8 + 4);
  EXPECT_EQ(t->num_links(), 16u + 16 + 16);
  EXPECT_EQ(t->spec().hosts_per_t0, 2u);
  for (uint32_t n = 0; n < t->num_nodes(); ++n) {
    const Node& node = t->node(n);
    size_t want = node.kind == NodeKind::kHost ? 1 : 4;  // every switch: k
    EXPECT_EQ(t->ports(n).size(), want) << n;
  }
  for (uint32_t e = 0; e < 8; ++e) {
    for (uint32_t a = 0; a < 2; ++a) {
      const Link& l = t->link(t->fattree_edge_agg_link(e, a));
      EXPECT_EQ(l.a, t->t0_node(0, e));
      EXPECT_EQ(l.b, t->t1_node(0, t->fattree_pod_of_t0(e) * 2 + a));
    }
  }
  for (uint32_t pod = 0; pod < 4; ++pod) {
    for (uint32_t a = 0; a < 2; ++a) {
      for (uint32_t m = 0; m < 2; ++m) {
        const Link& l = t->link(t->fattree_agg_core_link(pod, a, m));
        EXPECT_EQ(l.a, t->t1_node(0, pod * 2 + a));
        EXPECT_EQ(l.b, t->t2_node(a * 2 + m));
        EXPECT_EQ(t->node(l.b).kind, NodeKind::kT2);
      }
    }
  }
  std::set<uint16_t> usids;
  for (uint32_t n = t->num_hosts(); n < t->num_nodes(); ++n) {
    EXPECT_TRUE(usids.insert(t->node(n).usid).second);
  }
}

TEST(TopologyTest, RejectsBadConfigs) {
  auto err = [](const TopologySpec& s) {
    absl::StatusOr<Topology> t = Topology::Build(s);
    EXPECT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(t.status().message());
  };
  EXPECT_THAT(err(Clos(0, 2, 2, 2)), HasSubstr("planes"));
  EXPECT_THAT(err(Clos(1, 0, 2, 2)), HasSubstr("t0_per_plane"));
  EXPECT_THAT(err(Clos(1, 2, 0, 2)), HasSubstr("t1_per_plane"));
  EXPECT_THAT(err(Clos(1, 2, 2, 0)), HasSubstr("hosts_per_t0"));
  EXPECT_THAT(err(Clos(1, 2, 2, 2, 0)), HasSubstr("parallel_links"));
  EXPECT_THAT(err(Clos(65, 2, 2, 2)), HasSubstr("planes"));
  EXPECT_THAT(err(Clos(1, 5000, 2, 2)), HasSubstr("t0_per_plane"));
  EXPECT_THAT(err(Clos(8, 4096, 4096, 2048)), HasSubstr("too many hosts"));
  EXPECT_THAT(err(Clos(64, 4096, 4096, 1, 64)), HasSubstr("too large"));
  TopologySpec s = Clos(1, 2, 2, 2);
  s.host_link_bps = 0;
  EXPECT_THAT(err(s), HasSubstr("rate"));
  s = Clos(1, 2, 2, 2);
  s.fabric_link_delay = -1;
  EXPECT_THAT(err(s), HasSubstr("delay"));
  s.kind = "torus";
  s.fabric_link_delay = 0;
  EXPECT_THAT(err(s), HasSubstr("unknown kind"));
  s.kind = "fattree3";
  s.fattree_k = 5;
  EXPECT_THAT(err(s), HasSubstr("fattree_k"));
  s.fattree_k = 4;
  s.planes = 2;
  EXPECT_THAT(err(s), HasSubstr("one plane"));
}

TEST(TopologyTest, FromJson) {
  absl::StatusOr<Topology> t = Topology::FromJson(R"({
    "kind": "clos2", "planes": 8, "t0_per_plane": 4, "t1_per_plane": 2,
    "hosts_per_t0": 3, "parallel_links": 2, "host_link_gbps": 400,
    "fabric_link_gbps": 800, "host_link_delay_ns": 250,
    "fabric_link_delay_ns": 1000.5})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_planes(), 8u);
  EXPECT_EQ(t->num_hosts(), 12u);
  EXPECT_EQ(t->spec().parallel_links, 2u);
  EXPECT_EQ(t->link(t->host_link(0, 3)).rate_bps, 400'000'000'000ull);
  EXPECT_EQ(t->link(t->host_link(0, 3)).delay, 250 * kNanosecond);
  EXPECT_EQ(t->link(t->fabric_link(7, 3, 1, 1)).rate_bps, 800'000'000'000ull);
  EXPECT_EQ(t->link(t->fabric_link(7, 3, 1, 1)).delay, 1'000'500);
  // A scenario file with a "topology" member works too.
  t = Topology::FromJson(
      R"({"seed": 1, "topology": {"kind": "fattree3", "k": 8}})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_hosts(), 8u * 4 * 4);
  EXPECT_EQ(t->spec().hosts_per_t0, 4u);
}

TEST(TopologyTest, Oversubscription) {
  // 16 hosts x 100G down; 2:1 => 800G up => 8 T1 at 100G each.
  absl::StatusOr<json::Value> v = json::Parse(
      R"({"t0_per_plane": 4, "hosts_per_t0": 16, "oversubscription": 2})");
  ASSERT_TRUE(v.ok());
  absl::StatusOr<TopologySpec> s = Topology::SpecFromJson(*v);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->t1_per_plane, 8u);
  v = json::Parse(R"({"hosts_per_t0": 10, "oversubscription": 3,
                      "parallel_links": 2, "fabric_link_gbps": 50})");
  s = Topology::SpecFromJson(*v);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->t1_per_plane, 4u);  // 1000G / (3 * 100G) = 3.33 -> 4
}

TEST(TopologyTest, JsonErrors) {
  auto err = [](std::string_view text) {
    absl::StatusOr<Topology> t = Topology::FromJson(text);
    EXPECT_FALSE(t.ok()) << text;
    return std::string(t.status().message());
  };
  EXPECT_THAT(err("[1]"), HasSubstr("object"));
  EXPECT_THAT(err(R"({"plane": 2})"), HasSubstr("unknown key \"plane\""));
  EXPECT_THAT(err(R"({"planes": -1})"), HasSubstr("planes"));
  EXPECT_THAT(err(R"({"planes": 1.5})"), HasSubstr("planes"));
  EXPECT_THAT(err(R"({"planes": "8"})"), HasSubstr("planes"));
  EXPECT_THAT(err(R"({"planes": 1e20})"), HasSubstr("planes"));
  EXPECT_THAT(err(R"({"t0_per_plane": 0})"), HasSubstr("t0_per_plane"));
  EXPECT_THAT(err(R"({"host_link_gbps": 0})"), HasSubstr("host_link_gbps"));
  EXPECT_THAT(err(R"({"fabric_link_delay_ns": -5})"),
              HasSubstr("fabric_link_delay_ns"));
  EXPECT_THAT(err(R"({"t1_per_plane": 2, "oversubscription": 2})"),
              HasSubstr("only one"));
  EXPECT_THAT(err(R"({"oversubscription": 0.5})"),
              HasSubstr("oversubscription"));
  EXPECT_THAT(err(R"({"kind": "fattree3", "k": 7})"), HasSubstr("fattree_k"));
  EXPECT_THAT(err("{\"planes\": 2,\n \"planes\": 3}"), HasSubstr("2:2"));
}

// The MRC fabric: 8 planes of 512-port switches. Per plane 512 T0 with 256
// host ports + 256 uplinks (one to each of 256 T1), so 512 * 256 = 131,072
// hosts; every T1 has 512 downlinks.
TEST(TopologyTest, Mrc131kFabric) {
  auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Topology> t = Topology::Build(Clos(8, 512, 256, 256));
  auto dt = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_hosts(), 131072u);
  EXPECT_EQ(t->num_nodes(), 131072u + 8 * (512 + 256));
  // Per plane: 131,072 host links + 512 * 256 fabric links.
  EXPECT_EQ(t->num_links(), 8u * (131072 + 131072));
  for (uint16_t p = 0; p < 8; ++p) {
    EXPECT_EQ(t->ports(t->t0_node(p, 511)).size(), 512u);
    EXPECT_EQ(t->ports(t->t1_node(p, 255)).size(), 512u);
  }
  EXPECT_EQ(t->ports(131071).size(), 8u);
  const Link& last = t->link(t->fabric_link(7, 511, 255, 0));
  EXPECT_EQ(last.a, t->t0_node(7, 511));
  EXPECT_EQ(last.b, t->t1_node(7, 255));
  EXPECT_EQ(t->fabric_link(7, 511, 255, 0), t->num_links() - 1);
  // Generous bound for ASan builds on a loaded 2-core machine; the
  // RelWithDebInfo build takes well under a second.
  EXPECT_LT(std::chrono::duration<double>(dt).count(), 20.0);
}

}  // namespace
}  // namespace prism::routing
