// The exported NCCL net plugin tables (v11, v10, v9, v8) and the glue from
// NCCL's entry points to the Prism connection code in comm.cc.
//
// Lifetime: the configuration is read by the first successful init and kept
// for the life of the process (the library is linked with -z nodelete, so a
// dlclose/dlopen cycle finds the same state). init/finalize are reference
// counted per v11 context; finalize(NULL) is accepted (NCCL 2.28.9 calls it
// after a failed init). finalize(ctx) releases the connects that context
// started and NCCL abandoned mid-handshake (comm.h, ReleaseConnectStates);
// the last finalize releases every one left and the idle endpoints.
//
// Thread safety: init/finalize/devices/getProperties serialise on a global
// mutex; everything else is per comm (see comm.h).
#include <stdlib.h>

#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "transport/nccl/comm.h"
#include "transport/nccl/config.h"
#include "transport/nccl/gpu.h"
#include "transport/nccl/log.h"
#include "transport/nccl/net_abi.h"

namespace prism::nccl {
namespace {

constexpr uint32_t kCtxMagic = 0x58544350;   // "PCTX"
constexpr size_t kMaxP2pBytes = 0x7fffffff;  // test() reports sizes as int
constexpr int kMaxComms = 65536;

struct PluginState {
  std::mutex mu;
  int refs = 0;
  bool loaded = false;
  PluginConfig config;
  std::vector<DeviceContext> devs;
};

PluginState& State() {
  static PluginState* s = new PluginState();  // never destroyed
  return *s;
}

struct InitCtx {
  uint32_t magic = kCtxMagic;
  uint64_t comm_id = 0;
  int traffic_class = -1;
};

PrismNcclResult InitCommon(PrismNcclLogger log) {
  SetLogger(log);
  PluginState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.loaded) {
    auto cfg = LoadConfig([](const char* v) { return getenv(v); });
    if (!cfg.ok()) {
      PRISM_NCCL_WARN("configuration error: %s",
                      std::string(cfg.status().message()).c_str());
      return kPrismNcclInvalidUsage;
    }
    st.config = *std::move(cfg);
    st.devs.clear();
    for (size_t i = 0; i < st.config.devices.size(); ++i) {
      DeviceContext d;
      d.index = static_cast<int>(i);
      d.device = &st.config.devices[i];
      d.config = &st.config;
      st.devs.push_back(d);
    }
    if (st.config.mode == DataMode::kTcpInterim) {
      PRISM_NCCL_LOG(kPrismNcclLogInfo, kPrismNcclFlagInit | kPrismNcclFlagNet,
                     "data path tcp-interim: payload is carried on the TCP "
                     "side channel, NOT by Prism's multipath engine");
    }
    for (const DeviceContext& d : st.devs) {
      PRISM_NCCL_LOG(kPrismNcclLogInfo, kPrismNcclFlagInit | kPrismNcclFlagNet,
                     "device %d %s addr %s speed %d Mbps paths %u planes %u "
                     "data path %s",
                     d.index, d.device->name.c_str(),
                     AddrToString(d.device->addr).c_str(), d.device->speed_mbps,
                     st.config.paths, st.config.planes,
                     DataModeName(st.config.mode));
    }
    // GPU memory: decided (and logged) once, see gpu.h.
    (void)GpuInit(st.config.gpu_staging);
    SetCallLog(st.config.call_log);
    st.loaded = true;
  }
  ++st.refs;
  return kPrismNcclSuccess;
}

const DeviceContext* Dev(int dev) {
  PluginState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.loaded || dev < 0 || dev >= static_cast<int>(st.devs.size())) {
    PRISM_NCCL_WARN("device %d does not exist (plugin initialised: %d)", dev,
                    st.loaded ? 1 : 0);
    return nullptr;
  }
  return &st.devs[dev];
}

PrismNcclResult Devices(int* ndev) {
  if (ndev == nullptr) return kPrismNcclInvalidArgument;
  PluginState& st = State();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.loaded) {
    *ndev = 0;
    return kPrismNcclInvalidUsage;
  }
  *ndev = static_cast<int>(st.devs.size());
  return kPrismNcclSuccess;
}

PrismNcclResult GetPropertiesV11(int dev, PrismNcclPropertiesV11* p) {
  if (p == nullptr) return kPrismNcclInvalidArgument;
  const DeviceContext* d = Dev(dev);
  if (d == nullptr) return kPrismNcclInvalidArgument;
  memset(p, 0, sizeof(*p));
  p->name = const_cast<char*>(d->device->name.c_str());
  p->pci_path = d->device->pci_path.empty()
                    ? nullptr
                    : const_cast<char*>(d->device->pci_path.c_str());
  p->guid = d->device->guid;
  p->ptr_support = SupportedPtrTypes();
  p->reg_is_global = 0;
  p->force_flush = 0;
  p->speed = d->device->speed_mbps;
  p->port = 0;
  p->latency = d->device->latency_us;
  p->max_comms = kMaxComms;
  p->max_recvs = kMaxRecvs;
  p->net_device_type = kPrismNcclDeviceHost;
  p->net_device_version = 0;
  p->vprops.ndevs = 1;
  p->vprops.devs[0] = dev;
  p->max_p2p_bytes = kMaxP2pBytes;
  p->max_coll_bytes = kMaxP2pBytes;
  p->max_multi_request_size = 1;
  return kPrismNcclSuccess;
}

PrismNcclResult GetPropertiesV10(int dev, PrismNcclPropertiesV10* p) {
  if (p == nullptr) return kPrismNcclInvalidArgument;
  PrismNcclPropertiesV11 v;
  const PrismNcclResult r = GetPropertiesV11(dev, &v);
  if (r != kPrismNcclSuccess) return r;
  memcpy(p, &v, sizeof(*p));  // v10 is a prefix of v11
  return kPrismNcclSuccess;
}

PrismNcclResult GetPropertiesV8(int dev, PrismNcclPropertiesV8* p) {
  if (p == nullptr) return kPrismNcclInvalidArgument;
  PrismNcclPropertiesV11 v;
  const PrismNcclResult r = GetPropertiesV11(dev, &v);
  if (r != kPrismNcclSuccess) return r;
  memset(p, 0, sizeof(*p));
  p->name = v.name;
  p->pci_path = v.pci_path;
  p->guid = v.guid;
  p->ptr_support = v.ptr_support;
  p->reg_is_global = v.reg_is_global;
  p->speed = v.speed;
  p->port = v.port;
  p->latency = v.latency;
  p->max_comms = v.max_comms;
  p->max_recvs = v.max_recvs;
  p->net_device_type = v.net_device_type;
  p->net_device_version = v.net_device_version;
  return kPrismNcclSuccess;
}

PrismNcclResult ListenDev(int dev, void* handle, void** listen_comm) {
  if (listen_comm != nullptr) *listen_comm = nullptr;
  const DeviceContext* d = Dev(dev);
  if (d == nullptr) return kPrismNcclInvalidArgument;
  return Listen(*d, handle, listen_comm);
}

// `owner`: the v11 init context (nullptr for the older tables).
PrismNcclResult ConnectDev(int dev, void* handle, void** send_comm,
                           const void* owner = nullptr) {
  if (send_comm != nullptr) *send_comm = nullptr;
  const DeviceContext* d = Dev(dev);
  if (d == nullptr) return kPrismNcclInvalidArgument;
  return Connect(*d, handle, send_comm, owner);
}

PrismNcclResult RegMrDmaBuf(void* comm, void* data, size_t size, int type,
                            uint64_t offset, int fd, void** mhandle) {
  // The dma-buf fd is not needed (NCCL closes it right after this call); the
  // virtual address is what this build registers.
  (void)offset;
  (void)fd;
  return RegMr(comm, data, size, type, mhandle);
}

PrismNcclResult MakeVDevice(int* d, PrismNcclVDeviceProps* props) {
  if (d == nullptr || props == nullptr) return kPrismNcclInvalidArgument;
  int ndev = 0;
  if (Devices(&ndev) != kPrismNcclSuccess) return kPrismNcclInvalidUsage;
  if (props->ndevs != 1 || props->devs[0] < 0 || props->devs[0] >= ndev) {
    PRISM_NCCL_WARN(
        "makeVDevice: merging %d devices is not supported; "
        "configure planes of one Prism device instead "
        "(PRISM_PLANES)",
        props->ndevs);
    return kPrismNcclInvalidUsage;
  }
  *d = props->devs[0];
  return kPrismNcclSuccess;
}

// --- v11 -------------------------------------------------------------------
PrismNcclResult InitV11(void** ctx, uint64_t comm_id,
                        PrismNcclCommConfig* config, PrismNcclLogger log,
                        PrismNcclProfilerCallback prof) {
  (void)prof;
  if (ctx == nullptr) return kPrismNcclInvalidArgument;
  *ctx = nullptr;
  const PrismNcclResult r = InitCommon(log);
  if (r != kPrismNcclSuccess) return r;
  auto* c = new (std::nothrow) InitCtx();
  if (c == nullptr) return kPrismNcclSystemError;
  c->comm_id = comm_id;
  c->traffic_class = config != nullptr ? config->traffic_class : -1;
  *ctx = c;
  PRISM_NCCL_TRACE("init ctx %p commId %016llx trafficClass %d", c,
                   static_cast<unsigned long long>(comm_id), c->traffic_class);
  return kPrismNcclSuccess;
}

PrismNcclResult FinalizeV11(void* ctx) {
  if (ctx == nullptr) return kPrismNcclSuccess;  // after a failed init
  auto* c = static_cast<InitCtx*>(ctx);
  if (c->magic != kCtxMagic) return kPrismNcclInvalidArgument;
  // The connects this context started and NCCL abandoned mid-handshake
  // (the rest go at the last finalize, in ReleaseIdleResources).
  ReleaseConnectStates(c, /*every=*/false);
  c->magic = 0;
  delete c;
  PluginState& st = State();
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.refs > 0) --st.refs;
    last = st.refs == 0;
  }
  if (last) ReleaseIdleResources();
  return kPrismNcclSuccess;
}

PrismNcclResult SetNetAttrV11(void* ctx, PrismNcclNetAttr* attr) {
  auto* c = static_cast<InitCtx*>(ctx);
  if (c == nullptr || c->magic != kCtxMagic || attr == nullptr) {
    return kPrismNcclInvalidArgument;
  }
  PRISM_NCCL_TRACE("setNetAttr op %u algo %u proto %u", attr->op, attr->algo,
                   attr->proto);
  return kPrismNcclSuccess;
}

PrismNcclResult ListenV11(void* ctx, int dev, void* handle,
                          void** listen_comm) {
  (void)ctx;
  return ListenDev(dev, handle, listen_comm);
}

PrismNcclResult ConnectV11(void* ctx, int dev, void* handle, void** send_comm,
                           PrismNcclDeviceHandle** dev_comm) {
  (void)dev_comm;  // host plugin: never written (may be NULL)
  return ConnectDev(dev, handle, send_comm, ctx);
}

PrismNcclResult AcceptAny(void* listen_comm, void** recv_comm,
                          PrismNcclDeviceHandle** dev_comm) {
  (void)dev_comm;
  return Accept(listen_comm, recv_comm);
}

PrismNcclResult IsendV11(void* send_comm, void* data, size_t size, int tag,
                         void* mhandle, void* phandle, void** request) {
  (void)phandle;
  return Isend(send_comm, data, size, tag, mhandle, request);
}

PrismNcclResult IrecvV11(void* recv_comm, int n, void** data, size_t* sizes,
                         int* tags, void** mhandles, void** phandles,
                         void** request) {
  (void)phandles;
  return Irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

// --- v10 / v9 / v8 ----------------------------------------------------------
PrismNcclResult InitV10(PrismNcclLogger log, PrismNcclProfilerCallback prof) {
  (void)prof;
  return InitCommon(log);
}
PrismNcclResult InitV9(PrismNcclLogger log) { return InitCommon(log); }

PrismNcclResult ConnectV10(int dev, PrismNcclCommConfig* config, void* handle,
                           void** send_comm, PrismNcclDeviceHandle** dev_comm) {
  (void)config;
  (void)dev_comm;
  return ConnectDev(dev, handle, send_comm);
}
PrismNcclResult ConnectV9(int dev, void* handle, void** send_comm,
                          PrismNcclDeviceHandle** dev_comm) {
  (void)dev_comm;
  return ConnectDev(dev, handle, send_comm);
}

PrismNcclResult IsendV9(void* send_comm, void* data, size_t size, int tag,
                        void* mhandle, void** request) {
  return Isend(send_comm, data, size, tag, mhandle, request);
}
PrismNcclResult IrecvV9(void* recv_comm, int n, void** data, size_t* sizes,
                        int* tags, void** mhandles, void** request) {
  return Irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}

PrismNcclResult IsendV8(void* send_comm, void* data, int size, int tag,
                        void* mhandle, void** request) {
  if (size < 0) {
    if (request != nullptr) *request = nullptr;
    return kPrismNcclInvalidArgument;
  }
  return Isend(send_comm, data, static_cast<size_t>(size), tag, mhandle,
               request);
}
PrismNcclResult IrecvV8(void* recv_comm, int n, void** data, int* sizes,
                        int* tags, void** mhandles, void** request) {
  if (request != nullptr) *request = nullptr;
  if (n < 1 || n > kMaxRecvs || sizes == nullptr) {
    return kPrismNcclInvalidArgument;
  }
  size_t s[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return kPrismNcclInvalidArgument;
    s[i] = static_cast<size_t>(sizes[i]);
  }
  return Irecv(recv_comm, n, data, s, tags, mhandles, request);
}

}  // namespace
}  // namespace prism::nccl

// --- exported symbols (the only ones: see exports.map) -----------------------
namespace pn = prism::nccl;

extern "C" __attribute__((visibility("default")))
const PrismNcclNetV11 ncclNetPlugin_v11 = {
    "Prism",         pn::InitV11,       pn::Devices,   pn::GetPropertiesV11,
    pn::ListenV11,   pn::ConnectV11,    pn::AcceptAny, pn::RegMr,
    pn::RegMrDmaBuf, pn::DeregMr,       pn::IsendV11,  pn::IrecvV11,
    pn::Iflush,      pn::Test,          pn::CloseSend, pn::CloseRecv,
    pn::CloseListen, nullptr,           nullptr,       pn::MakeVDevice,
    pn::FinalizeV11, pn::SetNetAttrV11,
};

extern "C" __attribute__((visibility("default")))
const PrismNcclNetV10 ncclNetPlugin_v10 = {
    "Prism",         pn::InitV10,    pn::Devices,   pn::GetPropertiesV10,
    pn::ListenDev,   pn::ConnectV10, pn::AcceptAny, pn::RegMr,
    pn::RegMrDmaBuf, pn::DeregMr,    pn::IsendV11,  pn::IrecvV11,
    pn::Iflush,      pn::Test,       pn::CloseSend, pn::CloseRecv,
    pn::CloseListen, nullptr,        nullptr,       pn::MakeVDevice,
};

extern "C" __attribute__((visibility("default")))
const PrismNcclNetV9 ncclNetPlugin_v9 = {
    "Prism",         pn::InitV9,    pn::Devices,   pn::GetPropertiesV10,
    pn::ListenDev,   pn::ConnectV9, pn::AcceptAny, pn::RegMr,
    pn::RegMrDmaBuf, pn::DeregMr,   pn::IsendV9,   pn::IrecvV9,
    pn::Iflush,      pn::Test,      pn::CloseSend, pn::CloseRecv,
    pn::CloseListen, nullptr,       nullptr,       pn::MakeVDevice,
};

extern "C" __attribute__((visibility("default")))
const PrismNcclNetV8 ncclNetPlugin_v8 = {
    "Prism",         pn::InitV9,    pn::Devices,   pn::GetPropertiesV8,
    pn::ListenDev,   pn::ConnectV9, pn::AcceptAny, pn::RegMr,
    pn::RegMrDmaBuf, pn::DeregMr,   pn::IsendV8,   pn::IrecvV8,
    pn::Iflush,      pn::Test,      pn::CloseSend, pn::CloseRecv,
    pn::CloseListen, nullptr,       nullptr,
};
