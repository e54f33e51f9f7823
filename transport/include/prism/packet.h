// The units a datapath exchanges with the engine: TxPacket (engine -> wire)
// and RxPacket (wire -> engine).
//
// Contract:
// - A TxPacket is a gather list of two pieces: `header` (bytes the engine
//   encoded, at most kMaxHeaderBytes) and an optional `payload` pointer into a
//   registered local memory region. The engine never copies payload on send;
//   the datapath gathers header + payload (sendmmsg iovecs, an mbuf chain, a
//   verbs SGE list, or a pointer carried by the simulator). The payload memory
//   stays valid until the message that owns it completes.
// - An RxPacket is either contiguous (`payload == nullptr`: the payload, if
// any,
//   follows the header inside `data`) or split (`payload` points at the
//   payload, `data` holds the header only). Both are valid only during the call
//   that hands them to the engine.
// - Without a payload pointer (`payload == nullptr`) the packet is contiguous
//   whatever `payload_len` says: `payload_len` is ignored, and the payload is
//   the bytes of `data` after the header (`len` minus the header's size). A
//   DATA header followed by none is a trimmed packet (its payload cut on the
//   way: NACKed for retransmission); one followed by another number of bytes
//   than it declares is dropped as malformed (EngineStats::rx_drop_malformed).
// - Null `data` (with `len` 0): counted in EngineStats::rx_packets and
//   rx_drop_malformed (too short for a header), and otherwise ignored; the
//   engine never dereferences it. A non-zero `len` with null `data` is not
//   allowed.
// - `peer` is an opaque datapath-level destination/source id (simulator host
//   index, UDP peer slot, ...). The engine copies ConnectionOptions::peer into
//   every TxPacket of that connection and never interprets it.
#ifndef PRISM_PACKET_H_
#define PRISM_PACKET_H_

#include <cstddef>
#include <cstdint>

#include "prism/types.h"

namespace prism {

// Traffic classes. Control packets (SACK, NACK, probes, trimmed headers)
// travel in the high-priority class switches never trim.
enum class TrafficClass : uint8_t { kData = 0, kControl = 1 };

struct TxPacket {
  static constexpr size_t kMaxHeaderBytes = 128;

  uint8_t header[kMaxHeaderBytes];
  uint16_t header_len = 0;
  const uint8_t* payload = nullptr;  // nullptr when payload_len == 0
  uint32_t payload_len = 0;
  uint32_t peer = 0;  // ConnectionOptions::peer of the connection
  PathId path = 0;    // path index chosen by the engine
  TrafficClass tclass = TrafficClass::kData;

  size_t size() const { return header_len + payload_len; }
};

struct RxPacket {
  const uint8_t* data = nullptr;  // header (+ payload when contiguous)
  uint32_t len = 0;
  const uint8_t* payload = nullptr;  // split mode only
  uint32_t payload_len = 0;          // split mode only
  uint32_t peer = 0;                 // datapath-level source id (informational)
  bool ecn_ce = false;   // IP ECN field was CE (congestion experienced)
  bool trimmed = false;  // the datapath knows the payload was cut (simulator)
};

}  // namespace prism

#endif  // PRISM_PACKET_H_
