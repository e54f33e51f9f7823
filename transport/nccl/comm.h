// Connections of the Prism NCCL net plugin: listen/connect/accept state
// machines, memory handles, and the request protocol.
//
// Protocol (one TCP side-channel socket per send/recv comm pair):
//   handshake  connect -> accept: Hello{magic, nonce, mode, Prism connection
//              blob, CTS ring (addr, rkey, slots)}; accept -> connect:
//              Ack{magic, status, blob}. Both are polled, never blocking.
//   irecv      the receiver posts n <= kMaxRecvs buffers as one request and
//              sends a CTS frame {seq, n, (addr, size, rkey, tag) x n}.
//              Prism data paths (udp, verbs): a Prism WRITE-with-immediate
//              (immediate = seq) of the frame into slot seq % kMaxRequests of
//              the sender's CTS ring (kMaxRequests slots of 256 bytes,
//              registered remote-writable at connect); the sender learns of
//              it from the kRecvImmediate completion on its connection.
//              A slot is never overwritten unread: the receiver writes CTS
//              seq + kMaxRequests only after its request seq completed, i.e.
//              after the sender consumed CTS seq and wrote its data; and it
//              reuses the WRITE's source only after that WRITE completed.
//              DataMode::kTcpInterim: the frame goes on the side channel.
//   isend      the sender matches the oldest CTS entry with its tag; with no
//              CTS yet it returns a NULL request ("try again"). A send larger
//              than the matched buffer completes with an error on both sides.
//   data       Prism data paths: a Prism WRITE-with-immediate of the
//              payload into (addr, rkey) on the device's prism::Endpoint; the
//              immediate is (seq mod 2^29) << 3 | slot, the receiver's
//              completion gives the length. Send-error frames stay on the
//              TCP side channel (rare; the side channel also tells of the
//              peer closing).
//              DataMode::kTcpInterim (INTERIM, not Prism): a DATA frame
//              {seq, idx, addr, rkey, size} + payload on the same socket; the
//              receiver checks it against the posted slot and reads the payload
//              straight into the posted buffer.
// Sends on one connection complete in posting order; receives too.
//
// Thread safety: every comm has its own mutex. NCCL calls setup functions
// (listen/connect/accept/regMr/deregMr/close) on a service thread and
// isend/irecv/test on a progress thread; both may run at once on one comm.
// Distinct comms share nothing but the read-only configuration.
#ifndef PRISM_TRANSPORT_NCCL_COMM_H_
#define PRISM_TRANSPORT_NCCL_COMM_H_

#include <cstddef>
#include <cstdint>

#include "transport/nccl/config.h"
#include "transport/nccl/net_abi.h"
#include "transport/nccl/wire.h"

namespace prism::nccl {

// What the plugin needs of a device to create connections.
struct DeviceContext {
  int index = 0;
  const DeviceConfig* device = nullptr;
  const PluginConfig* config = nullptr;
};

PrismNcclResult Listen(const DeviceContext& dev, void* handle,
                       void** listen_comm);
// `owner`: the v11 init context of the call (nullptr for the older
// tables); a connect NCCL abandons mid-handshake is released when its owner
// is finalized (ReleaseConnectStates), or, whatever its table, once nobody
// has called it for twice PluginConfig::connect_timeout_ms, by the next
// listen or new connect (the only release for the v10 and older tables,
// which have no finalize). Both are logged and counted.
PrismNcclResult Connect(const DeviceContext& dev, void* handle,
                        void** send_comm, const void* owner = nullptr);
PrismNcclResult Accept(void* listen_comm, void** recv_comm);
PrismNcclResult CloseListen(void* listen_comm);
PrismNcclResult CloseSend(void* send_comm);
PrismNcclResult CloseRecv(void* recv_comm);

PrismNcclResult RegMr(void* comm, void* data, size_t size, int type,
                      void** mhandle);
PrismNcclResult DeregMr(void* comm, void* mhandle);

PrismNcclResult Isend(void* send_comm, void* data, size_t size, int tag,
                      void* mhandle, void** request);
PrismNcclResult Irecv(void* recv_comm, int n, void** data, const size_t* sizes,
                      const int* tags, void** mhandles, void** request);
PrismNcclResult Iflush(void* recv_comm, int n, void** data, int* sizes,
                       void** mhandles, void** request);
PrismNcclResult Test(void* request, int* done, int* sizes);

// Pointer types this build can register (NCCL_PTR_* bits).
int SupportedPtrTypes();

// PRISM_NCCL_CALL_LOG (PluginConfig::call_log): log the next `calls`
// state-changing data calls at INFO (comm.cc).
void SetCallLog(int64_t calls);

// Process-wide counters (logged by ReleaseIdleResources; docs/nccl.md).
struct PluginCounters {
  uint64_t protocol_errors = 0;     // peers that broke the protocol
  uint64_t api_errors = 0;          // calls NCCL should not have made
  uint64_t handshake_timeouts = 0;  // PRISM_CONNECT_TIMEOUT_MS expired
  uint64_t staging_stalls = 0;      // staged GPU copies reported stalled
  // Prism WRITEs (payloads and CTS frames) refused by PostWrite for a full
  // queue and tried again (isend answered "try again").
  uint64_t writes_refused = 0;
  // Connects abandoned mid-handshake, released at finalize.
  uint64_t abandoned_connects = 0;
};
PluginCounters Counters();

// Releases the connects in progress between calls (socket, half of the
// Prism connection, CTS ring) that `owner` started, or all of them with
// `every`: NCCL may give up on a connect that returned success with a NULL
// comm (an abort) and never call it again. A handle naming a released one
// is refused afterwards like any stale handle. A connect() call running at
// that moment keeps its state (finalizing while connecting is NCCL misuse).
// Returns how many were released (logged, counted).
int ReleaseConnectStates(const void* owner, bool every);

// Releases every abandoned connect (ReleaseConnectStates) and the
// per-device resources no comm uses any more (the Prism endpoints and their
// loop threads). Called when the last init context is finalized.
void ReleaseIdleResources();

}  // namespace prism::nccl

#endif  // PRISM_TRANSPORT_NCCL_COMM_H_
