// Plugin configuration from environment variables (NCCL style).
//
// One NCCL device per Prism endpoint. A device is a local interface (or an
// explicit local address) whose address carries the TCP side channel that
// bootstraps connections, plus the Prism datapath parameters (paths, planes,
// port). Variables (all optional; see docs/nccl.md):
//   PRISM_DATAPATH      tcp | udp | verbs  data path (see DataMode)
//   PRISM_IFNAME        eth0,eth1 | =eth0  interfaces (prefix match, '=' exact;
//                       empty = unset, only blanks and commas = an error)
//   PRISM_ADDRS         10.0.0.1,fd00::1   explicit local addresses
//   PRISM_PATHS         paths per connection (1..65535, default 256)
//   PRISM_PLANES        planes per device (1..15, default 1)
//   PRISM_PORT          datapath base port (0 = ephemeral / backend default)
//   PRISM_SPEED_MBPS    advertised speed (default /sys speed or 100000)
//   PRISM_LATENCY_US    advertised latency (default 10)
//   PRISM_SOCK_BUF      side-channel socket buffer bytes (default 4 MiB)
//   PRISM_CONNECT_TIMEOUT_MS  how long connect waits for the listener's Ack
//                       and accept for a connection's Hello (1..3600000,
//                       default 30000)
// Prism data path (PRISM_DATAPATH=udp) only:
//   PRISM_UDP_ADDRS     IPv6 plane addresses: planes of one device separated
//                       by ',', devices by ';' (default: the device's own
//                       IPv6 address, ::1 for a loopback device, repeated
//                       PRISM_PLANES times)
//   PRISM_UDP_TX_MODE   auto | raw | sockets (default auto)
//   PRISM_LINK_MTU      IP MTU of the links (default 1500)
//   PRISM_CONGESTION    congestion controller (default nscc; nscc-classic,
//                       fixed, dcqcn)
//   PRISM_PATH_POLICY   path selection policy (default rotation)
//   PRISM_UDP_GSO       1 = UDP GSO for runs of equal-size packets
//                       (sockets tx mode; default 1, as prism_perf)
//   PRISM_UDP_GRO       1 = receive coalesced UDP super-packets (default 1)
//   PRISM_UDP_RX_IN_PLACE  1 = read payloads straight into the posted
//                       buffers (peek the header; GRO off; default 0)
//   PRISM_BUSY_POLL     1 = the endpoint loop spins instead of sleeping
//   PRISM_SPIN_US       us the endpoint loop polls after its last work
//                       before sleeping (-1 = the datapath's default)
//   PRISM_RTO_MIN_US    retransmission timeout floor (default: the
//                       engine's, 50 us; verbs: 40 x PRISM_BASE_RTT_US)
//   PRISM_PROBE_US      probe interval of retired paths (same defaults)
//   PRISM_BASE_RTT_US   expected unloaded RTT (default 100)
//   PRISM_SEED          engine seed (default: random per process)
// Prism data path (PRISM_DATAPATH=verbs) only:
//   PRISM_IB_DEVICE     RDMA device(s): one name for every NCCL device, or
//                       one per device separated by ',' (default: the first
//                       device with an active port)
//   PRISM_IB_QPS        data queue pairs per connection (1..49, default 8)
//   PRISM_IB_MODE       auto | uc | rc (default auto: UC, RC where missing)
//   (PRISM_PATHS, PRISM_CONGESTION, PRISM_PATH_POLICY, PRISM_BUSY_POLL,
//   PRISM_BASE_RTT_US and PRISM_SEED apply too; the side channel still
//   uses PRISM_IFNAME / PRISM_ADDRS.)
//
// Thread safety: LoadConfig is pure apart from reading the environment and
// the interface list; call it from one thread. ParseConfig is pure.
#ifndef PRISM_TRANSPORT_NCCL_CONFIG_H_
#define PRISM_TRANSPORT_NCCL_CONFIG_H_

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace prism::nccl {

enum class DataMode {
  // INTERIM: payload travels on the TCP side-channel socket itself. This is
  // not Prism's transport; it exists so the NCCL driver and ABI can be tested
  // end to end until the endpoint API (prism/endpoint.h) is available.
  kTcpInterim,
  // Prism endpoint over the UDP datapath (WRITE-with-immediate).
  kPrismUdp,
  // Prism endpoint over the libibverbs datapath (RDMA WRITE-with-immediate
  // placed by the NIC).
  kPrismVerbs,
};

// Planes per device (PRISM_PLANES, a PRISM_UDP_ADDRS group): a Prism udp
// connection's blob, exchanged in the Hello/Ack, carries at most 15 plane
// addresses (transport/runtime/conn_blob.h; EncodeBlob refuses more), fewer
// than the UDP datapath (16) and the engine (32) take, so a 16th plane
// would pass init and fail every connect.
inline constexpr int kMaxPlanes = 15;

// True for the modes that carry payload over a Prism endpoint.
inline bool IsPrismMode(DataMode m) { return m != DataMode::kTcpInterim; }

const char* DataModeName(DataMode mode);

struct DeviceConfig {
  std::string name;       // unique NCCL device name
  std::string ifname;     // interface, or "" for an explicit address
  sockaddr_storage addr;  // local address (port 0)
  socklen_t addr_len = 0;
  std::string pci_path;  // "" = unknown (NCCL accepts NULL)
  uint64_t guid = 0;
  int speed_mbps = 100000;
  float latency_us = 10.0f;
  // PRISM_DATAPATH=udp: IPv6 address of every plane (size = planes).
  std::vector<std::string> plane_addrs;
  // PRISM_DATAPATH=verbs: RDMA device ("" = the first active one).
  std::string ib_device;
};

struct PluginConfig {
  DataMode mode = DataMode::kTcpInterim;
  std::vector<DeviceConfig> devices;
  uint16_t paths = 256;
  uint16_t planes = 1;
  uint16_t port = 0;
  int sock_buf_bytes = 4 << 20;
  // PRISM_CONNECT_TIMEOUT_MS: the side-channel handshake's bound. connect()
  // fails (ncclRemoteError) when its Ack has not arrived this long after
  // its first call; accept() drops a connection whose Hello has not.
  uint32_t connect_timeout_ms = 30000;
  // PRISM_NCCL_GPU_STAGING=1: advertise NCCL_PTR_CUDA|DMABUF and stage
  // device memory through pinned host mirrors (gpu.h); off by default.
  bool gpu_staging = false;
  // PRISM_NCCL_CALL_LOG=N: log the first N state-changing data calls (INFO).
  int64_t call_log = 0;
  // Prism data path.
  std::string udp_tx_mode = "auto";
  uint32_t link_mtu = 1500;
  std::string congestion = "nscc";
  std::string path_policy = "rotation";
  bool busy_poll = false;
  bool udp_gso = true;
  bool udp_gro = true;
  bool udp_rx_in_place = false;
  int32_t spin_us = -1;     // -1: the datapath's default
  uint32_t rto_min_us = 0;  // 0: the engine's default (verbs: scaled)
  uint32_t probe_us = 0;    // 0: the engine's default (verbs: scaled)
  uint32_t base_rtt_us = 100;
  uint64_t seed = 0;  // 0 = random per process
  // PRISM_DATAPATH=verbs.
  uint16_t ib_qps = 8;
  std::string ib_mode = "auto";
};

// Reads a variable; returns nullptr when unset. Injectable for tests.
using EnvGetter = std::function<const char*(const char*)>;

// True when this build contains the Prism endpoint data path.
bool PrismDataPathAvailable();
// True when it also contains the verbs datapath (PRISM_DATAPATH=verbs).
bool PrismVerbsAvailable();

// What the configuration takes from the host besides the environment: the
// interfaces that are up with an IPv4 (preferred) or global IPv6 address, in
// the kernel's order, and their sysfs facts.
struct HostInterface {
  std::string name;
  sockaddr_storage addr{};  // port 0
  socklen_t addr_len = 0;
  bool loopback = false;
  std::string ipv6;      // its global IPv6 address, "" if none
  std::string pci_path;  // sysfs, "" if unknown
  int speed_mbps = 0;    // sysfs, 0 if unknown
};
struct HostInfo {
  std::vector<HostInterface> interfaces;
};

// Builds the configuration from the environment and the host's interfaces
// (getifaddrs, sysfs): ParseConfig(getenv_fn, <this host>).
absl::StatusOr<PluginConfig> LoadConfig(const EnvGetter& getenv_fn);

// The configuration from variables and a description of the host; pure (no
// system calls beyond inet_pton), what the fuzz target
// tests/fuzz/nccl_config_parse_fuzz.cc calls. InvalidArgument for a
// malformed value (the message names the variable), NotFound when no usable
// interface or address matches, Unimplemented for a data path this build
// lacks.
absl::StatusOr<PluginConfig> ParseConfig(const EnvGetter& getenv_fn,
                                         const HostInfo& host);

// Formats an address (without port) for logs.
std::string AddrToString(const sockaddr_storage& addr);

}  // namespace prism::nccl

#endif  // PRISM_TRANSPORT_NCCL_CONFIG_H_
