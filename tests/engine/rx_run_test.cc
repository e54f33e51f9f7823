// The receive run (consecutive DATA packets of one message in a burst,
// validated and placed packet by packet, then committed as one unit) must
// leave exactly what the per-packet path leaves. These tests hand the same
// DATA packets to two identical receivers, to one in bursts (the run path)
// and to the other one packet per OnReceive call (never a run), and compare
// the counters, the SACKs each sends after every burst (header bytes), the
// completions, the region's bytes and the next timer. The edge cases: a
// duplicate in the middle of a run, a failed placement mid-run, runs
// crossing kAckEvery, a run completing a message and going on into the
// next, ECN CE on one packet, PSNs out of order in a burst (gaps), malformed
// packets in a run, runs crossing the end of the receive window, and
// random bursts mixing all of these.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prism/engine.h"
#include "transport/wire/packet.h"

namespace prism {
namespace {

constexpr uint32_t kMtu = 1000;
constexpr size_t kRegion = 1 << 20;

// One DATA packet as it left the sender (copied: the sender reuses its
// buffers).
struct Pkt {
  std::vector<uint8_t> hdr;
  std::vector<uint8_t> payload;
};

// One delivery: packet index, ECN CE.
struct Arrival {
  size_t pkt;
  bool ce = false;
};
using Burst = std::vector<Arrival>;

// Copies with PlacementCopy, failing the fail_at-th call (1-based; 0:
// never).
class FailAtPlacer final : public Placer {
 public:
  explicit FailAtPlacer(uint64_t fail_at) : fail_at_(fail_at) {}
  bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
             const MemoryRegion&) override {
    if (++calls_ == fail_at_) return false;
    PlacementCopy(dst, src, len);
    return true;
  }

 private:
  uint64_t fail_at_;
  uint64_t calls_ = 0;
};

// What a receiver left: counters, SACK headers sent after each burst,
// completions, region bytes, next timer after each burst.
struct Outcome {
  std::string engine_stats;
  std::string conn_stats;
  std::vector<std::vector<uint8_t>> sacks;
  std::vector<std::string> completions;
  std::vector<Time> timers;
  std::vector<uint8_t> region;
};

class RxRun : public ::testing::Test {
 protected:
  void SetUp() override {
    src_.resize(kRegion);
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = uint8_t(i * 13 + 5);
    dst_.assign(kRegion, 0xEE);
  }

  static EngineOptions ReceiverOptions(Placer* placer) {
    EngineOptions eo;
    eo.mtu_payload = kMtu;
    eo.seed = 2;
    eo.placer = placer;
    return eo;
  }
  // A receiver (ReceiverOptions(placer)) connected to the sender, dst_
  // registered; its connection is *cb.
  std::unique_ptr<Engine> Receiver(Placer* placer, ConnId* cb) {
    auto b = std::make_unique<Engine>(ReceiverOptions(placer));
    *cb = *b->CreateConnection(ConnOptions());
    EXPECT_TRUE(b->Connect(*cb, sender_info_).ok());
    EXPECT_TRUE(
        b->RegisterMemory(dst_.data(), dst_.size(), kAccessRemoteWrite).ok());
    return b;
  }
  // The receiver's window (Receive); the sender's is kWindow unless Send
  // is given a larger one.
  static constexpr uint32_t kWindow = 256;
  static ConnectionOptions ConnOptions(uint32_t window = kWindow) {
    ConnectionOptions co;
    co.num_paths = 8;
    co.congestion = "fixed";
    co.max_inflight_packets = window;
    return co;
  }

  // The sender's packets for WRITEs of the given lengths (back to back in
  // the region), in sending order. The receiver's LocalInfo and region
  // address are those every receiver made by Receiver() gets.
  // `sender_window`: the sender's window (and that of the receiver it
  // connects to here), so that it may send past the end of the receive
  // window of the receivers made by Receive().
  std::vector<Pkt> Send(const std::vector<uint64_t>& lens,
                        uint32_t sender_window = kWindow) {
    EngineOptions eo;
    eo.mtu_payload = kMtu;
    eo.seed = 1;
    Engine a(eo);
    ConnectionOptions co = ConnOptions(sender_window);
    // A larger window: the fixed window (1.5 x BDP) made large enough.
    if (sender_window > kWindow) co.base_rtt = sender_window * kMicrosecond;
    const ConnId ca = *a.CreateConnection(co);
    FailAtPlacer unused(0);
    Engine b(ReceiverOptions(&unused));
    const ConnId cb = *b.CreateConnection(ConnOptions(sender_window));
    EXPECT_TRUE(a.Connect(ca, b.LocalInfo(cb)).ok());
    sender_info_ = a.LocalInfo(ca);
    // As Receive() sets its receiver up (the same keys).
    EXPECT_TRUE(b.Connect(cb, sender_info_).ok());
    const MemoryRegion ms =
        *a.RegisterMemory(src_.data(), src_.size(), kAccessLocal);
    const MemoryRegion md =
        *b.RegisterMemory(dst_.data(), dst_.size(), kAccessRemoteWrite);
    uint64_t off = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      WriteRequest w;
      w.wr_id = i;
      w.local_addr = src_.data() + off;
      w.length = lens[i];
      w.lkey = ms.lkey;
      w.remote_addr = md.addr + off;
      w.rkey = md.rkey;
      w.has_immediate = i % 2 == 1;
      w.immediate = 100 + static_cast<uint32_t>(i);
      EXPECT_TRUE(a.PostWrite(kMicrosecond, ca, w).ok());
      off += lens[i];
    }
    std::vector<Pkt> out;
    TxPacket tx[64];
    for (;;) {
      const size_t n = a.PollTransmit(kMicrosecond, tx, 64);
      if (n == 0) break;
      for (size_t i = 0; i < n; ++i) {
        if (tx[i].header_len != wire::kDataHeaderSize) continue;
        Pkt p;
        p.hdr.assign(tx[i].header, tx[i].header + tx[i].header_len);
        p.payload.assign(tx[i].payload, tx[i].payload + tx[i].payload_len);
        out.push_back(std::move(p));
      }
    }
    return out;
  }

  // Delivers `bursts` to a fresh receiver: each burst in one OnReceive call
  // (`as_runs`) or one packet per call; the SACKs it sends, its timer and
  // completions are read after each burst.
  Outcome Receive(const std::vector<Pkt>& pkts,
                  const std::vector<Burst>& bursts, bool as_runs,
                  uint64_t fail_at) {
    std::fill(dst_.begin(), dst_.end(), 0xEE);
    FailAtPlacer placer(fail_at);
    ConnId cb = 0;
    const std::unique_ptr<Engine> rb = Receiver(&placer, &cb);
    Engine& b = *rb;
    Outcome o;
    Time now = 2 * kMicrosecond;
    std::vector<RxPacket> rx;
    for (const Burst& burst : bursts) {
      rx.clear();
      for (const Arrival& a : burst) {
        const Pkt& p = pkts[a.pkt];
        RxPacket r;
        r.data = p.hdr.data();
        r.len = p.hdr.size();
        r.payload = p.payload.empty() ? nullptr : p.payload.data();
        r.payload_len = static_cast<uint32_t>(p.payload.size());
        r.ecn_ce = a.ce;
        rx.push_back(r);
      }
      if (as_runs) {
        b.OnReceive(now, rx.data(), rx.size());
      } else {
        for (const RxPacket& r : rx) b.OnReceive(now, &r, 1);
      }
      TxPacket tx[64];
      size_t n;
      while ((n = b.PollTransmit(now, tx, 64)) > 0) {
        for (size_t i = 0; i < n; ++i)
          o.sacks.emplace_back(tx[i].header, tx[i].header + tx[i].header_len);
      }
      Completion c[16];
      while ((n = b.PollCompletions(c, 16)) > 0) {
        for (size_t i = 0; i < n; ++i) {
          o.completions.push_back(std::to_string(static_cast<int>(c[i].type)) +
                                  "/" + std::to_string(c[i].msn) + "/" +
                                  std::to_string(c[i].immediate) + "/" +
                                  std::to_string(c[i].byte_len));
        }
      }
      o.timers.push_back(b.NextEventTime());
      now += 100 * kNanosecond;
    }
    o.engine_stats = b.stats().ToString();
    o.conn_stats = b.connection_stats(cb)->ToString();
    o.region = dst_;
    return o;
  }

  // Runs `bursts` both ways and expects the same outcome; returns it.
  Outcome Same(const std::vector<Pkt>& pkts, const std::vector<Burst>& bursts,
               uint64_t fail_at = 0) {
    const Outcome runs = Receive(pkts, bursts, /*as_runs=*/true, fail_at);
    const Outcome each = Receive(pkts, bursts, /*as_runs=*/false, fail_at);
    EXPECT_EQ(runs.engine_stats, each.engine_stats);
    EXPECT_EQ(runs.conn_stats, each.conn_stats);
    EXPECT_EQ(runs.sacks.size(), each.sacks.size());
    EXPECT_TRUE(runs.sacks == each.sacks);
    EXPECT_EQ(runs.completions, each.completions);
    EXPECT_EQ(runs.timers, each.timers);
    EXPECT_TRUE(runs.region == each.region);
    return runs;
  }

  static Burst Range(size_t from, size_t to) {
    Burst b;
    for (size_t i = from; i < to; ++i) b.push_back({i});
    return b;
  }
  // The bursts' arrivals, one after the other, in one burst.
  static Burst Join(std::initializer_list<Burst> parts) {
    Burst b;
    for (const Burst& p : parts) b.insert(b.end(), p.begin(), p.end());
    return b;
  }

  std::vector<uint8_t> src_, dst_;
  ConnectionInfo sender_info_;
};

TEST_F(RxRun, WholeMessageInOneBurst) {
  const auto pkts = Send({40 * kMtu});
  ASSERT_EQ(pkts.size(), 40u);
  const Outcome o = Same(pkts, {Range(0, 40)});
  EXPECT_EQ(o.completions.size(), 0u);  // no immediate on message 0
  EXPECT_TRUE(
      std::equal(src_.begin(), src_.begin() + 40 * kMtu, o.region.begin()));
}

TEST_F(RxRun, DuplicateInTheMiddle) {
  const auto pkts = Send({20 * kMtu});
  const Outcome o = Same(pkts, {Join({Range(0, 10), {{4}}, Range(10, 20)})});
  EXPECT_NE(o.engine_stats.find("rx_duplicates=1"), std::string::npos)
      << o.engine_stats;
}

TEST_F(RxRun, FailedPlacementMidRun) {
  const auto pkts = Send({20 * kMtu});
  for (uint64_t fail_at : {1, 2, 7, 16, 17, 20}) {
    SCOPED_TRACE(fail_at);
    const Outcome o = Same(pkts, {Range(0, 20), {{fail_at - 1}}}, fail_at);
    EXPECT_NE(o.engine_stats.find("rx_drop_placement=1"), std::string::npos)
        << o.engine_stats;
  }
}

TEST_F(RxRun, CrossesAckEvery) {
  const auto pkts = Send({150 * kMtu});
  ASSERT_EQ(pkts.size(), 150u);
  // 5 pending before the long burst: its flushes fall at packets 11, 27,
  // 43, ...; it also spans OnReceive's checksum chunks (64 packets).
  Same(pkts, {Range(0, 5), Range(5, 120), Range(120, 150)});
  Same(pkts, {Range(0, 16), Range(16, 33), Range(33, 150)});
}

TEST_F(RxRun, CompletesAMessageAndGoesOnIntoTheNext) {
  const auto pkts = Send({6 * kMtu, 6 * kMtu - 10, 3 * kMtu});
  ASSERT_EQ(pkts.size(), 15u);
  const Outcome o = Same(pkts, {Range(0, 4), Range(4, 15)});
  EXPECT_EQ(o.completions.size(), 1u);  // message 1 has an immediate
}

TEST_F(RxRun, EcnOnOnePacket) {
  const auto pkts = Send({30 * kMtu});
  for (size_t ce : {size_t{0}, size_t{3}, size_t{15}, size_t{29}}) {
    SCOPED_TRACE(ce);
    Burst b = Range(0, 30);
    b[ce].ce = true;
    Same(pkts, {b});
  }
}

TEST_F(RxRun, OutOfOrderInABurst) {
  const auto pkts = Send({24 * kMtu});
  Burst b;
  for (size_t i : {0,  1,  2,  5,  6,  7,  3,  4,  8,  9,  12, 13,
                   10, 11, 23, 14, 15, 16, 17, 18, 19, 20, 21, 22})
    b.push_back({i});
  Same(pkts, {b});
  // Starting past a gap, then filling it.
  Same(pkts, {Range(4, 12), Range(0, 4), Range(12, 24)});
}

TEST_F(RxRun, MalformedPacketsInARun) {
  auto pkts = Send({20 * kMtu});
  // A copy of packet 5 with a header byte flipped (checksum mismatch), and
  // one cut to less than a common header (no checksum span).
  Pkt bad = pkts[5];
  bad.hdr[21] ^= 1;
  Pkt cut = pkts[9];
  cut.hdr.resize(10);
  cut.payload.clear();
  pkts.push_back(bad);
  pkts.push_back(cut);
  const Outcome o = Same(
      pkts, {Join({Range(0, 5), {{20}}, Range(5, 10), {{21}}, Range(10, 20)})});
  EXPECT_NE(o.engine_stats.find("rx_drop_bad_checksum=1"), std::string::npos)
      << o.engine_stats;
}

// Runs that cross the end of the receive window (kWindow packets from
// rcv_nxt): with rcv_nxt held back by a missing packet, the packets past
// the end are NACKed (out of window), one by one; with rcv_nxt moving
// during the run, the packets it lets in are accepted.
TEST_F(RxRun, CrossesTheWindowEnd) {
  const auto pkts = Send({300 * kMtu}, /*sender_window=*/512);
  ASSERT_EQ(pkts.size(), 300u);
  // rcv_nxt held at 0: 1 .. 255 accepted, 256 .. 299 beyond the window;
  // then the gap filled and the rest sent again.
  Outcome o = Same(pkts, {Range(1, 300), {{0}}, Range(256, 300)});
  EXPECT_NE(o.engine_stats.find("rx_drop_out_of_window=44"), std::string::npos)
      << o.engine_stats;
  EXPECT_TRUE(
      std::equal(src_.begin(), src_.begin() + 300 * kMtu, o.region.begin()));
  // rcv_nxt moving with the run: all of it accepted.
  o = Same(pkts, {Range(0, 300)});
  EXPECT_NE(o.engine_stats.find("rx_drop_out_of_window=0"), std::string::npos)
      << o.engine_stats;
  // Held at 10 (window [10, 266)): 266 .. 299 NACKed, then 10 moves
  // rcv_nxt to 266; 200 .. 265 are then duplicates, 266 .. 299 accepted.
  o = Same(pkts, {Range(0, 10), Range(11, 300), {{10}}, Range(200, 300)});
  EXPECT_NE(o.engine_stats.find("rx_drop_out_of_window=34"), std::string::npos)
      << o.engine_stats;
  EXPECT_TRUE(
      std::equal(src_.begin(), src_.begin() + 300 * kMtu, o.region.begin()));
  // The window's end inside a checksum chunk and a unit ending there.
  Same(pkts, {Range(0, 5), Range(6, 250),
              Join({Range(250, 270), {{5}}, Range(270, 300)})});
}

// The RxPacket contract (prism/packet.h) without pointers: null data is
// counted as malformed; without a payload pointer the packet is contiguous
// and payload_len is ignored.
TEST_F(RxRun, NullPointers) {
  const auto pkts = Send({2 * kMtu});
  ASSERT_EQ(pkts.size(), 2u);
  ConnId cb = 0;
  const std::unique_ptr<Engine> rb = Receiver(nullptr, &cb);
  Engine& b = *rb;
  std::vector<uint8_t> whole = pkts[0].hdr;
  whole.insert(whole.end(), pkts[0].payload.begin(), pkts[0].payload.end());
  RxPacket rx[3];
  rx[0].data = nullptr;  // len 0
  rx[1].data = whole.data();
  rx[1].len = static_cast<uint32_t>(whole.size());
  rx[1].payload_len = 12345;        // ignored: contiguous
  rx[2].data = pkts[1].hdr.data();  // header only: payload trimmed
  rx[2].len = static_cast<uint32_t>(pkts[1].hdr.size());
  rx[2].payload_len = kMtu;  // ignored too
  b.OnReceive(2 * kMicrosecond, rx, 3);
  const EngineStats st = b.stats();
  EXPECT_EQ(st.rx_packets, 3u);
  EXPECT_EQ(st.rx_drop_malformed, 1u);
  const ConnectionStats cs = *b.connection_stats(cb);
  EXPECT_EQ(cs.rx_data_packets, 1u);
  EXPECT_EQ(cs.rx_trimmed, 1u);
  EXPECT_TRUE(std::equal(src_.begin(), src_.begin() + kMtu, dst_.begin()));
}

// A packet without data inside a receive run (after two accepted packets
// of the message, the second one taken by the run, before the third) ends
// the run there and is counted malformed, also when its length and payload
// would pass the run's checks; the packets around it are placed.
TEST_F(RxRun, NullDataInsideRun) {
  const auto pkts = Send({3 * kMtu});
  ASSERT_EQ(pkts.size(), 3u);
  ConnId cb = 0;
  const std::unique_ptr<Engine> rb = Receiver(nullptr, &cb);
  Engine& b = *rb;
  // pkts[0], pkts[1], pkts[2] without its data, pkts[2].
  const size_t from[4] = {0, 1, 2, 2};
  RxPacket rx[4];
  for (size_t i = 0; i < 4; ++i) {
    const Pkt& p = pkts[from[i]];
    rx[i].data = i == 2 ? nullptr : p.hdr.data();
    rx[i].len = static_cast<uint32_t>(p.hdr.size());
    rx[i].payload = p.payload.data();
    rx[i].payload_len = static_cast<uint32_t>(p.payload.size());
  }
  b.OnReceive(2 * kMicrosecond, rx, 4);
  EXPECT_EQ(b.stats().rx_packets, 4u);
  EXPECT_EQ(b.stats().rx_drop_malformed, 1u);
  EXPECT_EQ(b.connection_stats(cb)->rx_data_packets, 3u);
  EXPECT_EQ(b.connection_stats(cb)->messages_received, 1u);
  EXPECT_TRUE(std::equal(src_.begin(), src_.begin() + 3 * kMtu, dst_.begin()));
}

TEST_F(RxRun, RandomBursts) {
  const auto pkts = Send(
      {7 * kMtu + 1, 30 * kMtu, 1, 2 * kMtu, 45 * kMtu - 3, kMtu, 20 * kMtu});
  std::mt19937 rng(7);
  for (int round = 0; round < 60; ++round) {
    SCOPED_TRACE(round);
    // Sending order, locally shuffled, some packets duplicated, some with
    // ECN CE, cut into bursts of random sizes.
    std::vector<Arrival> order;
    for (size_t i = 0; i < pkts.size(); ++i) order.push_back({i});
    for (size_t i = 0; i + 1 < order.size(); ++i) {
      if (rng() % 6 == 0)
        std::swap(
            order[i],
            order[i + 1 + rng() % std::min<size_t>(5, order.size() - i - 1)]);
    }
    std::vector<Arrival> all;
    for (const Arrival& a : order) {
      all.push_back({a.pkt, rng() % 25 == 0});
      if (rng() % 20 == 0) all.push_back({a.pkt, false});
    }
    std::vector<Burst> bursts;
    for (size_t i = 0; i < all.size();) {
      const size_t k = std::min<size_t>(all.size() - i, 1 + rng() % 100);
      bursts.emplace_back(all.begin() + i, all.begin() + i + k);
      i += k;
    }
    const uint64_t fail_at = rng() % 3 == 0 ? 1 + rng() % pkts.size() : 0;
    Same(pkts, bursts, fail_at);
  }
}

}  // namespace
}  // namespace prism
