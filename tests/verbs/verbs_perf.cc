// verbs_perf: Prism WRITE throughput over the verbs datapath, for comparison
// with perftest's ib_write_bw on the same device (tests/verbs/compare_bw.sh).
//
//   verbs_perf [--device D] [--size BYTES] [--count N] [--qps Q]
//              [--paths P] [--chunk BYTES] [--depth OUTSTANDING] [--mode uc|rc]
//
// Forks a receiver process; the two exchange PeerInfo, ConnectionInfo and the
// target region over a socketpair, then the sender keeps `depth` WRITEs of
// `size` bytes in flight until `count` completed, sprayed by the engine over
// `paths` paths on `qps` data QPs. Prints "METRIC verbs_perf_MBps <x>"
// (MB = 10^6 bytes, as ib_write_bw reports) and the datapath counters.
// Exit 0 when every WRITE completed and the receiver saw every one.
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/verbs/verbs_harness.h"

namespace prism::verbs {
namespace {

using testing::NowPs;
using testing::Side;

struct Args {
  std::string device;
  uint64_t size = 65536;
  uint64_t count = 2000;
  uint16_t qps = 8;
  uint16_t paths = 8;
  uint32_t chunk = 4096;
  uint32_t depth = 128;
  DataQpMode mode = DataQpMode::kAuto;
};

struct Hello {  // exchanged raw over the socketpair (same binary, same host)
  ConnectionInfo info;
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t peer_len = 0;
  uint8_t peer[512] = {};
};

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = write(fd, c, n);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = read(fd, c, n);
    if (k <= 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

#define DIE_IF(cond, ...)              \
  do {                                 \
    if (cond) {                        \
      fprintf(stderr, "verbs_perf: "); \
      fprintf(stderr, __VA_ARGS__);    \
      fprintf(stderr, "\n");           \
      return 1;                        \
    }                                  \
  } while (0)

// CPU seconds (user + system) of this process so far.
double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int Run(const Args& a, bool sender, int fd) {
  VerbsOptions vo;
  vo.device = a.device;
  vo.num_qps = a.qps;
  vo.mtu_payload = a.chunk;
  vo.mode = a.mode;
  auto s = Side::Create(vo, sender ? 1 : 2);
  DIE_IF(!s.ok(), "%s", std::string(s.status().message()).c_str());
  Side& me = **s;
  ConnectionOptions co = testing::SlowLinkOptions(a.paths);
  co.congestion = "fixed";
  // A window (1.5 x BDP) that covers `depth` WRITEs even at the
  // 10-100 ms RTTs of soft-RoCE under TCG, as ib_write_bw's tx depth does.
  co.link_rate_bps = 100'000'000'000ull;
  co.base_rtt = 2 * kMillisecond;
  co.rto_min = 100 * kMillisecond;
  co.rto_max = 2 * kSecond;
  co.max_outstanding_messages = 4096;
  DIE_IF(!me.Open(co).ok(), "open failed");
  const uint64_t bytes =
      a.size * (sender ? std::min<uint64_t>(a.count, a.depth) : a.depth);
  std::vector<uint8_t> buf(bytes, sender ? 0x3C : 0);
  auto mr = me.Register(buf.data(), buf.size(),
                        sender ? kAccessLocal : kAccessRemoteWrite);
  DIE_IF(!mr.ok(), "%s", std::string(mr.status().message()).c_str());
  Hello mine, theirs;
  mine.info = me.engine->LocalInfo(me.conn);
  mine.addr = mr->addr;
  mine.rkey = mr->rkey;
  auto pi = me.dp->LocalInfo(me.peer);
  DIE_IF(!pi.ok(), "local info");
  const std::string enc = EncodePeerInfo(*pi);
  DIE_IF(enc.size() > sizeof(mine.peer), "too many QPs");
  mine.peer_len = static_cast<uint32_t>(enc.size());
  memcpy(mine.peer, enc.data(), enc.size());
  DIE_IF(!WriteAll(fd, &mine, sizeof(mine)) ||
             !ReadAll(fd, &theirs, sizeof(theirs)),
         "exchange failed");
  auto rp = DecodePeerInfo(
      std::string(reinterpret_cast<char*>(theirs.peer), theirs.peer_len));
  DIE_IF(!rp.ok(), "bad peer info");
  absl::Status st = me.dp->ConnectPeer(me.peer, *rp);
  DIE_IF(!st.ok(), "%s", std::string(st.message()).c_str());
  st = me.engine->Connect(me.conn, theirs.info);
  DIE_IF(!st.ok(), "%s", std::string(st.message()).c_str());
  // Barrier: both sides connected (region adverts are on their way).
  char go = 1;
  DIE_IF(!WriteAll(fd, &go, 1) || !ReadAll(fd, &go, 1), "barrier");
  const Time guard = 300 * kSecond;
  const Time t_start = NowPs();
  if (!sender) {
    uint64_t got = 0;
    while (got < a.count) {
      me.PumpOrSleep();
      for (const Completion& c : me.completions) {
        got += c.type == CompletionType::kRecvImmediate;
      }
      me.completions.clear();
      DIE_IF(NowPs() - t_start > guard, "receiver: hang guard (%lu/%lu)",
             static_cast<unsigned long>(got),
             static_cast<unsigned long>(a.count));
    }
    // Keep acknowledging until the sender says it is done.
    for (;;) {
      me.PumpOrSleep();
      char done;
      if (recv(fd, &done, 1, MSG_DONTWAIT) == 1) break;
      DIE_IF(NowPs() - t_start > guard, "receiver: no end");
    }
    printf("receiver: %s\n", me.dp->stats().ToString().c_str());
    return 0;
  }
  // Warm-up pumps so region adverts arrive before the clock starts.
  for (int i = 0; i < 2000; ++i) me.Pump();
  uint64_t posted = 0, completed = 0;
  const double cpu0 = CpuSeconds();
  const Time t0 = NowPs();
  while (completed < a.count) {
    while (posted < a.count && posted - completed < a.depth) {
      const uint64_t slot = posted % a.depth;
      WriteRequest w;
      w.wr_id = posted;
      w.local_addr =
          buf.data() +
          (slot % std::max<uint64_t>(1, buf.size() / a.size)) * a.size;
      w.length = a.size;
      w.lkey = mr->lkey;
      w.remote_addr = theirs.addr + slot * a.size;
      w.rkey = theirs.rkey;
      w.has_immediate = true;
      w.immediate = static_cast<uint32_t>(posted);
      if (!me.engine->PostWrite(NowPs(), me.conn, w).ok()) break;
      ++posted;
    }
    me.PumpOrSleep();
    for (const Completion& c : me.completions) {
      if (c.type == CompletionType::kWrite) {
        DIE_IF(c.status != absl::StatusCode::kOk, "write failed: %d",
               static_cast<int>(c.status));
        ++completed;
      } else if (c.type == CompletionType::kConnectionError) {
        DIE_IF(true, "connection error");
      }
    }
    me.completions.clear();
    DIE_IF(NowPs() - t0 > guard, "sender: hang guard (%lu/%lu)",
           static_cast<unsigned long>(completed),
           static_cast<unsigned long>(a.count));
  }
  const double secs = static_cast<double>(NowPs() - t0) / kSecond;
  const double cpu = CpuSeconds() - cpu0;
  char done = 1;
  WriteAll(fd, &done, 1);
  const double mbps = static_cast<double>(a.size * a.count) / secs / 1e6;
  auto cs = me.engine->connection_stats(me.conn);
  printf("sender: %s\n", me.dp->stats().ToString().c_str());
  if (cs.ok()) {
    printf("sender engine: retransmitted=%lu rto=%lu\n",
           static_cast<unsigned long>(cs->retransmitted_packets),
           static_cast<unsigned long>(cs->rto_events));
  }
  printf(
      "verbs_perf: %s %lu x %lu B over %u paths / %u %s QPs, chunk %u: %.1f "
      "MB/s (%.2f s)\n",
      me.dp->device_name().c_str(), static_cast<unsigned long>(a.count),
      static_cast<unsigned long>(a.size), a.paths, a.qps,
      DataQpModeName(me.dp->mode()), a.chunk, mbps, secs);
  printf("METRIC verbs_perf_MBps %.1f\n", mbps);
  // The sending process's CPU over the timed transfer (prism_perf --json:
  // run_cpu_seconds, its client process, both threads).
  printf("METRIC verbs_perf_sender_cpu_s %.3f\n", cpu);
  return 0;
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--device")
      a.device = v;
    else if (k == "--size")
      a.size = strtoull(v, nullptr, 10);
    else if (k == "--count")
      a.count = strtoull(v, nullptr, 10);
    else if (k == "--qps")
      a.qps = static_cast<uint16_t>(atoi(v));
    else if (k == "--paths")
      a.paths = static_cast<uint16_t>(atoi(v));
    else if (k == "--chunk")
      a.chunk = static_cast<uint32_t>(atoi(v));
    else if (k == "--depth")
      a.depth = static_cast<uint32_t>(atoi(v));
    else if (k == "--mode")
      a.mode = std::string(v) == "rc" ? DataQpMode::kRc : DataQpMode::kUc;
    else {
      fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (a.size == 0 || a.count == 0 || a.depth == 0 || a.qps == 0 ||
      a.paths == 0) {
    fprintf(stderr, "verbs_perf: sizes and counts must be > 0\n");
    return 2;
  }
  std::string why;
  if (!RdmaAvailable(&why)) {
    fprintf(stderr, "verbs_perf: SKIP: %s\n", why.c_str());
    return 77;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(sv[0]);
    _exit(Run(a, false, sv[1]));
  }
  close(sv[1]);
  const int rc = Run(a, true, sv[0]);
  close(sv[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const int crc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  return rc != 0 ? rc : crc;
}

}  // namespace
}  // namespace prism::verbs

int main(int argc, char** argv) { return prism::verbs::Main(argc, argv); }
