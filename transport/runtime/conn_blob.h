// Encoding of prism::ConnectionBlob: the connection info one endpoint sends
// its peer out of band (a TCP side channel, an NCCL handle, a file).
//
// Layout (little-endian), version 2, variable length, at most
// ConnectionBlob::kMaxBytes = 255 bytes:
//   0 magic u8 (0xA7) | 1 version u8 (2) | 2 length u8 (total bytes of the
//   blob, header included; must equal the blob's size) | 3 flags u8 (bits
//   0-1 datapath: 0 udp, 1 loopback, 2 verbs; bit 2 per-plane ports; bit 3
//   mtu_hi; bit 7 payload checksum) | 4 n_addr u8 |
//   5 conn_id u32 | 9 initial_psn u32 | 13 mtu_payload u16 (bits 0-15) |
//   15 num_paths u16 | 17 num_planes u8 |
//   with flag bit 3 (mtu_payload >= 64 KiB): mtu_hi u8 (bits 16-23, not 0),
//   and every offset below moves up by one.
//   udp: 18 port u16 | 20 address[16] of plane 0, then per further plane:
//        mask u16 (bit i: byte i differs from plane 0's address) |
//        the differing bytes | port u16 (only with flag bit 2, else every
//        plane uses plane 0's port)
//        Typical sizes: 1 plane 36 bytes; 8 planes differing in one address
//        byte 57 bytes (same port); 6 planes with distinct ports 61 bytes.
//   loopback: 18 node u32 (22 bytes)
//   verbs: 18 the verbs PeerInfo bytes (verbs::EncodePeerInfo, 40 + 4 x
//        num_qps; opaque here, checked by verbs::DecodePeerInfo), up to the
//        end of the blob: 8 QPs 90 bytes, at most 49 QPs (255 bytes with
//        mtu_hi).
// Version 1 blobs (no length byte) are rejected with a clear error.
// Invariant: Decode(Encode(x)) == x; Decode never reads outside the blob and
// rejects unknown magic/version, a length byte that disagrees with the
// size, truncation, trailing bytes and zero counts.
//
// Thread safety: pure functions.
#ifndef PRISM_TRANSPORT_RUNTIME_CONN_BLOB_H_
#define PRISM_TRANSPORT_RUNTIME_CONN_BLOB_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prism/endpoint.h"
#include "prism/engine.h"

namespace prism::runtime {

enum class BlobDatapath : uint8_t { kUdp = 0, kLoopback = 1, kVerbs = 2 };

struct BlobAddress {
  std::array<uint8_t, 16> addr{};
  uint16_t port = 0;
};

struct ConnInfoWire {
  BlobDatapath datapath = BlobDatapath::kUdp;
  ConnectionInfo info;
  std::vector<BlobAddress> planes;  // udp: one per plane (1..15)
  uint32_t node = 0;                // loopback: node id
  std::string verbs;                // verbs: encoded verbs::PeerInfo
};

absl::StatusOr<ConnectionBlob> EncodeBlob(const ConnInfoWire& w);
absl::StatusOr<ConnInfoWire> DecodeBlob(const ConnectionBlob& b);

}  // namespace prism::runtime

#endif  // PRISM_TRANSPORT_RUNTIME_CONN_BLOB_H_
