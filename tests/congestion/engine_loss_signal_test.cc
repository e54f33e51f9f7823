// ConnectionOptions::loss_is_congestion reaches the connection's NSCC
// controller: on a drop-tail fabric (option set) a packet lost without a
// trim shrinks the window; on a trimming fabric (default) the same loss is
// repaired by retransmission and the window keeps growing. A trim cuts the
// window either way. Two engines wired by hand, one path, so the loss is
// inferred from the SACKs of the packets sent after it on that path.
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"
#include "transport/wire/packet.h"

namespace prism {
namespace {

struct Cap {
  std::vector<uint8_t> bytes;
  uint16_t header_len = 0;
};

std::vector<Cap> Poll(Engine& e, Time now) {
  std::vector<Cap> out;
  TxPacket tx[64];
  for (;;) {
    const size_t n = e.PollTransmit(now, tx, 64);
    for (size_t i = 0; i < n; ++i) {
      Cap c;
      c.bytes.assign(tx[i].header, tx[i].header + tx[i].header_len);
      if (tx[i].payload_len > 0) {
        c.bytes.insert(c.bytes.end(), tx[i].payload,
                       tx[i].payload + tx[i].payload_len);
      }
      c.header_len = tx[i].header_len;
      out.push_back(std::move(c));
    }
    if (n < 64) break;
  }
  return out;
}

void Deliver(Engine& e, Time now, const Cap& c, bool trim = false) {
  RxPacket rx;
  rx.data = c.bytes.data();
  rx.len = trim ? c.header_len : static_cast<uint32_t>(c.bytes.size());
  rx.trimmed = trim;
  e.OnReceive(now, &rx, 1);
}

enum class Fate { kDelivered, kLost, kTrimmed, kTailLost };

// Sends 16 packets, delivers all but packet 2 (lost or trimmed) at 5 us,
// returns the sender's window before and after the acknowledgements
// arrive at 10 us (RTT = base RTT: the no-ECN, below-target quadrant).
struct Windows {
  uint64_t before = 0;
  uint64_t after = 0;
  uint64_t lost_or_trimmed = 0;
  uint64_t tail_loss_probes = 0;
};

Windows RunPair(bool loss_is_congestion, Fate fate) {
  ConnectionOptions o;
  o.congestion = "nscc";
  // One path: a loss is inferred from later packets on the same path. For
  // the tail loss, 256 paths and the last packet lost: only the tail-loss
  // probe finds it.
  o.num_paths = fate == Fate::kTailLost ? 256 : 1;
  o.link_rate_bps = 100'000'000'000ull;
  o.base_rtt = 10 * kMicrosecond;
  o.loss_is_congestion = loss_is_congestion;
  EngineOptions ea;
  ea.seed = 3;
  EngineOptions eb = ea;
  eb.seed = 4;
  Engine a(ea), b(eb);
  const ConnId ca = *a.CreateConnection(o);
  const ConnId cb = *b.CreateConnection(o);
  EXPECT_TRUE(a.Connect(ca, b.LocalInfo(cb)).ok());
  EXPECT_TRUE(b.Connect(cb, a.LocalInfo(ca)).ok());
  std::vector<uint8_t> src(16 * 4096, 7), dst(16 * 4096, 0);
  const MemoryRegion smr =
      *a.RegisterMemory(src.data(), src.size(), kAccessLocal);
  const MemoryRegion dmr =
      *b.RegisterMemory(dst.data(), dst.size(), kAccessRemoteWrite);
  WriteRequest w;
  w.wr_id = 1;
  w.local_addr = src.data();
  w.length = src.size();
  w.lkey = smr.lkey;
  w.remote_addr = dmr.addr;
  w.rkey = dmr.rkey;
  EXPECT_TRUE(a.PostWrite(0, ca, w).ok());
  Windows out;
  out.before = a.connection_stats(ca)->cwnd_bytes;
  const std::vector<Cap> pk = Poll(a, 0);
  EXPECT_EQ(pk.size(), 16u);
  for (size_t i = 0; i < pk.size(); ++i) {
    if (i == 2 && fate == Fate::kLost) continue;
    if (i + 1 == pk.size() && fate == Fate::kTailLost) continue;
    Deliver(b, 5 * kMicrosecond, pk[i], i == 2 && fate == Fate::kTrimmed);
  }
  // Every SACK / NACK the receiver has (the delayed-ack timer included).
  for (const Cap& c : Poll(b, 8 * kMicrosecond)) {
    Deliver(a, 10 * kMicrosecond, c);
  }
  if (fate == Fate::kTailLost) {
    // Run the sender's timers until the probe has fired (the PTO is about
    // two RTTs, well before rto_min).
    const Time t = a.NextEventTime();
    EXPECT_LT(t, 50 * kMicrosecond);
    out.before = a.connection_stats(ca)->cwnd_bytes;  // after the acks
    Poll(a, t);
  }
  const ConnectionStats st = *a.connection_stats(ca);
  out.after = st.cwnd_bytes;
  out.tail_loss_probes = st.tail_loss_probes;
  out.lost_or_trimmed = st.trims_received;
  for (PathId p = 0; p < o.num_paths; ++p) {
    out.lost_or_trimmed += a.path_stats(ca, p)->lost_packets;
  }
  return out;
}

TEST(EngineLossSignal, DropTailLossShrinksTheWindow) {
  const Windows w = RunPair(/*loss_is_congestion=*/true, Fate::kLost);
  ASSERT_EQ(w.lost_or_trimmed, 1u);
  // NSCC's loss decrease (loss_md = 0.25) and no increase for the batch.
  EXPECT_LE(w.after, w.before * 3 / 4 + 4096) << w.before;
  EXPECT_LT(w.after, w.before);
}

TEST(EngineLossSignal, LossOnATrimmingFabricDoesNotCut) {
  const Windows w = RunPair(/*loss_is_congestion=*/false, Fate::kLost);
  ASSERT_EQ(w.lost_or_trimmed, 1u);
  // Below target, no ECN: proportional increase despite the loss.
  EXPECT_GT(w.after, w.before);
}

TEST(EngineLossSignal, TrimCutsEitherWay) {
  for (bool lic : {false, true}) {
    const Windows clean = RunPair(lic, Fate::kDelivered);
    ASSERT_EQ(clean.lost_or_trimmed, 0u) << lic;
    const Windows w = RunPair(lic, Fate::kTrimmed);
    ASSERT_EQ(w.lost_or_trimmed, 1u) << lic;
    // The trim's decrease (loss_md = 0.25) before the batch's increase.
    EXPECT_LE(w.after, clean.after * 85 / 100) << lic;
  }
}

TEST(EngineLossSignal, TailLossProbeCutsOnlyOnDropTail) {
  const Windows clean = RunPair(true, Fate::kDelivered);
  const Windows drop_tail = RunPair(true, Fate::kTailLost);
  const Windows trimming = RunPair(false, Fate::kTailLost);
  ASSERT_EQ(drop_tail.tail_loss_probes, 1u);
  ASSERT_EQ(trimming.tail_loss_probes, 1u);
  ASSERT_EQ(drop_tail.lost_or_trimmed, 1u);
  ASSERT_EQ(trimming.lost_or_trimmed, 1u);
  // `before`: the window when the probe fires (grown on the 15 acks);
  // `after`: once it fired.
  EXPECT_GT(trimming.before, clean.before);
  EXPECT_EQ(drop_tail.before, trimming.before);
  EXPECT_EQ(trimming.after, trimming.before);
  EXPECT_LE(drop_tail.after, drop_tail.before * 3 / 4 + 1);
}

TEST(EngineLossSignal, DefaultIsLossIsNotCongestion) {
  EXPECT_FALSE(ConnectionOptions{}.loss_is_congestion);
}

}  // namespace
}  // namespace prism
