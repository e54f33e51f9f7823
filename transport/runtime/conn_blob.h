// Encoding of prism::ConnectionBlob: the connection info one endpoint sends
// its peer out of band (a TCP side channel, an NCCL handle, a file).
//
// Layout (little-endian), at most ConnectionBlob::kMaxBytes = 63 bytes:
//   0 magic u8 (0xA7) | 1 version u8 (1) | 2 flags u8 (bits 0-1 datapath:
//   0 udp, 1 loopback; bit 2 per-plane ports; bit 7 payload checksum) |
//   3 n_addr u8 |
//   4 conn_id u32 | 8 initial_psn u32 | 12 mtu_payload u16 |
//   14 num_paths u16 | 16 num_planes u8 |
//   udp: 17 port u16 | 19 address[16] of plane 0, then per further plane:
//        mask u16 (bit i: byte i differs from plane 0's address) |
//        the differing bytes | port u16 (only with flag bit 2, else every
//        plane uses plane 0's port)
//   Typical sizes: 1 plane 35 bytes; 8 planes differing in one address byte
//   56 bytes (same port) — distinct ports per plane fit up to 6 planes.
//   loopback: 17 node u32
// Invariant: Decode(Encode(x)) == x; Decode never reads outside the blob and
// rejects unknown magic/version, truncation, trailing bytes and zero counts.
//
// Thread safety: pure functions.
#ifndef PRISM_TRANSPORT_RUNTIME_CONN_BLOB_H_
#define PRISM_TRANSPORT_RUNTIME_CONN_BLOB_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "prism/endpoint.h"
#include "prism/engine.h"

namespace prism::runtime {

enum class BlobDatapath : uint8_t { kUdp = 0, kLoopback = 1 };

struct BlobAddress {
  std::array<uint8_t, 16> addr{};
  uint16_t port = 0;
};

struct ConnInfoWire {
  BlobDatapath datapath = BlobDatapath::kUdp;
  ConnectionInfo info;
  std::vector<BlobAddress> planes;  // udp: one per plane (1..15)
  uint32_t node = 0;                // loopback: node id
};

absl::StatusOr<ConnectionBlob> EncodeBlob(const ConnInfoWire& w);
absl::StatusOr<ConnInfoWire> DecodeBlob(const ConnectionBlob& b);

}  // namespace prism::runtime

#endif  // PRISM_TRANSPORT_RUNTIME_CONN_BLOB_H_
