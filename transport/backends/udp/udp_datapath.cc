#include "transport/backends/udp/udp_datapath.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "transport/wire/packet.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef UDP_NO_CHECK6_TX
#define UDP_NO_CHECK6_TX 101
#endif
#ifndef UDP_NO_CHECK6_RX
#define UDP_NO_CHECK6_RX 102
#endif

namespace prism::udp {
namespace {

constexpr size_t kIp6HeaderBytes = 40;
constexpr size_t kUdpHeaderBytes = 8;
constexpr uint8_t kProtoUdp = 17;
constexpr uint8_t kProtoRouting = 43;
constexpr uint8_t kEct0 = 0x2;
constexpr uint8_t kEcnCe = 0x3;
// IPv6 header + SRH with kMaxSrhSegments + final segment + UDP header.
constexpr size_t kMaxNetHeader = kIp6HeaderBytes + 8 +
                                 16 * (UdpDatapath::kMaxSrhSegments + 1) +
                                 kUdpHeaderBytes;
constexpr size_t kRxControlBytes = 128;  // TCLASS, UDP_GRO, RXQ_OVFL
// Receive buffer per slot with GRO: the largest UDP payload over IPv6
// (65535 - 8) rounded up.
constexpr size_t kGroBufferBytes = 65536;

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

// Ones' complement sum of a buffer, returned folded to 16 bits in host
// order of 16-bit words read natively (RFC 1071 byte-order independence).
uint32_t SumBytes(const uint8_t* p, size_t len) {
  uint64_t sum = 0;
  while (len >= 32) {
    uint64_t a, b, c, d;
    memcpy(&a, p, 8);
    memcpy(&b, p + 8, 8);
    memcpy(&c, p + 16, 8);
    memcpy(&d, p + 24, 8);
    unsigned __int128 s = static_cast<unsigned __int128>(sum) + a + b + c + d;
    sum = static_cast<uint64_t>(s) + static_cast<uint64_t>(s >> 64);
    if (sum < static_cast<uint64_t>(s)) sum++;
    p += 32;
    len -= 32;
  }
  while (len >= 8) {
    uint64_t a;
    memcpy(&a, p, 8);
    sum += a;
    if (sum < a) sum++;
    p += 8;
    len -= 8;
  }
  uint64_t tail = 0;
  if (len > 0) {
    memcpy(&tail, p, len);  // little-endian: bytes land in order
    sum += tail;
    if (sum < tail) sum++;
  }
  // Fold 64 -> 16.
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint32_t>(sum);
}

uint16_t Bswap16(uint32_t v) {
  return static_cast<uint16_t>(((v & 0xff) << 8) | ((v >> 8) & 0xff));
}

sockaddr_in6 MakeSockaddr(const Ip6& a, uint16_t port) {
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(port);
  memcpy(&sa.sin6_addr, a.data(), 16);
  return sa;
}

void SetBuffers(int fd, int bytes) {
  // FORCE variants need CAP_NET_ADMIN; fall back to the capped ones.
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

uint32_t FlowLabel(uint32_t peer, PathId path) {
  uint32_t x = (static_cast<uint32_t>(path) + 1) * 0x9E3779B1u ^ peer;
  x ^= x >> 15;
  x &= 0xFFFFF;
  return x == 0 ? 1 : x;
}

// What a received datagram's control messages say: whether its traffic
// class carries ECN CE, its GRO segment size (0: not coalesced), and the
// socket's cumulative drop count (SO_RXQ_OVFL; present once nonzero).
struct RxAncillary {
  bool ecn_ce = false;
  uint32_t gro_segment = 0;
  bool has_drops = false;
  uint32_t drops = 0;
};
RxAncillary ParseRxAncillary(msghdr& mh) {
  RxAncillary a;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_len < CMSG_LEN(sizeof(int))) continue;
    int v;
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      memcpy(&v, CMSG_DATA(c), sizeof(int));
      a.ecn_ce = (v & 0x3) == kEcnCe;
    } else if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
      memcpy(&v, CMSG_DATA(c), sizeof(int));
      if (v > 0) a.gro_segment = static_cast<uint32_t>(v);
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
      uint32_t d;
      memcpy(&d, CMSG_DATA(c), sizeof(d));
      a.has_drops = true;
      a.drops = d;
    }
  }
  return a;
}

}  // namespace

uint16_t Udp6Checksum(const Ip6& src, const Ip6& dst, const uint8_t* udp_hdr,
                      const struct iovec* pieces, size_t n_pieces) {
  size_t total = kUdpHeaderBytes;
  for (size_t i = 0; i < n_pieces; ++i) total += pieces[i].iov_len;
  uint8_t pseudo[40];
  memcpy(pseudo, src.data(), 16);
  memcpy(pseudo + 16, dst.data(), 16);
  const uint32_t len_be = htonl(static_cast<uint32_t>(total));
  memcpy(pseudo + 32, &len_be, 4);
  pseudo[36] = pseudo[37] = pseudo[38] = 0;
  pseudo[39] = kProtoUdp;
  uint64_t sum = SumBytes(pseudo, sizeof(pseudo));
  sum += SumBytes(udp_hdr, kUdpHeaderBytes);
  bool odd = false;  // running offset parity
  for (size_t i = 0; i < n_pieces; ++i) {
    const auto* p = static_cast<const uint8_t*>(pieces[i].iov_base);
    const size_t len = pieces[i].iov_len;
    if (len == 0) continue;
    const uint32_t s = SumBytes(p, len);
    sum += odd ? Bswap16(s) : s;
    if (len & 1) odd = !odd;
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  uint16_t c = static_cast<uint16_t>(~sum & 0xffff);
  return c == 0 ? 0xffff : c;  // 0 means "no checksum" in UDP
}

absl::StatusOr<uint32_t> DetectLinkMtu(const Ip6& addr) {
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return Errno("getifaddrs");
  std::string name;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET6) continue;
    const auto* sa = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
    if (memcmp(&sa->sin6_addr, addr.data(), 16) == 0) {
      name = i->ifa_name;
      break;
    }
  }
  freeifaddrs(ifs);
  if (name.empty() || name.size() >= IFNAMSIZ)
    return absl::NotFoundError(
        absl::StrCat("no interface holds ", FormatIp6(addr)));
  int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  ifreq ifr{};
  memcpy(ifr.ifr_name, name.data(), name.size());
  const int r = ioctl(fd, SIOCGIFMTU, &ifr);
  absl::Status err =
      r != 0 ? Errno(absl::StrCat("SIOCGIFMTU ", name)) : absl::OkStatus();
  close(fd);
  if (!err.ok()) return err;
  if (ifr.ifr_mtu <= 0)
    return absl::NotFoundError(absl::StrCat("interface ", name, " has no MTU"));
  return static_cast<uint32_t>(ifr.ifr_mtu);
}

absl::StatusOr<Ip6> ParseIp6(absl::string_view text) {
  std::string s(absl::StripSuffix(absl::StripPrefix(text, "["), "]"));
  Ip6 a{};
  // A NUL would end the C string early: "fd00::1<NUL>junk" must not pass.
  if (s.find('\0') != std::string::npos ||
      inet_pton(AF_INET6, s.c_str(), a.data()) != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("not an IPv6 address: '", text, "'"));
  return a;
}

std::string FormatIp6(const Ip6& a) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, a.data(), buf, sizeof(buf));
  return buf;
}

absl::StatusOr<Route> ParseRoute(absl::string_view text) {
  Route r;
  if (text == "entropy" || text.empty()) return r;
  if (absl::ConsumePrefix(&text, "usid:")) {
    r.kind = RouteKind::kUsid;
    auto a = ParseIp6(text);
    if (!a.ok()) return a.status();
    r.usid_carrier = *a;
    return r;
  }
  if (absl::ConsumePrefix(&text, "srh:")) {
    r.kind = RouteKind::kSrh;
    for (absl::string_view seg : absl::StrSplit(text, ',')) {
      auto a = ParseIp6(seg);
      if (!a.ok()) return a.status();
      r.segments.push_back(*a);
    }
    if (r.segments.empty() || r.segments.size() > UdpDatapath::kMaxSrhSegments)
      return absl::InvalidArgumentError(
          absl::StrCat("SRH route needs 1..", UdpDatapath::kMaxSrhSegments,
                       " segments: '", text, "'"));
    return r;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "route must be 'entropy', 'usid:<addr>' or 'srh:<a>,<b>,...': '", text,
      "'"));
}

std::string UdpStats::ToString() const {
  return absl::StrFormat(
      "tx_packets=%d tx_bytes=%d tx_backpressure=%d tx_errors=%d "
      "tx_drop_unknown_peer=%d tx_drop_too_big=%d rx_packets=%d rx_bytes=%d "
      "rx_ecn_ce=%d rx_truncated=%d rx_errors=%d rx_kernel_drops=%d "
      "tx_syscalls=%d "
      "rx_syscalls=%d tx_gso_batches=%d rx_gro_batches=%d rx_in_place=%d",
      tx_packets, tx_bytes, tx_backpressure, tx_errors, tx_drop_unknown_peer,
      tx_drop_too_big, rx_packets, rx_bytes, rx_ecn_ce, rx_truncated, rx_errors,
      rx_kernel_drops, tx_syscalls, rx_syscalls, tx_gso_batches, rx_gro_batches,
      rx_in_place);
}

// A precomputed route to a peer: the network header template raw mode
// copies in front of every packet, and where to send it.
struct RouteState {
  RouteKind kind = RouteKind::kEntropy;
  sockaddr_in6 first_hop{};  // sendto address (socket or raw)
  Ip6 final_dst{};           // the checksum's destination
  uint8_t ext[8 + 16 * (UdpDatapath::kMaxSrhSegments + 1)] = {};
  uint16_t ext_len = 0;  // SRH bytes (0 if none)
};

struct UdpDatapath::Peer {
  std::vector<PlaneAddress> planes;
  // routes[r * num_local_planes + plane] when routes are configured, else
  // one entropy route per local plane.
  std::vector<RouteState> routes;
  size_t num_routes = 0;  // configured routes (0 = entropy)
};

struct UdpDatapath::Impl {
  // Transmit slots.
  mmsghdr msgs[kMaxTxBurst];
  iovec iov[kMaxTxBurst][3];
  uint8_t net[kMaxTxBurst][kMaxNetHeader];
  sockaddr_in6 dst[kMaxTxBurst];
  alignas(cmsghdr) uint8_t ctl[kMaxTxBurst][CMSG_SPACE(sizeof(int))];
  uint16_t order[kMaxTxBurst];    // slot -> packet index
  uint16_t sock_of[kMaxTxBurst];  // packet -> flat socket index
  bool sent[kMaxTxBurst];
  // GSO: compacted messages (one per run of equal-size packets).
  mmsghdr gmsgs[kMaxTxBurst];
  iovec giov[2 * kMaxTxBurst];
  alignas(cmsghdr) uint8_t gctl[kMaxTxBurst][CMSG_SPACE(sizeof(uint16_t))];
  uint16_t gfirst[kMaxTxBurst], gcount[kMaxTxBurst];
  // Receive slots.
  std::vector<mmsghdr> rmsgs;
  std::vector<iovec> riov;
  std::vector<sockaddr_in6> rsrc;
  std::vector<uint8_t> rctl;
  std::vector<uint8_t> rbuf;
  size_t rbuf_size = 0;
  size_t rx_max_packet = 0;  // longer datagrams / segments are dropped
  // Per receive slot after recvmmsg: usable bytes (0: dropped), segment
  // size (the whole datagram when not coalesced), CE mark.
  std::vector<uint32_t> rlen, rseg;
  std::vector<uint8_t> rce;
  // Segments received but not yet handed out: slots [pend_slot, pend_end),
  // the first from byte pend_off.
  size_t pend_slot = 0, pend_end = 0, pend_off = 0;
  // Receive in place: the peeked header and the two-piece gather list.
  uint8_t peek[wire::kDataHeaderSize];
  iovec ipiov[2];
};

UdpDatapath::~UdpDatapath() {
  if (raw_fd_ >= 0) close(raw_fd_);
  for (int fd : raw_plane_fd_)
    if (fd != raw_fd_) close(fd);
  for (int fd : rx_fd_) close(fd);
  for (auto& set : tx_fd_)
    for (size_t i = 1; i < set.size(); ++i) close(set[i]);  // [0] is rx
}

absl::StatusOr<std::unique_ptr<UdpDatapath>> UdpDatapath::Create(
    const UdpOptions& options) {
  std::unique_ptr<UdpDatapath> dp(new UdpDatapath());
  absl::Status s = dp->Init(options);
  if (!s.ok()) return s;
  return dp;
}

absl::Status UdpDatapath::Init(const UdpOptions& o) {
  opt_ = o;
  gso_ = o.gso;
  if (o.planes.empty() || o.planes.size() > kMaxPlanes)
    return absl::InvalidArgumentError(
        absl::StrCat("UdpOptions: need 1..", kMaxPlanes, " planes"));
  if (o.sockets_per_plane < 1 || o.sockets_per_plane > 64)
    return absl::InvalidArgumentError(
        "UdpOptions: sockets_per_plane must be 1..64");
  if (o.max_srh_segments > kMaxSrhSegments)
    return absl::InvalidArgumentError(absl::StrCat(
        "UdpOptions: max_srh_segments must be <= ", kMaxSrhSegments));
  if (o.rx_burst < 1 || o.rx_burst > 1024)
    return absl::InvalidArgumentError("UdpOptions: rx_burst must be 1..1024");
  if (o.entropy_port_count == 0 ||
      static_cast<uint32_t>(o.entropy_port_base) + o.entropy_port_count >
          65536u)
    return absl::InvalidArgumentError(
        "UdpOptions: entropy ports must lie within 1..65535");
  if (o.link_mtu == 0) {
    // The smallest MTU of the planes' interfaces; 1500 when none is known.
    uint32_t best = 0;
    for (const LocalPlane& lp : o.planes) {
      auto a = ParseIp6(lp.addr);
      if (!a.ok()) return a.status();
      auto m = DetectLinkMtu(*a);
      if (m.ok()) best = best == 0 ? *m : std::min(best, *m);
    }
    opt_.link_mtu = best == 0 ? 1500 : std::min<uint32_t>(best, 65575);
  }
  const size_t srh_room =
      o.max_srh_segments ? 8 + 16 * (o.max_srh_segments + 1) : 0;
  const size_t overhead = kIp6HeaderBytes + kUdpHeaderBytes + srh_room;
  if (opt_.link_mtu < overhead + 128 || opt_.link_mtu > 65575)
    return absl::InvalidArgumentError(
        absl::StrCat("UdpOptions: link_mtu ", opt_.link_mtu, " out of range"));
  mtu_ = std::min<size_t>(opt_.link_mtu - overhead, 65507);

  // Transmit mode.
  if (o.tx_mode != TxMode::kSockets) {
    raw_fd_ =
        socket(AF_INET6, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_RAW);
    if (raw_fd_ < 0) {
      if (o.tx_mode == TxMode::kRaw)
        return Errno("raw IPv6 socket (needs CAP_NET_RAW)");
    } else {
      SetBuffers(raw_fd_, o.socket_buffer_bytes);
    }
  }

  for (size_t p = 0; p < o.planes.size(); ++p) {
    const LocalPlane& lp = o.planes[p];
    auto addr = ParseIp6(lp.addr);
    if (!addr.ok()) return addr.status();
    PlaneAddress local{*addr, lp.port};
    std::vector<int> set;
    std::vector<uint16_t> ports;
    const size_t nsock = raw_mode() ? 1 : o.sockets_per_plane;
    for (size_t i = 0; i < nsock; ++i) {
      int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return Errno("socket");
      const int one = 1;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
      if (!lp.ifname.empty() &&
          setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, lp.ifname.c_str(),
                     lp.ifname.size()) != 0) {
        absl::Status s = Errno(absl::StrCat("SO_BINDTODEVICE ", lp.ifname));
        close(fd);
        return s;
      }
      sockaddr_in6 sa = MakeSockaddr(*addr, i == 0 ? lp.port : 0);
      if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
        absl::Status s =
            Errno(absl::StrCat("bind [", lp.addr, "]:", i == 0 ? lp.port : 0));
        close(fd);
        return s;
      }
      socklen_t sl = sizeof(sa);
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &sl);
      const int tclass = (o.data_dscp << 2) | (o.ect ? kEct0 : 0);
      setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tclass, sizeof(tclass));
      if (i == 0) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
        if (o.accept_zero_checksum)
          setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, &one, sizeof(one));
        // GRO on every plane or on none (a refusal turns it off for all).
        if (o.gro && !o.rx_in_place && (p == 0 || gro_)) {
          gro_ = setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) == 0;
          if (!gro_) {
            const int zero = 0;
            for (int prev : rx_fd_)
              setsockopt(prev, IPPROTO_UDP, UDP_GRO, &zero, sizeof(zero));
          }
        }
        SetBuffers(fd, o.socket_buffer_bytes);
        // Kernel drops at this socket (receive buffer full) reported with
        // each datagram, counted in rx_kernel_drops.
        setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
        rx_fd_.push_back(fd);
        rx_ovfl_.push_back(0);
        local.port = ntohs(sa.sin6_port);
      } else {
        const int b = 1 << 20;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
        const int small = 4096;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
      }
      set.push_back(fd);
      ports.push_back(ntohs(sa.sin6_port));
    }
    tx_fd_.push_back(std::move(set));
    tx_port_.push_back(std::move(ports));
    local_.push_back(local);
  }

  if (raw_mode()) {
    // One raw socket per plane bound to its device when every plane names
    // one (the route lookup then stays on that plane's port); else one.
    bool all_dev = true;
    for (const auto& lp : o.planes) all_dev &= !lp.ifname.empty();
    if (all_dev && o.planes.size() > 1) {
      for (const auto& lp : o.planes) {
        int fd = socket(AF_INET6, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        IPPROTO_RAW);
        if (fd < 0) return Errno("raw IPv6 socket");
        raw_plane_fd_.push_back(fd);
        SetBuffers(fd, o.socket_buffer_bytes);
        if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, lp.ifname.c_str(),
                       lp.ifname.size()) != 0)
          return Errno(absl::StrCat("SO_BINDTODEVICE ", lp.ifname));
      }
    } else {
      raw_plane_fd_.push_back(raw_fd_);
    }
  }

  impl_ = std::make_unique<Impl>();
  Impl& m = *impl_;
  memset(m.msgs, 0, sizeof(m.msgs));
  const size_t nb = o.rx_burst;
  m.rx_max_packet = mtu_ + 64;
  m.rbuf_size = o.rx_buffer_bytes != 0 ? o.rx_buffer_bytes
                : gro_                 ? kGroBufferBytes
                                       : m.rx_max_packet;
  m.rlen.assign(nb, 0);
  m.rseg.assign(nb, 0);
  m.rce.assign(nb, 0);
  m.rmsgs.assign(nb, mmsghdr{});
  m.riov.assign(nb, iovec{});
  m.rsrc.assign(nb, sockaddr_in6{});
  m.rctl.assign(nb * kRxControlBytes, 0);
  m.rbuf.assign(nb * m.rbuf_size, 0);
  for (size_t i = 0; i < nb; ++i) {
    m.riov[i].iov_base = m.rbuf.data() + i * m.rbuf_size;
    m.riov[i].iov_len = m.rbuf_size;
    m.rmsgs[i].msg_hdr.msg_iov = &m.riov[i];
    m.rmsgs[i].msg_hdr.msg_iovlen = 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<UdpDatapath::Peer>> UdpDatapath::BuildPeer(
    const PeerConfig& peer) {
  if (peer.planes.empty())
    return absl::InvalidArgumentError("peer needs at least one plane address");
  auto st = std::make_unique<Peer>();
  st->planes = peer.planes;
  const size_t np = local_.size();
  st->num_routes = peer.routes.size();
  const size_t nr = std::max<size_t>(1, peer.routes.size());
  st->routes.resize(nr * np);
  for (size_t r = 0; r < nr; ++r) {
    const Route route = peer.routes.empty() ? Route{} : peer.routes[r];
    for (size_t p = 0; p < np; ++p) {
      RouteState& rs = st->routes[r * np + p];
      const PlaneAddress& pa = peer.planes[p % peer.planes.size()];
      rs.kind = route.kind;
      rs.final_dst = pa.addr;
      switch (route.kind) {
        case RouteKind::kEntropy:
          rs.first_hop = MakeSockaddr(pa.addr, pa.port);
          break;
        case RouteKind::kUsid:
          rs.first_hop = MakeSockaddr(route.usid_carrier, pa.port);
          if (!raw_mode()) {
            // Zero checksum: the carrier is not the final destination.
            const int one = 1;
            for (int fd : tx_fd_[p])
              setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_TX, &one, sizeof(one));
          }
          break;
        case RouteKind::kSrh: {
          if (!raw_mode())
            return absl::InvalidArgumentError(
                "SRH routes need raw transmit mode (CAP_NET_RAW)");
          const size_t n = route.segments.size() + 1;  // + final dst
          if (route.segments.size() > opt_.max_srh_segments)
            return absl::InvalidArgumentError(
                absl::StrCat("SRH route has ", route.segments.size(),
                             " segments; UdpOptions::max_srh_segments is ",
                             opt_.max_srh_segments));
          rs.first_hop = MakeSockaddr(route.segments[0], pa.port);
          uint8_t* e = rs.ext;
          e[0] = kProtoUdp;                    // next header
          e[1] = static_cast<uint8_t>(2 * n);  // hdr ext len (8-octets)
          e[2] = 4;                            // routing type: SRH
          e[3] = static_cast<uint8_t>(n - 1);  // segments left
          e[4] = static_cast<uint8_t>(n - 1);  // last entry
          e[5] = 0;                            // flags
          e[6] = e[7] = 0;                     // tag
          // Segment list in reverse order: [0] = final destination.
          memcpy(e + 8, pa.addr.data(), 16);
          for (size_t i = 0; i < route.segments.size(); ++i)
            memcpy(e + 8 + 16 * (n - 1 - i), route.segments[i].data(), 16);
          rs.ext_len = static_cast<uint16_t>(8 + 16 * n);
          break;
        }
      }
    }
  }
  return st;
}

uint32_t UdpDatapath::ReservePeer() {
  for (size_t i = 0; i < reserved_.size(); ++i) {
    if (!reserved_[i]) {
      reserved_[i] = true;
      return static_cast<uint32_t>(i + 1);
    }
  }
  reserved_.push_back(true);
  peers_.emplace_back();
  return static_cast<uint32_t>(reserved_.size());
}

absl::Status UdpDatapath::SetPeer(uint32_t id, const PeerConfig& peer) {
  if (id == 0 || id > reserved_.size() || !reserved_[id - 1])
    return absl::NotFoundError(absl::StrCat("no UDP peer ", id));
  auto st = BuildPeer(peer);
  if (!st.ok()) return st.status();
  peers_[id - 1] = std::move(*st);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> UdpDatapath::AddPeer(const PeerConfig& peer) {
  auto st = BuildPeer(peer);
  if (!st.ok()) return st.status();
  const uint32_t id = ReservePeer();
  peers_[id - 1] = std::move(*st);
  return id;
}

absl::Status UdpDatapath::RemovePeer(uint32_t id) {
  if (id == 0 || id > reserved_.size() || !reserved_[id - 1])
    return absl::NotFoundError(absl::StrCat("no UDP peer ", id));
  peers_[id - 1].reset();
  reserved_[id - 1] = false;
  return absl::OkStatus();
}

std::vector<int> UdpDatapath::rx_fds() const { return rx_fd_; }

uint16_t UdpDatapath::SourcePort(uint32_t peer, PathId path) const {
  if (peer == 0 || peer > peers_.size() || !peers_[peer - 1]) return 0;
  if (raw_mode())
    return static_cast<uint16_t>(opt_.entropy_port_base +
                                 path % opt_.entropy_port_count);
  const size_t np = local_.size();
  const size_t plane = path % np;
  return tx_port_[plane][(path / np) % tx_port_[plane].size()];
}

UdpStats UdpDatapath::stats() const {
  UdpStats s;
  auto ld = [](const std::atomic<uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  s.tx_packets = ld(c_.tx_packets);
  s.tx_bytes = ld(c_.tx_bytes);
  s.tx_backpressure = ld(c_.tx_backpressure);
  s.tx_errors = ld(c_.tx_errors);
  s.tx_drop_unknown_peer = ld(c_.tx_drop_unknown_peer);
  s.tx_drop_too_big = ld(c_.tx_drop_too_big);
  s.rx_packets = ld(c_.rx_packets);
  s.rx_bytes = ld(c_.rx_bytes);
  s.rx_ecn_ce = ld(c_.rx_ecn_ce);
  s.rx_truncated = ld(c_.rx_truncated);
  s.rx_errors = ld(c_.rx_errors);
  s.rx_kernel_drops = ld(c_.rx_kernel_drops);
  s.tx_syscalls = ld(c_.tx_syscalls);
  s.tx_gso_batches = ld(c_.tx_gso_batches);
  s.rx_gro_batches = ld(c_.rx_gro_batches);
  s.rx_syscalls = ld(c_.rx_syscalls);
  s.rx_in_place = ld(c_.rx_in_place);
  return s;
}

namespace {
inline void Bump(std::atomic<uint64_t>& a, uint64_t v = 1) {
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}
}  // namespace

size_t UdpDatapath::TxBurst(Time /*now*/, const TxPacket* pkts, size_t n) {
  if (n == 0) return 0;
  n = std::min(n, kMaxTxBurst);
  return raw_mode() ? TxRaw(pkts, n) : TxSockets(pkts, n);
}

size_t UdpDatapath::TxRaw(const TxPacket* pkts, size_t n) {
  Impl& m = *impl_;
  const size_t np = local_.size();
  // Group packets by raw socket (one per plane when planes are bound to
  // devices, else one), keeping order within a group.
  const size_t ngroups = raw_plane_fd_.size();
  constexpr uint16_t kDrop = 0xffff;
  uint16_t start[kMaxPlanes + 1] = {};
  for (size_t i = 0; i < n; ++i) {
    const TxPacket& pk = pkts[i];
    const uint32_t id = pk.peer;
    m.sent[i] = true;
    m.sock_of[i] = kDrop;
    if (id == 0 || id > peers_.size() || !peers_[id - 1]) {
      Bump(c_.tx_drop_unknown_peer);
      continue;
    }
    if (pk.size() > mtu_ || pk.header_len > TxPacket::kMaxHeaderBytes) {
      Bump(c_.tx_drop_too_big);
      continue;
    }
    m.sent[i] = false;
    m.sock_of[i] = static_cast<uint16_t>(ngroups > 1 ? pk.path % np : 0);
    start[m.sock_of[i] + 1]++;
  }
  for (size_t g = 1; g <= ngroups; ++g) start[g] += start[g - 1];
  uint16_t next[kMaxPlanes + 1];
  memcpy(next, start, sizeof(next));
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    if (m.sock_of[i] == kDrop) continue;
    const TxPacket& pk = pkts[i];
    const uint32_t id = pk.peer;
    const size_t slots = next[m.sock_of[i]]++;
    const Peer& peer = *peers_[id - 1];
    const size_t plane = pk.path % np;
    const size_t r = peer.num_routes ? (pk.path % peer.num_routes) : 0;
    const RouteState& rs = peer.routes[r * np + plane];
    const PlaneAddress& pa = peer.planes[plane % peer.planes.size()];
    const uint8_t tclass =
        static_cast<uint8_t>(
            ((pk.tclass == TrafficClass::kControl ? opt_.control_dscp
                                                  : opt_.data_dscp)
             << 2)) |
        (opt_.ect ? kEct0 : 0);
    const uint32_t udp_len =
        static_cast<uint32_t>(kUdpHeaderBytes + pk.header_len + pk.payload_len);
    uint8_t* h = m.net[slots];
    const uint32_t vtf = (6u << 28) | (static_cast<uint32_t>(tclass) << 20) |
                         FlowLabel(id, pk.path);
    const uint32_t vtf_be = htonl(vtf);
    memcpy(h, &vtf_be, 4);
    const uint16_t plen_be = htons(static_cast<uint16_t>(rs.ext_len + udp_len));
    memcpy(h + 4, &plen_be, 2);
    h[6] = rs.ext_len ? kProtoRouting : kProtoUdp;
    h[7] = 64;  // hop limit
    memcpy(h + 8, local_[plane].addr.data(), 16);
    memcpy(h + 24, &rs.first_hop.sin6_addr, 16);
    if (rs.ext_len) memcpy(h + 40, rs.ext, rs.ext_len);
    uint8_t* u = h + 40 + rs.ext_len;
    const uint16_t sport = htons(static_cast<uint16_t>(
        opt_.entropy_port_base + pk.path % opt_.entropy_port_count));
    const uint16_t dport = htons(pa.port);
    const uint16_t ulen = htons(static_cast<uint16_t>(udp_len));
    memcpy(u, &sport, 2);
    memcpy(u + 2, &dport, 2);
    memcpy(u + 4, &ulen, 2);
    u[6] = u[7] = 0;
    iovec* iov = m.iov[slots];
    iov[0].iov_base = h;
    iov[0].iov_len = 40 + rs.ext_len + kUdpHeaderBytes;
    iov[1].iov_base = const_cast<uint8_t*>(pk.header);
    iov[1].iov_len = pk.header_len;
    size_t niov = 2;
    if (pk.payload_len) {
      iov[2].iov_base = const_cast<uint8_t*>(pk.payload);
      iov[2].iov_len = pk.payload_len;
      niov = 3;
    }
    const uint16_t csum =
        Udp6Checksum(local_[plane].addr, rs.final_dst, u, iov + 1, niov - 1);
    memcpy(u + 6, &csum, 2);
    m.dst[slots] = rs.first_hop;
    m.dst[slots].sin6_port = 0;  // raw sockets: port must be 0 or protocol
    msghdr& mh = m.msgs[slots].msg_hdr;
    mh.msg_name = &m.dst[slots];
    mh.msg_namelen = sizeof(sockaddr_in6);
    mh.msg_iov = iov;
    mh.msg_iovlen = niov;
    mh.msg_control = nullptr;
    mh.msg_controllen = 0;
    mh.msg_flags = 0;
    m.order[slots] = static_cast<uint16_t>(i);
  }
  // Send each group; an error other than back-pressure drops that packet.
  uint64_t sent = 0;
  bool pressure = false;
  for (size_t g = 0; g < ngroups; ++g) {
    size_t b = start[g];
    const size_t e = start[g + 1];
    while (b < e) {
      Bump(c_.tx_syscalls);
      int r = sendmmsg(raw_plane_fd_[g], m.msgs + b, e - b, MSG_DONTWAIT);
      if (r > 0) {
        for (int k = 0; k < r; ++k) {
          bytes += m.msgs[b + k].msg_len;
          m.sent[m.order[b + k]] = true;
        }
        sent += r;
        b += r;
        continue;
      }
      if (r < 0 &&
          (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
        pressure = true;
        break;
      }
      Bump(c_.tx_errors);  // e.g. ENETUNREACH after a link went down
      m.sent[m.order[b]] = true;
      ++b;
    }
  }
  if (pressure) Bump(c_.tx_backpressure);
  Bump(c_.tx_packets, sent);
  Bump(c_.tx_bytes, bytes);
  size_t accepted = 0;
  while (accepted < n && m.sent[accepted]) ++accepted;
  return accepted;
}

namespace {
size_t MsgBytes(const msghdr& h) {
  size_t t = 0;
  for (size_t i = 0; i < h.msg_iovlen; ++i) t += h.msg_iov[i].iov_len;
  return t;
}
}  // namespace

// Sends slots [b, e) of one socket, merging runs of data packets to the
// same destination whose sizes are equal (the last may be shorter) into
// one UDP GSO message (UDP_SEGMENT): one pass through the stack per run.
// Returns false on back-pressure. A GSO send the kernel refuses (EIO: the
// egress device lacks checksum offload; EINVAL) turns GSO off for good and
// leaves the run unsent, to be offered again.
bool UdpDatapath::SendGso(int fd, size_t b, size_t e, uint64_t* bytes,
                          uint64_t* sent) {
  Impl& m = *impl_;
  size_t ng = 0, gi = 0;
  for (size_t i = b; i < e;) {
    const msghdr& first = m.msgs[i].msg_hdr;
    const size_t seg = MsgBytes(first);
    size_t j = i + 1, total = seg;
    if (first.msg_controllen == 0) {  // data class: no per-packet cmsg
      while (j < e && j - i < 64) {
        const msghdr& h = m.msgs[j].msg_hdr;
        const size_t len = MsgBytes(h);
        if (h.msg_controllen != 0 || len > seg || total + len > 65000 ||
            memcmp(&m.dst[j], &m.dst[i], sizeof(sockaddr_in6)) != 0)
          break;
        total += len;
        ++j;
        if (len < seg) break;  // a shorter one ends the run
      }
    }
    mmsghdr& g = m.gmsgs[ng];
    g.msg_hdr = first;
    g.msg_len = 0;
    if (j - i > 1) {
      g.msg_hdr.msg_iov = m.giov + gi;
      size_t cnt = 0;
      for (size_t k = i; k < j; ++k)
        for (size_t v = 0; v < m.msgs[k].msg_hdr.msg_iovlen; ++v)
          m.giov[gi + cnt++] = m.msgs[k].msg_hdr.msg_iov[v];
      gi += cnt;
      g.msg_hdr.msg_iovlen = cnt;
      g.msg_hdr.msg_control = m.gctl[ng];
      g.msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
      cmsghdr* c = CMSG_FIRSTHDR(&g.msg_hdr);
      c->cmsg_level = IPPROTO_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t gs = static_cast<uint16_t>(seg);
      memcpy(CMSG_DATA(c), &gs, sizeof(gs));
    }
    m.gfirst[ng] = static_cast<uint16_t>(i);
    m.gcount[ng] = static_cast<uint16_t>(j - i);
    ++ng;
    i = j;
  }
  size_t k = 0;
  while (k < ng) {
    Bump(c_.tx_syscalls);
    int r = sendmmsg(fd, m.gmsgs + k, ng - k, MSG_DONTWAIT);
    if (r > 0) {
      for (int q = 0; q < r; ++q) {
        const size_t g = k + q;
        *bytes += m.gmsgs[g].msg_len;
        *sent += m.gcount[g];
        if (m.gcount[g] > 1) Bump(c_.tx_gso_batches);
        for (size_t x = 0; x < m.gcount[g]; ++x)
          m.sent[m.order[m.gfirst[g] + x]] = true;
      }
      k += r;
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS))
      return false;
    if (m.gcount[k] > 1 && (errno == EIO || errno == EINVAL)) {
      gso_ = false;  // not supported on this path: plain sends from now on
      return true;
    }
    Bump(c_.tx_errors);
    for (size_t x = 0; x < m.gcount[k]; ++x)
      m.sent[m.order[m.gfirst[k] + x]] = true;  // dropped: consumed
    ++k;
  }
  return true;
}

size_t UdpDatapath::TxSockets(const TxPacket* pkts, size_t n) {
  Impl& m = *impl_;
  const size_t np = local_.size();
  const size_t nsock = opt_.sockets_per_plane;
  // Bucket packets by socket (counting sort), keep order within a socket.
  constexpr uint16_t kDrop = 0xffff;
  uint16_t count[kMaxPlanes * 64 + 1] = {};
  for (size_t i = 0; i < n; ++i) {
    const TxPacket& pk = pkts[i];
    m.sent[i] = false;
    const uint32_t id = pk.peer;
    if (id == 0 || id > peers_.size() || !peers_[id - 1]) {
      Bump(c_.tx_drop_unknown_peer);
      m.sock_of[i] = kDrop;
      m.sent[i] = true;
      continue;
    }
    if (pk.size() > mtu_) {
      Bump(c_.tx_drop_too_big);
      m.sock_of[i] = kDrop;
      m.sent[i] = true;
      continue;
    }
    const size_t plane = pk.path % np;
    const size_t s = (pk.path / np) % nsock;
    m.sock_of[i] = static_cast<uint16_t>(plane * nsock + s);
    count[m.sock_of[i] + 1]++;
  }
  const size_t total_socks = np * nsock;
  for (size_t s = 1; s <= total_socks; ++s) count[s] += count[s - 1];
  uint16_t start[kMaxPlanes * 64 + 1];
  memcpy(start, count, sizeof(uint16_t) * (total_socks + 1));
  for (size_t i = 0; i < n; ++i) {
    if (m.sock_of[i] == kDrop) continue;
    const size_t slot = count[m.sock_of[i]]++;
    const TxPacket& pk = pkts[i];
    const Peer& peer = *peers_[pk.peer - 1];
    const size_t plane = pk.path % np;
    const size_t r = peer.num_routes ? (pk.path % peer.num_routes) : 0;
    m.dst[slot] = peer.routes[r * np + plane].first_hop;
    iovec* iov = m.iov[slot];
    iov[0].iov_base = const_cast<uint8_t*>(pk.header);
    iov[0].iov_len = pk.header_len;
    size_t niov = 1;
    if (pk.payload_len) {
      iov[1].iov_base = const_cast<uint8_t*>(pk.payload);
      iov[1].iov_len = pk.payload_len;
      niov = 2;
    }
    msghdr& mh = m.msgs[slot].msg_hdr;
    mh.msg_name = &m.dst[slot];
    mh.msg_namelen = sizeof(sockaddr_in6);
    mh.msg_iov = iov;
    mh.msg_iovlen = niov;
    mh.msg_flags = 0;
    if (pk.tclass == TrafficClass::kControl) {
      mh.msg_control = m.ctl[slot];
      mh.msg_controllen = CMSG_SPACE(sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = IPPROTO_IPV6;
      c->cmsg_type = IPV6_TCLASS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      const int tclass = (opt_.control_dscp << 2) | (opt_.ect ? kEct0 : 0);
      memcpy(CMSG_DATA(c), &tclass, sizeof(int));
    } else {
      mh.msg_control = nullptr;
      mh.msg_controllen = 0;
    }
    m.order[slot] = static_cast<uint16_t>(i);
  }
  uint64_t bytes = 0, sent = 0;
  bool pressure = false;
  for (size_t s = 0; s < total_socks; ++s) {
    size_t b = start[s];
    const size_t e = start[s + 1];
    const int fd = tx_fd_[s / nsock][s % nsock];
    if (gso_ && e - b >= 2) {
      if (!SendGso(fd, b, e, &bytes, &sent)) pressure = true;
      continue;
    }
    while (b < e) {
      Bump(c_.tx_syscalls);
      int r = sendmmsg(fd, m.msgs + b, e - b, MSG_DONTWAIT);
      if (r > 0) {
        for (int k = 0; k < r; ++k) {
          bytes += m.msgs[b + k].msg_len;
          m.sent[m.order[b + k]] = true;
        }
        sent += r;
        b += r;
        continue;
      }
      if (r < 0 &&
          (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
        pressure = true;
        break;
      }
      Bump(c_.tx_errors);
      m.sent[m.order[b]] = true;  // dropped: consumed
      ++b;
    }
  }
  if (pressure) Bump(c_.tx_backpressure);
  Bump(c_.tx_packets, sent);
  Bump(c_.tx_bytes, bytes);
  // Accepted = longest consumed prefix. Packets sent beyond it are offered
  // again by the caller (a duplicate the receiver suppresses); this only
  // happens under back-pressure.
  size_t accepted = 0;
  while (accepted < n && m.sent[accepted]) ++accepted;
  return accepted;
}

// Hands out the segments of slots [*slot, end) into pkts[got, n), from byte
// *off of the first; advances *slot/*off past what it handed out.
size_t UdpDatapath::EmitSegments(RxPacket* pkts, size_t got, size_t n,
                                 size_t* slot, size_t end, size_t* off) {
  Impl& m = *impl_;
  uint64_t bytes = 0, ce = 0;
  const size_t first = got;
  while (*slot < end && got < n) {
    const size_t i = *slot;
    const uint32_t len = m.rlen[i];
    const uint32_t seg = m.rseg[i];
    const uint8_t* base = m.rbuf.data() + i * m.rbuf_size;
    if (len == 0 && seg == 0) {  // an empty datagram: the engine counts it
      RxPacket& p = pkts[got++];
      p = RxPacket{};
      p.data = base;
      p.ecn_ce = m.rce[i] != 0;
      ce += m.rce[i];
      ++*slot;
      continue;
    }
    while (*off < len && got < n) {
      const uint32_t l = std::min<uint32_t>(seg, len - *off);
      RxPacket& p = pkts[got++];
      p = RxPacket{};
      p.data = base + *off;
      p.len = l;
      p.ecn_ce = m.rce[i] != 0;
      bytes += l;
      ce += m.rce[i];
      *off += l;
    }
    if (*off >= len) {
      ++*slot;
      *off = 0;
    }
  }
  Bump(c_.rx_packets, got - first);
  Bump(c_.rx_bytes, bytes);
  if (ce) Bump(c_.rx_ecn_ce, ce);
  return got;
}

absl::Status UdpDatapath::SetRxResolver(RxResolver* r) {
  if (r != nullptr && !opt_.rx_in_place)
    return absl::InvalidArgumentError(
        "SetRxResolver needs UdpOptions::rx_in_place");
  resolver_ = r;
  return absl::OkStatus();
}

void UdpDatapath::NoteKernelDrops(size_t plane, uint32_t count) {
  // The kernel's count is cumulative (and wraps at 2^32): add the growth.
  const uint32_t grown = count - rx_ovfl_[plane];
  if (grown != 0 && grown < (1u << 31)) {
    Bump(c_.rx_kernel_drops, grown);
    rx_ovfl_[plane] = count;
  }
}

// Receive in place: per datagram, peek the header, resolve, then read the
// header into slot `got`'s buffer and the payload to where the resolver
// said (or the whole datagram into the buffer).
size_t UdpDatapath::RxInPlace(RxPacket* pkts, size_t n) {
  Impl& m = *impl_;
  const size_t nb = m.rmsgs.size();
  const size_t np = rx_fd_.size();
  constexpr size_t kHdr = wire::kDataHeaderSize;
  size_t got = 0;
  uint64_t bytes = 0, ce = 0, placed = 0;
  for (size_t k = 0; k < np && got < n && got < nb; ++k) {
    const size_t plane = (rx_next_plane_ + k) % np;
    const int fd = rx_fd_[plane];
    while (got < n && got < nb) {
      uint8_t* buf = m.rbuf.data() + got * m.rbuf_size;
      iovec piov{m.peek, kHdr};
      msghdr ph{};
      ph.msg_iov = &piov;
      ph.msg_iovlen = 1;
      Bump(c_.rx_syscalls);
      const ssize_t len = recvmsg(fd, &ph, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
      if (len < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) Bump(c_.rx_errors);
        break;
      }
      uint8_t* dst = nullptr;
      const size_t plen =
          static_cast<size_t>(len) > kHdr ? static_cast<size_t>(len) - kHdr : 0;
      // Every datagram with a full DATA header is shown to the resolver,
      // header-only ones too (it returns nullptr for them): the engine must
      // see each DATA packet of the batch that can precede one it places.
      if (static_cast<size_t>(len) >= kHdr &&
          static_cast<size_t>(len) <= m.rx_max_packet)
        dst = resolver_->Resolve(m.peek, kHdr, plen);
      msghdr& mh = m.rmsgs[got].msg_hdr;
      mh.msg_name = &m.rsrc[got];
      mh.msg_namelen = sizeof(sockaddr_in6);
      mh.msg_control = m.rctl.data() + got * kRxControlBytes;
      mh.msg_controllen = kRxControlBytes;
      mh.msg_flags = 0;
      if (dst != nullptr) {
        m.ipiov[0] = iovec{buf, kHdr};
        m.ipiov[1] = iovec{dst, plen};
        mh.msg_iov = m.ipiov;
        mh.msg_iovlen = 2;
      } else {
        mh.msg_iov = &m.riov[got];
        mh.msg_iovlen = 1;
      }
      Bump(c_.rx_syscalls);
      const ssize_t r = recvmsg(fd, &mh, MSG_DONTWAIT);
      mh.msg_iov = &m.riov[got];  // recvmmsg's layout again
      mh.msg_iovlen = 1;
      if (r < 0) {
        // Nothing was read (a peeked datagram with a bad checksum is
        // dropped by the peek itself, before any byte is copied).
        if (errno != EAGAIN && errno != EWOULDBLOCK) Bump(c_.rx_errors);
        break;
      }
      const RxAncillary anc = ParseRxAncillary(mh);
      if (anc.has_drops) NoteKernelDrops(plane, anc.drops);
      const bool is_ce = anc.ecn_ce;
      RxPacket& p = pkts[got];
      p = RxPacket{};
      p.data = buf;
      p.ecn_ce = is_ce;
      if (dst != nullptr) {
        // One reader per socket: the datagram read is the one peeked. Were
        // it not, it is not handed to the engine (which did not resolve it).
        if (r != len || (mh.msg_flags & MSG_TRUNC) ||
            memcmp(buf, m.peek, kHdr) != 0) {
          Bump(c_.rx_errors);
          continue;
        }
        p.len = kHdr;
        p.payload = dst;
        p.payload_len = static_cast<uint32_t>(plen);
        ++placed;
      } else {
        if ((mh.msg_flags & MSG_TRUNC) ||
            static_cast<size_t>(r) > m.rx_max_packet) {
          Bump(c_.rx_truncated);
          continue;
        }
        p.len = static_cast<uint32_t>(r);
      }
      bytes += static_cast<uint64_t>(r);
      ce += is_ce;
      ++got;
    }
  }
  rx_next_plane_ = (rx_next_plane_ + 1) % np;
  Bump(c_.rx_packets, got);
  Bump(c_.rx_bytes, bytes);
  if (ce) Bump(c_.rx_ecn_ce, ce);
  if (placed) Bump(c_.rx_in_place, placed);
  return got;
}

size_t UdpDatapath::RxBurst(Time /*now*/, RxPacket* pkts, size_t n) {
  if (resolver_ != nullptr) return RxInPlace(pkts, n);
  Impl& m = *impl_;
  const size_t nb = m.rmsgs.size();
  size_t got = 0;   // packets handed out
  size_t slot = 0;  // next free receive buffer (never reused in one call)
  if (m.pend_slot < m.pend_end) {
    // Segments of super-packets received by an earlier call come first;
    // their buffers lie before `slot`, so nothing received now overwrites
    // them (nor the packets handed out now).
    got = EmitSegments(pkts, got, n, &m.pend_slot, m.pend_end, &m.pend_off);
    if (m.pend_slot < m.pend_end) return got;  // the caller's array is full
    slot = m.pend_end;
    m.pend_slot = m.pend_end = m.pend_off = 0;
  }
  const size_t np = rx_fd_.size();
  for (size_t k = 0; k < np && got < n && slot < nb; ++k) {
    const size_t plane = (rx_next_plane_ + k) % np;
    const size_t want = std::min(n - got, nb - slot);
    for (size_t i = slot; i < slot + want; ++i) {
      msghdr& mh = m.rmsgs[i].msg_hdr;
      mh.msg_name = &m.rsrc[i];
      mh.msg_namelen = sizeof(sockaddr_in6);
      mh.msg_control = m.rctl.data() + i * kRxControlBytes;
      mh.msg_controllen = kRxControlBytes;
      mh.msg_flags = 0;
    }
    Bump(c_.rx_syscalls);
    int r = recvmmsg(rx_fd_[plane], m.rmsgs.data() + slot, want, MSG_DONTWAIT,
                     nullptr);
    if (r <= 0) {
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) Bump(c_.rx_errors);
      continue;
    }
    uint64_t batches = 0;
    for (int j = 0; j < r; ++j) {
      const size_t i = slot + j;
      msghdr& mh = m.rmsgs[i].msg_hdr;
      const uint32_t len = m.rmsgs[i].msg_len;
      const RxAncillary anc = ParseRxAncillary(mh);
      if (anc.has_drops) NoteKernelDrops(plane, anc.drops);
      const bool is_ce = anc.ecn_ce;
      uint32_t seg = anc.gro_segment;
      uint32_t use = len;
      if (seg == 0 || seg >= len) {
        // One datagram: dropped when cut short or longer than a packet.
        seg = len;
        if ((mh.msg_flags & MSG_TRUNC) || len > m.rx_max_packet) {
          Bump(c_.rx_truncated);
          use = 0;
        }
      } else if (seg > m.rx_max_packet) {
        Bump(c_.rx_truncated);  // segments longer than a packet: all dropped
        use = 0;
      } else if (mh.msg_flags & MSG_TRUNC) {
        // A super-packet cut by the buffer: its whole segments are good, the
        // cut one (and whatever followed) is lost.
        use = len - len % seg;
        Bump(c_.rx_truncated);
      }
      if (use > seg) ++batches;
      m.rlen[i] = use;
      // rseg 0 marks an empty datagram to hand out; dropped slots have 1.
      m.rseg[i] = use == 0 ? (len == 0 && seg == 0 ? 0 : 1) : seg;
      m.rce[i] = is_ce;
    }
    if (batches) Bump(c_.rx_gro_batches, batches);
    size_t cur = slot, off = 0;
    const size_t end = slot + r;
    got = EmitSegments(pkts, got, n, &cur, end, &off);
    slot = end;
    if (cur < end) {  // the caller's array is full: keep the rest
      m.pend_slot = cur;
      m.pend_end = end;
      m.pend_off = off;
      break;
    }
  }
  rx_next_plane_ = (rx_next_plane_ + 1) % np;
  return got;
}

}  // namespace prism::udp
