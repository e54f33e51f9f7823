// fuzz-libs: prism_verbs
// Fuzzes the verbs datapath's message descriptors (transport/backends/verbs/
// descriptor_table.h): the 40-byte records a peer writes into our descriptor
// ring, read with DecodeDescriptor, kept in a DescriptorTable, and used to
// rebuild the DATA header of every packet the NIC placed (RebuildDataHeader
// from the 32-bit PSN immediate). All of it is peer-controlled input.
//
// Input: the first byte sets the table size (2^(b % 6): 1 .. 32 slots);
// then records of 1 + 40 bytes: a tag byte and a descriptor (short ones
// padded with zeros). Tag bit 0 clear: decode the descriptor and, when it
// is accepted, insert it. Tag bit 0 set: use its first 10 bytes as a packet
// instead (PSN, byte length, QP index): look the PSN up and rebuild the
// header. Any input must run without a crash or a sanitizer report.
// Checked:
// - an accepted descriptor encodes to exactly its bytes (one form), and a
//   refused one has an mtu outside 1 .. kMaxPayloadLen, an unknown flag or a
//   non-zero reserved field;
// - Find returns only a descriptor whose PSN range holds the PSN, and one
//   that is in the table (a copy inserted and not overwritten since);
// - a rebuilt header lies inside its message (offset + length <= length of
//   the message, a whole packet at its offset, address = base + offset),
//   first / last flags match the packet's index, the immediate and payload
//   checksum flags come from the descriptor; a refused rebuild is a PSN
//   outside the message or a length that is not that packet's.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "transport/backends/verbs/descriptor_table.h"
#include "transport/base/bytes.h"

namespace {

using prism::verbs::DecodeDescriptor;
using prism::verbs::DescriptorTable;
using prism::verbs::EncodeDescriptor;
using prism::verbs::kDescHasImmediate;
using prism::verbs::kDescPayloadCrc;
using prism::verbs::kDescriptorBytes;
using prism::verbs::MessageDescriptor;
using prism::verbs::RebuildDataHeader;
namespace wire = prism::wire;

void Check(bool ok) {
  if (!ok) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint32_t slots = 1u << (data[0] % 6);
  DescriptorTable table(slots);
  // What the table should hold: the last descriptor inserted per slot.
  std::vector<MessageDescriptor> held(slots);
  std::vector<bool> valid(slots, false);
  size_t pos = 1;
  while (pos < size) {
    const uint8_t tag = data[pos++];
    uint8_t rec[kDescriptorBytes] = {};
    const size_t n = std::min(kDescriptorBytes, size - pos);
    std::memcpy(rec, data + pos, n);
    pos += n;
    if ((tag & 1) == 0) {
      MessageDescriptor d;
      if (!DecodeDescriptor(rec, &d)) {
        const uint32_t mtu = prism::Get32(rec + 32);
        const uint16_t flags = prism::Get16(rec + 36);
        Check(mtu == 0 || mtu > wire::kMaxPayloadLen ||
              (flags & ~(kDescHasImmediate | kDescPayloadCrc)) != 0 ||
              prism::Get16(rec + 38) != 0);
        continue;
      }
      uint8_t again[kDescriptorBytes];
      EncodeDescriptor(d, again);
      Check(std::memcmp(again, rec, kDescriptorBytes) == 0);
      table.Insert(d);
      held[d.msn & (slots - 1)] = d;
      valid[d.msn & (slots - 1)] = true;
      continue;
    }
    const uint32_t psn = prism::Get32(rec);
    const uint32_t byte_len = prism::Get32(rec + 4);
    const uint16_t path = prism::Get16(rec + 8);
    const MessageDescriptor* d = table.Find(psn);
    if (d == nullptr) continue;
    Check(d->Contains(psn));
    const uint32_t slot = d->msn & (slots - 1);
    Check(valid[slot] && held[slot] == *d);
    // The packet's own length, and the one the input gave.
    const uint32_t idx = psn - d->first_psn;
    const uint64_t off = uint64_t{idx} * d->mtu;
    for (const uint32_t len :
         {byte_len, static_cast<uint32_t>(std::min<uint64_t>(
                        d->mtu, off <= d->msg_len ? d->msg_len - off : 0))}) {
      wire::DataHeader h;
      if (!RebuildDataHeader(*d, psn, len, path, &h)) {
        Check(off > d->msg_len ||
              len != std::min<uint64_t>(d->mtu, d->msg_len - off));
        continue;
      }
      Check(h.psn == psn && h.msn == d->msn && h.dst_conn == d->dst_conn &&
            h.rkey == d->rkey && h.path_id == path);
      Check(h.msg_offset == off && h.msg_len == d->msg_len &&
            h.payload_len == len);
      Check(uint64_t{h.msg_offset} + h.payload_len <= h.msg_len);
      Check(h.payload_len == d->mtu ||
            h.msg_offset + h.payload_len == h.msg_len);
      Check(h.remote_addr == d->base_addr + off);
      Check(((h.flags & wire::kFlagFirstOfMessage) != 0) == (idx == 0));
      Check(((h.flags & wire::kFlagLastOfMessage) != 0) ==
            (idx + 1 == d->npkts()));
      Check(((h.flags & wire::kFlagHasImmediate) != 0) ==
            ((d->flags & kDescHasImmediate) != 0));
      Check(h.immediate ==
            ((d->flags & kDescHasImmediate) != 0 ? d->immediate : 0));
      Check(((h.flags & wire::kFlagPayloadCrc) != 0) ==
            ((d->flags & kDescPayloadCrc) != 0));
    }
  }
  return 0;
}
