#include "bench/scenarios/bench_suites.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sim/scenario.h"
#include "sim/simulator.h"

namespace prism::bench {
namespace {

using json::Value;
using sim::FlowResult;
using sim::RunResult;
using sim::Sample;
using sim::ScenarioConfig;

constexpr double kUs = static_cast<double>(kMicrosecond);
const char* const kBaseTransports = R"(["prism", "roce", "multiqp"])";
// link-flaps also runs NSCC's plain quick adapt ("prism-classic", congestion
// "nscc-classic", the default before 2026-12-03) beside the default, so
// the failure-aware rule's effect (flap window vs undisturbed run) is
// measured side by side (docs/benchmarks.md).
const char* const kLinkFlapsTransports =
    R"(["prism", "prism-classic", "roce", "multiqp"])";
// permutation runs Prism's three path-selection policies side by side.
const char* const kPermutationTransports =
    R"(["prism-oblivious", "prism-reps", "prism-p2c", "roce", "multiqp"])";

// The transport names the scenarios of `suite` run, in order, each once
// (what SuiteOptions::only_transport may name).
std::vector<std::string> SuiteTransportNames(const std::string& suite) {
  std::vector<const char*> lists = {kBaseTransports};
  if (suite == "link-flaps") lists = {kLinkFlapsTransports};
  if (suite == "permutation") lists = {kPermutationTransports};
  if (suite == "headline") lists = {kBaseTransports, kPermutationTransports};
  std::vector<std::string> names;
  for (const char* list : lists) {
    absl::StatusOr<Value> v = json::Parse(list);
    if (!v.ok() || !v->is_array()) continue;
    for (const Value& n : v->items()) {
      if (n.is_string() &&
          std::find(names.begin(), names.end(), n.as_string()) == names.end()) {
        names.push_back(n.as_string());
      }
    }
  }
  return names;
}

struct Topo {
  int planes, t0, t1, hosts_per_t0;
};

std::string TopoJson(const Topo& t) {
  return absl::StrFormat(
      R"({"kind": "clos2", "planes": %d, "t0_per_plane": %d,)"
      R"( "t1_per_plane": %d, "hosts_per_t0": %d, "host_link_gbps": 100,)"
      R"( "fabric_link_gbps": 100, "host_link_delay_ns": 500,)"
      R"( "fabric_link_delay_ns": 500})",
      t.planes, t.t0, t.t1, t.hosts_per_t0);
}

// A scenario JSON document from its parts.
std::string ScenarioJson(const std::string& name, uint64_t seed,
                         const Topo& topo, double duration_us, double sample_us,
                         double warmup_us, const std::string& transports,
                         const std::string& workload,
                         const std::string& faults) {
  return absl::StrFormat(
      R"({"name": "%s", "seed": %d, "topology": %s,)"
      R"( "fabric": {"forwarding": "srv6"}, "duration_us": %g,)"
      R"( "sample_interval_us": %g, "warmup_us": %g, "transports": %s,)"
      R"( "workload": %s, "faults": %s})",
      name, seed, TopoJson(topo), duration_us, sample_us, warmup_us, transports,
      workload, faults.empty() ? "null" : faults);
}

absl::StatusOr<ScenarioConfig> Parse(const std::string& text) {
  absl::StatusOr<Value> v = json::Parse(text);
  if (!v.ok()) return v.status();
  return sim::ParseScenario(*v, "");
}

absl::StatusOr<std::vector<RunResult>> RunAll(const ScenarioConfig& sc,
                                              const SuiteOptions& opt,
                                              const std::string& label) {
  std::vector<RunResult> out;
  for (sim::TransportConfig tc : sc.transports) {
    if (!opt.only_transport.empty() && tc.name != opt.only_transport) continue;
    if (tc.type == "prism" && opt.oracle_reroute_after_us >= 0) {
      tc.oracle_reroute_after =
          static_cast<Time>(opt.oracle_reroute_after_us * kMicrosecond);
    }
    if (tc.type == "prism" && !opt.fate_sharing) tc.fate_sharing = false;
    if (tc.type == "prism" && !opt.group_balance) tc.group_balance = false;
    if (tc.type == "prism" && !opt.tail_resend) tc.tail_resend = false;
    if (tc.type == "prism" && !opt.spurious_undo) tc.spurious_undo = false;
    if (opt.on_run) opt.on_run(label, tc.name);
    sim::Simulator s(sc, tc);
    absl::Status st = s.Init();
    if (!st.ok()) return st;
    st = s.Run();
    if (!st.ok()) return st;
    out.push_back(s.result());
  }
  return out;
}

// --- time-series helpers -------------------------------------------------

// Bytes delivered (all flows) at time t, interpolated between samples.
double BytesAt(const std::vector<Sample>& s, Time t) {
  if (s.empty()) return 0;
  if (t <= s.front().t) return static_cast<double>(s.front().total_bytes);
  if (t >= s.back().t) return static_cast<double>(s.back().total_bytes);
  auto it = std::lower_bound(s.begin(), s.end(), t,
                             [](const Sample& a, Time x) { return a.t < x; });
  const Sample& hi = *it;
  const Sample& lo = *(it - 1);
  if (hi.t == lo.t) return static_cast<double>(hi.total_bytes);
  const double f =
      static_cast<double>(t - lo.t) / static_cast<double>(hi.t - lo.t);
  return static_cast<double>(lo.total_bytes) +
         f * (static_cast<double>(hi.total_bytes) -
              static_cast<double>(lo.total_bytes));
}

// Goodput (bits per second) over [a, b].
double RateBps(const std::vector<Sample>& s, Time a, Time b) {
  if (b <= a) return 0;
  return (BytesAt(s, b) - BytesAt(s, a)) * 8 /
         (static_cast<double>(b - a) / kSecond);
}

// Longest interval after `from` during which no byte was delivered.
Time LongestStall(const RunResult& r, Time from) {
  Time last_change = from, best = 0;
  uint64_t last = 0;
  bool have = false;
  for (const Sample& x : r.samples) {
    if (x.t < from) {
      last = x.total_bytes;
      have = true;
      continue;
    }
    if (!have || x.total_bytes != last) {
      last = x.total_bytes;
      have = true;
      last_change = x.t;
    } else {
      best = std::max(best, x.t - last_change);
    }
  }
  return best;
}

struct Span {
  Time from, to;
};

// Down intervals from a run's fault log (link_down/up, switch_down/up),
// clipped to [0, end].
std::vector<Span> FaultSpans(const RunResult& r, Time end) {
  std::vector<Span> spans;
  std::map<std::pair<int, uint32_t>, Time> open;  // (kind, target) -> since
  for (const auto& [t, what] : r.fault_log) {
    std::vector<std::string> f = absl::StrSplit(what, ' ');
    if (f.size() < 2) continue;
    uint32_t target = 0;
    if (!absl::SimpleAtoi(f[1], &target)) continue;
    const bool link = f[0].rfind("link_", 0) == 0;
    const bool sw = f[0].rfind("switch_", 0) == 0;
    if (!link && !sw) continue;
    const auto key = std::make_pair(link ? 0 : 1, target);
    if (f[0] == "link_down" || f[0] == "switch_down") {
      open.emplace(key, t);
    } else if (f[0] == "link_up" || f[0] == "switch_up") {
      auto it = open.find(key);
      if (it != open.end()) {
        spans.push_back({it->second, std::min(t, end)});
        open.erase(it);
      }
    }
  }
  for (const auto& [k, since] : open) spans.push_back({since, end});
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.from < b.from; });
  return spans;
}

Value SpansJson(const std::vector<Span>& spans) {
  Value a = Value::Array();
  for (const Span& s : spans) {
    if (a.items().size() >= 500) break;
    Value p = Value::Array();
    p.Push(Value::Number(static_cast<double>(s.from) / kUs));
    p.Push(Value::Number(static_cast<double>(s.to) / kUs));
    a.Push(p);
  }
  return a;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx);
  const size_t hi = std::min(v.size() - 1, lo + 1);
  const double frac = idx - static_cast<double>(lo);
  return v[lo] * (1 - frac) + v[hi] * frac;
}

std::vector<double> Fcts(const RunResult& r) {
  std::vector<double> v;
  for (const FlowResult& f : r.flows) {
    if (f.finish >= 0)
      v.push_back(static_cast<double>(f.finish - f.start) / kUs);
  }
  return v;
}

Value NumOrNull(bool ok, double x) { return ok ? Value::Number(x) : Value(); }

// Figures every transport of every suite reports.
Value Common(const RunResult& r) {
  Value o = Value::Object();
  o.Set("completed", Value::Bool(r.completed));
  o.Set("flows", Value::Int(static_cast<int64_t>(r.flows.size())));
  int64_t done = 0;
  for (const FlowResult& f : r.flows) done += f.finish >= 0 ? 1 : 0;
  o.Set("flows_completed", Value::Int(done));
  o.Set("sim_goodput_fraction", Value::Number(r.goodput_fraction));
  o.Set("makespan_goodput_fraction",
        Value::Number(r.makespan_goodput_fraction));
  o.Set("end_time_us", Value::Number(static_cast<double>(r.end_time) / kUs));
  o.Set("delivered_bytes", Value::Int(static_cast<int64_t>(r.delivered_bytes)));
  o.Set("total_bytes", Value::Int(static_cast<int64_t>(r.total_bytes)));
  o.Set("drops", Value::Int(static_cast<int64_t>(r.drops_total)));
  o.Set("trims", Value::Int(static_cast<int64_t>(r.trims)));
  o.Set("ecn_marks", Value::Int(static_cast<int64_t>(r.ecn_marks)));
  const sim::TransportTotals& t = r.totals;
  o.Set("data_packets", Value::Int(static_cast<int64_t>(t.data_packets)));
  o.Set("retransmissions", Value::Int(static_cast<int64_t>(t.retransmissions)));
  o.Set("retransmitted_bytes",
        Value::Int(static_cast<int64_t>(t.retransmitted_bytes)));
  o.Set("timeouts", Value::Int(static_cast<int64_t>(t.timeouts)));
  o.Set("path_retirements",
        Value::Int(static_cast<int64_t>(t.path_retirements)));
  o.Set("paths_restored", Value::Int(static_cast<int64_t>(t.paths_restored)));
  o.Set("probes", Value::Int(static_cast<int64_t>(t.probes)));
  o.Set("connection_errors",
        Value::Int(static_cast<int64_t>(t.connection_errors)));
  o.Set("tail_loss_probes",
        Value::Int(static_cast<int64_t>(t.tail_loss_probes)));
  o.Set("path_timeouts", Value::Int(static_cast<int64_t>(t.path_timeouts)));
  // Where failover loss goes (docs/benchmarks.md, "Failover accounting"):
  // drops at dead hops, and (Prism) packets sent onto paths that were dead
  // at send time, with how long each dead path kept getting DATA.
  auto drop = [&](sim::DropReason d) {
    return static_cast<int64_t>(r.drops[static_cast<size_t>(d)]);
  };
  o.Set("drops_dead_hop", Value::Int(drop(sim::DropReason::kLinkDown) +
                                     drop(sim::DropReason::kSwitchDown) +
                                     drop(sim::DropReason::kNicPortDown)));
  o.Set("drops_in_flight_at_fault",
        Value::Int(drop(sim::DropReason::kLinkDownInFlight)));
  // The dead-path figures exist only for Prism (the simulator counts them in
  // its Prism adapter); null for the baselines.
  const bool prism = r.transport.rfind("prism", 0) == 0;
  auto count = [&](uint64_t x) {
    return prism ? Value::Int(static_cast<int64_t>(x)) : Value();
  };
  o.Set("dead_path_data_packets", count(t.dead_path_data));
  o.Set("dead_path_retransmissions", count(t.dead_path_retransmissions));
  o.Set("dead_path_probes", count(t.dead_path_probes));
  o.Set("dead_path_control", count(t.dead_path_control));
  {
    std::vector<double> use;
    use.reserve(t.dead_path_use_spans.size());
    for (Time x : t.dead_path_use_spans)
      use.push_back(static_cast<double>(x) / kUs);
    o.Set("dead_path_outages", count(use.size()));
    const double sends =
        static_cast<double>(t.dead_path_data + t.dead_path_retransmissions);
    o.Set("dead_path_sends_per_outage",
          NumOrNull(prism, use.empty() ? 0 : sends / use.size()));
    o.Set("dead_path_last_send_us_median",
          NumOrNull(prism, Percentile(use, 0.5)));
    o.Set("dead_path_last_send_us_p99",
          NumOrNull(prism, Percentile(use, 0.99)));
    o.Set("dead_route_group_outages", count(t.dead_route_group_outages));
    o.Set("dead_hop_outages", count(t.dead_hop_outages));
  }
  o.Set("invariants",
        Value::String(r.invariant_error.empty() ? "ok" : r.invariant_error));
  o.Set("wall_seconds", Value::Number(r.wall_seconds));
  return o;
}

std::string FileName(const std::string& name) {
  std::string s = name;
  for (char& c : s) {
    if (c == '/' || c == ' ') c = '_';
  }
  return s;
}

// Writes out_dir/suite/<scenario>.csv: goodput over a trailing window of
// `window` at each sample (at most ~2000 points per transport).
void WriteSeries(const SuiteOptions& opt, const std::string& suite,
                 const std::string& scenario,
                 const std::vector<RunResult>& results, Time window,
                 Value* scenario_json) {
  if (opt.out_dir.empty()) return;
  const std::string dir = opt.out_dir + "/" + suite;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string rel = suite + "/" + FileName(scenario) + ".csv";
  std::ofstream out(opt.out_dir + "/" + rel);
  if (!out) return;
  out << "transport,time_us,goodput_gbps\n";
  for (const RunResult& r : results) {
    const size_t n = r.samples.size();
    const size_t stride = std::max<size_t>(1, n / 2000);
    for (size_t i = 1; i < n; i += stride) {
      const Time t = r.samples[i].t;
      const Time a = std::max<Time>(r.samples.front().t, t - window);
      out << absl::StrFormat("%s,%.3f,%.3f\n", r.transport,
                             static_cast<double>(t) / kUs,
                             RateBps(r.samples, a, t) / 1e9);
    }
  }
  scenario_json->Set("timeseries_csv", Value::String(rel));
  scenario_json->Set("plot",
                     Value::String(suite + "/" + FileName(scenario) + ".png"));
}

Value StringArray(std::initializer_list<const char*> keys) {
  Value a = Value::Array();
  for (const char* k : keys) a.Push(Value::String(k));
  return a;
}

// --- port-loss -------------------------------------------------------------

absl::StatusOr<Value> PortLoss(const SuiteOptions& opt,
                               const std::string& suite, bool receiver_side) {
  const Topo topo{8, 2, 4, 2};  // hosts 0,1 on T0 0; 2,3 on T0 1
  const uint32_t src = 0, dst = 2, plane = 3;
  const int64_t bytes = opt.quick ? (24 << 20) : (64 << 20);
  const double at_us = opt.quick ? 40 : 100;
  // The sender's port stays down past the point where roce's other QPs have
  // finished their shares (so its failed-plane QP visibly stalls); the
  // receiver's port comes back while Prism is still sending.
  const double down_us =
      receiver_side ? (opt.quick ? 150 : 400) : (opt.quick ? 400 : 1000);
  const double dur_us = opt.quick ? 2500 : 5000;
  const std::string name = receiver_side ? "receiver-port" : "sender-port";
  const std::string wl =
      absl::StrFormat(R"({"type": "bulk", "src": %d, "dst": %d, "bytes": %d})",
                      src, dst, bytes);
  const std::string faults = absl::StrFormat(
      R"([{"type": "nic_port_down", "host": %d, "plane": %d, "at_us": %g,)"
      R"( "duration_us": %g}])",
      receiver_side ? dst : src, plane, at_us, down_us);
  absl::StatusOr<ScenarioConfig> sc = Parse(ScenarioJson(
      name, opt.seed, topo, dur_us, 1, 0, kBaseTransports, wl, faults));
  if (!sc.ok()) return sc.status();
  absl::StatusOr<std::vector<RunResult>> rs =
      RunAll(*sc, opt, suite + "/" + name);
  if (!rs.ok()) return rs.status();

  const Time fault = static_cast<Time>(at_us * kMicrosecond);
  const Time up = static_cast<Time>((at_us + down_us) * kMicrosecond);
  const Time w = 5 * kMicrosecond;
  Value sj = Value::Object();
  sj.Set("name",
         Value::String(suite == "port-loss" ? name : "port-loss/" + name));
  sj.Set("description",
         Value::String(absl::StrFormat(
             "bulk %d MiB host %d -> %d on an 8-plane clos2 (8 x 100G per "
             "host); NIC port (plane %d) of the %s fails at %g us and comes "
             "back at %g us",
             bytes >> 20, src, dst, plane,
             receiver_side ? "receiver" : "sender", at_us, at_us + down_us)));
  Value spans = Value::Array();
  {
    Value p = Value::Array();
    p.Push(Value::Number(at_us));
    p.Push(Value::Number(at_us + down_us));
    spans.Push(p);
  }
  sj.Set("fault_spans_us", spans);
  sj.Set("table_keys",
         StringArray({"completed", "goodput_before_fraction",
                      "goodput_min_fraction", "goodput_after_fraction",
                      "recovery_us", "stall_us", "completion_us",
                      "retransmitted_bytes"}));
  Value tr = Value::Object();
  for (const RunResult& r : *rs) {
    Value o = Common(r);
    const double cap = r.ideal_bps;  // the flow's ideal rate, all 8 ports
    const double cap78 = cap * (topo.planes - 1) / topo.planes;
    const FlowResult& f = r.flows[0];
    const Time start = std::max<Time>(0, f.start);
    const Time finish = f.finish >= 0 ? f.finish : r.end_time;
    const Time fault_end = std::min(up, finish);
    const auto& s = r.samples;
    // Before the fault: from 10 us after the start (ramp-up) to the fault.
    const Time b0 = start + 10 * kMicrosecond;
    const bool have_before = fault > b0 && finish > fault;
    o.Set("goodput_before_fraction",
          NumOrNull(have_before, RateBps(s, b0, fault) / cap));
    // Minimum over 5 us windows while the port is down.
    double mn = 1e300;
    for (Time a = fault; a + w <= fault_end; a += kMicrosecond) {
      mn = std::min(mn, RateBps(s, a, a + w) / cap78);
    }
    o.Set("goodput_min_fraction", NumOrNull(mn < 1e300, mn));
    // Recovery: first window start after the fault from which three
    // consecutive 5 us windows each reach 90% of the 7/8 capacity.
    Time rec = -1;
    for (Time a = fault; a + 3 * w <= fault_end; a += kMicrosecond) {
      if (RateBps(s, a, a + w) >= 0.9 * cap78 &&
          RateBps(s, a + w, a + 2 * w) >= 0.9 * cap78 &&
          RateBps(s, a + 2 * w, a + 3 * w) >= 0.9 * cap78) {
        rec = a - fault;
        break;
      }
    }
    o.Set("recovery_us", NumOrNull(rec >= 0, static_cast<double>(rec) / kUs));
    const Time a0 = fault + (rec >= 0 ? rec : 50 * kMicrosecond);
    o.Set("goodput_after_fraction",
          NumOrNull(fault_end > a0, RateBps(s, a0, fault_end) / cap78));
    o.Set("goodput_during_fault_fraction",
          NumOrNull(fault_end > fault, RateBps(s, fault, fault_end) / cap78));
    o.Set("goodput_restored_fraction",
          NumOrNull(finish > up + 10 * kMicrosecond,
                    RateBps(s, up, finish) / cap));
    o.Set("stall_us",
          Value::Number(static_cast<double>(LongestStall(r, fault)) / kUs));
    o.Set(
        "completion_us",
        NumOrNull(f.finish >= 0, static_cast<double>(f.finish - start) / kUs));
    o.Set("finished_after_port_up", Value::Bool(f.finish < 0 || f.finish > up));
    o.Set("capacity_gbps", Value::Number(cap / 1e9));
    tr.Set(r.transport, o);
  }
  sj.Set("transports", tr);
  WriteSeries(opt, suite, name, *rs, w, &sj);
  return sj;
}

// --- random-loss -----------------------------------------------------------

absl::StatusOr<Value> RandomLoss(const SuiteOptions& opt,
                                 const std::string& suite, double rate) {
  const Topo topo{8, 2, 4, 2};
  const int64_t bytes = opt.quick ? (32 << 20) : (int64_t{128} << 20);
  const double dur_us = opt.quick ? 3000 : 10000;
  const std::string name = absl::StrFormat("loss-%g", rate);
  const std::string wl = absl::StrFormat(
      R"({"type": "bulk", "src": 0, "dst": 2, "bytes": %d})", bytes);
  const std::string faults = absl::StrFormat(
      R"([{"type": "link_loss", "rate": %g, "links": "all", "at_us": 0}])",
      rate);
  absl::StatusOr<ScenarioConfig> sc = Parse(ScenarioJson(
      name, opt.seed, topo, dur_us, 0, 0, kBaseTransports, wl, faults));
  if (!sc.ok()) return sc.status();
  absl::StatusOr<std::vector<RunResult>> rs =
      RunAll(*sc, opt, suite + "/" + name);
  if (!rs.ok()) return rs.status();
  Value sj = Value::Object();
  sj.Set("name",
         Value::String(suite == "random-loss" ? name : "random-loss/" + name));
  sj.Set("description",
         Value::String(absl::StrFormat(
             "bulk %d MiB host 0 -> 2 across T1 on an 8-plane clos2; random "
             "loss %g on every link (4 links per path, both directions)",
             bytes >> 20, rate)));
  sj.Set("fault_spans_us", Value::Array());
  sj.Set("loss_rate", Value::Number(rate));
  sj.Set("table_keys",
         StringArray({"completed", "goodput_fraction", "retransmissions",
                      "timeouts", "end_time_us"}));
  Value tr = Value::Object();
  for (const RunResult& r : *rs) {
    Value o = Common(r);
    o.Set("goodput_fraction", Value::Number(r.goodput_fraction));
    o.Set("raw_goodput_fraction", Value::Number(r.raw_goodput_fraction));
    tr.Set(r.transport, o);
  }
  sj.Set("transports", tr);
  WriteSeries(opt, suite, name, *rs,
              std::max<Time>(5 * kMicrosecond, sc->duration / 200), &sj);
  return sj;
}

// --- incast ----------------------------------------------------------------

absl::StatusOr<Value> Incast(const SuiteOptions& opt,
                             const std::string& suite) {
  const Topo topo{8, 4, 4, 4};  // 16 hosts; T0 k holds hosts 4k..4k+3
  // The victim runs about as long as the incast (so start-up is a small part
  // of its goodput) and is over before the incast ends.
  const int64_t bytes = opt.quick ? (4 << 20) : (16 << 20);
  const int64_t victim = opt.quick ? (24 << 20) : (96 << 20);
  const double dur_us = opt.quick ? 4000 : 12000;
  const std::string name = "7-to-1";
  // Senders 15..9 -> host 0; victim 8 -> 4 (8 shares T0 2 with senders 9-11).
  const std::string wl = absl::StrFormat(
      R"({"type": "incast", "senders": 7, "dst": 0, "bytes": %d,)"
      R"( "victim": {"src": 8, "dst": 4, "bytes": %d}})",
      bytes, victim);
  absl::StatusOr<ScenarioConfig> sc = Parse(ScenarioJson(
      name, opt.seed, topo, dur_us, 0, 0, kBaseTransports, wl, ""));
  if (!sc.ok()) return sc.status();
  absl::StatusOr<std::vector<RunResult>> rs =
      RunAll(*sc, opt, suite + "/" + name);
  if (!rs.ok()) return rs.status();
  Value sj = Value::Object();
  sj.Set("name", Value::String(suite == "incast" ? name : "incast/" + name));
  sj.Set("description",
         Value::String(absl::StrFormat(
             "hosts 15..9 each send %d MiB to host 0 (7-to-1 incast) on an "
             "8-plane clos2 with 16 hosts; victim flow 8 -> 4 (%d MiB) from "
             "the incast senders' T0",
             bytes >> 20, victim >> 20)));
  sj.Set("fault_spans_us", Value::Array());
  sj.Set("table_keys", StringArray({"completed", "victim_fair_share_fraction",
                                    "victim_fct_us", "incast_goodput_fraction",
                                    "incast_jain_index"}));
  Value tr = Value::Object();
  for (const RunResult& r : *rs) {
    Value o = Common(r);
    double vg = 0, vfair = 0, vfct = -1;
    double ibytes = 0, iideal = 0;
    Time i0 = kTimeInfinite, i1 = 0;
    std::vector<double> irates;
    for (const FlowResult& f : r.flows) {
      if (f.start < 0) continue;
      const Time end = f.finish >= 0 ? f.finish : r.end_time;
      const double secs =
          static_cast<double>(std::max<Time>(1, end - f.start)) / kSecond;
      const double rate = static_cast<double>(f.delivered) * 8 / secs;
      if (f.group == "victim") {
        vg = rate;
        vfair = f.ideal_bps;
        if (f.finish >= 0) vfct = static_cast<double>(f.finish - f.start) / kUs;
      } else {
        ibytes += static_cast<double>(f.delivered);
        iideal += f.ideal_bps;
        i0 = std::min(i0, f.start);
        i1 = std::max(i1, end);
        irates.push_back(rate);
      }
    }
    o.Set("victim_fair_share_fraction",
          Value::Number(vfair > 0 ? vg / vfair : 0));
    o.Set("victim_goodput_gbps", Value::Number(vg / 1e9));
    o.Set("victim_fair_share_gbps", Value::Number(vfair / 1e9));
    o.Set("victim_fct_us", NumOrNull(vfct >= 0, vfct));
    const double isecs = i1 > i0 ? static_cast<double>(i1 - i0) / kSecond : 0;
    o.Set("incast_goodput_fraction",
          Value::Number(isecs > 0 && iideal > 0 ? ibytes * 8 / isecs / iideal
                                                : 0));
    o.Set("incast_jain_index", Value::Number(sim::JainIndex(irates)));
    tr.Set(r.transport, o);
  }
  sj.Set("transports", tr);
  WriteSeries(opt, suite, name, *rs, std::max<Time>(5 * kMicrosecond, 0), &sj);
  return sj;
}

// --- permutation -----------------------------------------------------------

absl::StatusOr<Value> Permutation(const SuiteOptions& opt,
                                  const std::string& suite) {
  const Topo topo = opt.quick ? Topo{8, 4, 8, 8} : Topo{8, 8, 16, 16};
  const int64_t bytes = opt.quick ? (8 << 20) : (32 << 20);
  const double dur_us = opt.quick ? 3000 : 8000;
  const double warm_us = opt.quick ? 20 : 50;
  const uint32_t hosts = static_cast<uint32_t>(topo.t0 * topo.hosts_per_t0);
  const std::string name = absl::StrFormat("permutation-%d", hosts);
  const std::string wl =
      absl::StrFormat(R"({"type": "permutation", "bytes": %d})", bytes);
  absl::StatusOr<ScenarioConfig> sc =
      Parse(ScenarioJson(name, opt.seed, topo, dur_us, 0, warm_us,
                         kPermutationTransports, wl, ""));
  if (!sc.ok()) return sc.status();
  absl::StatusOr<std::vector<RunResult>> rs =
      RunAll(*sc, opt, suite + "/" + name);
  if (!rs.ok()) return rs.status();
  Value sj = Value::Object();
  sj.Set("name",
         Value::String(suite == "permutation" ? name : "permutation/" + name));
  sj.Set(
      "description",
      Value::String(absl::StrFormat(
          "random permutation, %d MiB per host, %d hosts on an 8-plane "
          "clos2 (%d T0 x %d hosts, %d T1 per plane, non-blocking); goodput "
          "measured after a %g us warm-up",
          bytes >> 20, hosts, topo.t0, topo.hosts_per_t0, topo.t1, warm_us)));
  sj.Set("fault_spans_us", Value::Array());
  sj.Set("table_keys",
         StringArray({"completed", "goodput_fraction",
                      "makespan_goodput_fraction", "fct_p99_us"}));
  Value tr = Value::Object();
  for (const RunResult& r : *rs) {
    Value o = Common(r);
    o.Set("goodput_fraction", Value::Number(r.goodput_fraction));
    o.Set("fct_p99_us", Value::Number(Percentile(Fcts(r), 0.99)));
    tr.Set(r.transport, o);
  }
  sj.Set("transports", tr);
  WriteSeries(opt, suite, name, *rs,
              std::max<Time>(5 * kMicrosecond, sc->duration / 200), &sj);
  return sj;
}

// --- link-flaps ------------------------------------------------------------

absl::StatusOr<Value> LinkFlaps(const SuiteOptions& opt,
                                const std::string& suite) {
  const Topo topo = opt.quick ? Topo{8, 4, 4, 4} : Topo{8, 4, 8, 8};
  const int64_t bytes = opt.quick ? (512 << 10) : (1 << 20);
  const int flaps = opt.quick ? 20 : 100;
  const double start_us = 5, end_us = opt.quick ? 85 : 355;
  const double down_us = opt.quick ? 20 : 50;
  const double dur_us = opt.quick ? 3000 : 8000;
  const uint32_t hosts = static_cast<uint32_t>(topo.t0 * topo.hosts_per_t0);
  const std::string name = absl::StrFormat("all-to-all-%d", hosts);
  const std::string wl =
      absl::StrFormat(R"({"type": "all_to_all", "bytes": %d})", bytes);
  const std::string faults = absl::StrFormat(
      R"([{"type": "random_flaps", "count": %d, "start_us": %g, "end_us": %g,)"
      R"( "down_us": %g}])",
      flaps, start_us, end_us, down_us);
  absl::StatusOr<ScenarioConfig> base =
      Parse(ScenarioJson(name + "-no-flaps", opt.seed, topo, dur_us, 0, 0,
                         kLinkFlapsTransports, wl, ""));
  if (!base.ok()) return base.status();
  absl::StatusOr<ScenarioConfig> sc = Parse(ScenarioJson(
      name, opt.seed, topo, dur_us, 0, 0, kLinkFlapsTransports, wl, faults));
  if (!sc.ok()) return sc.status();
  absl::StatusOr<std::vector<RunResult>> r0 =
      RunAll(*base, opt, suite + "/" + name + " (no flaps)");
  if (!r0.ok()) return r0.status();
  absl::StatusOr<std::vector<RunResult>> rs =
      RunAll(*sc, opt, suite + "/" + name);
  if (!rs.ok()) return rs.status();
  const double fabric_links =
      static_cast<double>(topo.planes) * topo.t0 * topo.t1;
  Value sj = Value::Object();
  sj.Set("name", Value::String(name));
  sj.Set("description",
         Value::String(absl::StrFormat(
             "all-to-all, %d KiB per pair, %d hosts on an 8-plane clos2 "
             "(%d T0-T1 links); %d random T0-T1 link flaps between %g and "
             "%g us (%.0f per simulated second), each down %g us; compared "
             "with the same run without flaps",
             bytes >> 10, hosts, static_cast<int>(fabric_links), flaps,
             start_us, end_us, flaps / ((end_us - start_us) * 1e-6), down_us)));
  sj.Set("flaps", Value::Int(flaps));
  sj.Set("flaps_per_second",
         Value::Number(flaps / ((end_us - start_us) * 1e-6)));
  sj.Set("flap_down_us", Value::Number(down_us));
  if (!rs->empty()) {
    sj.Set("fault_spans_us",
           SpansJson(FaultSpans(rs->front(), rs->front().end_time)));
  }
  sj.Set("table_keys",
         StringArray({"completed", "flap_window_throughput_loss_fraction",
                      "flap_window_capacity_removed_fraction",
                      "throughput_loss_fraction", "capacity_removed_fraction",
                      "fct_p99_vs_no_flaps", "connection_errors",
                      "dead_path_data_packets", "dead_path_retransmissions",
                      "dead_path_sends_per_outage", "dead_route_group_outages",
                      "dead_hop_outages", "timeouts"}));
  Value tr = Value::Object();
  for (size_t i = 0; i < rs->size(); ++i) {
    const RunResult& r = (*rs)[i];
    const RunResult& n = (*r0)[i];
    Value o = Common(r);
    const double g = r.makespan_goodput_fraction,
                 g0 = n.makespan_goodput_fraction;
    o.Set("goodput_vs_no_flaps", Value::Number(g0 > 0 ? g / g0 : 0));
    o.Set("throughput_loss_fraction", Value::Number(g0 > 0 ? 1 - g / g0 : 1));
    o.Set("flow_goodput_vs_no_flaps",
          Value::Number(n.goodput_fraction > 0
                            ? r.goodput_fraction / n.goodput_fraction
                            : 0));
    // Capacity taken away: link-time down over link-time available while
    // the undisturbed run of this transport ran (its first start to its
    // last completion).
    const Time t0 = n.first_start, t1 = std::max(n.end_time, t0 + 1);
    double down = 0;
    for (const Span& s : FaultSpans(r, t1)) {
      down += static_cast<double>(
          std::max<Time>(0, std::min(s.to, t1) - std::max(s.from, t0)));
    }
    o.Set("capacity_removed_fraction",
          Value::Number(down / (fabric_links * static_cast<double>(t1 - t0))));
    // The same two figures over the flap window only (first flap to the
    // last one's end, cut at the undisturbed run's end): throughput while
    // links flap against the capacity they take away, without the tail of
    // the last straggler (fct_p99 and the makespan figures above show that).
    const Time w0 = std::max(t0, static_cast<Time>(start_us * kMicrosecond));
    const Time w1 =
        std::min(t1, static_cast<Time>((end_us + down_us) * kMicrosecond));
    double wdown = 0;
    for (const Span& s : FaultSpans(r, w1)) {
      wdown += static_cast<double>(
          std::max<Time>(0, std::min(s.to, w1) - std::max(s.from, w0)));
    }
    const double wr = RateBps(r.samples, w0, w1),
                 wr0 = RateBps(n.samples, w0, w1);
    o.Set("flap_window_us",
          Value::Number(static_cast<double>(std::max<Time>(0, w1 - w0)) / kUs));
    o.Set("flap_window_goodput_vs_no_flaps",
          Value::Number(wr0 > 0 ? wr / wr0 : 0));
    o.Set("flap_window_throughput_loss_fraction",
          Value::Number(wr0 > 0 ? std::max(0.0, 1 - wr / wr0) : 1));
    o.Set("flap_window_capacity_removed_fraction",
          Value::Number(
              w1 > w0 ? wdown / (fabric_links * static_cast<double>(w1 - w0))
                      : 0));
    const double p99 = Percentile(Fcts(r), 0.99),
                 p990 = Percentile(Fcts(n), 0.99);
    o.Set("fct_p99_us", Value::Number(p99));
    o.Set("no_flaps_fct_p99_us", Value::Number(p990));
    o.Set("fct_p99_vs_no_flaps", Value::Number(p990 > 0 ? p99 / p990 : 0));
    o.Set("no_flaps_completed", Value::Bool(n.completed));
    o.Set("no_flaps_goodput_fraction", Value::Number(g0));
    // The undisturbed run's own counters (retransmissions, path timeouts,
    // ECN marks: what the all-to-all costs without any flap).
    o.Set("no_flaps", Common(n));
    tr.Set(r.transport, o);
  }
  sj.Set("transports", tr);
  WriteSeries(opt, suite, name, *rs, 5 * kMicrosecond, &sj);
  return sj;
}

// --- t1-reboot -------------------------------------------------------------

struct Steps {
  std::vector<Time> end;  // per step: last completion (or run end)
  bool complete = true;
};

Steps StepEnds(const RunResult& r) {
  Steps s;
  for (const FlowResult& f : r.flows) {
    if (f.step < 0) continue;
    const size_t k = static_cast<size_t>(f.step);
    if (s.end.size() <= k) s.end.resize(k + 1, 0);
    if (f.finish < 0) s.complete = false;
    s.end[k] = std::max(s.end[k], f.finish >= 0 ? f.finish : r.end_time);
  }
  return s;
}

absl::StatusOr<Value> T1Reboot(const SuiteOptions& opt,
                               const std::string& suite) {
  const Topo topo{8, 4, 4, 4};  // 16 hosts, 32 T1
  const int64_t bytes = opt.quick ? (32 << 20) : (256 << 20);
  const int steps = opt.quick ? 8 : 30;
  const double at_us = opt.quick ? 40 : 1000;
  const double down_us = opt.quick ? 80 : 2000;
  const double dur_us = opt.quick ? 5000 : 30000;
  const std::string name = "ring-allreduce-16";
  const std::string wl = absl::StrFormat(
      R"({"type": "ring_allreduce", "bytes": %d, "steps": %d})", bytes, steps);
  std::string faults = "[";
  for (int p = 0; p < 4; ++p) {
    faults += absl::StrFormat(
        R"(%s{"type": "switch_reboot", "switch": {"tier": "t1", "plane": %d,)"
        R"( "index": %d}, "at_us": %g, "duration_us": %g})",
        p ? ", " : "", p, p % topo.t1, at_us, down_us);
  }
  faults += "]";
  absl::StatusOr<ScenarioConfig> base =
      Parse(ScenarioJson(name + "-undisturbed", opt.seed, topo, dur_us, 0, 0,
                         kBaseTransports, wl, ""));
  if (!base.ok()) return base.status();
  absl::StatusOr<ScenarioConfig> sc = Parse(ScenarioJson(
      name, opt.seed, topo, dur_us, 0, 0, kBaseTransports, wl, faults));
  if (!sc.ok()) return sc.status();
  absl::StatusOr<std::vector<RunResult>> r0 =
      RunAll(*base, opt, suite + "/" + name + " (undisturbed)");
  if (!r0.ok()) return r0.status();
  absl::StatusOr<std::vector<RunResult>> rs =
      RunAll(*sc, opt, suite + "/" + name);
  if (!rs.ok()) return rs.status();
  const double removed = 4.0 / (topo.planes * topo.t1);
  const Time down0 = static_cast<Time>(at_us * kMicrosecond);
  const Time down1 = static_cast<Time>((at_us + down_us) * kMicrosecond);
  Value sj = Value::Object();
  sj.Set("name", Value::String(name));
  sj.Set("description",
         Value::String(absl::StrFormat(
             "ring all-reduce of %d MiB over 16 hosts (%d steps of %d KiB per "
             "host) on an 8-plane clos2 with 4 T1 per plane; T1 switches "
             "index p of planes 0-3 (4 of 32) reboot at %g us for %g us",
             bytes >> 20, steps, (bytes / 16) >> 10, at_us, down_us)));
  Value spans = Value::Array();
  {
    Value p = Value::Array();
    p.Push(Value::Number(at_us));
    p.Push(Value::Number(at_us + down_us));
    spans.Push(p);
  }
  sj.Set("fault_spans_us", spans);
  sj.Set("table_keys",
         StringArray({"completed", "step_time_us", "undisturbed_step_time_us",
                      "step_time_ratio", "throughput_loss_fraction",
                      "capacity_removed_fraction", "connection_errors",
                      "dead_path_data_packets", "dead_path_retransmissions",
                      "dead_path_sends_per_outage", "dead_route_group_outages",
                      "dead_hop_outages", "timeouts"}));
  Value tr = Value::Object();
  for (size_t i = 0; i < rs->size(); ++i) {
    const RunResult& r = (*rs)[i];
    const RunResult& n = (*r0)[i];
    Value o = Common(r);
    const Steps s = StepEnds(r), s0 = StepEnds(n);
    // Undisturbed step time: mean over all steps of the run without reboots.
    double und = 0;
    if (!s0.end.empty()) {
      und = static_cast<double>(s0.end.back() - n.first_start) / kUs /
            static_cast<double>(s0.end.size());
    }
    // Disturbed: steps of this run that overlap the reboot interval.
    double sum = 0, mx = 0;
    int cnt = 0;
    Time prev = r.first_start;
    for (Time e : s.end) {
      const double st = static_cast<double>(e - prev) / kUs;
      mx = std::max(mx, st);
      if (e > down0 && prev < down1) {
        sum += st;
        ++cnt;
      }
      prev = e;
    }
    const double dist = cnt > 0 ? sum / cnt : 0;
    o.Set("step_time_us", Value::Number(dist));
    o.Set("disturbed_steps", Value::Int(cnt));
    o.Set("max_step_time_us", Value::Number(mx));
    o.Set("undisturbed_step_time_us", Value::Number(und));
    o.Set("step_time_ratio", Value::Number(und > 0 ? dist / und : 0));
    o.Set("throughput_loss_fraction",
          Value::Number(dist > 0 ? std::max(0.0, 1 - und / dist) : 1));
    o.Set("capacity_removed_fraction", Value::Number(removed));
    o.Set("allreduce_time_us",
          Value::Number(
              s.end.empty()
                  ? 0
                  : static_cast<double>(s.end.back() - r.first_start) / kUs));
    o.Set("undisturbed_allreduce_time_us",
          Value::Number(
              s0.end.empty()
                  ? 0
                  : static_cast<double>(s0.end.back() - n.first_start) / kUs));
    o.Set("undisturbed_completed", Value::Bool(n.completed));
    tr.Set(r.transport, o);
  }
  sj.Set("transports", tr);
  WriteSeries(opt, suite, name, *rs, std::max<Time>(5 * kMicrosecond, 0), &sj);
  return sj;
}

absl::Status Add(absl::StatusOr<Value> v, Value* scenarios) {
  if (!v.ok()) return v.status();
  scenarios->Push(*std::move(v));
  return absl::OkStatus();
}

std::string Cell(const Value* v) {
  if (v == nullptr || v->is_null()) return "-";
  if (v->is_bool()) return v->as_bool() ? "yes" : "NO";
  if (v->is_string()) return v->as_string();
  if (v->is_number()) {
    if (v->is_integer()) return absl::StrFormat("%d", v->as_int());
    const double x = v->as_double();
    if (std::fabs(x) >= 1000) return absl::StrFormat("%.0f", x);
    if (std::fabs(x) >= 10) return absl::StrFormat("%.1f", x);
    return absl::StrFormat("%.3f", x);
  }
  return "?";
}

}  // namespace

const std::vector<std::string>& SuiteNames() {
  static const std::vector<std::string>* names = new std::vector<std::string>{
      "port-loss", "link-flaps",  "t1-reboot", "random-loss",
      "incast",    "permutation", "headline"};
  return *names;
}

absl::Status ValidateSuiteOptions(const std::string& suite,
                                  const SuiteOptions& opt) {
  const std::vector<std::string>& suites = SuiteNames();
  if (!opt.only_transport.empty() &&
      std::find(suites.begin(), suites.end(), suite) != suites.end()) {
    const std::vector<std::string> names = SuiteTransportNames(suite);
    if (std::find(names.begin(), names.end(), opt.only_transport) ==
        names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "suite '", suite, "' runs no transport '", opt.only_transport,
          "' (it runs ", absl::StrJoin(names, ", "), ")"));
    }
  }
  if (!(opt.oracle_reroute_after_us < 0) &&
      !(opt.oracle_reroute_after_us <= 1e9)) {
    return absl::InvalidArgumentError(
        absl::StrCat("oracle_reroute_after_us ", opt.oracle_reroute_after_us,
                     " is not a time in [0, 1e9] us (or < 0: off)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<json::Value> RunSuite(const std::string& suite,
                                     const SuiteOptions& opt_in) {
  SuiteOptions opt = opt_in;
  if (absl::Status v = ValidateSuiteOptions(suite, opt); !v.ok()) return v;
  Value sc = Value::Array();
  absl::Status st;
  if (suite == "port-loss") {
    st = Add(PortLoss(opt, suite, false), &sc);
    if (st.ok()) st = Add(PortLoss(opt, suite, true), &sc);
  } else if (suite == "random-loss") {
    for (double r : {0.0001, 0.001, 0.01, 0.05}) {
      if (st.ok()) st = Add(RandomLoss(opt, suite, r), &sc);
    }
  } else if (suite == "incast") {
    st = Add(Incast(opt, suite), &sc);
  } else if (suite == "permutation") {
    st = Add(Permutation(opt, suite), &sc);
  } else if (suite == "link-flaps") {
    st = Add(LinkFlaps(opt, suite), &sc);
  } else if (suite == "t1-reboot") {
    st = Add(T1Reboot(opt, suite), &sc);
  } else if (suite == "headline") {
    opt.quick = true;
    st = Add(PortLoss(opt, suite, false), &sc);
    if (st.ok()) st = Add(RandomLoss(opt, suite, 0.001), &sc);
    if (st.ok()) st = Add(RandomLoss(opt, suite, 0.01), &sc);
    if (st.ok()) st = Add(Incast(opt, suite), &sc);
    if (st.ok()) st = Add(Permutation(opt, suite), &sc);
  } else {
    std::string all;
    for (const std::string& n : SuiteNames())
      all += (all.empty() ? "" : ", ") + n;
    return absl::InvalidArgumentError("unknown suite '" + suite + "' (" + all +
                                      ")");
  }
  if (!st.ok()) return st;
  Value root = Value::Object();
  root.Set("suite", Value::String(suite));
  root.Set("quick", Value::Bool(opt.quick));
  root.Set("seed", Value::Int(static_cast<int64_t>(opt.seed)));
  root.Set("scenarios", sc);
  return root;
}

std::string FormatTable(const json::Value& res) {
  std::string out;
  const Value* scs = res.Find("scenarios");
  if (scs == nullptr || !scs->is_array()) return out;
  for (const Value& s : scs->items()) {
    const Value* name = s.Find("name");
    out += absl::StrFormat("\n== %s ==\n",
                           name && name->is_string() ? name->as_string() : "?");
    const Value* keys = s.Find("table_keys");
    const Value* tr = s.Find("transports");
    if (keys == nullptr || tr == nullptr) continue;
    std::vector<std::string> cols;
    for (const Value& k : keys->items()) cols.push_back(k.as_string());
    std::vector<size_t> width;
    out += absl::StrFormat("%-16s", "transport");
    for (const std::string& c : cols) {
      width.push_back(std::max<size_t>(9, c.size()));
      out += absl::StrFormat(" %*s", static_cast<int>(width.back()), c);
    }
    out += "\n";
    for (const auto& [tname, tv] : tr->members()) {
      out += absl::StrFormat("%-16s", tname);
      for (size_t i = 0; i < cols.size(); ++i) {
        out += absl::StrFormat(" %*s", static_cast<int>(width[i]),
                               Cell(tv.Find(cols[i])));
      }
      const Value* inv = tv.Find("invariants");
      if (inv && inv->is_string() && inv->as_string() != "ok") {
        out += "  invariants: " + inv->as_string();
      }
      out += "\n";
    }
  }
  return out;
}

}  // namespace prism::bench
