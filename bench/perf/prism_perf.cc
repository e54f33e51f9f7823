// prism_perf: an ib_write_bw-style bandwidth test for Prism endpoints.
//
//   server:  prism_perf [options]
//   client:  prism_perf [options] <server-host>
//   one process, both sides: prism_perf --datapath loopback [options]
//   RDMA NICs / soft-RoCE: prism_perf --datapath verbs [--device rxe_lo]
//                          [--qps 8] [<server-host>]
//
// Like perftest, the two sides exchange connection info and the memory key
// over a TCP side channel (default port 18515), then the client posts
// WRITEs of -s bytes, keeping -t outstanding, for -n iterations or -D
// seconds, and prints the ib_write_bw table (plus MB/s). --json prints one
// JSON object instead; --path-stats adds per-path counters.
#include <arpa/inet.h>
#include <dirent.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "prism/endpoint.h"

namespace {

using prism::Completion;
using prism::ConnId;
using prism::Endpoint;
using prism::EndpointOptions;
using prism::Time;

struct Args {
  std::string host;  // empty = server
  uint64_t size = 65536;
  uint64_t iters = 5000;
  double duration = 0;  // seconds; 0 = use iters
  uint32_t tx_depth = 128;
  uint16_t tcp_port = 18515;
  uint16_t udp_port = 0;
  uint16_t paths = 64;
  uint16_t planes = 0;  // 0 = number of local addresses
  std::string datapath = "udp";
  std::vector<std::string> local = {"::1"};
  std::vector<std::string> routes;
  std::string tx_mode = "auto";
  uint32_t link_mtu = 0;  // 0: the interfaces' MTU
  uint16_t sockets_per_plane = 8;
  std::string cc = "nscc";
  uint64_t rate_gbps = 100;
  double rto_min_us = 0;
  double rto_max_us = 0;  // 0: max(engine default, 8 x rto_min)
  double base_rtt_us = 100;
  double probe_us = 1000;
  double ack_delay_us = 0;
  bool path_stats = false;
  bool json = false;
  bool busy_poll = false;
  bool immediate = false;
  bool zero_checksum = false;
  bool gso = true;
  bool gro = true;
  bool in_place = false;
  bool tlp = true;
  int cpu = -1;  // loop thread pinning
  int spin_us = -1;
  // Longest WaitCompletions sleep of the posting thread. A completion wakes
  // it at once, so this only bounds the idle wake-ups: with 200 us, a
  // window-limited run under QEMU TCG (RTT 40-460 ms) can wake the thread
  // up to 5000 times a second (docs/verbs.md "Profile inside the VM").
  int wait_us = 200;
  // Receive-buffer slots (message-sized) the server registers; 0: tx depth,
  // at most 64 (with more messages in flight than slots, two of them write
  // the same slot at once, as ib_write_bw's single buffer does).
  uint64_t remote_slots = 0;
  std::string bind = "::";
  std::string device;  // verbs
  uint16_t qps = 8;    // verbs data QPs
  uint32_t mtu_payload = 0;
};

void Usage() {
  fprintf(
      stderr,
      "Usage: prism_perf [options] [server-host]   (no host: server)\n"
      "  -s, --size=BYTES        message size (default 65536)\n"
      "  -n, --iters=N           number of messages (default 5000)\n"
      "  -D, --duration=SEC      run for SEC seconds instead of -n\n"
      "  -t, --tx-depth=N        outstanding writes (default 128)\n"
      "  -p, --port=PORT         TCP side-channel port (default 18515)\n"
      "  -P, --paths=N           paths per connection (default 64)\n"
      "  -l, --planes=N          planes (default: number of --local)\n"
      "  -d, --datapath=udp|loopback|verbs (loopback: both sides\n"
      "                          in-process; verbs: libibverbs)\n"
      "  --device=NAME           verbs: RDMA device (first active)\n"
      "  --qps=N                 verbs: data QPs per connection (8)\n"
      "  --mtu-payload=BYTES     payload per DATA packet (datapath max;\n"
      "                          verbs: 4096, one WRITE each)\n"
      "  -L, --local=A[,B...]    local IPv6 address per plane (::1)\n"
      "  -u, --udp-port=PORT     UDP port on every plane (0: ephemeral)\n"
      "  -r, --route=R           per-path route (repeat): entropy |\n"
      "                          usid:<carrier> | srh:<seg>,<seg>...\n"
      "  -m, --mtu=BYTES         link MTU (default 0: the MTU of the\n"
      "                          interfaces holding --local)\n"
      "  --tx-mode=auto|raw|sockets, --sockets-per-plane=N\n"
      "  --cc=ALG (nscc; or nscc-classic, fixed, dcqcn), --rate=GBPS\n"
      "                          link rate (100), --rto-min=US (4000)\n"
      "  --rto-max=US            RTO ceiling (max(engine default 4000, 8 x "
      "rto-min))\n"
      "  --base-rtt=US           expected unloaded RTT (100)\n"
      "  --probe-interval=US     probe period of retired paths (1000)\n"
      "  --ack-delay=US          delayed-SACK time (0: base-rtt / 4)\n"
      "  --immediate             WRITE-with-immediate\n"
      "  --busy-poll             spin the event loop\n"
      "  --gso, --no-gso         UDP GSO for runs of equal-size packets (on)\n"
      "  --no-gro                no UDP GRO on receive\n"
      "  --in-place              receive payloads straight into the region\n"
      "                          (peek the header; turns GRO off)\n"
      "  --no-tlp                no tail-loss probes (RTO only)\n"
      "  --cpu=N                 pin the event-loop thread to CPU N\n"
      "  --spin=US               poll US after the last work before sleeping\n"
      "                          (-1: the datapath's default; udp 0)\n"
      "  --wait-us=US            longest completion wait of the posting\n"
      "                          thread (200; a completion ends it)\n"
      "  --remote-slots=N        server receive buffer: N messages (0: the\n"
      "                          TX depth, at most 64)\n"
      "  --zero-checksum         accept zero UDP checksums (uSID, sockets)\n"
      "  --bind=ADDR             side-channel listen address (::)\n"
      "  --path-stats            per-path counters\n"
      "  --json                  print one JSON object\n");
}

bool ParseArgs(int argc, char** argv, Args* a) {
  enum {
    kTxMode = 1000,
    kSocks,
    kCc,
    kRate,
    kRto,
    kRtoMax,
    kBaseRtt,
    kProbe,
    kAckDelay,
    kImm,
    kBusy,
    kZero,
    kGso,
    kNoGro,
    kNoGso,
    kNoTlp,
    kSpin,
    kWait,
    kRemoteSlots,
    kCpu,
    kBind,
    kPathStats,
    kJson,
    kDevice,
    kQps,
    kMtuPayload,
    kInPlace
  };
  static const option opts[] = {
      {"size", required_argument, nullptr, 's'},
      {"iters", required_argument, nullptr, 'n'},
      {"duration", required_argument, nullptr, 'D'},
      {"tx-depth", required_argument, nullptr, 't'},
      {"port", required_argument, nullptr, 'p'},
      {"paths", required_argument, nullptr, 'P'},
      {"planes", required_argument, nullptr, 'l'},
      {"datapath", required_argument, nullptr, 'd'},
      {"local", required_argument, nullptr, 'L'},
      {"udp-port", required_argument, nullptr, 'u'},
      {"route", required_argument, nullptr, 'r'},
      {"mtu", required_argument, nullptr, 'm'},
      {"tx-mode", required_argument, nullptr, kTxMode},
      {"sockets-per-plane", required_argument, nullptr, kSocks},
      {"cc", required_argument, nullptr, kCc},
      {"rate", required_argument, nullptr, kRate},
      {"rto-min", required_argument, nullptr, kRto},
      {"rto-max", required_argument, nullptr, kRtoMax},
      {"base-rtt", required_argument, nullptr, kBaseRtt},
      {"probe-interval", required_argument, nullptr, kProbe},
      {"ack-delay", required_argument, nullptr, kAckDelay},
      {"immediate", no_argument, nullptr, kImm},
      {"busy-poll", no_argument, nullptr, kBusy},
      {"zero-checksum", no_argument, nullptr, kZero},
      {"gso", no_argument, nullptr, kGso},
      {"no-gro", no_argument, nullptr, kNoGro},
      {"no-gso", no_argument, nullptr, kNoGso},
      {"in-place", no_argument, nullptr, kInPlace},
      {"no-tlp", no_argument, nullptr, kNoTlp},
      {"cpu", required_argument, nullptr, kCpu},
      {"spin", required_argument, nullptr, kSpin},
      {"wait-us", required_argument, nullptr, kWait},
      {"remote-slots", required_argument, nullptr, kRemoteSlots},
      {"bind", required_argument, nullptr, kBind},
      {"path-stats", no_argument, nullptr, kPathStats},
      {"json", no_argument, nullptr, kJson},
      {"device", required_argument, nullptr, kDevice},
      {"qps", required_argument, nullptr, kQps},
      {"mtu-payload", required_argument, nullptr, kMtuPayload},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};
  int c;
  auto num = [](const char* s, uint64_t* out) {
    if (!absl::SimpleAtoi(s, out)) {
      fprintf(stderr, "prism_perf: not a number: '%s'\n", s);
      return false;
    }
    return true;
  };
  // A time in microseconds (or seconds for -D): a finite number in
  // [lo, hi], so that it converts to Time (int64 picoseconds): "inf" or
  // 1e300 was an undefined conversion, not an error.
  auto micros = [](const char* name, const char* s, double lo, double hi,
                   bool lo_open, double* out) {
    double d;
    if (!absl::SimpleAtod(s, &d) || !std::isfinite(d) || d > hi ||
        (lo_open ? d <= lo : d < lo)) {
      fprintf(stderr, "prism_perf: %s must be a number in %s%g, %g]: '%s'\n",
              name, lo_open ? "(" : "[", lo, hi, s);
      return false;
    }
    *out = d;
    return true;
  };
  constexpr double kMaxUs = 1e9;  // 1000 s
  uint64_t v;
  while ((c = getopt_long(argc, argv, "s:n:D:t:p:P:l:d:L:u:r:m:h", opts,
                          nullptr)) != -1) {
    switch (c) {
      case 's':
        if (!num(optarg, &a->size)) return false;
        break;
      case 'n':
        if (!num(optarg, &a->iters)) return false;
        break;
      case 'D':
        if (!micros("--duration (seconds)", optarg, 0, kMaxUs / 1e6, true,
                    &a->duration))
          return false;
        break;
      case 't':
        if (!num(optarg, &v) || v == 0 || v > 65536) return false;
        a->tx_depth = v;
        break;
      case 'p':
        if (!num(optarg, &v) || v == 0 || v > 65535) return false;
        a->tcp_port = v;
        break;
      case 'P':
        if (!num(optarg, &v) || v == 0 || v > 65535) return false;
        a->paths = v;
        break;
      case 'l':
        if (!num(optarg, &v) || v == 0 || v > 255) return false;
        a->planes = v;
        break;
      case 'd':
        a->datapath = optarg;
        break;
      case 'L':
        a->local = absl::StrSplit(optarg, ',', absl::SkipEmpty());
        break;
      case 'u':
        if (!num(optarg, &v) || v > 65535) return false;
        a->udp_port = v;
        break;
      case 'r':
        a->routes.push_back(optarg);
        break;
      case 'm':
        if (!num(optarg, &v) || v > 65535) {
          fprintf(stderr, "prism_perf: --mtu must be 0 .. 65535\n");
          return false;
        }
        a->link_mtu = static_cast<uint32_t>(v);
        break;
      case kTxMode:
        a->tx_mode = optarg;
        break;
      case kSocks:
        if (!num(optarg, &v) || v == 0 || v > 64) return false;
        a->sockets_per_plane = v;
        break;
      case kCc:
        a->cc = optarg;
        break;
      case kRate:
        if (!num(optarg, &a->rate_gbps) || a->rate_gbps == 0 ||
            a->rate_gbps > 1'000'000) {  // (x 1e9 must fit in 64 bits)
          fprintf(stderr, "prism_perf: --rate must be 1 .. 1000000 Gbit/s\n");
          return false;
        }
        break;
      case kRto:
        if (!micros("--rto-min", optarg, 0, kMaxUs, false, &a->rto_min_us))
          return false;
        break;
      case kRtoMax:
        if (!micros("--rto-max", optarg, 0, kMaxUs, true, &a->rto_max_us))
          return false;
        break;
      case kBaseRtt:
        if (!micros("--base-rtt", optarg, 0, kMaxUs, true, &a->base_rtt_us))
          return false;
        break;
      case kProbe:
        if (!micros("--probe", optarg, 0, kMaxUs, true, &a->probe_us))
          return false;
        break;
      case kAckDelay:
        if (!micros("--ack-delay", optarg, 0, kMaxUs, false, &a->ack_delay_us))
          return false;
        break;
      case kImm:
        a->immediate = true;
        break;
      case kBusy:
        a->busy_poll = true;
        break;
      case kZero:
        a->zero_checksum = true;
        break;
      case kGso:
        a->gso = true;
        break;
      case kNoGro:
        a->gro = false;
        break;
      case kNoGso:
        a->gso = false;
        break;
      case kInPlace:
        a->in_place = true;
        break;
      case kNoTlp:
        a->tlp = false;
        break;
      case kSpin:
        if (!absl::SimpleAtoi(optarg, &a->spin_us) || a->spin_us < -1 ||
            a->spin_us > 1000000)
          return false;
        break;
      case kWait:
        if (!absl::SimpleAtoi(optarg, &a->wait_us) || a->wait_us < 1 ||
            a->wait_us > 1000000)
          return false;
        break;
      case kRemoteSlots:
        if (!num(optarg, &v) || v > 65536) return false;
        a->remote_slots = v;
        break;
      case kCpu:
        if (!num(optarg, &v) || v > 1023) return false;
        a->cpu = static_cast<int>(v);
        break;
      case kDevice:
        a->device = optarg;
        break;
      case kQps:  // (65537 was read as 1; the datapath takes 1 .. 1024)
        if (!num(optarg, &v) || v == 0 || v > 1024) {
          fprintf(stderr, "prism_perf: --qps must be 1 .. 1024\n");
          return false;
        }
        a->qps = static_cast<uint16_t>(v);
        break;
      case kMtuPayload:  // (0: the datapath's maximum)
        if (!num(optarg, &v) || v > UINT32_MAX) {
          fprintf(stderr, "prism_perf: --mtu-payload must be 0 .. 2^32-1\n");
          return false;
        }
        a->mtu_payload = static_cast<uint32_t>(v);
        break;
      case kBind:
        a->bind = optarg;
        break;
      case kPathStats:
        a->path_stats = true;
        break;
      case kJson:
        a->json = true;
        break;
      default:
        Usage();
        return false;
    }
  }
  if (optind < argc) a->host = argv[optind++];
  if (optind < argc) {
    Usage();
    return false;
  }
  if (a->size == 0 || a->size > (1ull << 32) - 1) {
    fprintf(stderr, "prism_perf: size must be 1 .. 2^32-1\n");
    return false;
  }
  if (a->local.empty()) a->local = {"::1"};
  if (a->planes == 0) a->planes = a->local.size();
  return true;
}

EndpointOptions MakeOptions(const Args& a) {
  EndpointOptions o;
  o.datapath = a.datapath;
  o.local_addrs = a.local;
  o.port = a.udp_port;
  o.tx_mode = a.tx_mode;
  o.sockets_per_plane = a.sockets_per_plane;
  o.link_mtu = a.link_mtu;
  o.routes = a.routes;
  o.accept_zero_checksum = a.zero_checksum;
  o.gso = a.gso;
  o.gro = a.gro;
  o.rx_in_place = a.in_place;
  o.cpu = a.cpu;
  o.idle_spin_us = a.spin_us;
  o.busy_poll = a.busy_poll;
  o.device = a.device;
  o.verbs_qps = a.qps;
  o.mtu_payload = a.mtu_payload;
  o.connection.num_paths = a.paths;
  o.connection.num_planes = a.planes;
  o.connection.congestion = a.cc;
  o.connection.tail_loss_probe = a.tlp;
  o.connection.link_rate_bps = a.rate_gbps * 1'000'000'000ull;
  o.connection.probe_interval =
      static_cast<Time>(a.probe_us * prism::kMicrosecond);
  o.connection.base_rtt =
      static_cast<Time>(a.base_rtt_us * prism::kMicrosecond);
  o.connection.ack_delay =
      static_cast<Time>(a.ack_delay_us * prism::kMicrosecond);
  if (a.rto_min_us > 0)
    o.connection.rto_min =
        static_cast<Time>(a.rto_min_us * prism::kMicrosecond);
  else
    o.connection.rto_min = 4 * prism::kMillisecond;
  // The ceiling must sit well above the RTTs the floor was sized for: with
  // the engine's default (100 ms then, 4 ms now) and --rto-min 20000 under
  // TCG soft-RoCE (RTTs of 50-100 ms) the backed-off RTO stopped growing
  // below the RTT, so it follows the floor: at least 8 x rto_min.
  if (a.rto_max_us > 0)
    o.connection.rto_max =
        static_cast<Time>(a.rto_max_us * prism::kMicrosecond);
  else
    o.connection.rto_max =
        std::max(o.connection.rto_max, 8 * o.connection.rto_min);
  return o;
}

// --- TCP side channel: newline-terminated "key=value ..." lines ----------

class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel() {
    if (fd_ >= 0) close(fd_);
  }
  bool Send(const std::string& line) {
    std::string s = line + "\n";
    size_t off = 0;
    while (off < s.size()) {
      ssize_t r = write(fd_, s.data() + off, s.size() - off);
      if (r <= 0) return false;
      off += r;
    }
    return true;
  }
  // Reads one line into key/value pairs; false on EOF or error.
  bool Recv(std::map<std::string, std::string>* kv) {
    std::string line;
    char ch;
    for (;;) {
      ssize_t r = read(fd_, &ch, 1);
      if (r <= 0) return false;
      if (ch == '\n') break;
      line.push_back(ch);
      if (line.size() > 4096) return false;
    }
    kv->clear();
    for (absl::string_view f : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p =
          absl::StrSplit(f, absl::MaxSplits('=', 1));
      (*kv)[p.first] = p.second;
    }
    return true;
  }

 private:
  int fd_;
};

int ListenAndAccept(const std::string& bind_addr, uint16_t port) {
  int ls = socket(AF_INET6, SOCK_STREAM, 0);
  if (ls < 0) return -1;
  int one = 1, zero = 0;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_port = htons(port);
  if (inet_pton(AF_INET6, bind_addr.c_str(), &sa.sin6_addr) != 1) {
    fprintf(stderr, "prism_perf: bad --bind address '%s'\n", bind_addr.c_str());
    close(ls);
    return -1;
  }
  if (bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      listen(ls, 1) != 0) {
    fprintf(stderr, "prism_perf: listen on port %u: %s\n", port,
            strerror(errno));
    close(ls);
    return -1;
  }
  int fd = accept(ls, nullptr, nullptr);
  close(ls);
  if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

int ConnectTo(const std::string& host, uint16_t port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']')
    h = h.substr(1, h.size() - 2);
  if (getaddrinfo(h.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    fprintf(stderr, "prism_perf: cannot resolve '%s'\n", host.c_str());
    return -1;
  }
  int fd = -1;
  // Retry for a few seconds so scripts may start client and server together.
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
      close(fd);
      fd = -1;
    }
    if (fd < 0) usleep(50000);
  }
  freeaddrinfo(res);
  if (fd < 0) {
    fprintf(stderr, "prism_perf: cannot connect to %s port %u\n", host.c_str(),
            port);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// --- measurement ---------------------------------------------------------

struct Result {
  uint64_t bytes = 0;
  uint64_t iterations = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // this process, every thread, over `seconds`
  double peak_gbps = 0;
  double avg_gbps = 0;
  double mpps = 0;
  uint64_t errors = 0;
};

double CpuSeconds();

// Posts WRITEs from `ep` on `conn` into the remote buffer and measures.
Result RunClient(Endpoint& ep, ConnId conn, const Args& a, uint64_t raddr,
                 uint32_t rkey, uint64_t rlen) {
  Result r;
  const uint64_t slots = std::max<uint64_t>(1, rlen / a.size);
  std::vector<uint8_t> buf(a.size * std::min<uint64_t>(slots, 4));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i);
  auto mr = ep.RegisterMemory(buf.data(), buf.size(), prism::kAccessLocal);
  if (!mr.ok()) {
    fprintf(stderr, "prism_perf: register: %s\n",
            mr.status().ToString().c_str());
    r.errors = 1;
    return r;
  }
  const uint64_t lslots = buf.size() / a.size;
  const double cpu_start = CpuSeconds();
  const Time start = Endpoint::Now();
  const Time end = a.duration > 0
                       ? start + static_cast<Time>(a.duration * prism::kSecond)
                       : prism::kTimeInfinite;
  uint64_t posted = 0, completed = 0, outstanding = 0;
  // Peak: best rate over windows of ~1/20 of the run (>= 1 ms).
  Time win_start = start;
  Time last_progress = start;  // last completion (or the start)
  uint64_t win_bytes = 0;
  const Time window =
      a.duration > 0
          ? std::max<Time>(prism::kMillisecond,
                           static_cast<Time>(a.duration * prism::kSecond / 20))
          : 5 * prism::kMillisecond;
  Completion c[64];
  bool stop = false;
  while (!stop || outstanding > 0) {
    const Time now = Endpoint::Now();
    if (!stop) {
      if ((a.duration > 0 && now >= end) ||
          (a.duration == 0 && posted >= a.iters))
        stop = true;
    }
    while (!stop && outstanding < a.tx_depth &&
           (a.duration > 0 || posted < a.iters)) {
      prism::WriteRequest w;
      w.wr_id = posted;
      w.local_addr = buf.data() + (posted % lslots) * a.size;
      w.length = a.size;
      w.lkey = mr->lkey;
      w.remote_addr = raddr + (posted % slots) * a.size;
      w.rkey = rkey;
      w.has_immediate = a.immediate;
      w.immediate = static_cast<uint32_t>(posted);
      if (!ep.PostWrite(conn, w).ok()) break;
      ++posted;
      ++outstanding;
    }
    Time wait = a.wait_us * prism::kMicrosecond;
    if (!stop && end != prism::kTimeInfinite)
      wait = std::max<Time>(prism::kMicrosecond, std::min(wait, end - now));
    size_t n = ep.WaitCompletions(c, 64, wait);
    for (size_t i = 0; i < n; ++i) {
      if (c[i].type != prism::CompletionType::kWrite) continue;
      --outstanding;
      if (c[i].status != absl::StatusCode::kOk) {
        ++r.errors;
        if (r.errors == 1)
          fprintf(stderr, "prism_perf: write %llu failed: %s\n",
                  static_cast<unsigned long long>(c[i].wr_id),
                  absl::StatusCodeToString(c[i].status).c_str());
        continue;
      }
      ++completed;
      win_bytes += a.size;
    }
    const Time t = Endpoint::Now();
    if (n > 0) last_progress = t;
    if (t - win_start >= window) {
      const double g = win_bytes * 8.0 / ((t - win_start) / 1e3);  // Gb/s
      r.peak_gbps = std::max(r.peak_gbps, g);
      win_start = t;
      win_bytes = 0;
    }
    if (r.errors > 0 && stop) break;
    if (r.errors > 0) stop = true;
    // A stuck transfer would hang: give up after 30 s without a completion.
    if (n == 0 && t - last_progress > 30 * prism::kSecond) {
      fprintf(stderr, "prism_perf: no progress, giving up (%llu outstanding)\n",
              static_cast<unsigned long long>(outstanding));
      r.errors += outstanding;
      break;
    }
  }
  const Time finish = Endpoint::Now();
  r.cpu_seconds = CpuSeconds() - cpu_start;
  r.iterations = completed;
  r.bytes = completed * a.size;
  r.seconds = (finish - start) / 1e12;
  r.avg_gbps = r.seconds > 0 ? r.bytes * 8 / r.seconds / 1e9 : 0;
  r.mpps = r.seconds > 0 ? completed / r.seconds / 1e6 : 0;
  if (r.peak_gbps < r.avg_gbps) r.peak_gbps = r.avg_gbps;
  return r;
}

void PrintHeader(const Args& a, Endpoint& ep, const char* role) {
  if (a.json) return;
  const char* line =
      "---------------------------------------------------------------------"
      "------------------";
  printf("%s\n", line);
  printf("                    Prism RDMA_Write BW Test (%s)\n", role);
  printf(" Datapath        : %-16s Transport type : Prism multipath\n",
         a.datapath.c_str());
  printf(" Paths           : %-16u Planes         : %u\n", a.paths, a.planes);
  printf(" TX depth        : %-16u Congestion     : %s\n", a.tx_depth,
         a.cc.c_str());
  printf(" Mtu             : %u[B] payload / %s link\n", ep.mtu_payload(),
         a.link_mtu ? absl::StrCat(a.link_mtu, "[B]").c_str() : "auto");
  printf(" Local addresses : %s\n", absl::StrJoin(a.local, ",").c_str());
  if (!a.routes.empty())
    printf(" Routes          : %zu (%s ...)\n", a.routes.size(),
           a.routes[0].c_str());
  printf("%s\n", line);
}

// CPU seconds (user + system) of this process so far, every thread.
double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Involuntary context switches of this process so far (every thread).
long Nivcsw() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_nivcsw;
}

// Voluntary context switches of this process (every thread blocking: a
// futex, epoll or poll sleep).
long Nvcsw() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_nvcsw;
}

// Time this process's live threads spent runnable but waiting for a CPU
// (/proc/self/task/*/schedstat, second field, ns), in ms; -1 if unknown.
double RunDelayMs() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  unsigned long long total = 0;
  bool any = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    FILE* f = fopen(
        absl::StrCat("/proc/self/task/", e->d_name, "/schedstat").c_str(), "r");
    if (f == nullptr) continue;
    unsigned long long run = 0, wait = 0;
    if (fscanf(f, "%llu %llu", &run, &wait) == 2) {
      total += wait;
      any = true;
    }
    fclose(f);
  }
  closedir(d);
  return any ? total / 1e6 : -1;
}

// `peer`: the other side's endpoint when it is in this process (--datapath
// loopback), for its receive-side counters (JSON "peer_..."); else nullptr.
void PrintResult(const Args& a, const Result& r, Endpoint* ep, ConnId conn,
                 Endpoint* peer = nullptr) {
  prism::ConnectionStats cs;
  if (ep) {
    auto s = ep->connection_stats(conn);
    if (s.ok()) cs = *s;
  }
  prism::DatapathStats ds;
  if (ep) ds = ep->datapath_stats();
  prism::EngineStats es;
  if (ep) es = ep->stats();
  if (a.json) {
    printf(
        "{\"bytes\": %llu, \"seconds\": %.6f, \"gbps\": %.4f, "
        "\"peak_gbps\": %.4f, \"MBps\": %.2f, \"mpps\": %.6f, "
        "\"msg_size\": %llu, \"iterations\": %llu, \"tx_depth\": %u, "
        "\"paths\": %u, \"planes\": %u, \"datapath\": \"%s\", "
        "\"errors\": %llu, \"retransmitted_packets\": %llu, "
        "\"rto_events\": %llu, \"paths_retired\": %llu, "
        "\"paths_restored\": %llu, \"paths_active\": %u, "
        "\"mtu_payload\": %u, \"cpu_seconds\": %.3f, "
        "\"tail_loss_probes\": %llu, \"sacks_received\": %llu, "
        "\"tx_sacks\": %llu, \"cwnd_bytes\": %llu, \"srtt_us\": %.1f, "
        "\"path_timeouts\": %llu, \"loop_iterations\": %llu, "
        "\"loop_sleeps\": %llu, \"run_cpu_seconds\": %.3f",
        static_cast<unsigned long long>(r.bytes), r.seconds, r.avg_gbps,
        r.peak_gbps, r.avg_gbps * 1e3 / 8, r.mpps,
        static_cast<unsigned long long>(a.size),
        static_cast<unsigned long long>(r.iterations), a.tx_depth, a.paths,
        a.planes, a.datapath.c_str(), static_cast<unsigned long long>(r.errors),
        static_cast<unsigned long long>(cs.retransmitted_packets),
        static_cast<unsigned long long>(cs.rto_events),
        static_cast<unsigned long long>(cs.paths_retired),
        static_cast<unsigned long long>(cs.paths_restored), cs.paths_active,
        ep ? ep->mtu_payload() : 0, CpuSeconds(),
        static_cast<unsigned long long>(cs.tail_loss_probes),
        static_cast<unsigned long long>(cs.sacks_received),
        static_cast<unsigned long long>(cs.tx_sacks),
        static_cast<unsigned long long>(cs.cwnd_bytes), cs.srtt / 1e6,
        static_cast<unsigned long long>(cs.path_timeouts),
        static_cast<unsigned long long>(ds.loop_iterations),
        static_cast<unsigned long long>(ds.loop_sleeps), r.cpu_seconds);
    if (a.path_stats && ep) {
      printf(", \"path_stats\": [");
      for (uint32_t p = 0; p < a.paths; ++p) {
        auto ps = ep->path_stats(conn, p);
        if (!ps.ok()) break;
        printf(
            "%s{\"path\": %u, \"tx_packets\": %llu, \"acked\": %llu, "
            "\"lost\": %llu, \"retired\": %llu, \"restored\": %llu, "
            "\"state\": %u}",
            p ? ", " : "", p, static_cast<unsigned long long>(ps->tx_packets),
            static_cast<unsigned long long>(ps->acked_packets),
            static_cast<unsigned long long>(ps->lost_packets),
            static_cast<unsigned long long>(ps->retired),
            static_cast<unsigned long long>(ps->restored), ps->state);
      }
      printf("]");
    }
    // Completion-queue backpressure (docs/runtime.md, "When the
    // application does not poll"): this side's connection as a sender
    // (NACK NO_BUFFER received, RNR probes, rnr_timeout failures), its
    // Endpoint's refused posts, and its engine as a receiver (packets
    // answered NO_BUFFER, deliveries held).
    printf(
        ", \"rnr_nacks_received\": %llu, \"rnr_probes_sent\": %llu, "
        "\"rnr_timeouts\": %llu, \"writes_refused_cq_full\": %llu, "
        "\"rx_drop_no_buffer\": %llu, \"cq_delivery_holds\": %llu",
        static_cast<unsigned long long>(cs.rnr_nacks_received),
        static_cast<unsigned long long>(cs.rnr_probes_sent),
        static_cast<unsigned long long>(cs.rnr_timeouts),
        static_cast<unsigned long long>(ds.writes_refused_cq_full),
        static_cast<unsigned long long>(es.rx_drop_no_buffer),
        static_cast<unsigned long long>(es.cq_delivery_holds));
    if (peer != nullptr) {
      const prism::EngineStats pes = peer->stats();
      printf(
          ", \"peer_rx_drop_no_buffer\": %llu, "
          "\"peer_cq_delivery_holds\": %llu",
          static_cast<unsigned long long>(pes.rx_drop_no_buffer),
          static_cast<unsigned long long>(pes.cq_delivery_holds));
    }
    // The datapath's and the engine's own counters (kernel drops, back-
    // pressure, RTO and TLP detail), as text, for diagnosing a bad run.
    printf(
        ", \"dp_tx_packets\": %llu, \"dp_rx_packets\": %llu, "
        "\"dp_tx_backpressure\": %llu, \"dp_tx_errors\": %llu, "
        "\"dp_drops\": %llu, \"loop_stalls\": %llu, "
        "\"loop_stall_ms\": %.3f, \"loop_max_gap_ms\": %.3f, "
        "\"loop_wakeups\": %llu, \"app_wakeups\": %llu, "
        "\"nvcsw\": %ld, \"nivcsw\": %ld, \"run_delay_ms\": %.3f, "
        "\"datapath_detail\": \"%s\", "
        "\"engine\": \"%s\"",
        static_cast<unsigned long long>(ds.tx_packets),
        static_cast<unsigned long long>(ds.rx_packets),
        static_cast<unsigned long long>(ds.tx_backpressure),
        static_cast<unsigned long long>(ds.tx_errors),
        static_cast<unsigned long long>(ds.drops),
        static_cast<unsigned long long>(ds.loop_stalls),
        ds.loop_stall_time / 1e9, ds.loop_max_gap / 1e9,
        static_cast<unsigned long long>(ds.loop_wakeups),
        static_cast<unsigned long long>(ds.app_wakeups), Nvcsw(), Nivcsw(),
        RunDelayMs(), ds.detail.c_str(), ep ? es.ToString().c_str() : "");
    printf("}\n");
    return;
  }
  printf(
      " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   "
      "MsgRate[Mpps]    BW average[MB/sec]\n");
  printf(" %-10llu %-14llu %-18.2f %-20.2f %-16.6f %.2f\n",
         static_cast<unsigned long long>(a.size),
         static_cast<unsigned long long>(r.iterations), r.peak_gbps, r.avg_gbps,
         r.mpps, r.avg_gbps * 1e3 / 8);
  printf(
      "-----------------------------------------------------------------------"
      "----------------\n");
  if (ep) {
    printf(
        " retransmitted %llu pkts, rto %llu, paths retired %llu, restored "
        "%llu, active %u, srtt %.1f us, tlp %llu, cwnd %llu B\n",
        static_cast<unsigned long long>(cs.retransmitted_packets),
        static_cast<unsigned long long>(cs.rto_events),
        static_cast<unsigned long long>(cs.paths_retired),
        static_cast<unsigned long long>(cs.paths_restored), cs.paths_active,
        cs.srtt / 1e6, static_cast<unsigned long long>(cs.tail_loss_probes),
        static_cast<unsigned long long>(cs.cwnd_bytes));
  }
  if (r.errors)
    printf(" errors: %llu\n", static_cast<unsigned long long>(r.errors));
  if (a.path_stats && ep) {
    printf(" %-6s %-12s %-12s %-10s %-8s %-9s %-6s %s\n", "path", "tx_pkts",
           "acked", "lost", "retired", "restored", "state", "srtt[us]");
    for (uint32_t p = 0; p < a.paths; ++p) {
      auto ps = ep->path_stats(conn, p);
      if (!ps.ok()) break;
      printf(" %-6u %-12llu %-12llu %-10llu %-8llu %-9llu %-6u %.1f\n", p,
             static_cast<unsigned long long>(ps->tx_packets),
             static_cast<unsigned long long>(ps->acked_packets),
             static_cast<unsigned long long>(ps->lost_packets),
             static_cast<unsigned long long>(ps->retired),
             static_cast<unsigned long long>(ps->restored), ps->state,
             ps->srtt / 1e6);
    }
  }
  if (ep)
    printf(" datapath: %s loop_iterations=%llu loop_sleeps=%llu\n",
           ds.detail.c_str(),
           static_cast<unsigned long long>(ds.loop_iterations),
           static_cast<unsigned long long>(ds.loop_sleeps));
}

// The receiving side's completions (kRecvImmediate with --immediate, and
// any failure) are never looked at, but they must be taken out of the
// endpoint's completion queue or it grows for the whole run. A thread
// drains them (sleeping in WaitCompletions) and counts them.
class CompletionDrain {
 public:
  explicit CompletionDrain(Endpoint* ep) : ep_(ep), t_([this] { Run(); }) {}
  ~CompletionDrain() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (t_.joinable()) t_.join();
  }
  uint64_t received() const { return received_.load(); }
  uint64_t errors() const { return errors_.load(); }

 private:
  void Run() {
    Completion c[64];
    while (!stop_.load()) {
      const size_t n = ep_->WaitCompletions(c, 64, 10 * prism::kMillisecond);
      Count(c, n);
    }
    for (size_t n; (n = ep_->PollCompletions(c, 64)) > 0;) Count(c, n);
  }
  void Count(const Completion* c, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (c[i].status != absl::StatusCode::kOk) {
        errors_.fetch_add(1);
      } else if (c[i].type == prism::CompletionType::kRecvImmediate) {
        received_.fetch_add(1);
      }
    }
  }

  Endpoint* ep_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> received_{0}, errors_{0};
  std::thread t_;
};

uint64_t RemoteBufferBytes(const Args& a) {
  // Enough slots for tx_depth messages, capped at 256 MiB (slots are reused,
  // as ib_write_bw does).
  const uint64_t cap = 256ull << 20;
  const uint64_t want =
      a.size * (a.remote_slots > 0 ? a.remote_slots
                                   : std::min<uint64_t>(a.tx_depth, 64));
  return std::max<uint64_t>(a.size, std::min(want, std::max(cap, a.size)));
}

int RunLoopback(const Args& a) {
  EndpointOptions o = MakeOptions(a);
  auto srv = Endpoint::Create(o);
  auto cli = Endpoint::Create(o);
  if (!srv.ok() || !cli.ok()) {
    fprintf(stderr, "prism_perf: %s\n",
            (!srv.ok() ? srv.status() : cli.status()).ToString().c_str());
    return 1;
  }
  auto cs = (*srv)->CreateConnection();
  auto cc = (*cli)->CreateConnection();
  if (!cs.ok() || !cc.ok()) {
    fprintf(stderr, "prism_perf: connection: %s\n",
            (!cs.ok() ? cs.status() : cc.status()).ToString().c_str());
    return 1;
  }
  absl::Status s = (*srv)->Connect(*cs, *(*cli)->LocalInfo(*cc));
  if (s.ok()) s = (*cli)->Connect(*cc, *(*srv)->LocalInfo(*cs));
  if (!s.ok()) {
    fprintf(stderr, "prism_perf: connect: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<uint8_t> rbuf(RemoteBufferBytes(a));
  auto mr = (*srv)->RegisterMemory(rbuf.data(), rbuf.size(),
                                   prism::kAccessRemoteWrite);
  if (!mr.ok()) return 1;
  PrintHeader(a, **cli, "loopback, in-process");
  CompletionDrain drain(srv->get());
  Result r = RunClient(**cli, *cc, a, mr->addr, mr->rkey, mr->length);
  drain.Stop();
  PrintResult(a, r, cli->get(), *cc, srv->get());
  if (!a.json) {
    printf(" server completions: %llu received, %llu failed\n",
           static_cast<unsigned long long>(drain.received()),
           static_cast<unsigned long long>(drain.errors()));
  }
  return r.errors ? 2 : 0;
}

int RunServer(const Args& a) {
  EndpointOptions o = MakeOptions(a);
  auto ep = Endpoint::Create(o);
  if (!ep.ok()) {
    fprintf(stderr, "prism_perf: %s\n", ep.status().ToString().c_str());
    return 1;
  }
  auto conn = (*ep)->CreateConnection();
  if (!conn.ok()) return 1;
  std::vector<uint8_t> rbuf(RemoteBufferBytes(a));
  auto mr = (*ep)->RegisterMemory(rbuf.data(), rbuf.size(),
                                  prism::kAccessRemoteWrite);
  if (!mr.ok()) return 1;
  if (!a.json) printf(" Waiting for client on TCP port %u ...\n", a.tcp_port);
  fflush(stdout);
  int fd = ListenAndAccept(a.bind, a.tcp_port);
  if (fd < 0) return 1;
  Channel ch(fd);
  std::map<std::string, std::string> kv;
  if (!ch.Recv(&kv) || kv["blob"].empty()) {
    fprintf(stderr, "prism_perf: bad hello from client\n");
    return 1;
  }
  auto remote = prism::ConnectionBlob::FromHex(kv["blob"]);
  absl::Status s =
      remote.ok() ? (*ep)->Connect(*conn, *remote) : remote.status();
  auto mine = (*ep)->LocalInfo(*conn);
  if (!s.ok() || !mine.ok()) {
    fprintf(stderr, "prism_perf: connect: %s\n", s.ToString().c_str());
    ch.Send("error=connect");
    return 1;
  }
  CompletionDrain drain(ep->get());
  ch.Send(absl::StrCat("blob=", mine->ToHex(), " addr=", mr->addr,
                       " rkey=", mr->rkey, " len=", mr->length));
  Args shown = a;
  uint64_t v;
  if (absl::SimpleAtoi(kv["size"], &v)) shown.size = v;
  if (absl::SimpleAtoi(kv["depth"], &v)) shown.tx_depth = v;
  PrintHeader(shown, **ep, "server");
  // Wait for the client's result line.
  if (!ch.Recv(&kv)) {
    fprintf(stderr, "prism_perf: client went away\n");
    return 1;
  }
  Result r;
  absl::SimpleAtoi(kv["bytes"], &r.bytes);
  absl::SimpleAtoi(kv["iters"], &r.iterations);
  absl::SimpleAtod(kv["seconds"], &r.seconds);
  absl::SimpleAtod(kv["peak"], &r.peak_gbps);
  absl::SimpleAtod(kv["gbps"], &r.avg_gbps);
  absl::SimpleAtod(kv["mpps"], &r.mpps);
  absl::SimpleAtoi(kv["errors"], &r.errors);
  drain.Stop();
  PrintResult(shown, r, ep->get(), *conn);
  prism::EngineStats es = (*ep)->stats();
  if (!a.json) {
    printf(" server engine: %s\n", es.ToString().c_str());
    printf(" server completions: %llu received, %llu failed\n",
           static_cast<unsigned long long>(drain.received()),
           static_cast<unsigned long long>(drain.errors()));
  }
  ch.Send("bye=1");
  return r.errors ? 2 : 0;
}

int RunClientMain(const Args& a) {
  EndpointOptions o = MakeOptions(a);
  auto ep = Endpoint::Create(o);
  if (!ep.ok()) {
    fprintf(stderr, "prism_perf: %s\n", ep.status().ToString().c_str());
    return 1;
  }
  auto conn = (*ep)->CreateConnection();
  if (!conn.ok()) return 1;
  auto mine = (*ep)->LocalInfo(*conn);
  if (!mine.ok()) {
    fprintf(stderr, "prism_perf: %s\n", mine.status().ToString().c_str());
    return 1;
  }
  int fd = ConnectTo(a.host, a.tcp_port);
  if (fd < 0) return 1;
  Channel ch(fd);
  ch.Send(absl::StrCat("blob=", mine->ToHex(), " size=", a.size,
                       " depth=", a.tx_depth));
  std::map<std::string, std::string> kv;
  uint64_t raddr = 0, rlen = 0;
  uint32_t rkey = 0;
  if (!ch.Recv(&kv) || !absl::SimpleAtoi(kv["addr"], &raddr) ||
      !absl::SimpleAtoi(kv["rkey"], &rkey) ||
      !absl::SimpleAtoi(kv["len"], &rlen)) {
    fprintf(stderr, "prism_perf: bad reply from server\n");
    return 1;
  }
  auto remote = prism::ConnectionBlob::FromHex(kv["blob"]);
  absl::Status s =
      remote.ok() ? (*ep)->Connect(*conn, *remote) : remote.status();
  if (!s.ok()) {
    fprintf(stderr, "prism_perf: connect: %s\n", s.ToString().c_str());
    return 1;
  }
  PrintHeader(a, **ep, "client");
  Result r = RunClient(**ep, *conn, a, raddr, rkey, rlen);
  ch.Send(absl::StrFormat(
      "bytes=%d iters=%d seconds=%.6f peak=%.4f gbps=%.4f mpps=%.6f errors=%d",
      r.bytes, r.iterations, r.seconds, r.peak_gbps, r.avg_gbps, r.mpps,
      r.errors));
  PrintResult(a, r, ep->get(), *conn);
  ch.Recv(&kv);  // wait for the server to print before tearing down
  return r.errors ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) {
    fprintf(stderr,
            "prism_perf: invalid command line (a value malformed or out of "
            "range; see --help)\n");
    return 1;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (a.datapath == "loopback") return RunLoopback(a);
  return a.host.empty() ? RunServer(a) : RunClientMain(a);
}
