// The NCCL plugin's isend when Prism refuses the payload's WRITE: the
// plugin's core is linked in and its device endpoint is a wrapper around a
// real udp endpoint (DeviceEndpoint::SetFactoryForTesting) that refuses
// chosen PostWrites with a chosen status. A transient refusal
// (ResourceExhausted: the endpoint's queue full) must be "try again" --
// success with a NULL request, nothing consumed, counted -- and any other
// refusal must fail the send comm (a warning naming the cause, the matching
// NCCL error from that isend and every later call). Both ends are the
// plugin's own comms on 127.0.0.1. The same holds on the deferred path: a
// send from (fake) device memory is staged and its WRITE posted later, by
// the next test() or isend once the device -> host copy is done.
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "prism/endpoint.h"
#include "tests/nccl/fake_gpu.h"
#include "tests/nccl/mini_nccl.h"
#include "transport/nccl/comm.h"
#include "transport/nccl/config.h"
#include "transport/nccl/endpoint_pool.h"
#include "transport/nccl/gpu.h"
#include "transport/nccl/log.h"

namespace prism::nccl {
namespace {

using Clock = std::chrono::steady_clock;
using nccl_test::WarningsSince;
constexpr int kOk = kPrismNcclSuccess;
constexpr uint64_t kPayload = 4096;  // never the length of a CTS frame

// What the wrapper refuses: the next `left` WRITEs of `len` bytes, with
// `status`; `refused` counts the refusals. Guarded by `mu` (PostWrite runs
// on the test's thread, the knobs are set there too, but the endpoint is
// shared by both comms).
struct Refusals {
  std::mutex mu;
  uint64_t len = 0;
  int left = 0;
  absl::Status status;
  int refused = 0;
};
Refusals& Knobs() {
  static Refusals* r = new Refusals();
  return *r;
}
void Refuse(int count, absl::Status status) {
  std::lock_guard<std::mutex> lock(Knobs().mu);
  Knobs().len = kPayload;
  Knobs().left = count;
  Knobs().status = std::move(status);
  Knobs().refused = 0;
}
int Refused() {
  std::lock_guard<std::mutex> lock(Knobs().mu);
  return Knobs().refused;
}

// A real endpoint whose PostWrite refuses what Knobs() says.
class RefusingEndpoint final : public Endpoint {
 public:
  explicit RefusingEndpoint(std::unique_ptr<Endpoint> inner)
      : in_(std::move(inner)) {}
  absl::StatusOr<ConnId> CreateConnection() override {
    return in_->CreateConnection();
  }
  absl::StatusOr<ConnId> CreateConnection(
      const ConnectionOptions& options) override {
    return in_->CreateConnection(options);
  }
  absl::StatusOr<ConnectionBlob> LocalInfo(ConnId conn) override {
    return in_->LocalInfo(conn);
  }
  absl::Status Connect(ConnId conn, const ConnectionBlob& remote) override {
    return in_->Connect(conn, remote);
  }
  absl::Status CloseConnection(ConnId conn) override {
    return in_->CloseConnection(conn);
  }
  absl::StatusOr<MemoryRegion> RegisterMemory(void* addr, uint64_t length,
                                              uint32_t access) override {
    return in_->RegisterMemory(addr, length, access);
  }
  absl::Status DeregisterMemory(uint32_t lkey) override {
    return in_->DeregisterMemory(lkey);
  }
  absl::Status PostWrite(ConnId conn, const WriteRequest& req) override {
    {
      Refusals& k = Knobs();
      std::lock_guard<std::mutex> lock(k.mu);
      if (k.left > 0 && req.length == k.len) {
        --k.left;
        ++k.refused;
        return k.status;
      }
    }
    return in_->PostWrite(conn, req);
  }
  size_t PollCompletions(Completion* out, size_t max) override {
    return in_->PollCompletions(out, max);
  }
  size_t WaitCompletions(Completion* out, size_t max, Time timeout) override {
    return in_->WaitCompletions(out, max, timeout);
  }
  EngineStats stats() override { return in_->stats(); }
  absl::StatusOr<ConnectionStats> connection_stats(ConnId conn) override {
    return in_->connection_stats(conn);
  }
  absl::StatusOr<PathStats> path_stats(ConnId conn, PathId path) override {
    return in_->path_stats(conn, path);
  }
  DatapathStats datapath_stats() override { return in_->datapath_stats(); }
  absl::Status SetPlaneUp(ConnId conn, uint16_t plane, bool up) override {
    return in_->SetPlaneUp(conn, plane, up);
  }
  uint32_t mtu_payload() const override { return in_->mtu_payload(); }

 private:
  std::unique_ptr<Endpoint> in_;
};

absl::StatusOr<std::unique_ptr<Endpoint>> MakeRefusing(
    const EndpointOptions& o) {
  auto ep = Endpoint::Create(o);
  if (!ep.ok()) return ep.status();
  return std::unique_ptr<Endpoint>(new RefusingEndpoint(*std::move(ep)));
}

// A connected send/recv comm pair with a registered 64 KiB buffer each and
// one 4 KiB receive (tag 7) posted.
class NcclWriteRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogger(nccl_test::TestLogger);
    DeviceEndpoint::SetFactoryForTesting(&MakeRefusing);
    std::map<std::string, std::string> env = {{"PRISM_ADDRS", "127.0.0.1"},
                                              {"PRISM_DATAPATH", "udp"},
                                              {"PRISM_PATHS", "16"},
                                              {"PRISM_UDP_TX_MODE", "sockets"},
                                              {"PRISM_SEED", "7"}};
    auto c = LoadConfig([&env](const char* k) -> const char* {
      auto it = env.find(k);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    ASSERT_TRUE(c.ok()) << c.status();
    cfg_ = *std::move(c);
    dev_ = DeviceContext{0, &cfg_.devices[0], &cfg_};
    char handle[kPrismNcclHandleMaxSize];
    void* lc = nullptr;
    ASSERT_EQ(Listen(dev_, handle, &lc), kOk);
    const auto start = Clock::now();
    while (send_ == nullptr || recv_ == nullptr) {
      if (send_ == nullptr) {
        ASSERT_EQ(Connect(dev_, handle, &send_), kOk);
      }
      if (recv_ == nullptr) {
        ASSERT_EQ(Accept(lc, &recv_), kOk);
      }
      ASSERT_LT(Clock::now() - start, std::chrono::seconds(20));
    }
    ASSERT_EQ(CloseListen(lc), kOk);
    for (size_t i = 0; i < sbuf_.size(); ++i) sbuf_[i] = (i * 7 + 3) & 0xff;
    ASSERT_EQ(
        RegMr(send_, sbuf_.data(), sbuf_.size(), kPrismNcclPtrHost, &smh_),
        kOk);
    ASSERT_EQ(
        RegMr(recv_, rbuf_.data(), rbuf_.size(), kPrismNcclPtrHost, &rmh_),
        kOk);
    void* data = rbuf_.data();
    size_t size = kPayload;
    int tag = 7;
    ASSERT_EQ(Irecv(recv_, 1, &data, &size, &tag, &rmh_, &rreq_), kOk);
    ASSERT_NE(rreq_, nullptr);
  }
  void TearDown() override {
    if (send_ != nullptr) {
      if (smh_ != nullptr) {
        EXPECT_EQ(DeregMr(send_, smh_), kOk);
      }
      EXPECT_EQ(CloseSend(send_), kOk);
    }
    if (recv_ != nullptr) {
      if (rmh_ != nullptr) {
        EXPECT_EQ(DeregMr(recv_, rmh_), kOk);
      }
      EXPECT_EQ(CloseRecv(recv_), kOk);
    }
    ReleaseIdleResources();  // destroys the wrapped endpoint
    DeviceEndpoint::SetFactoryForTesting(nullptr);
    Refuse(0, absl::OkStatus());
  }

  // isend of the payload until it gives a request or an error (10 s at
  // most); the result, *nulls the "try again" answers.
  int IsendUntil(void** req, int* nulls) {
    return IsendFromUntil(sbuf_.data(), smh_, req, nulls);
  }
  // The same from any registered buffer.
  int IsendFromUntil(void* buf, void* mh, void** req, int* nulls) {
    *nulls = 0;
    const auto start = Clock::now();
    while (Clock::now() - start < std::chrono::seconds(10)) {
      *req = nullptr;
      const int r = Isend(send_, buf, kPayload, 7, mh, req);
      if (r != kOk || *req != nullptr) return r;
      ++*nulls;
    }
    return -1;
  }

  // test() the send request and the posted receive until both are done
  // (20 s at most); *rsize is the size the receive reported.
  void TestBothUntilDone(void* sreq, int* rsize) {
    bool sdone = false, rdone = false;
    const auto start = Clock::now();
    while ((!sdone || !rdone) &&
           Clock::now() - start < std::chrono::seconds(20)) {
      int done = 0;
      if (!sdone) {
        ASSERT_EQ(nccl::Test(sreq, &done, nullptr), kOk);
        sdone = done != 0;
      }
      done = 0;
      if (!rdone) {
        ASSERT_EQ(nccl::Test(rreq_, &done, rsize), kOk);
        rdone = done != 0;
      }
    }
    ASSERT_TRUE(sdone && rdone);
  }

  PluginConfig cfg_;
  DeviceContext dev_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  std::vector<uint8_t> sbuf_ = std::vector<uint8_t>(1 << 16);
  std::vector<uint8_t> rbuf_ = std::vector<uint8_t>(1 << 16, 0x5c);
  void* smh_ = nullptr;
  void* rmh_ = nullptr;
  void* rreq_ = nullptr;
};

// Three refusals for a full queue: isend says "try again" (success, NULL
// request) each time without consuming the CTS, the fourth call posts the
// WRITE, the transfer completes with the right bytes, and the three are
// counted (PluginCounters::writes_refused).
TEST_F(NcclWriteRefusal, QueueFullIsTryAgain) {
  const uint64_t counted = Counters().writes_refused;
  Refuse(3, absl::ResourceExhaustedError("injected: submission queue full"));
  const size_t log_from = nccl_test::LogSnapshot().size();
  void* sreq = nullptr;
  int nulls = 0;
  ASSERT_EQ(IsendUntil(&sreq, &nulls), kOk);
  ASSERT_NE(sreq, nullptr);
  EXPECT_EQ(Refused(), 3);
  EXPECT_GE(nulls, 3);  // at least the three refusals (and no-CTS-yet polls)
  EXPECT_EQ(Counters().writes_refused - counted, 3u);
  EXPECT_EQ(WarningsSince(log_from, ""), 0);
  // Both requests complete; the receiver got the bytes.
  int rsize = -1;
  ASSERT_NO_FATAL_FAILURE(TestBothUntilDone(sreq, &rsize));
  EXPECT_EQ(rsize, static_cast<int>(kPayload));
  EXPECT_EQ(0, memcmp(rbuf_.data(), sbuf_.data(), kPayload));
  EXPECT_EQ(rbuf_[kPayload], 0x5c);
}

struct FatalCase {
  absl::StatusCode code;
  int result;  // what isend and later calls must return
};

class NcclWriteRefusalFatal : public NcclWriteRefusal,
                              public ::testing::WithParamInterface<FatalCase> {
};

// A refusal that is not "queue full" fails the send comm: that isend
// returns the matching NCCL error (bad arguments: ncclInternalError; the
// connection gone: ncclRemoteError) with one warning naming the cause, and
// every later isend returns it too without reaching Prism again. Before
// 2026-12-05 only that isend failed and the next one posted the WRITE.
TEST_P(NcclWriteRefusalFatal, OtherRefusalFailsTheComm) {
  const FatalCase c = GetParam();
  Refuse(1, absl::Status(c.code, "injected refusal"));
  const size_t log_from = nccl_test::LogSnapshot().size();
  nccl_test::SetLogEcho(false);
  void* sreq = nullptr;
  int nulls = 0;
  EXPECT_EQ(IsendUntil(&sreq, &nulls), c.result);
  EXPECT_EQ(sreq, nullptr);
  EXPECT_EQ(Refused(), 1);
  EXPECT_EQ(WarningsSince(log_from,
                          "send comm: Prism refused the WRITE of "
                          "4096 bytes: "),
            1);
  EXPECT_EQ(WarningsSince(log_from, "injected refusal"), 1);
  // The comm stays failed with the first cause.
  for (int i = 0; i < 3; ++i) {
    sreq = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(Isend(send_, sbuf_.data(), kPayload, 7, smh_, &sreq), c.result);
    EXPECT_EQ(sreq, nullptr);
  }
  nccl_test::SetLogEcho(true);
  EXPECT_EQ(Refused(), 1);
}

INSTANTIATE_TEST_SUITE_P(
    Causes, NcclWriteRefusalFatal,
    ::testing::Values(FatalCase{absl::StatusCode::kInvalidArgument,
                                kPrismNcclInternalError},
                      FatalCase{absl::StatusCode::kFailedPrecondition,
                                kPrismNcclRemoteError}));

// The deferred path: isend from device memory (a fake GPU runtime, see
// fake_gpu.h) matches the CTS and returns a request at once; the payload is
// copied to its pinned mirror and the WRITE is posted later, by
// SendComm::PostPending on a later test() or isend, once the copy is done.
class NcclDeferredWriteRefusal : public NcclWriteRefusal {
 protected:
  void SetUp() override {
    SetGpuRuntimeForTesting(&gpu_);  // before any comm exists
    NcclWriteRefusal::SetUp();
    if (HasFatalFailure()) return;
    dbuf_ = gpu_.AllocDevice(kPayload);
    memcpy(dbuf_, sbuf_.data(), kPayload);
    ASSERT_EQ(RegMr(send_, dbuf_, kPayload, kPrismNcclPtrCuda, &dmh_), kOk);
  }
  void TearDown() override {
    if (send_ != nullptr && dmh_ != nullptr) {
      EXPECT_EQ(DeregMr(send_, dmh_), kOk);
    }
    NcclWriteRefusal::TearDown();
    if (dbuf_ != nullptr) gpu_.FreeDevice(dbuf_);
    SetGpuRuntimeForTesting(nullptr);
  }

  // isend from device memory until it gives a request (the staged send is
  // queued, its WRITE not posted yet) or an error.
  int IsendDeviceUntil(void** req) {
    int nulls = 0;
    return IsendFromUntil(dbuf_, dmh_, req, &nulls);
  }

  FakeGpu gpu_;
  uint8_t* dbuf_ = nullptr;
  void* dmh_ = nullptr;
};

// Three refusals for a full queue of the deferred WRITE: the send request
// stays not done (test() answers success, done 0), the WRITE is tried again
// by each later call, the transfer completes with the right bytes, and the
// three are counted (PluginCounters::writes_refused) without a warning.
// Before 2026-12-05 the deferred path retried but did not count them.
TEST_F(NcclDeferredWriteRefusal, QueueFullIsRetriedLater) {
  const uint64_t counted = Counters().writes_refused;
  Refuse(3, absl::ResourceExhaustedError("injected: submission queue full"));
  const size_t log_from = nccl_test::LogSnapshot().size();
  void* sreq = nullptr;
  ASSERT_EQ(IsendDeviceUntil(&sreq), kOk);
  ASSERT_NE(sreq, nullptr);
  EXPECT_EQ(Refused(), 0) << "the staged send's WRITE was posted by isend";
  int rsize = -1;
  ASSERT_NO_FATAL_FAILURE(TestBothUntilDone(sreq, &rsize));
  EXPECT_EQ(Refused(), 3);
  EXPECT_EQ(Counters().writes_refused - counted, 3u);
  EXPECT_EQ(WarningsSince(log_from, ""), 0);
  EXPECT_EQ(rsize, static_cast<int>(kPayload));
  EXPECT_EQ(0, memcmp(rbuf_.data(), sbuf_.data(), kPayload));
  EXPECT_EQ(rbuf_[kPayload], 0x5c);
  EXPECT_EQ(gpu_.stats().d2h, 1);
}

class NcclDeferredWriteRefusalFatal
    : public NcclDeferredWriteRefusal,
      public ::testing::WithParamInterface<FatalCase> {};

// A refusal of the deferred WRITE that is not "queue full" fails the send
// comm as on isend's own path: the request's test() returns the matching
// NCCL error (bad arguments: ncclInternalError; the connection gone:
// ncclRemoteError) with one warning naming the cause, and every later isend
// returns it too without reaching Prism again. Before 2026-12-05 the
// request failed with ncclInternalError whatever the cause and the comm
// went on (the next isend was answered as if nothing had happened).
TEST_P(NcclDeferredWriteRefusalFatal, OtherRefusalFailsTheComm) {
  const FatalCase c = GetParam();
  Refuse(1, absl::Status(c.code, "injected refusal"));
  const size_t log_from = nccl_test::LogSnapshot().size();
  nccl_test::SetLogEcho(false);
  void* sreq = nullptr;
  ASSERT_EQ(IsendDeviceUntil(&sreq), kOk);
  ASSERT_NE(sreq, nullptr);
  int r = kOk, done = 0;
  const auto start = Clock::now();
  while (r == kOk && done == 0 &&
         Clock::now() - start < std::chrono::seconds(10)) {
    r = nccl::Test(sreq, &done, nullptr);
  }
  EXPECT_EQ(r, c.result);
  EXPECT_EQ(Refused(), 1);
  EXPECT_EQ(WarningsSince(log_from,
                          "send comm: Prism refused the WRITE of "
                          "4096 bytes: "),
            1);
  EXPECT_EQ(WarningsSince(log_from, "injected refusal"), 1);
  // The comm stays failed with the first cause, from host memory too.
  for (int i = 0; i < 3; ++i) {
    void* req = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(Isend(send_, sbuf_.data(), kPayload, 7, smh_, &req), c.result);
    EXPECT_EQ(req, nullptr);
  }
  nccl_test::SetLogEcho(true);
  EXPECT_EQ(Refused(), 1);
}

INSTANTIATE_TEST_SUITE_P(
    Causes, NcclDeferredWriteRefusalFatal,
    ::testing::Values(FatalCase{absl::StatusCode::kInvalidArgument,
                                kPrismNcclInternalError},
                      FatalCase{absl::StatusCode::kFailedPrecondition,
                                kPrismNcclRemoteError}));

}  // namespace
}  // namespace prism::nccl
