// prism_bench: failover / loss / incast / permutation benchmarks of Prism
// against the roce and multiqp baselines on the simulator.
//
//   prism_bench SUITE [--quick] --out DIR [--seed N] [--no-plot] [--quiet]
//               [--only TRANSPORT] [--oracle-reroute-after-us D]
//               [--no-fate-sharing] [--no-group-balance] [--no-tail-resend]
//               [--no-spurious-undo]
//   prism_bench --list
//
// --only runs one transport (e.g. prism) of each scenario; the oracle flag
// is a what-if for diagnosis (sim::TransportConfig::oracle_reroute_after),
// never a result. --no-fate-sharing runs Prism without the failure-group
// hint (sim::TransportConfig::fate_sharing), --no-group-balance without
// group balance (sim::TransportConfig::group_balance), --no-tail-resend
// without tail resends (sim::TransportConfig::tail_resend),
// --no-spurious-undo without the spurious-loss undo
// (sim::TransportConfig::spurious_undo), for A/B comparisons.
//
// Writes DIR/SUITE.json (docs/benchmarks.md lists every figure), the goodput
// time series DIR/SUITE/<scenario>.csv and, when python3-matplotlib is
// installed, DIR/SUITE/<scenario>.png; prints a comparison table.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/scenarios/bench_suites.h"

#ifndef PRISM_BENCH_PLOT_SCRIPT
#define PRISM_BENCH_PLOT_SCRIPT "bench/scenarios/plot_bench.py"
#endif

namespace {

int Usage() {
  std::string names;
  for (const std::string& n : prism::bench::SuiteNames()) {
    names += (names.empty() ? "" : " | ") + n;
  }
  std::fprintf(stderr,
               "usage: prism_bench SUITE [--quick] --out DIR [--seed N] "
               "[--no-plot] [--quiet]\n"
               "       [--only TRANSPORT] [--oracle-reroute-after-us D]\n"
               "       [--no-fate-sharing] [--no-group-balance] "
               "[--no-tail-resend]\n"
               "       [--no-spurious-undo]\n"
               "  SUITE: %s\n",
               names.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string suite, out;
  prism::bench::SuiteOptions opt;
  bool plot = true, quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else if (a == "--seed" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &opt.seed)) {
        std::fprintf(stderr, "prism_bench: bad --seed '%s'\n", argv[i]);
        return 2;
      }
    } else if (a == "--only" && i + 1 < argc) {
      opt.only_transport = argv[++i];
    } else if (a == "--oracle-reroute-after-us" && i + 1 < argc) {
      if (!absl::SimpleAtod(argv[++i], &opt.oracle_reroute_after_us)) {
        std::fprintf(stderr, "prism_bench: bad --oracle-reroute-after-us\n");
        return 2;
      }
    } else if (a == "--no-fate-sharing") {
      opt.fate_sharing = false;
    } else if (a == "--no-group-balance") {
      opt.group_balance = false;
    } else if (a == "--no-tail-resend") {
      opt.tail_resend = false;
    } else if (a == "--no-spurious-undo") {
      opt.spurious_undo = false;
    } else if (a == "--no-plot") {
      plot = false;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--list") {
      for (const std::string& n : prism::bench::SuiteNames())
        std::printf("%s\n", n.c_str());
      return 0;
    } else if (a == "-h" || a == "--help") {
      return Usage();
    } else if (!a.empty() && a[0] != '-' && suite.empty()) {
      suite = a;
    } else {
      std::fprintf(stderr, "prism_bench: unexpected argument '%s'\n",
                   a.c_str());
      return Usage();
    }
  }
  if (suite.empty() || out.empty()) return Usage();
  bool known = false;
  for (const std::string& n : prism::bench::SuiteNames()) known |= n == suite;
  if (!known) {
    std::fprintf(stderr, "prism_bench: unknown suite '%s'\n", suite.c_str());
    return Usage();
  }
  if (absl::Status v = prism::bench::ValidateSuiteOptions(suite, opt);
      !v.ok()) {
    std::fprintf(stderr, "prism_bench: %s\n", std::string(v.message()).c_str());
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) {
    std::fprintf(stderr, "prism_bench: cannot create %s: %s\n", out.c_str(),
                 ec.message().c_str());
    return 1;
  }
  opt.out_dir = out;
  const auto t0 = std::chrono::steady_clock::now();
  if (!quiet) {
    opt.on_run = [t0](const std::string& scenario,
                      const std::string& transport) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      std::fprintf(stderr, "[%6.1fs] %s: %s\n", s, scenario.c_str(),
                   transport.c_str());
    };
  }
  std::printf("prism_bench %s%s (seed %llu)\n", suite.c_str(),
              opt.quick ? " --quick" : "",
              static_cast<unsigned long long>(opt.seed));
  std::fflush(stdout);
  absl::StatusOr<prism::json::Value> res = prism::bench::RunSuite(suite, opt);
  if (!res.ok()) {
    std::fprintf(stderr, "prism_bench: %s\n",
                 std::string(res.status().message()).c_str());
    return 1;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  res->Set("wall_seconds", prism::json::Value::Number(wall));
  const std::string path = out + "/" + suite + ".json";
  {
    std::ofstream f(path);
    if (!f) {
      std::fprintf(stderr, "prism_bench: cannot write %s\n", path.c_str());
      return 1;
    }
    f << prism::json::Serialize(*res, 2) << "\n";
  }
  std::printf("%s", prism::bench::FormatTable(*res).c_str());
  std::printf("\n%.1f s wall. Results: %s\n", wall, path.c_str());
  if (plot) {
    // Debian's interpreter has python3-matplotlib; a python3 earlier on PATH
    // (pyenv, venv) may not.
    const char* py =
        access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    const std::string cmd =
        absl::StrFormat("%s '%s' '%s'", py, PRISM_BENCH_PLOT_SCRIPT, path);
    std::fflush(stdout);
    const int rc = std::system(cmd.c_str());
    if (rc != 0)
      std::printf("plots: not made (plot script exited with %d)\n", rc);
  } else {
    std::printf("plots: skipped (--no-plot); time series CSVs in %s/%s/\n",
                out.c_str(), suite.c_str());
  }
  return 0;
}
