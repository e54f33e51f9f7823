// endpoint_poll_perf: the NCCL proxy's polling model over prism::Endpoint
// directly, without the plugin -- the baseline that isolates the plugin
// layer's cost in tests/nccl/plugin_vs_perf.sh.
//
//   endpoint_poll_perf [size_bytes] [messages] [outstanding]
//
// Two Prism endpoints over the UDP datapath on ::1 in one process, each with
// its loop thread, and two driver threads: the sender keeps `outstanding`
// (<= 32) WRITE-with-immediate of `size_bytes` in flight into the
// receiver's buffer (slot m % outstanding, as nccl_plugin_perf and
// prism_perf do), the receiver counts its immediate completions. Both
// drivers poll PollCompletions and sched_yield() when a poll made no
// progress, exactly as nccl_plugin_perf's driver threads poll the plugin's
// test() (NCCL's proxy thread); prism_perf blocks in WaitCompletions
// instead. So: nccl_plugin_perf minus this = the plugin layer (CTS,
// matching, request bookkeeping, the side channel); this minus prism_perf =
// the polling model.
//
// Same threads as nccl_plugin_perf (2 driver + 2 loop threads), same
// variables for the engine and datapath options, same defaults as the
// plugin: PRISM_PATHS (256), PRISM_LINK_MTU (1500), PRISM_UDP_TX_MODE
// (auto), PRISM_UDP_GSO (1), PRISM_UDP_GRO (1), PRISM_UDP_RX_IN_PLACE (0),
// PRISM_RTO_MIN_US and
// PRISM_PROBE_US (the engine's, 50), PRISM_BASE_RTT_US (100),
// PRISM_SPIN_US (-1), link rate 100 Gb/s; PRISM_NCCL_PERF_IDLE_US=N makes
// both drivers sleep N us instead of sched_yield after a poll that made no
// progress, as it does nccl_plugin_perf's. Prints MB/s at the receiver (from
// its first completion, as nccl_plugin_perf), the process CPU per MB
// (getrusage, all threads) and the two driver threads' CPU per MB.
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "prism/endpoint.h"

namespace {

using prism::Completion;
using prism::CompletionType;
using prism::ConnId;
using prism::Endpoint;
using prism::EndpointOptions;
using prism::Time;

long EnvLong(const char* name, long def) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  const long x = strtol(v, &end, 10);
  if (end == v || *end != '\0') {
    fprintf(stderr, "endpoint_poll_perf: bad %s='%s'\n", name, v);
    exit(2);
  }
  return x;
}

double ThreadCpu() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double ProcessCpu() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

EndpointOptions Options(uint64_t seed) {
  EndpointOptions o;
  o.datapath = "udp";
  o.local_addrs = {"::1"};
  o.port = 0;
  const char* tx = getenv("PRISM_UDP_TX_MODE");
  o.tx_mode = tx != nullptr && *tx != '\0' ? tx : "auto";
  o.link_mtu = static_cast<uint32_t>(EnvLong("PRISM_LINK_MTU", 1500));
  o.gso = EnvLong("PRISM_UDP_GSO", 1) != 0;
  o.gro = EnvLong("PRISM_UDP_GRO", 1) != 0;
  o.rx_in_place = EnvLong("PRISM_UDP_RX_IN_PLACE", 0) != 0;
  o.idle_spin_us = static_cast<int32_t>(EnvLong("PRISM_SPIN_US", -1));
  o.seed = seed;
  o.connection.num_paths = static_cast<uint16_t>(EnvLong("PRISM_PATHS", 256));
  o.connection.num_planes = 1;
  o.connection.base_rtt =
      EnvLong("PRISM_BASE_RTT_US", 100) * prism::kMicrosecond;
  o.connection.link_rate_bps = 100'000'000'000ull;
  if (const long rto = EnvLong("PRISM_RTO_MIN_US", 0); rto > 0) {
    o.connection.rto_min = rto * prism::kMicrosecond;
    o.connection.rto_max =
        std::max(o.connection.rto_max, 8 * o.connection.rto_min);
  }
  if (const long probe = EnvLong("PRISM_PROBE_US", 0); probe > 0) {
    o.connection.probe_interval = probe * prism::kMicrosecond;
  }
  return o;
}

// A poll made no progress: sched_yield, or sleep `idle_us` when > 0.
void Idle(long idle_us) {
  if (idle_us > 0) {
    usleep(static_cast<useconds_t>(idle_us));
  } else {
    sched_yield();
  }
}

int Die(const std::string& what) {
  fprintf(stderr, "endpoint_poll_perf: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t size = argc > 1 ? strtoull(argv[1], nullptr, 0) : 1 << 20;
  const long msgs = argc > 2 ? atol(argv[2]) : 2000;
  int depth = argc > 3 ? atoi(argv[3]) : 32;
  if (depth < 1 || depth > 32) depth = 32;
  if (size == 0 || msgs < 2) return Die("size >= 1 and messages >= 2");

  auto tx_ep = Endpoint::Create(Options(11));
  auto rx_ep = Endpoint::Create(Options(12));
  if (!tx_ep.ok() || !rx_ep.ok()) {
    return Die(
        std::string("endpoint: ") +
        std::string((tx_ep.ok() ? rx_ep.status() : tx_ep.status()).message()));
  }
  Endpoint& tx = **tx_ep;
  Endpoint& rx = **rx_ep;
  auto tc = tx.CreateConnection();
  auto rcn = rx.CreateConnection();
  if (!tc.ok() || !rcn.ok()) return Die("CreateConnection");
  auto tb = tx.LocalInfo(*tc);
  auto rb = rx.LocalInfo(*rcn);
  if (!tb.ok() || !rb.ok()) return Die("LocalInfo");
  if (!tx.Connect(*tc, *rb).ok() || !rx.Connect(*rcn, *tb).ok()) {
    return Die("Connect");
  }
  std::vector<uint8_t> sbuf(size * depth), rbuf(size * depth);
  for (size_t i = 0; i < sbuf.size(); ++i) sbuf[i] = static_cast<uint8_t>(i);
  auto smr = tx.RegisterMemory(sbuf.data(), sbuf.size(), prism::kAccessLocal);
  auto rmr = rx.RegisterMemory(rbuf.data(), rbuf.size(),
                               prism::kAccessLocal | prism::kAccessRemoteWrite);
  if (!smr.ok() || !rmr.ok()) return Die("RegisterMemory");

  const long idle_us = EnvLong("PRISM_NCCL_PERF_IDLE_US", 0);
  const double cpu0 = ProcessCpu();
  std::atomic<bool> failed{false};
  double tx_cpu = 0, rx_cpu = 0, secs = 0;
  std::thread sender([&] {
    Completion c[64];
    long posted = 0, done = 0;
    while (done < msgs && !failed.load(std::memory_order_relaxed)) {
      bool progressed = false;
      while (posted < msgs && posted - done < depth) {
        prism::WriteRequest w;
        w.wr_id = static_cast<uint64_t>(posted);
        w.local_addr = sbuf.data() + (posted % depth) * size;
        w.length = size;
        w.lkey = smr->lkey;
        w.remote_addr =
            reinterpret_cast<uintptr_t>(rbuf.data()) + (posted % depth) * size;
        w.rkey = rmr->rkey;
        w.has_immediate = true;
        w.immediate = static_cast<uint32_t>(posted);
        if (!tx.PostWrite(*tc, w).ok()) break;
        ++posted;
        progressed = true;
      }
      const size_t n = tx.PollCompletions(c, 64);
      for (size_t i = 0; i < n; ++i) {
        if (c[i].type != CompletionType::kWrite) continue;
        if (c[i].status != absl::StatusCode::kOk) failed = true;
        ++done;
        progressed = true;
      }
      if (!progressed) Idle(idle_us);
    }
    tx_cpu = ThreadCpu();
  });
  std::thread receiver([&] {
    Completion c[64];
    long got = 0;
    auto t0 = std::chrono::steady_clock::now();
    while (got < msgs && !failed.load(std::memory_order_relaxed)) {
      const size_t n = rx.PollCompletions(c, 64);
      for (size_t i = 0; i < n; ++i) {
        if (c[i].type != CompletionType::kRecvImmediate) continue;
        if (c[i].status != absl::StatusCode::kOk || c[i].byte_len != size) {
          failed = true;
        }
        if (got++ == 0) t0 = std::chrono::steady_clock::now();  // warm-up
      }
      if (n == 0) Idle(idle_us);
    }
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
               .count();
    rx_cpu = ThreadCpu();
  });
  sender.join();
  receiver.join();
  const double cpu = ProcessCpu() - cpu0;
  if (failed) return Die("a WRITE failed");
  const double mb_total = static_cast<double>(size) * msgs / 1e6;
  const double mb = static_cast<double>(size) * (msgs - 1) / 1e6;
  printf(
      "endpoint_poll_perf: size %llu msgs %ld outstanding %d: %.1f MB/s "
      "(%.3f s), cpu %.3f s = %.1f us/MB (driver threads %.1f us/MB)\n",
      static_cast<unsigned long long>(size), msgs, depth, mb / secs, secs, cpu,
      cpu * 1e6 / mb_total, (tx_cpu + rx_cpu) * 1e6 / mb_total);
  return 0;
}
