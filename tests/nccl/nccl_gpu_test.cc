// GPU memory staging of the NCCL plugin (transport/nccl/gpu.h) against a
// fake GPU runtime (tests/nccl/fake_gpu.h), linked directly against the
// plugin's core library: no GPU is needed. The fake runs every copy lazily,
// one queued operation per event query, so a WRITE posted before its
// device -> host copy finished (or a receive reported done before its
// host -> device copy) shows up as wrong bytes.
//
// The real CUDA path (tests/nccl/gpu_check.sh) needs a GPU machine.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#ifdef PRISM_NCCL_HAVE_ENDPOINT
#include "tests/nccl/fake_peer.h"
#endif
#include "tests/nccl/fake_gpu.h"
#include "tests/nccl/mini_nccl.h"
#include "transport/base/random.h"
#include "transport/nccl/comm.h"
#include "transport/nccl/config.h"
#include "transport/nccl/gpu.h"
#include "transport/nccl/log.h"

namespace prism::nccl {
namespace {

using prism::nccl_test::CheckPattern;
using prism::nccl_test::FillPattern;

using Clock = std::chrono::steady_clock;

struct Fixture {
  PluginConfig cfg;
  DeviceContext dev;
  void* send = nullptr;
  void* recv = nullptr;
};

EnvGetter Env(std::map<std::string, std::string>* m) {
  return [m](const char* k) -> const char* {
    auto it = m->find(k);
    return it == m->end() ? nullptr : it->second.c_str();
  };
}

void Connect(const std::string& datapath, Fixture* f) {
  std::map<std::string, std::string> env = {{"PRISM_ADDRS", "127.0.0.1"},
                                            {"PRISM_DATAPATH", datapath},
                                            {"PRISM_PATHS", "16"},
                                            {"PRISM_UDP_TX_MODE", "sockets"},
                                            {"PRISM_SEED", "7"}};
  auto c = LoadConfig(Env(&env));
  ASSERT_TRUE(c.ok()) << c.status();
  f->cfg = *std::move(c);
  f->dev = DeviceContext{0, &f->cfg.devices[0], &f->cfg};
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(Listen(f->dev, handle, &lc), kPrismNcclSuccess);
  const auto start = Clock::now();
  while (f->send == nullptr || f->recv == nullptr) {
    if (f->send == nullptr) {
      ASSERT_EQ(Connect(f->dev, handle, &f->send), kPrismNcclSuccess);
    }
    if (f->recv == nullptr) {
      ASSERT_EQ(Accept(lc, &f->recv), kPrismNcclSuccess);
    }
    ASSERT_LT(Clock::now() - start, std::chrono::seconds(10));
  }
  ASSERT_EQ(CloseListen(lc), kPrismNcclSuccess);
}

void Close(Fixture* f) {
  if (f->send != nullptr) {
    EXPECT_EQ(CloseSend(f->send), kPrismNcclSuccess);
  }
  if (f->recv != nullptr) {
    EXPECT_EQ(CloseRecv(f->recv), kPrismNcclSuccess);
  }
  f->send = f->recv = nullptr;
  ReleaseIdleResources();
}

// Tests both requests until done; returns false on timeout.
bool Wait(void* sreq, int* sres, void* rreq, int* rsizes, int* rres) {
  const auto start = Clock::now();
  bool sdone = sreq == nullptr, rdone = rreq == nullptr;
  *sres = *rres = kPrismNcclSuccess;
  while (!sdone || !rdone) {
    int done = 0;
    if (!sdone) {
      *sres = Test(sreq, &done, nullptr);
      sdone = done != 0 || *sres != kPrismNcclSuccess;
    }
    done = 0;
    if (!rdone) {
      *rres = Test(rreq, &done, rsizes);
      rdone = done != 0 || *rres != kPrismNcclSuccess;
    }
    if (Clock::now() - start > std::chrono::seconds(20)) return false;
  }
  return true;
}

class NcclGpu : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { SetGpuRuntimeForTesting(&gpu_); }
  void TearDown() override { SetGpuRuntimeForTesting(nullptr); }
  FakeGpu gpu_;
};

TEST_P(NcclGpu, AdvertisesAndRegistersDeviceMemory) {
  EXPECT_EQ(SupportedPtrTypes(),
            kPrismNcclPtrHost | kPrismNcclPtrCuda | kPrismNcclPtrDmaBuf);
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(Connect(GetParam(), &f));
  uint8_t* d = gpu_.AllocDevice(4096);
  std::vector<uint8_t> host(4096);
  void* mh = nullptr;
  ASSERT_EQ(RegMr(f.send, d, 4096, kPrismNcclPtrCuda, &mh), kPrismNcclSuccess);
  EXPECT_EQ(gpu_.stats().pinned_live, 1);  // its host mirror
  ASSERT_EQ(DeregMr(f.send, mh), kPrismNcclSuccess);
  EXPECT_EQ(gpu_.stats().pinned_live, 0);
  // Host memory registered as CUDA, and DMABUF as a type, are refused.
  EXPECT_EQ(RegMr(f.send, host.data(), 4096, kPrismNcclPtrCuda, &mh),
            kPrismNcclInvalidArgument);
  EXPECT_EQ(mh, nullptr);
  EXPECT_EQ(RegMr(f.send, d, 4096, kPrismNcclPtrDmaBuf, &mh),
            kPrismNcclInvalidArgument);
  // iflush has nothing to do: success with a NULL request.
  void* data = d;
  int size = 100;
  void* req = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(Iflush(f.recv, 1, &data, &size, &mh, &req), kPrismNcclSuccess);
  EXPECT_EQ(req, nullptr);
  Close(&f);
  const FakeGpu::Stats st = gpu_.stats();
  EXPECT_EQ(st.pinned_live, 0);
  EXPECT_EQ(st.streams_live, 0);
  EXPECT_EQ(st.events_live, 0);
  gpu_.FreeDevice(d);
}

TEST_P(NcclGpu, HostOnlyWithoutARuntime) {
  SetGpuRuntimeForTesting(nullptr);
  EXPECT_EQ(SupportedPtrTypes(), kPrismNcclPtrHost);
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(Connect(GetParam(), &f));
  uint8_t* d = gpu_.AllocDevice(64);
  void* mh = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(RegMr(f.recv, d, 64, kPrismNcclPtrCuda, &mh),
            kPrismNcclInvalidArgument);
  EXPECT_EQ(mh, nullptr);
  Close(&f);
  gpu_.FreeDevice(d);
}

// Random traffic between device and host buffers in every combination, up
// to 8 outstanding, grouped receives, verified byte by byte in the buffers
// NCCL posted (device memory for staged receives).
TEST_P(NcclGpu, StagedTrafficVerifiedByteByByte) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(Connect(GetParam(), &f));
  constexpr size_t kBuf = 8 * 64 * 1024;
  constexpr size_t kMax = 64 * 1024 - 64;  // leaves room for a canary
  uint8_t* sdev = gpu_.AllocDevice(kBuf);
  uint8_t* rdev = gpu_.AllocDevice(kBuf);
  std::vector<uint8_t> shost(kBuf), rhost(kBuf);
  void *smh_dev, *smh_host, *rmh_dev, *rmh_host;
  ASSERT_EQ(RegMr(f.send, sdev, kBuf, kPrismNcclPtrCuda, &smh_dev), 0);
  ASSERT_EQ(RegMr(f.send, shost.data(), kBuf, kPrismNcclPtrHost, &smh_host), 0);
  ASSERT_EQ(RegMr(f.recv, rdev, kBuf, kPrismNcclPtrCuda, &rmh_dev), 0);
  ASSERT_EQ(RegMr(f.recv, rhost.data(), kBuf, kPrismNcclPtrHost, &rmh_host), 0);
  Rng rng(42);
  int staged_sends = 0, staged_recvs = 0;
  constexpr int kRounds = 150;
  struct Msg {
    uint8_t* sbuf;
    void* smh;
    uint8_t* rbuf;
    void* rmh;
    size_t size;
    int tag;
  };
  for (int round = 0; round < kRounds; ++round) {
    // Up to 8 messages in 1..4 receive requests (grouped up to 4), message j
    // using the 64 KiB slot j of the send and of the receive buffer.
    std::vector<std::vector<Msg>> reqs;
    int j = 0;
    const int nreq = 1 + static_cast<int>(rng.Next32() % 4);
    for (int q = 0; q < nreq && j < 8; ++q) {
      const int n = std::min<int>(
          8 - j, rng.Next32() % 3 == 0 ? 2 + rng.Next32() % 3 : 1);
      std::vector<Msg> g;
      for (int i = 0; i < n; ++i, ++j) {
        const bool sd = rng.Next32() % 2 == 0, rd = rng.Next32() % 2 == 0;
        const size_t off = static_cast<size_t>(j) * 64 * 1024;
        const size_t size =
            rng.Next32() % 8 == 0 ? 0 : rng.Next32() % (kMax + 1);
        g.push_back(Msg{(sd ? sdev : shost.data()) + off,
                        sd ? smh_dev : smh_host,
                        (rd ? rdev : rhost.data()) + off,
                        rd ? rmh_dev : rmh_host, size, 100 + i});
        staged_sends += sd && size > 0;
        staged_recvs += rd && size > 0;
      }
      reqs.push_back(std::move(g));
    }
    std::vector<void*> rreqs(reqs.size(), nullptr);
    for (size_t q = 0; q < reqs.size(); ++q) {
      void* data[kMaxRecvs];
      size_t sizes[kMaxRecvs];
      int tags[kMaxRecvs];
      void* mhs[kMaxRecvs];
      const int n = static_cast<int>(reqs[q].size());
      for (int i = 0; i < n; ++i) {
        const Msg& m = reqs[q][i];
        // A canary right after the message (the fake's device memory is
        // host memory, so the test can write and read it directly).
        memset(m.rbuf, 0x77, m.size);
        memset(m.rbuf + m.size, 0x3c, 64);
        FillPattern(m.sbuf, m.size, 9, round, static_cast<uint32_t>(q * 8 + i));
        data[i] = m.rbuf;
        sizes[i] = kMax + 64;
        tags[i] = m.tag;
        mhs[i] = m.rmh;
      }
      ASSERT_EQ(Irecv(f.recv, n, data, sizes, tags, mhs, &rreqs[q]),
                kPrismNcclSuccess);
      ASSERT_NE(rreqs[q], nullptr);
    }
    std::vector<void*> sreqs;
    for (size_t q = 0; q < reqs.size(); ++q) {
      // Reverse tag order inside a grouped receive.
      for (int i = static_cast<int>(reqs[q].size()) - 1; i >= 0; --i) {
        const Msg& m = reqs[q][i];
        void* req = nullptr;
        const auto start = Clock::now();
        while (req == nullptr) {
          ASSERT_EQ(Isend(f.send, m.sbuf, m.size, m.tag, m.smh, &req),
                    kPrismNcclSuccess);
          ASSERT_LT(Clock::now() - start, std::chrono::seconds(10));
        }
        sreqs.push_back(req);
      }
    }
    int sres = 0, rres = 0, unused[kMaxRecvs];
    for (void* sreq : sreqs) {
      ASSERT_TRUE(Wait(sreq, &sres, nullptr, unused, &rres));
      ASSERT_EQ(sres, kPrismNcclSuccess);
    }
    for (size_t q = 0; q < reqs.size(); ++q) {
      int sizes[kMaxRecvs] = {};
      ASSERT_TRUE(Wait(nullptr, &sres, rreqs[q], sizes, &rres));
      ASSERT_EQ(rres, kPrismNcclSuccess);
      for (size_t i = 0; i < reqs[q].size(); ++i) {
        const Msg& m = reqs[q][i];
        ASSERT_EQ(sizes[i], static_cast<int>(m.size));
        ASSERT_EQ(CheckPattern(m.rbuf, m.size, 9, round,
                               static_cast<uint32_t>(q * 8 + i)),
                  -1)
            << "round " << round << " msg " << q << "." << i << " size "
            << m.size << (m.rmh == rmh_dev ? " device" : " host")
            << " receive, " << (m.smh == smh_dev ? "device" : "host")
            << " send";
        for (int c = 0; c < 64; ++c) ASSERT_EQ(m.rbuf[m.size + c], 0x3c);
      }
    }
  }
  const FakeGpu::Stats st = gpu_.stats();
  EXPECT_EQ(st.d2h, staged_sends);
  EXPECT_EQ(st.h2d, staged_recvs);
  EXPECT_GT(staged_sends, 20);
  EXPECT_GT(staged_recvs, 20);
  EXPECT_EQ(st.bad_copies, 0);
  for (auto [c, mh] : {std::pair{f.send, smh_dev},
                       {f.send, smh_host},
                       {f.recv, rmh_dev},
                       {f.recv, rmh_host}}) {
    EXPECT_EQ(DeregMr(c, mh), kPrismNcclSuccess);
  }
  Close(&f);
  EXPECT_EQ(gpu_.stats().pinned_live, 0);
  EXPECT_EQ(gpu_.stats().events_live, 0);
  EXPECT_EQ(gpu_.stats().streams_live, 0);
  gpu_.FreeDevice(sdev);
  gpu_.FreeDevice(rdev);
}

// One connected pair with a 4 KiB device buffer (filled with `fill`) on the
// send side, a 4 KiB host buffer (filled with `rfill`) on the receive
// side, both registered, and one receive of it posted with `tag`.
struct DeviceToHost {
  Fixture f;
  uint8_t* sdev = nullptr;
  std::vector<uint8_t> rhost;
  void* smh = nullptr;
  void* rmh = nullptr;
  void* rreq = nullptr;

  void Open(FakeGpu* gpu, const char* datapath, uint8_t fill, uint8_t rfill,
            int tag) {
    ASSERT_NO_FATAL_FAILURE(Connect(datapath, &f));
    sdev = gpu->AllocDevice(4096);
    memset(sdev, fill, 4096);
    rhost.assign(4096, rfill);
    ASSERT_EQ(RegMr(f.send, sdev, 4096, kPrismNcclPtrCuda, &smh), 0);
    ASSERT_EQ(RegMr(f.recv, rhost.data(), 4096, kPrismNcclPtrHost, &rmh), 0);
    void* data = rhost.data();
    size_t size = 4096;
    ASSERT_EQ(Irecv(f.recv, 1, &data, &size, &tag, &rmh, &rreq), 0);
  }
  void Close(FakeGpu* gpu) {
    EXPECT_EQ(DeregMr(f.send, smh), 0);
    EXPECT_EQ(DeregMr(f.recv, rmh), 0);
    ::prism::nccl::Close(&f);
    gpu->FreeDevice(sdev);
  }
};

// A failing device copy fails the send cleanly (an error, no crash, no
// WRITE of stale bytes); the comm reports the failure from then on.
TEST_P(NcclGpu, CopyFailureFailsTheSend) {
  DeviceToHost p;
  ASSERT_NO_FATAL_FAILURE(p.Open(&gpu_, GetParam(), 0xdd, 0x11, 1));
  Fixture& f = p.f;
  uint8_t* sdev = p.sdev;
  void* smh = p.smh;
  gpu_.FailNextCopies(1);
  void* sreq = nullptr;
  int r = kPrismNcclSuccess;
  const auto start = Clock::now();
  while (sreq == nullptr && r == kPrismNcclSuccess) {
    r = Isend(f.send, sdev, 1000, 1, smh, &sreq);
    ASSERT_LT(Clock::now() - start, std::chrono::seconds(10));
  }
  EXPECT_EQ(r, kPrismNcclUnhandledCudaError);
  EXPECT_EQ(sreq, nullptr);
  for (uint8_t b : p.rhost) ASSERT_EQ(b, 0x11);
  p.Close(&gpu_);
  EXPECT_EQ(gpu_.stats().pinned_live, 0);
}

// A staged copy the GPU does not run is reported once (WARN) after a second,
// the request stays pending (NCCL keeps polling), and completes with the
// right bytes once the copy runs.
TEST_P(NcclGpu, StalledCopyIsReportedOnce) {
  using prism::nccl_test::LogSnapshot;
  using prism::nccl_test::SetLogEcho;
  SetLogger(prism::nccl_test::TestLogger);
  DeviceToHost p;
  ASSERT_NO_FATAL_FAILURE(p.Open(&gpu_, GetParam(), 0x5c, 0, 3));
  gpu_.Stall(true);
  void* sreq = nullptr;
  const auto start = Clock::now();
  while (sreq == nullptr) {
    ASSERT_EQ(Isend(p.f.send, p.sdev, 3000, 3, p.smh, &sreq), 0);
    ASSERT_LT(Clock::now() - start, std::chrono::seconds(10));
  }
  auto stall_lines = [] {
    int n = 0;
    for (const auto& l : LogSnapshot()) {
      n += l.text.find("device -> host copy of request") != std::string::npos &&
           l.text.find("not complete after") != std::string::npos;
    }
    return n;
  };
  const int before = stall_lines();
  SetLogEcho(false);  // the expected warning
  int done = 0;
  while (Clock::now() - start < std::chrono::milliseconds(1300)) {
    ASSERT_EQ(prism::nccl::Test(sreq, &done, nullptr), 0);
    ASSERT_EQ(done, 0) << "completed although its copy never ran";
  }
  SetLogEcho(true);
  EXPECT_EQ(stall_lines() - before, 1);
  gpu_.Stall(false);
  int sres, rres, rsize = 0;
  ASSERT_TRUE(Wait(sreq, &sres, p.rreq, &rsize, &rres));
  EXPECT_EQ(sres, 0);
  EXPECT_EQ(rres, 0);
  EXPECT_EQ(rsize, 3000);
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(p.rhost[i], 0x5c) << i;
  EXPECT_EQ(p.rhost[3000], 0);
  p.Close(&gpu_);
}

#ifdef PRISM_NCCL_HAVE_ENDPOINT
// A comm keeps reporting its FIRST failure, the root cause; later ones are
// only logged (INFO). The plugin's send comm (udp data path) against a fake
// receiver: the device -> host copy of its first send fails
// (ncclUnhandledCudaError), then the peer WRITEs an out-of-order CTS (a
// protocol error, ncclRemoteError). isend goes on returning
// ncclUnhandledCudaError, and the protocol error is logged as a later
// failure. Before 2026-12-05 the last failure won: isend switched to
// ncclRemoteError, hiding the GPU failure.
TEST(NcclFailure, FirstFailureIsWhatTheCommReports) {
  using prism::nccl_test::Cts;
  using prism::nccl_test::CtsEntry;
  using prism::nccl_test::FakePeer;
  using prism::nccl_test::kSlotBytes;
  using prism::nccl_test::LogSnapshot;
  FakeGpu gpu;
  SetGpuRuntimeForTesting(&gpu);
  SetLogger(prism::nccl_test::TestLogger);
  std::map<std::string, std::string> env = {{"PRISM_ADDRS", "127.0.0.1"},
                                            {"PRISM_DATAPATH", "udp"},
                                            {"PRISM_PATHS", "16"},
                                            {"PRISM_UDP_TX_MODE", "sockets"},
                                            {"PRISM_SEED", "7"}};
  auto cfg = LoadConfig(Env(&env));
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const DeviceContext dev{0, &cfg->devices[0], &*cfg};
  FakePeer peer;
  ASSERT_NO_FATAL_FAILURE(peer.Setup());
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(Listen(dev, handle, &lc), kPrismNcclSuccess);
  ASSERT_EQ(CloseListen(lc), kPrismNcclSuccess);
  void* send = nullptr;
  ASSERT_NO_FATAL_FAILURE(prism::nccl_test::ConnectPluginTo(
      &peer, handle,
      [&](char* h, void** comm) {
        return static_cast<int>(Connect(dev, h, comm));
      },
      &send));
  uint8_t* d = gpu.AllocDevice(4096);
  void* mh = nullptr;
  ASSERT_EQ(RegMr(send, d, 4096, kPrismNcclPtrCuda, &mh), kPrismNcclSuccess);
  Cts f{};
  f.seq = 0;
  f.n = 1;
  f.e[0] = CtsEntry{reinterpret_cast<uintptr_t>(peer.buf.data()), 4096,
                    peer.buf_mr.rkey, 7};
  memcpy(peer.src.data(), &f, prism::nccl_test::CtsLen(1));
  ASSERT_NO_FATAL_FAILURE(
      peer.Write(peer.cts_addr, peer.cts_rkey, prism::nccl_test::CtsLen(1), 0));
  gpu.FailNextCopies(1);
  prism::nccl_test::SetLogEcho(false);
  void* req = nullptr;
  int r = kPrismNcclSuccess;
  auto start = Clock::now();
  while (req == nullptr && r == kPrismNcclSuccess &&
         Clock::now() - start < std::chrono::seconds(10)) {
    r = Isend(send, d, 1000, 7, mh, &req);
  }
  EXPECT_EQ(r, kPrismNcclUnhandledCudaError);
  EXPECT_EQ(req, nullptr);
  // Now the peer breaks the protocol too: CTS 5 while 1 is expected.
  const size_t log_from = LogSnapshot().size();
  f.seq = 5;
  memcpy(peer.src.data(), &f, prism::nccl_test::CtsLen(1));
  ASSERT_NO_FATAL_FAILURE(peer.Write(peer.cts_addr + 5 * kSlotBytes,
                                     peer.cts_rkey, prism::nccl_test::CtsLen(1),
                                     5));
  auto later_logged = [&] {
    const auto log = LogSnapshot();
    int n = 0;
    for (size_t i = log_from; i < log.size(); ++i) {
      n += log[i].level == kPrismNcclLogInfo &&
           log[i].text.find("send comm: also malformed or out-of-order CTS") !=
               std::string::npos &&
           log[i].text.find("after the first failure (result 1") !=
               std::string::npos;
    }
    return n;
  };
  start = Clock::now();
  while (later_logged() == 0 &&
         Clock::now() - start < std::chrono::seconds(10)) {
    r = Isend(send, d, 1000, 7, mh, &req);
    ASSERT_EQ(r, kPrismNcclUnhandledCudaError);
  }
  prism::nccl_test::SetLogEcho(true);
  EXPECT_EQ(later_logged(), 1);
  EXPECT_EQ(Isend(send, d, 1000, 7, mh, &req), kPrismNcclUnhandledCudaError);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(DeregMr(send, mh), kPrismNcclSuccess);
  EXPECT_EQ(CloseSend(send), kPrismNcclSuccess);
  ReleaseIdleResources();
  gpu.FreeDevice(d);
  SetGpuRuntimeForTesting(nullptr);
}
#endif  // PRISM_NCCL_HAVE_ENDPOINT

std::vector<const char*> DataPaths() {
#ifdef PRISM_NCCL_HAVE_ENDPOINT
  return {"tcp", "udp"};
#else
  return {"tcp"};
#endif
}
INSTANTIATE_TEST_SUITE_P(DataPaths, NcclGpu, ::testing::ValuesIn(DataPaths()),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace prism::nccl
