// Packets inside the simulated fabric and the pool they live in.
//
// A SimPacket carries the transport's header bytes (a copy of the engine's
// TxPacket header, at most 128 bytes) and a pointer/length to the payload in
// the sender's memory: the fabric never copies payload. Routing metadata
// (plane, entropy value, SRv6 uSID carrier) and ECN/trim marks travel beside
// the bytes. Baseline transports (roce, multiqp) use the `bl` fields instead
// of header bytes.
//
// Invariants: every packet comes from a PacketPool; the pool counts
// allocations and frees so that the simulator can check that every packet
// created is delivered, dropped with a reason, or still in the fabric.
// Steady state allocates nothing: freed packets are reused (LIFO free list).
//
// Thread safety: none.
#ifndef PRISM_SIM_SIM_PACKET_H_
#define PRISM_SIM_SIM_PACKET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "prism/packet.h"
#include "prism/types.h"
#include "sim/huge_alloc.h"

namespace prism::sim {

inline constexpr int kMaxUsids = 6;

// Baseline (roce/multiqp) packet types.
enum class BlType : uint8_t { kNone = 0, kData, kAck, kNak, kCnp };

// Field order: what every hop reads (queue link, wire arrival time, route
// and queue metadata, SRv6 carrier) fills the first cache line; the slot is
// cache-line aligned so a hop touches one line of the packet. Payload
// pointer, baseline fields and header bytes follow (read at the hosts). A
// slot is three lines (192 bytes): the header bytes hold the largest header
// the wire format has (wire::kMaxHeaderSize, 84 bytes, checked where the
// Prism host copies them in), not TxPacket's 128-byte bound.
inline constexpr size_t kSimHeaderBytes = 100;
struct alignas(64) SimPacket {
  SimPacket* next = nullptr;  // intrusive queue link
  // Queued at a port: when it was queued (a switch port decides its
  // transmissions lazily and needs to know what had arrived by then). On a
  // wire: when the packet behind it (`next`) on the same wire arrives at the
  // far end, so that an arrival needs nothing from the next packet's cache
  // line to schedule it.
  Time when = 0;
  uint32_t src = 0;  // source host
  uint32_t dst = 0;  // destination host
  uint32_t entropy = 0;
  uint32_t last_port = 0;  // port it was last transmitted on
  uint32_t epoch = 0;      // that port's link epoch at transmission
  uint32_t payload_len = 0;
  uint16_t header_len = 0;
  uint8_t plane = 0;
  TrafficClass tclass = TrafficClass::kData;
  bool ecn_ce = false;
  bool trimmed = false;
  bool srv6 = false;     // forward by uSID carrier, else ECMP on entropy
  uint8_t usid_len = 0;  // carrier length
  uint8_t usid_pos = 0;  // next uSID to match
  uint8_t hops = 0;
  uint16_t usids[kMaxUsids] = {};
  uint16_t path = 0;  // the engine's path id (read at the hosts)
  // Second and third lines: host-side fields.
  const uint8_t* payload = nullptr;
  Time sent_at = 0;  // baseline transports
  uint32_t bl_flow = 0;
  uint32_t bl_psn = 0;
  uint16_t bl_qp = 0;
  BlType bl_type = BlType::kNone;
  uint8_t header[kSimHeaderBytes];
};
static_assert(offsetof(SimPacket, usids) + sizeof(uint16_t) * kMaxUsids <= 64,
              "per-hop fields must fit the first cache line");
static_assert(sizeof(SimPacket) == 192, "a packet slot is three cache lines");

class PacketPool {
 public:
  PacketPool() = default;
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  SimPacket* Alloc() {
    if (free_ == nullptr) Grow();
    SimPacket* p = free_;
    free_ = p->next;
    // The next Alloc reads that packet's link: start loading it now.
    __builtin_prefetch(free_);
    p->next = nullptr;
    ++allocated_;
    return p;
  }
  void Free(SimPacket* p) {
    p->next = free_;
    free_ = p;
    ++freed_;
  }
  uint64_t allocated() const { return allocated_; }
  uint64_t freed() const { return freed_; }
  uint64_t live() const { return allocated_ - freed_; }
  size_t capacity() const { return chunks_.size() * kChunk; }

 private:
  // A chunk is one 2 MiB block, aligned and marked for transparent huge
  // pages where the kernel offers them (madvise mode): live packets are
  // spread over hundreds of MiB and every hop touches one, so with 4 KiB
  // pages nearly every packet access also missed the TLB.
  static constexpr size_t kChunkBytes = kHugePageBytes;
  static constexpr size_t kChunk = kChunkBytes / sizeof(SimPacket);
  struct ChunkFree {
    void operator()(SimPacket* c) const {
      std::destroy_n(c, kChunk);
      FreeHuge(c);
    }
  };
  void Grow() {
    void* mem = AllocHuge(kChunkBytes);
    SimPacket* c = static_cast<SimPacket*>(mem);
    std::uninitialized_default_construct_n(c, kChunk);
    chunks_.emplace_back(c);
    for (size_t i = 0; i < kChunk; ++i) {
      c[i].next = free_;
      free_ = &c[i];
    }
  }
  std::vector<std::unique_ptr<SimPacket, ChunkFree>> chunks_;
  SimPacket* free_ = nullptr;
  uint64_t allocated_ = 0;
  uint64_t freed_ = 0;
};

// Resets the per-packet fields a fresh packet must not inherit.
inline void ResetPacket(SimPacket* p) {
  p->payload = nullptr;
  p->payload_len = 0;
  p->header_len = 0;
  p->ecn_ce = false;
  p->trimmed = false;
  p->srv6 = false;
  p->usid_len = 0;
  p->usid_pos = 0;
  p->hops = 0;
  p->bl_type = BlType::kNone;
  p->tclass = TrafficClass::kData;
}

}  // namespace prism::sim

#endif  // PRISM_SIM_SIM_PACKET_H_
