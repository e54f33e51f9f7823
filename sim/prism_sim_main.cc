// prism_sim: runs a simulator scenario (docs/simulator.md).
//
//   prism_sim --scenario FILE.json --out DIR [--seed N] [--quiet]
//             [--transport NAME] [--no-plot]
//   (any mode) [--lazy-ports] [--nic-pull-watermark N] [--scheduler S]: set
//   the scenario's fabric.lazy_switch_ports / fabric.nic_pull_watermark /
//   scheduler (exact or batched) (docs/simulator.md)
//   prism_sim --bench [--hosts N] [--planes P] [--duration_us T] [--out DIR]
//   prism_sim --bench-scale [--hosts N] [--out DIR]
//
// Prints the resolved configuration, a progress bar when stderr is a
// terminal, a result table, and writes DIR/summary.json, CSV time series
// and (when python3-matplotlib is installed) plots made by sim/plot.py.
#include <sys/resource.h>
#include <unistd.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "sim/scenario.h"

#ifndef PRISM_SIM_PLOT_SCRIPT
#define PRISM_SIM_PLOT_SCRIPT "sim/plot.py"
#endif

namespace {

using prism::sim::RunResult;
using prism::sim::ScenarioConfig;

int Usage() {
  std::fprintf(stderr,
               "usage: prism_sim --scenario FILE.json --out DIR [--seed N] "
               "[--quiet] [--transport NAME] [--no-plot]\n"
               "       prism_sim --bench [--hosts N] [--planes P] "
               "[--duration_us T] [--transport NAME] [--window N]\n"
               "                 [--max-messages N] [--out DIR]\n"
               "       prism_sim --bench-scale [--transport NAME] [--hosts N] "
               "[--out DIR]\n"
               "  any mode: [--lazy-ports] [--nic-pull-watermark N] "
               "[--scheduler exact|batched]\n");
  return 2;
}

// A flag without a usable value: says which and what it takes, then the
// usage (exit status 2).
int BadValue(const std::string& flag, const char* value, const char* wants) {
  if (value == nullptr) {
    std::fprintf(stderr, "prism_sim: %s needs a value (%s)\n", flag.c_str(),
                 wants);
  } else {
    std::fprintf(stderr, "prism_sim: bad value '%s' for %s (%s)\n", value,
                 flag.c_str(), wants);
  }
  return Usage();
}

double PeakRssMiB() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

void PrintTable(const std::vector<RunResult>& rs) {
  std::printf("\n%-18s %9s %9s %6s %9s %9s %9s %9s %10s %10s  %s\n",
              "transport", "goodput", "gbps", "done", "drops", "trims", "retx",
              "retired", "fct_p50us", "fct_p99us", "invariants");
  for (const RunResult& r : rs) {
    std::vector<double> fct;
    for (const auto& f : r.flows) {
      if (f.finish >= 0) fct.push_back(double(f.finish - f.start) / 1e6);
    }
    std::sort(fct.begin(), fct.end());
    auto pct = [&](double p) {
      return fct.empty() ? 0.0 : fct[static_cast<size_t>(p * (fct.size() - 1))];
    };
    const double secs =
        double(std::max<prism::Time>(1, r.end_time - r.first_start)) / 1e12;
    std::printf(
        "%-18s %8.1f%% %9.1f %6s %9llu %9llu %9llu %9llu %10.1f %10.1f  %s\n",
        r.transport.c_str(), 100 * r.goodput_fraction,
        double(r.delivered_bytes) * 8 / secs / 1e9, r.completed ? "yes" : "no",
        static_cast<unsigned long long>(r.drops_total),
        static_cast<unsigned long long>(r.trims),
        static_cast<unsigned long long>(r.totals.retransmissions),
        static_cast<unsigned long long>(r.totals.path_retirements), pct(0.5),
        pct(0.99),
        r.invariant_error.empty() ? "ok" : r.invariant_error.c_str());
  }
}

std::string BenchScenario(uint32_t hosts, uint32_t planes, double dur_us,
                          const std::string& transport, uint32_t group,
                          bool scale, uint32_t window, uint32_t max_messages,
                          uint32_t scale_t0) {
  // Engine window / message cap (0: engine defaults; bench-scale: 256).
  if (scale && window == 0) window = 256;
  if (scale && max_messages == 0) max_messages = 256;
  std::string extra;
  if (window) extra += absl::StrFormat(", \"window_packets\": %d", window);
  if (max_messages) {
    extra +=
        absl::StrFormat(", \"max_outstanding_messages\": %d", max_messages);
  }
  if (scale) {
    // The full MRC fabric: 8 planes of 512-port switches, two tiers:
    // 512 T0 (256 hosts down, 256 up) and 256 T1 per plane, 131,072 hosts.
    // --hosts N keeps the switches and takes N / 256 T0s per plane (a slice
    // of the fabric, for per-host memory figures on a small machine).
    return absl::StrFormat(R"({
  "name": "bench-scale-%d",
  "seed": 1,
  "topology": {"kind": "clos2", "planes": 8, "t0_per_plane": %d,
               "t1_per_plane": 256, "hosts_per_t0": 256,
               "host_link_gbps": 100, "fabric_link_gbps": 100},
  "fabric": {"forwarding": "srv6"},
  "duration_us": %g,
  "timeseries": false,
  "transport_defaults": {"num_paths": 64, "mtu": 4096%s},
  "transports": ["%s"],
  "workload": {"type": "ring_allreduce", "bytes": %d, "steps": 1,
               "message_bytes": 65536}
})",
                           scale_t0 * 256, scale_t0, dur_us, extra, transport,
                           static_cast<int64_t>(scale_t0) * 256 * 65536);
  }
  const uint32_t per_t0 = 16;
  const uint32_t t0 = std::max<uint32_t>(1, hosts / per_t0);
  return absl::StrFormat(R"({
  "name": "bench-all-to-all",
  "seed": 1,
  "topology": {"kind": "clos2", "planes": %d, "t0_per_plane": %d,
               "t1_per_plane": %d, "hosts_per_t0": %d,
               "host_link_gbps": 100, "fabric_link_gbps": 100},
  "fabric": {"forwarding": "srv6"},
  "duration_us": %g,
  "timeseries": false,
  "transport_defaults": {"num_paths": 128%s},
  "transports": ["%s"],
  "workload": {"type": "all_to_all", "bytes": 1048576, "group_size": %d}
})",
                         planes, t0, per_t0, per_t0, dur_us, extra, transport,
                         group);
}

// With PRISM_SIM_MALLOC_THP=1 (opt-in), re-executes this program once with
// glibc's malloc marking its heap for transparent huge pages (tunable
// glibc.malloc.hugetlb=1, glibc >= 2.35; older glibc ignores it), unless
// GLIBC_TUNABLES already sets it or the program runs under valgrind (which
// would not follow the exec). The engines' per-connection state (Conn, slot
// and message rings, selectors) comes from malloc and is touched at random
// across thousands of connections: with 4 KiB pages most of those accesses
// also miss the TLB (the simulator's own large arrays already use huge
// pages, sim/huge_alloc.h). Opt-in because it does not pay everywhere: the
// 1024-host bench ran 9-11% less CPU with it, but --bench-scale (GiBs of
// fresh heap touched once) twice the CPU and small scenarios sometimes
// paid the clearing of fresh huge pages (docs/benchmarks.md, eleventh
// round). Results do not depend on it; on failure the run continues with
// the default heap.
void ReexecWithHugeHeap(char** argv) {
  const char* opt = std::getenv("PRISM_SIM_MALLOC_THP");
  if (opt == nullptr || std::strcmp(opt, "1") != 0) return;
#ifdef RUNNING_ON_VALGRIND
  if (RUNNING_ON_VALGRIND) return;
#else
  // Without valgrind's header: it preloads its vgpreload_*.so into the
  // program it runs.
  const char* pre = std::getenv("LD_PRELOAD");
  if (pre != nullptr && std::strstr(pre, "vgpreload") != nullptr) return;
#endif
  const char* tun = std::getenv("GLIBC_TUNABLES");
  if (tun != nullptr && std::strstr(tun, "glibc.malloc.hugetlb") != nullptr) {
    return;
  }
  std::string v = "glibc.malloc.hugetlb=1";
  if (tun != nullptr && *tun != '\0') v = std::string(tun) + ":" + v;
  if (setenv("GLIBC_TUNABLES", v.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed: carry on without (GLIBC_TUNABLES only matters at startup).
}

}  // namespace

int main(int argc, char** argv) {
  ReexecWithHugeHeap(argv);
  std::string scenario_path, out_dir, only;
  bool quiet = false, plot = true, bench = false, bench_scale = false;
  bool have_seed = false, have_hosts = false, lazy_ports = false;
  std::string scheduler;
  int32_t nic_pull_watermark = -1;
  uint64_t seed = 0;
  uint32_t hosts = 1024, planes = 8, group = 8, window = 0, max_messages = 0;
  double dur_us = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      return i + 1 < argc ? argv[++i] : nullptr;
    };
    if (a == "--scenario") {
      const char* v = next();
      if (!v) return BadValue(a, v, "a scenario file");
      scenario_path = v;
    } else if (a == "--out") {
      const char* v = next();
      if (!v) return BadValue(a, v, "a directory");
      out_dir = v;
    } else if (a == "--seed") {
      const char* v = next();
      if (!v || !absl::SimpleAtoi(v, &seed)) {
        return BadValue(a, v, "an unsigned 64-bit integer");
      }
      have_seed = true;
    } else if (a == "--transport") {
      const char* v = next();
      if (!v) return BadValue(a, v, "a transport name");
      only = v;
    } else if (a == "--hosts" || a == "--planes" || a == "--group") {
      const char* v = next();
      uint32_t x;
      if (!v || !absl::SimpleAtoi(v, &x) || x == 0) {
        return BadValue(a, v, "a positive integer");
      }
      (a == "--hosts" ? hosts : a == "--planes" ? planes : group) = x;
      have_hosts = have_hosts || a == "--hosts";
    } else if (a == "--window" || a == "--max-messages") {
      const char* v = next();
      uint32_t x;
      if (!v || !absl::SimpleAtoi(v, &x)) {
        return BadValue(a, v, "an integer >= 0; 0: the default");
      }
      (a == "--window" ? window : max_messages) = x;
    } else if (a == "--duration_us") {
      const char* v = next();
      if (!v || !absl::SimpleAtod(v, &dur_us) || !(dur_us > 0) ||
          !(dur_us <= 1e9)) {
        return BadValue(a, v, "microseconds, > 0 and <= 1e9");
      }
    } else if (a == "--lazy-ports") {
      lazy_ports = true;
    } else if (a == "--scheduler") {
      const char* v = next();
      if (!v ||
          (std::strcmp(v, "exact") != 0 && std::strcmp(v, "batched") != 0)) {
        return BadValue(a, v, "exact or batched");
      }
      scheduler = v;
    } else if (a == "--nic-pull-watermark") {
      const char* v = next();
      if (!v || !absl::SimpleAtoi(v, &nic_pull_watermark) ||
          nic_pull_watermark < 0) {
        return BadValue(a, v, "an integer >= 0");
      }
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--no-plot") {
      plot = false;
    } else if (a == "--bench") {
      bench = true;
    } else if (a == "--bench-scale") {
      bench_scale = true;
    } else if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return Usage();
    }
  }
  absl::StatusOr<ScenarioConfig> sc;
  if (bench || bench_scale) {
    const std::string text = BenchScenario(
        hosts, planes, dur_us > 0 ? dur_us : (bench_scale ? 50 : 200),
        only.empty() ? "prism" : only, group, bench_scale, window, max_messages,
        have_hosts ? std::max<uint32_t>(1, hosts / 256) : 512);
    absl::StatusOr<prism::json::Value> v = prism::json::Parse(text);
    if (!v.ok()) {
      std::fprintf(stderr, "bench scenario: %s\n",
                   v.status().ToString().c_str());
      return 1;
    }
    sc = prism::sim::ParseScenario(*v, "");
    plot = false;
  } else {
    if (scenario_path.empty() || out_dir.empty()) {
      std::fprintf(stderr,
                   "prism_sim: --scenario FILE.json and --out DIR are both "
                   "needed (or --bench / --bench-scale)\n");
      return Usage();
    }
    sc = prism::sim::LoadScenarioFile(scenario_path);
  }
  if (!sc.ok()) {
    std::fprintf(stderr, "prism_sim: %s\n", sc.status().ToString().c_str());
    return 1;
  }
  if (lazy_ports) sc->fabric.lazy_switch_ports = true;
  if (!scheduler.empty()) {
    sc->scheduler = scheduler == "batched" ? prism::sim::Scheduler::kBatched
                                           : prism::sim::Scheduler::kExact;
  }
  if (nic_pull_watermark >= 0) {
    sc->fabric.nic_pull_watermark = nic_pull_watermark;
  }
  if (have_seed) sc->seed = seed;
  if (dur_us > 0 && !bench && !bench_scale) {
    sc->duration = static_cast<prism::Time>(dur_us * prism::kMicrosecond);
  }
  if (!only.empty() && !bench && !bench_scale) {
    std::vector<prism::sim::TransportConfig> keep;
    for (const auto& t : sc->transports) {
      if (t.name == only) keep.push_back(t);
    }
    if (keep.empty()) {
      std::fprintf(stderr, "prism_sim: scenario has no transport '%s'\n",
                   only.c_str());
      return 1;
    }
    sc->transports = keep;
  }
  if (!quiet) {
    std::printf(
        "prism_sim: resolved configuration\n%s\n",
        prism::json::Serialize(prism::sim::DescribeScenario(*sc), 2).c_str());
  }
  const bool tty = !quiet && isatty(STDERR_FILENO);
  prism::sim::ProgressFn progress;
  if (tty) {
    progress = [](const std::string& t, double f) {
      const int w = 40;
      const int n = static_cast<int>(f * w);
      std::fprintf(stderr, "\r%-16s [%.*s%*s] %5.1f%%", t.c_str(), n,
                   "########################################", w - n, "",
                   100 * f);
      if (f >= 1.0) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  const auto w0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<RunResult>> rs =
      prism::sim::RunScenario(*sc, progress);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - w0)
          .count();
  if (!rs.ok()) {
    std::fprintf(stderr, "prism_sim: %s\n", rs.status().ToString().c_str());
    return 1;
  }
  if (!quiet) PrintTable(*rs);
  if (bench || bench_scale) {
    for (const RunResult& r : *rs) {
      std::printf(
          "bench %s: %s hosts=%u flows=%zu simulated=%.1fus wall=%.2fs (incl. "
          "setup %.2fs) packets=%llu packet_hops=%llu events=%llu "
          "packets/s=%.0f hops/s=%.0f events/s=%.0f cpu=%.2fs (setup cpu "
          "%.2fs) packets/cpu-s=%.0f hops/cpu-s=%.0f events/cpu-s=%.0f "
          "peak_rss=%.0fMiB\n",
          sc->name.c_str(), r.transport.c_str(),
          sc->topology.planes
              ? sc->topology.t0_per_plane * sc->topology.hosts_per_t0
              : 0,
          r.flows.size(), double(r.end_time) / 1e6, r.wall_seconds,
          wall - r.wall_seconds,
          static_cast<unsigned long long>(r.packets_created),
          static_cast<unsigned long long>(r.packet_hops),
          static_cast<unsigned long long>(r.events),
          r.wall_seconds > 0 ? double(r.packets_created) / r.wall_seconds : 0,
          r.wall_seconds > 0 ? double(r.packet_hops) / r.wall_seconds : 0,
          r.wall_seconds > 0 ? double(r.events) / r.wall_seconds : 0,
          r.cpu_seconds, r.setup_cpu_seconds,
          r.cpu_seconds > 0 ? double(r.packets_created) / r.cpu_seconds : 0,
          r.cpu_seconds > 0 ? double(r.packet_hops) / r.cpu_seconds : 0,
          r.cpu_seconds > 0 ? double(r.events) / r.cpu_seconds : 0,
          PeakRssMiB());
      std::printf(
          "bench %s: events by kind: timer=%llu wire=%llu port_done=%llu "
          "other=%llu\n",
          r.transport.c_str(), static_cast<unsigned long long>(r.timer_events),
          static_cast<unsigned long long>(r.wire_events),
          static_cast<unsigned long long>(r.port_done_events),
          static_cast<unsigned long long>(r.other_events));
      if (sc->scheduler == prism::sim::Scheduler::kBatched) {
        std::printf(
            "bench %s: scheduler batched: batches=%llu (%.1f events each) "
            "violations=%llu\n",
            r.transport.c_str(), static_cast<unsigned long long>(r.batches),
            r.batches > 0 ? double(r.events) / r.batches : 0.0,
            static_cast<unsigned long long>(r.batch_violations));
      }
      // Resident memory added by each setup stage (MiB), then the run.
      std::printf("bench %s: memory", r.transport.c_str());
      for (const auto& [stage, mib] : r.setup_rss_mib) {
        std::printf(" %s=+%.0fMiB", stage.c_str(), mib);
      }
      std::printf(
          " (fabric tables %.0f MiB, event queue %.0f MiB, packet pool %.0f "
          "MiB)\n",
          r.fabric_bytes / 1048576.0, r.queue_bytes / 1048576.0,
          r.pool_bytes / 1048576.0);
    }
  }
  int rc = 0;
  for (const RunResult& r : *rs) {
    if (!r.invariant_error.empty()) {
      std::fprintf(stderr, "prism_sim: %s: invariant violated: %s\n",
                   r.transport.c_str(), r.invariant_error.c_str());
      rc = 3;
    }
  }
  if (!out_dir.empty()) {
    absl::Status st = prism::sim::WriteOutputs(out_dir, *sc, *rs);
    if (!st.ok()) {
      std::fprintf(stderr, "prism_sim: %s\n", st.ToString().c_str());
      return 1;
    }
    if (!quiet)
      std::printf("\nwrote %s/summary.json and CSV time series\n",
                  out_dir.c_str());
    if (plot) {
      if (std::system("python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
        std::printf("plots skipped: python3-matplotlib is not installed\n");
      } else {
        const std::string cmd =
            absl::StrFormat("python3 '%s' '%s'%s", PRISM_SIM_PLOT_SCRIPT,
                            out_dir, quiet ? " >/dev/null" : "");
        if (std::system(cmd.c_str()) != 0)
          std::printf("plotting failed (%s)\n", cmd.c_str());
      }
    }
  }
  return rc;
}
