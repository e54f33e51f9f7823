// VerbsDatapath tests. The encoding tests run everywhere; the transfer tests
// need an RDMA device and skip with a message outside the rxe VM
// (tests/rxe: `ctest -L rxe` runs them inside). No timing assertions (TCG).
#include "transport/backends/verbs/verbs_datapath.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "tests/verbs/verbs_harness.h"
#include "transport/backends/verbs/gpu_memory.h"
#include "transport/wire/packet.h"

namespace prism::verbs {
namespace {

using testing::Connect;
using testing::EnvOr;
using testing::NowPs;
using testing::Side;
using testing::SlowLinkOptions;

#define REQUIRE_RDMA()                                                 \
  do {                                                                 \
    std::string why;                                                   \
    if (!RdmaAvailable(&why)) {                                        \
      GTEST_SKIP() << "needs an RDMA device (" << why                  \
                   << "); runs inside the soft-RoCE VM: ctest -L rxe"; \
    }                                                                  \
  } while (0)

TEST(PeerInfoTest, RoundTripAndRejects) {
  PeerInfo p;
  for (int i = 0; i < 16; ++i) p.gid[i] = static_cast<uint8_t>(i * 7);
  p.path_mtu = 4096;
  p.mode = DataQpMode::kRc;
  p.mtu_payload = 4096;
  p.ctrl_qpn = 0x123456;
  p.psn = 77;
  p.data_qpns = {17, 18, 19, 20, 21, 22, 23, 24};
  const std::string b = EncodePeerInfo(p);
  auto d = DecodePeerInfo(b);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->gid, p.gid);
  EXPECT_EQ(d->path_mtu, p.path_mtu);
  EXPECT_EQ(d->mode, p.mode);
  EXPECT_EQ(d->ctrl_qpn, p.ctrl_qpn);
  EXPECT_EQ(d->psn, p.psn);
  EXPECT_EQ(d->data_qpns, p.data_qpns);
  EXPECT_FALSE(d->message_close);
  p.message_close = true;
  auto dc = DecodePeerInfo(EncodePeerInfo(p));
  ASSERT_TRUE(dc.ok()) << dc.status();
  EXPECT_TRUE(dc->message_close);
  EXPECT_EQ(dc->mode, p.mode);
  EXPECT_FALSE(dc->hello);
  p.hello = true;
  auto dh = DecodePeerInfo(EncodePeerInfo(p));
  ASSERT_TRUE(dh.ok()) << dh.status();
  EXPECT_TRUE(dh->hello);
  EXPECT_TRUE(dh->message_close);
  EXPECT_EQ(dh->mode, p.mode);
  // Every truncation, a trailing byte, a bad magic and a bad mode fail.
  for (size_t n = 0; n < b.size(); ++n) {
    EXPECT_FALSE(DecodePeerInfo(b.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodePeerInfo(b + "x").ok());
  std::string bad = b;
  bad[0] ^= 1;
  EXPECT_FALSE(DecodePeerInfo(bad).ok());
  bad = b;
  bad[5] = 9;
  EXPECT_FALSE(DecodePeerInfo(bad).ok());
}

TEST(DiscoveryTest, ListsDevicesOrNone) {
  auto devs = ListDevices();
  ASSERT_TRUE(devs.ok()) << devs.status();
  std::string why;
  const bool avail = RdmaAvailable(&why);
  if (!avail) {
    EXPECT_FALSE(why.empty());
  }
  for (const DeviceInfo& d : *devs) {
    for (const PortInfo& p : d.ports) {
      if (p.gids.empty()) continue;
      auto g = PickGid(p);
      ASSERT_TRUE(g.ok());
      // RoCE v2 preferred whenever the port has one.
      bool has_v2 = false;
      for (const GidInfo& x : p.gids) has_v2 |= x.type == GidType::kRoceV2;
      if (has_v2) {
        EXPECT_EQ(g->type, GidType::kRoceV2) << d.name;
      }
    }
  }
  PortInfo none;
  EXPECT_FALSE(PickGid(none).ok());
}

TEST(GpuMemoryTest, RejectsBadRangesAndReportsMissingCuda) {
  EXPECT_EQ(CudaDmabuf(nullptr, 4096).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Host memory is not a CUDA allocation: never a dma-buf fd.
  std::vector<uint8_t> host(4096);
  auto h = CudaDmabuf(host.data(), host.size());
  EXPECT_FALSE(h.ok());
}

TEST(VerbsDatapathTest, BadOptionsAndMissingDevice) {
  VerbsOptions o;
  o.num_qps = 0;
  EXPECT_FALSE(VerbsDatapath::Create(o).ok());
  o = {};
  o.device = "no_such_rdma_device";
  auto d = VerbsDatapath::Create(o);
  EXPECT_FALSE(d.ok());
}

// Pumps both sides until `done` or the hang guard (wall time) expires;
// `each` runs after every round (between bursts, as the runtime's control
// calls do).
template <typename Done, typename Each>
bool PumpUntilEach(Side& a, Side& b, Done done, Each each,
                   Time guard = 150 * kSecond) {
  const Time t0 = NowPs();
  while (!done()) {
    a.Pump();
    b.Pump();
    each();
    if (NowPs() - t0 > guard) return false;
  }
  return true;
}
template <typename Done>
bool PumpUntil(Side& a, Side& b, Done done, Time guard = 150 * kSecond) {
  return PumpUntilEach(
      a, b, done, [] {}, guard);
}

// Registers and deregisters remote-writable scratch regions on one side
// while its peer writes into another region (what NCCL's regMr/deregMr on a
// service thread does during traffic). The number registered at once grows
// to 9, so the datapath's region table is reallocated and shifted.
struct RegistrationChurn {
  Side* side = nullptr;
  std::vector<std::vector<uint8_t>> bufs =
      std::vector<std::vector<uint8_t>>(9, std::vector<uint8_t>(8192, 0));
  std::vector<MemoryRegion> live;
  int cycles = 0;
  absl::Status error;

  void Step() {
    if (!error.ok()) return;
    const size_t want = 1 + (cycles % bufs.size());
    if (live.size() < want) {
      auto mr =
          side->Register(bufs[live.size()].data(), 8192, kAccessRemoteWrite);
      if (!mr.ok()) {
        error = mr.status();
        return;
      }
      live.push_back(*mr);
      return;
    }
    // Deregister the oldest first (the table shifts), then start again.
    for (const MemoryRegion& mr : live) {
      absl::Status s = side->dp->DeregisterMemory(mr.lkey);
      if (s.ok()) s = side->engine->DeregisterMemory(mr.lkey);
      if (!s.ok()) error = s;
    }
    live.clear();
    ++cycles;
  }
};

struct Transfer {
  std::vector<uint64_t> sizes;
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
};

Transfer MixedSizes() {
  Transfer t;
  t.sizes = {1,     100,    4095,  4096,    4097,  8192,  12345, 65536,
             65537, 131072, 99999, 300000,  1,     2,     3,     777,
             16384, 200000, 4096,  1048576, 33333, 40960, 5,     500000};
  for (uint64_t s : t.sizes) {
    t.offsets.push_back(t.total);
    t.total += (s + 63) / 64 * 64;
  }
  return t;
}

void Fill(std::vector<uint8_t>& v, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
}

// Mixed-size WRITE-with-immediate transfers in both directions over 8 data
// QPs; after a quarter of a->b's writes completed, a's QP 3 is forced into
// error. Everything still completes, byte-exact, on the other QPs.
void RunTransfer(DataQpMode mode, bool two_devices, bool break_qp,
                 uint32_t defer = 0, bool churn = false, bool refuse_uc = false,
                 bool message_close = false) {
  VerbsOptions va, vb;
  va.message_close = vb.message_close = message_close;
  va.debug_refuse_uc = vb.debug_refuse_uc = refuse_uc;
  if (churn) {
    // A small control ring, so advertisements also wait for room.
    va.ctrl_depth = vb.ctrl_depth = 24;
  }
  va.debug_defer_descriptors = vb.debug_defer_descriptors = defer;
  va.mode = vb.mode = mode;
  va.num_qps = vb.num_qps = 8;
  if (two_devices) {
    va.device = EnvOr("PRISM_RXE_DEV_A", "");
    vb.device = EnvOr("PRISM_RXE_DEV_B", "");
  } else {
    va.device = vb.device = EnvOr("PRISM_RXE_DEV", "");
  }
  auto a = Side::Create(va, 11);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Side::Create(vb, 22);
  ASSERT_TRUE(b.ok()) << b.status();
  Side& A = **a;
  Side& B = **b;
  ASSERT_TRUE(A.Open(SlowLinkOptions(8)).ok());
  ASSERT_TRUE(B.Open(SlowLinkOptions(8)).ok());
  ASSERT_TRUE(Connect(A, B).ok());
  printf("devices %s -> %s, mode %s, inline %u\n", A.dp->device_name().c_str(),
         B.dp->device_name().c_str(), DataQpModeName(A.dp->mode()),
         A.dp->max_inline());
  if (refuse_uc || mode == DataQpMode::kRc) {
    EXPECT_EQ(A.dp->mode(), DataQpMode::kRc);
    EXPECT_EQ(B.dp->mode(), DataQpMode::kRc);
  }

  const Transfer t = MixedSizes();
  std::vector<uint8_t> asrc(t.total), bsrc(t.total), adst(t.total, 0),
      bdst(t.total, 0);
  Fill(asrc, 1);
  Fill(bsrc, 2);
  auto amr = A.Register(asrc.data(), t.total, kAccessLocal);
  auto bmr = B.Register(bsrc.data(), t.total, kAccessLocal);
  auto adm = A.Register(adst.data(), t.total, kAccessRemoteWrite);
  auto bdm = B.Register(bdst.data(), t.total, kAccessRemoteWrite);
  ASSERT_TRUE(amr.ok() && bmr.ok() && adm.ok() && bdm.ok());
  // Region advertisements travel on the control QPs first.
  PumpUntil(
      A, B, [] { return false; }, 200 * kMillisecond);

  const size_t n = t.sizes.size();
  for (size_t i = 0; i < n; ++i) {
    WriteRequest w;
    w.wr_id = i;
    w.local_addr = asrc.data() + t.offsets[i];
    w.length = t.sizes[i];
    w.lkey = amr->lkey;
    w.remote_addr = bdm->addr + t.offsets[i];
    w.rkey = bdm->rkey;
    w.has_immediate = true;
    w.immediate = 0xA0000000u + static_cast<uint32_t>(i);
    ASSERT_TRUE(A.engine->PostWrite(NowPs(), A.conn, w).ok());
    w.local_addr = bsrc.data() + t.offsets[i];
    w.lkey = bmr->lkey;
    w.remote_addr = adm->addr + t.offsets[i];
    w.rkey = adm->rkey;
    w.immediate = 0xB0000000u + static_cast<uint32_t>(i);
    ASSERT_TRUE(B.engine->PostWrite(NowPs(), B.conn, w).ok());
  }
  auto count = [](const Side& s, CompletionType type) {
    size_t c = 0;
    for (const Completion& x : s.completions) c += x.type == type;
    return c;
  };
  RegistrationChurn churn_b;
  churn_b.side = &B;
  if (break_qp || churn) {
    ASSERT_TRUE(PumpUntilEach(
        A, B, [&] { return count(A, CompletionType::kWrite) >= n / 4; },
        [&] {
          if (churn) churn_b.Step();
        }))
        << "no progress before the fault";
  }
  if (break_qp) {
    ASSERT_TRUE(A.dp->ForceQpError(A.peer, 3).ok());
  }
  const bool finished = PumpUntilEach(
      A, B,
      [&] {
        return count(A, CompletionType::kWrite) == n &&
               count(B, CompletionType::kWrite) == n &&
               count(A, CompletionType::kRecvImmediate) == n &&
               count(B, CompletionType::kRecvImmediate) == n;
      },
      [&] {
        if (churn) churn_b.Step();
      });
  if (churn) {
    EXPECT_TRUE(churn_b.error.ok()) << churn_b.error;
    EXPECT_GT(churn_b.cycles, 0) << "the churn never completed a cycle";
    printf("registration churn: %d cycles on B, %lu frames queued\n",
           churn_b.cycles,
           static_cast<unsigned long>(B.dp->stats().tx_frames_queued));
  }
  printf("A: %s\nB: %s\n", A.dp->stats().ToString().c_str(),
         B.dp->stats().ToString().c_str());
  auto cs = A.engine->connection_stats(A.conn);
  if (cs.ok()) {
    printf("A conn: retx=%lu rto=%lu retired=%lu\n",
           static_cast<unsigned long>(cs->retransmitted_packets),
           static_cast<unsigned long>(cs->rto_events),
           static_cast<unsigned long>(cs->paths_retired));
  }
  ASSERT_TRUE(finished) << "transfer did not finish (hang guard)";
  for (const Side* s : {&A, &B}) {
    for (const Completion& c : s->completions) {
      EXPECT_EQ(c.status, absl::StatusCode::kOk);
    }
  }
  // Receiver completions: every message once, with its immediate and length.
  std::vector<int> seen_b(n, 0);
  for (const Completion& c : B.completions) {
    if (c.type != CompletionType::kRecvImmediate) continue;
    const uint32_t i = c.immediate - 0xA0000000u;
    ASSERT_LT(i, n);
    ++seen_b[i];
    EXPECT_EQ(c.byte_len, t.sizes[i]);
    EXPECT_EQ(c.remote_addr, bdm->addr + t.offsets[i]);
  }
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(seen_b[i], 1) << i;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(memcmp(asrc.data() + t.offsets[i], bdst.data() + t.offsets[i],
                     t.sizes[i]),
              0)
        << "a->b message " << i << " differs";
    ASSERT_EQ(memcmp(bsrc.data() + t.offsets[i], adst.data() + t.offsets[i],
                     t.sizes[i]),
              0)
        << "b->a message " << i << " differs";
  }
  const VerbsStats sa = A.dp->stats();
  const VerbsStats sb = B.dp->stats();
  EXPECT_GT(sa.tx_data, 0u);
  EXPECT_GT(sb.rx_data, 0u);
  EXPECT_GT(sa.tx_descriptors, 0u);
  EXPECT_EQ(sb.rx_drop_bad_imm, 0u);
  EXPECT_EQ(sb.rx_drop_no_descriptor, 0u);
  EXPECT_EQ(sb.rx_drop_unknown, 0u);
  if (defer > 0) {
    EXPECT_GT(sb.rx_pending, 0u) << "no WRITE overtook its descriptor";
  }
  if (break_qp) {
    EXPECT_FALSE(A.dp->qp_alive(A.peer, 3));
    EXPECT_EQ(sa.qp_errors, 1u);
    for (uint16_t q = 0; q < 8; ++q) {
      if (q != 3) {
        EXPECT_TRUE(A.dp->qp_alive(A.peer, q)) << q;
      }
    }
  } else {
    EXPECT_EQ(sa.qp_errors, 0u);
  }
}

TEST(VerbsTransferTest, EightUcQpsOneForcedIntoError) {
  REQUIRE_RDMA();
  RunTransfer(DataQpMode::kAuto, /*two_devices=*/false, /*break_qp=*/true);
}

// The same with the message close (as the Endpoint runs it): completions
// wait for the peer's close, and the QP in error counts as drained.
TEST(VerbsTransferTest, EightUcQpsOneForcedIntoErrorWithMessageClose) {
  REQUIRE_RDMA();
  RunTransfer(DataQpMode::kAuto, /*two_devices=*/false, /*break_qp=*/true,
              /*defer=*/0, /*churn=*/false, /*refuse_uc=*/false,
              /*message_close=*/true);
}

TEST(VerbsTransferTest, TwoDevicesOverVeth) {
  REQUIRE_RDMA();
  if (EnvOr("PRISM_RXE_DEV_A", "").empty()) {
    GTEST_SKIP() << "PRISM_RXE_DEV_A/B not set (two rxe devices on a veth)";
  }
  RunTransfer(DataQpMode::kAuto, /*two_devices=*/true, /*break_qp=*/true);
}

TEST(VerbsTransferTest, RcFallbackMode) {
  REQUIRE_RDMA();
  RunTransfer(DataQpMode::kRc, /*two_devices=*/false, /*break_qp=*/false);
}

// A device without UC queue pairs (simulated): kAuto falls back to RC by
// itself, the transfer (with a QP forced into error) works the same, and
// kUc forced on such a device is a clear error.
TEST(VerbsTransferTest, AutoFallsBackToRcWithoutUc) {
  REQUIRE_RDMA();
  RunTransfer(DataQpMode::kAuto, /*two_devices=*/false, /*break_qp=*/true,
              /*defer=*/0, /*churn=*/false, /*refuse_uc=*/true);
  VerbsOptions vo;
  vo.device = EnvOr("PRISM_RXE_DEV", "");
  vo.mode = DataQpMode::kUc;
  vo.debug_refuse_uc = true;
  auto d = VerbsDatapath::Create(vo);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable) << d.status();
}

// Both ends must resolve the same data QP type: a UC side and an RC side
// refuse to connect, with a message saying why.
TEST(VerbsTransferTest, ModeMismatchIsRefused) {
  REQUIRE_RDMA();
  VerbsOptions vu, vr;
  vu.device = vr.device = EnvOr("PRISM_RXE_DEV", "");
  vr.debug_refuse_uc = true;  // auto -> rc
  auto a = Side::Create(vu, 31);
  auto b = Side::Create(vr, 32);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Open(SlowLinkOptions(8)).ok());
  ASSERT_TRUE((*b)->Open(SlowLinkOptions(8)).ok());
  EXPECT_EQ((*a)->dp->mode(), DataQpMode::kUc);
  EXPECT_EQ((*b)->dp->mode(), DataQpMode::kRc);
  const absl::Status s = Connect(**a, **b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("mode mismatch"), absl::string_view::npos) << s;
}

// NCCL registers and deregisters memory while data flows (the stall of
// NcclConn.TwoProcessesRandomTraffic over verbs): the receiver's region
// table changes under the WRITEs landing in another region; every WRITE
// must still be resolved (no rx_drop_unknown) and the transfer finish.
TEST(VerbsTransferTest, RegistrationChurnDuringTraffic) {
  REQUIRE_RDMA();
  RunTransfer(DataQpMode::kAuto, /*two_devices=*/false, /*break_qp=*/false,
              /*defer=*/0, /*churn=*/true);
}

// Descriptors handled late: WRITEs arrive before the message they belong to
// is known, wait in the pending ring, and are resolved when it is.
TEST(VerbsTransferTest, WritesOvertakingTheirDescriptors) {
  REQUIRE_RDMA();
  RunTransfer(DataQpMode::kAuto, /*two_devices=*/false, /*break_qp=*/false,
              /*defer=*/16);
}

// A WRITE to a key the peer never registered: the sender datapath has no
// region for it, sends the packet whole on the control QP, and the peer's
// engine answers BAD_KEY: the WRITE fails, nothing is written, no crash.
TEST(VerbsTransferTest, UnknownRemoteKeyFailsTheWrite) {
  REQUIRE_RDMA();
  VerbsOptions vo;
  vo.device = EnvOr("PRISM_RXE_DEV", "");
  auto a = Side::Create(vo, 5);
  auto b = Side::Create(vo, 6);
  ASSERT_TRUE(a.ok() && b.ok());
  Side& A = **a;
  Side& B = **b;
  ASSERT_TRUE(A.Open(SlowLinkOptions(8)).ok());
  ASSERT_TRUE(B.Open(SlowLinkOptions(8)).ok());
  ASSERT_TRUE(Connect(A, B).ok());
  std::vector<uint8_t> src(10000, 0x5A), dst(10000, 0);
  auto smr = A.Register(src.data(), src.size(), kAccessLocal);
  auto dmr = B.Register(dst.data(), dst.size(), kAccessRemoteWrite);
  ASSERT_TRUE(smr.ok() && dmr.ok());
  WriteRequest w;
  w.wr_id = 9;
  w.local_addr = src.data();
  w.length = src.size();
  w.lkey = smr->lkey;
  w.remote_addr = dmr->addr;
  w.rkey = dmr->rkey ^ 0x1234567u;
  ASSERT_TRUE(A.engine->PostWrite(NowPs(), A.conn, w).ok());
  ASSERT_TRUE(PumpUntil(A, B, [&] {
    for (const Completion& c : A.completions) {
      if (c.type == CompletionType::kWrite) return true;
    }
    return false;
  }));
  bool failed = false;
  for (const Completion& c : A.completions) {
    if (c.type == CompletionType::kWrite) {
      failed = c.status == absl::StatusCode::kPermissionDenied;
    }
  }
  EXPECT_TRUE(failed);
  EXPECT_GT(A.dp->stats().tx_fallback, 0u);
  EXPECT_GT(B.engine->stats().rx_drop_bad_key, 0u);
  for (uint8_t x : dst) ASSERT_EQ(x, 0);
}

// More registrations at once than the control ring has slots: none fails,
// the advertisements wait for room (tx_frames_queued) and all arrive, so a
// WRITE into the last region is placed by the NIC (no fallback).
TEST(VerbsTransferTest, AdvertisementsWaitForControlRingRoom) {
  REQUIRE_RDMA();
  VerbsOptions vo;
  vo.device = EnvOr("PRISM_RXE_DEV", "");
  vo.ctrl_depth = 24;
  auto a = Side::Create(vo, 41);
  auto b = Side::Create(vo, 42);
  ASSERT_TRUE(a.ok() && b.ok());
  Side& A = **a;
  Side& B = **b;
  ASSERT_TRUE(A.Open(SlowLinkOptions(8)).ok());
  ASSERT_TRUE(B.Open(SlowLinkOptions(8)).ok());
  ASSERT_TRUE(Connect(A, B).ok());
  constexpr int kRegions = 60;
  std::vector<std::vector<uint8_t>> dst(kRegions,
                                        std::vector<uint8_t>(8192, 0));
  std::vector<MemoryRegion> mrs;
  for (int i = 0; i < kRegions; ++i) {
    auto mr = B.Register(dst[i].data(), dst[i].size(), kAccessRemoteWrite);
    ASSERT_TRUE(mr.ok()) << i << ": " << mr.status();
    mrs.push_back(*mr);
  }
  EXPECT_GT(B.dp->stats().tx_frames_queued, 0u);
  std::vector<uint8_t> src(8192, 0x6B);
  auto smr = A.Register(src.data(), src.size(), kAccessLocal);
  ASSERT_TRUE(smr.ok());
  // Let the queued advertisements drain, then write into the last region.
  PumpUntil(
      A, B, [] { return false; }, 300 * kMillisecond);
  WriteRequest w;
  w.wr_id = 1;
  w.local_addr = src.data();
  w.length = src.size();
  w.lkey = smr->lkey;
  w.remote_addr = mrs.back().addr;
  w.rkey = mrs.back().rkey;
  ASSERT_TRUE(A.engine->PostWrite(NowPs(), A.conn, w).ok());
  ASSERT_TRUE(PumpUntil(A, B, [&] { return !A.completions.empty(); }));
  EXPECT_EQ(A.completions[0].status, absl::StatusCode::kOk);
  EXPECT_EQ(dst.back(), src);
  EXPECT_EQ(A.dp->stats().tx_fallback, 0u) << "the advertisement was lost";
  EXPECT_GT(A.dp->stats().tx_data, 0u);
}

// Losing the device's link (its netdev goes down under a live datapath):
// health() reports it, packets offered meanwhile are dropped and counted,
// and it recovers when the port is active again. (IBV_EVENT_DEVICE_FATAL
// takes the same path; rxe cannot raise it: deleting an rxe device blocks
// until its users close it.)
TEST(VerbsTransferTest, PortLossIsAClearError) {
  REQUIRE_RDMA();
  const std::string dev = EnvOr("PRISM_RXE_DEV_LOSS", "");
  const std::string ndev = EnvOr("PRISM_RXE_DEV_LOSS_NETDEV", "");
  if (dev.empty() || ndev.empty()) {
    GTEST_SKIP() << "PRISM_RXE_DEV_LOSS(_NETDEV) not set (an rxe device "
                    "whose netdev the test may take down)";
  }
  VerbsOptions vo;
  vo.device = dev;
  auto d = VerbsDatapath::Create(vo);
  ASSERT_TRUE(d.ok()) << d.status();
  VerbsDatapath& dp = **d;
  ASSERT_TRUE(dp.AddPeer().ok());
  ASSERT_TRUE(dp.health().ok());
  auto pump_until = [&](bool want_ok) {
    RxPacket rx[8];
    const Time t0 = NowPs();
    while (dp.health().ok() != want_ok && NowPs() - t0 < 30 * kSecond) {
      dp.RxBurst(NowPs(), rx, 8);
    }
    return dp.health().ok() == want_ok;
  };
  ASSERT_EQ(system(("ip link set " + ndev + " down").c_str()), 0);
  ASSERT_TRUE(pump_until(false)) << "port loss not reported";
  EXPECT_EQ(dp.health().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(dp.health().message()).find(dev), std::string::npos);
  printf("health: %s\n", std::string(dp.health().message()).c_str());
  TxPacket t;
  t.peer = 1;
  t.header_len = 12;
  EXPECT_EQ(dp.TxBurst(NowPs(), &t, 1), 1u);  // consumed and counted
  EXPECT_EQ(dp.stats().tx_drop_device_lost, 1u);
  EXPECT_GT(dp.stats().async_events, 0u);
  ASSERT_EQ(system(("ip link set " + ndev + " up").c_str()), 0);
  EXPECT_TRUE(pump_until(true)) << "port recovery not noticed";
}

// --- the message close (docs/verbs.md "Buffer reuse: the message close") ---

// One WRITE-with-immediate of 16 chunks from A into B's buffer while A's
// data QP 2 is parked (its work requests wait in the "NIC", as on a stalled
// or slow path): the engine resends that path's chunks on other paths, B's
// engine sees the whole message and A's engine sees it acknowledged, while
// the originals have not been placed yet. Then the parked WRITEs are
// released and land. B "reuses" the buffer (new contents 0x5A) as soon as
// its application saw the completion; the result says how many bytes of
// the new contents were overwritten afterwards.
struct StaleWriteResult {
  bool completed_while_parked = false;  // B's app saw the message early
  size_t overwritten_after_reuse = 0;   // bytes of the new contents lost
  VerbsStats a, b;
};

StaleWriteResult RunStaleWrite(bool message_close) {
  StaleWriteResult r;
  VerbsOptions va, vb;
  va.device = vb.device = EnvOr("PRISM_RXE_DEV", "");
  va.num_qps = vb.num_qps = 8;
  va.mtu_payload = vb.mtu_payload = 4096;
  va.message_close = vb.message_close = message_close;
  va.debug_park_qp = 2;
  auto a = Side::Create(va, 41);
  auto b = Side::Create(vb, 42);
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return r;
  Side& A = **a;
  Side& B = **b;
  EXPECT_TRUE(A.Open(SlowLinkOptions(8)).ok());
  EXPECT_TRUE(B.Open(SlowLinkOptions(8)).ok());
  EXPECT_TRUE(Connect(A, B).ok());
  const size_t len = 16 * 4096;
  std::vector<uint8_t> src(len), dst(len, 0);
  Fill(src, 7);
  auto smr = A.Register(src.data(), len, kAccessLocal);
  auto dmr = B.Register(dst.data(), len, kAccessRemoteWrite);
  EXPECT_TRUE(smr.ok() && dmr.ok());
  if (!smr.ok() || !dmr.ok()) return r;
  PumpUntil(
      A, B, [] { return false; }, 200 * kMillisecond);
  WriteRequest w;
  w.wr_id = 1;
  w.local_addr = src.data();
  w.length = len;
  w.lkey = smr->lkey;
  w.remote_addr = dmr->addr;
  w.rkey = dmr->rkey;
  w.has_immediate = true;
  w.immediate = 0x5eed;
  EXPECT_TRUE(A.engine->PostWrite(NowPs(), A.conn, w).ok());
  auto seen = [](const Side& s, CompletionType type) {
    for (const Completion& c : s.completions) {
      if (c.type == type) return true;
    }
    return false;
  };
  // Until both engines are done with the message (the parked chunks were
  // resent elsewhere and acknowledged).
  const bool engines_done = PumpUntil(
      A, B,
      [&] {
        const bool b_done = message_close
                                ? B.dp->held_completions() > 0 ||
                                      seen(B, CompletionType::kRecvImmediate)
                                : seen(B, CompletionType::kRecvImmediate);
        const bool a_done = message_close ? A.dp->held_completions() > 0 ||
                                                seen(A, CompletionType::kWrite)
                                          : seen(A, CompletionType::kWrite);
        return a_done && b_done;
      },
      60 * kSecond);
  EXPECT_TRUE(engines_done) << "the engines never finished the message";
  // A while longer with the originals still parked.
  PumpUntil(
      A, B, [] { return false; }, 300 * kMillisecond);
  r.completed_while_parked = seen(B, CompletionType::kRecvImmediate);
  if (message_close) {
    EXPECT_FALSE(seen(A, CompletionType::kWrite))
        << "the sender reported the WRITE done with work requests parked";
    // What the Endpoint's loop asks before it queues a rejected WRITE's
    // error behind this one (event_loop.h, Submit::held).
    EXPECT_TRUE(A.dp->HoldsWriteCompletions(A.conn));
    EXPECT_FALSE(A.dp->HoldsWriteCompletions(A.conn + 1000));
  }
  if (r.completed_while_parked) {
    // The application reuses the buffer as soon as it saw the completion.
    memset(dst.data(), 0x5A, len);
  }
  // The parked originals land now.
  A.dp->ReleaseParked();
  const bool released = PumpUntil(
      A, B,
      [&] {
        return seen(B, CompletionType::kRecvImmediate) &&
               seen(A, CompletionType::kWrite);
      },
      30 * kSecond);
  EXPECT_TRUE(released) << "completions never released";
  EXPECT_FALSE(A.dp->HoldsWriteCompletions(A.conn)) << "polled, not held";
  if (!r.completed_while_parked) {
    EXPECT_EQ(memcmp(src.data(), dst.data(), len), 0) << "message differs";
    memset(dst.data(), 0x5A, len);  // reused right after the completion
  }
  PumpUntil(
      A, B, [] { return false; }, 500 * kMillisecond);
  for (uint8_t x : dst) r.overwritten_after_reuse += x != 0x5A;
  // A stale copy of the message offered to A's datapath after its close
  // (a resend that waited in the driver's queue) is dropped and counted.
  {
    wire::DataHeader h;
    h.dst_conn = B.conn;
    h.msn = 0;
    h.psn = A.engine->LocalInfo(A.conn).initial_psn;
    h.msg_offset = 0;
    h.msg_len = static_cast<uint32_t>(len);
    h.remote_addr = dmr->addr;
    h.rkey = dmr->rkey;
    h.payload_len = 4096;
    h.flags = wire::kFlagRetransmit | wire::kFlagFirstOfMessage |
              wire::kFlagHasImmediate;
    h.immediate = 0x5eed;
    TxPacket t;
    t.header_len = static_cast<uint16_t>(
        wire::EncodeData(h, t.header, TxPacket::kMaxHeaderBytes));
    t.payload = src.data();
    t.payload_len = 4096;
    t.peer = A.peer;
    t.path = 0;
    const uint64_t before = A.dp->stats().tx_data;
    EXPECT_EQ(A.dp->TxBurst(NowPs(), &t, 1), 1u);
    if (message_close) {
      EXPECT_EQ(A.dp->stats().tx_data, before) << "a closed message was sent";
      EXPECT_EQ(A.dp->stats().tx_drop_acked, 1u);
    }
    memset(dst.data(), 0x5A, len);
    PumpUntil(
        A, B, [] { return false; }, 300 * kMillisecond);
    if (message_close) {
      size_t changed = 0;
      for (uint8_t x : dst) changed += x != 0x5A;
      EXPECT_EQ(changed, 0u) << "the replayed WRITE landed";
    }
  }
  r.a = A.dp->stats();
  r.b = B.dp->stats();
  printf("message_close=%d A: %s\nB: %s\n", message_close,
         r.a.ToString().c_str(), r.b.ToString().c_str());
  return r;
}

// Two sides with two data QPs each, A's 8 x 64 KiB source filled with
// `fill` and B's destination registered, and both sides' peer info read
// (the set-up of the start-up and late-peer tests). `ok` false: a step
// failed (already reported by an EXPECT).
struct WritePair {
  static constexpr size_t kMsgs = 8, kLen = 65536;
  std::unique_ptr<Side> a, b;
  std::vector<uint8_t> src, dst;
  MemoryRegion smr, dmr;
  PeerInfo ia, ib;
  bool ok = false;

  WritePair(VerbsOptions va, VerbsOptions vb, uint64_t seed_a, uint64_t seed_b,
            uint8_t fill)
      : src(kMsgs * kLen), dst(kMsgs * kLen, 0) {
    va.device = vb.device = EnvOr("PRISM_RXE_DEV", "");
    va.num_qps = vb.num_qps = 2;
    auto sa = Side::Create(va, seed_a);
    auto sb = Side::Create(vb, seed_b);
    EXPECT_TRUE(sa.ok() && sb.ok());
    if (!sa.ok() || !sb.ok()) return;
    a = std::move(*sa);
    b = std::move(*sb);
    EXPECT_TRUE(a->Open(SlowLinkOptions(2)).ok());
    EXPECT_TRUE(b->Open(SlowLinkOptions(2)).ok());
    Fill(src, fill);
    auto s = a->Register(src.data(), src.size(), kAccessLocal);
    auto d = b->Register(dst.data(), dst.size(), kAccessRemoteWrite);
    EXPECT_TRUE(s.ok() && d.ok());
    if (!s.ok() || !d.ok()) return;
    smr = *s;
    dmr = *d;
    auto pa = a->dp->LocalInfo(a->peer);
    auto pb = b->dp->LocalInfo(b->peer);
    EXPECT_TRUE(pa.ok() && pb.ok());
    if (!pa.ok() || !pb.ok()) return;
    ia = *pa;
    ib = *pb;
    ok = true;
  }

  // A posts the kMsgs WRITE-with-immediates (immediate = index).
  void PostWrites() {
    for (size_t i = 0; i < kMsgs; ++i) {
      WriteRequest w;
      w.wr_id = i;
      w.local_addr = src.data() + i * kLen;
      w.length = kLen;
      w.lkey = smr.lkey;
      w.remote_addr = dmr.addr + i * kLen;
      w.rkey = dmr.rkey;
      w.has_immediate = true;
      w.immediate = static_cast<uint32_t>(i);
      EXPECT_TRUE(a->engine->PostWrite(NowPs(), a->conn, w).ok());
    }
  }
};

// Start-up (docs/verbs.md "Start-up: the HELLO exchange"). The receiver B
// registers its buffer and connects first, as prism_perf's server does: its
// region advertisement and HELLO reach A's control QP while that is still in
// INIT, and are dropped there (RC resends them after a NAK or a timeout).
// Then A connects and writes at once: its first burst runs before B has had
// a chance to send anything else. The sprayed chunks must not go over the
// control QP: they wait until B's answer to A's HELLO arrives (which RC
// delivers after B's advertisement). `ready_wait` 0 is the behaviour before
// HELLO; `mute_b`: B never sends or answers a HELLO, so A's bounded wait
// runs out and the fallback (kept as the safety net) carries the data.
struct StartupResult {
  VerbsStats a, b;
  bool b_advert_beat_first_burst = false;  // RC's retry timer was faster
};

StartupResult RunStartup(Time ready_wait, bool mute_b) {
  StartupResult r;
  VerbsOptions va, vb;
  // Two data QPs (WritePair): A's ConnectPeer (two modify_qp calls per QP,
  // slow under TCG) must end well within RC's retransmit timeout (67 ms) of
  // B's, or RC's retry delivers B's advertisement before A's first burst.
  va.ready_wait = ready_wait;
  vb.debug_mute_hello = mute_b;
  WritePair p(va, vb, 61, 62, 7);
  if (!p.ok) return r;
  Side& A = *p.a;
  Side& B = *p.b;
  constexpr size_t kMsgs = WritePair::kMsgs;
  auto ra = DecodePeerInfo(EncodePeerInfo(p.ia));
  auto rb = DecodePeerInfo(EncodePeerInfo(p.ib));
  EXPECT_TRUE(ra.ok() && rb.ok());
  if (!ra.ok() || !rb.ok()) return r;
  EXPECT_TRUE(ra->hello && rb->hello);
  EXPECT_TRUE(A.engine->Connect(A.conn, B.engine->LocalInfo(B.conn)).ok());
  EXPECT_TRUE(B.engine->Connect(B.conn, A.engine->LocalInfo(A.conn)).ok());
  // The WRITEs are queued in A's engine before A's queue pairs connect, so
  // A's first burst follows its ConnectPeer at once.
  p.PostWrites();
  EXPECT_TRUE(B.dp->ConnectPeer(B.peer, *ra).ok());  // B's frames: dropped
  const Time t_b = NowPs();
  EXPECT_TRUE(A.dp->ConnectPeer(A.peer, *rb).ok());
  A.Pump();  // A's first burst, before B has run
  const Time margin = NowPs() - t_b;
  const VerbsStats first = A.dp->stats();
  r.b_advert_beat_first_burst =
      first.tx_wait_ready == 0 && first.tx_fallback == 0 && first.tx_data > 0;
  if (mute_b) {
    // A alone, until its wait runs out (B's loop does not run, so nothing
    // of B's but RC's own retry can reach A meanwhile).
    const Time t0 = NowPs();
    while (A.dp->stats().ready_timeouts == 0 && NowPs() - t0 < kSecond &&
           A.dp->stats().tx_fallback == 0 && A.dp->stats().tx_data == 0) {
      A.Pump();
    }
  }
  auto count = [](const Side& s, CompletionType type) {
    size_t c = 0;
    for (const Completion& x : s.completions) c += x.type == type;
    return c;
  };
  const bool finished = PumpUntil(A, B, [&] {
    return count(A, CompletionType::kWrite) == kMsgs &&
           count(B, CompletionType::kRecvImmediate) == kMsgs;
  });
  r.a = A.dp->stats();
  r.b = B.dp->stats();
  printf("A's first burst %.1f ms after B connected\n", margin / 1e9);
  printf(
      "ready_wait=%llu us mute_b=%d advert_beat_first_burst=%d\nA: %s\nB: %s\n",
      static_cast<unsigned long long>(ready_wait / kMicrosecond), mute_b,
      r.b_advert_beat_first_burst, r.a.ToString().c_str(),
      r.b.ToString().c_str());
  EXPECT_TRUE(finished) << "transfer did not finish (hang guard)";
  for (const Completion& c : A.completions) {
    EXPECT_EQ(c.status, absl::StatusCode::kOk);
  }
  EXPECT_EQ(p.src, p.dst);
  return r;
}

TEST(StartupTest, DataWaitsForThePeersHelloInsteadOfFallingBack) {
  REQUIRE_RDMA();
  const StartupResult r = RunStartup(10 * kSecond, /*mute_b=*/false);
  EXPECT_EQ(r.a.tx_fallback, 0u) << "chunks went over the control QP";
  EXPECT_EQ(r.a.ready_timeouts, 0u);
  EXPECT_GT(r.a.tx_data, 0u);
  EXPECT_GE(r.a.rx_hellos, 1u);
  EXPECT_GE(r.b.rx_hellos, 1u);
  if (r.b_advert_beat_first_burst) {
    printf(
        "note: RC's retry brought B's advertisement before A's first "
        "burst; the wait was not needed this time\n");
  } else {
    EXPECT_GE(r.a.tx_wait_ready, 1u) << "A's first burst did not wait";
  }
}

// The race this fixes, without the wait: the first chunks go whole over the
// control QP (unless RC's retry happened to be faster than A's first burst).
TEST(StartupTest, WithoutTheWaitTheFirstChunksFallBack) {
  REQUIRE_RDMA();
  const StartupResult r = RunStartup(0, /*mute_b=*/false);
  EXPECT_EQ(r.a.tx_wait_ready, 0u);
  EXPECT_EQ(r.a.ready_timeouts, 0u);
  if (!r.b_advert_beat_first_burst) {
    EXPECT_GT(r.a.tx_fallback, 0u) << "the race did not show";
  }
}

// A peer that never sends its HELLO: the wait is bounded, the fallback
// carries the data, and everything arrives.
TEST(StartupTest, TheWaitIsBoundedAndTheFallbackRemains) {
  REQUIRE_RDMA();
  const StartupResult r = RunStartup(2 * kMillisecond, /*mute_b=*/true);
  EXPECT_EQ(r.a.rx_hellos, 0u);
  if (!r.b_advert_beat_first_burst && r.a.ready_timeouts == 1) {
    EXPECT_GE(r.a.tx_wait_ready, 1u);
    EXPECT_GT(r.a.tx_fallback, 0u);
  } else {
    printf(
        "note: B's advertisement arrived (RC retry) before the wait ran "
        "out\n");
  }
}

// A peer that connects late (docs/verbs.md "A peer that connects late"): A
// connects and offers its WRITEs at once; B connects `late` afterwards
// (three times a real NIC's RC retry budget of 7 x 67 ms). Meanwhile
// A's control QP runs out of retries (its advertisement and HELLO reach a
// QP that is not there yet) and must be recycled, not retired; A's packets
// wait ready_wait, then are dropped until B answers (the engine resends).
// `b_connects` false: B never connects, and after connect_wait A's control
// QP fails for good (a clear error, counted), not a hang.
struct LateResult {
  VerbsStats a, b;
  bool finished = false;
};

LateResult RunLatePeer(Time late, Time connect_wait, bool b_connects) {
  LateResult r;
  VerbsOptions va, vb;
  va.connect_wait = vb.connect_wait = connect_wait;
  // rdma_rxe retries forever with retry_cnt 7 (a real NIC gives up after
  // 7 x 67 ms); with 2 the retries run out on rxe too, after about 0.2 s.
  va.ctrl_retry_cnt = vb.ctrl_retry_cnt = 2;
  WritePair p(va, vb, 71, 72, 9);
  if (!p.ok) return r;
  Side& A = *p.a;
  Side& B = *p.b;
  constexpr size_t kMsgs = WritePair::kMsgs;
  EXPECT_TRUE(A.engine->Connect(A.conn, B.engine->LocalInfo(B.conn)).ok());
  p.PostWrites();
  EXPECT_TRUE(A.dp->ConnectPeer(A.peer, p.ib).ok());
  const Time t0 = NowPs();
  while (NowPs() - t0 < late) A.PumpOrSleep();  // B has not connected
  if (!b_connects) {
    r.a = A.dp->stats();
    printf("B never connected; after %.1f s A: %s\n",
           static_cast<double>(late) / kSecond, r.a.ToString().c_str());
    return r;
  }
  const VerbsStats before = A.dp->stats();
  EXPECT_TRUE(B.engine->Connect(B.conn, A.engine->LocalInfo(A.conn)).ok());
  EXPECT_TRUE(B.dp->ConnectPeer(B.peer, p.ia).ok());
  auto count = [](const Side& s, CompletionType type) {
    size_t c = 0;
    for (const Completion& x : s.completions) c += x.type == type;
    return c;
  };
  r.finished = PumpUntil(A, B, [&] {
    return count(A, CompletionType::kWrite) == kMsgs &&
           count(B, CompletionType::kRecvImmediate) == kMsgs;
  });
  r.a = A.dp->stats();
  r.b = B.dp->stats();
  printf("B connected %.1f s after A; A before B connected: %s\nA: %s\nB: %s\n",
         static_cast<double>(late) / kSecond, before.ToString().c_str(),
         r.a.ToString().c_str(), r.b.ToString().c_str());
  // Recycled while B was away, not one QP retired.
  EXPECT_GE(before.ctrl_qp_recycles, 1u);
  EXPECT_EQ(before.qp_errors, 0u);
  EXPECT_TRUE(r.finished) << "transfer did not finish (hang guard)";
  for (const Completion& c : A.completions) {
    EXPECT_EQ(c.status, absl::StatusCode::kOk);
  }
  EXPECT_EQ(p.src, p.dst);
  return r;
}

TEST(LatePeerTest, PeerConnectingSecondsLaterStillConnects) {
  REQUIRE_RDMA();
  const LateResult r =
      RunLatePeer(1500 * kMillisecond, 30 * kSecond, /*b_connects=*/true);
  EXPECT_GE(r.a.ctrl_qp_recycles, 1u);
  EXPECT_EQ(r.a.qp_errors, 0u);
  EXPECT_EQ(r.b.qp_errors, 0u);
  EXPECT_EQ(r.b.ctrl_qp_recycles, 0u);  // B's peer was there
  EXPECT_GE(r.a.tx_wait_ready, 1u);     // A's packets waited for B
  EXPECT_GE(r.a.rx_hellos, 1u);
  EXPECT_GE(r.b.rx_hellos, 1u);
  EXPECT_GT(r.a.tx_data, 0u);
}

// Past connect_wait the control QP is not recycled any more: it fails for
// good (qp_errors, one clear line on stderr) and the peer's packets are
// dropped; the engine then fails the connection after its own timeout.
TEST(LatePeerTest, APeerThatNeverConnectsFailsAfterTheBudget) {
  REQUIRE_RDMA();
  const LateResult r =
      RunLatePeer(3 * kSecond, 1 * kSecond, /*b_connects=*/false);
  EXPECT_GE(r.a.ctrl_qp_recycles, 1u);
  EXPECT_LE(r.a.ctrl_qp_recycles, 10u);  // about 1 s / (3 x 67 ms)
  EXPECT_EQ(r.a.qp_errors, 1u);
  EXPECT_GE(r.a.cq_errors, 1u);
  EXPECT_GT(r.a.tx_drop_unknown_peer, 0u);
}

// The hazard this guards against is real: without the close, B's
// application sees the message complete while A's originals are still
// parked, and when they land they overwrite what B put in the buffer.
TEST(MessageCloseTest, WithoutItAStaleWriteOverwritesAReusedBuffer) {
  REQUIRE_RDMA();
  const StaleWriteResult r = RunStaleWrite(/*message_close=*/false);
  EXPECT_TRUE(r.completed_while_parked);
  EXPECT_GT(r.overwritten_after_reuse, 0u)
      << "the parked WRITEs did not land (the test would prove nothing)";
  printf("without the close: %zu bytes of the reused buffer overwritten\n",
         r.overwritten_after_reuse);
}

// With the close, neither side reports the message before the parked
// WRITEs have completed; after the completions nothing lands in the reused
// buffer, a stale copy offered later is dropped (tx_drop_acked), and no
// WRITE was placed after its close (rx_after_close).
TEST(MessageCloseTest, CompletionWaitsUntilNothingOfTheMessageCanLand) {
  REQUIRE_RDMA();
  const StaleWriteResult r = RunStaleWrite(/*message_close=*/true);
  EXPECT_FALSE(r.completed_while_parked)
      << "the receiver saw the message while WRITEs of it were parked";
  EXPECT_EQ(r.overwritten_after_reuse, 0u);
  EXPECT_GE(r.a.close_waits, 1u) << "no close waited for local completions";
  EXPECT_GE(r.a.tx_closes, 1u);
  EXPECT_GE(r.b.rx_closes, 1u);
  EXPECT_GE(r.b.completions_held, 1u);
  EXPECT_EQ(r.b.rx_after_close, 0u);
  EXPECT_EQ(r.a.tx_drop_acked, 1u);
}

}  // namespace
}  // namespace prism::verbs
