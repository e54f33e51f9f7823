// Regression checks on the --quick variants of the prism_bench suites
// (bench/scenarios/bench_suites.h): each test runs one suite in-process,
// round-trips its JSON through the serializer and parser (as prism_bench
// writes it), and asserts the acceptance figures of issue 6 with looser
// bounds, so a regression in failover, loss recovery, incast isolation or
// spraying cannot land silently. The bounds and the full-size figures are
// in docs/benchmarks.md.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/scenarios/bench_suites.h"
#include "gtest/gtest.h"

namespace prism::bench {
namespace {

// The bars are asserted by default wherever the quick variant meets
// them (the runs are deterministic at seed 1). PRISM_BENCH_STRICT=1 also
// asserts the one figure Prism does not meet yet (link-flaps' makespan-based
// throughput, dominated by the last straggler's tail); by default that gets a
// regression floor just beyond today's figure, recorded in
// docs/benchmarks.md as a missed bar.
bool Strict() {
  const char* v = std::getenv("PRISM_BENCH_STRICT");
  return v != nullptr && std::string(v) == "1";
}

json::Value RunQuick(const std::string& suite) {
  SuiteOptions opt;
  opt.quick = true;
  opt.seed = 1;
  absl::StatusOr<json::Value> r = RunSuite(suite, opt);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return json::Value();
  std::printf("%s\n", FormatTable(*r).c_str());
  // What prism_bench writes is what the checks read.
  absl::StatusOr<json::Value> back = json::Parse(json::Serialize(*r, 2));
  EXPECT_TRUE(back.ok()) << back.status();
  return back.ok() ? *back : json::Value();
}

const json::Value& Scenario(const json::Value& res, const std::string& name) {
  static const json::Value kNull;
  const json::Value* scs = res.Find("scenarios");
  if (scs == nullptr) return kNull;
  for (const json::Value& s : scs->items()) {
    const json::Value* n = s.Find("name");
    if (n != nullptr && n->is_string() && n->as_string() == name) return s;
  }
  ADD_FAILURE() << "no scenario " << name;
  return kNull;
}

const json::Value& T(const json::Value& scenario,
                     const std::string& transport) {
  static const json::Value kNull;
  const json::Value* tr = scenario.Find("transports");
  const json::Value* t = tr ? tr->Find(transport) : nullptr;
  if (t == nullptr) {
    ADD_FAILURE() << "no transport " << transport;
    return kNull;
  }
  return *t;
}

double Num(const json::Value& t, const std::string& key) {
  const json::Value* v = t.Find(key);
  if (v == nullptr || !v->is_number()) {
    ADD_FAILURE() << key << " missing or not a number";
    return -1;
  }
  return v->as_double();
}

bool Bool(const json::Value& t, const std::string& key) {
  const json::Value* v = t.Find(key);
  if (v == nullptr || !v->is_bool()) {
    ADD_FAILURE() << key << " missing or not a bool";
    return false;
  }
  return v->as_bool();
}

// Every transport of every scenario kept the simulator's invariants (bytes
// exactly once and intact, packet accounting, queue limits).
void ExpectInvariants(const json::Value& res) {
  const json::Value* scs = res.Find("scenarios");
  ASSERT_NE(scs, nullptr);
  ASSERT_FALSE(scs->items().empty());
  for (const json::Value& s : scs->items()) {
    for (const auto& [name, t] : s.Find("transports")->members()) {
      const json::Value* inv = t.Find("invariants");
      ASSERT_NE(inv, nullptr);
      EXPECT_EQ(inv->as_string(), "ok")
          << s.Find("name")->as_string() << "/" << name;
    }
  }
}

TEST(BenchQuick, UnknownSuiteIsAnError) {
  absl::StatusOr<json::Value> r = RunSuite("no-such-suite", SuiteOptions{});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BenchQuick, PortLoss) {
  const json::Value res = RunQuick("port-loss");
  ExpectInvariants(res);
  for (const char* sc : {"sender-port", "receiver-port"}) {
    SCOPED_TRACE(sc);
    const json::Value& s = Scenario(res, sc);
    const json::Value& p = T(s, "prism");
    EXPECT_TRUE(Bool(p, "completed"));
    EXPECT_GE(Num(p, "goodput_before_fraction"), 0.85);
    EXPECT_GE(Num(p, "goodput_after_fraction"), 0.90);  // the bar
    const json::Value* rec = p.Find("recovery_us");
    ASSERT_NE(rec, nullptr);
    ASSERT_TRUE(rec->is_number()) << "Prism never recovered to 90% of 7/8";
    EXPECT_LE(rec->as_double(), 50);  // the bar (us)
    EXPECT_EQ(Num(p, "connection_errors"), 0);
  }
  // The single-path baseline's failed-plane share cannot move: it stalls
  // until the port is back, so the flow completes only after that.
  const json::Value& s = Scenario(res, "sender-port");
  const json::Value& r = T(s, "roce");
  EXPECT_TRUE(Bool(r, "finished_after_port_up"));
  EXPECT_GE(Num(r, "stall_us"), 50);
  EXPECT_GT(Num(r, "completion_us"), Num(T(s, "prism"), "completion_us"));
}

TEST(BenchQuick, RandomLoss) {
  const json::Value res = RunQuick("random-loss");
  ExpectInvariants(res);
  const double p3 =
      Num(T(Scenario(res, "loss-0.001"), "prism"), "goodput_fraction");
  const double p2 =
      Num(T(Scenario(res, "loss-0.01"), "prism"), "goodput_fraction");
  EXPECT_GE(p3, 0.90);  // the bar; 0.977 at seed 1
  EXPECT_GE(p2, 0.80);  // bar: 0.50; 0.915 since the engine's path timeout
  // 5% is beyond the bars; a floor under today's 0.652 (0.634
  // before the tail-loss probe resent one packet instead of the flight).
  EXPECT_GE(Num(T(Scenario(res, "loss-0.05"), "prism"), "goodput_fraction"),
            0.62);
  EXPECT_TRUE(Bool(T(Scenario(res, "loss-0.001"), "prism"), "completed"));
  EXPECT_TRUE(Bool(T(Scenario(res, "loss-0.01"), "prism"), "completed"));
  // Go-back-N collapses as loss grows, and far below Prism at 1%.
  const double r2 =
      Num(T(Scenario(res, "loss-0.01"), "roce"), "goodput_fraction");
  const double r1 =
      Num(T(Scenario(res, "loss-0.05"), "roce"), "goodput_fraction");
  EXPECT_LT(r2, 0.5);
  EXPECT_LT(r1, 0.2);
  EXPECT_LT(r2, p2);
}

TEST(BenchQuick, Incast) {
  const json::Value res = RunQuick("incast");
  ExpectInvariants(res);
  const json::Value& p = T(Scenario(res, "7-to-1"), "prism");
  EXPECT_TRUE(Bool(p, "completed"));
  EXPECT_GE(Num(p, "victim_fair_share_fraction"), 0.95);  // the bar
}

TEST(BenchQuick, Permutation) {
  const json::Value res = RunQuick("permutation");
  ExpectInvariants(res);
  const json::Value& s = Scenario(res, "permutation-32");
  for (const char* t : {"prism-oblivious", "prism-reps", "prism-p2c"}) {
    SCOPED_TRACE(t);
    EXPECT_TRUE(Bool(T(s, t), "completed"));
    EXPECT_GE(Num(T(s, t), "goodput_fraction"), 0.95);  // the bar
  }
  // ECMP hashing collisions keep the single-path baseline well below.
  EXPECT_LT(Num(T(s, "roce"), "goodput_fraction"),
            Num(T(s, "prism-oblivious"), "goodput_fraction") - 0.1);
}

TEST(BenchQuick, LinkFlaps) {
  const json::Value res = RunQuick("link-flaps");
  ExpectInvariants(res);
  const json::Value& s = Scenario(res, "all-to-all-16");
  // The default (failure-aware NSCC) and NSCC's plain quick adapt
  // ("prism-classic", congestion "nscc-classic") run side by side and meet
  // the same bounds; the figures in the comments are the default's.
  for (const char* name : {"prism", "prism-classic"}) {
    SCOPED_TRACE(name);
    const json::Value& p = T(s, name);
    EXPECT_TRUE(Bool(p, "completed"));
    EXPECT_EQ(Num(p, "connection_errors"), 0);
    // The bar, over the flap window: loss of throughput no larger than the
    // capacity taken away (0.022 vs 0.034 at seed 1, prism-classic the same:
    // quick adapt does not fire in this all-to-all since the simulator's
    // carriers take the pair spread; the baselines lose more than is taken
    // away).
    const double wlost = Num(p, "flap_window_throughput_loss_fraction");
    const double wremoved = Num(p, "flap_window_capacity_removed_fraction");
    EXPECT_GT(wremoved, 0.02);
    EXPECT_LE(wlost, wremoved);
    EXPECT_LT(wlost, Num(T(s, "roce"), "flap_window_throughput_loss_fraction"));
    // Makespan-based (all bytes / last completion): the last straggler's tail
    // decides it. NOT MET (0.309 lost vs 0.032 removed at seed 1: a packet
    // lost into a dead link near a flow's end costs about two loaded RTTs;
    // 0.241 with the earlier lockstep carriers, whose slower undisturbed run
    // hid part of it); the default run guards against regression beyond
    // today's figure.
    const double lost = Num(p, "throughput_loss_fraction");
    const double removed = Num(p, "capacity_removed_fraction");
    std::printf(
        "link-flaps %s: flap window: loss %.3f, removed %.3f; makespan: loss "
        "%.3f, removed %.3f\n",
        name, wlost, wremoved, lost, removed);
    if (Strict()) {
      EXPECT_LE(lost, removed + 0.05);
    } else {
      EXPECT_LE(lost, 0.35) << "regression beyond the recorded 0.290";
    }
    EXPECT_LE(Num(p, "fct_p99_vs_no_flaps"), 1.5);  // 1.35 at seed 1
    // 7 at seed 1 (53 / 70 with lockstep carriers; ~1100 before the path
    // timeout).
    EXPECT_LE(Num(p, "timeouts"), 120);
    // Failover accounting (the fabric's view; docs/benchmarks.md): flaps put
    // DATA on dead paths; every dead path outage that got DATA belongs to one
    // route group of one connection and one dead hop of one sender, so the
    // counts nest. At seed 1: 1532 + 165 sends onto 1697 path outages (1.00
    // each), 1669 route-group outages, 313 hop outages (prism-classic the
    // same).
    const double sends =
        Num(p, "dead_path_data_packets") + Num(p, "dead_path_retransmissions");
    EXPECT_GT(sends, 0);
    EXPECT_LE(sends, 2600) << "regression: more DATA onto dead paths";
    EXPECT_GE(Num(p, "dead_path_outages"), Num(p, "dead_route_group_outages"));
    EXPECT_GE(Num(p, "dead_route_group_outages"), Num(p, "dead_hop_outages"));
    EXPECT_GT(Num(p, "dead_hop_outages"), 0);
    EXPECT_GE(Num(p, "dead_path_sends_per_outage"), 1.0);
    // A send onto a dead path happens while its hop is down (20 us).
    EXPECT_LE(Num(p, "dead_path_last_send_us_p99"), Num(s, "flap_down_us"));
  }
  const json::Value* roce_dead = T(s, "roce").Find("dead_path_data_packets");
  ASSERT_NE(roce_dead, nullptr);
  EXPECT_TRUE(roce_dead->is_null());  // not measured for the baselines
}

TEST(BenchQuick, T1Reboot) {
  const json::Value res = RunQuick("t1-reboot");
  ExpectInvariants(res);
  const json::Value& p = T(Scenario(res, "ring-allreduce-16"), "prism");
  EXPECT_TRUE(Bool(p, "completed"));
  EXPECT_EQ(Num(p, "connection_errors"), 0);
  // Bar: loss no larger than the capacity removed (0.125). Met since the
  // tail resend (0.111, step 32.5 us against 28.9 undisturbed; 0.357 with
  // group balance alone, 0.440 before either: the path timeout's
  // rto_min / 4 floor and the srtt lifted by the slow steps kept packets
  // lost into the rebooting switches waiting; docs/congestion.md "Tail
  // resend"). The full variant meets it too (0.002).
  const double lost = Num(p, "throughput_loss_fraction");
  EXPECT_LE(lost, Num(p, "capacity_removed_fraction"));
}

}  // namespace
}  // namespace prism::bench
