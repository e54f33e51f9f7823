// Prism's own declarations of the NCCL network-plugin ABI (versions 8-11).
//
// Written from the layout facts in shared/design/nccl-net-abi.md (NCCL
// 2.28.9); NCCL's headers are never included or copied. Names are ours; what
// matters for the ABI is the order of members, their C types, 4-byte enums and
// the x86-64 SysV calling convention. Every size and member offset listed in
// the notes is checked by a static_assert at the bottom of this file.
//
// Everything here is plain C data: no Abseil or C++ library type ever crosses
// the dlopen boundary.
//
// Thread safety: declarations only.
#ifndef PRISM_TRANSPORT_NCCL_NET_ABI_H_
#define PRISM_TRANSPORT_NCCL_NET_ABI_H_

#include <cstddef>
#include <cstdint>

extern "C" {

// ncclResult_t: returned by every plugin function.
typedef enum : int {
  kPrismNcclSuccess = 0,
  kPrismNcclUnhandledCudaError = 1,
  kPrismNcclSystemError = 2,
  kPrismNcclInternalError = 3,
  kPrismNcclInvalidArgument = 4,
  kPrismNcclInvalidUsage = 5,
  kPrismNcclRemoteError = 6,
  kPrismNcclInProgress = 7,
} PrismNcclResult;

// Logger levels and subsystem flags.
enum : int {
  kPrismNcclLogNone = 0,
  kPrismNcclLogVersion = 1,
  kPrismNcclLogWarn = 2,
  kPrismNcclLogInfo = 3,
  kPrismNcclLogAbort = 4,
  kPrismNcclLogTrace = 5,
};
inline constexpr unsigned long kPrismNcclFlagInit = 0x1;
inline constexpr unsigned long kPrismNcclFlagNet = 0x10;

typedef void (*PrismNcclLogger)(int level, unsigned long flags,
                                const char* file, int line, const char* fmt,
                                ...);
typedef PrismNcclResult (*PrismNcclProfilerCallback)(void** event_handle,
                                                     int type, void* phandle,
                                                     int64_t plugin_id,
                                                     void* ext_data);

// Constants.
inline constexpr int kPrismNcclHandleMaxSize = 128;
inline constexpr int kPrismNcclPtrHost = 1;
inline constexpr int kPrismNcclPtrCuda = 2;
inline constexpr int kPrismNcclPtrDmaBuf = 4;
inline constexpr int kPrismNcclMaxRequests = 32;
inline constexpr int kPrismNcclOptionalRecvCompletion = 0x1;
inline constexpr int kPrismNcclMaxDevsPerNic = 4;
inline constexpr int kPrismNcclDeviceHost = 0;
inline constexpr int kPrismNcclDeviceUnpack = 1;

typedef struct {
  int ndevs;
  int devs[kPrismNcclMaxDevsPerNic];
} PrismNcclVDeviceProps;

// Properties, v11 (112 bytes).
typedef struct {
  char* name;
  char* pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;
  int speed;  // Mbps
  int port;
  float latency;  // microseconds
  int max_comms;
  int max_recvs;
  int net_device_type;  // 4-byte enum
  int net_device_version;
  PrismNcclVDeviceProps vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size;
} PrismNcclPropertiesV11;

// Properties, v9 and v10 (104 bytes): v11 without max_multi_request_size.
typedef struct {
  char* name;
  char* pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int net_device_type;
  int net_device_version;
  PrismNcclVDeviceProps vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
} PrismNcclPropertiesV10;

// Properties, v8 (64 bytes): no force_flush, vprops or max*_bytes.
typedef struct {
  char* name;
  char* pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  int net_device_type;
  int net_device_version;
} PrismNcclPropertiesV8;

typedef struct {
  int type;  // 4-byte enum
  int version;
  void* handle;
  size_t size;
  int needs_proxy_progress;
} PrismNcclDeviceHandle;

typedef struct {
  int traffic_class;  // -1 = undefined
} PrismNcclCommConfig;

typedef struct {
  int32_t max_concurrent_peers;
  int32_t min_concurrent_peers;
  int32_t max_flows_per_peer;
  int32_t min_flows_per_peer;
} PrismNcclNetAttrSide;

typedef struct {
  PrismNcclNetAttrSide send;
  PrismNcclNetAttrSide recv;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} PrismNcclNetAttr;

// Function table, v11 (22 slots).
typedef struct {
  const char* name;
  PrismNcclResult (*init)(void** ctx, uint64_t comm_id,
                          PrismNcclCommConfig* config, PrismNcclLogger log,
                          PrismNcclProfilerCallback prof);
  PrismNcclResult (*devices)(int* ndev);
  PrismNcclResult (*get_properties)(int dev, PrismNcclPropertiesV11* props);
  PrismNcclResult (*listen)(void* ctx, int dev, void* handle,
                            void** listen_comm);
  PrismNcclResult (*connect)(void* ctx, int dev, void* handle, void** send_comm,
                             PrismNcclDeviceHandle** send_dev_comm);
  PrismNcclResult (*accept)(void* listen_comm, void** recv_comm,
                            PrismNcclDeviceHandle** recv_dev_comm);
  PrismNcclResult (*reg_mr)(void* comm, void* data, size_t size, int type,
                            void** mhandle);
  PrismNcclResult (*reg_mr_dma_buf)(void* comm, void* data, size_t size,
                                    int type, uint64_t offset, int fd,
                                    void** mhandle);
  PrismNcclResult (*dereg_mr)(void* comm, void* mhandle);
  PrismNcclResult (*isend)(void* send_comm, void* data, size_t size, int tag,
                           void* mhandle, void* phandle, void** request);
  PrismNcclResult (*irecv)(void* recv_comm, int n, void** data, size_t* sizes,
                           int* tags, void** mhandles, void** phandles,
                           void** request);
  PrismNcclResult (*iflush)(void* recv_comm, int n, void** data, int* sizes,
                            void** mhandles, void** request);
  PrismNcclResult (*test)(void* request, int* done, int* sizes);
  PrismNcclResult (*close_send)(void* send_comm);
  PrismNcclResult (*close_recv)(void* recv_comm);
  PrismNcclResult (*close_listen)(void* listen_comm);
  PrismNcclResult (*get_device_mr)(void* comm, void* mhandle,
                                   void** dptr_mhandle);
  PrismNcclResult (*irecv_consumed)(void* recv_comm, int n, void* request);
  PrismNcclResult (*make_vdevice)(int* d, PrismNcclVDeviceProps* props);
  PrismNcclResult (*finalize)(void* ctx);
  PrismNcclResult (*set_net_attr)(void* ctx, PrismNcclNetAttr* attr);
} PrismNcclNetV11;

// Function table, v10 (20 slots).
typedef struct {
  const char* name;
  PrismNcclResult (*init)(PrismNcclLogger log, PrismNcclProfilerCallback prof);
  PrismNcclResult (*devices)(int* ndev);
  PrismNcclResult (*get_properties)(int dev, PrismNcclPropertiesV10* props);
  PrismNcclResult (*listen)(int dev, void* handle, void** listen_comm);
  PrismNcclResult (*connect)(int dev, PrismNcclCommConfig* config, void* handle,
                             void** send_comm,
                             PrismNcclDeviceHandle** send_dev_comm);
  PrismNcclResult (*accept)(void* listen_comm, void** recv_comm,
                            PrismNcclDeviceHandle** recv_dev_comm);
  PrismNcclResult (*reg_mr)(void* comm, void* data, size_t size, int type,
                            void** mhandle);
  PrismNcclResult (*reg_mr_dma_buf)(void* comm, void* data, size_t size,
                                    int type, uint64_t offset, int fd,
                                    void** mhandle);
  PrismNcclResult (*dereg_mr)(void* comm, void* mhandle);
  PrismNcclResult (*isend)(void* send_comm, void* data, size_t size, int tag,
                           void* mhandle, void* phandle, void** request);
  PrismNcclResult (*irecv)(void* recv_comm, int n, void** data, size_t* sizes,
                           int* tags, void** mhandles, void** phandles,
                           void** request);
  PrismNcclResult (*iflush)(void* recv_comm, int n, void** data, int* sizes,
                            void** mhandles, void** request);
  PrismNcclResult (*test)(void* request, int* done, int* sizes);
  PrismNcclResult (*close_send)(void* send_comm);
  PrismNcclResult (*close_recv)(void* recv_comm);
  PrismNcclResult (*close_listen)(void* listen_comm);
  PrismNcclResult (*get_device_mr)(void* comm, void* mhandle,
                                   void** dptr_mhandle);
  PrismNcclResult (*irecv_consumed)(void* recv_comm, int n, void* request);
  PrismNcclResult (*make_vdevice)(int* d, PrismNcclVDeviceProps* props);
} PrismNcclNetV10;

// Function table, v9 (20 slots).
typedef struct {
  const char* name;
  PrismNcclResult (*init)(PrismNcclLogger log);
  PrismNcclResult (*devices)(int* ndev);
  PrismNcclResult (*get_properties)(int dev, PrismNcclPropertiesV10* props);
  PrismNcclResult (*listen)(int dev, void* handle, void** listen_comm);
  PrismNcclResult (*connect)(int dev, void* handle, void** send_comm,
                             PrismNcclDeviceHandle** send_dev_comm);
  PrismNcclResult (*accept)(void* listen_comm, void** recv_comm,
                            PrismNcclDeviceHandle** recv_dev_comm);
  PrismNcclResult (*reg_mr)(void* comm, void* data, size_t size, int type,
                            void** mhandle);
  PrismNcclResult (*reg_mr_dma_buf)(void* comm, void* data, size_t size,
                                    int type, uint64_t offset, int fd,
                                    void** mhandle);
  PrismNcclResult (*dereg_mr)(void* comm, void* mhandle);
  PrismNcclResult (*isend)(void* send_comm, void* data, size_t size, int tag,
                           void* mhandle, void** request);
  PrismNcclResult (*irecv)(void* recv_comm, int n, void** data, size_t* sizes,
                           int* tags, void** mhandles, void** request);
  PrismNcclResult (*iflush)(void* recv_comm, int n, void** data, int* sizes,
                            void** mhandles, void** request);
  PrismNcclResult (*test)(void* request, int* done, int* sizes);
  PrismNcclResult (*close_send)(void* send_comm);
  PrismNcclResult (*close_recv)(void* recv_comm);
  PrismNcclResult (*close_listen)(void* listen_comm);
  PrismNcclResult (*get_device_mr)(void* comm, void* mhandle,
                                   void** dptr_mhandle);
  PrismNcclResult (*irecv_consumed)(void* recv_comm, int n, void* request);
  PrismNcclResult (*make_vdevice)(int* d, PrismNcclVDeviceProps* props);
} PrismNcclNetV9;

// Function table, v8 (19 slots).
typedef struct {
  const char* name;
  PrismNcclResult (*init)(PrismNcclLogger log);
  PrismNcclResult (*devices)(int* ndev);
  PrismNcclResult (*get_properties)(int dev, PrismNcclPropertiesV8* props);
  PrismNcclResult (*listen)(int dev, void* handle, void** listen_comm);
  PrismNcclResult (*connect)(int dev, void* handle, void** send_comm,
                             PrismNcclDeviceHandle** send_dev_comm);
  PrismNcclResult (*accept)(void* listen_comm, void** recv_comm,
                            PrismNcclDeviceHandle** recv_dev_comm);
  PrismNcclResult (*reg_mr)(void* comm, void* data, size_t size, int type,
                            void** mhandle);
  PrismNcclResult (*reg_mr_dma_buf)(void* comm, void* data, size_t size,
                                    int type, uint64_t offset, int fd,
                                    void** mhandle);
  PrismNcclResult (*dereg_mr)(void* comm, void* mhandle);
  PrismNcclResult (*isend)(void* send_comm, void* data, int size, int tag,
                           void* mhandle, void** request);
  PrismNcclResult (*irecv)(void* recv_comm, int n, void** data, int* sizes,
                           int* tags, void** mhandles, void** request);
  PrismNcclResult (*iflush)(void* recv_comm, int n, void** data, int* sizes,
                            void** mhandles, void** request);
  PrismNcclResult (*test)(void* request, int* done, int* sizes);
  PrismNcclResult (*close_send)(void* send_comm);
  PrismNcclResult (*close_recv)(void* recv_comm);
  PrismNcclResult (*close_listen)(void* listen_comm);
  PrismNcclResult (*get_device_mr)(void* comm, void* mhandle,
                                   void** dptr_mhandle);
  PrismNcclResult (*irecv_consumed)(void* recv_comm, int n, void* request);
} PrismNcclNetV8;

}  // extern "C"

// --- ABI proof: sizes and offsets from the ABI notes (x86-64 SysV). ---------
#define PRISM_ABI_AT(type, member, off) \
  static_assert(offsetof(type, member) == (off), #type "." #member)

static_assert(sizeof(PrismNcclResult) == 4);
static_assert(sizeof(void*) == 8, "the ABI notes describe LP64 only");

static_assert(sizeof(PrismNcclVDeviceProps) == 20);
PRISM_ABI_AT(PrismNcclVDeviceProps, ndevs, 0);
PRISM_ABI_AT(PrismNcclVDeviceProps, devs, 4);

static_assert(sizeof(PrismNcclPropertiesV11) == 112);
static_assert(alignof(PrismNcclPropertiesV11) == 8);
PRISM_ABI_AT(PrismNcclPropertiesV11, name, 0);
PRISM_ABI_AT(PrismNcclPropertiesV11, pci_path, 8);
PRISM_ABI_AT(PrismNcclPropertiesV11, guid, 16);
PRISM_ABI_AT(PrismNcclPropertiesV11, ptr_support, 24);
PRISM_ABI_AT(PrismNcclPropertiesV11, reg_is_global, 28);
PRISM_ABI_AT(PrismNcclPropertiesV11, force_flush, 32);
PRISM_ABI_AT(PrismNcclPropertiesV11, speed, 36);
PRISM_ABI_AT(PrismNcclPropertiesV11, port, 40);
PRISM_ABI_AT(PrismNcclPropertiesV11, latency, 44);
PRISM_ABI_AT(PrismNcclPropertiesV11, max_comms, 48);
PRISM_ABI_AT(PrismNcclPropertiesV11, max_recvs, 52);
PRISM_ABI_AT(PrismNcclPropertiesV11, net_device_type, 56);
PRISM_ABI_AT(PrismNcclPropertiesV11, net_device_version, 60);
PRISM_ABI_AT(PrismNcclPropertiesV11, vprops, 64);
PRISM_ABI_AT(PrismNcclPropertiesV11, max_p2p_bytes, 88);
PRISM_ABI_AT(PrismNcclPropertiesV11, max_coll_bytes, 96);
PRISM_ABI_AT(PrismNcclPropertiesV11, max_multi_request_size, 104);

static_assert(sizeof(PrismNcclPropertiesV10) == 104);
PRISM_ABI_AT(PrismNcclPropertiesV10, name, 0);
PRISM_ABI_AT(PrismNcclPropertiesV10, pci_path, 8);
PRISM_ABI_AT(PrismNcclPropertiesV10, guid, 16);
PRISM_ABI_AT(PrismNcclPropertiesV10, ptr_support, 24);
PRISM_ABI_AT(PrismNcclPropertiesV10, reg_is_global, 28);
PRISM_ABI_AT(PrismNcclPropertiesV10, force_flush, 32);
PRISM_ABI_AT(PrismNcclPropertiesV10, speed, 36);
PRISM_ABI_AT(PrismNcclPropertiesV10, port, 40);
PRISM_ABI_AT(PrismNcclPropertiesV10, latency, 44);
PRISM_ABI_AT(PrismNcclPropertiesV10, max_comms, 48);
PRISM_ABI_AT(PrismNcclPropertiesV10, max_recvs, 52);
PRISM_ABI_AT(PrismNcclPropertiesV10, net_device_type, 56);
PRISM_ABI_AT(PrismNcclPropertiesV10, net_device_version, 60);
PRISM_ABI_AT(PrismNcclPropertiesV10, vprops, 64);
PRISM_ABI_AT(PrismNcclPropertiesV10, max_p2p_bytes, 88);
PRISM_ABI_AT(PrismNcclPropertiesV10, max_coll_bytes, 96);

static_assert(sizeof(PrismNcclPropertiesV8) == 64);
PRISM_ABI_AT(PrismNcclPropertiesV8, name, 0);
PRISM_ABI_AT(PrismNcclPropertiesV8, pci_path, 8);
PRISM_ABI_AT(PrismNcclPropertiesV8, guid, 16);
PRISM_ABI_AT(PrismNcclPropertiesV8, ptr_support, 24);
PRISM_ABI_AT(PrismNcclPropertiesV8, reg_is_global, 28);
PRISM_ABI_AT(PrismNcclPropertiesV8, speed, 32);
PRISM_ABI_AT(PrismNcclPropertiesV8, port, 36);
PRISM_ABI_AT(PrismNcclPropertiesV8, latency, 40);
PRISM_ABI_AT(PrismNcclPropertiesV8, max_comms, 44);
PRISM_ABI_AT(PrismNcclPropertiesV8, max_recvs, 48);
PRISM_ABI_AT(PrismNcclPropertiesV8, net_device_type, 52);
PRISM_ABI_AT(PrismNcclPropertiesV8, net_device_version, 56);

static_assert(sizeof(PrismNcclDeviceHandle) == 32);
PRISM_ABI_AT(PrismNcclDeviceHandle, type, 0);
PRISM_ABI_AT(PrismNcclDeviceHandle, version, 4);
PRISM_ABI_AT(PrismNcclDeviceHandle, handle, 8);
PRISM_ABI_AT(PrismNcclDeviceHandle, size, 16);
PRISM_ABI_AT(PrismNcclDeviceHandle, needs_proxy_progress, 24);

static_assert(sizeof(PrismNcclCommConfig) == 4);
static_assert(sizeof(PrismNcclNetAttrSide) == 16);
static_assert(sizeof(PrismNcclNetAttr) == 44);
PRISM_ABI_AT(PrismNcclNetAttr, send, 0);
PRISM_ABI_AT(PrismNcclNetAttr, recv, 16);
PRISM_ABI_AT(PrismNcclNetAttr, op, 32);
PRISM_ABI_AT(PrismNcclNetAttr, algo, 36);
PRISM_ABI_AT(PrismNcclNetAttr, proto, 40);

// Function tables: slot i at byte 8*i.
static_assert(sizeof(PrismNcclNetV11) == 176);
PRISM_ABI_AT(PrismNcclNetV11, name, 0 * 8);
PRISM_ABI_AT(PrismNcclNetV11, init, 1 * 8);
PRISM_ABI_AT(PrismNcclNetV11, devices, 2 * 8);
PRISM_ABI_AT(PrismNcclNetV11, get_properties, 3 * 8);
PRISM_ABI_AT(PrismNcclNetV11, listen, 4 * 8);
PRISM_ABI_AT(PrismNcclNetV11, connect, 5 * 8);
PRISM_ABI_AT(PrismNcclNetV11, accept, 6 * 8);
PRISM_ABI_AT(PrismNcclNetV11, reg_mr, 7 * 8);
PRISM_ABI_AT(PrismNcclNetV11, reg_mr_dma_buf, 8 * 8);
PRISM_ABI_AT(PrismNcclNetV11, dereg_mr, 9 * 8);
PRISM_ABI_AT(PrismNcclNetV11, isend, 10 * 8);
PRISM_ABI_AT(PrismNcclNetV11, irecv, 11 * 8);
PRISM_ABI_AT(PrismNcclNetV11, iflush, 12 * 8);
PRISM_ABI_AT(PrismNcclNetV11, test, 13 * 8);
PRISM_ABI_AT(PrismNcclNetV11, close_send, 14 * 8);
PRISM_ABI_AT(PrismNcclNetV11, close_recv, 15 * 8);
PRISM_ABI_AT(PrismNcclNetV11, close_listen, 16 * 8);
PRISM_ABI_AT(PrismNcclNetV11, get_device_mr, 17 * 8);
PRISM_ABI_AT(PrismNcclNetV11, irecv_consumed, 18 * 8);
PRISM_ABI_AT(PrismNcclNetV11, make_vdevice, 19 * 8);
PRISM_ABI_AT(PrismNcclNetV11, finalize, 20 * 8);
PRISM_ABI_AT(PrismNcclNetV11, set_net_attr, 21 * 8);

static_assert(sizeof(PrismNcclNetV10) == 160);
PRISM_ABI_AT(PrismNcclNetV10, name, 0 * 8);
PRISM_ABI_AT(PrismNcclNetV10, init, 1 * 8);
PRISM_ABI_AT(PrismNcclNetV10, devices, 2 * 8);
PRISM_ABI_AT(PrismNcclNetV10, get_properties, 3 * 8);
PRISM_ABI_AT(PrismNcclNetV10, listen, 4 * 8);
PRISM_ABI_AT(PrismNcclNetV10, connect, 5 * 8);
PRISM_ABI_AT(PrismNcclNetV10, accept, 6 * 8);
PRISM_ABI_AT(PrismNcclNetV10, reg_mr, 7 * 8);
PRISM_ABI_AT(PrismNcclNetV10, reg_mr_dma_buf, 8 * 8);
PRISM_ABI_AT(PrismNcclNetV10, dereg_mr, 9 * 8);
PRISM_ABI_AT(PrismNcclNetV10, isend, 10 * 8);
PRISM_ABI_AT(PrismNcclNetV10, irecv, 11 * 8);
PRISM_ABI_AT(PrismNcclNetV10, iflush, 12 * 8);
PRISM_ABI_AT(PrismNcclNetV10, test, 13 * 8);
PRISM_ABI_AT(PrismNcclNetV10, close_send, 14 * 8);
PRISM_ABI_AT(PrismNcclNetV10, close_recv, 15 * 8);
PRISM_ABI_AT(PrismNcclNetV10, close_listen, 16 * 8);
PRISM_ABI_AT(PrismNcclNetV10, get_device_mr, 17 * 8);
PRISM_ABI_AT(PrismNcclNetV10, irecv_consumed, 18 * 8);
PRISM_ABI_AT(PrismNcclNetV10, make_vdevice, 19 * 8);

static_assert(sizeof(PrismNcclNetV9) == 160);
PRISM_ABI_AT(PrismNcclNetV9, name, 0 * 8);
PRISM_ABI_AT(PrismNcclNetV9, init, 1 * 8);
PRISM_ABI_AT(PrismNcclNetV9, devices, 2 * 8);
PRISM_ABI_AT(PrismNcclNetV9, get_properties, 3 * 8);
PRISM_ABI_AT(PrismNcclNetV9, listen, 4 * 8);
PRISM_ABI_AT(PrismNcclNetV9, connect, 5 * 8);
PRISM_ABI_AT(PrismNcclNetV9, accept, 6 * 8);
PRISM_ABI_AT(PrismNcclNetV9, reg_mr, 7 * 8);
PRISM_ABI_AT(PrismNcclNetV9, reg_mr_dma_buf, 8 * 8);
PRISM_ABI_AT(PrismNcclNetV9, dereg_mr, 9 * 8);
PRISM_ABI_AT(PrismNcclNetV9, isend, 10 * 8);
PRISM_ABI_AT(PrismNcclNetV9, irecv, 11 * 8);
PRISM_ABI_AT(PrismNcclNetV9, iflush, 12 * 8);
PRISM_ABI_AT(PrismNcclNetV9, test, 13 * 8);
PRISM_ABI_AT(PrismNcclNetV9, close_send, 14 * 8);
PRISM_ABI_AT(PrismNcclNetV9, close_recv, 15 * 8);
PRISM_ABI_AT(PrismNcclNetV9, close_listen, 16 * 8);
PRISM_ABI_AT(PrismNcclNetV9, get_device_mr, 17 * 8);
PRISM_ABI_AT(PrismNcclNetV9, irecv_consumed, 18 * 8);
PRISM_ABI_AT(PrismNcclNetV9, make_vdevice, 19 * 8);

static_assert(sizeof(PrismNcclNetV8) == 152);
PRISM_ABI_AT(PrismNcclNetV8, name, 0 * 8);
PRISM_ABI_AT(PrismNcclNetV8, init, 1 * 8);
PRISM_ABI_AT(PrismNcclNetV8, devices, 2 * 8);
PRISM_ABI_AT(PrismNcclNetV8, get_properties, 3 * 8);
PRISM_ABI_AT(PrismNcclNetV8, listen, 4 * 8);
PRISM_ABI_AT(PrismNcclNetV8, connect, 5 * 8);
PRISM_ABI_AT(PrismNcclNetV8, accept, 6 * 8);
PRISM_ABI_AT(PrismNcclNetV8, reg_mr, 7 * 8);
PRISM_ABI_AT(PrismNcclNetV8, reg_mr_dma_buf, 8 * 8);
PRISM_ABI_AT(PrismNcclNetV8, dereg_mr, 9 * 8);
PRISM_ABI_AT(PrismNcclNetV8, isend, 10 * 8);
PRISM_ABI_AT(PrismNcclNetV8, irecv, 11 * 8);
PRISM_ABI_AT(PrismNcclNetV8, iflush, 12 * 8);
PRISM_ABI_AT(PrismNcclNetV8, test, 13 * 8);
PRISM_ABI_AT(PrismNcclNetV8, close_send, 14 * 8);
PRISM_ABI_AT(PrismNcclNetV8, close_recv, 15 * 8);
PRISM_ABI_AT(PrismNcclNetV8, close_listen, 16 * 8);
PRISM_ABI_AT(PrismNcclNetV8, get_device_mr, 17 * 8);
PRISM_ABI_AT(PrismNcclNetV8, irecv_consumed, 18 * 8);

#undef PRISM_ABI_AT

#endif  // PRISM_TRANSPORT_NCCL_NET_ABI_H_
