// Mini-NCCL driver tests for libnccl-net-prism.so: loads the plugin as NCCL
// 2.28.9 does and replays NCCL's call patterns (see mini_nccl.h), on
// 127.0.0.1 only. The two-process test forks: each process has a service
// thread (listen/connect/accept/regMr/close) and one progress thread per comm
// (isend/irecv/test), as NCCL's proxy does.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/nccl/mini_nccl.h"
#include "transport/base/random.h"
#include "transport/nccl/wire.h"

namespace prism::nccl_test {
namespace {

constexpr int kOk = kPrismNcclSuccess;

Net g_net;
void* g_ctx = nullptr;

const PrismNcclNetV11* N() { return g_net.v11(); }

std::string PluginEnvValue() {
  // NCCL_NET_PLUGIN=prism resolves to libnccl-net-prism.so via the library
  // path (ctest sets LD_LIBRARY_PATH); the absolute path is the fallback
  // when the binary is run by hand.
  return std::string("prism,") + PRISM_NCCL_PLUGIN;
}

void LoadOrDie() {
  if (g_net.dl != nullptr) return;
  std::string err;
  ASSERT_TRUE(LoadNet(PluginEnvValue(), &g_net, &err)) << err;
  ASSERT_EQ(g_net.version, 11);
}

void InitCtx() {
  LoadOrDie();
  if (g_ctx != nullptr) return;
  ASSERT_EQ(N()->init(&g_ctx, 0x1234, nullptr, TestLogger, nullptr), kOk);
  ASSERT_NE(g_ctx, nullptr);
}

using Clock = std::chrono::steady_clock;
// PRISM_TEST_TIME_SCALE (an integer, default 1) stretches every limit: the
// rxe VM run emulates the CPU (QEMU TCG) and sets it.
int TimeScale() {
  static const int scale = [] {
    const char* v = std::getenv("PRISM_TEST_TIME_SCALE");
    const int s = v == nullptr ? 1 : std::atoi(v);
    return s >= 1 && s <= 100 ? s : 1;
  }();
  return scale;
}
bool Expired(Clock::time_point start, int seconds) {
  return Clock::now() - start > std::chrono::seconds(seconds * TimeScale());
}

struct Pair {
  void* send = nullptr;
  void* recv = nullptr;
};

// listen + polled connect/accept on one thread, as NCCL may drive them.
void ConnectOneThread(int dev, Pair* p, int* polls = nullptr) {
  char handle[kPrismNcclHandleMaxSize];
  memset(handle, 0xcc, sizeof(handle));
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, dev, handle, &lc), kOk);
  ASSERT_NE(lc, nullptr);
  PrismNcclDeviceHandle* dev_handle = nullptr;  // pointer to NULL
  const auto start = Clock::now();
  int n = 0;
  while (p->send == nullptr || p->recv == nullptr) {
    if (p->send == nullptr) {
      ASSERT_EQ(N()->connect(g_ctx, dev, handle, &p->send, &dev_handle), kOk);
    }
    if (p->recv == nullptr) {
      ASSERT_EQ(N()->accept(lc, &p->recv, nullptr), kOk);  // plain NULL
    }
    ++n;
    ASSERT_FALSE(Expired(start, 10)) << "connect/accept did not complete";
  }
  EXPECT_EQ(dev_handle, nullptr);
  ASSERT_EQ(N()->close_listen(lc), kOk);  // right after accept, as NCCL does
  if (polls != nullptr) *polls = n;
}

void ClosePair(Pair* p) {
  if (p->send != nullptr) {
    EXPECT_EQ(N()->close_send(p->send), kOk);
  }
  if (p->recv != nullptr) {
    EXPECT_EQ(N()->close_recv(p->recv), kOk);
  }
  *p = Pair();
}

// Retries isend until it returns a request (NULL = try again).
void* Isend(void* sc, void* data, size_t size, int tag, void* mh,
            Pair* progress = nullptr) {
  const auto start = Clock::now();
  for (;;) {
    void* req = nullptr;
    const int r = N()->isend(sc, data, size, tag, mh, nullptr, &req);
    EXPECT_EQ(r, kOk);
    if (r != kOk || req != nullptr) return req;
    (void)progress;
    if (Expired(start, 10)) {
      ADD_FAILURE() << "isend never found a clear-to-send";
      return nullptr;
    }
  }
}

void* Irecv(void* rc, int n, void** data, size_t* sizes, int* tags,
            void** mhs) {
  void* req = reinterpret_cast<void*>(0x1);  // NCCL's preset
  const int r = N()->irecv(rc, n, data, sizes, tags, mhs, nullptr, &req);
  EXPECT_EQ(r, kOk);
  EXPECT_NE(req, reinterpret_cast<void*>(0x1)) << "0x1 preset not overwritten";
  return req;
}

// Registers `sbuf` on p's send comm and `rbuf` on its recv comm (host).
void RegisterHost(const Pair& p, std::vector<uint8_t>* sbuf,
                  std::vector<uint8_t>* rbuf, void** smh, void** rmh) {
  ASSERT_EQ(
      N()->reg_mr(p.send, sbuf->data(), sbuf->size(), kPrismNcclPtrHost, smh),
      kOk);
  ASSERT_EQ(
      N()->reg_mr(p.recv, rbuf->data(), rbuf->size(), kPrismNcclPtrHost, rmh),
      kOk);
}

void DeregisterBoth(const Pair& p, void* smh, void* rmh) {
  EXPECT_EQ(N()->dereg_mr(p.send, smh), kOk);
  EXPECT_EQ(N()->dereg_mr(p.recv, rmh), kOk);
}

// Tests both requests (either may be NULL = already done) until done; returns
// the first non-success result.
int WaitBoth(void* sreq, int* ssizes, int* sres, void* rreq, int* rsizes,
             int* rres) {
  const auto start = Clock::now();
  bool sdone = sreq == nullptr, rdone = rreq == nullptr;
  *sres = kOk;
  *rres = kOk;
  while (!sdone || !rdone) {
    int done = 0;
    if (!sdone) {
      const int r = N()->test(sreq, &done, ssizes);
      if (r != kOk) {
        *sres = r;
        done = 1;
      }
      sdone = done != 0;
    }
    done = 0;
    if (!rdone) {
      const int r = N()->test(rreq, &done, rsizes);
      if (r != kOk) {
        *rres = r;
        done = 1;
      }
      rdone = done != 0;
    }
    if (Expired(start, 20)) {
      ADD_FAILURE() << "requests did not complete";
      return -1;
    }
  }
  return *sres != kOk ? *sres : *rres;
}

// ---------------------------------------------------------------------------
TEST(NcclAbi, LoadsLikeNccl) {
  LoadOrDie();
  const char* ld = getenv("LD_LIBRARY_PATH");
  if (ld != nullptr && strstr(ld, PRISM_NCCL_PLUGIN_DIR) != nullptr) {
    EXPECT_EQ(g_net.opened, "libnccl-net-prism.so");
  }
  const PrismNcclNetV11* n = N();
  EXPECT_STREQ(n->name, "Prism");
  const void* const* slots = reinterpret_cast<const void* const*>(n);
  for (int i = 1; i < 22; ++i) {
    if (i == 17 || i == 18) {
      EXPECT_EQ(slots[i], nullptr) << "slot " << i;  // host plugin
    } else {
      EXPECT_NE(slots[i], nullptr) << "slot " << i;
    }
  }
  for (int v : {10, 9, 8}) {
    const auto* t = static_cast<const char* const*>(FindTable(g_net, v));
    ASSERT_NE(t, nullptr) << "v" << v;
    EXPECT_STREQ(t[0], "Prism");
  }
  EXPECT_EQ(FindTable(g_net, 7), nullptr);
}

TEST(NcclAbi, FailedInitThenFinalizeNullThenInitTwice) {
  LoadOrDie();
  // A bad configuration fails init cleanly; NCCL then calls finalize(NULL).
  const char* dp = getenv("PRISM_DATAPATH");
  const std::string saved_datapath = dp != nullptr ? dp : "";
  setenv("PRISM_DATAPATH", "bogus", 1);
  void* ctx = reinterpret_cast<void*>(0x1);
  SetLogEcho(false);
  EXPECT_NE(N()->init(&ctx, 1, nullptr, TestLogger, nullptr), kOk);
  SetLogEcho(true);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_EQ(N()->finalize(nullptr), kOk);
  if (saved_datapath.empty()) {
    unsetenv("PRISM_DATAPATH");
  } else {
    setenv("PRISM_DATAPATH", saved_datapath.c_str(), 1);
  }
  bool saw_config_warning = false;
  for (const LogLine& l : LogSnapshot()) {
    saw_config_warning |= l.level == kPrismNcclLogWarn &&
                          l.text.find("PRISM_DATAPATH") != std::string::npos;
  }
  EXPECT_TRUE(saw_config_warning);

  // init twice (two communicators), devices, finalize both.
  PrismNcclCommConfig cfg{-1};
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(N()->init(&a, 0xaaaa, &cfg, TestLogger, nullptr), kOk);
  ASSERT_EQ(N()->init(&b, 0xbbbb, nullptr, TestLogger, nullptr), kOk);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  int ndev = 0;
  ASSERT_EQ(N()->devices(&ndev), kOk);
  EXPECT_EQ(ndev, 2);  // PRISM_ADDRS=127.0.0.1,127.0.0.2
  PrismNcclNetAttr attr;
  memset(&attr, 0xff, sizeof(attr));  // all -1 = undefined
  EXPECT_EQ(N()->set_net_attr(a, &attr), kOk);
  EXPECT_EQ(N()->finalize(a), kOk);
  EXPECT_EQ(N()->finalize(b), kOk);
  EXPECT_EQ(N()->finalize(nullptr), kOk);

  // Every plugin message carries the NET subsystem flag.
  int lines = 0;
  for (const LogLine& l : LogSnapshot()) {
    EXPECT_NE(l.flags & kPrismNcclFlagNet, 0u) << l.text;
    EXPECT_NE(l.text.find("NET/Prism"), std::string::npos) << l.text;
    ++lines;
  }
  EXPECT_GT(lines, 0);
}

TEST(NcclAbi, PropertiesFilledCompletely) {
  InitCtx();
  int ndev = 0;
  ASSERT_EQ(N()->devices(&ndev), kOk);
  ASSERT_GE(ndev, 1);
  std::set<std::string> names;
  std::set<uint64_t> guids;
  for (int d = 0; d < ndev; ++d) {
    PrismNcclPropertiesV11 p;
    memset(&p, 0xab, sizeof(p));  // NCCL's struct is uninitialised stack
    ASSERT_EQ(N()->get_properties(d, &p), kOk);
    ASSERT_NE(p.name, nullptr);
    names.insert(p.name);
    guids.insert(p.guid);
    EXPECT_NE(reinterpret_cast<uintptr_t>(p.pci_path), 0xababababababababull);
    EXPECT_NE(p.ptr_support & kPrismNcclPtrHost, 0);
    EXPECT_EQ(p.ptr_support & ~(kPrismNcclPtrHost | kPrismNcclPtrCuda |
                                kPrismNcclPtrDmaBuf),
              0);
    EXPECT_EQ(p.reg_is_global, 0);
    EXPECT_EQ(p.force_flush, 0);
    EXPECT_GT(p.speed, 0);
    EXPECT_EQ(p.port, 0);
    EXPECT_GE(p.latency, 0.0f);
    EXPECT_LT(p.latency, 1e6f);
    EXPECT_GT(p.max_comms, 0);
    EXPECT_EQ(p.max_recvs, 8);
    EXPECT_EQ(p.net_device_type, kPrismNcclDeviceHost);
    EXPECT_EQ(p.net_device_version, 0);
    EXPECT_EQ(p.vprops.ndevs, 1);
    EXPECT_EQ(p.vprops.devs[0], d);
    EXPECT_GT(p.max_p2p_bytes, 0u);
    EXPECT_LE(p.max_p2p_bytes, 1ull << 40);
    EXPECT_GT(p.max_coll_bytes, 0u);
    EXPECT_LE(p.max_coll_bytes, 1ull << 40);
    EXPECT_EQ(p.max_multi_request_size, 1);
    // makeVDevice of one device maps to itself; merging is refused cleanly.
    PrismNcclVDeviceProps vp{1, {d, 0, 0, 0}};
    int vd = -1;
    EXPECT_EQ(N()->make_vdevice(&vd, &vp), kOk);
    EXPECT_EQ(vd, d);
  }
  EXPECT_EQ(static_cast<int>(names.size()), ndev);
  EXPECT_EQ(static_cast<int>(guids.size()), ndev);
  PrismNcclPropertiesV11 p;
  SetLogEcho(false);  // the two expected warnings
  EXPECT_NE(N()->get_properties(ndev, &p), kOk);
  EXPECT_NE(N()->get_properties(-1, &p), kOk);
  SetLogEcho(true);
}

// PRISM_NCCL_CALL_LOG=N (read once per process; ctest's
// nccl_plugin_calllog_test sets it): one transfer logs its regMr, irecv,
// isend and both tests as "call:" INFO lines, within the budget.
TEST(NcclAbi, CallLogShowsOneTransfer) {
  const char* budget = getenv("PRISM_NCCL_CALL_LOG");
  if (budget == nullptr || atoi(budget) < 6) {
    GTEST_SKIP() << "PRISM_NCCL_CALL_LOG not set (>= 6)";
  }
  InitCtx();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p));
  std::vector<uint8_t> sbuf(1000, 7), rbuf(4096, 0);
  void* smh = nullptr;
  void* rmh = nullptr;
  ASSERT_NO_FATAL_FAILURE(RegisterHost(p, &sbuf, &rbuf, &smh, &rmh));
  void* rdata = rbuf.data();
  size_t rsize = rbuf.size();
  int tag = 5;
  void* rreq = Irecv(p.recv, 1, &rdata, &rsize, &tag, &rmh);
  void* sreq = Isend(p.send, sbuf.data(), sbuf.size(), 5, smh);
  int ss = 0, sr = 0, rs = 0, rr = 0;
  ASSERT_EQ(WaitBoth(sreq, &ss, &sr, rreq, &rs, &rr), kOk);
  EXPECT_EQ(rs, 1000);
  DeregisterBoth(p, smh, rmh);
  ClosePair(&p);
  int regs = 0, irecvs = 0, isends = 0, tests = 0;
  for (const LogLine& l : LogSnapshot()) {
    if (l.text.find("call: ") == std::string::npos) continue;
    EXPECT_EQ(l.level, kPrismNcclLogInfo) << l.text;
    regs += l.text.find(" regMr ") != std::string::npos;
    irecvs += l.text.find(" irecv n 1: ") != std::string::npos &&
              l.text.find(" 4096 B tag 5") != std::string::npos;
    isends += l.text.find(" isend ") != std::string::npos &&
              l.text.find(" 1000 B tag 5 -> CTS ") != std::string::npos;
    tests += l.text.find(" done: 1000 B, result 0") != std::string::npos;
  }
  EXPECT_EQ(regs, 2);
  EXPECT_EQ(irecvs, 1);
  EXPECT_EQ(isends, 1);
  EXPECT_EQ(tests, 2);  // the send and the receive
}

// GPU memory: the plugin logs (INFO, once, at the first init) which memory
// it supports, and ptrSupport and regMr follow that line. Built with CUDA
// (PRISM_NCCL_TEST_CUDA) on a host without a usable device -- or with
// PRISM_NCCL_EXPECT_HOST_ONLY=1, which ctest sets together with
// CUDA_VISIBLE_DEVICES=-1 -- it must fall back to host memory only; with a
// device it advertises device memory only under PRISM_NCCL_GPU_STAGING=1
// (gpu.h says why). PRISM_NCCL_EXPECT_DEVICE=1 (gpu_check.sh on a GPU
// machine): the line must report the device.
TEST(NcclAbi, GpuSupportMatchesItsLogLine) {
  InitCtx();
  std::string gpu_line;
  for (const LogLine& l : LogSnapshot()) {
    if (l.text.find("host memory only (ptrSupport HOST)") !=
            std::string::npos ||
        l.text.find("ptrSupport HOST|CUDA|DMABUF") != std::string::npos) {
      EXPECT_EQ(l.level, kPrismNcclLogInfo) << l.text;
      EXPECT_TRUE(gpu_line.empty()) << "logged twice: " << l.text;
      gpu_line = l.text;
    }
  }
  ASSERT_FALSE(gpu_line.empty()) << "no GPU support line at init";
#ifdef PRISM_NCCL_TEST_CUDA
  const bool cuda_built = true;
#else
  const bool cuda_built = false;
#endif
  auto env_is_1 = [](const char* name) {
    const char* v = getenv(name);
    return v != nullptr && strcmp(v, "1") == 0;
  };
  const bool device = gpu_line.find("HOST|CUDA|DMABUF") != std::string::npos;
  const bool device_seen =
      device ||
      gpu_line.find("device(s): host memory only") != std::string::npos;
  if (!cuda_built) {
    EXPECT_NE(gpu_line.find("built without CUDA"), std::string::npos)
        << gpu_line;
  } else if (!device_seen) {
    EXPECT_NE(gpu_line.find("no usable CUDA device"), std::string::npos)
        << gpu_line;
  }
  // Device memory is advertised exactly when staging was asked for.
  if (device_seen) {
    EXPECT_EQ(device, env_is_1("PRISM_NCCL_GPU_STAGING")) << gpu_line;
  }
  // Printed for tests/nccl/gpu_check.sh.
  printf("GPU support line: %s\n", gpu_line.c_str());
  if (env_is_1("PRISM_NCCL_EXPECT_HOST_ONLY")) {
    EXPECT_FALSE(device) << gpu_line;
  }
  if (env_is_1("PRISM_NCCL_EXPECT_DEVICE")) {
    EXPECT_TRUE(device_seen) << gpu_line;
  }
  PrismNcclPropertiesV11 props;
  ASSERT_EQ(N()->get_properties(0, &props), kOk);
  EXPECT_EQ(props.ptr_support,
            device ? kPrismNcclPtrHost | kPrismNcclPtrCuda | kPrismNcclPtrDmaBuf
                   : kPrismNcclPtrHost);
  if (!device) {
    // Host memory only: a CUDA registration fails cleanly, host works.
    Pair p;
    ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p));
    std::vector<uint8_t> buf(4096);
    void* mh = reinterpret_cast<void*>(0x1);
    SetLogEcho(false);
    EXPECT_EQ(
        N()->reg_mr(p.recv, buf.data(), buf.size(), kPrismNcclPtrCuda, &mh),
        kPrismNcclInvalidArgument);
    SetLogEcho(true);
    EXPECT_EQ(mh, nullptr);
    ASSERT_EQ(
        N()->reg_mr(p.recv, buf.data(), buf.size(), kPrismNcclPtrHost, &mh),
        kOk);
    EXPECT_EQ(N()->dereg_mr(p.recv, mh), kOk);
    ClosePair(&p);
  }
}

TEST(NcclConn, OneThreadBasics) {
  InitCtx();
  Pair p;
  int polls = 0;
  ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p, &polls));
  EXPECT_GE(polls, 1);

  std::vector<uint8_t> sbuf(1 << 20), rbuf(1 << 20);
  void* smh = nullptr;
  void* rmh = nullptr;
  ASSERT_NO_FATAL_FAILURE(RegisterHost(p, &sbuf, &rbuf, &smh, &rmh));
  // No receive posted: isend says "try again" with a NULL request.
  void* req = reinterpret_cast<void*>(0x1);
  ASSERT_EQ(N()->isend(p.send, sbuf.data(), 100, 7, smh, nullptr, &req), kOk);
  EXPECT_EQ(req, nullptr);

  // Receive larger than send: the real size is reported; bytes after it are
  // untouched. test() with sizes == NULL on the send side.
  FillPattern(sbuf.data(), 1000, 1, 0, 0);
  memset(rbuf.data(), 0x5a, 4096);
  void* rdata = rbuf.data();
  size_t rsize = 4096;
  int tag = 7;
  void* rreq = Irecv(p.recv, 1, &rdata, &rsize, &tag, &rmh);
  ASSERT_NE(rreq, nullptr);
  void* sreq = Isend(p.send, sbuf.data(), 1000, 7, smh);
  ASSERT_NE(sreq, nullptr);
  int rsizes[8] = {-1};
  int sres, rres;
  ASSERT_EQ(WaitBoth(sreq, nullptr, &sres, rreq, rsizes, &rres), kOk);
  EXPECT_EQ(rsizes[0], 1000);
  EXPECT_EQ(CheckPattern(rbuf.data(), 1000, 1, 0, 0), -1);
  for (int i = 1000; i < 4096; ++i) ASSERT_EQ(rbuf[i], 0x5a) << i;

  // Zero-byte message.
  rreq = Irecv(p.recv, 1, &rdata, &rsize, &tag, &rmh);
  sreq = Isend(p.send, sbuf.data(), 0, 7, smh);
  int ssizes[1] = {-1};
  ASSERT_EQ(WaitBoth(sreq, ssizes, &sres, rreq, rsizes, &rres), kOk);
  EXPECT_EQ(ssizes[0], 0);
  EXPECT_EQ(rsizes[0], 0);

  // Grouped receive: 8 buffers, 8 tags, sends in reverse tag order.
  {
    void* data[8];
    size_t sizes[8];
    int tags[8];
    void* mhs[8];
    for (int i = 0; i < 8; ++i) {
      data[i] = rbuf.data() + i * 65536;
      sizes[i] = 65536;
      tags[i] = 100 + i;
      mhs[i] = rmh;
    }
    rreq = Irecv(p.recv, 8, data, sizes, tags, mhs);
    ASSERT_NE(rreq, nullptr);
    std::vector<void*> sreqs;
    for (int i = 7; i >= 0; --i) {
      uint8_t* src = sbuf.data() + i * 65536;
      const size_t len = 1000 * (i + 1);
      FillPattern(src, len, 2, 0, i);
      sreqs.push_back(Isend(p.send, src, len, 100 + i, smh));
      ASSERT_NE(sreqs.back(), nullptr);
    }
    for (void* s : sreqs) {
      ASSERT_EQ(WaitBoth(s, nullptr, &sres, nullptr, nullptr, &rres), kOk);
    }
    int gsizes[8];
    ASSERT_EQ(WaitBoth(nullptr, nullptr, &sres, rreq, gsizes, &rres), kOk);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(gsizes[i], 1000 * (i + 1));
      EXPECT_EQ(
          CheckPattern(static_cast<uint8_t*>(data[i]), 1000 * (i + 1), 2, 0, i),
          -1);
    }
  }

  // 32 outstanding receives and sends, completed in order.
  {
    std::vector<void*> rreqs, sreqs;
    for (int i = 0; i < 32; ++i) {
      void* d = rbuf.data() + i * 32768;
      size_t s = 32768;
      int t = i;
      rreqs.push_back(Irecv(p.recv, 1, &d, &s, &t, &rmh));
      ASSERT_NE(rreqs.back(), nullptr) << i;
    }
    for (int i = 0; i < 32; ++i) {
      FillPattern(sbuf.data() + i * 32768, 20000 + i, 3, i, 0);
      sreqs.push_back(
          Isend(p.send, sbuf.data() + i * 32768, 20000 + i, i, smh));
      ASSERT_NE(sreqs.back(), nullptr) << i;
    }
    for (int i = 0; i < 32; ++i) {
      int sz[8];
      ASSERT_EQ(WaitBoth(sreqs[i], nullptr, &sres, rreqs[i], sz, &rres), kOk);
      EXPECT_EQ(sz[0], 20000 + i);
      EXPECT_EQ(CheckPattern(rbuf.data() + i * 32768, 20000 + i, 3, i, 0), -1);
    }
  }

  // Misuse is rejected, not crashed on: a buffer outside its registration,
  // a foreign memory handle, n > maxRecvs, a bogus request.
  {
    void* d = rbuf.data() + rbuf.size() - 10;
    size_t s = 100;
    int t = 0;
    void* r = reinterpret_cast<void*>(0x1);
    SetLogEcho(false);
    EXPECT_EQ(N()->irecv(p.recv, 1, &d, &s, &t, &rmh, nullptr, &r),
              kPrismNcclInvalidArgument);
    EXPECT_EQ(r, nullptr);
    EXPECT_EQ(N()->irecv(p.recv, 1, &d, &s, &t, &smh, nullptr, &r),
              kPrismNcclInvalidArgument);
    void* dd[9];
    size_t ss[9];
    int tt[9];
    void* mm[9];
    EXPECT_EQ(N()->irecv(p.recv, 9, dd, ss, tt, mm, nullptr, &r),
              kPrismNcclInvalidArgument);
    uint64_t junk[32] = {0};
    int done = 0;
    EXPECT_EQ(N()->test(junk, &done, nullptr), kPrismNcclInvalidArgument);
    EXPECT_EQ(N()->reg_mr(p.recv, rbuf.data(), 16, kPrismNcclPtrCuda, &r),
              kPrismNcclInvalidArgument);
    SetLogEcho(true);
  }

  // iflush on host memory completes immediately (NULL request).
  void* freq = reinterpret_cast<void*>(0x1);
  int fsize = 10;
  EXPECT_EQ(N()->iflush(p.recv, 1, &rdata, &fsize, &rmh, &freq), kOk);
  EXPECT_EQ(freq, nullptr);

  DeregisterBoth(p, smh, rmh);
  ClosePair(&p);
}

// The clear-to-send travels through Prism on the udp/verbs data paths: the
// send comm counts every CTS it took from its ring (a WRITE-with-immediate
// completion on its endpoint) and reads no byte from the side channel after
// the handshake; on the INTERIM tcp path every CTS is a side-channel frame.
// Three rounds of 32 outstanding receives (NCCL_NET_MAX_REQUESTS) wrap the
// 32-slot ring three times; a 33rd receive must wait for a free slot.
TEST(NcclConn, CtsTravelsThroughPrism) {
  InitCtx();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p));
  constexpr int kOut = kPrismNcclMaxRequests;
  constexpr size_t kLen = 4096;
  std::vector<uint8_t> sbuf(kOut * kLen), rbuf(kOut * kLen);
  void* smh = nullptr;
  void* rmh = nullptr;
  ASSERT_NO_FATAL_FAILURE(RegisterHost(p, &sbuf, &rbuf, &smh, &rmh));
  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round) {
    void* rreqs[kOut];
    for (int i = 0; i < kOut; ++i) {
      void* data = rbuf.data() + i * kLen;
      size_t size = kLen;
      int tag = i;
      rreqs[i] = Irecv(p.recv, 1, &data, &size, &tag, &rmh);
      ASSERT_NE(rreqs[i], nullptr) << "round " << round << " recv " << i;
    }
    {
      void* data = rbuf.data();
      size_t size = kLen;
      int tag = kOut;
      EXPECT_EQ(Irecv(p.recv, 1, &data, &size, &tag, &rmh), nullptr)
          << "a receive beyond NCCL_NET_MAX_REQUESTS was accepted";
    }
    for (int i = 0; i < kOut; ++i) {
      uint8_t* src = sbuf.data() + i * kLen;
      const size_t len = 100 + 97 * i + round;
      FillPattern(src, len, 9, round, i);
      void* sreq = Isend(p.send, src, len, i, smh);
      ASSERT_NE(sreq, nullptr);
      int rsizes[8] = {-1};
      int sres, rres;
      ASSERT_EQ(WaitBoth(sreq, nullptr, &sres, rreqs[i], rsizes, &rres), kOk);
      ASSERT_EQ(rsizes[0], static_cast<int>(len));
      ASSERT_EQ(CheckPattern(rbuf.data() + i * kLen, len, 9, round, i), -1);
    }
  }
  DeregisterBoth(p, smh, rmh);
  const size_t before = LogSnapshot().size();
  ClosePair(&p);
  const std::vector<LogLine> log = LogSnapshot();
  std::string line;
  for (size_t i = before; i < log.size(); ++i) {
    if (log[i].text.find("send comm closed") != std::string::npos) {
      line = log[i].text;
    }
  }
  ASSERT_FALSE(line.empty()) << "no close line with the CTS counts";
  const char* dp = getenv("PRISM_DATAPATH");
  const int total = kRounds * kOut;
  char want[160];
  if (dp != nullptr && strcmp(dp, "tcp") == 0) {
    // Each CTS frame: 16-byte header + 8-byte body head + one 24-byte entry.
    snprintf(want, sizeof(want),
             "0 CTS through Prism, %d CTS and %d bytes on the side channel",
             total, total * 48);
  } else {
    snprintf(want, sizeof(want),
             "%d CTS through Prism, 0 CTS and 0 bytes on the side channel",
             total);
  }
  EXPECT_NE(line.find(want), std::string::npos)
      << "log: " << line << "\nwanted: " << want;
}

TEST(NcclConn, OversizeSendFailsOnBothSides) {
  InitCtx();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectOneThread(1, &p));
  std::vector<uint8_t> sbuf(4096), rbuf(4096, 0x77);
  void *smh = nullptr, *rmh = nullptr;
  ASSERT_NO_FATAL_FAILURE(RegisterHost(p, &sbuf, &rbuf, &smh, &rmh));
  void* d = rbuf.data();
  size_t s = 100;
  int t = 3;
  void* rreq = Irecv(p.recv, 1, &d, &s, &t, &rmh);
  SetLogEcho(false);
  void* sreq = Isend(p.send, sbuf.data(), 200, 3, smh);
  ASSERT_NE(sreq, nullptr);
  int sres, rres;
  EXPECT_NE(WaitBoth(sreq, nullptr, &sres, rreq, nullptr, &rres), kOk);
  SetLogEcho(true);
  EXPECT_NE(sres, kOk);
  EXPECT_NE(rres, kOk);
  for (uint8_t b : rbuf) ASSERT_EQ(b, 0x77);  // nothing written
  DeregisterBoth(p, smh, rmh);
  ClosePair(&p);
}

// "Try again" (NULL request, success) where NCCL relies on it, and a comm
// that keeps working after a send larger than its posted receive failed.
TEST(NcclConn, TryAgainAndRecoveryAfterOversize) {
  InitCtx();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p));
  std::vector<uint8_t> sbuf(64 * 4096), rbuf(64 * 4096, 0x33);
  void *smh = nullptr, *rmh = nullptr;
  ASSERT_NO_FATAL_FAILURE(RegisterHost(p, &sbuf, &rbuf, &smh, &rmh));
  int sres = kOk, rres = kOk;

  // 32 receives outstanding (NCCL_NET_MAX_REQUESTS): the 33rd says "try
  // again" with a NULL request, overwriting the 0x1 preset.
  std::vector<void*> rreqs;
  for (int i = 0; i < kPrismNcclMaxRequests; ++i) {
    void* d = rbuf.data() + i * 4096;
    size_t sz = 4096;
    int t = 10 + (i % 3);
    rreqs.push_back(Irecv(p.recv, 1, &d, &sz, &t, &rmh));
    ASSERT_NE(rreqs.back(), nullptr) << i;
  }
  {
    void* d = rbuf.data() + 40 * 4096;
    size_t sz = 4096;
    int t = 10;
    void* r = reinterpret_cast<void*>(0x1);
    ASSERT_EQ(N()->irecv(p.recv, 1, &d, &sz, &t, &rmh, nullptr, &r), kOk);
    EXPECT_EQ(r, nullptr);
  }
  // The oldest receive waits for tag 10: a send with another tag is not
  // matched out of order ("try again"), tag 10 is.
  const auto start = Clock::now();
  for (int k = 0; k < 200; ++k) {  // enough polls for the CTS to arrive
    void* r = reinterpret_cast<void*>(0x1);
    ASSERT_EQ(N()->isend(p.send, sbuf.data(), 100, 11, smh, nullptr, &r), kOk);
    ASSERT_EQ(r, nullptr) << "tag 11 matched before tag 10";
    ASSERT_FALSE(Expired(start, 10));
  }
  std::vector<void*> sreqs;
  for (int i = 0; i < kPrismNcclMaxRequests; ++i) {
    uint8_t* src = sbuf.data() + i * 4096;
    FillPattern(src, 1000 + i, 4, i, 0);
    sreqs.push_back(Isend(p.send, src, 1000 + i, 10 + (i % 3), smh));
    ASSERT_NE(sreqs.back(), nullptr) << i;
  }
  for (int i = 0; i < kPrismNcclMaxRequests; ++i) {
    int sz[8] = {-1};
    ASSERT_EQ(WaitBoth(sreqs[i], nullptr, &sres, rreqs[i], sz, &rres), kOk);
    EXPECT_EQ(sz[0], 1000 + i);
    EXPECT_EQ(CheckPattern(rbuf.data() + i * 4096, 1000 + i, 4, i, 0), -1);
  }

  // A grouped receive of three where the middle send is too large: that
  // send and the receive fail, the oversize slot is not written, the other
  // two sends complete.
  memset(rbuf.data(), 0x44, 3 * 4096);
  {
    void* data[3];
    size_t sizes[3] = {4096, 512, 4096};
    int tags[3] = {20, 21, 22};
    void* mhs[3] = {rmh, rmh, rmh};
    for (int i = 0; i < 3; ++i) data[i] = rbuf.data() + i * 4096;
    void* rreq = Irecv(p.recv, 3, data, sizes, tags, mhs);
    ASSERT_NE(rreq, nullptr);
    SetLogEcho(false);
    void* s0 = Isend(p.send, sbuf.data(), 3000, 20, smh);
    void* s1 = Isend(p.send, sbuf.data() + 4096, 513, 21, smh);
    void* s2 = Isend(p.send, sbuf.data() + 8192, 4096, 22, smh);
    ASSERT_TRUE(s0 != nullptr && s1 != nullptr && s2 != nullptr);
    EXPECT_EQ(WaitBoth(s0, nullptr, &sres, nullptr, nullptr, &rres), kOk);
    EXPECT_NE(WaitBoth(s1, nullptr, &sres, nullptr, nullptr, &rres), kOk);
    EXPECT_EQ(WaitBoth(s2, nullptr, &sres, nullptr, nullptr, &rres), kOk);
    EXPECT_NE(WaitBoth(nullptr, nullptr, &sres, rreq, nullptr, &rres), kOk);
    SetLogEcho(true);
    for (int i = 0; i < 4096; ++i) {
      ASSERT_EQ(rbuf[4096 + i], 0x44) << "oversize slot written at " << i;
    }
  }

  // The comm carries on: the next message arrives intact.
  {
    FillPattern(sbuf.data(), 4000, 6, 1, 0);
    void* d = rbuf.data();
    size_t sz = 4096;
    int t = 30;
    void* rreq = Irecv(p.recv, 1, &d, &sz, &t, &rmh);
    void* sreq = Isend(p.send, sbuf.data(), 4000, 30, smh);
    int rs[8] = {-1};
    ASSERT_EQ(WaitBoth(sreq, nullptr, &sres, rreq, rs, &rres), kOk);
    EXPECT_EQ(rs[0], 4000);
    EXPECT_EQ(CheckPattern(rbuf.data(), 4000, 6, 1, 0), -1);
  }
  DeregisterBoth(p, smh, rmh);
  ClosePair(&p);
}

// The datapath options the endpoint was created with are the ones the
// environment asked for (ctest runs this binary with and without
// PRISM_UDP_RX_IN_PLACE=1), as its INFO line says.
TEST(NcclConn, EndpointOptionsFollowTheEnvironment) {
  const char* dp = getenv("PRISM_DATAPATH");
  if (dp != nullptr && strcmp(dp, "udp") != 0) {
    GTEST_SKIP() << "not the udp data path";
  }
  InitCtx();
  Pair p;  // makes sure device 0's endpoint exists
  ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p));
  ClosePair(&p);
  auto on = [](const char* var, bool def) {
    const char* v = getenv(var);
    return v == nullptr || *v == '\0' ? def : strcmp(v, "1") == 0;
  };
  const std::string want =
      std::string("gso ") + (on("PRISM_UDP_GSO", true) ? "1" : "0") + " gro " +
      (on("PRISM_UDP_GRO", true) ? "1" : "0") + " in-place " +
      (on("PRISM_UDP_RX_IN_PLACE", false) ? "1" : "0");
  int seen = 0;
  for (const LogLine& l : LogSnapshot()) {
    if (l.text.find("Prism endpoint up") == std::string::npos) continue;
    ++seen;
    EXPECT_NE(l.text.find(want), std::string::npos) << l.text;
  }
  EXPECT_GE(seen, 1);
}

// One 4 KiB transfer over p (host memory), checked.
void TransferOnce(const Pair& p) {
  std::vector<uint8_t> sbuf(4096, 0x3c), rbuf(4096, 0);
  void* smh = nullptr;
  void* rmh = nullptr;
  ASSERT_NO_FATAL_FAILURE(RegisterHost(p, &sbuf, &rbuf, &smh, &rmh));
  void* rdata = rbuf.data();
  size_t rsize = 4096;
  int rtag = 3;
  void* rreq = Irecv(p.recv, 1, &rdata, &rsize, &rtag, &rmh);
  ASSERT_NE(rreq, nullptr);
  void* sreq = Isend(p.send, sbuf.data(), 4096, 3, smh);
  ASSERT_NE(sreq, nullptr);
  int sres = 0, rres = 0, got[8] = {-1};
  EXPECT_EQ(WaitBoth(sreq, nullptr, &sres, rreq, got, &rres), kOk);
  EXPECT_EQ(got[0], 4096);
  EXPECT_EQ(rbuf, sbuf);
  DeregisterBoth(p, smh, rmh);
}

// Each closed send/recv comm logs one INFO line with its own figures:
// requests test() reported done (and how many of them failed), their bytes,
// its Prism WRITEs refused for a full queue, and on the Prism data paths its
// connection's retransmissions, trims and retired paths (docs/nccl.md,
// "Counters"). Before 2026-12-06 only the process-wide counters at the last
// finalize (and a send comm's CTS counts) were logged.
TEST(NcclConn, ClosedCommsLogTheirOwnFigures) {
  InitCtx();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p));
  ASSERT_NO_FATAL_FAILURE(TransferOnce(p));
  ASSERT_NO_FATAL_FAILURE(TransferOnce(p));
  const size_t log_from = LogSnapshot().size();
  ClosePair(&p);
  EXPECT_EQ(InfosSince(log_from,
                       "send comm closed: 2 requests done (0 failed), 8192 "
                       "bytes sent; "),
            1);
  EXPECT_EQ(InfosSince(log_from,
                       "recv comm closed: 2 requests done (0 failed), 8192 "
                       "bytes received; 0 CTS WRITEs refused for a full queue"),
            1);
  EXPECT_EQ(InfosSince(log_from, "0 WRITEs refused for a full queue"), 1);
  const char* dp = getenv("PRISM_DATAPATH");
  const bool prism = dp == nullptr || strcmp(dp, "tcp") != 0;
  EXPECT_EQ(InfosSince(log_from, "; Prism connection: "), prism ? 2 : 0);
  EXPECT_EQ(InfosSince(log_from, " paths retired"), prism ? 2 : 0);
}

// A listen handle crosses processes (NCCL's bootstrap carries it), and
// connect() keeps its in-progress state in it between calls. That field is
// followed only when it names a connect this process started: a handle
// whose field is garbage, points at memory that merely looks like a comm,
// or is a copy taken mid-connect and used after that connect finished, is
// refused with InvalidArgument (before: dereferenced). The original handle
// still connects.
TEST(NcclConn, HandleWithForeignConnectStateIsRefused) {
  InitCtx();
  constexpr size_t kStateOffset = offsetof(nccl::WireHandle, connect_state);
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
  uint64_t state = 1;
  memcpy(&state, handle + kStateOffset, sizeof(state));
  ASSERT_EQ(state, 0u) << "listen leaves the connect state empty";
  PrismNcclDeviceHandle* dh = nullptr;
  // Readable memory that starts like a live comm (kCommMagic, then zeros:
  // stage "connecting", fd 0).
  alignas(16) uint8_t lookalike[2048] = {};
  const uint32_t comm_magic = 0x4d4d4f43;
  memcpy(lookalike, &comm_magic, sizeof(comm_magic));
  SetLogEcho(false);
  for (const uint64_t junk :
       {uint64_t{0x1234567}, uint64_t{0xdeadbeefcafe0},
        static_cast<uint64_t>(reinterpret_cast<uintptr_t>(lookalike))}) {
    char bad[kPrismNcclHandleMaxSize];
    memcpy(bad, handle, sizeof(bad));
    memcpy(bad + kStateOffset, &junk, sizeof(junk));
    void* send = nullptr;
    EXPECT_EQ(N()->connect(g_ctx, 0, bad, &send, &dh),
              kPrismNcclInvalidArgument)
        << std::hex << junk;
    EXPECT_EQ(send, nullptr);
  }
  SetLogEcho(true);
  EXPECT_EQ(lookalike[4], 0) << "the look-alike was written to";

  // The first call starts the connect; it cannot finish before accept()
  // answers the hello, so the handle now names a live state. A copy of it
  // is good while that connect runs and refused once it has finished.
  Pair p;
  ASSERT_EQ(N()->connect(g_ctx, 0, handle, &p.send, &dh), kOk);
  ASSERT_EQ(p.send, nullptr);
  memcpy(&state, handle + kStateOffset, sizeof(state));
  ASSERT_NE(state, 0u);
  char copy[kPrismNcclHandleMaxSize];
  memcpy(copy, handle, sizeof(copy));
  const auto start = Clock::now();
  while (p.send == nullptr || p.recv == nullptr) {
    if (p.send == nullptr) {
      ASSERT_EQ(N()->connect(g_ctx, 0, handle, &p.send, &dh), kOk);
    }
    if (p.recv == nullptr) {
      ASSERT_EQ(N()->accept(lc, &p.recv, nullptr), kOk);
    }
    ASSERT_FALSE(Expired(start, 10)) << "connect/accept did not complete";
  }
  memcpy(&state, handle + kStateOffset, sizeof(state));
  EXPECT_EQ(state, 0u) << "a finished connect clears the handle's state";
  void* send2 = nullptr;
  SetLogEcho(false);
  EXPECT_EQ(N()->connect(g_ctx, 0, copy, &send2, &dh),
            kPrismNcclInvalidArgument);
  SetLogEcho(true);
  EXPECT_EQ(send2, nullptr);
  ASSERT_EQ(N()->close_listen(lc), kOk);

  ASSERT_NO_FATAL_FAILURE(TransferOnce(p));  // the pair works
  ClosePair(&p);
}

// connect() keeps its state's address in the handle, with a token. A copy
// of a handle taken mid-connect and kept after that connect finished (its
// state freed) must not take over a later connect whose state was
// allocated at the same address (ABA): it is refused like any stale handle
// (InvalidArgument, a warning, the API-misuse counter), and the later
// connect is untouched and completes. Before 2026-12-06 only the address
// was compared: the stale copy took the later connect's state (its call
// returned success and advanced that connect). The test finishes connects
// one after another, copying each handle mid-connect, until a new state
// lands where a finished one was (malloc hands a freed block of that size
// back; ASan's quarantine does not -- then the stale copy is made as reuse
// would leave it: a finished connect's handle naming the live address).
TEST(NcclConn, StaleHandleDoesNotTakeALaterConnectAtTheSameAddress) {
  InitCtx();
  constexpr size_t kStateOffset = offsetof(nccl::WireHandle, connect_state);
  using Handle = std::array<char, kPrismNcclHandleMaxSize>;
  auto state_of = [](const char* h) {
    uint64_t v = 0;
    memcpy(&v, h + kStateOffset, sizeof(v));
    return v;
  };
  Handle listen_handle;
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, listen_handle.data(), &lc), kOk);
  PrismNcclDeviceHandle* dh = nullptr;
  // Drives the connect of `h` and an accept until both comms exist.
  auto finish = [&](char* h, Pair* p) {
    const auto start = Clock::now();
    while (p->send == nullptr || p->recv == nullptr) {
      if (p->send == nullptr) {
        ASSERT_EQ(N()->connect(g_ctx, 0, h, &p->send, &dh), kOk);
      }
      if (p->recv == nullptr) {
        ASSERT_EQ(N()->accept(lc, &p->recv, nullptr), kOk);
      }
      ASSERT_FALSE(Expired(start, 10)) << "connect/accept did not complete";
    }
  };
  std::vector<Handle> finished;  // copies taken mid-connect
  Handle live, stale;
  bool reused = false;
  for (int i = 0; i < 16 && !reused; ++i) {
    live = listen_handle;
    void* send = nullptr;
    ASSERT_EQ(N()->connect(g_ctx, 0, live.data(), &send, &dh), kOk);
    ASSERT_EQ(send, nullptr);  // waits for accept's ack
    const uint64_t addr = state_of(live.data());
    ASSERT_NE(addr, 0u);
    for (const Handle& f : finished) {
      if (state_of(f.data()) == addr) {
        stale = f;
        reused = true;
        break;
      }
    }
    if (reused) break;
    finished.push_back(live);
    Pair p;
    ASSERT_NO_FATAL_FAILURE(finish(live.data(), &p));
    ClosePair(&p);
  }
  if (!reused) {  // every connect so far has finished: start one more
    live = listen_handle;
    void* send = nullptr;
    ASSERT_EQ(N()->connect(g_ctx, 0, live.data(), &send, &dh), kOk);
    ASSERT_EQ(send, nullptr);
    stale = finished.front();
    const uint64_t addr = state_of(live.data());
    memcpy(stale.data() + kStateOffset, &addr, sizeof(addr));
  }
  std::printf("[   NOTE   ] stale handle: %s after %zu connects\n",
              reused ? "the allocator reused the address"
                     : "address forged (no reuse seen)",
              finished.size());
  ASSERT_EQ(state_of(stale.data()), state_of(live.data()));
  EXPECT_NE(stale, live);  // the token tells them apart
  const size_t log_from = LogSnapshot().size();
  SetLogEcho(false);
  void* hijack = nullptr;
  EXPECT_EQ(N()->connect(g_ctx, 0, stale.data(), &hijack, &dh),
            kPrismNcclInvalidArgument);
  SetLogEcho(true);
  EXPECT_EQ(hijack, nullptr);
  EXPECT_EQ(WarningsSince(log_from, "stale handle refused"), 1);
  // The live connect is untouched: it completes and the pair works.
  Pair p;
  ASSERT_NO_FATAL_FAILURE(finish(live.data(), &p));
  EXPECT_EQ(state_of(live.data()), 0u);
  ASSERT_EQ(N()->close_listen(lc), kOk);
  ASSERT_NO_FATAL_FAILURE(TransferOnce(p));
  ClosePair(&p);
  if (hijack != nullptr) {
    EXPECT_EQ(N()->close_send(hijack), kOk);
  }
}

// Handle layout (WireHandle, transport/nccl/wire.h) as a peer process sees
// it.
constexpr size_t kHandleFamilyOffset = offsetof(nccl::WireHandle, family);
constexpr size_t kHandlePortOffset = offsetof(nccl::WireHandle, port);
constexpr size_t kHandleStateOffset = offsetof(nccl::WireHandle, connect_state);
constexpr size_t kHandleAddrOffset = offsetof(nccl::WireHandle, addr);
// HelloMsg (wire.h): the Hello and the Ack on the side channel.
constexpr size_t kHelloBytes = sizeof(nccl::HelloMsg);

// A plain blocking TCP client of the listener named by `handle` (IPv4, as
// the tests listen on 127.0.0.1); -1 on failure.
int RawConnect(const char* handle) {
  uint16_t family = 0;
  memcpy(&family, handle + kHandleFamilyOffset, sizeof(family));
  if (family != AF_INET) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  memcpy(&a.sin_port, handle + kHandlePortOffset, sizeof(a.sin_port));
  memcpy(&a.sin_addr, handle + kHandleAddrOffset, 4);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Connections to the listener that never complete their Hello (a port
// scanner, a stray or stalled client) do not hold up the real peer: accept
// works on several at once and, when all its slots are taken, evicts the
// oldest. Before: accept took one connection at a time and waited for its
// Hello forever, so every later accept returned NULL and NCCL hung.
TEST(NcclConn, StalledHelloDoesNotBlockAccept) {
  InitCtx();
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
  const size_t log_from = LogSnapshot().size();
  SetLogEcho(false);
  // More than accept's 8 slots: half send part of a Hello, half nothing.
  std::vector<int> raw;
  for (int i = 0; i < 10; ++i) {
    const int fd = RawConnect(handle);
    ASSERT_GE(fd, 0);
    raw.push_back(fd);
    if (i % 2 == 0) {
      uint8_t part[100];
      memset(part, 0x42, sizeof(part));
      ASSERT_TRUE(WriteAll(fd, part, sizeof(part)));
    }
  }
  void* rc = nullptr;
  ASSERT_EQ(N()->accept(lc, &rc, nullptr), kOk);  // takes the stalled ones
  EXPECT_EQ(rc, nullptr);
  Pair p;
  PrismNcclDeviceHandle* dh = nullptr;
  const auto start = Clock::now();
  while (p.send == nullptr || p.recv == nullptr) {
    if (p.send == nullptr) {
      ASSERT_EQ(N()->connect(g_ctx, 0, handle, &p.send, &dh), kOk);
    }
    if (p.recv == nullptr) {
      ASSERT_EQ(N()->accept(lc, &p.recv, nullptr), kOk);
    }
    if (Expired(start, 10)) break;
  }
  SetLogEcho(true);
  for (int fd : raw) close(fd);
  EXPECT_GE(WarningsSince(log_from, "evicted"), 1);
  ASSERT_EQ(N()->close_listen(lc), kOk);
  if (p.send == nullptr || p.recv == nullptr) {
    ADD_FAILURE() << "connect/accept did not complete behind stalled clients";
    ClosePair(&p);
    return;
  }
  ASSERT_NO_FATAL_FAILURE(TransferOnce(p));
  ClosePair(&p);
}

// connect() against a listener that answers with a crafted Ack: the Ack
// must carry this handle's magic, protocol version, nonce and data path and
// status 0; anything else fails connect with RemoteError (a warning and the
// protocol-error counter), the handle's connect state cleared. Before, the
// version and the data path were not checked: such an Ack connected. The
// fake listener echoes the Hello it receives (so the blob in it is a
// well-formed one) with one field changed.
TEST(NcclConn, ConnectRefusesMalformedAck) {
  InitCtx();
  char real[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, real, &lc), kOk);
  ASSERT_EQ(N()->close_listen(lc), kOk);
  // The fake listener, on 127.0.0.1 like the real one.
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(a);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(lfd, 8), 0);
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  char handle[kPrismNcclHandleMaxSize];
  memcpy(handle, real, sizeof(handle));
  memcpy(handle + kHandlePortOffset, &a.sin_port, sizeof(a.sin_port));
  memcpy(handle + kHandleAddrOffset, &a.sin_addr, 4);

  struct Case {
    const char* what;
    size_t offset;  // of a uint32_t field of the Ack
    uint32_t value;
  };
  const Case cases[] = {
      {"wrong protocol version", 4, 99}, {"wrong data path", 16, 0x77},
      {"wrong magic", 0, 0x12345678},    {"wrong nonce", 8, 0x5a5a5a5a},
      {"status not 0", 20, 1},
  };
  SetLogEcho(false);
  for (const Case& c : cases) {
    const size_t log_from = LogSnapshot().size();
    int peer = -1;
    std::thread fake([&] {
      peer = accept(lfd, nullptr, nullptr);
      uint8_t msg[kHelloBytes];
      if (peer < 0 || !ReadAll(peer, msg, sizeof(msg))) return;
      memcpy(msg + c.offset, &c.value, sizeof(c.value));
      (void)WriteAll(peer, msg, sizeof(msg));
    });
    char h[kPrismNcclHandleMaxSize];
    memcpy(h, handle, sizeof(h));
    void* send = nullptr;
    PrismNcclDeviceHandle* dh = nullptr;
    int r = kOk;
    const auto start = Clock::now();
    while (r == kOk && send == nullptr && !Expired(start, 10)) {
      r = N()->connect(g_ctx, 0, h, &send, &dh);
    }
    fake.join();
    if (peer >= 0) close(peer);
    EXPECT_EQ(r, kPrismNcclRemoteError) << c.what;
    EXPECT_EQ(send, nullptr) << c.what;
    EXPECT_GE(WarningsSince(log_from, "connect dev"), 1) << c.what;
    uint64_t state = 1;
    memcpy(&state, h + kHandleStateOffset, sizeof(state));
    EXPECT_EQ(state, 0u) << c.what;
    if (send != nullptr) {
      EXPECT_EQ(N()->close_send(send), kOk);
    }
  }
  SetLogEcho(true);
  close(lfd);
}

// A handle whose address family is neither IPv4 nor IPv6 (corrupted) is
// refused with InvalidArgument and a warning saying so (before: refused
// without a word).
TEST(NcclConn, HandleWithUnknownAddressFamilyIsRefused) {
  InitCtx();
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
  const uint16_t family = 0x1234;
  memcpy(handle + kHandleFamilyOffset, &family, sizeof(family));
  const size_t log_from = LogSnapshot().size();
  SetLogEcho(false);
  void* send = nullptr;
  PrismNcclDeviceHandle* dh = nullptr;
  EXPECT_EQ(N()->connect(g_ctx, 0, handle, &send, &dh),
            kPrismNcclInvalidArgument);
  SetLogEcho(true);
  EXPECT_EQ(send, nullptr);
  EXPECT_EQ(WarningsSince(log_from, "address family 4660"), 1);
  ASSERT_EQ(N()->close_listen(lc), kOk);
}

// Copies of one handle driven on two threads at once (misuse: NCCL drives a
// handle from one thread). A connect() call holds the handle's connect state
// for its length, so the other thread's call is refused instead of sharing
// it (a data race, and a use after free once the first call finished the
// connect and freed the state). Exactly one send comm results; make test
// runs this under TSan too.
TEST(NcclConn, ConcurrentCopiesOfAHandleDoNotShareItsState) {
  InitCtx();
  constexpr size_t kStateOffset = offsetof(nccl::WireHandle, connect_state);
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(N()->listen(g_ctx, 0, handle, &lc), kOk);
  PrismNcclDeviceHandle* dh = nullptr;
  void* started = nullptr;
  ASSERT_EQ(N()->connect(g_ctx, 0, handle, &started, &dh), kOk);
  ASSERT_EQ(started, nullptr);  // waits for accept's ack
  uint64_t state = 0;
  memcpy(&state, handle + kStateOffset, sizeof(state));
  ASSERT_NE(state, 0u);
  char copies[2][kPrismNcclHandleMaxSize];
  memcpy(copies[0], handle, sizeof(handle));
  memcpy(copies[1], handle, sizeof(handle));
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0}, other{0};
  std::atomic<void*> sends[2] = {nullptr, nullptr};
  SetLogEcho(false);
  auto drive = [&](int i) {
    void* send = nullptr;
    while (!stop.load() && send == nullptr) {
      PrismNcclDeviceHandle* d = nullptr;
      const int r = N()->connect(g_ctx, 0, copies[i], &send, &d);
      if (r == kPrismNcclInvalidArgument) {
        ++refused;
      } else if (r != kOk) {
        ++other;
        return;
      }
    }
    sends[i] = send;
  };
  std::thread a(drive, 0), b(drive, 1);
  void* recv = nullptr;
  const auto start = Clock::now();
  while (recv == nullptr && !Expired(start, 10)) {
    ASSERT_EQ(N()->accept(lc, &recv, nullptr), kOk);
  }
  // The connect finishes on whichever thread holds the state next.
  while (sends[0].load() == nullptr && sends[1].load() == nullptr &&
         !Expired(start, 10)) {
    std::this_thread::yield();
  }
  stop = true;
  a.join();
  b.join();
  SetLogEcho(true);
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ((sends[0].load() != nullptr) + (sends[1].load() != nullptr), 1)
      << "refused calls: " << refused.load();
  Pair p;
  p.send = sends[0].load() != nullptr ? sends[0].load() : sends[1].load();
  p.recv = recv;
  ASSERT_EQ(N()->close_listen(lc), kOk);
  ClosePair(&p);
}

TEST(NcclConn, CloseWithRequestsInFlight) {
  InitCtx();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p));
  std::vector<uint8_t> sbuf(8 << 20), rbuf(8 << 20);
  void *smh = nullptr, *rmh = nullptr;
  ASSERT_NO_FATAL_FAILURE(RegisterHost(p, &sbuf, &rbuf, &smh, &rmh));
  // Eight 1 MiB messages posted, none tested: more than the socket buffers.
  for (int i = 0; i < 8; ++i) {
    void* d = rbuf.data() + (i << 20);
    size_t s = 1 << 20;
    int t = 1;
    ASSERT_NE(Irecv(p.recv, 1, &d, &s, &t, &rmh), nullptr);
  }
  void* last = nullptr;
  for (int i = 0; i < 8; ++i) {
    last = Isend(p.send, sbuf.data() + (i << 20), 1 << 20, 1, smh);
    ASSERT_NE(last, nullptr);
  }
  // Receiver goes away first; the sender's outstanding request then fails.
  EXPECT_EQ(N()->dereg_mr(p.recv, rmh), kOk);
  EXPECT_EQ(N()->close_recv(p.recv), kOk);
  p.recv = nullptr;
  SetLogEcho(false);
  int done = 0, r = kOk;
  const auto start = Clock::now();
  while (r == kOk && done == 0 && !Expired(start, 10)) {
    r = N()->test(last, &done, nullptr);
  }
  SetLogEcho(true);
  EXPECT_TRUE(r != kOk || done == 1);
  EXPECT_EQ(N()->dereg_mr(p.send, smh), kOk);
  ClosePair(&p);
}

// ---------------------------------------------------------------------------
// Two processes, both directions, several comms, NCCL's thread split.
struct Plan {
  int n;
  int tags[8];
  size_t send[8];
  size_t recv[8];
  int order[8];  // send order (a permutation)
};

constexpr int kWindow = 32;
constexpr size_t kRoundBytes = 512 << 10;  // buffer area per in-flight round

Plan MakePlan(Rng* rng) {
  Plan p{};
  p.n = rng->Bernoulli(0.25) ? static_cast<int>(rng->Range(2, 8)) : 1;
  const size_t per = kRoundBytes / p.n;
  for (int i = 0; i < p.n; ++i) {
    p.tags[i] = static_cast<int>(rng->Range(0, 1 << 20)) * 8 + i;
    size_t s;
    const double u = rng->NextDouble();
    if (u < 0.05) {
      s = 0;
    } else if (u < 0.6) {
      s = rng->Range(1, 4096);
    } else if (u < 0.95) {
      s = rng->Range(4097, 65536);
    } else {
      s = rng->Range(65537, per);
    }
    if (s > per) s = per;
    p.send[i] = s;
    p.recv[i] = rng->Bernoulli(0.5) ? s : rng->Range(s, per);
    p.order[i] = i;
  }
  for (int i = p.n - 1; i > 0; --i) {
    std::swap(p.order[i], p.order[rng->Range(0, i)]);
  }
  return p;
}

// Sender progress thread: up to 32 rounds in flight.
bool RunSender(void* sc, uint8_t* buf, void* mh, uint64_t seed, int rounds,
               std::string* err) {
  Rng rng(seed);
  struct InFlight {
    std::vector<void*> reqs;
  };
  std::vector<InFlight> win(kWindow);
  std::vector<Plan> plans(rounds);
  for (int r = 0; r < rounds; ++r) plans[r] = MakePlan(&rng);
  int next = 0, oldest = 0, pos = 0;  // pos: next send within round `next`
  const auto start = Clock::now();
  while (oldest < rounds) {
    if (next < rounds && next - oldest < kWindow) {
      const Plan& p = plans[next];
      uint8_t* area = buf + (next % kWindow) * kRoundBytes;
      const int i = p.order[pos];
      uint8_t* src = area + i * (kRoundBytes / p.n);
      if (pos == 0) {
        for (int k = 0; k < p.n; ++k) {
          FillPattern(area + k * (kRoundBytes / p.n), p.send[k], seed, next, k);
        }
      }
      void* req = nullptr;
      if (N()->isend(sc, src, p.send[i], p.tags[i], mh, nullptr, &req) != kOk) {
        *err = "isend failed at round " + std::to_string(next);
        return false;
      }
      if (req != nullptr) {
        win[next % kWindow].reqs.push_back(req);
        if (++pos == p.n) {
          pos = 0;
          ++next;
        }
      }
    }
    InFlight& f = win[oldest % kWindow];
    if (!f.reqs.empty()) {
      int done = 0, size = -1;
      const int r = N()->test(f.reqs.front(), &done, &size);
      if (r != kOk) {
        *err = "send test failed at round " + std::to_string(oldest);
        return false;
      }
      if (done) {
        f.reqs.erase(f.reqs.begin());
        if (f.reqs.empty() && (oldest < next)) ++oldest;
      }
    }
    // Two cores are shared by everything here: let the endpoint loop run.
    std::this_thread::yield();
    if (Expired(start, 120)) {
      *err = "sender timed out at round " + std::to_string(oldest);
      return false;
    }
  }
  return true;
}

// Receiver progress thread: 32 outstanding receives, verified byte by byte,
// with a canary after every received message.
bool RunReceiver(void* rc, uint8_t* buf, void* mh, uint64_t seed, int rounds,
                 std::string* err, uint64_t* bytes) {
  Rng rng(seed);
  std::vector<Plan> plans(rounds);
  for (int r = 0; r < rounds; ++r) plans[r] = MakePlan(&rng);
  std::vector<void*> win(kWindow, nullptr);
  int next = 0, oldest = 0;
  const auto start = Clock::now();
  while (oldest < rounds) {
    if (next < rounds && next - oldest < kWindow) {
      const Plan& p = plans[next];
      uint8_t* area = buf + (next % kWindow) * kRoundBytes;
      void* data[8];
      void* mhs[8];
      size_t sizes[8];
      int tags[8];
      for (int i = 0; i < p.n; ++i) {
        data[i] = area + i * (kRoundBytes / p.n);
        memset(data[i], 0xe5, p.recv[i]);
        sizes[i] = p.recv[i];
        tags[i] = p.tags[i];
        mhs[i] = mh;
      }
      void* req = reinterpret_cast<void*>(0x1);
      if (N()->irecv(rc, p.n, data, sizes, tags, mhs, nullptr, &req) != kOk ||
          req == reinterpret_cast<void*>(0x1)) {
        *err = "irecv failed at round " + std::to_string(next);
        return false;
      }
      if (req != nullptr) win[next++ % kWindow] = req;
    }
    if (oldest < next) {
      int done = 0;
      int sizes[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
      const int r = N()->test(win[oldest % kWindow], &done, sizes);
      if (r != kOk) {
        *err = "recv test failed at round " + std::to_string(oldest);
        return false;
      }
      if (done) {
        const Plan& p = plans[oldest];
        uint8_t* area = buf + (oldest % kWindow) * kRoundBytes;
        for (int i = 0; i < p.n; ++i) {
          const uint8_t* d = area + i * (kRoundBytes / p.n);
          if (sizes[i] != static_cast<int>(p.send[i])) {
            *err = "round " + std::to_string(oldest) + " slot " +
                   std::to_string(i) + ": size " + std::to_string(sizes[i]) +
                   " != " + std::to_string(p.send[i]);
            return false;
          }
          if (int64_t bad = CheckPattern(d, p.send[i], seed, oldest, i);
              bad >= 0) {
            *err = "round " + std::to_string(oldest) + " slot " +
                   std::to_string(i) + ": byte " + std::to_string(bad) +
                   " wrong";
            return false;
          }
          for (size_t k = p.send[i]; k < p.recv[i]; ++k) {
            if (d[k] != 0xe5) {
              *err = "stray write after a message at round " +
                     std::to_string(oldest);
              return false;
            }
          }
          *bytes += p.send[i];
        }
        ++oldest;
      }
    }
    std::this_thread::yield();
    if (Expired(start, 120)) {
      *err = "receiver timed out at round " + std::to_string(oldest);
      return false;
    }
  }
  return true;
}

int RoundsFromEnv() {
  const char* v = getenv("PRISM_NCCL_TEST_ROUNDS");
  return v != nullptr ? atoi(v) : 2000;
}

// One side of the two-process test. `me` is 0 (parent) or 1 (child). Each
// side receives on kComms comms and sends on kComms comms.
constexpr int kComms = 2;
std::string RunSide(int me, int to_peer, int from_peer, int rounds,
                    double* seconds, uint64_t* bytes_out) {
  // Fresh init in this process, as every NCCL communicator does.
  void* ctx = nullptr;
  if (N()->init(&ctx, 0x77 + me, nullptr, TestLogger, nullptr) != kOk) {
    return "init failed";
  }
  void* lcs[kComms];
  void* recv[kComms] = {nullptr};
  void* send[kComms] = {nullptr};
  char mine[kComms][kPrismNcclHandleMaxSize];
  char theirs[kComms][kPrismNcclHandleMaxSize];
  std::string error;
  // Service thread: listen, exchange handles out of band, connect/accept,
  // regMr. Progress threads start once their comm exists.
  std::vector<std::vector<uint8_t>> rbufs(kComms), sbufs(kComms);
  void* rmh[kComms];
  void* smh[kComms];
  std::thread service([&] {
    for (int c = 0; c < kComms; ++c) {
      if (N()->listen(ctx, c % 2, mine[c], &lcs[c]) != kOk) {
        error = "listen failed";
        return;
      }
    }
    if (!WriteAll(to_peer, mine, sizeof(mine)) ||
        !ReadAll(from_peer, theirs, sizeof(theirs))) {
      error = "handle exchange failed";
      return;
    }
    const auto start = Clock::now();
    int ready = 0;
    while (ready < 2 * kComms) {
      ready = 0;
      for (int c = 0; c < kComms; ++c) {
        if (send[c] == nullptr &&
            N()->connect(ctx, c % 2, theirs[c], &send[c], nullptr) != kOk) {
          error = "connect failed";
          return;
        }
        if (recv[c] == nullptr &&
            N()->accept(lcs[c], &recv[c], nullptr) != kOk) {
          error = "accept failed";
          return;
        }
        ready += (send[c] != nullptr) + (recv[c] != nullptr);
      }
      if (Expired(start, 20)) {
        error = "connect/accept timed out";
        return;
      }
    }
    for (int c = 0; c < kComms; ++c) {
      N()->close_listen(lcs[c]);
      rbufs[c].resize(kWindow * kRoundBytes);
      sbufs[c].resize(kWindow * kRoundBytes);
      if (N()->reg_mr(recv[c], rbufs[c].data(), rbufs[c].size(),
                      kPrismNcclPtrHost, &rmh[c]) != kOk ||
          N()->reg_mr(send[c], sbufs[c].data(), sbufs[c].size(),
                      kPrismNcclPtrHost, &smh[c]) != kOk) {
        error = "regMr failed";
        return;
      }
    }
  });
  service.join();
  if (!error.empty()) return error;

  const auto t0 = Clock::now();
  std::vector<std::thread> progress;
  std::vector<std::string> errs(2 * kComms);
  std::vector<uint64_t> bytes(kComms, 0);
  std::vector<char> ok(2 * kComms, 0);
  for (int c = 0; c < kComms; ++c) {
    // Direction me -> peer uses seed (me, c); peer -> me uses (1 - me, c).
    const uint64_t sseed = 1000 + me * 10 + c;
    const uint64_t rseed = 1000 + (1 - me) * 10 + c;
    progress.emplace_back([&, c, sseed] {
      ok[2 * c] = RunSender(send[c], sbufs[c].data(), smh[c], sseed, rounds,
                            &errs[2 * c]);
    });
    progress.emplace_back([&, c, rseed] {
      ok[2 * c + 1] = RunReceiver(recv[c], rbufs[c].data(), rmh[c], rseed,
                                  rounds, &errs[2 * c + 1], &bytes[c]);
    });
  }
  // Meanwhile the service thread keeps registering and deregistering memory
  // on the same comms (NCCL may run regMr while test runs).
  std::atomic<bool> stop{false};
  std::string churn_error;
  int churns = 0;
  std::thread churn([&] {
    std::vector<uint8_t> scratch(1 << 16);
    while (!stop.load()) {
      for (int c = 0; c < kComms; ++c) {
        for (void* comm : {recv[c], send[c]}) {
          void* m = nullptr;
          if (N()->reg_mr(comm, scratch.data(), scratch.size(),
                          kPrismNcclPtrHost, &m) != kOk ||
              N()->dereg_mr(comm, m) != kOk) {
            churn_error = "regMr/deregMr during traffic failed";
            return;
          }
        }
      }
      ++churns;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  for (std::thread& t : progress) t.join();
  stop.store(true);
  churn.join();
  if (!churn_error.empty()) return churn_error;
  if (churns == 0) return "no regMr ran during traffic";
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  *bytes_out = 0;
  for (uint64_t b : bytes) *bytes_out += b;
  for (size_t i = 0; i < errs.size(); ++i) {
    if (!ok[i]) return errs[i].empty() ? "progress thread failed" : errs[i];
  }
  // Both sides finished: synchronise, then tear down on the service thread.
  char token = 'x';
  if (!WriteAll(to_peer, &token, 1) || !ReadAll(from_peer, &token, 1)) {
    return "final barrier failed";
  }
  std::thread teardown([&] {
    for (int c = 0; c < kComms; ++c) {
      N()->dereg_mr(recv[c], rmh[c]);
      N()->dereg_mr(send[c], smh[c]);
      N()->close_send(send[c]);
      N()->close_recv(recv[c]);
    }
    N()->finalize(ctx);
  });
  teardown.join();
  return "";
}

TEST(NcclConn, TwoProcessesRandomTraffic) {
  LoadOrDie();
  const int rounds = RoundsFromEnv();
  int p2c[2], c2p[2], res[2];
  ASSERT_EQ(pipe(p2c), 0);
  ASSERT_EQ(pipe(c2p), 0);
  ASSERT_EQ(pipe(res), 0);
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A fresh process (exec), like a second NCCL rank: a forked copy would
    // share this process's endpoint sockets without their loop threads.
    const std::string a = std::to_string(c2p[1]), b = std::to_string(p2c[0]),
                      c = std::to_string(res[1]), r = std::to_string(rounds);
    execl("/proc/self/exe", "nccl_plugin_test", "--nccl-child", a.c_str(),
          b.c_str(), c.c_str(), r.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(res[1]);
  double secs = 0;
  uint64_t bytes = 0;
  const std::string e = RunSide(0, p2c[1], c2p[0], rounds, &secs, &bytes);
  EXPECT_EQ(e, "");
  if (!e.empty()) kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  char child_err[512] = {0};
  const ssize_t got = read(res[0], child_err, sizeof(child_err) - 1);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child: " << (got > 0 ? child_err : "(killed)");
  printf(
      "two-process: %d rounds x %d comms per direction, %.1f MB received "
      "by the parent in %.2f s (%.0f MB/s, both directions at once)\n",
      rounds, kComms, bytes / 1e6, secs, bytes / 1e6 / secs);
  for (int fd : {p2c[0], p2c[1], c2p[0], c2p[1], res[0]}) close(fd);
}

// One connection and one posted message through an older table: listens on
// device 0, connects and accepts until both are up, registers `sbuf` and
// `rbuf` and posts a receive of rbuf's size, then the send of `len` bytes of
// sbuf (retried until the receiver's CTS is in). `connect(handle, &sc)`,
// `irecv(rc, &rdata, &tag, &rmh, &rreq)` and `isend(sc, data, len, tag, mh,
// &sreq)` adapt the version's signatures (the v11 table's test/close slots
// serve every version).
struct OldAbiMessage {
  void *sc = nullptr, *rc = nullptr;
  void *smh = nullptr, *rmh = nullptr;
  void *sreq = nullptr, *rreq = nullptr;
};
template <typename NetT, typename ConnectFn, typename IrecvFn, typename IsendFn>
void ConnectAndPostOne(const NetT* n, Clock::time_point start,
                       std::vector<uint8_t>* sbuf, std::vector<uint8_t>* rbuf,
                       int len, int tag, ConnectFn connect, IrecvFn irecv,
                       IsendFn isend, OldAbiMessage* m) {
  char handle[kPrismNcclHandleMaxSize];
  void* lc = nullptr;
  ASSERT_EQ(n->listen(0, handle, &lc), kOk);
  while (!m->sc || !m->rc) {
    if (!m->sc) {
      ASSERT_EQ(connect(handle, &m->sc), kOk);
    }
    if (!m->rc) {
      ASSERT_EQ(n->accept(lc, &m->rc, nullptr), kOk);
    }
    ASSERT_FALSE(Expired(start, 10));
  }
  ASSERT_EQ(n->close_listen(lc), kOk);
  ASSERT_EQ(n->reg_mr(m->sc, sbuf->data(), sbuf->size(), 1, &m->smh), kOk);
  ASSERT_EQ(n->reg_mr(m->rc, rbuf->data(), rbuf->size(), 1, &m->rmh), kOk);
  void* rdata = rbuf->data();
  ASSERT_EQ(irecv(m->rc, &rdata, &tag, &m->rmh, &m->rreq), kOk);
  while (!m->sreq) {
    ASSERT_EQ(isend(m->sc, sbuf->data(), len, tag, m->smh, &m->sreq), kOk);
    ASSERT_FALSE(Expired(start, 10));
  }
}

TEST(NcclAbi, OlderTableVersions) {
  LoadOrDie();
  InitCtx();
  // v10, v9 and v8 run one connection and one message each.
  for (int v : {10, 9, 8}) {
    SCOPED_TRACE("v" + std::to_string(v));
    const void* t = FindTable(g_net, v);
    ASSERT_NE(t, nullptr);
    int ndev = 0;
    std::vector<uint8_t> sbuf(8192), rbuf(8192);
    FillPattern(sbuf.data(), 5000, 9, v, 0);
    OldAbiMessage m;
    const int tag = 5;
    const auto start = Clock::now();
    if (v == 8) {
      const auto* n = static_cast<const PrismNcclNetV8*>(t);
      ASSERT_EQ(n->init(TestLogger), kOk);
      ASSERT_EQ(n->devices(&ndev), kOk);
      PrismNcclPropertiesV8 p;
      memset(&p, 0xab, sizeof(p));
      ASSERT_EQ(n->get_properties(0, &p), kOk);
      EXPECT_EQ(p.max_recvs, 8);
      EXPECT_EQ(p.net_device_type, 0);
      EXPECT_EQ(p.net_device_version, 0);
      EXPECT_NE(p.ptr_support & kPrismNcclPtrHost, 0);
      ASSERT_NO_FATAL_FAILURE(ConnectAndPostOne(
          n, start, &sbuf, &rbuf, 5000, tag,
          [&](void* h, void** sc) { return n->connect(0, h, sc, nullptr); },
          [&](void* rc, void** data, int* tg, void** mh, void** req) {
            int rsize = 8192;
            return n->irecv(rc, 1, data, &rsize, tg, mh, req);
          },
          [&](void* sc, void* data, int len, int tg, void* mh, void** req) {
            return n->isend(sc, data, len, tg, mh, req);
          },
          &m));
    } else if (v == 9) {
      const auto* n = static_cast<const PrismNcclNetV9*>(t);
      ASSERT_EQ(n->init(TestLogger), kOk);
      ASSERT_EQ(n->devices(&ndev), kOk);
      PrismNcclPropertiesV10 p;
      ASSERT_EQ(n->get_properties(0, &p), kOk);
      EXPECT_EQ(p.max_recvs, 8);
      EXPECT_EQ(p.vprops.ndevs, 1);
      ASSERT_NO_FATAL_FAILURE(ConnectAndPostOne(
          n, start, &sbuf, &rbuf, 5000, tag,
          [&](void* h, void** sc) { return n->connect(0, h, sc, nullptr); },
          [&](void* rc, void** data, int* tg, void** mh, void** req) {
            size_t rsize = 8192;
            return n->irecv(rc, 1, data, &rsize, tg, mh, req);
          },
          [&](void* sc, void* data, int len, int tg, void* mh, void** req) {
            return n->isend(sc, data, len, tg, mh, req);
          },
          &m));
    } else {
      const auto* n = static_cast<const PrismNcclNetV10*>(t);
      ASSERT_EQ(n->init(TestLogger, nullptr), kOk);
      ASSERT_EQ(n->devices(&ndev), kOk);
      PrismNcclPropertiesV10 p;
      ASSERT_EQ(n->get_properties(0, &p), kOk);
      EXPECT_EQ(p.max_recvs, 8);
      PrismNcclCommConfig cfg{-1};
      ASSERT_NO_FATAL_FAILURE(ConnectAndPostOne(
          n, start, &sbuf, &rbuf, 5000, tag,
          [&](void* h, void** sc) {
            return n->connect(0, &cfg, h, sc, nullptr);
          },
          [&](void* rc, void** data, int* tg, void** mh, void** req) {
            size_t rsize = 8192;
            return n->irecv(rc, 1, data, &rsize, tg, mh, nullptr, req);
          },
          [&](void* sc, void* data, int len, int tg, void* mh, void** req) {
            return n->isend(sc, data, len, tg, mh, nullptr, req);
          },
          &m));
    }
    EXPECT_EQ(ndev, 2);
    // The test/close slots share the v11 functions.
    int sres, rres, sizes[8];
    ASSERT_EQ(WaitBoth(m.sreq, nullptr, &sres, m.rreq, sizes, &rres), kOk);
    EXPECT_EQ(sizes[0], 5000);
    EXPECT_EQ(CheckPattern(rbuf.data(), 5000, 9, v, 0), -1);
    EXPECT_EQ(N()->dereg_mr(m.sc, m.smh), kOk);
    EXPECT_EQ(N()->dereg_mr(m.rc, m.rmh), kOk);
    EXPECT_EQ(N()->close_send(m.sc), kOk);
    EXPECT_EQ(N()->close_recv(m.rc), kOk);
  }
}

// Runs last (its suite comes last): dlclose and reload, as NCCL does after
// its last communicator.
TEST(NcclReload, DlcloseAndReload) {
  InitCtx();
  ASSERT_EQ(N()->finalize(g_ctx), kOk);
  g_ctx = nullptr;
  const void* before = g_net.table;
  UnloadNet(&g_net);
  for (int round = 0; round < 3; ++round) {
    std::string err;
    ASSERT_TRUE(LoadNet(PluginEnvValue(), &g_net, &err)) << err;
    ASSERT_EQ(g_net.version, 11);
    EXPECT_EQ(g_net.table, before);  // -z nodelete: the image stayed mapped
    void* ctx = nullptr;
    ASSERT_EQ(N()->init(&ctx, round, nullptr, TestLogger, nullptr), kOk);
    int ndev = 0;
    ASSERT_EQ(N()->devices(&ndev), kOk);
    EXPECT_EQ(ndev, 2);
    Pair p;
    g_ctx = ctx;
    ASSERT_NO_FATAL_FAILURE(ConnectOneThread(0, &p));
    ClosePair(&p);
    g_ctx = nullptr;
    ASSERT_EQ(N()->finalize(ctx), kOk);
    ASSERT_EQ(N()->finalize(nullptr), kOk);
    UnloadNet(&g_net);
  }
}

}  // namespace
}  // namespace prism::nccl_test

int main(int argc, char** argv) {
  // Two devices on the loopback: 127.0.0.1 and 127.0.0.2.
  setenv("PRISM_ADDRS", "127.0.0.1,127.0.0.2", 0);
  if (argc == 6 && strcmp(argv[1], "--nccl-child") == 0) {
    // The peer rank of NcclConn.TwoProcessesRandomTraffic.
    using namespace prism::nccl_test;
    std::string e;
    if (!LoadNet(PluginEnvValue(), &g_net, &e) || g_net.version != 11) {
      e = "child: plugin did not load: " + e;
    } else {
      double secs = 0;
      uint64_t bytes = 0;
      e = RunSide(1, atoi(argv[2]), atoi(argv[3]), atoi(argv[5]), &secs,
                  &bytes);
    }
    WriteAll(atoi(argv[4]), e.c_str(), e.size());
    return e.empty() ? 0 : 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
