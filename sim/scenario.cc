#include "sim/scenario.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_format.h"

namespace prism::sim {
namespace {

absl::Status Bad(const std::string& m) {
  return absl::InvalidArgumentError("scenario: " + m);
}

// A time field in microseconds: in [0, kMaxScenarioUs], above 0 when
// `positive`; NaN refused.
absl::Status CheckUs(double us, const std::string& key, bool positive) {
  if (!(us >= 0) || us > kMaxScenarioUs || (positive && us == 0)) {
    return Bad(absl::StrFormat("%s = %g must be in %s0, 1e9]", key, us,
                               positive ? "(" : "["));
  }
  return absl::OkStatus();
}

#define PRISM_CHECK_US(d, key, positive)                \
  do {                                                  \
    absl::Status _st = CheckUs((d), (key), (positive)); \
    if (!_st.ok()) return _st;                          \
  } while (0)

#define PRISM_ASSIGN_OR(lhs, expr)    \
  do {                                \
    auto _r = (expr);                 \
    if (!_r.ok()) return _r.status(); \
    lhs = *_r;                        \
  } while (0)

// One entry of "fabric.overrides": {"tier": "t0"|"t1"|"t2", "plane": n,
// "index": n, "ports": "all"|"down"|"up", "trimming": bool,
// "trim_threshold_bytes": n, "ecn": bool | {"enabled", "kmin_bytes",
// "kmax_bytes", "pmax"}}; selectors left out match everything.
absl::StatusOr<QueueOverride> ParseOverride(const json::Value& o) {
  if (!o.is_object()) return Bad("fabric.overrides entries must be objects");
  absl::Status keys =
      o.CheckKeys({"tier", "plane", "index", "ports", "trimming",
                   "trim_threshold_bytes", "ecn", "comment"},
                  "scenario: fabric.overrides");
  if (!keys.ok()) return keys;
  QueueOverride q;
  std::string tier, ports;
  PRISM_ASSIGN_OR(tier, o.GetString("tier", "all"));
  if (tier == "t0") {
    q.tier = static_cast<int>(routing::NodeKind::kT0);
  } else if (tier == "t1") {
    q.tier = static_cast<int>(routing::NodeKind::kT1);
  } else if (tier == "t2") {
    q.tier = static_cast<int>(routing::NodeKind::kT2);
  } else if (tier != "all") {
    return Bad("fabric.overrides: tier must be t0, t1, t2 or all");
  }
  int64_t x;
  PRISM_ASSIGN_OR(x, o.GetInt("plane", -1));
  if (x < -1 || x >= 64) return Bad("fabric.overrides: plane out of range");
  q.plane = static_cast<int>(x);
  PRISM_ASSIGN_OR(q.index, o.GetInt("index", -1));
  if (q.index < -1) return Bad("fabric.overrides: index out of range");
  PRISM_ASSIGN_OR(ports, o.GetString("ports", "all"));
  if (ports == "down") {
    q.ports = QueueOverride::Ports::kDown;
  } else if (ports == "up") {
    q.ports = QueueOverride::Ports::kUp;
  } else if (ports != "all") {
    return Bad("fabric.overrides: ports must be all, down or up");
  }
  if (o.Find("trimming")) {
    bool b;
    PRISM_ASSIGN_OR(b, o.GetBool("trimming", true));
    q.trimming = b;
  }
  if (o.Find("trim_threshold_bytes")) {
    PRISM_ASSIGN_OR(x, o.GetInt("trim_threshold_bytes", 0));
    if (x < 0 || x > (1 << 30))
      return Bad("fabric.overrides: trim_threshold_bytes out of range");
    q.trim_threshold_bytes = static_cast<uint32_t>(x);
  }
  if (const json::Value* e = o.Find("ecn")) {
    if (e->is_bool()) {
      q.ecn = e->as_bool();
    } else if (e->is_object()) {
      absl::Status ek = e->CheckKeys(
          {"enabled", "kmin_bytes", "kmax_bytes", "pmax", "comment"},
          "scenario: fabric.overrides.ecn");
      if (!ek.ok()) return ek;
      bool b;
      PRISM_ASSIGN_OR(b, e->GetBool("enabled", true));
      q.ecn = b;
      if (e->Find("kmin_bytes")) {
        PRISM_ASSIGN_OR(x, e->GetInt("kmin_bytes", 0));
        if (x < 0 || x > (1 << 30))
          return Bad("fabric.overrides: ecn.kmin_bytes out of range");
        q.ecn_kmin_bytes = static_cast<uint32_t>(x);
      }
      if (e->Find("kmax_bytes")) {
        PRISM_ASSIGN_OR(x, e->GetInt("kmax_bytes", 0));
        if (x < 1 || x > (1 << 30))
          return Bad("fabric.overrides: ecn.kmax_bytes out of range");
        q.ecn_kmax_bytes = static_cast<uint32_t>(x);
      }
      if (q.ecn_kmin_bytes && q.ecn_kmax_bytes &&
          *q.ecn_kmax_bytes <= *q.ecn_kmin_bytes) {
        return Bad("fabric.overrides: ecn needs kmin < kmax");
      }
      if (e->Find("pmax")) {
        double d;
        PRISM_ASSIGN_OR(d, e->GetDouble("pmax", 0));
        if (d < 0 || d > 1) return Bad("fabric.overrides: ecn.pmax in [0,1]");
        q.ecn_pmax = d;
      }
    } else {
      return Bad("fabric.overrides: ecn must be a bool or an object");
    }
  }
  return q;
}

absl::Status ParseFabric(const json::Value* v, ScenarioConfig* sc) {
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_object()) return Bad("fabric must be an object");
  absl::Status keys = v->CheckKeys(
      {"forwarding", "buffer_bytes", "control_buffer_bytes",
       "trim_threshold_bytes", "nic_buffer_bytes", "nic_queue_packets",
       "nic_pull_watermark", "wire_overhead_bytes", "lazy_switch_ports",
       "trimming", "trim_last_hop", "routing_convergence_us", "ecn",
       "overrides", "comment"},
      "scenario: fabric");
  if (!keys.ok()) return keys;
  FabricConfig& f = sc->fabric;
  std::string fwd;
  PRISM_ASSIGN_OR(fwd, v->GetString("forwarding", sc->srv6 ? "srv6" : "ecmp"));
  if (fwd != "srv6" && fwd != "ecmp")
    return Bad("forwarding must be srv6 or ecmp");
  sc->srv6 = fwd == "srv6";
  int64_t x;
  PRISM_ASSIGN_OR(x, v->GetInt("buffer_bytes", f.buffer_bytes));
  if (x < 1500 || x > (1 << 30)) return Bad("buffer_bytes out of range");
  f.buffer_bytes = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(x, v->GetInt("control_buffer_bytes", f.control_buffer_bytes));
  if (x < 1500 || x > (1 << 30))
    return Bad("control_buffer_bytes out of range");
  f.control_buffer_bytes = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(x, v->GetInt("trim_threshold_bytes", f.trim_threshold_bytes));
  if (x < 0 || x > (1 << 30)) return Bad("trim_threshold_bytes out of range");
  f.trim_threshold_bytes = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(x, v->GetInt("nic_buffer_bytes", f.nic_buffer_bytes));
  if (x < 9000 || x > (1 << 30)) return Bad("nic_buffer_bytes out of range");
  f.nic_buffer_bytes = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(x, v->GetInt("nic_queue_packets", f.nic_queue_packets));
  if (x < 1 || x > 4096) return Bad("nic_queue_packets must be in 1..4096");
  f.nic_queue_packets = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(x, v->GetInt("nic_pull_watermark", f.nic_pull_watermark));
  if (x < -1 || x > 4096) return Bad("nic_pull_watermark must be in -1..4096");
  f.nic_pull_watermark = static_cast<int32_t>(x);
  PRISM_ASSIGN_OR(x, v->GetInt("wire_overhead_bytes", f.wire_overhead_bytes));
  if (x < 0 || x > 1024) return Bad("wire_overhead_bytes out of range");
  f.wire_overhead_bytes = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(f.lazy_switch_ports,
                  v->GetBool("lazy_switch_ports", f.lazy_switch_ports));
  PRISM_ASSIGN_OR(f.trimming, v->GetBool("trimming", f.trimming));
  PRISM_ASSIGN_OR(f.trim_last_hop,
                  v->GetBool("trim_last_hop", f.trim_last_hop));
  double conv;
  PRISM_ASSIGN_OR(conv,
                  v->GetDouble("routing_convergence_us",
                               double(f.routing_convergence) / kMicrosecond));
  PRISM_CHECK_US(conv, "routing_convergence_us", false);
  f.routing_convergence = static_cast<Time>(conv * kMicrosecond);
  if (const json::Value* e = v->Find("ecn")) {
    if (e->is_bool()) {
      f.ecn = e->as_bool();
    } else if (e->is_object()) {
      absl::Status ek = e->CheckKeys({"enabled", "kmin_bytes", "kmax_bytes",
                                      "pmax", "last_hop", "comment"},
                                     "scenario: fabric.ecn");
      if (!ek.ok()) return ek;
      PRISM_ASSIGN_OR(f.ecn, e->GetBool("enabled", true));
      PRISM_ASSIGN_OR(x, e->GetInt("kmin_bytes", f.ecn_kmin_bytes));
      int64_t y;
      PRISM_ASSIGN_OR(y, e->GetInt("kmax_bytes", f.ecn_kmax_bytes));
      if (x < 0 || y <= x || y > (1 << 30))
        return Bad("ecn needs 0 <= kmin < kmax");
      f.ecn_kmin_bytes = static_cast<uint32_t>(x);
      f.ecn_kmax_bytes = static_cast<uint32_t>(y);
      PRISM_ASSIGN_OR(f.ecn_pmax, e->GetDouble("pmax", f.ecn_pmax));
      if (f.ecn_pmax < 0 || f.ecn_pmax > 1)
        return Bad("ecn.pmax must be in [0,1]");
      PRISM_ASSIGN_OR(f.ecn_last_hop, e->GetBool("last_hop", f.ecn_last_hop));
    } else {
      return Bad("ecn must be a bool or an object");
    }
  }
  if (const json::Value* ov = v->Find("overrides")) {
    if (!ov->is_array()) return Bad("fabric.overrides must be an array");
    f.overrides.clear();
    for (const json::Value& o : ov->items()) {
      absl::StatusOr<QueueOverride> q = ParseOverride(o);
      if (!q.ok()) return q.status();
      f.overrides.push_back(*q);
    }
  }
  return absl::OkStatus();
}

// The settings of a transport ("transport_defaults" and each "transports"
// entry, which may also carry its name, kind and type).
constexpr std::string_view kTransportKeys[] = {"mtu",
                                               "path_policy",
                                               "congestion",
                                               "num_paths",
                                               "rto_min_us",
                                               "probe_interval_us",
                                               "payload_checksum",
                                               "oracle_reroute_after_us",
                                               "fate_sharing",
                                               "group_balance",
                                               "tail_resend",
                                               "spurious_undo",
                                               "window_packets",
                                               "max_outstanding_messages",
                                               "qps",
                                               "rto_us",
                                               "window_bytes",
                                               "dcqcn",
                                               "ack_every",
                                               "comment"};

// `entry`: a "transports" entry (which may also name itself and its kind),
// not "transport_defaults".
absl::Status ParseTransportFields(const json::Value& v, TransportConfig* t,
                                  bool entry) {
  if (!v.is_object()) return absl::OkStatus();
  absl::Status keys =
      entry ? v.CheckKeys(kTransportKeys, {"name", "kind", "type"},
                          "scenario: transports entry")
            : v.CheckKeys(kTransportKeys, "scenario: transport_defaults");
  if (!keys.ok()) return keys;
  int64_t x;
  PRISM_ASSIGN_OR(x, v.GetInt("mtu", t->mtu));
  if (x < 256 || x > 65000) return Bad("mtu must be in 256..65000");
  t->mtu = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(t->path_policy, v.GetString("path_policy", t->path_policy));
  PRISM_ASSIGN_OR(t->congestion, v.GetString("congestion", t->congestion));
  PRISM_ASSIGN_OR(x, v.GetInt("num_paths", t->num_paths));
  if (x < 1 || x > 65535) return Bad("num_paths must be in 1..65535");
  t->num_paths = static_cast<uint16_t>(x);
  double d;
  PRISM_ASSIGN_OR(d,
                  v.GetDouble("rto_min_us", double(t->rto_min) / kMicrosecond));
  PRISM_CHECK_US(d, "rto_min_us", true);
  t->rto_min = static_cast<Time>(d * kMicrosecond);
  PRISM_ASSIGN_OR(d, v.GetDouble("probe_interval_us",
                                 double(t->probe_interval) / kMicrosecond));
  PRISM_CHECK_US(d, "probe_interval_us", true);
  t->probe_interval = static_cast<Time>(d * kMicrosecond);
  PRISM_ASSIGN_OR(t->payload_checksum,
                  v.GetBool("payload_checksum", t->payload_checksum));
  PRISM_ASSIGN_OR(d, v.GetDouble("oracle_reroute_after_us", -1));
  if (!(d < 0)) {  // negative: off
    PRISM_CHECK_US(d, "oracle_reroute_after_us", false);
  }
  t->oracle_reroute_after = d < 0 ? -1 : static_cast<Time>(d * kMicrosecond);
  PRISM_ASSIGN_OR(t->fate_sharing, v.GetBool("fate_sharing", t->fate_sharing));
  PRISM_ASSIGN_OR(t->group_balance,
                  v.GetBool("group_balance", t->group_balance));
  PRISM_ASSIGN_OR(t->tail_resend, v.GetBool("tail_resend", t->tail_resend));
  PRISM_ASSIGN_OR(t->spurious_undo,
                  v.GetBool("spurious_undo", t->spurious_undo));
  PRISM_ASSIGN_OR(x, v.GetInt("window_packets", t->window_packets));
  if (x != 0 && (x < 256 || x > 65536 || (x & (x - 1)) != 0)) {
    return Bad("window_packets must be 0 or a power of two in 256..65536");
  }
  t->window_packets = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(x, v.GetInt("max_outstanding_messages", t->max_messages));
  if (x < 0 || x > (1 << 20)) {
    return Bad("max_outstanding_messages must be in 0..1048576");
  }
  t->max_messages = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(x, v.GetInt("qps", t->qps));
  if (x < 0 || x > 4096) return Bad("qps must be in 0..4096");
  t->qps = static_cast<uint32_t>(x);
  PRISM_ASSIGN_OR(d, v.GetDouble("rto_us", double(t->rto) / kMicrosecond));
  PRISM_CHECK_US(d, "rto_us", false);
  t->rto = static_cast<Time>(d * kMicrosecond);
  PRISM_ASSIGN_OR(
      x, v.GetInt("window_bytes", static_cast<int64_t>(t->window_bytes)));
  if (x < 0) return Bad("window_bytes must be >= 0");
  t->window_bytes = static_cast<uint64_t>(x);
  PRISM_ASSIGN_OR(t->dcqcn, v.GetBool("dcqcn", t->dcqcn));
  PRISM_ASSIGN_OR(x, v.GetInt("ack_every", t->ack_every));
  if (x < 1 || x > 1024) return Bad("ack_every must be in 1..1024");
  t->ack_every = static_cast<uint32_t>(x);
  return absl::OkStatus();
}

absl::StatusOr<TransportConfig> NamedTransport(
    const std::string& name, const TransportConfig& defaults) {
  TransportConfig t = defaults;
  t.name = name;
  if (name == "prism") {
    t.type = "prism";
  } else if (name == "prism-oblivious") {
    t.type = "prism";
    t.path_policy = "rotation";
  } else if (name == "prism-reps") {
    t.type = "prism";
    t.path_policy = "reps";
  } else if (name == "prism-p2c") {
    t.type = "prism";
    t.path_policy = "p2c";
  } else if (name == "prism-random") {
    t.type = "prism";
    t.path_policy = "random";
  } else if (name == "prism-fa") {  // the earlier opt-in name: = prism
    t.type = "prism";
    t.congestion = "nscc-fa";
  } else if (name == "prism-classic") {  // NSCC's plain quick adapt
    t.type = "prism";
    t.congestion = "nscc-classic";
  } else if (name == "roce") {
    t.type = "roce";
  } else if (name == "multiqp") {
    t.type = "multiqp";
  } else {
    return Bad("unknown transport '" + name +
               "' (prism, prism-oblivious, prism-reps, prism-p2c, "
               "prism-random, prism-fa, prism-classic, roce, multiqp)");
  }
  return t;
}

std::string Hex(uint64_t x) { return absl::StrFormat("%016x", x); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx);
  const size_t hi = std::min(v.size() - 1, lo + 1);
  const double frac = idx - static_cast<double>(lo);
  return v[lo] * (1 - frac) + v[hi] * frac;
}

}  // namespace

double JainIndex(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  if (x.empty() || s2 == 0) return 0;
  return s * s / (static_cast<double>(x.size()) * s2);
}

absl::StatusOr<ScenarioConfig> ParseScenario(const json::Value& v,
                                             const std::string& base_dir) {
  if (!v.is_object()) return Bad("top level must be an object");
  absl::Status keys = v.CheckKeys(
      {"name", "comment", "seed", "topology", "fabric", "duration_us",
       "sample_interval_us", "warmup_us", "timeseries", "check_bytes",
       "scheduler", "workload", "faults", "transport_defaults", "transports"},
      "scenario");
  if (!keys.ok()) return keys;
  ScenarioConfig sc;
  sc.base_dir = base_dir;
  PRISM_ASSIGN_OR(sc.name, v.GetString("name", "scenario"));
  int64_t seed;
  PRISM_ASSIGN_OR(seed, v.GetInt("seed", 1));
  sc.seed = static_cast<uint64_t>(seed);
  const json::Value* topo = v.Find("topology");
  if (topo == nullptr) return Bad("missing topology");
  absl::StatusOr<routing::TopologySpec> spec =
      routing::Topology::SpecFromJson(*topo);
  if (!spec.ok()) return spec.status();
  sc.topology = *spec;
  absl::Status st = ParseFabric(v.Find("fabric"), &sc);
  if (!st.ok()) return st;
  double d;
  PRISM_ASSIGN_OR(d, v.GetDouble("duration_us", 10000));
  PRISM_CHECK_US(d, "duration_us", true);
  sc.duration = static_cast<Time>(d * kMicrosecond);
  PRISM_ASSIGN_OR(d, v.GetDouble("sample_interval_us", 0));
  PRISM_CHECK_US(d, "sample_interval_us", false);
  sc.sample_interval = static_cast<Time>(d * kMicrosecond);
  PRISM_ASSIGN_OR(d, v.GetDouble("warmup_us", 0));
  PRISM_CHECK_US(d, "warmup_us", false);
  sc.warmup = static_cast<Time>(d * kMicrosecond);
  PRISM_ASSIGN_OR(sc.timeseries, v.GetBool("timeseries", true));
  PRISM_ASSIGN_OR(sc.check_bytes, v.GetBool("check_bytes", true));
  std::string sched;
  PRISM_ASSIGN_OR(sched, v.GetString("scheduler", "exact"));
  if (sched == "batched") {
    sc.scheduler = Scheduler::kBatched;
  } else if (sched != "exact") {
    return Bad("scheduler must be exact or batched");
  }
  if (sc.scheduler == Scheduler::kBatched && sc.fabric.lazy_switch_ports) {
    // A lazy port is caught up from the far end of its link (WireArrive),
    // which a batch may reach before the port's own switch.
    return Bad("scheduler batched needs fabric.lazy_switch_ports off");
  }
  const json::Value* wl = v.Find("workload");
  if (wl == nullptr) return Bad("missing workload");
  sc.workload = *wl;
  if (const json::Value* f = v.Find("faults")) sc.faults = *f;
  TransportConfig defaults;
  if (const json::Value* td = v.Find("transport_defaults")) {
    st = ParseTransportFields(*td, &defaults, /*entry=*/false);
    if (!st.ok()) return st;
  }
  const json::Value* tl = v.Find("transports");
  if (tl == nullptr) {
    sc.transports.push_back(defaults);
  } else {
    if (!tl->is_array() || tl->items().empty()) {
      return Bad("transports must be a non-empty array");
    }
    for (const json::Value& t : tl->items()) {
      std::string name;
      if (t.is_string()) {
        name = t.as_string();
      } else if (t.is_object()) {
        PRISM_ASSIGN_OR(name, t.GetString("name", ""));
      } else {
        return Bad("transports entries must be names or objects");
      }
      // "kind" names the variant (default: the name). "type", as the
      // resolved configuration writes it (DescribeScenario), must agree
      // with the kind; without a "kind", a name that is not a variant of
      // that type takes the type as its kind, so a printed configuration
      // (custom names included) runs again as it was.
      std::string kind = name, type;
      if (t.is_object()) {
        PRISM_ASSIGN_OR(type, t.GetString("type", ""));
        if (!type.empty() && t.Find("kind") == nullptr) {
          absl::StatusOr<TransportConfig> by_name =
              NamedTransport(name, defaults);
          if (!by_name.ok() || by_name->type != type) kind = type;
        }
        PRISM_ASSIGN_OR(kind, t.GetString("kind", kind));
      }
      absl::StatusOr<TransportConfig> tc = NamedTransport(kind, defaults);
      if (!tc.ok()) return tc.status();
      if (!type.empty() && tc->type != type) {
        return Bad("transport '" + name + "': type '" + type +
                   "' does not match kind '" + kind + "' (type '" + tc->type +
                   "')");
      }
      tc->name = name;
      st = ParseTransportFields(t, &*tc, /*entry=*/true);
      if (!st.ok()) return st;
      for (const TransportConfig& o : sc.transports) {
        if (o.name == name)
          return Bad("duplicate transport name '" + name + "'");
      }
      sc.transports.push_back(*tc);
    }
  }
  return sc;
}

absl::StatusOr<ScenarioConfig> LoadScenarioFile(const std::string& path) {
  absl::StatusOr<json::Value> v = json::ParseFile(path);
  if (!v.ok()) return v.status();
  std::string dir = std::filesystem::path(path).parent_path().string();
  return ParseScenario(*v, dir);
}

json::Value DescribeScenario(const ScenarioConfig& sc) {
  using json::Value;
  Value o = Value::Object();
  o.Set("name", Value::String(sc.name));
  o.Set("seed", Value::Int(static_cast<int64_t>(sc.seed)));
  const routing::TopologySpec& t = sc.topology;
  Value tp = Value::Object();
  tp.Set("kind", Value::String(t.kind));
  tp.Set("planes", Value::Int(t.planes));
  tp.Set("t0_per_plane", Value::Int(t.t0_per_plane));
  tp.Set("t1_per_plane", Value::Int(t.t1_per_plane));
  tp.Set("hosts_per_t0", Value::Int(t.hosts_per_t0));
  tp.Set("parallel_links", Value::Int(t.parallel_links));
  if (t.kind == "fattree3") tp.Set("fattree_k", Value::Int(t.fattree_k));
  tp.Set("host_link_gbps", Value::Number(double(t.host_link_bps) / 1e9));
  tp.Set("fabric_link_gbps", Value::Number(double(t.fabric_link_bps) / 1e9));
  tp.Set("host_link_delay_ns",
         Value::Number(double(t.host_link_delay) / kNanosecond));
  tp.Set("fabric_link_delay_ns",
         Value::Number(double(t.fabric_link_delay) / kNanosecond));
  o.Set("topology", tp);
  const FabricConfig& f = sc.fabric;
  Value fb = Value::Object();
  fb.Set("forwarding", Value::String(sc.srv6 ? "srv6" : "ecmp"));
  fb.Set("buffer_bytes", Value::Int(f.buffer_bytes));
  fb.Set("control_buffer_bytes", Value::Int(f.control_buffer_bytes));
  fb.Set("trimming", Value::Bool(f.trimming));
  fb.Set("trim_last_hop", Value::Bool(f.trim_last_hop));
  fb.Set("trim_threshold_bytes",
         Value::Int(f.trim_threshold_bytes ? f.trim_threshold_bytes
                                           : f.buffer_bytes));
  Value ecn = Value::Object();
  ecn.Set("enabled", Value::Bool(f.ecn));
  ecn.Set("kmin_bytes", Value::Int(f.ecn_kmin_bytes));
  ecn.Set("kmax_bytes", Value::Int(f.ecn_kmax_bytes));
  ecn.Set("pmax", Value::Number(f.ecn_pmax));
  ecn.Set("last_hop", Value::Bool(f.ecn_last_hop));
  fb.Set("ecn", ecn);
  if (!f.overrides.empty()) {
    Value ov = Value::Array();
    for (const QueueOverride& q : f.overrides) {
      Value e = Value::Object();
      static constexpr const char* kTier[] = {"host", "t0", "t1", "t2"};
      e.Set("tier",
            Value::String(q.tier >= 1 && q.tier <= 3 ? kTier[q.tier] : "all"));
      if (q.plane >= 0) e.Set("plane", Value::Int(q.plane));
      if (q.index >= 0) e.Set("index", Value::Int(q.index));
      e.Set("ports",
            Value::String(q.ports == QueueOverride::Ports::kDown ? "down"
                          : q.ports == QueueOverride::Ports::kUp ? "up"
                                                                 : "all"));
      if (q.trimming) e.Set("trimming", Value::Bool(*q.trimming));
      if (q.trim_threshold_bytes) {
        e.Set("trim_threshold_bytes", Value::Int(*q.trim_threshold_bytes));
      }
      if (q.ecn || q.ecn_kmin_bytes || q.ecn_kmax_bytes || q.ecn_pmax) {
        Value oe = Value::Object();
        if (q.ecn) oe.Set("enabled", Value::Bool(*q.ecn));
        if (q.ecn_kmin_bytes)
          oe.Set("kmin_bytes", Value::Int(*q.ecn_kmin_bytes));
        if (q.ecn_kmax_bytes)
          oe.Set("kmax_bytes", Value::Int(*q.ecn_kmax_bytes));
        if (q.ecn_pmax) oe.Set("pmax", Value::Number(*q.ecn_pmax));
        e.Set("ecn", oe);
      }
      ov.Push(e);
    }
    fb.Set("overrides", ov);
  }
  fb.Set("nic_queue_packets", Value::Int(f.nic_queue_packets));
  fb.Set("nic_pull_watermark", Value::Int(f.nic_pull_watermark));
  fb.Set("lazy_switch_ports", Value::Bool(f.lazy_switch_ports));
  fb.Set("nic_buffer_bytes", Value::Int(f.nic_buffer_bytes));
  fb.Set("wire_overhead_bytes", Value::Int(f.wire_overhead_bytes));
  fb.Set("routing_convergence_us",
         Value::Number(double(f.routing_convergence) / kMicrosecond));
  o.Set("fabric", fb);
  o.Set("duration_us", Value::Number(double(sc.duration) / kMicrosecond));
  o.Set("warmup_us", Value::Number(double(sc.warmup) / kMicrosecond));
  // Only where they differ from the defaults (the output most runs print
  // stays as it was).
  if (sc.sample_interval != 0) {
    o.Set("sample_interval_us",
          Value::Number(double(sc.sample_interval) / kMicrosecond));
  }
  if (!sc.timeseries) o.Set("timeseries", Value::Bool(false));
  if (!sc.check_bytes) o.Set("check_bytes", Value::Bool(false));
  if (sc.scheduler == Scheduler::kBatched) {
    o.Set("scheduler", Value::String("batched"));
  }
  o.Set("workload", sc.workload);
  o.Set("faults", sc.faults);
  Value ts = Value::Array();
  for (const TransportConfig& t2 : sc.transports) {
    Value x = Value::Object();
    x.Set("name", Value::String(t2.name));
    x.Set("type", Value::String(t2.type));
    x.Set("mtu", Value::Int(t2.mtu));
    if (t2.type == "prism") {
      x.Set("path_policy", Value::String(t2.path_policy));
      x.Set("congestion", Value::String(t2.congestion));
      x.Set("num_paths", Value::Int(t2.num_paths));
      x.Set("rto_min_us", Value::Number(double(t2.rto_min) / kMicrosecond));
      x.Set("probe_interval_us",
            Value::Number(double(t2.probe_interval) / kMicrosecond));
      if (t2.window_packets) {
        x.Set("window_packets", Value::Int(t2.window_packets));
      }
      if (t2.max_messages) {
        x.Set("max_outstanding_messages", Value::Int(t2.max_messages));
      }
      if (!t2.fate_sharing) x.Set("fate_sharing", Value::Bool(false));
      if (!t2.group_balance) x.Set("group_balance", Value::Bool(false));
      if (!t2.tail_resend) x.Set("tail_resend", Value::Bool(false));
      if (!t2.spurious_undo) x.Set("spurious_undo", Value::Bool(false));
      if (t2.payload_checksum) x.Set("payload_checksum", Value::Bool(true));
      if (t2.oracle_reroute_after >= 0) {
        x.Set("oracle_reroute_after_us",
              Value::Number(double(t2.oracle_reroute_after) / kMicrosecond));
      }
    } else {
      x.Set("qps", Value::Int(t2.qps));
      x.Set("rto_us", Value::Number(double(t2.rto) / kMicrosecond));
      x.Set("window_bytes", Value::Int(static_cast<int64_t>(t2.window_bytes)));
      x.Set("dcqcn", Value::Bool(t2.dcqcn));
      x.Set("ack_every", Value::Int(t2.ack_every));
    }
    ts.Push(x);
  }
  o.Set("transports", ts);
  return o;
}

absl::StatusOr<std::vector<RunResult>> RunScenario(const ScenarioConfig& sc,
                                                   const ProgressFn& progress) {
  std::vector<RunResult> out;
  for (const TransportConfig& tc : sc.transports) {
    Simulator sim(sc, tc);
    absl::Status st = sim.Init();
    if (!st.ok()) return st;
    std::function<void(double)> p;
    if (progress) p = [&](double f) { progress(tc.name, f); };
    st = sim.Run(p);
    if (!st.ok()) return st;
    out.push_back(sim.result());
  }
  return out;
}

uint64_t Digest(const RunResult& r) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= (x >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(r.completed);
  mix(static_cast<uint64_t>(r.end_time));
  mix(r.delivered_bytes);
  for (const FlowResult& f : r.flows) {
    mix(static_cast<uint64_t>(f.finish));
    mix(f.delivered);
  }
  for (uint64_t d : r.drops) mix(d);
  mix(r.trims);
  mix(r.ecn_marks);
  mix(r.totals.retransmissions);
  mix(r.totals.timeouts);
  mix(r.totals.path_retirements);
  mix(r.packets_created);
  mix(r.packet_hops);
  return h;
}

json::Value Summarize(const ScenarioConfig& sc,
                      const std::vector<RunResult>& results) {
  using json::Value;
  Value root = Value::Object();
  root.Set("scenario", Value::String(sc.name));
  root.Set("seed", Value::Int(static_cast<int64_t>(sc.seed)));
  root.Set("config", DescribeScenario(sc));
  Value tr = Value::Object();
  for (const RunResult& r : results) {
    Value o = Value::Object();
    o.Set("goodput_fraction", Value::Number(r.goodput_fraction));
    o.Set("window_us",
          Value::Number(double(r.window_end - r.window_start) / kMicrosecond));
    o.Set("makespan_goodput_fraction",
          Value::Number(r.makespan_goodput_fraction));
    o.Set("raw_goodput_fraction", Value::Number(r.raw_goodput_fraction));
    const double secs =
        double(std::max<Time>(1, r.end_time - r.first_start)) / kSecond;
    o.Set("goodput_gbps",
          Value::Number(double(r.delivered_bytes) * 8 / secs / 1e9));
    o.Set("ideal_gbps", Value::Number(r.ideal_bps / 1e9));
    o.Set("completed", Value::Bool(r.completed));
    size_t done = 0;
    std::vector<double> fct;
    for (const FlowResult& f : r.flows) {
      if (f.finish >= 0) {
        ++done;
        fct.push_back(double(f.finish - f.start) / kMicrosecond);
      }
    }
    o.Set("flows", Value::Int(static_cast<int64_t>(r.flows.size())));
    o.Set("flows_completed", Value::Int(static_cast<int64_t>(done)));
    o.Set("end_time_us", Value::Number(double(r.end_time) / kMicrosecond));
    o.Set("delivered_bytes",
          Value::Int(static_cast<int64_t>(r.delivered_bytes)));
    o.Set("total_bytes", Value::Int(static_cast<int64_t>(r.total_bytes)));
    o.Set("drops", Value::Int(static_cast<int64_t>(r.drops_total)));
    Value dr = Value::Object();
    for (size_t i = 0; i < r.drops.size(); ++i) {
      dr.Set(DropReasonName(static_cast<DropReason>(i)),
             Value::Int(static_cast<int64_t>(r.drops[i])));
    }
    o.Set("drops_by_reason", dr);
    o.Set("trims", Value::Int(static_cast<int64_t>(r.trims)));
    o.Set("ecn_marks", Value::Int(static_cast<int64_t>(r.ecn_marks)));
    const TransportTotals& t = r.totals;
    o.Set("data_packets", Value::Int(static_cast<int64_t>(t.data_packets)));
    o.Set("retransmissions",
          Value::Int(static_cast<int64_t>(t.retransmissions)));
    o.Set("retransmitted_bytes",
          Value::Int(static_cast<int64_t>(t.retransmitted_bytes)));
    o.Set("timeouts", Value::Int(static_cast<int64_t>(t.timeouts)));
    o.Set("path_retirements",
          Value::Int(static_cast<int64_t>(t.path_retirements)));
    o.Set("path_timeouts", Value::Int(static_cast<int64_t>(t.path_timeouts)));
    o.Set("paths_restored", Value::Int(static_cast<int64_t>(t.paths_restored)));
    o.Set("spurious_losses",
          Value::Int(static_cast<int64_t>(t.spurious_losses)));
    o.Set("paths_unretired",
          Value::Int(static_cast<int64_t>(t.paths_unretired)));
    o.Set("probes", Value::Int(static_cast<int64_t>(t.probes)));
    o.Set("trims_seen_by_receivers",
          Value::Int(static_cast<int64_t>(t.trims_seen)));
    o.Set("ecn_echoes", Value::Int(static_cast<int64_t>(t.ecn_echoes)));
    o.Set("receiver_discards",
          Value::Int(static_cast<int64_t>(t.receiver_discards)));
    o.Set("engine_rx_drops",
          Value::Int(static_cast<int64_t>(t.engine_rx_drops)));
    o.Set("connection_errors",
          Value::Int(static_cast<int64_t>(t.connection_errors)));
    o.Set("rnr_nacks_received",
          Value::Int(static_cast<int64_t>(t.rnr_nacks_received)));
    o.Set("rnr_probes_sent",
          Value::Int(static_cast<int64_t>(t.rnr_probes_sent)));
    o.Set("rnr_timeouts", Value::Int(static_cast<int64_t>(t.rnr_timeouts)));
    o.Set("rx_drop_no_buffer",
          Value::Int(static_cast<int64_t>(t.rx_drop_no_buffer)));
    o.Set("cq_delivery_holds",
          Value::Int(static_cast<int64_t>(t.cq_delivery_holds)));
    o.Set("writes_refused_cq_full",
          Value::Int(static_cast<int64_t>(t.writes_refused_cq_full)));
    Value fs = Value::Object();
    fs.Set("p50", Value::Number(Percentile(fct, 0.5)));
    fs.Set("p99", Value::Number(Percentile(fct, 0.99)));
    fs.Set("max",
           Value::Number(
               fct.empty() ? 0 : *std::max_element(fct.begin(), fct.end())));
    o.Set("fct_us", fs);
    // Per-flow completion times (null when not completed), capped.
    if (r.flows.size() <= 8192) {
      Value pf = Value::Array();
      for (const FlowResult& f : r.flows) {
        pf.Push(f.finish >= 0
                    ? Value::Number(double(f.finish - f.start) / kMicrosecond)
                    : Value());
      }
      o.Set("flow_completion_us", pf);
    }
    // Per-group goodput (bytes delivered / time the group was active).
    std::map<std::string, std::vector<const FlowResult*>> groups;
    for (const FlowResult& f : r.flows) groups[f.group].push_back(&f);
    Value gv = Value::Object();
    for (const auto& [name, fl] : groups) {
      uint64_t bytes = 0;
      Time t0 = kTimeInfinite, t1 = 0;
      std::vector<double> rates;
      bool all = true;
      for (const FlowResult* f : fl) {
        bytes += f->delivered;
        if (f->start >= 0) t0 = std::min(t0, f->start);
        const Time end = f->finish >= 0 ? f->finish : r.end_time;
        t1 = std::max(t1, end);
        if (f->finish < 0) all = false;
        if (f->start >= 0 && end > f->start) {
          rates.push_back(double(f->delivered) * 8 /
                          (double(end - f->start) / kSecond));
        }
      }
      Value g = Value::Object();
      g.Set("flows", Value::Int(static_cast<int64_t>(fl.size())));
      g.Set("completed", Value::Bool(all));
      g.Set("bytes", Value::Int(static_cast<int64_t>(bytes)));
      const double secs2 = t0 == kTimeInfinite ? 0 : double(t1 - t0) / kSecond;
      g.Set("goodput_gbps",
            Value::Number(secs2 > 0 ? double(bytes) * 8 / secs2 / 1e9 : 0));
      g.Set("duration_us", Value::Number(secs2 * 1e6));
      g.Set("jain_index", Value::Number(JainIndex(rates)));
      gv.Set(name, g);
    }
    o.Set("groups", gv);
    o.Set("invariants",
          Value::String(r.invariant_error.empty() ? "ok" : r.invariant_error));
    o.Set("duplicates", Value::Int(static_cast<int64_t>(r.duplicates)));
    o.Set("mismatches", Value::Int(static_cast<int64_t>(r.mismatches)));
    o.Set("packets_created",
          Value::Int(static_cast<int64_t>(r.packets_created)));
    o.Set("packet_hops", Value::Int(static_cast<int64_t>(r.packet_hops)));
    o.Set("events", Value::Int(static_cast<int64_t>(r.events)));
    o.Set("wall_seconds", Value::Number(r.wall_seconds));
    o.Set("packets_per_wall_second",
          Value::Number(r.wall_seconds > 0
                            ? double(r.packets_created) / r.wall_seconds
                            : 0));
    o.Set("digest", Value::String(Hex(Digest(r))));
    Value fl = Value::Array();
    for (const auto& [t2, what] : r.fault_log) {
      if (fl.items().size() >= 200) break;
      Value e = Value::Object();
      e.Set("t_us", Value::Number(double(t2) / kMicrosecond));
      e.Set("event", Value::String(what));
      fl.Push(e);
    }
    o.Set("fault_log", fl);
    tr.Set(r.transport, o);
  }
  root.Set("transports", tr);
  return root;
}

absl::Status WriteOutputs(const std::string& dir, const ScenarioConfig& sc,
                          const std::vector<RunResult>& results) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError("cannot create " + dir + ": " + ec.message());
  {
    std::ofstream out(dir + "/summary.json");
    if (!out)
      return absl::InternalError("cannot write " + dir + "/summary.json");
    out << json::Serialize(Summarize(sc, results), 2) << "\n";
  }
  std::ofstream agg(dir + "/goodput.csv");
  agg << "transport,time_us,goodput_gbps,max_queue_bytes,total_queue_bytes\n";
  for (const RunResult& r : results) {
    std::ofstream ff(dir + "/" + r.transport + "_flows.csv");
    std::ofstream hf(dir + "/" + r.transport + "_hosts.csv");
    std::ofstream qf(dir + "/" + r.transport + "_queues.csv");
    if (!ff || !hf || !qf)
      return absl::InternalError("cannot write CSVs in " + dir);
    ff << "time_us,flow,goodput_gbps\n";
    hf << "time_us,host,goodput_gbps\n";
    qf << "time_us,max_queue_bytes,total_queue_bytes\n";
    for (size_t i = 0; i < r.samples.size(); ++i) {
      const Sample& s = r.samples[i];
      qf << absl::StrFormat("%.3f,%d,%d\n", double(s.t) / kMicrosecond,
                            s.max_queue, s.sum_queue);
      if (i == 0) continue;
      const Sample& p = r.samples[i - 1];
      const double dt = double(s.t - p.t) / kSecond;
      if (dt <= 0) continue;
      const double tus = double(s.t) / kMicrosecond;
      agg << absl::StrFormat(
          "%s,%.3f,%.4f,%d,%d\n", r.transport, tus,
          double(s.total_bytes - p.total_bytes) * 8 / dt / 1e9, s.max_queue,
          s.sum_queue);
      for (size_t k = 0; k < s.flow_bytes.size() && k < p.flow_bytes.size();
           ++k) {
        ff << absl::StrFormat(
            "%.3f,%d,%.4f\n", tus, k,
            double(s.flow_bytes[k] - p.flow_bytes[k]) * 8 / dt / 1e9);
      }
      for (size_t k = 0; k < s.host_bytes.size() && k < p.host_bytes.size();
           ++k) {
        hf << absl::StrFormat(
            "%.3f,%d,%.4f\n", tus, k,
            double(s.host_bytes[k] - p.host_bytes[k]) * 8 / dt / 1e9);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace prism::sim
