// Unit tests of the plugin's environment configuration (transport/nccl/
// config.h), linked directly against the plugin's core library.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "transport/nccl/config.h"

namespace prism::nccl {
namespace {

EnvGetter Env(std::map<std::string, std::string>* m) {
  return [m](const char* k) -> const char* {
    auto it = m->find(k);
    return it == m->end() ? nullptr : it->second.c_str();
  };
}

// Each (variable, value) of `bad`, set on top of `base`, must fail
// LoadConfig with a message that names the variable.
template <size_t N>
void ExpectEachRejectedByName(
    const std::map<std::string, std::string>& base,
    const std::pair<const char*, const char*> (&bad)[N]) {
  for (const auto& [k, v] : bad) {
    std::map<std::string, std::string> e = base;
    e[k] = v;
    auto c = LoadConfig(Env(&e));
    ASSERT_FALSE(c.ok()) << k << "=" << v;
    EXPECT_NE(c.status().message().find(k), std::string::npos) << c.status();
  }
}

TEST(NcclConfig, ExplicitAddresses) {
  std::map<std::string, std::string> e = {
      {"PRISM_ADDRS", "127.0.0.1, 127.0.0.2,::1"},
      {"PRISM_PATHS", "64"},
      {"PRISM_PLANES", "4"},
      {"PRISM_SPEED_MBPS", "400000"},
      {"PRISM_LATENCY_US", "3"},
      {"PRISM_DATAPATH", "tcp"}};
  auto c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->devices.size(), 3u);
  EXPECT_EQ(c->mode, DataMode::kTcpInterim);
  EXPECT_EQ(c->paths, 64);
  EXPECT_EQ(c->planes, 4);
  EXPECT_EQ(c->devices[0].name, "prism0:127.0.0.1");
  EXPECT_EQ(c->devices[2].addr.ss_family, AF_INET6);
  EXPECT_EQ(AddrToString(c->devices[1].addr), "127.0.0.2");
  for (const DeviceConfig& d : c->devices) {
    EXPECT_EQ(d.speed_mbps, 400000);
    EXPECT_FLOAT_EQ(d.latency_us, 3.0f);
  }
  EXPECT_NE(c->devices[0].guid, c->devices[1].guid);
}

TEST(NcclConfig, LoopbackInterfaceByName) {
  std::map<std::string, std::string> e = {{"PRISM_IFNAME", "=lo"}};
  auto c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->devices.size(), 1u);
  EXPECT_EQ(c->devices[0].name, "prism_lo");
  EXPECT_EQ(c->devices[0].ifname, "lo");
  EXPECT_GT(c->devices[0].speed_mbps, 0);
}

TEST(NcclConfig, BadValuesNameTheVariable) {
  const std::pair<const char*, const char*> bad[] = {
      {"PRISM_PATHS", "0"},
      {"PRISM_PATHS", "70000"},
      {"PRISM_PLANES", "x"},
      {"PRISM_PORT", "-1"},
      {"PRISM_DATAPATH", "carrier"},
      {"PRISM_ADDRS", "300.1.1.1"},
      {"PRISM_LATENCY_US", "1e3"},
      {"PRISM_NCCL_GPU_STAGING", "2"},
      {"PRISM_NCCL_CALL_LOG", "-1"},
      {"PRISM_CONNECT_TIMEOUT_MS", "0"},
      {"PRISM_CONNECT_TIMEOUT_MS", "3600001"},
      {"PRISM_CONNECT_TIMEOUT_MS", "1s"}};
  ExpectEachRejectedByName({{"PRISM_ADDRS", "127.0.0.1"}}, bad);
}

// The handshake's bound: 30 s unless PRISM_CONNECT_TIMEOUT_MS says otherwise.
TEST(NcclConfig, ConnectTimeout) {
  std::map<std::string, std::string> e = {{"PRISM_ADDRS", "127.0.0.1"}};
  auto c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->connect_timeout_ms, 30000u);
  e["PRISM_CONNECT_TIMEOUT_MS"] = "250";
  c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->connect_timeout_ms, 250u);
}

// PRISM_ADDRS with only blanks and commas lists no device: refused, naming
// the variable, on every data path. Before 2026-12-05 it gave a
// configuration without devices, whose first device the udp data path then
// read out of bounds (found by tests/fuzz/nccl_config_parse_fuzz.cc; its
// corpus keeps the input, regress_blank_addrs_udp).
TEST(NcclConfig, BlankAddressListIsRefused) {
  std::vector<std::string> paths = {"tcp"};
  if (PrismDataPathAvailable()) paths.push_back("udp");
  for (const std::string& dp : paths) {
    for (const char* addrs : {" ", "\t", ",", " , ,"}) {
      std::map<std::string, std::string> e = {{"PRISM_DATAPATH", dp},
                                              {"PRISM_ADDRS", addrs}};
      auto c = LoadConfig(Env(&e));
      ASSERT_FALSE(c.ok()) << dp << " '" << addrs << "'";
      EXPECT_NE(c.status().message().find("PRISM_ADDRS"), std::string::npos)
          << c.status();
    }
  }
}

// PRISM_UDP_ADDRS with a device group of only commas and blanks, and
// more planes than paths, are refused naming the variables. Before
// 2026-12-05 the first gave its device zero planes and the second failed
// only at connect (the engine refuses num_planes > num_paths); found by
// tests/fuzz/nccl_config_parse_fuzz.cc (corpus: regress_empty_plane_group).
TEST(NcclConfig, PlaneAddressesAreChecked) {
  if (!PrismDataPathAvailable()) GTEST_SKIP() << "no udp data path";
  const std::map<std::string, std::string> base = {
      {"PRISM_DATAPATH", "udp"}, {"PRISM_ADDRS", "127.0.0.1,127.0.0.2"}};
  for (const char* udp : {"fd00::1; ,", " , ;fd00::2", "fd00::1;,"}) {
    std::map<std::string, std::string> e = base;
    e["PRISM_UDP_ADDRS"] = udp;
    auto c = LoadConfig(Env(&e));
    ASSERT_FALSE(c.ok()) << udp;
    EXPECT_NE(c.status().message().find("lists no plane address"),
              std::string::npos)
        << c.status();
  }
  std::map<std::string, std::string> e = base;
  e["PRISM_PLANES"] = "4";
  e["PRISM_PATHS"] = "3";
  auto c = LoadConfig(Env(&e));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("PRISM_PATHS=3"), std::string::npos)
      << c.status();
  e["PRISM_PATHS"] = "4";
  c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->planes, 4);
}

// PRISM_PLANES and a PRISM_UDP_ADDRS group have the same bound, 15 (what
// a Prism udp connection's blob carries; kMaxPlanes), and the error says
// why. Before 2026-12-05 PRISM_PLANES took 16, which passed init and
// failed every udp connect (the blob refuses a 16th plane address).
TEST(NcclConfig, PlaneLimitIsTheConnectionBlobs) {
  EXPECT_EQ(kMaxPlanes, 15);
  std::vector<std::string> paths = {"tcp"};
  if (PrismDataPathAvailable()) paths.push_back("udp");
  for (const std::string& dp : paths) {
    std::map<std::string, std::string> e = {{"PRISM_DATAPATH", dp},
                                            {"PRISM_ADDRS", "127.0.0.1"},
                                            {"PRISM_PATHS", "64"},
                                            {"PRISM_PLANES", "15"}};
    auto c = LoadConfig(Env(&e));
    ASSERT_TRUE(c.ok()) << dp << ": " << c.status();
    EXPECT_EQ(c->planes, 15) << dp;
    e["PRISM_PLANES"] = "16";
    c = LoadConfig(Env(&e));
    ASSERT_FALSE(c.ok()) << dp;
    EXPECT_NE(c.status().message().find("PRISM_PLANES='16'"), std::string::npos)
        << c.status();
    EXPECT_NE(c.status().message().find("at most 15 plane addresses in its "
                                        "connection blob"),
              std::string::npos)
        << c.status();
  }
  if (!PrismDataPathAvailable()) return;
  std::string fifteen;
  for (int i = 1; i <= 15; ++i) {
    fifteen += (i > 1 ? "," : "") + std::string("fd00::") + std::to_string(i);
  }
  std::map<std::string, std::string> e = {{"PRISM_DATAPATH", "udp"},
                                          {"PRISM_ADDRS", "127.0.0.1"},
                                          {"PRISM_PATHS", "64"},
                                          {"PRISM_UDP_ADDRS", fifteen}};
  auto c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->planes, 15);
  EXPECT_EQ(c->devices[0].plane_addrs.size(), 15u);
  e["PRISM_UDP_ADDRS"] = fifteen + ",fd00::16";
  c = LoadConfig(Env(&e));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(
                "PRISM_UDP_ADDRS: device 0 lists 16 plane addresses; at most "
                "15 (a Prism udp connection carries at most 15 plane "
                "addresses in its connection blob)"),
            std::string::npos)
      << c.status();
}

// Plane addresses that do not fit the connection blob (255 bytes) are
// refused at init, naming PRISM_UDP_ADDRS, the bytes they need and the
// limit: each plane after the first costs 2 bytes + the bytes of its
// address that differ from the first plane's + 2 for its own port
// (PRISM_PORT=0: every plane's socket has its own ephemeral port). N
// unrelated addresses (all 16 bytes differ) need 36 + (N-1) x 20 bytes with
// ephemeral ports, 36 + (N-1) x 18 with a fixed PRISM_PORT. Before
// 2026-12-06 they passed init and every connect and accept failed (the
// endpoint could not encode its blob).
TEST(NcclConfig, PlaneAddressesMustFitTheConnectionBlob) {
  if (!PrismDataPathAvailable()) GTEST_SKIP() << "no udp data path";
  auto unrelated = [](int n) {
    std::string s;
    for (int p = 0; p < n; ++p) {
      const std::string group(4, "123456789abcdef"[p]);  // all bytes differ
      for (int g = 0; g < 8; ++g) {
        s += (p > 0 && g == 0 ? "," : (g > 0 ? ":" : "")) + std::string(group);
      }
    }
    return s;
  };
  struct Case {
    int planes;
    const char* port;
    int need;  // 0: fits
  };
  const Case cases[] = {{11, "0", 0},
                        {12, "0", 256},
                        {15, "0", 316},
                        {13, "5000", 0},
                        {14, "5000", 270}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.planes) + " planes, PRISM_PORT=" + c.port);
    std::map<std::string, std::string> e = {
        {"PRISM_DATAPATH", "udp"},
        {"PRISM_ADDRS", "127.0.0.1"},
        {"PRISM_PATHS", "64"},
        {"PRISM_PORT", c.port},
        {"PRISM_UDP_ADDRS", unrelated(c.planes)}};
    auto cfg = LoadConfig(Env(&e));
    if (c.need == 0) {
      ASSERT_TRUE(cfg.ok()) << cfg.status();
      EXPECT_EQ(cfg->planes, c.planes);
      continue;
    }
    ASSERT_FALSE(cfg.ok());
    const std::string want =
        "PRISM_UDP_ADDRS: the " + std::to_string(c.planes) +
        " plane addresses of device 0 (prism0:127.0.0.1) need " +
        std::to_string(c.need) +
        " bytes of connection info, more than the 255 a Prism udp "
        "connection carries";
    EXPECT_NE(cfg.status().message().find(want), std::string::npos)
        << cfg.status();
  }
  // Addresses sharing a prefix with the first are cheap: 15 planes that
  // differ in one byte each, ephemeral ports: 36 + 14 x 5 = 106 bytes.
  std::string near;
  for (int i = 1; i <= 15; ++i) {
    near += (i > 1 ? "," : "") + std::string("fd00::") + std::to_string(i);
  }
  std::map<std::string, std::string> e = {{"PRISM_DATAPATH", "udp"},
                                          {"PRISM_ADDRS", "127.0.0.1"},
                                          {"PRISM_PATHS", "64"},
                                          {"PRISM_UDP_ADDRS", near}};
  EXPECT_TRUE(LoadConfig(Env(&e)).ok());
}

// A host with a loopback and one up interface, eth0 (10.0.0.1, fd00::1).
HostInfo LoAndEth0() {
  HostInfo host;
  for (const char* name : {"lo", "eth0"}) {
    HostInterface i;
    i.name = name;
    auto* a = reinterpret_cast<sockaddr_in*>(&i.addr);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr =
        htonl(std::string(name) == "lo" ? 0x7f000001 : 0x0a000001);
    i.addr_len = sizeof(sockaddr_in);
    i.loopback = std::string(name) == "lo";
    i.ipv6 = i.loopback ? "::1" : "fd00::1";
    i.speed_mbps = i.loopback ? 0 : 25000;
    host.interfaces.push_back(i);
  }
  return host;
}

// PRISM_IFNAME set but only blanks (and commas) is refused at init, naming
// the variable; empty is "unset" (as NCCL's NCCL_SOCKET_IFNAME) and picks
// the first non-loopback interface. Before 2026-12-05 blanks were taken as
// unset too.
TEST(NcclConfig, BlankIfnameIsRefused) {
  const HostInfo host = LoAndEth0();
  for (const char* blank : {" ", "\t", "  ,  ", ","}) {
    std::map<std::string, std::string> e = {{"PRISM_DATAPATH", "tcp"},
                                            {"PRISM_IFNAME", blank}};
    auto c = ParseConfig(Env(&e), host);
    ASSERT_FALSE(c.ok()) << "'" << blank << "'";
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
    EXPECT_NE(c.status().message().find("PRISM_IFNAME='"), std::string::npos)
        << c.status();
    EXPECT_NE(c.status().message().find("lists no interface"),
              std::string::npos)
        << c.status();
  }
  std::map<std::string, std::string> e = {{"PRISM_DATAPATH", "tcp"},
                                          {"PRISM_IFNAME", ""}};
  auto c = ParseConfig(Env(&e), host);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->devices.size(), 1u);
  EXPECT_EQ(c->devices[0].name, "prism_eth0");
  // Names around blanks still count.
  e["PRISM_IFNAME"] = " , =eth0 ";
  c = ParseConfig(Env(&e), host);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->devices[0].name, "prism_eth0");
}

// ParseConfig takes the host's interfaces as an argument (what the fuzz
// target uses): the first non-loopback interface that is up, its sysfs
// speed, and (udp) its global IPv6 address as the plane address.
TEST(NcclConfig, ParseConfigUsesTheGivenHost) {
  const HostInfo host = LoAndEth0();
  std::map<std::string, std::string> e = {{"PRISM_DATAPATH", "tcp"}};
  auto c = ParseConfig(Env(&e), host);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->devices.size(), 1u);
  EXPECT_EQ(c->devices[0].name, "prism_eth0");
  EXPECT_EQ(AddrToString(c->devices[0].addr), "10.0.0.1");
  EXPECT_EQ(c->devices[0].speed_mbps, 25000);
  if (PrismDataPathAvailable()) {
    e["PRISM_DATAPATH"] = "udp";
    e["PRISM_PLANES"] = "2";
    c = ParseConfig(Env(&e), host);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->devices[0].plane_addrs,
              (std::vector<std::string>{"fd00::1", "fd00::1"}));
  }
  e = {{"PRISM_IFNAME", "=wlan0"}};
  EXPECT_TRUE(absl::IsNotFound(ParseConfig(Env(&e), host).status()));
}

// Device memory is staged (and advertised) only when asked for (gpu.h).
TEST(NcclConfig, GpuStagingIsOptIn) {
  std::map<std::string, std::string> e = {{"PRISM_ADDRS", "127.0.0.1"}};
  auto c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->gpu_staging);
  e["PRISM_NCCL_GPU_STAGING"] = "1";
  c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->gpu_staging);
}

TEST(NcclConfig, NoMatchingInterfaceIsNotFound) {
  std::map<std::string, std::string> e = {{"PRISM_IFNAME", "=nonexistent0"}};
  auto c = LoadConfig(Env(&e));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound) << c.status();
}

TEST(NcclConfig, UdpNeedsTheEndpointDataPath) {
  std::map<std::string, std::string> e = {{"PRISM_ADDRS", "127.0.0.1"},
                                          {"PRISM_DATAPATH", "udp"}};
  auto c = LoadConfig(Env(&e));
  if (PrismDataPathAvailable()) {
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->mode, DataMode::kPrismUdp);
  } else {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  }
}

TEST(NcclConfig, EngineAndDatapathKnobs) {
  if (!PrismDataPathAvailable()) GTEST_SKIP() << "no endpoint data path";
  std::map<std::string, std::string> e = {{"PRISM_ADDRS", "127.0.0.1"},
                                          {"PRISM_DATAPATH", "udp"}};
  auto c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  // Defaults: GSO and GRO on (as prism_perf), engine timers untouched.
  EXPECT_TRUE(c->udp_gso);
  EXPECT_TRUE(c->udp_gro);
  EXPECT_FALSE(c->udp_rx_in_place);
  EXPECT_EQ(c->spin_us, -1);
  EXPECT_EQ(c->rto_min_us, 0u);
  EXPECT_EQ(c->probe_us, 0u);
  e["PRISM_UDP_GSO"] = "0";
  e["PRISM_UDP_GRO"] = "0";
  e["PRISM_UDP_RX_IN_PLACE"] = "1";
  e["PRISM_SPIN_US"] = "20";
  e["PRISM_RTO_MIN_US"] = "4000";
  e["PRISM_PROBE_US"] = "1000";
  c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->udp_gso);
  EXPECT_FALSE(c->udp_gro);
  EXPECT_TRUE(c->udp_rx_in_place);
  EXPECT_EQ(c->spin_us, 20);
  EXPECT_EQ(c->rto_min_us, 4000u);
  EXPECT_EQ(c->probe_us, 1000u);
  const std::pair<const char*, const char*> bad[] = {
      {"PRISM_UDP_GSO", "2"},          {"PRISM_UDP_GRO", "yes"},
      {"PRISM_UDP_RX_IN_PLACE", "-1"}, {"PRISM_SPIN_US", "-2"},
      {"PRISM_RTO_MIN_US", "0"},       {"PRISM_PROBE_US", "1e3"}};
  ExpectEachRejectedByName(e, bad);
}

TEST(NcclConfig, VerbsDevicesQpsAndMode) {
  std::map<std::string, std::string> e = {
      {"PRISM_ADDRS", "127.0.0.1,127.0.0.2"},
      {"PRISM_DATAPATH", "verbs"},
      {"PRISM_IB_DEVICE", "mlx5_0, mlx5_1"},
      {"PRISM_IB_QPS", "16"},
      {"PRISM_IB_MODE", "rc"},
      {"PRISM_BASE_RTT_US", "500"}};
  auto c = LoadConfig(Env(&e));
  if (!PrismVerbsAvailable()) {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
    return;
  }
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mode, DataMode::kPrismVerbs);
  EXPECT_STREQ(DataModeName(c->mode), "verbs");
  ASSERT_EQ(c->devices.size(), 2u);
  EXPECT_EQ(c->devices[0].ib_device, "mlx5_0");
  EXPECT_EQ(c->devices[1].ib_device, "mlx5_1");
  EXPECT_EQ(c->ib_qps, 16);
  EXPECT_EQ(c->ib_mode, "rc");
  EXPECT_EQ(c->base_rtt_us, 500u);
  EXPECT_EQ(c->planes, 1);
  // One name applies to every device.
  e["PRISM_IB_DEVICE"] = "rxe_lo";
  c = LoadConfig(Env(&e));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->devices[1].ib_device, "rxe_lo");
  // Bad values name the variable.
  const std::pair<const char*, const char*> bad[] = {
      {"PRISM_IB_QPS", "0"},
      {"PRISM_IB_QPS", "50"},
      {"PRISM_IB_MODE", "ud"},
      {"PRISM_IB_DEVICE", "a,b,c"}};
  ExpectEachRejectedByName(e, bad);
}

}  // namespace
}  // namespace prism::nccl
