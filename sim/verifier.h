// Payload source and delivery checker shared by every transport.
//
// Senders read payload from one shared, read-only pattern buffer (message m
// of flow f is read from pattern + shift(f)); receivers never need real
// memory: each flow's destination is a virtual address range
// (DestAddr(f) + offset) that is never dereferenced. Every placement is
// checked against the pattern byte for byte and recorded in a per-flow
// packet bitmap, so the run can assert "every byte delivered exactly once
// and intact" without storing received data.
//
// Contract: packets are numbered per flow by (message, MTU-sized piece);
// placements must start on those boundaries (misaligned or out-of-range
// placements count as mismatches).
//
// Thread safety: none.
#ifndef PRISM_SIM_VERIFIER_H_
#define PRISM_SIM_VERIFIER_H_

#include <cstdint>
#include <vector>

#include "prism/engine.h"
#include "sim/workload.h"

namespace prism::sim {

class Verifier {
 public:
  static constexpr uint64_t kDestBase = 0x100000000000ull;
  static constexpr int kDestShift = 34;  // 16 GiB per flow (>= 2^34 bytes)

  Verifier(const std::vector<Flow>* flows, uint32_t mtu, bool check_bytes);

  const uint8_t* pattern() const { return pattern_.data(); }
  uint64_t pattern_size() const { return pattern_.size(); }
  // Source address of every message of `flow`.
  const uint8_t* Source(uint32_t flow) const {
    return pattern_.data() + Shift(flow);
  }
  uint64_t DestAddr(uint32_t flow) const {
    return kDestBase + (static_cast<uint64_t>(flow) << kDestShift);
  }
  uint32_t packets(uint32_t flow) const { return packets_[flow]; }
  // Offset and length of packet k of a flow.
  void PacketRange(uint32_t flow, uint32_t k, uint64_t* offset,
                   uint32_t* len) const;

  // Records payload landing at flow offset `offset`. Returns false (and
  // counts) on a mismatch or bad range; duplicates are counted.
  bool Place(uint32_t flow, uint64_t offset, const uint8_t* src, uint32_t len);
  // Same, by destination address (the engine's Placer path).
  bool PlaceAt(uint64_t addr, const uint8_t* src, uint32_t len);

  uint64_t delivered(uint32_t flow) const { return delivered_[flow]; }
  uint64_t total_delivered() const { return total_delivered_; }
  uint64_t duplicates() const { return duplicates_; }
  uint64_t mismatches() const { return mismatches_; }

 private:
  uint64_t Shift(uint32_t flow) const { return (flow % 251) * 4099 % 65536; }

  const std::vector<Flow>* flows_;
  uint32_t mtu_;
  int mtu_shift_;  // log2(mtu_) when a power of two, else -1
  bool check_bytes_;
  std::vector<uint8_t> pattern_;
  std::vector<uint32_t> packets_;
  std::vector<uint32_t> per_msg_;  // packets per full message
  std::vector<uint64_t> bitmap_base_;
  std::vector<uint64_t> bitmap_;
  std::vector<uint64_t> delivered_;
  uint64_t total_delivered_ = 0;
  uint64_t duplicates_ = 0;
  uint64_t mismatches_ = 0;
};

// Engine placer that checks instead of copying (receivers own no memory).
class VerifyingPlacer : public Placer {
 public:
  explicit VerifyingPlacer(Verifier* v) : v_(v) {}
  bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
             const MemoryRegion& region) override;

 private:
  Verifier* v_;
};

}  // namespace prism::sim

#endif  // PRISM_SIM_VERIFIER_H_
