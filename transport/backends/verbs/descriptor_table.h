// Per-message descriptors of the verbs datapath and the rebuilding of a
// NIC-placed packet's DATA header from its 32-bit immediate (the PSN).
// Layout: docs/wire-format.md, "Verbs datapath: the 32-bit immediate".
//
// A message k owns PSNs [first_psn, first_psn + npkts), npkts =
// max(1, ceil(msg_len / mtu)); packet i carries bytes [i*mtu, (i+1)*mtu).
// PSN and MSN arithmetic is modulo 2^32 (both wrap).
//
// Invariants: DescriptorTable holds the last `size` messages by MSN (a ring);
// Find() only returns a descriptor whose PSN range holds the PSN. Nothing
// allocates after construction.
//
// Thread safety: none (one datapath thread).
#ifndef PRISM_TRANSPORT_BACKENDS_VERBS_DESCRIPTOR_TABLE_H_
#define PRISM_TRANSPORT_BACKENDS_VERBS_DESCRIPTOR_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "transport/wire/packet.h"

namespace prism::verbs {

inline constexpr size_t kDescriptorBytes = 40;

enum DescriptorFlags : uint16_t {
  kDescHasImmediate = 1u << 0,
  kDescPayloadCrc = 1u << 1,
};

struct MessageDescriptor {
  uint32_t msn = 0;
  uint32_t first_psn = 0;
  uint32_t msg_len = 0;
  uint32_t dst_conn = 0;
  uint32_t rkey = 0;       // the engine's rkey
  uint32_t immediate = 0;  // the application's immediate
  uint64_t base_addr = 0;  // remote_addr of the message's first byte
  uint32_t mtu = 0;        // payload bytes per packet (1 .. 1 MiB)
  uint16_t flags = 0;      // DescriptorFlags

  uint32_t npkts() const {
    if (mtu == 0) return 1;
    const uint64_t n = (uint64_t{msg_len} + mtu - 1) / mtu;
    return n == 0 ? 1 : static_cast<uint32_t>(n);
  }
  bool Contains(uint32_t psn) const { return psn - first_psn < npkts(); }
  bool operator==(const MessageDescriptor&) const = default;
};

// Builds the descriptor of the message a DATA header belongs to.
// REQUIRES: h.msg_offset is a multiple of mtu.
MessageDescriptor DescriptorFromHeader(const wire::DataHeader& h, uint32_t mtu);

void EncodeDescriptor(const MessageDescriptor& d,
                      uint8_t out[kDescriptorBytes]);
// False (and *d unspecified) for an mtu outside 1..wire::kMaxPayloadLen,
// unknown flags or a non-zero reserved field.
bool DecodeDescriptor(const uint8_t in[kDescriptorBytes], MessageDescriptor* d);

// Rebuilds the DATA header of packet `psn` of message `d` that the NIC placed
// (`byte_len` bytes, arrived on data QP `path`). send_ts is 0; payload_crc is
// left 0 (the caller computes it over the placed bytes when the descriptor
// asks for it). False when psn is outside the message or byte_len is not
// the length that packet must have.
bool RebuildDataHeader(const MessageDescriptor& d, uint32_t psn,
                       uint32_t byte_len, uint16_t path, wire::DataHeader* h);

class DescriptorTable {
 public:
  // REQUIRES: size is a power of two.
  explicit DescriptorTable(uint32_t size);
  void Insert(const MessageDescriptor& d);
  // The descriptor whose PSN range holds `psn`, or nullptr.
  const MessageDescriptor* Find(uint32_t psn);
  size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    bool valid = false;
    MessageDescriptor d;
  };
  const MessageDescriptor* At(uint32_t msn, uint32_t psn) const;

  std::vector<Slot> slots_;
  uint32_t mask_;
  bool any_ = false;
  uint32_t first_msn_ = 0;
  uint32_t newest_msn_ = 0;
  uint32_t hint_msn_ = 0;
};

}  // namespace prism::verbs

#endif  // PRISM_TRANSPORT_BACKENDS_VERBS_DESCRIPTOR_TABLE_H_
