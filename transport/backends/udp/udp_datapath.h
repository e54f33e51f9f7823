// UdpDatapath: Prism packets over Linux UDP/IPv6 sockets.
//
// What it does:
// - One local IPv6 address (and UDP port) per NIC plane. Every plane has a
//   receive socket bound to (address, port); peers send to that port.
// - Batched I/O: TxBurst gathers each TxPacket's header + payload with an
//   iovec (no copy of the payload) and sends with sendmmsg; RxBurst receives
//   with recvmmsg into preallocated buffers (one per burst slot).
// - A peer table maps TxPacket::peer to the peer's address per plane and, per
//   path, an optional route. Path p leaves through local plane
//   p % num_planes and goes to the peer's address on the same plane.
// - The path is encoded per packet, in one of three ways:
//     entropy: the UDP source port (and the IPv6 flow label in raw mode)
//              is derived from the path, so ECMP hashing spreads paths;
//     uSID:    the IPv6 destination is an SRv6 micro-SID carrier
//              (RFC 9800, F3216); the UDP checksum covers the *final*
//              destination (the peer's plane address), as required after
//              the last uSID shift;
//     SRH:     an IPv6 Segment Routing Header (type 4) lists the segments.
// - Two transmit modes:
//     raw     (needs CAP_NET_RAW): one IPPROTO_RAW socket; the datapath
//             writes the IPv6 header (traffic class, flow label), the SRH
//             and the UDP header with a checksum it computes. Any source
//             port per path, any route kind.
//     sockets (unprivileged): per plane a set of `sockets_per_plane` UDP
//             sockets; the path picks the socket, hence the source port.
//             Entropy routes only; uSID carriers work with a zero UDP
//             checksum (UDP_NO_CHECK6_TX; the receiver must accept zero
//             checksums: UdpOptions::accept_zero_checksum).
// - ECN: data packets are sent ECN-capable (ECT(0)); the receive sockets
//   request IPV6_RECVTCLASS and RxPacket::ecn_ce is set for CE.
// - GSO (transmit, sockets mode): runs of equal-size data packets to one
//   destination leave as one UDP_SEGMENT message (the iovecs of the run
//   gathered, no copy). GRO (receive): the receive sockets set UDP_GRO, so
//   the kernel may hand over a super-packet (segments of one size, the last
//   one possibly shorter) with its segment size in a cmsg; RxBurst splits it
//   into one RxPacket per segment pointing into the receive buffer (no
//   copy). Segments that do not fit in the caller's array stay pending for
//   the next RxBurst call (their buffers are not reused until handed out).
//   Where the kernel refuses UDP_GRO, receive falls back to one datagram
//   per packet (gro_enabled() says which).
// - Receive in place (rx_in_place, with a resolver set): RxBurst peeks
//   each datagram's first 64 bytes (MSG_PEEK), asks the RxResolver (the
//   engine: key, range, window, duplicate checks) where its payload goes,
//   and reads the datagram with two iovecs: the header into a receive
//   buffer, the payload straight to its final address. Anything the
//   resolver refuses is read whole into a receive buffer as before. The
//   kernel verifies the UDP checksum of a partly read (peeked) datagram
//   before copying anything, so a corrupt one is dropped before the payload
//   read. Two receive syscalls per packet instead of one recvmmsg per
//   burst; GRO is off (a super-packet's segments go to different places).
// - MTU: link_mtu = 0 reads the MTU of the interface holding each plane's
//   address (the smallest over the planes; 1500 when none is found).
// - Control packets (TrafficClass::kControl) carry DSCP `control_dscp`.
// - RxPacket::peer is 0: the engine finds the connection from the header.
//
// Invariants: no allocation and no blocking in TxBurst/RxBurst. TxBurst
// accepts a prefix of its input; the rest is back-pressure (socket buffer
// full), to be offered again. A packet to an unknown peer, or one larger
// than mtu(), is counted (tx_drop_*) and consumed.
//
// Thread safety: one thread drives the datapath (TxBurst, RxBurst, AddPeer,
// RemovePeer). stats() may be read from any thread (relaxed atomics).
#ifndef PRISM_TRANSPORT_BACKENDS_UDP_UDP_DATAPATH_H_
#define PRISM_TRANSPORT_BACKENDS_UDP_UDP_DATAPATH_H_

#include <netinet/in.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prism/packet.h"
#include "transport/datapath.h"

namespace prism::udp {

using Ip6 = std::array<uint8_t, 16>;

// Parses an IPv6 literal ("fd00::1", "[::1]"). InvalidArgument otherwise.
absl::StatusOr<Ip6> ParseIp6(absl::string_view text);
std::string FormatIp6(const Ip6& a);

enum class RouteKind : uint8_t { kEntropy = 0, kUsid = 1, kSrh = 2 };

// How one path reaches a peer.
struct Route {
  RouteKind kind = RouteKind::kEntropy;
  // kUsid: the carrier destination address (e.g. fcbb:bbbb:a1:a2:a4:2::).
  Ip6 usid_carrier{};
  // kSrh: the segments in travel order (first hop first). The peer's plane
  // address is appended as the final segment.
  std::vector<Ip6> segments;
};

// Parses "usid:<carrier>" | "srh:<seg>,<seg>,..." | "entropy".
absl::StatusOr<Route> ParseRoute(absl::string_view text);

struct PlaneAddress {
  Ip6 addr{};
  uint16_t port = 0;
};

struct PeerConfig {
  // The peer's address per plane; planes beyond its size wrap around.
  std::vector<PlaneAddress> planes;
  // Optional route per path: path p uses routes[p % routes.size()]; empty
  // means entropy routing for every path.
  std::vector<Route> routes;
};

struct LocalPlane {
  std::string addr = "::1";  // IPv6 literal
  uint16_t port = 0;         // 0 = ephemeral (read back with local())
  std::string ifname;        // optional SO_BINDTODEVICE
};

enum class TxMode : uint8_t {
  kAuto = 0,  // raw when CAP_NET_RAW is available, else sockets
  kSockets = 1,
  kRaw = 2,
};

struct UdpOptions {
  std::vector<LocalPlane> planes = {LocalPlane{}};
  TxMode tx_mode = TxMode::kAuto;
  // sockets mode: source-port set size per plane (1 .. 64).
  uint16_t sockets_per_plane = 8;
  // raw mode: source port = entropy_port_base + path % entropy_port_count.
  uint16_t entropy_port_base = 49152;
  uint16_t entropy_port_count = 16384;
  // IP MTU of the links (IPv6 header included). mtu() = link_mtu - 48 -
  // room for the longest SRH configured (max_srh_segments). 0: detect it
  // from the interfaces holding the plane addresses (see DetectLinkMtu).
  uint32_t link_mtu = 1500;
  uint16_t max_srh_segments = 0;
  bool ect = true;  // mark data packets ECT(0)
  uint8_t data_dscp = 0;
  uint8_t control_dscp = 46;          // EF
  bool accept_zero_checksum = false;  // UDP_NO_CHECK6_RX on receive sockets
  uint16_t rx_burst = 64;  // receive buffers (max packets per RxBurst)
  int socket_buffer_bytes = 8 << 20;  // SO_{SND,RCV}BUF(FORCE)
  // sockets mode: merge runs of equal-size data packets to one destination
  // into one UDP GSO send (UDP_SEGMENT). Turned off by itself when the
  // kernel refuses it (no checksum offload on the egress device).
  bool gso = false;
  // Receive coalesced super-packets (UDP_GRO) and split them. Falls back to
  // plain receives when the kernel refuses the option.
  bool gro = true;
  // Receive buffer bytes per burst slot; 0 = mtu() + 64, or 65536 with GRO.
  // (A smaller value only serves tests of truncated super-packets.)
  uint32_t rx_buffer_bytes = 0;
  // Receive in place (see above); takes effect once SetRxResolver is
  // called. Turns GRO off.
  bool rx_in_place = false;
};

// Where a received payload goes (receive in place). Implemented over
// Engine::RxDestination, whose contract it has: `hdr` = the first hdr_len
// bytes of the datagram, `payload_len` = its bytes after them (0 for a
// header-only datagram: every datagram of at least hdr_len bytes is shown,
// so the engine knows each DATA packet that precedes one it places);
// nullptr = read it into a receive buffer. The packet is then handed out
// split with `payload` = the returned address.
class RxResolver {
 public:
  virtual ~RxResolver() = default;
  virtual uint8_t* Resolve(const uint8_t* hdr, size_t hdr_len,
                           size_t payload_len) = 0;
};

struct UdpStats {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t tx_backpressure = 0;  // TxBurst calls that stopped early
  uint64_t tx_errors = 0;        // send errors other than EAGAIN (dropped)
  uint64_t tx_drop_unknown_peer = 0;
  uint64_t tx_drop_too_big = 0;
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t rx_ecn_ce = 0;
  uint64_t rx_truncated = 0;  // larger than a receive buffer (dropped)
  uint64_t rx_errors = 0;
  // Datagrams the kernel dropped at our receive sockets (SO_RXQ_OVFL: the
  // receive buffer full, or a bad checksum), as of the last datagram read;
  // 0 where the kernel does not report it.
  uint64_t rx_kernel_drops = 0;
  uint64_t tx_syscalls = 0;
  uint64_t rx_syscalls = 0;
  uint64_t tx_gso_batches = 0;  // UDP GSO messages (>= 2 packets each)
  uint64_t rx_gro_batches = 0;  // received super-packets (>= 2 segments)
  uint64_t rx_in_place = 0;     // payloads read straight to their address
  std::string ToString() const;
};

class UdpDatapath : public Datapath {
 public:
  // Largest burst TxBurst handles in one call (more is back-pressure).
  static constexpr size_t kMaxTxBurst = 64;
  static constexpr size_t kMaxPlanes = 16;
  static constexpr size_t kMaxSrhSegments = 8;

  static absl::StatusOr<std::unique_ptr<UdpDatapath>> Create(
      const UdpOptions& options);
  ~UdpDatapath() override;

  size_t mtu() const override { return mtu_; }
  size_t TxBurst(Time now, const TxPacket* pkts, size_t n) override;
  size_t RxBurst(Time now, RxPacket* pkts, size_t n) override;

  // Adds a peer; returns its id (>= 1), to be used as ConnectionOptions::peer.
  // InvalidArgument for a bad config (no planes, SRH longer than
  // max_srh_segments, a route kind the transmit mode cannot send).
  absl::StatusOr<uint32_t> AddPeer(const PeerConfig& peer);
  // Reserves a peer id whose addresses are set later with SetPeer (packets
  // to it meanwhile count as tx_drop_unknown_peer).
  uint32_t ReservePeer();
  // Sets (or replaces) the addresses and routes of a reserved/added peer.
  absl::Status SetPeer(uint32_t id, const PeerConfig& peer);
  absl::Status RemovePeer(uint32_t id);

  // Bound local address and port per plane.
  const std::vector<PlaneAddress>& local() const { return local_; }
  size_t num_planes() const { return local_.size(); }
  bool raw_mode() const { return raw_fd_ >= 0; }
  bool gso_enabled() const { return gso_; }
  bool gro_enabled() const { return gro_; }
  bool in_place_enabled() const { return resolver_ != nullptr; }
  // Receive in place through `r` (not owned; nullptr turns it off). Only
  // with UdpOptions::rx_in_place; InvalidArgument otherwise.
  absl::Status SetRxResolver(RxResolver* r);
  // Receive file descriptors (one per plane), for epoll.
  std::vector<int> rx_fds() const;
  // The UDP source port packets of (peer, path) leave with. 0 if unknown.
  uint16_t SourcePort(uint32_t peer, PathId path) const;
  UdpStats stats() const;

  struct Peer;
  struct Impl;

 private:
  UdpDatapath() = default;
  absl::Status Init(const UdpOptions& options);
  absl::StatusOr<std::unique_ptr<Peer>> BuildPeer(const PeerConfig& peer);
  size_t TxRaw(const TxPacket* pkts, size_t n);
  size_t TxSockets(const TxPacket* pkts, size_t n);
  bool SendGso(int fd, size_t b, size_t e, uint64_t* bytes, uint64_t* sent);
  size_t RxInPlace(RxPacket* pkts, size_t n);
  size_t EmitSegments(RxPacket* pkts, size_t got, size_t n, size_t* slot,
                      size_t end, size_t* off);

  UdpOptions opt_;
  size_t mtu_ = 0;
  int raw_fd_ = -1;
  std::vector<int> raw_plane_fd_;        // raw sockets per send group
  std::vector<int> rx_fd_;               // per plane
  std::vector<std::vector<int>> tx_fd_;  // per plane: source-port set
  std::vector<std::vector<uint16_t>> tx_port_;
  std::vector<PlaneAddress> local_;
  std::vector<std::unique_ptr<Peer>> peers_;  // index = id - 1
  std::vector<bool> reserved_;                // index = id - 1
  std::unique_ptr<Impl> impl_;                // preallocated buffers
  size_t rx_next_plane_ = 0;
  bool gso_ = false;
  bool gro_ = false;
  RxResolver* resolver_ = nullptr;

  struct Counters {
    std::atomic<uint64_t> tx_packets{0}, tx_bytes{0}, tx_backpressure{0},
        tx_errors{0}, tx_drop_unknown_peer{0}, tx_drop_too_big{0},
        rx_packets{0}, rx_bytes{0}, rx_ecn_ce{0}, rx_truncated{0}, rx_errors{0},
        tx_syscalls{0}, rx_syscalls{0}, tx_gso_batches{0}, rx_gro_batches{0},
        rx_in_place{0}, rx_kernel_drops{0};
  };
  // Per plane: the receive socket's drop count last reported (SO_RXQ_OVFL).
  std::vector<uint32_t> rx_ovfl_;
  void NoteKernelDrops(size_t plane, uint32_t count);
  Counters c_;
};

// The IP MTU of the interface that holds `addr` (getifaddrs + SIOCGIFMTU);
// NotFound when no interface has it (e.g. "::").
absl::StatusOr<uint32_t> DetectLinkMtu(const Ip6& addr);

// Ones' complement checksum helpers (exposed for tests).
// UDP/IPv6 checksum of `udp` (UDP header with checksum field zeroed, then
// the data pieces) for the pseudo header (src, dst, length, next header 17).
uint16_t Udp6Checksum(const Ip6& src, const Ip6& dst, const uint8_t* udp_hdr,
                      const struct iovec* pieces, size_t n_pieces);

}  // namespace prism::udp

#endif  // PRISM_TRANSPORT_BACKENDS_UDP_UDP_DATAPATH_H_
