// prism_fabric_tool: the C++ half of the kernel SRv6 fabric rig
// (tests/fabric/). Everything it prints or sends comes from Prism's own
// topology model, path sets and encoders, so the kernel fabric tests check
// Prism's encodings against Linux's SRv6 implementation.
//
//   plan TOPO.json
//       The fabric as lines for fabric.sh:
//         node NAME KIND PLANE USID          (KIND host|t0|t1|t2)
//         link ID ANAME BNAME PLANE
//         addr NAME ADDRESS                   (host address, one per plane)
//         route NAME PREFIX LINKID            (static route out of LINKID)
//         sid NAME end ADDRESS/128            (classic End SID)
//         sid NAME usid PREFIX/48             (End, flavors next-csid)
//   paths TOPO.json SRC DST
//         path X PLANE HOSTLINK LINKID:DIR,... SWITCH,...
//         (DIR ab = a->b, ba = b->a; links and switches in travel order)
//   expect TOPO.json SRC DST X MODE HOP
//       What a capture on the HOP-th link of path X shows: for MODE srh
//       "SEGLEFT LASTENTRY ADDR,ADDR,..." (wire order), for usid the
//       destination address.
//   send TOPO.json SRC DST X MODE COUNT IFNAME DSTMAC PORT [badcsum]
//       COUNT UDP datagrams for path X (MODE usid: carrier destination, no
//       SRH; MODE srh: classic SIDs in an SRH) as Ethernet frames on an
//       AF_PACKET socket on IFNAME (the host's NIC port of the path's
//       plane). The payload is "prism MODE X SEQ". badcsum: checksum over
//       the first destination instead of the final one (negative control).
//   recv PORT OUTFILE
//       Appends "MODE X SEQ DSTADDR" for every datagram received on PORT
//       until killed. Only datagrams whose checksum the kernel accepted get
//       here.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "routing/path_set.h"
#include "routing/srv6.h"
#include "routing/topology.h"

namespace {

using namespace prism::routing;
using prism::PathId;

[[noreturn]] void Die(const std::string& msg) {
  fprintf(stderr, "prism_fabric_tool: %s\n", msg.c_str());
  exit(2);
}

// A decimal integer in [lo, hi], all of `s`; dies naming `what` otherwise
// (atoi took "12x" as 12 and "x" as 0).
int Int(const char* s, int lo, int hi, const char* what) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
    Die(std::string("bad ") + what + " \"" + s + "\" (want " +
        std::to_string(lo) + ".." + std::to_string(hi) + ")");
  }
  return static_cast<int>(v);
}

Topology Load(const char* path) {
  std::ifstream in(path);
  if (!in) Die(std::string("cannot open ") + path);
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<Topology> t = Topology::FromJson(ss.str());
  if (!t.ok()) Die(std::string(t.status().message()));
  return *std::move(t);
}

std::string NodeName(const Topology& t, uint32_t n) {
  const Node& node = t.node(n);
  char buf[32];
  switch (node.kind) {
    case NodeKind::kHost:
      snprintf(buf, sizeof(buf), "h%u", node.index);
      break;
    case NodeKind::kT0:
      snprintf(buf, sizeof(buf), "p%ut0s%u", node.plane, node.index);
      break;
    case NodeKind::kT1:
      snprintf(buf, sizeof(buf), "p%ut1s%u", node.plane, node.index);
      break;
    case NodeKind::kT2:
      snprintf(buf, sizeof(buf), "p%ut2s%u", node.plane, node.index);
      break;
  }
  return buf;
}

const char* KindName(NodeKind k) {
  switch (k) {
    case NodeKind::kHost:
      return "host";
    case NodeKind::kT0:
      return "t0";
    case NodeKind::kT1:
      return "t1";
    case NodeKind::kT2:
      return "t2";
  }
  return "?";
}

std::string UsidPrefix(uint16_t usid) {
  Ipv6Address a;
  a.set_word(0, static_cast<uint16_t>(kDefaultLocatorBlock >> 16));
  a.set_word(1, static_cast<uint16_t>(kDefaultLocatorBlock));
  a.set_word(2, usid);
  return a.ToString() + "/48";
}

int Plan(const Topology& t) {
  for (uint32_t n = 0; n < t.num_nodes(); ++n) {
    const Node& node = t.node(n);
    printf("node %s %s %u %04x\n", NodeName(t, n).c_str(), KindName(node.kind),
           node.plane, node.usid);
  }
  for (uint32_t l = 0; l < t.num_links(); ++l) {
    const Link& k = t.link(l);
    printf("link %u %s %s %u\n", l, NodeName(t, k.a).c_str(),
           NodeName(t, k.b).c_str(), k.plane);
  }
  for (uint32_t h = 0; h < t.num_hosts(); ++h) {
    for (uint16_t p = 0; p < t.num_planes(); ++p) {
      printf("addr %s %s\n", NodeName(t, h).c_str(),
             HostAddress(h, p).ToString().c_str());
    }
  }
  for (uint32_t n = t.num_hosts(); n < t.num_nodes(); ++n) {
    const Node& node = t.node(n);
    const std::string name = NodeName(t, n);
    const auto& ports = t.ports(n);
    for (size_t i = 0; i < ports.size(); ++i) {
      const uint32_t l = ports[i];
      const uint32_t peer = t.peer(l, n);
      const Node& pn = t.node(peer);
      if (pn.kind == NodeKind::kHost) {
        printf("route %s %s/64 %u\n", name.c_str(),
               HostAddress(peer, node.plane).ToString().c_str(), l);
      } else {
        printf("route %s %s %u\n", name.c_str(), UsidPrefix(pn.usid).c_str(),
               l);
        printf("route %s %s/48 %u\n", name.c_str(),
               ClassicSid(node.plane, pn.usid).ToString().c_str(), l);
      }
    }
    printf("sid %s end %s/128\n", name.c_str(),
           ClassicSid(node.plane, node.usid).ToString().c_str());
    printf("sid %s usid %s\n", name.c_str(), UsidPrefix(node.usid).c_str());
  }
  return 0;
}

PathSet Paths(const Topology& t, const char* s, const char* d) {
  absl::StatusOr<PathSet> ps = PathSet::Build(t, Int(s, 0, INT32_MAX, "host"),
                                              Int(d, 0, INT32_MAX, "host"));
  if (!ps.ok()) Die(std::string(ps.status().message()));
  return *std::move(ps);
}

// Links of path x with their direction of travel.
std::vector<std::pair<uint32_t, bool>> Hops(const Topology& t,
                                            const PathSet& ps, PathId x) {
  std::array<uint32_t, kMaxPathLinks> links;
  const int n = ps.Links(x, links);
  std::vector<std::pair<uint32_t, bool>> out;
  uint32_t at = ps.src();
  for (int i = 0; i < n; ++i) {
    const bool ab = t.link(links[i]).a == at;
    out.push_back({links[i], ab});
    at = t.peer(links[i], at);
  }
  return out;
}

int ListPaths(const Topology& t, const PathSet& ps) {
  for (PathId x = 0; x < ps.num_paths(); ++x) {
    printf("path %u %u %u ", x, ps.plane(x),
           t.host_link(ps.src(), ps.plane(x)));
    bool first = true;
    for (auto [l, ab] : Hops(t, ps, x)) {
      printf("%s%u:%s", first ? "" : ",", l, ab ? "ab" : "ba");
      first = false;
    }
    printf(" ");
    std::array<uint32_t, kMaxPathSwitches> sw;
    const int ns = ps.Switches(x, sw);
    for (int i = 0; i < ns; ++i) {
      printf("%s%s", i ? "," : "", NodeName(t, sw[i]).c_str());
    }
    printf("\n");
  }
  return 0;
}

PathId PathArg(const PathSet& ps, const char* s) {
  const int x = Int(s, 0, INT32_MAX, "path id");
  if (x >= ps.num_paths()) Die("path id out of range");
  return static_cast<PathId>(x);
}

int Expect(const Topology& t, const PathSet& ps, PathId x,
           const std::string& mode, int hop) {
  // Switch i (0-based) sits between link i and link i+1; the state on link
  // `hop` is after switches 0..hop-1 acted.
  std::array<uint32_t, kMaxPathSwitches> sw;
  const int nsw = ps.Switches(x, sw);
  if (hop < 0 || hop > nsw) Die("hop out of range");
  if (mode == "usid") {
    Ipv6Address d = ps.Carrier(x);
    for (int i = 0; i < hop; ++i) UsidShift(&d, t.node(sw[i]).usid);
    printf("%s\n", d.ToString().c_str());
    return 0;
  }
  if (mode != "srh") Die("mode must be usid or srh");
  Srh srh = ps.MakeSrhFor(x);
  Ipv6Address d = srh.active();
  for (int i = 0; i < hop; ++i) {
    const Node& n = t.node(sw[i]);
    if (d == ClassicSid(n.plane, n.usid)) SrhAdvance(&srh, &d);
  }
  printf("%u %u ", srh.segments_left, srh.last_entry);
  for (int i = 0; i < srh.num_segments; ++i) {
    printf("%s%s", i ? "," : "", srh.segments[i].ToString().c_str());
  }
  printf("\n");
  return 0;
}

int Send(const Topology& t, const PathSet& ps, PathId x,
         const std::string& mode, int count, const char* ifname,
         const char* dmac_text, int port, bool bad_csum) {
  const int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_IPV6));
  if (fd < 0) Die(std::string("socket(AF_PACKET): ") + strerror(errno));
  ifreq ifr{};
  strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
  if (ioctl(fd, SIOCGIFHWADDR, &ifr) != 0) Die("SIOCGIFHWADDR");
  uint8_t smac[6], dmac[6];
  memcpy(smac, ifr.ifr_hwaddr.sa_data, 6);
  if (sscanf(dmac_text, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &dmac[0], &dmac[1],
             &dmac[2], &dmac[3], &dmac[4], &dmac[5]) != 6) {
    Die("bad MAC");
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_ifindex = static_cast<int>(if_nametoindex(ifname));
  sll.sll_halen = 6;
  sll.sll_protocol = htons(ETH_P_IPV6);
  memcpy(sll.sll_addr, dmac, 6);
  if (sll.sll_ifindex == 0) Die("no such interface");

  Srh srh;
  Udp6Packet p;
  p.ip.src = ps.SourceAddress(x);
  p.final_dst = ps.FinalDestination(x);
  const EntropyFields ef = ps.EntropyFieldsFor(x);
  p.ip.flow_label = ef.flow_label;
  p.src_port = ef.udp_src_port;
  p.dst_port = static_cast<uint16_t>(port);
  if (mode == "usid") {
    p.ip.dst = ps.Carrier(x);
  } else if (mode == "srh") {
    srh = ps.MakeSrhFor(x);
    p.srh = &srh;
    p.ip.dst = srh.active();
  } else {
    Die("mode must be usid or srh");
  }
  if (bad_csum) p.final_dst = p.ip.dst;
  (void)t;
  for (int seq = 0; seq < count; ++seq) {
    char payload[64];
    const int plen = snprintf(payload, sizeof(payload), "prism %s %u %d",
                              mode.c_str(), x, seq);
    p.payload = std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(payload), static_cast<size_t>(plen));
    uint8_t frame[1600];
    memcpy(frame, dmac, 6);
    memcpy(frame + 6, smac, 6);
    frame[12] = 0x86;
    frame[13] = 0xdd;
    size_t n = 0;
    if (EncodeUdp6Packet(p, std::span<uint8_t>(frame + 14, sizeof(frame) - 14),
                         &n) != PacketStatus::kOk) {
      Die("encode failed");
    }
    if (sendto(fd, frame, 14 + n, 0, reinterpret_cast<sockaddr*>(&sll),
               sizeof(sll)) < 0) {
      Die(std::string("sendto: ") + strerror(errno));
    }
  }
  close(fd);
  return 0;
}

int Recv(int port, const char* out_path) {
  const int fd = socket(AF_INET6, SOCK_DGRAM, 0);
  if (fd < 0) Die("socket");
  int one = 1;
  setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(static_cast<uint16_t>(port));
  a.sin6_addr = in6addr_any;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Die("bind");
  FILE* out = fopen(out_path, "a");
  if (out == nullptr) Die("cannot open output");
  fprintf(out, "listening\n");
  fflush(out);
  for (;;) {
    char buf[2048], cbuf[256];
    iovec iov{buf, sizeof(buf) - 1};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof(cbuf);
    const ssize_t r = recvmsg(fd, &m, 0);
    if (r < 0) continue;
    buf[r] = 0;
    char da[64] = "?";
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
        in6_pktinfo pi;
        memcpy(&pi, CMSG_DATA(c), sizeof(pi));
        inet_ntop(AF_INET6, &pi.ipi6_addr, da, sizeof(da));
      }
    }
    char mode[16];
    unsigned x;
    int seq;
    if (sscanf(buf, "prism %15s %u %d", mode, &x, &seq) == 3) {
      fprintf(out, "%s %u %d %s\n", mode, x, seq, da);
    } else {
      fprintf(out, "junk %zd %s\n", r, da);
    }
    fflush(out);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Die("usage: see the comment at the top of fabric_tool.cc");
  const std::string cmd = argv[1];
  if (cmd == "recv" && argc == 4) {
    return Recv(Int(argv[2], 1, 65535, "port"), argv[3]);
  }
  if (argc < 3) Die("missing topology file");
  const Topology t = Load(argv[2]);
  if (cmd == "plan" && argc == 3) return Plan(t);
  if (cmd == "paths" && argc == 5) {
    return ListPaths(t, Paths(t, argv[3], argv[4]));
  }
  if (cmd == "expect" && argc == 8) {
    const PathSet ps = Paths(t, argv[3], argv[4]);
    return Expect(t, ps, PathArg(ps, argv[5]), argv[6],
                  Int(argv[7], 0, 64, "hop"));
  }
  if (cmd == "send" && (argc == 11 || argc == 12)) {
    if (argc == 12 && std::string(argv[11]) != "badcsum") {
      Die(std::string("unknown send option \"") + argv[11] + "\"");
    }
    const PathSet ps = Paths(t, argv[3], argv[4]);
    return Send(t, ps, PathArg(ps, argv[5]), argv[6],
                Int(argv[7], 0, 1000000, "count"), argv[8], argv[9],
                Int(argv[10], 1, 65535, "port"), argc == 12);
  }
  Die("bad arguments: see the comment at the top of fabric_tool.cc");
}
