// Congestion controllers: factory and config validation, the fixed window,
// every NSCC quadrant, quick adapt, receiver penalty, derived defaults, and
// the DCQCN-like rate controller's cut / recovery / increase stages.
#include "congestion/controller.h"

#include <cmath>
#include <cstdint>
#include <memory>

#include "congestion/dcqcn/dcqcn.h"
#include "congestion/fixed/fixed_window.h"
#include "congestion/nscc/nscc.h"
#include "gtest/gtest.h"
#include "transport/base/random.h"

namespace prism::congestion {
namespace {

constexpr Time kUs = kMicrosecond;
constexpr uint64_t k100G = 100'000'000'000ull;

ControllerConfig Cfg(const char* algo) {
  ControllerConfig c;
  c.algorithm = algo;
  c.link_rate_bps = k100G;
  c.base_rtt = 10 * kUs;
  c.mtu_bytes = 4096;
  return c;
}

AckEvent Ack(Time now, uint32_t packets, Time rtt, uint32_t ecn = 0,
             uint32_t trimmed = 0, uint32_t lost = 0) {
  AckEvent e;
  e.now = now;
  e.acked_packets = packets;
  e.acked_bytes = 4096ull * packets;
  e.rtt = rtt;
  e.ecn_marked = ecn;
  e.trimmed = trimmed;
  e.lost = lost;
  return e;
}

// The quadrant tests check the decrease formula at md_gain = 1 (its
// default, 0.3, scales the delay term: DefaultMdGainScalesTheDelayTerm).
NsccController Nscc(double md_gain = 1.0) {
  NsccParams p = NsccParams::Defaults(Cfg("nscc"));
  p.md_gain = md_gain;
  EXPECT_TRUE(p.Validate().ok());
  return NsccController(p);
}

// ---- factory ----------------------------------------------------------------

TEST(FactoryTest, BuildsEachAlgorithmByName) {
  for (const char* algo : {"nscc", "nscc-classic", "fixed", "dcqcn"}) {
    auto c = MakeController(Cfg(algo));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_STREQ((*c)->name(), algo);
    EXPECT_GT((*c)->window_bytes(), 0u);
  }
  // The earlier opt-in name of the failure-aware rule: now the default.
  auto fa = MakeController(Cfg("nscc-fa"));
  ASSERT_TRUE(fa.ok()) << fa.status();
  EXPECT_STREQ((*fa)->name(), "nscc");
  auto d = MakeController(Cfg("dcqcn"));
  EXPECT_EQ((*d)->pacing_rate_bps(), k100G);
  EXPECT_EQ((*MakeController(Cfg("nscc")))->pacing_rate_bps(), 0u);
  EXPECT_EQ((*MakeController(Cfg("fixed")))->pacing_rate_bps(), 0u);
}

TEST(FactoryTest, RejectsBadConfigs) {
  auto invalid = [](const ControllerConfig& c) {
    auto r = MakeController(c);
    return !r.ok() && r.status().code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(invalid(Cfg("cubic")));
  EXPECT_TRUE(invalid(Cfg("")));
  for (const char* algo : {"nscc", "fixed", "dcqcn"}) {
    ControllerConfig c = Cfg(algo);
    c.link_rate_bps = 0;
    EXPECT_TRUE(invalid(c)) << algo;
    c = Cfg(algo);
    c.base_rtt = 0;
    EXPECT_TRUE(invalid(c)) << algo;
    c.base_rtt = -5;
    EXPECT_TRUE(invalid(c)) << algo;
    c = Cfg(algo);
    c.mtu_bytes = 0;
    EXPECT_TRUE(invalid(c)) << algo;
  }
  ControllerConfig c = Cfg("nscc");
  c.target_delay = c.base_rtt;  // no room for a queue
  EXPECT_TRUE(invalid(c));
  c = Cfg("nscc");
  c.max_window_bytes = 100;  // below one MTU
  EXPECT_TRUE(invalid(c));
}

TEST(FactoryTest, ExtremeRatesAndRttsDoNotOverflow) {
  for (const char* algo : {"nscc", "fixed", "dcqcn"}) {
    ControllerConfig c = Cfg(algo);
    c.link_rate_bps = UINT64_MAX;
    c.base_rtt = kSecond * 1000;
    auto cc = MakeController(c);
    ASSERT_TRUE(cc.ok()) << algo << cc.status();
    EXPECT_GE((*cc)->window_bytes(), kMaxDerivedWindowBytes) << algo;
    EXPECT_LE((*cc)->window_bytes(), 4 * kMaxDerivedWindowBytes) << algo;
    (*cc)->OnAck(Ack(kSecond, 4, kSecond * 1000, 4, 1));
    (*cc)->OnTimeout(2 * kSecond);
    EXPECT_GE((*cc)->window_bytes(), 4096u) << algo;
    c.link_rate_bps = 1;  // 1 bit/s, tiny RTT: windows floor at an MTU
    c.base_rtt = 1;
    cc = MakeController(c);
    ASSERT_TRUE(cc.ok()) << algo << cc.status();
    EXPECT_GE((*cc)->window_bytes(), 4096u) << algo;
  }
}

// ---- fixed ------------------------------------------------------------------

TEST(FixedTest, OneAndAHalfBdpByDefaultAndIgnoresEvents) {
  EXPECT_EQ(BdpBytes(k100G, 10 * kUs), 125000u);
  auto c = MakeController(Cfg("fixed"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->window_bytes(), 187500u);
  (*c)->OnAck(Ack(0, 10, 50 * kUs, 10, 3, 2));
  (*c)->OnTimeout(kMillisecond);
  EXPECT_EQ((*c)->window_bytes(), 187500u);
  ControllerConfig cfg = Cfg("fixed");
  cfg.fixed_window_bytes = 50000;
  EXPECT_EQ((*MakeController(cfg))->window_bytes(), 50000u);
  cfg.fixed_window_bytes = 10;  // at least one MTU
  EXPECT_EQ((*MakeController(cfg))->window_bytes(), 4096u);
}

// ---- NSCC defaults ----------------------------------------------------------

TEST(NsccDefaultsTest, DerivedFromRateAndRtt) {
  NsccParams p = NsccParams::Defaults(Cfg("nscc"));
  EXPECT_EQ(p.bdp_bytes, 125000u);
  EXPECT_EQ(p.target_delay, 15 * kUs);
  EXPECT_EQ(p.max_window_bytes, 187500u);
  EXPECT_EQ(p.initial_window_bytes, 125000u);
  EXPECT_EQ(p.min_window_bytes, 4096u);
  EXPECT_EQ(p.fair_increase_bytes, 4096u);
  EXPECT_EQ(p.prop_increase_bytes, 31250u);  // BDP / 4 per RTT
  EXPECT_EQ(p.qa_delay_threshold, 60 * kUs);

  ControllerConfig c = Cfg("nscc");
  c.link_rate_bps = 400'000'000'000ull;
  c.base_rtt = 20 * kUs;
  p = NsccParams::Defaults(c);
  EXPECT_EQ(p.bdp_bytes, 1'000'000u);
  EXPECT_EQ(p.target_delay, 30 * kUs);
  EXPECT_EQ(p.max_window_bytes, 1'500'000u);

  // Slow link: two MTUs take longer than half the RTT, so they set the target;
  // the window range never collapses below two MTUs.
  c = Cfg("nscc");
  c.link_rate_bps = 1'000'000'000ull;
  p = NsccParams::Defaults(c);
  EXPECT_EQ(p.target_delay, 10 * kUs + 65536 * kNanosecond);
  EXPECT_EQ(p.max_window_bytes, 8192u);
  EXPECT_EQ(p.initial_window_bytes, 4096u);
  EXPECT_TRUE(p.Validate().ok());

  c = Cfg("nscc");
  c.target_delay = 25 * kUs;
  c.max_window_bytes = 300000;
  p = NsccParams::Defaults(c);
  EXPECT_EQ(p.target_delay, 25 * kUs);
  EXPECT_EQ(p.max_window_bytes, 300000u);
}

TEST(NsccDefaultsTest, ValidateRejectsNonsense) {
  const NsccParams good = NsccParams::Defaults(Cfg("nscc"));
  NsccParams p = good;
  p.max_md = 1.0;
  EXPECT_FALSE(p.Validate().ok());
  p = good;
  p.md_gain = -1;
  EXPECT_FALSE(p.Validate().ok());
  p = good;
  p.md_gain = NAN;
  EXPECT_FALSE(p.Validate().ok());
  p = good;
  p.initial_window_bytes = good.max_window_bytes + 1;
  EXPECT_FALSE(p.Validate().ok());
  p = good;
  p.loss_md = 0.9;
  EXPECT_FALSE(p.Validate().ok());
}

// ---- NSCC quadrants ---------------------------------------------------------

TEST(NsccQuadrantTest, NoEcnBelowTargetIncreasesProportionally) {
  // Per RTT: prop_increase_bytes (BDP / 4) x f; per batch scaled by
  // acked / window. 16384 / 125000 of 31250 = 4096 at the base RTT.
  NsccController a = Nscc();
  a.OnAck(Ack(0, 4, 10 * kUs));  // at base RTT: f = 1
  EXPECT_EQ(a.cwnd_bytes(), 125000u + 4096u);
  NsccController b = Nscc();
  b.OnAck(Ack(0, 4, 12'500 * kNanosecond));  // halfway to the target
  EXPECT_EQ(b.cwnd_bytes(), 125000u + 2048u);
  NsccController c = Nscc();
  c.OnAck(Ack(0, 4, 14 * kUs));  // close to the target: small step
  EXPECT_NEAR(static_cast<double>(c.cwnd_bytes()), 125000 + 4096 * 0.2, 1);
  EXPECT_EQ(a.counters().proportional_increases, 1u);
  // One window of clean ACKs at base RTT adds about BDP / 4.
  NsccController d = Nscc();
  for (int i = 0; i < 31; ++i) d.OnAck(Ack(i * kUs, 1, 10 * kUs));
  EXPECT_GT(d.cwnd_bytes(), 125000u + 31250u * 85 / 100);
  EXPECT_LE(d.cwnd_bytes(), 125000u + 31250u);
  // Bounded by the max window.
  for (int i = 1; i < 80; ++i) a.OnAck(Ack(i * kUs, 4, 10 * kUs));
  EXPECT_EQ(a.window_bytes(), 187500u);
}

TEST(NsccQuadrantTest, NoEcnAboveTargetIncreasesFairly) {
  NsccController a = Nscc();
  a.OnAck(Ack(0, 4, 20 * kUs));
  EXPECT_EQ(a.cwnd_bytes(), 125000u + 4096u * 16384u / 125000u);
  EXPECT_EQ(a.counters().fair_increases, 1u);
  // One window's worth of ACKs adds about one MTU, whatever the RTT.
  NsccController b = Nscc();
  for (int i = 0; i < 31; ++i) b.OnAck(Ack(i * kUs, 1, 40 * kUs));
  EXPECT_NEAR(static_cast<double>(b.cwnd_bytes()), 125000 + 4096, 300);
}

TEST(NsccQuadrantTest, EcnAboveTargetDecreasesMultiplicatively) {
  // md = (rtt - target) / (rtt - base_rtt): the excess over the target
  // queueing delay, relative to the queueing delay.
  NsccController a = Nscc();
  a.OnAck(Ack(0, 4, 16 * kUs, /*ecn=*/4));  // 1us over 6us queue: md = 1/6
  EXPECT_EQ(a.cwnd_bytes(), 104166u);
  a.OnAck(Ack(5 * kUs, 4, 16 * kUs, 4));  // same RTT: no second cut
  EXPECT_EQ(a.cwnd_bytes(), 104166u);
  a.OnAck(Ack(16 * kUs, 4, 16 * kUs, 4));  // next RTT
  EXPECT_EQ(a.cwnd_bytes(), 86805u);
  EXPECT_EQ(a.counters().decreases, 2u);
  // Further above: larger cut, bounded by max_md.
  NsccController b = Nscc();
  b.OnAck(Ack(0, 4, 17'500 * kNanosecond, 4));  // md = 2.5 / 7.5
  EXPECT_EQ(b.cwnd_bytes(), 83333u);
  NsccController c = Nscc();
  c.OnAck(Ack(0, 4, 500 * kUs, 4));  // md = 0.99 -> 0.5
  EXPECT_EQ(c.cwnd_bytes(), 62500u);
  // Never below the min window.
  for (int i = 1; i < 40; ++i) c.OnAck(Ack(i * kMillisecond, 4, 500 * kUs, 4));
  EXPECT_EQ(c.window_bytes(), 4096u);
}

TEST(NsccQuadrantTest, EcnBelowTargetChangesNothing) {
  NsccController a = Nscc();
  a.OnAck(Ack(0, 4, 12 * kUs, /*ecn=*/4));
  EXPECT_EQ(a.cwnd_bytes(), 125000u);
  EXPECT_EQ(a.counters().ecn_no_change, 1u);
  EXPECT_EQ(a.counters().decreases, 0u);
  // A half-marked batch below target: only the clean half increases.
  NsccController b = Nscc();
  b.OnAck(Ack(0, 4, 12 * kUs, 2));  // f = 3/5 on 8192 clean bytes
  EXPECT_NEAR(static_cast<double>(b.cwnd_bytes()),
              125000 + 31250 * 0.6 * 8192 / 125000, 1);
}

TEST(NsccQuadrantTest, TrimsAreCongestion) {
  NsccController a = Nscc();
  a.OnAck(Ack(0, 4, 12 * kUs, 0, /*trimmed=*/1));  // below target, yet cut
  EXPECT_EQ(a.cwnd_bytes(), 93750u);               // loss_md = 0.25
  EXPECT_EQ(a.counters().decreases, 1u);
  EXPECT_EQ(a.counters().proportional_increases, 0u);
  NsccController c = Nscc();
  c.OnAck(Ack(0, 4, 40 * kUs, 4, 1));  // delay term dominates: 25/30
  EXPECT_EQ(c.cwnd_bytes(), 62500u);   // capped at max_md
}

TEST(NsccQuadrantTest, DefaultMdGainScalesTheDelayTerm) {
  const NsccParams p = NsccParams::Defaults(Cfg("nscc"));
  EXPECT_DOUBLE_EQ(p.md_gain, 0.3);
  NsccController a(p);
  a.OnAck(Ack(0, 4, 16 * kUs, /*ecn=*/4));  // md = 0.3 x 1/6 = 0.05
  EXPECT_EQ(a.cwnd_bytes(), 118750u);
  NsccController c(p);
  c.OnAck(Ack(0, 4, 500 * kUs, 4));  // md = 0.3 x 0.99: below max_md
  EXPECT_NEAR(static_cast<double>(c.cwnd_bytes()),
              125000 * (1 - 0.3 * 485.0 / 490.0), 1);
  NsccController t(p);
  t.OnAck(Ack(0, 4, 12 * kUs, 0, /*trimmed=*/1));  // trims: loss_md
  EXPECT_EQ(t.cwnd_bytes(), 93750u);
}

NsccController NsccLossIsCongestion(bool on) {
  ControllerConfig c = Cfg("nscc");
  c.loss_is_congestion = on;
  NsccParams p = NsccParams::Defaults(c);
  p.md_gain = 1.0;
  EXPECT_EQ(p.loss_is_congestion, on);
  EXPECT_TRUE(p.Validate().ok());
  return NsccController(p);
}

TEST(NsccQuadrantTest, LossIsNotCongestionByDefault) {
  EXPECT_FALSE(NsccParams::Defaults(Cfg("nscc")).loss_is_congestion);
  // Below target with a loss: the clean bytes still increase proportionally
  // (f = 3/5 on 16 KB), exactly as without the loss; no decrease.
  NsccController a = Nscc();
  NsccController ref = Nscc();
  a.OnAck(Ack(0, 4, 12 * kUs, 0, 0, /*lost=*/2));
  ref.OnAck(Ack(0, 4, 12 * kUs));
  EXPECT_EQ(a.cwnd_bytes(), ref.cwnd_bytes());
  EXPECT_NEAR(static_cast<double>(a.cwnd_bytes()),
              125000 + 31250 * 0.6 * 16384 / 125000, 1);
  EXPECT_EQ(a.counters().decreases, 0u);
  EXPECT_EQ(a.counters().proportional_increases, 1u);
  // Above target, no ECN, with a loss: fair increase, no decrease.
  NsccController b = Nscc();
  b.OnAck(Ack(0, 4, 20 * kUs, 0, 0, /*lost=*/3));
  EXPECT_EQ(b.counters().fair_increases, 1u);
  EXPECT_EQ(b.counters().decreases, 0u);
  EXPECT_GT(b.cwnd_bytes(), 125000u);
  // ECN above target with a loss: the ECN rule alone (as in
  // EcnAboveTargetDecreasesMultiplicatively), not raised to loss_md.
  NsccController e = Nscc();
  e.OnAck(Ack(0, 4, 40 * kUs, 4, 0, /*lost=*/1));
  EXPECT_EQ(e.cwnd_bytes(), 62500u);  // 25/30 capped at max_md, as with trims
  NsccController e2 = Nscc();
  e2.OnAck(Ack(0, 4, 16 * kUs, 4, 0, /*lost=*/1));  // md = 1/6 < loss_md
  EXPECT_NEAR(static_cast<double>(e2.cwnd_bytes()), 125000.0 * 5 / 6, 1);
}

TEST(NsccQuadrantTest, LossIsCongestionWhenConfigured) {
  NsccController b = NsccLossIsCongestion(true);
  b.OnAck(Ack(0, 4, 12 * kUs, 0, 0, /*lost=*/2));
  EXPECT_EQ(b.cwnd_bytes(), 93750u);  // loss_md = 0.25 whatever the RTT
  EXPECT_EQ(b.counters().proportional_increases, 0u);
  EXPECT_EQ(b.counters().decreases, 1u);
  NsccController e = NsccLossIsCongestion(true);
  e.OnAck(Ack(0, 4, 16 * kUs, 4, 0, /*lost=*/1));  // loss_md > 1/6
  EXPECT_EQ(e.cwnd_bytes(), 93750u);
  // Through the factory too.
  ControllerConfig c = Cfg("nscc");
  c.loss_is_congestion = true;
  auto ctl = MakeController(c);
  ASSERT_TRUE(ctl.ok());
  (*ctl)->OnAck(Ack(0, 4, 12 * kUs, 0, 0, 1));
  EXPECT_EQ((*ctl)->window_bytes(), 93750u);
  c.loss_is_congestion = false;
  ctl = MakeController(c);
  ASSERT_TRUE(ctl.ok());
  (*ctl)->OnAck(Ack(0, 4, 12 * kUs, 0, 0, 1));
  EXPECT_GT((*ctl)->window_bytes(), 125000u);
}

TEST(NsccTest, QuickAdaptArmedByLossOnlyWhenLossIsCongestion) {
  // A collapse in delivery at a normal RTT, with losses only: quick adapt
  // fires when losses are congestion, not otherwise (a failed path's
  // losses are repaired by retransmission and rerouting, not by CC).
  for (const bool on : {false, true}) {
    NsccController a = NsccLossIsCongestion(on);
    a.OnAck(Ack(0, 15, 12 * kUs));
    a.OnAck(Ack(20 * kUs, 15, 12 * kUs));
    a.OnAck(Ack(25 * kUs, 1, 12 * kUs, 0, 0, /*lost=*/3));
    a.OnAck(Ack(40 * kUs, 1, 12 * kUs, 0, 0, /*lost=*/2));
    EXPECT_EQ(a.counters().quick_adapts, on ? 1u : 0u) << on;
    if (on) {
      EXPECT_EQ(a.cwnd_bytes(), 8192u);
    } else {
      EXPECT_GT(a.cwnd_bytes(), 125000u);
      EXPECT_EQ(a.counters().decreases, 0u);
    }
  }
}

TEST(NsccTest, TimeoutStillHalvesWithLossNotCongestion) {
  NsccController a = Nscc();
  a.OnAck(Ack(0, 0, 0, 0, 0, /*lost=*/5));
  EXPECT_EQ(a.cwnd_bytes(), 125000u);
  a.OnTimeout(kMillisecond);
  EXPECT_EQ(a.cwnd_bytes(), 62500u);
}

TEST(NsccTest, QuickAdaptSetsWindowToDelivered) {
  NsccController a = Nscc();
  a.OnAck(Ack(0, 15, 20 * kUs));         // opens a 20us observation period
  a.OnAck(Ack(20 * kUs, 15, 20 * kUs));  // closes it: 120 KB delivered
  EXPECT_EQ(a.counters().quick_adapts, 0u);
  a.OnAck(Ack(25 * kUs, 1, 20 * kUs, 0, /*trimmed=*/3));  // sudden collapse
  const uint64_t after_cut = a.cwnd_bytes();
  EXPECT_LT(after_cut, 100000u);
  a.OnAck(Ack(40 * kUs, 1, 20 * kUs, 0, 2));  // period ends: 8 KB delivered
  EXPECT_EQ(a.counters().quick_adapts, 1u);
  EXPECT_EQ(a.cwnd_bytes(), 8192u);
}

TEST(NsccTest, QuickAdaptInIncastFindsTheFairShare) {
  // 7 senders share a 100 Gb/s last hop: each gets 1/7 of it, ACKs come
  // back with a 70 us RTT and some trims. Over one 15 us target period a
  // sender sees 12.5 B/ns x 15 us / 7 = 26.8 KB delivered.
  NsccController a = Nscc();
  const uint64_t per_us = 12500 / 7;  // bytes per microsecond
  for (int t = 0; t <= 15; ++t) {
    AckEvent e;
    e.now = t * kUs;
    e.acked_bytes = per_us;
    e.acked_packets = 1;
    e.rtt = 70 * kUs;
    e.trimmed = t % 5 == 0 ? 1 : 0;
    a.OnAck(e);
  }
  EXPECT_EQ(a.counters().quick_adapts, 1u);
  EXPECT_EQ(a.cwnd_bytes(), 16 * per_us);  // delivered in the period
}

TEST(NsccTest, QuickAdaptOnHighRttWithoutLosses) {
  NsccController a = Nscc();
  a.OnAck(Ack(0, 1, 80 * kUs));  // above the 60us qa threshold
  a.OnAck(Ack(40 * kUs, 1, 80 * kUs));
  EXPECT_EQ(a.counters().quick_adapts, 1u);
  EXPECT_EQ(a.cwnd_bytes(), 8192u);
}

// Failure-aware quick adapt (the default "nscc"), md_gain 1 as Nscc().
NsccController NsccFa(bool loss_is_congestion = false) {
  ControllerConfig c = Cfg("nscc");
  c.loss_is_congestion = loss_is_congestion;
  NsccParams p = NsccParams::Defaults(c);
  p.md_gain = 1.0;
  EXPECT_TRUE(p.qa_failure_aware);
  EXPECT_TRUE(p.Validate().ok());
  return NsccController(p);
}

// NSCC's plain quick adapt ("nscc-classic"), md_gain 1.
NsccController NsccClassic() {
  NsccParams p = NsccParams::Defaults(Cfg("nscc-classic"));
  p.md_gain = 1.0;
  EXPECT_FALSE(p.qa_failure_aware);
  EXPECT_TRUE(p.Validate().ok());
  return NsccController(p);
}

TEST(NsccTest, FailureAwareQuickAdaptIsTheDefault) {
  EXPECT_TRUE(NsccParams::Defaults(Cfg("nscc")).qa_failure_aware);
  EXPECT_TRUE(NsccParams::Defaults(Cfg("nscc-fa")).qa_failure_aware);
  EXPECT_FALSE(NsccParams::Defaults(Cfg("nscc-classic")).qa_failure_aware);
  EXPECT_STREQ(NsccFa().name(), "nscc");
  EXPECT_STREQ(NsccClassic().name(), "nscc-classic");
}

TEST(NsccTest, QuickAdaptCutLeavesRoomForStrandedBytes) {
  // Failure-aware: the cut is to what was delivered plus the bytes the
  // engine reports stranded in flight (sent over an srtt ago, overtaken),
  // which wait for their path timeout and would otherwise fill the window.
  // The latest RTT sample triggers it, as in NSCC.
  NsccController a = NsccFa();
  a.OnAck(Ack(0, 1, 12 * kUs));
  AckEvent e = Ack(40 * kUs, 1, 80 * kUs);
  e.stranded_bytes = 5 * 4096;
  a.OnAck(e);
  EXPECT_EQ(a.counters().quick_adapts, 1u);
  EXPECT_EQ(a.cwnd_bytes(), 8192u + 5 * 4096u);
  // The classic rule ignores them.
  NsccController b = NsccClassic();
  b.OnAck(Ack(0, 1, 12 * kUs));
  b.OnAck(e);
  EXPECT_EQ(b.counters().quick_adapts, 1u);
  EXPECT_EQ(b.cwnd_bytes(), 8192u);
}

TEST(NsccTest, QuickAdaptHeldWhileRecoveringFromPathFailure) {
  // Failure-aware: the same collapse as QuickAdaptOnHighRttWithoutLosses,
  // but within 5 x max(RTT, target) = 400 us of a non-trim loss (3 x =
  // 240 us of a stranded transmission): the shortfall is the stranded
  // bytes, no cut.
  for (const bool stranded : {false, true}) {
    NsccController a = NsccFa();
    AckEvent e = Ack(0, 1, 80 * kUs, 0, 0, /*lost=*/stranded ? 0 : 1);
    e.stranded = stranded;
    a.OnAck(e);
    a.OnAck(Ack(40 * kUs, 1, 80 * kUs));
    EXPECT_EQ(a.counters().quick_adapts, 0u) << stranded;
    EXPECT_EQ(a.counters().quick_adapts_held, 1u) << stranded;
    EXPECT_GT(a.cwnd_bytes(), 100000u) << stranded;
    // Still held just before the end; past it quick adapt acts again.
    const Time end = (stranded ? 240 : 400) * kUs;
    a.OnAck(Ack(end - 10 * kUs, 1, 80 * kUs));
    EXPECT_EQ(a.counters().quick_adapts, 0u) << stranded;
    a.OnAck(Ack(end + 10 * kUs, 1, 80 * kUs));
    EXPECT_EQ(a.counters().quick_adapts, 1u) << stranded;
    EXPECT_EQ(a.cwnd_bytes(), 4096u) << stranded;
  }
  // Losses that are congestion (drop-tail) do not hold it.
  NsccController b = NsccFa(/*loss_is_congestion=*/true);
  b.OnAck(Ack(0, 1, 80 * kUs, 0, 0, /*lost=*/1));
  b.OnAck(Ack(40 * kUs, 1, 80 * kUs));
  EXPECT_EQ(b.counters().quick_adapts, 1u);
  EXPECT_EQ(b.counters().quick_adapts_held, 0u);
}

TEST(NsccTest, ClassicQuickAdaptCutsThroughPathFailures) {
  // Not failure-aware ("nscc-classic"): a lossy or stranded period still
  // cuts, and one sample above the threshold is enough.
  for (const bool stranded : {false, true}) {
    NsccController a = NsccClassic();
    AckEvent e = Ack(0, 1, 80 * kUs, 0, 0, /*lost=*/stranded ? 0 : 1);
    e.stranded = stranded;
    a.OnAck(e);
    a.OnAck(Ack(40 * kUs, 1, 80 * kUs));
    EXPECT_EQ(a.counters().quick_adapts, 1u) << stranded;
    EXPECT_EQ(a.counters().quick_adapts_held, 0u) << stranded;
    EXPECT_EQ(a.cwnd_bytes(), 8192u) << stranded;
  }
  NsccController b = NsccClassic();
  b.OnAck(Ack(0, 1, 12 * kUs));
  b.OnAck(Ack(10 * kUs, 1, 12 * kUs));
  b.OnAck(Ack(40 * kUs, 1, 80 * kUs));  // the latest sample decides
  EXPECT_EQ(b.counters().quick_adapts, 1u);
}

TEST(NsccTest, NoQuickAdaptWhenMerelyAppLimited) {
  NsccController a = Nscc();
  for (int i = 0; i < 10; ++i) a.OnAck(Ack(i * 20 * kUs, 1, 12 * kUs));
  EXPECT_EQ(a.counters().quick_adapts, 0u);
  EXPECT_GT(a.cwnd_bytes(), 125000u);
}

TEST(NsccTest, ReceiverPenaltyHonoured) {
  NsccController a = Nscc();
  AckEvent e = Ack(0, 0, 0);
  e.rx_window_penalty = 10;
  a.OnAck(e);
  EXPECT_EQ(a.window_bytes(), 125000u - 40960u);
  e.rx_window_penalty = 1000;
  a.OnAck(e);
  EXPECT_EQ(a.window_bytes(), 4096u);
  e.rx_window_penalty = 0;
  a.OnAck(e);
  EXPECT_EQ(a.window_bytes(), 125000u);
}

TEST(NsccTest, TimeoutHalvesTheWindow) {
  NsccController a = Nscc();
  a.OnTimeout(kMillisecond);
  EXPECT_EQ(a.cwnd_bytes(), 62500u);
  for (int i = 0; i < 10; ++i) a.OnTimeout(kMillisecond * (2 + i));
  EXPECT_EQ(a.window_bytes(), 4096u);
  EXPECT_EQ(a.counters().timeouts, 11u);
}

TEST(NsccTest, WindowStaysInRangeAndIsDeterministic) {
  auto run = [] {
    NsccController a = Nscc();
    Rng rng(3);
    uint64_t digest = 0;
    Time now = 0;
    for (int i = 0; i < 20000; ++i) {
      now += static_cast<Time>(rng.Uniform(5000)) * kNanosecond;
      AckEvent e = Ack(now, static_cast<uint32_t>(rng.Uniform(9)),
                       static_cast<Time>(rng.Uniform(60)) * kUs);
      e.ecn_marked = static_cast<uint32_t>(rng.Uniform(12));  // may exceed
      e.trimmed = rng.Bernoulli(0.05) ? 1 : 0;
      e.lost = rng.Bernoulli(0.01) ? 1 : 0;
      e.rx_window_penalty = rng.Bernoulli(0.05) ? 3 : 0;
      if (rng.Bernoulli(0.001)) {
        a.OnTimeout(now);
      } else {
        a.OnAck(e);
      }
      EXPECT_GE(a.window_bytes(), 4096u);
      EXPECT_LE(a.window_bytes(), 187500u);
      digest = digest * 31 + a.window_bytes();
    }
    return digest;
  };
  EXPECT_EQ(run(), run());
}

// ---- DCQCN ------------------------------------------------------------------

DcqcnController Dcqcn() {
  const DcqcnParams p = DcqcnParams::Defaults(Cfg("dcqcn"));
  EXPECT_TRUE(p.Validate().ok());
  return DcqcnController(p);
}

TEST(DcqcnTest, DefaultsAndLargeWindow) {
  const DcqcnParams p = DcqcnParams::Defaults(Cfg("dcqcn"));
  EXPECT_EQ(p.min_rate_bps, 100'000'000u);
  EXPECT_EQ(p.rai_bps, 100'000'000u);
  EXPECT_EQ(p.rhai_bps, 1'000'000'000u);
  EXPECT_EQ(p.window_bytes, 500000u);
  DcqcnController d = Dcqcn();
  EXPECT_EQ(d.pacing_rate_bps(), k100G);
  EXPECT_EQ(d.window_bytes(), 500000u);
}

TEST(DcqcnTest, EcnCutsByAlphaAndCnpsArePaced) {
  DcqcnController d = Dcqcn();
  d.OnAck(Ack(0, 4, 10 * kUs, /*ecn=*/1));
  EXPECT_EQ(d.pacing_rate_bps(), k100G / 2);  // alpha starts at 1
  EXPECT_EQ(d.target_rate_bps(), k100G);
  EXPECT_DOUBLE_EQ(d.alpha(), 1.0);
  d.OnAck(Ack(10 * kUs, 4, 10 * kUs, 1));  // within cnp_interval: ignored
  EXPECT_EQ(d.pacing_rate_bps(), k100G / 2);
  d.OnAck(Ack(50 * kUs, 4, 10 * kUs, 1));
  EXPECT_EQ(d.pacing_rate_bps(), k100G / 4);
  EXPECT_EQ(d.target_rate_bps(), k100G / 2);
  EXPECT_EQ(d.counters().cuts, 2u);
  // Trims and timeouts are congestion notifications too.
  DcqcnController e = Dcqcn();
  e.OnAck(Ack(0, 4, 10 * kUs, 0, /*trimmed=*/1));
  EXPECT_EQ(e.pacing_rate_bps(), k100G / 2);
  DcqcnController f = Dcqcn();
  f.OnTimeout(0);
  EXPECT_EQ(f.pacing_rate_bps(), k100G / 2);
}

TEST(DcqcnTest, AlphaDecaysWithoutCnps) {
  DcqcnController d = Dcqcn();
  d.OnAck(Ack(0, 1, 10 * kUs, 1));
  d.OnAck(Ack(10 * 55 * kUs, 0, 0));
  EXPECT_NEAR(d.alpha(), std::pow(1.0 - 1.0 / 256, 10), 1e-12);
  // A smaller alpha means a gentler cut.
  const double before = static_cast<double>(d.pacing_rate_bps());
  d.OnAck(Ack(10 * 55 * kUs + 1, 1, 10 * kUs, 1));
  EXPECT_NEAR(static_cast<double>(d.pacing_rate_bps()),
              before * (1 - std::pow(1.0 - 1.0 / 256, 10) / 2), 2);
}

TEST(DcqcnTest, FastRecoveryThenAdditiveIncreaseByTimer) {
  DcqcnController d = Dcqcn();
  d.OnAck(Ack(0, 1, 10 * kUs, 1));  // Rc = 50G, Rt = 100G
  const double rates[] = {75e9, 87.5e9, 93.75e9, 96.875e9};
  for (int i = 0; i < 4; ++i) {
    d.OnAck(Ack((i + 1) * 55 * kUs, 0, 0));
    EXPECT_NEAR(static_cast<double>(d.pacing_rate_bps()), rates[i], 1) << i;
  }
  EXPECT_EQ(d.counters().fast_recovery, 4u);
  d.OnAck(Ack(5 * 55 * kUs, 0, 0));  // T = 5: additive (Rt capped at line)
  EXPECT_EQ(d.counters().additive, 1u);
  EXPECT_NEAR(static_cast<double>(d.pacing_rate_bps()), 98.4375e9, 1);
}

TEST(DcqcnTest, HyperIncreaseWhenTimerAndBytesBothPastF) {
  DcqcnController d = Dcqcn();
  d.OnAck(Ack(0, 1, 10 * kUs, 1));
  d.OnAck(Ack(50 * kUs, 1, 10 * kUs, 1));  // Rt = 50G, Rc = 25G
  ASSERT_EQ(d.target_rate_bps(), k100G / 2);
  AckEvent big = Ack(0, 1, 10 * kUs);
  big.acked_bytes = 10'000'000;  // one byte-counter event per ACK
  for (int i = 1; i <= 12; ++i) {
    big.now = 50 * kUs + i * 55 * kUs;
    d.OnAck(big);
  }
  EXPECT_GT(d.counters().hyper, 0u);
  EXPECT_GT(d.counters().additive, 0u);
  EXPECT_GT(d.target_rate_bps(), k100G / 2 + 5'000'000'000ull);
  EXPECT_LE(d.pacing_rate_bps(), k100G);
}

TEST(DcqcnTest, LongIdleGapIsBoundedAndRecoversToLineRate) {
  DcqcnController d = Dcqcn();
  d.OnAck(Ack(0, 1, 10 * kUs, 1));
  d.OnAck(Ack(10 * kSecond, 0, 0));  // ~180000 periods: capped catch-up
  EXPECT_EQ(d.pacing_rate_bps(), k100G);
  EXPECT_LT(d.alpha(), 0.5);
  // Rate never drops below the minimum.
  for (int i = 1; i < 200; ++i)
    d.OnAck(Ack(10 * kSecond + i * 50 * kUs, 1, 0, 1));
  EXPECT_EQ(d.pacing_rate_bps(), 100'000'000u);
}

TEST(DcqcnTest, ValidateRejectsNonsense) {
  DcqcnParams p = DcqcnParams::Defaults(Cfg("dcqcn"));
  p.g = 0;
  EXPECT_FALSE(p.Validate().ok());
  p = DcqcnParams::Defaults(Cfg("dcqcn"));
  p.min_rate_bps = 2 * k100G;
  EXPECT_FALSE(p.Validate().ok());
  p = DcqcnParams::Defaults(Cfg("dcqcn"));
  p.byte_counter = 0;
  EXPECT_FALSE(p.Validate().ok());
}

}  // namespace
}  // namespace prism::congestion
