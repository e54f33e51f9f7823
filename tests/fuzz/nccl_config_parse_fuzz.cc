// fuzz-libs: prism_nccl_core
// Fuzzes the NCCL plugin's configuration parser (transport/nccl/config.h,
// ParseConfig: the PRISM_* environment variables against a description of
// the host's interfaces). The input is the environment, one NAME=VALUE per
// line (a line without '=' sets NAME to ""); the host is a fixed fake with a
// loopback, two IPv4 interfaces (one with a global IPv6 address too) and an
// IPv6-only one. Any input must give a configuration or fail cleanly with a
// message. Checked beyond that, for every configuration it accepts:
// - at least one device; names unique and non-empty; an IPv4 or IPv6
//   address with port 0 and the matching length; speed > 0, latency >= 0;
// - paths 1..65535, planes >= 1, connect timeout 1..3600000 ms;
// - planes 1..15 (kMaxPlanes: what a udp connection blob carries);
// - udp data path: every device has 1..15 plane addresses, each an IPv6
//   literal, and the connection's planes fit its paths (the engine refuses
//   num_planes > num_paths);
// - PRISM_IFNAME set to only blanks and commas (with PRISM_ADDRS unset or
//   empty) is never accepted;
// - verbs data path: one plane, 1..49 queue pairs, a known mode;
// - the UDP transmit mode is one of auto, raw, sockets.
// A failure's message is non-empty.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "transport/nccl/config.h"

namespace {

using prism::nccl::DataMode;
using prism::nccl::DeviceConfig;
using prism::nccl::HostInfo;
using prism::nccl::HostInterface;
using prism::nccl::kMaxPlanes;
using prism::nccl::ParseConfig;
using prism::nccl::PluginConfig;

void Check(bool ok) {
  if (!ok) abort();
}

HostInterface V4(const char* name, const char* addr, bool loopback,
                 const char* ipv6, int speed) {
  HostInterface i;
  i.name = name;
  auto* a = reinterpret_cast<sockaddr_in*>(&i.addr);
  a->sin_family = AF_INET;
  Check(inet_pton(AF_INET, addr, &a->sin_addr) == 1);
  i.addr_len = sizeof(sockaddr_in);
  i.loopback = loopback;
  i.ipv6 = ipv6;
  i.speed_mbps = speed;
  i.pci_path = loopback ? "" : std::string("/sys/devices/pci0000:00/") + name;
  return i;
}

HostInterface V6(const char* name, const char* addr) {
  HostInterface i;
  i.name = name;
  auto* a = reinterpret_cast<sockaddr_in6*>(&i.addr);
  a->sin6_family = AF_INET6;
  Check(inet_pton(AF_INET6, addr, &a->sin6_addr) == 1);
  i.addr_len = sizeof(sockaddr_in6);
  i.ipv6 = addr;
  i.speed_mbps = 400000;
  return i;
}

const HostInfo& FakeHost() {
  static const HostInfo* host = [] {
    auto* h = new HostInfo;
    h->interfaces.push_back(V4("lo", "127.0.0.1", true, "::1", 0));
    h->interfaces.push_back(V4("eth0", "10.0.0.1", false, "fd00::1", 100000));
    h->interfaces.push_back(V4("eth1", "10.0.1.1", false, "", 25000));
    h->interfaces.push_back(V6("ib0", "fd00:1::2"));
    return h;
  }();
  return *host;
}

bool IsIpv6(const std::string& s) {
  in6_addr a;
  return s.find('\0') == std::string::npos &&
         inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

void CheckDevice(const DeviceConfig& d, const PluginConfig& c) {
  Check(!d.name.empty());
  if (d.addr.ss_family == AF_INET) {
    Check(d.addr_len == sizeof(sockaddr_in));
    Check(reinterpret_cast<const sockaddr_in*>(&d.addr)->sin_port == 0);
  } else {
    Check(d.addr.ss_family == AF_INET6);
    Check(d.addr_len == sizeof(sockaddr_in6));
    Check(reinterpret_cast<const sockaddr_in6*>(&d.addr)->sin6_port == 0);
  }
  Check(d.speed_mbps > 0);
  Check(d.latency_us >= 0.0f);
  if (c.mode == DataMode::kPrismUdp) {
    Check(!d.plane_addrs.empty() &&
          d.plane_addrs.size() <= static_cast<size_t>(kMaxPlanes));
    Check(d.plane_addrs.size() <= c.paths);
    for (const std::string& a : d.plane_addrs) Check(IsIpv6(a));
  }
}

void CheckConfig(const PluginConfig& c) {
  Check(!c.devices.empty());
  std::set<std::string> names;
  for (const DeviceConfig& d : c.devices) {
    CheckDevice(d, c);
    Check(names.insert(d.name).second);
  }
  Check(c.paths >= 1);
  Check(c.planes >= 1 && c.planes <= kMaxPlanes);
  Check(c.connect_timeout_ms >= 1 && c.connect_timeout_ms <= 3600000);
  Check(c.sock_buf_bytes >= 0);
  Check(c.udp_tx_mode == "auto" || c.udp_tx_mode == "raw" ||
        c.udp_tx_mode == "sockets");
  if (c.mode == DataMode::kPrismUdp) {
    Check(c.planes == c.devices[0].plane_addrs.size());
  }
  if (c.mode == DataMode::kPrismVerbs) {
    Check(c.planes == 1);
    Check(c.ib_qps >= 1 && c.ib_qps <= 49);
    Check(c.ib_mode == "auto" || c.ib_mode == "uc" || c.ib_mode == "rc");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> env;
  size_t pos = 0;
  while (pos < in.size()) {
    size_t end = in.find('\n', pos);
    if (end == std::string_view::npos) end = in.size();
    const std::string_view line = in.substr(pos, end - pos);
    const size_t eq = line.find('=');
    // getenv values end at the first NUL: so do these.
    auto c_str = [](std::string_view v) {
      return std::string(v.substr(0, v.find('\0')));
    };
    if (eq == std::string_view::npos) {
      env[c_str(line)] = "";
    } else {
      env[c_str(line.substr(0, eq))] = c_str(line.substr(eq + 1));
    }
    pos = end + 1;
  }
  auto getenv_fn = [&env](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto c = ParseConfig(getenv_fn, FakeHost());
  if (c.ok()) {
    CheckConfig(*c);
    const char* addrs = getenv_fn("PRISM_ADDRS");
    const char* ifname = getenv_fn("PRISM_IFNAME");
    if ((addrs == nullptr || *addrs == '\0') && ifname != nullptr &&
        *ifname != '\0') {
      Check(std::string_view(ifname).find_first_not_of(" \t\n\v\f\r,") !=
            std::string_view::npos);
    }
  } else {
    Check(!c.status().message().empty());
  }
  return 0;
}
