// Wire layouts of the Prism NCCL net plugin: the listen handle NCCL carries
// between processes, the side-channel handshake (Hello / Ack) and the frames
// of the request protocol (see comm.h for the protocol itself). Internal to
// the plugin; the tests that act as a (misbehaving) peer include it too, so
// that they and the plugin cannot drift apart. Header only, no dependencies
// beyond the ABI constants.
#ifndef PRISM_TRANSPORT_NCCL_WIRE_H_
#define PRISM_TRANSPORT_NCCL_WIRE_H_

#include <cstddef>
#include <cstdint>

#include "transport/nccl/net_abi.h"

namespace prism::nccl {

inline constexpr int kMaxRecvs = 8;
inline constexpr int kMaxRequests = kPrismNcclMaxRequests;

inline constexpr uint32_t kHandleMagic = 0x484d5250;  // "PRMH"
inline constexpr uint32_t kHelloMagic = 0x434d5250;   // "PRMC"
inline constexpr uint32_t kProtoVersion = 3;  // 3: Hello carries the CTS ring

// The listener's address in NCCL's 128-byte handle buffer. `connect_state`
// and `connect_token` are 0 as written by listen(); connect() keeps its
// in-progress state there between the repeated calls NCCL makes with the
// same buffer: the state's address and the token it was created with (a
// process-wide counter), so that a stale copy of a handle whose state was
// freed and whose address a later connect's state reuses is told apart
// (comm.cc, TakeConnectState).
struct WireHandle {
  uint32_t magic;
  uint16_t version;
  uint16_t family;
  uint16_t port;  // network byte order
  uint16_t dev;
  uint32_t mode;
  uint64_t nonce;
  uint8_t addr[16];
  uint64_t connect_state;
  uint64_t connect_token;
};
static_assert(sizeof(WireHandle) <= kPrismNcclHandleMaxSize);
static_assert(offsetof(WireHandle, family) == 6 &&
              offsetof(WireHandle, port) == 8 &&
              offsetof(WireHandle, mode) == 12 &&
              offsetof(WireHandle, nonce) == 16 &&
              offsetof(WireHandle, addr) == 24 &&
              offsetof(WireHandle, connect_state) == 40 &&
              offsetof(WireHandle, connect_token) == 48 &&
              sizeof(WireHandle) == 56);

// Hello (connect -> accept) and Ack (accept -> connect).
struct HelloMsg {
  uint32_t magic;
  uint32_t version;
  uint64_t nonce;
  uint32_t mode;
  uint32_t status;  // ack: 0 = accepted
  // Datapath connection info: length byte + ConnectionBlob bytes.
  uint8_t info[256];
  // Prism data paths, connect -> accept: the sender's CTS ring (cts_slots
  // slots of kCtsSlotBytes at cts_addr, remote-writable with cts_rkey).
  uint64_t cts_addr;
  uint32_t cts_rkey;
  uint32_t cts_slots;
};
static_assert(sizeof(HelloMsg) == 296);
static_assert(offsetof(HelloMsg, version) == 4 &&
              offsetof(HelloMsg, nonce) == 8 &&
              offsetof(HelloMsg, mode) == 16 &&
              offsetof(HelloMsg, status) == 20 &&
              offsetof(HelloMsg, info) == 24 &&
              offsetof(HelloMsg, cts_addr) == 280);

enum FrameType : uint32_t {
  kFrameCts = 1,
  kFrameData = 2,
  kFrameSendError = 3,
};
struct FrameHeader {
  uint32_t type;
  uint32_t aux;
  uint64_t len;  // bytes after this header
};
struct CtsEntry {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  int32_t tag;
};
// The clear-to-send frame {seq, n, (addr, size, rkey, tag) x n}.
struct CtsBody {
  uint32_t seq;
  uint32_t n;
  CtsEntry e[kMaxRecvs];  // only n are on the wire
};
struct DataHeader {
  uint32_t seq;
  uint32_t idx;
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  uint32_t pad;
};
struct SendErrorBody {
  uint32_t seq;
  uint32_t idx;
  uint64_t size;
};
static_assert(sizeof(FrameHeader) == 16 && sizeof(CtsEntry) == 24 &&
              sizeof(DataHeader) == 32 && sizeof(SendErrorBody) == 16);
constexpr size_t CtsLen(int n) { return 8 + static_cast<size_t>(n) * 24; }
// One slot of the sender's CTS ring (Prism data paths): the receiver WRITEs
// CtsBody (CtsLen(n) bytes) with immediate = seq into slot seq % kMaxRequests.
inline constexpr size_t kCtsSlotBytes = 256;
inline constexpr size_t kCtsRingBytes = kCtsSlotBytes * kMaxRequests;
static_assert(sizeof(CtsBody) <= kCtsSlotBytes);

// Prism WRITE-with-immediate: immediate = (seq mod 2^29) << 3 | slot index.
inline constexpr uint32_t kImmSeqMask = (1u << 29) - 1;
static_assert(kMaxRecvs <= 8);
constexpr uint32_t MakeImmediate(uint32_t seq, uint32_t idx) {
  return ((seq & kImmSeqMask) << 3) | idx;
}

}  // namespace prism::nccl

#endif  // PRISM_TRANSPORT_NCCL_WIRE_H_
