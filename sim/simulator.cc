#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "absl/strings/str_format.h"

namespace prism::sim {
namespace {

// Keys every fault entry takes; each type adds its own (BuildFaults).
constexpr std::string_view kFaultKeys[] = {"type", "at_us", "duration_us",
                                           "comment"};

absl::Status FaultError(const std::string& m) {
  return absl::InvalidArgumentError("faults: " + m);
}

// Microseconds to Time. Callers check their fields against kMaxScenarioUs
// first (sums of two checked fields reach 2e9 us, far inside int64
// picoseconds); the clamp only keeps the cast defined.
Time Us(double us) {
  const double c = us >= 0 ? std::min(us, 4 * kMaxScenarioUs) : 0;
  return static_cast<Time>(c * kMicrosecond);
}

// A fault's time field: [0, kMaxScenarioUs], NaN refused.
bool UsInRange(double us) { return us >= 0 && us <= kMaxScenarioUs; }

// This thread's CPU time in seconds. Measurement only: never feeds back into
// the simulation (results do not depend on it).
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Resident set size in MiB (measurement only, like the CPU time).
double ResidentMiB() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * 4096.0 / 1048576.0;
}

}  // namespace

Simulator::Simulator(const ScenarioConfig& sc, const TransportConfig& tc)
    : sc_(sc), tc_(tc), rng_(sc.seed) {}

Simulator::~Simulator() {
  // Agents may own packets; the pool outlives them (declared earlier).
  driver_.reset();
}

uint64_t Simulator::SeedFor(uint64_t tag, uint64_t index) const {
  uint64_t x = sc_.seed * 0x9e3779b97f4a7c15ull ^ (tag << 48) ^ index;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 32);
}

uint64_t Simulator::host_rate_bps() const {
  return static_cast<uint64_t>(topo_->num_planes()) *
         topo_->spec().host_link_bps;
}

Time Simulator::base_rtt() const {
  const routing::TopologySpec& s = topo_->spec();
  const int fabric_hops = s.kind == "fattree3" ? 4 : 2;
  const Time one_way =
      2 * s.host_link_delay + fabric_hops * s.fabric_link_delay;
  const Time ser =
      SerializationTime(tc_.mtu + 200, s.host_link_bps) * (fabric_hops + 2);
  return 2 * one_way + ser;
}

absl::Status Simulator::Init() {
  const double cpu0 = ThreadCpuSeconds();
  absl::Status st0 = InitImpl();
  result_.setup_cpu_seconds = ThreadCpuSeconds() - cpu0;
  return st0;
}

absl::Status Simulator::InitImpl() {
  if (sc_.scheduler == Scheduler::kBatched && sc_.fabric.lazy_switch_ports) {
    return absl::InvalidArgumentError(
        "scheduler batched needs fabric.lazy_switch_ports off (a lazy port is "
        "caught up from the far end of its link)");
  }
  double rss = ResidentMiB();
  auto stage = [&](const char* name) {
    const double now = ResidentMiB();
    result_.setup_rss_mib.emplace_back(name, now - rss);
    rss = now;
  };
  absl::StatusOr<routing::Topology> t = routing::Topology::Build(sc_.topology);
  if (!t.ok()) return t.status();
  topo_ = std::make_unique<routing::Topology>(std::move(*t));
  stage("topology");
  fabric_ = std::make_unique<Fabric>(topo_.get(), sc_.fabric, &queue_, &pool_,
                                     SeedFor(1, 0), this);
  absl::Status st = fabric_->Init();
  if (!st.ok()) return st;
  result_.fabric_bytes = fabric_->memory_bytes();
  stage("fabric");
  Rng wrng(SeedFor(2, 0));
  absl::StatusOr<std::vector<Flow>> flows = BuildWorkload(
      sc_.workload, topo_->num_hosts(), tc_.mtu, wrng, sc_.base_dir);
  if (!flows.ok()) return flows.status();
  flows_ = std::move(*flows);
  verifier_ = std::make_unique<Verifier>(&flows_, tc_.mtu, sc_.check_bytes);
  st = BuildFaults();
  if (!st.ok()) return st;
  stage("workload");
  absl::StatusOr<std::unique_ptr<TransportDriver>> d = MakeTransportDriver(tc_);
  if (!d.ok()) return d.status();
  driver_ = std::move(*d);
  st = driver_->Init(this);
  if (!st.ok()) return st;
  stage("transport");
  agents_.resize(topo_->num_hosts());
  for (uint32_t h = 0; h < topo_->num_hosts(); ++h)
    agents_[h] = driver_->agent(h);

  // Flow starts and dependencies.
  pending_deps_.assign(flows_.size(), 0);
  dependents_.assign(flows_.size(), {});
  result_.flows.resize(flows_.size());
  Time first = kTimeInfinite;
  for (const Flow& f : flows_) {
    FlowResult& r = result_.flows[f.id];
    r.id = f.id;
    r.src = f.src;
    r.dst = f.dst;
    r.bytes = f.bytes;
    r.group = f.group;
    r.step = f.step;
    result_.total_bytes += f.bytes;
    for (uint32_t a : f.after) {
      if (a >= flows_.size() || a == f.id) {
        return absl::InvalidArgumentError("workload: bad dependency");
      }
      dependents_[a].push_back(f.id);
      ++pending_deps_[f.id];
    }
    if (f.after.empty()) {
      queue_.Push(f.start, kFlowStartKind, f.id, this);
      first = std::min(first, f.start);
    }
  }
  result_.first_start = first == kTimeInfinite ? 0 : first;
  for (uint32_t i = 0; i < faults_.size(); ++i) {
    queue_.Push(faults_[i].at, kFaultKind, i, this);
  }
  if (sc_.sample_interval <= 0) {
    sc_.sample_interval = std::max<Time>(kMicrosecond, sc_.duration / 200);
  }
  if (sc_.timeseries) queue_.Push(0, kSampleKind, 0, this);
  if (sc_.warmup > 0) {
    queue_.Push(result_.first_start + sc_.warmup, kWarmupKind, 0, this);
  }

  // Ideal rates: max-min fair shares under host NIC limits, computed per
  // concurrency class (flows of one ring step run together; every flow
  // without dependencies is in one class), at the wire efficiency of a
  // full packet.
  const double mtu = tc_.mtu;
  const double eff = mtu / (mtu + driver_->data_header_bytes() +
                            sc_.fabric.wire_overhead_bytes);
  ideal_rate_.assign(flows_.size(), 0);
  std::vector<int32_t> classes;
  for (const Flow& f : flows_) {
    const int32_t c = f.after.empty() ? -1 : f.step;
    if (std::find(classes.begin(), classes.end(), c) == classes.end()) {
      classes.push_back(c);
    }
  }
  const uint32_t hosts = topo_->num_hosts();
  for (int32_t cls : classes) {
    std::vector<double> cap(2 * hosts, static_cast<double>(host_rate_bps()));
    std::vector<uint32_t> users(2 * hosts, 0);
    std::vector<uint32_t> active;
    for (const Flow& f : flows_) {
      if ((f.after.empty() ? -1 : f.step) != cls) continue;
      active.push_back(f.id);
      ++users[f.src];
      ++users[hosts + f.dst];
    }
    std::vector<uint8_t> done(flows_.size(), 0);
    std::vector<uint8_t> frozen(2 * hosts, 0);
    size_t left = active.size();
    for (int iter = 0; left > 0 && iter < 4096; ++iter) {
      double best = 1e300;
      for (uint32_t r = 0; r < 2 * hosts; ++r) {
        if (!frozen[r] && users[r] > 0)
          best = std::min(best, cap[r] / users[r]);
      }
      if (best == 1e300) break;
      for (uint32_t r = 0; r < 2 * hosts; ++r) {
        if (!frozen[r] && users[r] > 0 &&
            cap[r] / users[r] <= best * 1.000001) {
          frozen[r] = 1;
        }
      }
      for (uint32_t id : active) {
        if (done[id]) continue;
        const Flow& f = flows_[id];
        if (frozen[f.src] || frozen[hosts + f.dst]) {
          done[id] = 1;
          ideal_rate_[id] = best * eff;
          --left;
          cap[f.src] -= best;
          cap[hosts + f.dst] -= best;
          --users[f.src];
          --users[hosts + f.dst];
        }
      }
    }
    if (cls == -1) {
      for (uint32_t id : active) result_.ideal_bps += ideal_rate_[id];
    }
  }
  if (result_.ideal_bps == 0) {
    for (double r : ideal_rate_)
      result_.ideal_bps = std::max(result_.ideal_bps, r);
  }
  result_.transport = tc_.name;
  return absl::OkStatus();
}

absl::Status Simulator::BuildFaults() {
  faults_.clear();
  if (sc_.faults.is_null()) return absl::OkStatus();
  if (!sc_.faults.is_array()) return FaultError("must be an array");
  Rng frng(SeedFor(3, 0));
  const routing::Topology& t = *topo_;
  const Time end = sc_.duration;
  auto link_sel = [&](const json::Value* v, uint32_t* out) -> absl::Status {
    if (v == nullptr) return FaultError("missing link");
    if (v->is_string() && v->as_string() == "random_fabric") {
      // Any T0-T1 (or deeper) link.
      std::vector<uint32_t> cand;
      for (uint32_t l = 0; l < t.num_links(); ++l) {
        if (t.link(l).a >= t.num_hosts() && t.link(l).b >= t.num_hosts()) {
          cand.push_back(l);
        }
      }
      if (cand.empty()) return FaultError("no fabric links");
      *out = cand[frng.Uniform(cand.size())];
      return absl::OkStatus();
    }
    if (!v->is_object()) return FaultError("link must be an object");
    absl::Status lk = v->CheckKeys(
        {"id", "plane", "host", "t0", "t1", "k", "comment"}, "faults: link");
    if (!lk.ok()) return lk;
    if (const json::Value* id = v->Find("id")) {
      const std::optional<int64_t> l = id->as_whole();
      if (!l || *l < 0 || static_cast<uint64_t>(*l) >= t.num_links()) {
        return FaultError("link id out of range (a link number)");
      }
      *out = static_cast<uint32_t>(*l);
      return absl::OkStatus();
    }
    absl::StatusOr<int64_t> plane = v->GetInt("plane", 0);
    if (!plane.ok()) return plane.status();
    if (*plane < 0 || *plane >= t.num_planes())
      return FaultError("plane out of range");
    if (v->Find("host")) {
      absl::StatusOr<int64_t> h = v->GetInt("host", 0);
      if (!h.ok()) return h.status();
      if (*h < 0 || *h >= t.num_hosts()) return FaultError("host out of range");
      *out =
          t.host_link(static_cast<uint32_t>(*h), static_cast<uint16_t>(*plane));
      return absl::OkStatus();
    }
    absl::StatusOr<int64_t> a = v->GetInt("t0", 0), b = v->GetInt("t1", 0),
                            k = v->GetInt("k", 0);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    if (!k.ok()) return k.status();
    const routing::TopologySpec& s = t.spec();
    if (s.kind != "clos2" || *a < 0 || *a >= s.t0_per_plane || *b < 0 ||
        *b >= s.t1_per_plane || *k < 0 || *k >= s.parallel_links) {
      return FaultError("t0/t1/k link selector out of range (clos2 only)");
    }
    *out =
        t.fabric_link(static_cast<uint16_t>(*plane), static_cast<uint32_t>(*a),
                      static_cast<uint32_t>(*b), static_cast<uint32_t>(*k));
    return absl::OkStatus();
  };
  auto switch_sel = [&](const json::Value* v, uint32_t* out) -> absl::Status {
    if (v == nullptr || !v->is_object())
      return FaultError("switch must be an object");
    absl::Status sk =
        v->CheckKeys({"tier", "plane", "index", "comment"}, "faults: switch");
    if (!sk.ok()) return sk;
    absl::StatusOr<std::string> tier = v->GetString("tier", "t1");
    absl::StatusOr<int64_t> plane = v->GetInt("plane", 0),
                            idx = v->GetInt("index", 0);
    if (!tier.ok()) return tier.status();
    if (!plane.ok()) return plane.status();
    if (!idx.ok()) return idx.status();
    routing::NodeKind kind = *tier == "t0"   ? routing::NodeKind::kT0
                             : *tier == "t1" ? routing::NodeKind::kT1
                             : *tier == "t2" ? routing::NodeKind::kT2
                                             : routing::NodeKind::kHost;
    if (kind == routing::NodeKind::kHost)
      return FaultError("tier must be t0, t1 or t2");
    for (uint32_t n = t.num_hosts(); n < t.num_nodes(); ++n) {
      const routing::Node& nd = t.node(n);
      if (nd.kind == kind && nd.plane == *plane && nd.index == *idx) {
        *out = n;
        return absl::OkStatus();
      }
    }
    return FaultError("no such switch");
  };
  auto add = [&](Time at, FaultType ty, uint32_t target, double value) {
    if (at <= end) faults_.push_back({at, ty, target, value});
  };
  for (const json::Value& f : sc_.faults.items()) {
    if (!f.is_object()) return FaultError("entries must be objects");
    absl::StatusOr<std::string> type = f.GetString("type", "");
    absl::StatusOr<double> at = f.GetDouble("at_us", 0),
                           dur = f.GetDouble("duration_us", -1);
    if (!type.ok()) return type.status();
    if (!at.ok()) return at.status();
    if (!dur.ok()) return dur.status();
    if (!UsInRange(*at)) return FaultError("at_us must be in [0, 1e9]");
    // Each type's keys, besides the common ones (kFaultKeys): a misspelt
    // one would silently run another experiment.
    absl::Status keys = absl::OkStatus();
    const std::string where = "faults: " + *type;
    if (*type == "link_down") {
      keys = f.CheckKeys(kFaultKeys, {"link"}, where);
    } else if (*type == "switch_reboot") {
      keys = f.CheckKeys(kFaultKeys, {"switch"}, where);
    } else if (*type == "nic_port_down") {
      keys = f.CheckKeys(kFaultKeys, {"host", "plane"}, where);
    } else if (*type == "link_flap") {
      keys = f.CheckKeys(kFaultKeys,
                         {"link", "start_us", "end_us", "period_us", "down_us"},
                         where);
    } else if (*type == "random_flaps") {
      keys = f.CheckKeys(kFaultKeys, {"count", "start_us", "end_us", "down_us"},
                         where);
    } else if (*type == "random_reboots") {
      keys = f.CheckKeys(kFaultKeys, {"count", "tier"}, where);
    } else if (*type == "link_loss") {
      keys = f.CheckKeys(kFaultKeys, {"rate", "links"}, where);
    } else if (*type == "degrade") {
      keys = f.CheckKeys(kFaultKeys, {"link", "fraction"}, where);
    }
    if (!keys.ok()) return keys;
    // duration_us: negative (the default) means "no end"; NaN is refused.
    if (std::isnan(*dur) || *dur > kMaxScenarioUs)
      return FaultError("duration_us must be <= 1e9");
    // The flaps time their own outages (down_us): a duration_us there would
    // be silently ignored, so it is refused.
    if ((*type == "link_flap" || *type == "random_flaps") && *dur >= 0) {
      return FaultError(*type +
                        ": duration_us does not apply (each outage lasts "
                        "down_us; the flaps run from start_us to end_us)");
    }
    uint32_t target = 0;
    if (*type == "link_down") {
      absl::Status st = link_sel(f.Find("link"), &target);
      if (!st.ok()) return st;
      add(Us(*at), FaultType::kLinkDown, target, 0);
      if (*dur >= 0) add(Us(*at + *dur), FaultType::kLinkUp, target, 0);
    } else if (*type == "nic_port_down") {
      absl::StatusOr<int64_t> h = f.GetInt("host", 0), p = f.GetInt("plane", 0);
      if (!h.ok()) return h.status();
      if (!p.ok()) return p.status();
      if (*h < 0 || *h >= t.num_hosts() || *p < 0 || *p >= t.num_planes()) {
        return FaultError("nic_port_down host/plane out of range");
      }
      target =
          t.host_link(static_cast<uint32_t>(*h), static_cast<uint16_t>(*p));
      add(Us(*at), FaultType::kLinkDown, target, 0);
      if (*dur >= 0) add(Us(*at + *dur), FaultType::kLinkUp, target, 0);
    } else if (*type == "link_flap") {
      absl::Status st = link_sel(f.Find("link"), &target);
      if (!st.ok()) return st;
      absl::StatusOr<double> start = f.GetDouble("start_us", *at),
                             stop = f.GetDouble("end_us", end / 1e6),
                             period = f.GetDouble("period_us", 100),
                             down = f.GetDouble("down_us", 10);
      if (!start.ok() || !stop.ok() || !period.ok() || !down.ok()) {
        return FaultError("link_flap: bad numbers");
      }
      if (!UsInRange(*start) || !UsInRange(*stop) || !UsInRange(*period)) {
        return FaultError("link_flap: start_us, end_us, period_us in [0, 1e9]");
      }
      if (*period <= 0 || !(*down > 0) || *down >= *period) {
        return FaultError("link_flap needs 0 < down_us < period_us");
      }
      // At most a million flaps per entry; the count bounds the loop too,
      // so a period too small to move x cannot make it endless.
      constexpr int64_t kMaxFlaps = 1000000;
      if ((*stop - *start) / *period > kMaxFlaps) {
        return FaultError("link_flap: more than 1e6 flaps");
      }
      double x = *start;
      for (int64_t i = 0; i < kMaxFlaps && x < *stop; ++i, x += *period) {
        add(Us(x), FaultType::kLinkDown, target, 0);
        add(Us(x + *down), FaultType::kLinkUp, target, 0);
      }
    } else if (*type == "random_flaps") {
      absl::StatusOr<int64_t> count = f.GetInt("count", 10);
      absl::StatusOr<double> start = f.GetDouble("start_us", *at),
                             stop = f.GetDouble("end_us", end / 1e6),
                             down = f.GetDouble("down_us", 10);
      if (!count.ok() || !start.ok() || !stop.ok() || !down.ok()) {
        return FaultError("random_flaps: bad numbers");
      }
      if (!UsInRange(*start) || !UsInRange(*stop) || !UsInRange(*down)) {
        return FaultError(
            "random_flaps: start_us, end_us, down_us in [0, 1e9]");
      }
      if (*count < 0 || *count > 100000 || *stop <= *start || *down <= 0) {
        return FaultError("random_flaps: need 0 <= count <= 1e5, start < end");
      }
      json::Value rf = json::Value::String("random_fabric");
      for (int64_t i = 0; i < *count; ++i) {
        absl::Status st = link_sel(&rf, &target);
        if (!st.ok()) return st;
        const double x = *start + frng.NextDouble() * (*stop - *start);
        add(Us(x), FaultType::kLinkDown, target, 0);
        add(Us(x + *down), FaultType::kLinkUp, target, 0);
      }
    } else if (*type == "switch_reboot") {
      absl::Status st = switch_sel(f.Find("switch"), &target);
      if (!st.ok()) return st;
      add(Us(*at), FaultType::kSwitchDown, target, 0);
      add(Us(*at + (*dur >= 0 ? *dur : 100)), FaultType::kSwitchUp, target, 0);
    } else if (*type == "random_reboots") {
      absl::StatusOr<int64_t> count = f.GetInt("count", 1);
      absl::StatusOr<std::string> tier = f.GetString("tier", "t1");
      if (!count.ok() || !tier.ok())
        return FaultError("random_reboots: bad fields");
      std::vector<uint32_t> cand;
      for (uint32_t n = t.num_hosts(); n < t.num_nodes(); ++n) {
        const routing::NodeKind k = t.node(n).kind;
        if ((*tier == "t0" && k == routing::NodeKind::kT0) ||
            (*tier == "t1" && k == routing::NodeKind::kT1) ||
            (*tier == "t2" && k == routing::NodeKind::kT2)) {
          cand.push_back(n);
        }
      }
      if (*count < 0 || static_cast<size_t>(*count) > cand.size()) {
        return FaultError("random_reboots: count out of range");
      }
      for (int64_t i = 0; i < *count; ++i) {  // partial Fisher-Yates
        const size_t j = i + frng.Uniform(cand.size() - i);
        std::swap(cand[i], cand[j]);
        add(Us(*at), FaultType::kSwitchDown, cand[i], 0);
        add(Us(*at + (*dur >= 0 ? *dur : 100)), FaultType::kSwitchUp, cand[i],
            0);
      }
    } else if (*type == "link_loss") {
      absl::StatusOr<double> rate = f.GetDouble("rate", 0);
      if (!rate.ok()) return rate.status();
      if (*rate < 0 || *rate > 1)
        return FaultError("link_loss rate must be in [0,1]");
      const json::Value* links = f.Find("links");
      std::string which = links && links->is_string() ? links->as_string() : "";
      if (links == nullptr || which == "all" || which == "fabric" ||
          which == "host") {
        if (which.empty()) which = "all";
        for (uint32_t l = 0; l < t.num_links(); ++l) {
          const bool host =
              t.link(l).a < t.num_hosts() || t.link(l).b < t.num_hosts();
          if (which == "all" || (which == "host") == host) {
            add(Us(*at), FaultType::kLinkLoss, l, *rate);
            // The loss ends (rate 0) after duration_us, when given.
            if (*dur >= 0) add(Us(*at + *dur), FaultType::kLinkLoss, l, 0);
          }
        }
      } else {
        absl::Status st = link_sel(links, &target);
        if (!st.ok()) return st;
        add(Us(*at), FaultType::kLinkLoss, target, *rate);
        if (*dur >= 0) add(Us(*at + *dur), FaultType::kLinkLoss, target, 0);
      }
    } else if (*type == "degrade") {
      absl::Status st = link_sel(f.Find("link"), &target);
      if (!st.ok()) return st;
      absl::StatusOr<double> frac = f.GetDouble("fraction", 0.1);
      if (!frac.ok()) return frac.status();
      if (*frac <= 0 || *frac > 1)
        return FaultError("degrade fraction must be in (0,1]");
      add(Us(*at), FaultType::kLinkRate, target, *frac);
      if (*dur >= 0) add(Us(*at + *dur), FaultType::kLinkRate, target, 1.0);
    } else {
      return FaultError("unknown fault type '" + *type + "'");
    }
  }
  std::stable_sort(
      faults_.begin(), faults_.end(),
      [](const FaultAction& a, const FaultAction& b) { return a.at < b.at; });
  return absl::OkStatus();
}

void Simulator::ApplyFault(Time now, const FaultAction& a) {
  const char* what = "";
  switch (a.type) {
    case FaultType::kLinkDown:
      fabric_->SetLinkUp(now, a.target, false);
      what = "link_down";
      break;
    case FaultType::kLinkUp:
      fabric_->SetLinkUp(now, a.target, true);
      what = "link_up";
      break;
    case FaultType::kSwitchDown:
      fabric_->SetSwitchUp(now, a.target, false);
      what = "switch_down";
      break;
    case FaultType::kSwitchUp:
      fabric_->SetSwitchUp(now, a.target, true);
      what = "switch_up";
      break;
    case FaultType::kLinkRate:
      fabric_->SetLinkRateFraction(a.target, a.value);
      what = "link_rate";
      break;
    case FaultType::kLinkLoss:
      fabric_->SetLinkLoss(a.target, a.value);
      what = "link_loss";
      break;
  }
  if (result_.fault_log.size() < 10000 && a.type != FaultType::kLinkLoss) {
    result_.fault_log.emplace_back(
        now, absl::StrFormat("%s %d %g", what, a.target, a.value));
  }
}

void Simulator::DeliverToHost(Time now, uint32_t host, SimPacket* p) {
  ++delivered_packets_;
  agents_[host]->OnReceive(now, p);
}

void Simulator::HostPortIdle(Time now, uint32_t host, uint16_t plane) {
  agents_[host]->OnPortIdle(now, plane);
}

void Simulator::HostPortStatus(Time now, uint32_t host, uint16_t plane,
                               bool up) {
  agents_[host]->OnPortStatus(now, plane, up);
}

uint64_t Simulator::InitialClassBytes() const {
  uint64_t b = 0;
  for (const Flow& f : flows_) {
    if (f.after.empty()) b += verifier_->delivered(f.id);
  }
  return b;
}

void Simulator::FlowCompleted(Time now, uint32_t flow) {
  FlowResult& r = result_.flows[flow];
  if (r.finish >= 0) return;
  r.finish = now;
  ++flows_done_;
  if (flows_[flow].after.empty() && win_end_ < 0) {
    if (batch_end_ >= 0) {
      // Batched: other hosts' deliveries are not all at `now` yet; the
      // window ends with the batch (RunBatched), at most one lookahead late.
      win_end_due_ = true;
    } else {
      win_end_ = now;
      win_end_bytes_ = InitialClassBytes();
    }
  }
  for (uint32_t d : dependents_[flow]) {
    if (--pending_deps_[d] == 0) {
      Time at = std::max(now, flows_[d].start);
      // Batched: another host's flow cannot start inside the batch (that
      // host may be past `at` already); it starts when the batch ends, at
      // most one lookahead late, as if told over a link.
      if (at < batch_end_ && flows_[d].src != batch_node_) at = batch_end_;
      queue_.Push(at, kFlowStartKind, d, this);
    }
  }
}

void Simulator::TakeSample(Time now) {
  Sample s;
  s.t = now;
  const uint32_t hosts = topo_->num_hosts();
  if (flows_.size() <= 2048) s.flow_bytes.resize(flows_.size());
  if (hosts <= 2048) s.host_bytes.assign(hosts, 0);
  for (const Flow& f : flows_) {
    const uint64_t d = verifier_->delivered(f.id);
    if (!s.flow_bytes.empty()) s.flow_bytes[f.id] = d;
    if (!s.host_bytes.empty()) s.host_bytes[f.dst] += d;
    s.total_bytes += d;
  }
  const auto& ports = fabric_->ports();
  for (uint32_t id = 0; id < ports.size(); ++id) {
    if (ports[id].host_port) continue;
    const uint32_t q = fabric_->DataQueueBytes(now, id);
    s.max_queue = std::max(s.max_queue, q);
    s.sum_queue += q;
  }
  result_.samples.push_back(std::move(s));
}

// Handles one popped event. `out_hint`: for a wire arrival, its output port
// if the look-ahead found it (Fabric::kNoPort: not known).
[[gnu::always_inline]] inline void Simulator::Dispatch(const Event& e,
                                                       uint32_t out_hint) {
  switch (e.kind) {
    case EventQueue::kTimerKind:
      ++result_.timer_events;
      static_cast<Timer*>(e.ptr)->Fire(queue_, e);
      break;
    case Fabric::kWireKind:
      ++result_.wire_events;
      fabric_->OnWire(e, out_hint);
      break;
    case Fabric::kPortDoneKind:
      ++result_.port_done_events;
      fabric_->OnPortDone(e);
      break;
    case Fabric::kArriveKind:
    case Fabric::kConvergeKind:
      ++result_.other_events;
      fabric_->HandleEvent(e);
      break;
    case kFlowStartKind: {
      ++result_.other_events;
      FlowResult& r = result_.flows[e.arg];
      r.start = e.time;
      agents_[flows_[e.arg].src]->StartFlow(e.time, e.arg);
      break;
    }
    case kFaultKind:
      ApplyFault(e.time, faults_[e.arg]);
      break;
    case kWarmupKind:
      warm_time_ = e.time;
      warm_bytes_.resize(flows_.size());
      for (const Flow& f : flows_)
        warm_bytes_[f.id] = verifier_->delivered(f.id);
      win_start_bytes_ = InitialClassBytes();
      break;
    case kSampleKind:
      TakeSample(e.time);
      queue_.Push(e.time + sc_.sample_interval, kSampleKind, 0, this);
      break;
    default:
      break;
  }
}

absl::Status Simulator::Run(const std::function<void(double)>& progress) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  const double rss0 = ResidentMiB();
  const Time end = sc_.duration;
  Time lookahead = kTimeInfinite;
  for (const Port& pt : fabric_->ports()) {
    lookahead = std::min(lookahead, pt.delay);
  }
  // Batches need a positive lookahead (a zero-delay link couples nodes at
  // the same instant): without one the run is exact.
  Time now = sc_.scheduler == Scheduler::kBatched && lookahead > 0 &&
                     lookahead != kTimeInfinite
                 ? RunBatched(end, lookahead, progress)
                 : RunExact(end, progress);
  if (flows_done_ < flows_.size()) now = std::max(now, end);
  Finish(now);
  result_.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0)
          .count();
  result_.cpu_seconds = ThreadCpuSeconds() - cpu0;
  result_.setup_rss_mib.emplace_back("run", ResidentMiB() - rss0);
  result_.queue_bytes = queue_.memory_bytes();
  result_.pool_bytes = pool_.capacity() * sizeof(SimPacket);
  if (progress) progress(1.0);
  return absl::OkStatus();
}

void Simulator::Progress(const std::function<void(double)>& progress, Time now,
                         Time end) {
  const double a = static_cast<double>(now) / static_cast<double>(end);
  const double b = flows_.empty() ? 0 : double(flows_done_) / flows_.size();
  progress(std::min(1.0, std::max(a, b)));
}

// The look-ahead's steps (RunExact, RunBatched; prefetch only, no effect
// on results). kAhead: the event's packet and port (or timer).
[[gnu::always_inline]] inline void Simulator::PrefetchAhead(
    const Event& ne) const {
  __builtin_prefetch(ne.ptr);  // a wire's packet, a port-done's port, a timer
  if (ne.kind == Fabric::kWireKind) {
    __builtin_prefetch(&fabric_->ports()[ne.arg]);
  }
}

// kRoute: for a wire arrival at a switch, the port it will be queued on
// (returned; *exact: it is the one the arrival will take, as long as no
// switch's tables change meanwhile), else its host agent; for a port-done,
// the packet it will transmit.
[[gnu::always_inline]] inline uint32_t Simulator::PrefetchRoute(
    const Event& ne, bool* exact) const {
  const Port* const ports = fabric_->ports().data();
  if (ne.kind == Fabric::kWireKind) {
    const auto* p = static_cast<const SimPacket*>(ne.ptr);
    const uint32_t out = fabric_->PeekOutPort(ne.arg, p, exact);
    if (out != Fabric::kNoPort) {
      const char* o = reinterpret_cast<const char*>(&ports[out]);
      __builtin_prefetch(o);
      __builtin_prefetch(o + 64);
      __builtin_prefetch(o + 128);
      __builtin_prefetch(o + sizeof(Port) - 1);
    } else {
      const uint32_t to = fabric_->port_to(ne.arg);
      if (to < agents_.size()) __builtin_prefetch(agents_[to]);
    }
    return out;
  }
  if (ne.kind == Fabric::kPortDoneKind) {
    const Port& pt = ports[ne.arg];
    __builtin_prefetch(pt.cq_head != nullptr ? pt.cq_head : pt.dq_head);
  }
  return Fabric::kNoPort;
}

// kTail: the packets whose links an enqueue on `out` (a wire arrival's
// port found by PrefetchRoute, kNoPort: none) or a port-done's transmit
// writes (queue and wire tails).
[[gnu::always_inline]] inline void Simulator::PrefetchTail(const Event& ne,
                                                           uint32_t out) const {
  const Port* const ports = fabric_->ports().data();
  if (ne.kind == Fabric::kWireKind) {
    if (out != Fabric::kNoPort) {
      const Port& o = ports[out];
      if (o.dq_tail != nullptr) __builtin_prefetch(o.dq_tail, 1);
      if (o.busy_until <= ne.time && o.wire_tail != nullptr) {
        __builtin_prefetch(o.wire_tail, 1);
      }
    }
  } else if (ne.kind == Fabric::kPortDoneKind) {
    const SimPacket* tail = ports[ne.arg].wire_tail;
    if (tail != nullptr) __builtin_prefetch(tail, 1);
  }
}

Time Simulator::RunExact(Time end,
                         const std::function<void(double)>& progress) {
  uint64_t n = 0;
  uint64_t pops = 0;
  Time now = 0;
  const size_t num_flows = flows_.size();
  const Event* next;
  while (flows_done_ < num_flows && (next = queue_.PopUntil(end))) {
    const Event& e = *next;
    // Start loading what the next events touch, one step of their chain
    // of dependent loads at a time, so that those cache misses overlap
    // with handling the events before them (a switch hop alone is shorter
    // than one miss): kAhead events ahead the event's packet and port (or
    // timer); kRoute ahead, for a wire arrival at a switch, the port it will
    // be queued on (found from its packet, which has come in by then; kept
    // for the arrival when exact) and for a port-done the packet it will
    // transmit; kTail ahead, the packets whose links that enqueue or
    // transmit writes (queue and wire tails). No effect on results.
    ++pops;
    size_t known;
    const Event* const up = queue_.Upcoming(&known);
    if (known > kAhead) PrefetchAhead(up[kAhead]);
    if (known > kRoute) {
      const Event& ne = up[kRoute];
      bool exact = false;
      const uint32_t out = PrefetchRoute(ne, &exact);
      if (ne.kind == Fabric::kWireKind) {
        Hint& h = hints_[(pops + 1 + kRoute) % kHints];
        h.seq = ne.seq;
        h.epoch = fabric_->routes_epoch();
        h.out = exact ? out : Fabric::kNoPort;
        h.prefetched = out;
      }
    }
    if (known > kTail) {
      const Event& ne = up[kTail];
      const Hint& h = hints_[(pops + 1 + kTail) % kHints];
      PrefetchTail(ne, ne.kind == Fabric::kWireKind && h.seq == ne.seq
                           ? h.prefetched
                           : Fabric::kNoPort);
    }
    now = e.time;
    const Hint& h = hints_[pops % kHints];
    Dispatch(e, e.kind == Fabric::kWireKind && h.seq == e.seq &&
                        h.epoch == fabric_->routes_epoch()
                    ? h.out
                    : Fabric::kNoPort);
    if (progress && (++n & 0xfffff) == 0) Progress(progress, now, end);
  }
  return now;
}

[[gnu::always_inline]] inline uint32_t Simulator::NodeOf(const Event& e) const {
  switch (e.kind) {
    case EventQueue::kTimerKind:  // a timer's event carries its node
      return std::min(e.arg, kAllNodes);
    case Fabric::kWireKind:
      return fabric_->port_to(e.arg);
    case Fabric::kPortDoneKind:
      return fabric_->port_from(e.arg);
    case Fabric::kArriveKind:
      return std::min(e.arg, kAllNodes);
    case kFlowStartKind:
      return flows_[e.arg].src;
    default:  // faults, routing convergence, samples, warm-up
      return kAllNodes;
  }
}

// Batched scheduler (ScenarioConfig::scheduler): each step takes the events
// of [T, T + lookahead) (T: the earliest pending), or up to the first
// event that is not one node's (a fault, a sample...), which then runs
// alone after them. A stable counting sort groups the batch by node,
// keeping each node's events in (time, seq) order; a node's events are
// dispatched in one stretch, merged with what they push for the batch's
// own time span (the queue's batch heap: timers, port-dones, a flow start).
// Anything one node does to another arrives over a link, at least one
// lookahead later, so in the next batch or after: each node sees exactly
// the events, in exactly the order, it would see in an exact run, bar the
// draws of the shared random stream and (FlowCompleted) a dependent flow
// of another host and the end of the measurement window. An event of the
// batch heap that is not the node's own would break that: counted
// (RunResult::batch_violations, an invariant) and dispatched anyway.
// The look-ahead prefetching of RunExact runs over the sorted batch.
Time Simulator::RunBatched(Time end, Time lookahead,
                           const std::function<void(double)>& progress) {
  const size_t num_flows = flows_.size();
  const uint32_t num_nodes = static_cast<uint32_t>(topo_->num_nodes());
  std::vector<Event> got, sorted;
  std::vector<uint32_t> got_node, sorted_node, hint, count(num_nodes + 2);
  uint64_t n = 0;
  Time now = 0;
  while (flows_done_ < num_flows && !queue_.empty()) {
    const Time t0 = queue_.next_time();
    if (t0 > end) break;
    Time w = std::min(t0 + lookahead, end + 1);
    got.clear();
    got_node.clear();
    bool have_global = false;
    Event global;
    while (const Event* e = queue_.PopUntil(w - 1)) {
      const uint32_t nd = NodeOf(*e);
      if (nd >= kAllNodes) {
        if (got.empty()) {  // alone: dispatch it now
          now = e->time;
          ++result_.batches;
          Dispatch(*e, Fabric::kNoPort);
          if (flows_done_ >= num_flows) break;
          continue;
        }
        global = *e;
        have_global = true;
        w = e->time;
        break;
      }
      got.push_back(*e);
      got_node.push_back(nd);
    }
    if (got.empty()) continue;
    ++result_.batches;
    // Stable counting sort by node, the nodes taken in an order rotated
    // from batch to batch: simultaneous events that different nodes push to
    // one node tie-break by the order their pushers ran in, and a fixed
    // order would favour the low-numbered nodes every time.
    const uint32_t rot = static_cast<uint32_t>(
        (result_.batches * 0x9e3779b97f4a7c15ull >> 32) % num_nodes);
    auto place = [&](uint32_t nd) {
      return nd >= num_nodes - rot ? nd - (num_nodes - rot) : nd + rot;
    };
    std::fill(count.begin(), count.end(), 0);
    for (uint32_t nd : got_node) ++count[place(nd) + 1];
    for (size_t k = 1; k < count.size(); ++k) count[k] += count[k - 1];
    const size_t ns = got.size();
    sorted.resize(ns);
    sorted_node.resize(ns);
    hint.assign(ns, Fabric::kNoPort);
    for (size_t k = 0; k < ns; ++k) {
      const size_t at = count[place(got_node[k])]++;
      sorted[at] = got[k];
      sorted_node[at] = got_node[k];
    }
    const uint32_t epoch = fabric_->routes_epoch();
    Time last = now;
    batch_end_ = w;
    queue_.BeginBatch(t0, w);
    size_t i = 0;
    while (i < ns) {
      batch_node_ = sorted_node[i];
      while (true) {
        const bool have_sorted = i < ns && sorted_node[i] == batch_node_;
        Event e;
        uint32_t out = Fabric::kNoPort;
        if (!queue_.batch_heap_empty() &&
            (!have_sorted || EventQueue::Less(queue_.batch_top(), sorted[i]))) {
          e = queue_.PopBatch();
          if (NodeOf(e) != batch_node_) ++result_.batch_violations;
        } else if (have_sorted) {
          const size_t k = i++;
          e = sorted[k];
          // RunExact's look-ahead, over the batch's order.
          if (k + kAhead < ns) PrefetchAhead(sorted[k + kAhead]);
          if (k + kRoute < ns) {
            bool exact = false;
            const uint32_t o = PrefetchRoute(sorted[k + kRoute], &exact);
            if (exact) hint[k + kRoute] = o;
          }
          if (k + kTail < ns) PrefetchTail(sorted[k + kTail], hint[k + kTail]);
          if (e.kind == Fabric::kWireKind && fabric_->routes_epoch() == epoch) {
            out = hint[k];
          }
        } else {
          break;
        }
        now = e.time;
        last = std::max(last, now);
        queue_.SetClock(now);
        Dispatch(e, out);
        if (progress && (++n & 0xfffff) == 0) Progress(progress, now, end);
      }
    }
    while (!queue_.batch_heap_empty()) {  // none unless a violation
      const Event e = queue_.PopBatch();
      ++result_.batch_violations;
      now = e.time;
      last = std::max(last, now);
      queue_.SetClock(now);
      Dispatch(e, Fabric::kNoPort);
    }
    batch_node_ = kAllNodes;
    batch_end_ = -1;
    now = last;
    queue_.EndBatch(now);
    if (win_end_due_) {  // a first-class flow completed in the batch
      win_end_due_ = false;
      win_end_ = std::min(w, end);
      win_end_bytes_ = InitialClassBytes();
    }
    if (have_global) {
      now = global.time;
      queue_.SetClock(now);
      ++result_.batches;
      Dispatch(global, Fabric::kNoPort);
    }
  }
  return now;
}

void Simulator::Finish(Time now) {
  fabric_->Settle(now);
  if (sc_.timeseries) TakeSample(now);
  RunResult& r = result_;
  r.completed = flows_done_ == flows_.size();
  r.end_time = now;
  r.delivered_bytes = verifier_->total_delivered();
  for (FlowResult& f : r.flows) f.delivered = verifier_->delivered(f.id);
  // Aggregate goodput (docs/simulator.md): bytes the flows that start
  // together (no dependencies) delivered while all of them were active --
  // from first start + warm-up until the first of them completed (or the
  // run ended) -- over that time and their ideal aggregate rate. When that
  // window is empty the makespan figure is used.
  const Time w0 = warm_time_ >= 0 ? warm_time_ : r.first_start;
  const Time w1 = win_end_ >= 0 ? win_end_ : now;
  const uint64_t b1 = win_end_ >= 0 ? win_end_bytes_ : InitialClassBytes();
  const double secs =
      static_cast<double>(std::max<Time>(1, now - r.first_start)) / kSecond;
  r.makespan_goodput_fraction =
      r.ideal_bps > 0
          ? static_cast<double>(r.delivered_bytes) * 8 / secs / r.ideal_bps
          : 0;
  if (w1 - w0 >= kMicrosecond && r.ideal_bps > 0 && b1 >= win_start_bytes_) {
    r.goodput_fraction = static_cast<double>(b1 - win_start_bytes_) * 8 /
                         (static_cast<double>(w1 - w0) / kSecond) / r.ideal_bps;
  } else {
    r.goodput_fraction = r.makespan_goodput_fraction;
  }
  r.window_start = w0;
  r.window_end = w1;
  for (FlowResult& f : r.flows) f.ideal_bps = ideal_rate_[f.id];
  const double mtu = tc_.mtu;
  const double eff = mtu / (mtu + driver_->data_header_bytes() +
                            sc_.fabric.wire_overhead_bytes);
  r.raw_goodput_fraction = r.goodput_fraction * eff;
  r.drops = fabric_->drops();
  r.drops_total = fabric_->total_drops();
  r.trims = fabric_->trims();
  r.ecn_marks = fabric_->ecn_marks();
  for (HostAgent* a : agents_) a->AddTotals(&r.totals);
  r.packets_created = pool_.allocated();
  r.packet_hops = fabric_->packet_hops();
  r.events = queue_.popped();
  r.duplicates = verifier_->duplicates();
  r.mismatches = verifier_->mismatches();
  // Invariants.
  std::string err;
  absl::Status st = fabric_->CheckInvariants();
  if (!st.ok()) err = std::string(st.message());
  // Every packet created is freed (delivered or dropped with a counted
  // reason) or still inside the fabric (queued or on a wire) or held by a
  // transport (none are: agents free on receipt).
  uint64_t held = 0;
  for (HostAgent* a : agents_) held += a->held_packets();
  const uint64_t in_net = fabric_->queued_packets() + fabric_->on_wire();
  if (err.empty() && pool_.live() != in_net + held) {
    err = absl::StrFormat(
        "packet accounting: %d live != %d in fabric + %d held by hosts",
        pool_.live(), in_net, held);
  }
  // Receiver discards happen after delivery; every other drop before.
  const uint64_t net_drops =
      r.drops_total -
      r.drops[static_cast<size_t>(DropReason::kReceiverDiscard)];
  if (err.empty() &&
      pool_.allocated() != delivered_packets_ + net_drops + in_net) {
    err = absl::StrFormat(
        "packet accounting: %d created != %d delivered + %d dropped + %d in "
        "fabric",
        pool_.allocated(), delivered_packets_, net_drops, in_net);
  }
  if (err.empty() && r.mismatches > 0) {
    err = absl::StrFormat("%d payload placements did not match", r.mismatches);
  }
  if (err.empty() && r.duplicates > 0) {
    err = absl::StrFormat("%d payload bytes ranges placed twice", r.duplicates);
  }
  if (err.empty() && r.batch_violations > 0) {
    err = absl::StrFormat(
        "batched scheduler: %d events dispatched outside their node's turn",
        r.batch_violations);
  }
  if (err.empty()) {
    for (const FlowResult& f : r.flows) {
      if (f.finish >= 0 && f.delivered != f.bytes) {
        err = absl::StrFormat("flow %d completed with %d of %d bytes placed",
                              f.id, f.delivered, f.bytes);
        break;
      }
      if (f.delivered > f.bytes) {
        err = absl::StrFormat("flow %d placed %d > %d bytes", f.id, f.delivered,
                              f.bytes);
        break;
      }
    }
  }
  r.invariant_error = err;
}

}  // namespace prism::sim
