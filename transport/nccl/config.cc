#include "transport/nccl/config.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#ifdef PRISM_NCCL_HAVE_ENDPOINT
#include "transport/runtime/conn_blob.h"
#endif

namespace prism::nccl {
namespace {

// FNV-1a, 64 bit: a stable GUID from the device name and address.
uint64_t Fnv1a(absl::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

absl::Status ParseInt(const EnvGetter& env, const char* var, int64_t lo,
                      int64_t hi, int64_t* out) {
  const char* v = env(var);
  if (v == nullptr || *v == '\0') return absl::OkStatus();
  int64_t x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        var, "='", v, "': expected an integer in [", lo, ", ", hi, "]"));
  }
  *out = x;
  return absl::OkStatus();
}

int SysfsSpeedMbps(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  long speed = 0;
  if (f >> speed && speed > 0 && speed < (1l << 30)) {
    return static_cast<int>(speed);
  }
  return 0;
}

std::string SysfsPciPath(const std::string& ifname) {
  const std::string link = "/sys/class/net/" + ifname + "/device";
  char* real = realpath(link.c_str(), nullptr);
  if (real == nullptr) return "";
  std::string out(real);
  free(real);
  return out;
}

bool ParseAddr(absl::string_view text, sockaddr_storage* out, socklen_t* len) {
  std::string s(text);
  memset(out, 0, sizeof(*out));
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  if (inet_pton(AF_INET, s.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET6, s.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

// Up interfaces with an IPv4 (preferred) or global IPv6 address, in the
// order the kernel lists them, one entry per interface, with their global
// IPv6 address and sysfs facts.
HostInfo ListInterfaces() {
  HostInfo out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (int pass = 0; pass < 2; ++pass) {
    const int family = pass == 0 ? AF_INET : AF_INET6;
    for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != family) {
        continue;
      }
      if ((it->ifa_flags & IFF_UP) == 0) continue;
      if (family == AF_INET6) {
        auto* a6 = reinterpret_cast<sockaddr_in6*>(it->ifa_addr);
        if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
      }
      bool seen = false;
      for (const HostInterface& i : out.interfaces) {
        seen |= (i.name == it->ifa_name);
      }
      if (seen) continue;
      HostInterface i;
      i.name = it->ifa_name;
      memset(&i.addr, 0, sizeof(i.addr));
      i.addr_len =
          family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      memcpy(&i.addr, it->ifa_addr, i.addr_len);
      i.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
      out.interfaces.push_back(i);
    }
  }
  // The global IPv6 address of each (the udp data path's default plane).
  for (HostInterface& i : out.interfaces) {
    for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET6 ||
          i.name != it->ifa_name) {
        continue;
      }
      auto* a6 = reinterpret_cast<sockaddr_in6*>(it->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
      sockaddr_storage ss{};
      memcpy(&ss, a6, sizeof(*a6));
      i.ipv6 = AddrToString(ss);
      break;
    }
    i.pci_path = SysfsPciPath(i.name);
    i.speed_mbps = SysfsSpeedMbps(i.name);
  }
  freeifaddrs(list);
  return out;
}

bool IsIpv6Literal(const std::string& s) {
  in6_addr a;
  return inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

bool IsLoopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr) >>
            24) == 127;
  }
  return IN6_IS_ADDR_LOOPBACK(
      &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr);
}

absl::Status ParseEngineOptions(const EnvGetter& env, PluginConfig* cfg);

// PRISM_DATAPATH=verbs: devices, QPs, mode; the shared engine options.
absl::Status ResolveVerbs(const EnvGetter& env, PluginConfig* cfg) {
  if (auto s = ParseEngineOptions(env, cfg); !s.ok()) return s;
  cfg->planes = 1;
  int64_t qps = cfg->ib_qps;
  if (auto s = ParseInt(env, "PRISM_IB_QPS", 1, 49, &qps); !s.ok()) return s;
  cfg->ib_qps = static_cast<uint16_t>(qps);
  if (const char* m = env("PRISM_IB_MODE"); m != nullptr && *m != '\0') {
    const absl::string_view v(m);
    if (v != "auto" && v != "uc" && v != "rc")
      return absl::InvalidArgumentError(
          absl::StrCat("PRISM_IB_MODE='", v, "': expected auto, uc or rc"));
    cfg->ib_mode = std::string(v);
  }
  if (const char* d = env("PRISM_IB_DEVICE"); d != nullptr && *d != '\0') {
    std::vector<std::string> names;
    for (absl::string_view n : absl::StrSplit(d, ',', absl::SkipWhitespace()))
      names.emplace_back(absl::StripAsciiWhitespace(n));
    if (names.size() != 1 && names.size() != cfg->devices.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "PRISM_IB_DEVICE gives ", names.size(), " RDMA devices for ",
          cfg->devices.size(), " NCCL devices (give one, or one each)"));
    for (size_t i = 0; i < cfg->devices.size(); ++i)
      cfg->devices[i].ib_device = names.size() == 1 ? names[0] : names[i];
  }
  return absl::OkStatus();
}

// Engine options common to the Prism data paths.
absl::Status ParseEngineOptions(const EnvGetter& env, PluginConfig* cfg) {
  int64_t mtu = cfg->link_mtu, busy = 0, seed = 0;
  if (auto s = ParseInt(env, "PRISM_LINK_MTU", 1280, 65535, &mtu); !s.ok()) {
    return s;
  }
  if (auto s = ParseInt(env, "PRISM_BUSY_POLL", 0, 1, &busy); !s.ok()) {
    return s;
  }
  if (auto s = ParseInt(env, "PRISM_SEED", 0, INT64_MAX, &seed); !s.ok()) {
    return s;
  }
  int64_t rtt = cfg->base_rtt_us;
  if (auto s = ParseInt(env, "PRISM_BASE_RTT_US", 1, 10000000, &rtt); !s.ok()) {
    return s;
  }
  cfg->base_rtt_us = static_cast<uint32_t>(rtt);
  int64_t gso = cfg->udp_gso, gro = cfg->udp_gro, spin = cfg->spin_us;
  int64_t in_place = cfg->udp_rx_in_place;
  if (auto s = ParseInt(env, "PRISM_UDP_RX_IN_PLACE", 0, 1, &in_place);
      !s.ok()) {
    return s;
  }
  cfg->udp_rx_in_place = in_place != 0;
  int64_t rto = cfg->rto_min_us, probe = cfg->probe_us;
  if (auto s = ParseInt(env, "PRISM_UDP_GSO", 0, 1, &gso); !s.ok()) return s;
  if (auto s = ParseInt(env, "PRISM_UDP_GRO", 0, 1, &gro); !s.ok()) return s;
  if (auto s = ParseInt(env, "PRISM_SPIN_US", -1, 1000000, &spin); !s.ok()) {
    return s;
  }
  if (auto s = ParseInt(env, "PRISM_RTO_MIN_US", 1, 10000000, &rto); !s.ok()) {
    return s;
  }
  if (auto s = ParseInt(env, "PRISM_PROBE_US", 1, 10000000, &probe); !s.ok()) {
    return s;
  }
  cfg->udp_gso = gso != 0;
  cfg->udp_gro = gro != 0;
  cfg->spin_us = static_cast<int32_t>(spin);
  cfg->rto_min_us = static_cast<uint32_t>(rto);
  cfg->probe_us = static_cast<uint32_t>(probe);
  cfg->link_mtu = static_cast<uint32_t>(mtu);
  cfg->busy_poll = busy != 0;
  cfg->seed = static_cast<uint64_t>(seed);
  if (const char* m = env("PRISM_UDP_TX_MODE"); m != nullptr && *m != '\0') {
    const std::string v(m);
    if (v != "auto" && v != "raw" && v != "sockets") {
      return absl::InvalidArgumentError(absl::StrCat(
          "PRISM_UDP_TX_MODE='", v, "': expected auto, raw or sockets"));
    }
    cfg->udp_tx_mode = v;
  }
  if (const char* c = env("PRISM_CONGESTION"); c != nullptr && *c != '\0') {
    cfg->congestion = c;
  }
  if (const char* p = env("PRISM_PATH_POLICY"); p != nullptr && *p != '\0') {
    cfg->path_policy = p;
  }
  return absl::OkStatus();
}

// The global IPv6 address of interface `ifname`, or "" when it has none.
std::string InterfaceIpv6(const HostInfo& host, const std::string& ifname) {
  for (const HostInterface& i : host.interfaces) {
    if (i.name == ifname) return i.ipv6;
  }
  return "";
}

#ifdef PRISM_NCCL_HAVE_ENDPOINT
// The plane addresses of `d` must fit the connection blob of its Prism udp
// connections (ConnectionBlob::kMaxBytes = 255 bytes; the Hello/Ack carry
// nothing bigger): after the first plane's address, each plane costs 2
// bytes, plus each byte of its address that differs from the first plane's,
// plus 2 for its port when the planes' ports differ (PRISM_PORT=0: each
// plane's socket gets its own ephemeral port). The blob is encoded here as
// the endpoint will (runtime::EncodeBlob); before 2026-12-06 unrelated
// addresses passed init and every connect and accept failed.
absl::Status CheckPlanesFitTheBlob(const PluginConfig& cfg, size_t index,
                                   const DeviceConfig& d) {
  runtime::ConnInfoWire w;
  w.datapath = runtime::BlobDatapath::kUdp;
  w.info.conn_id = 1;
  w.info.num_paths = cfg.paths;
  w.info.num_planes = static_cast<uint16_t>(d.plane_addrs.size());
  w.info.mtu_payload = cfg.link_mtu;  // below 64 KiB, as the real one
  size_t need = 18 + 2 + 16;          // conn_blob.h: fixed part, plane 0
  for (size_t p = 0; p < d.plane_addrs.size(); ++p) {
    runtime::BlobAddress a;
    if (inet_pton(AF_INET6, d.plane_addrs[p].c_str(), a.addr.data()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PRISM_UDP_ADDRS: '", d.plane_addrs[p], "' is not an IPv6 address"));
    }
    a.port = cfg.port != 0 ? cfg.port : static_cast<uint16_t>(1 + p);
    if (p > 0) {
      need += 2 + (cfg.port != 0 ? 0 : 2);
      for (int i = 0; i < 16; ++i) need += a.addr[i] != w.planes[0].addr[i];
    }
    w.planes.push_back(a);
  }
  if (EncodeBlob(w).ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "PRISM_UDP_ADDRS: the ", d.plane_addrs.size(),
      " plane addresses of device ", index, " (", d.name, ") need ", need,
      " bytes of connection info, more than the ", ConnectionBlob::kMaxBytes,
      " a Prism udp connection carries: each plane after the first costs 2 "
      "bytes, plus each byte of its address that differs from the first "
      "plane's",
      cfg.port != 0 ? ""
                    : ", plus 2 for its own port (PRISM_PORT unset or 0: an "
                      "ephemeral port per plane)",
      "; use plane addresses that share a prefix with the first, fewer "
      "planes, or a fixed PRISM_PORT"));
}
#endif

absl::Status ResolvePlaneAddrs(const EnvGetter& env, const HostInfo& host,
                               PluginConfig* cfg) {
  if (auto s = ParseEngineOptions(env, cfg); !s.ok()) return s;
  const char* planes_env = env("PRISM_PLANES");
  const bool planes_set = planes_env != nullptr && *planes_env != '\0';
  const char* udp = env("PRISM_UDP_ADDRS");
  std::vector<std::vector<std::string>> groups;
  if (udp != nullptr && *udp != '\0') {
    for (absl::string_view g :
         absl::StrSplit(udp, ';', absl::SkipWhitespace())) {
      std::vector<std::string> addrs;
      for (absl::string_view a :
           absl::StrSplit(g, ',', absl::SkipWhitespace())) {
        std::string s(absl::StripAsciiWhitespace(a));
        if (!IsIpv6Literal(s)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "PRISM_UDP_ADDRS: '", s, "' is not an IPv6 address"));
        }
        addrs.push_back(s);
      }
      if (addrs.size() > static_cast<size_t>(kMaxPlanes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PRISM_UDP_ADDRS: device ", groups.size(), " lists ", addrs.size(),
            " plane addresses; at most ", kMaxPlanes,
            " (a Prism udp connection carries at most ", kMaxPlanes,
            " plane addresses in its connection blob)"));
      }
      // A group of only commas and blanks ("fd00::1; ,"). Before
      // 2026-12-05 it gave its device zero planes (found by
      // nccl_config_parse_fuzz).
      if (addrs.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("PRISM_UDP_ADDRS: device ", groups.size(), " ('", g,
                         "') lists no plane address"));
      }
      groups.push_back(addrs);
    }
    if (groups.size() != cfg->devices.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PRISM_UDP_ADDRS lists ", groups.size(), " devices but there are ",
          cfg->devices.size(), " (PRISM_IFNAME / PRISM_ADDRS)"));
    }
  }
  for (size_t i = 0; i < cfg->devices.size(); ++i) {
    DeviceConfig& d = cfg->devices[i];
    if (!groups.empty()) {
      d.plane_addrs = groups[i];
      if (planes_set && d.plane_addrs.size() != cfg->planes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PRISM_PLANES=", cfg->planes, " but PRISM_UDP_ADDRS gives device ",
            i, " ", d.plane_addrs.size(), " plane addresses"));
      }
      continue;
    }
    std::string a;
    if (IsLoopback(d.addr)) {
      a = "::1";
    } else if (d.addr.ss_family == AF_INET6) {
      a = AddrToString(d.addr);
    } else if (!d.ifname.empty()) {
      a = InterfaceIpv6(host, d.ifname);
    }
    if (a.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PRISM_DATAPATH=udp: device ", d.name,
                       " has no IPv6 address; set PRISM_UDP_ADDRS"));
    }
    d.plane_addrs.assign(cfg->planes, a);
  }
  // Every plane needs a path (the engine refuses a connection with more
  // planes than paths; before 2026-12-05 that surfaced only at connect).
  for (const DeviceConfig& d : cfg->devices) {
    if (d.plane_addrs.size() > cfg->paths) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PRISM_PATHS=", cfg->paths, " is fewer than the ",
          d.plane_addrs.size(), " planes of device ", d.name,
          " (PRISM_PLANES / PRISM_UDP_ADDRS): every plane needs a path"));
    }
  }
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  for (size_t i = 0; i < cfg->devices.size(); ++i) {
    if (auto s = CheckPlanesFitTheBlob(*cfg, i, cfg->devices[i]); !s.ok()) {
      return s;
    }
  }
#endif
  // Connections span every plane of the device.
  cfg->planes = static_cast<uint16_t>(cfg->devices[0].plane_addrs.size());
  return absl::OkStatus();
}

}  // namespace

const char* DataModeName(DataMode mode) {
  switch (mode) {
    case DataMode::kTcpInterim:
      return "tcp-interim";
    case DataMode::kPrismUdp:
      return "udp";
    case DataMode::kPrismVerbs:
      return "verbs";
  }
  return "?";
}

bool PrismVerbsAvailable() {
#ifdef PRISM_NCCL_HAVE_VERBS
  return true;
#else
  return false;
#endif
}

bool PrismDataPathAvailable() {
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  return true;
#else
  return false;
#endif
}

std::string AddrToString(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr,
              buf, sizeof(buf));
  } else if (addr.ss_family == AF_INET6) {
    inet_ntop(AF_INET6,
              &reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr, buf,
              sizeof(buf));
  } else {
    return "?";
  }
  return buf;
}

absl::StatusOr<PluginConfig> LoadConfig(const EnvGetter& env) {
  return ParseConfig(env, ListInterfaces());
}

absl::StatusOr<PluginConfig> ParseConfig(const EnvGetter& env,
                                         const HostInfo& host) {
  PluginConfig cfg;

  // Data path.
  cfg.mode =
      PrismDataPathAvailable() ? DataMode::kPrismUdp : DataMode::kTcpInterim;
  if (const char* dp = env("PRISM_DATAPATH"); dp != nullptr && *dp != '\0') {
    const absl::string_view v(dp);
    if (v == "tcp") {
      cfg.mode = DataMode::kTcpInterim;
    } else if (v == "udp") {
      if (!PrismDataPathAvailable()) {
        return absl::UnimplementedError(
            "PRISM_DATAPATH=udp: this build of the plugin has no Prism "
            "endpoint data path (prism/endpoint.h was not available); use "
            "PRISM_DATAPATH=tcp");
      }
      cfg.mode = DataMode::kPrismUdp;
    } else if (v == "verbs") {
      if (!PrismVerbsAvailable()) {
        return absl::UnimplementedError(
            "PRISM_DATAPATH=verbs: this build of the plugin has no verbs "
            "data path (libibverbs was not found at build time)");
      }
      cfg.mode = DataMode::kPrismVerbs;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("PRISM_DATAPATH='", v, "': expected tcp, udp or verbs"));
    }
  }

  int64_t paths = cfg.paths, planes = cfg.planes, port = cfg.port;
  int64_t speed = 0, latency = -1, sock_buf = cfg.sock_buf_bytes;
  if (auto s = ParseInt(env, "PRISM_PATHS", 1, 65535, &paths); !s.ok()) {
    return s;
  }
  // The same bound as a PRISM_UDP_ADDRS group (kMaxPlanes; before
  // 2026-12-05 this said 16, which passed init and failed every udp
  // connect).
  if (auto s = ParseInt(env, "PRISM_PLANES", 1, kMaxPlanes, &planes); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (a Prism udp connection carries at most ",
                     kMaxPlanes, " plane addresses in its connection blob)"));
  }
  if (auto s = ParseInt(env, "PRISM_PORT", 0, 65535, &port); !s.ok()) {
    return s;
  }
  if (auto s = ParseInt(env, "PRISM_SPEED_MBPS", 1, 1 << 30, &speed); !s.ok()) {
    return s;
  }
  if (auto s = ParseInt(env, "PRISM_LATENCY_US", 0, 1000000, &latency);
      !s.ok()) {
    return s;
  }
  if (auto s = ParseInt(env, "PRISM_SOCK_BUF", 0, 1 << 30, &sock_buf);
      !s.ok()) {
    return s;
  }
  int64_t connect_timeout = cfg.connect_timeout_ms;
  if (auto s = ParseInt(env, "PRISM_CONNECT_TIMEOUT_MS", 1, 3600000,
                        &connect_timeout);
      !s.ok()) {
    return s;
  }
  cfg.connect_timeout_ms = static_cast<uint32_t>(connect_timeout);
  int64_t gpu_staging = 0;
  if (auto s = ParseInt(env, "PRISM_NCCL_GPU_STAGING", 0, 1, &gpu_staging);
      !s.ok()) {
    return s;
  }
  cfg.gpu_staging = gpu_staging != 0;
  if (auto s =
          ParseInt(env, "PRISM_NCCL_CALL_LOG", 0, INT64_MAX, &cfg.call_log);
      !s.ok()) {
    return s;
  }
  cfg.paths = static_cast<uint16_t>(paths);
  cfg.planes = static_cast<uint16_t>(planes);
  cfg.port = static_cast<uint16_t>(port);
  cfg.sock_buf_bytes = static_cast<int>(sock_buf);

  // Devices: explicit addresses, else interfaces.
  const char* addrs = env("PRISM_ADDRS");
  const char* ifnames = env("PRISM_IFNAME");
  if (addrs != nullptr && *addrs != '\0') {
    int index = 0;
    for (absl::string_view a :
         absl::StrSplit(addrs, ',', absl::SkipWhitespace())) {
      a = absl::StripAsciiWhitespace(a);
      DeviceConfig d;
      if (!ParseAddr(a, &d.addr, &d.addr_len)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PRISM_ADDRS: '", a, "' is not an IPv4 or IPv6 address"));
      }
      d.name = absl::StrCat("prism", index++, ":", a);
      cfg.devices.push_back(d);
    }
    // Only separators and blanks: no device. Before 2026-12-05 this was
    // taken as a configuration with no devices (the udp data path then read
    // the first of them: out of bounds; found by nccl_config_parse_fuzz).
    if (cfg.devices.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PRISM_ADDRS='", addrs,
                       "' lists no address (unset it to use "
                       "PRISM_IFNAME)"));
    }
  } else {
    const std::vector<HostInterface>& ifaces = host.interfaces;
    std::vector<std::string> wanted;
    if (ifnames != nullptr && *ifnames != '\0') {
      for (absl::string_view w :
           absl::StrSplit(ifnames, ',', absl::SkipWhitespace())) {
        wanted.emplace_back(absl::StripAsciiWhitespace(w));
      }
      // Set, but only blanks and commas: most likely a mistake (an
      // unexpanded shell variable), not a request for the default. Empty
      // stays "unset", as NCCL's NCCL_SOCKET_IFNAME. Before 2026-12-05 this
      // silently picked the first non-loopback interface.
      if (wanted.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PRISM_IFNAME='", ifnames,
            "' lists no interface (only blanks and commas); unset it, or "
            "set it empty, for the first non-loopback interface that is "
            "up"));
      }
    }
    for (const HostInterface& i : ifaces) {
      bool take = false;
      if (wanted.empty()) {
        take = !i.loopback && cfg.devices.empty();
      } else {
        for (const std::string& w : wanted) {
          if (!w.empty() && w[0] == '=') {
            take |= (i.name == w.substr(1));
          } else {
            take |= absl::StartsWith(i.name, w);
          }
        }
      }
      if (!take) continue;
      DeviceConfig d;
      d.ifname = i.name;
      d.addr = i.addr;
      d.addr_len = i.addr_len;
      d.name = absl::StrCat("prism_", i.name);
      cfg.devices.push_back(d);
    }
    if (cfg.devices.empty() && wanted.empty()) {
      // No non-loopback interface: fall back to loopback (single host).
      for (const HostInterface& i : ifaces) {
        if (!i.loopback) continue;
        DeviceConfig d;
        d.ifname = i.name;
        d.addr = i.addr;
        d.addr_len = i.addr_len;
        d.name = absl::StrCat("prism_", i.name);
        cfg.devices.push_back(d);
        break;
      }
    }
    if (cfg.devices.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no usable interface",
          ifnames != nullptr
              ? absl::StrCat(" matches PRISM_IFNAME='", ifnames, "'")
              : std::string(),
          " (an interface must be up and have an IPv4 or global IPv6 "
          "address)"));
    }
  }

  for (DeviceConfig& d : cfg.devices) {
    // Port 0 everywhere: side-channel listeners take an ephemeral port.
    if (d.addr.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&d.addr)->sin_port = 0;
    } else {
      reinterpret_cast<sockaddr_in6*>(&d.addr)->sin6_port = 0;
    }
    for (const HostInterface& i : host.interfaces) {
      if (d.ifname.empty() || i.name != d.ifname) continue;
      d.pci_path = i.pci_path;
      if (i.speed_mbps > 0) d.speed_mbps = i.speed_mbps;
    }
    if (speed > 0) d.speed_mbps = static_cast<int>(speed);
    if (latency >= 0) d.latency_us = static_cast<float>(latency);
    d.guid = Fnv1a(AddrToString(d.addr), Fnv1a(d.name));
  }

  // Prism data path options.
  if (cfg.mode == DataMode::kPrismUdp) {
    if (auto s = ResolvePlaneAddrs(env, host, &cfg); !s.ok()) return s;
  }
  if (cfg.mode == DataMode::kPrismVerbs) {
    if (auto s = ResolveVerbs(env, &cfg); !s.ok()) return s;
  }
  return cfg;
}

}  // namespace prism::nccl
