// Loopback datapath: connects engines inside one process through per-path
// queues with configurable delay, rate and seeded faults. A virtual-time
// device: nothing happens on its own; the driver passes `now` to TxBurst /
// RxBurst and advances time to min(NextArrivalTime(), engines'
// NextEventTime()).
//
// Model. A LoopbackNetwork owns ports (AddPort()). A packet sent on port s
// with TxPacket::peer = d and TxPacket::path = p is copied at TxBurst into a
// pooled buffer (header + payload gathered), then:
//   departure = serialization on port s (port_rate_bps, 0 = infinite) and on
//               path (s, p) (path_rate_bps, 0 = infinite), FIFO per path;
//   arrival   = departure + delay (+ a random extra delay when reordered).
// RxBurst(now) on port d returns the packets with arrival <= now in arrival
// order (ties by send order), contiguous (RxPacket::payload == nullptr).
//
// Faults (FaultPlan, all from one seeded Rng, decided at TxBurst in this
// order): blackhole windows (drop everything sent on the chosen paths
// between start and end), Gilbert-Elliott burst loss (one chain per source
// port), independent random loss, trimming (DATA packets with payload only:
// the payload is cut, RxPacket::trimmed set; the header is untouched so its
// checksum still verifies), corruption (one random bit of the payload is
// flipped, or of the header when there is no payload), ECN CE marking,
// duplication (a second copy with its own delay), reordering (extra delay
// uniform in [0, reorder_max_delay]). Same plan + same seed + same calls =
// same deliveries.
//
// Contract: never allocates per packet once the pool is warm (buffers are
// recycled; the pool and the arrival heap grow in chunks only when
// exhausted). Packets larger than LinkConfig::max_packet_bytes or addressed
// to an unknown port are dropped and counted in LoopbackStats::refused; like
// a wire, TxBurst always accepts all n (it loses packets, it never pushes
// back). RxPacket views stay valid until the next RxBurst on the same port.
//
// Thread safety: none; one thread drives the whole network.
#ifndef PRISM_TRANSPORT_BACKENDS_LOOPBACK_LOOPBACK_H_
#define PRISM_TRANSPORT_BACKENDS_LOOPBACK_LOOPBACK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "prism/packet.h"
#include "prism/types.h"
#include "transport/base/random.h"
#include "transport/datapath.h"

namespace prism::loopback {

struct LinkConfig {
  Time delay = 2 * kMicrosecond;  // one-way propagation + switching
  uint64_t port_rate_bps = 0;     // per sending port; 0 = infinite
  uint64_t path_rate_bps = 0;     // per (port, path) queue; 0 = infinite
  uint32_t max_packet_bytes = 9216;
};

// Drops every packet sent in [start, end) from port `src` (-1 = any) to port
// `dst` (-1 = any) on paths [path_lo, path_hi].
struct Blackhole {
  int src = -1;
  int dst = -1;
  uint32_t path_lo = 0;
  uint32_t path_hi = 0xFFFF;
  Time start = 0;
  Time end = kTimeInfinite;
};

struct FaultPlan {
  uint64_t seed = 1;
  double loss = 0;  // independent loss probability per packet
  // Gilbert-Elliott burst loss: per packet, GOOD -> BAD with p_enter_bad,
  // BAD -> GOOD with p_leave_bad; in BAD a packet is lost with loss_in_bad.
  double p_enter_bad = 0;
  double p_leave_bad = 0.25;
  double loss_in_bad = 1.0;
  double trim = 0;             // DATA with payload: cut to its header
  double corrupt = 0;          // flip one bit
  double ecn = 0;              // mark ECN CE
  double duplicate = 0;        // deliver twice
  double reorder = 0;          // add a random extra delay ...
  Time reorder_max_delay = 0;  // ... uniform in [0, this]
  // Apply loss/corruption/duplication/reordering to control packets too
  // (trimming never applies to them: switches do not trim that class).
  bool control_faults = true;
  std::vector<Blackhole> blackholes;
};

struct LoopbackStats {
  uint64_t tx_packets = 0;
  uint64_t delivered = 0;
  uint64_t lost_random = 0;
  uint64_t lost_burst = 0;
  uint64_t lost_blackhole = 0;
  uint64_t refused = 0;  // too big / unknown destination port
  uint64_t trimmed = 0;
  uint64_t corrupted = 0;
  uint64_t ecn_marked = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;

  std::string ToString() const;
};

class LoopbackNetwork;

class LoopbackPort final : public Datapath {
 public:
  size_t mtu() const override;
  size_t TxBurst(Time now, const TxPacket* pkts, size_t n) override;
  size_t RxBurst(Time now, RxPacket* pkts, size_t n) override;
  int id() const { return id_; }
  // Earliest arrival queued for this port; kTimeInfinite if none.
  Time NextArrivalTime() const;

 private:
  friend class LoopbackNetwork;
  struct InFlight {
    Time arrival;
    uint64_t seq;
    uint32_t buf;
    uint32_t len;
    bool trimmed;
    bool ecn;
  };
  struct Later {
    bool operator()(const InFlight& a, const InFlight& b) const {
      return a.arrival != b.arrival ? a.arrival > b.arrival : a.seq > b.seq;
    }
  };
  LoopbackPort(LoopbackNetwork* net, int id) : net_(net), id_(id) {}

  LoopbackNetwork* net_;
  int id_;
  std::vector<InFlight> heap_;   // arrivals for this port
  std::vector<uint32_t> held_;   // buffers handed out by the last RxBurst
  std::vector<Time> path_busy_;  // per outgoing path: FIFO busy-until
  Time port_busy_ = 0;
  bool ge_bad_ = false;
};

class LoopbackNetwork {
 public:
  explicit LoopbackNetwork(const LinkConfig& link,
                           const FaultPlan& faults = {});
  ~LoopbackNetwork();
  LoopbackNetwork(const LoopbackNetwork&) = delete;
  LoopbackNetwork& operator=(const LoopbackNetwork&) = delete;

  // Adds a port; its id() is the TxPacket::peer value that reaches it.
  LoopbackPort* AddPort();
  LoopbackPort* port(int id) { return ports_[id].get(); }
  size_t num_ports() const { return ports_.size(); }

  // Replaces the fault plan (re-seeds the fault generator).
  void SetFaultPlan(const FaultPlan& faults);
  void AddBlackhole(const Blackhole& b) { faults_.blackholes.push_back(b); }
  const FaultPlan& fault_plan() const { return faults_; }
  const LinkConfig& link() const { return link_; }

  // Earliest arrival at any port; kTimeInfinite when nothing is in flight.
  Time NextArrivalTime() const;
  size_t in_flight() const;
  const LoopbackStats& stats() const { return stats_; }

 private:
  friend class LoopbackPort;
  void Send(LoopbackPort* src, Time now, const TxPacket& p);
  void Enqueue(LoopbackPort* dst, Time arrival, uint32_t buf, uint32_t len,
               bool trimmed, bool ecn);
  uint32_t AllocBuf();
  void FreeBuf(uint32_t b) { free_.push_back(b); }
  uint8_t* Buf(uint32_t b) {
    return slabs_[b / kSlab].get() + (b % kSlab) * buf_size_;
  }
  bool Blackholed(int src, int dst, uint32_t path, Time now) const;

  static constexpr uint32_t kSlab = 256;
  LinkConfig link_;
  FaultPlan faults_;
  Rng rng_;
  LoopbackStats stats_;
  std::vector<std::unique_ptr<LoopbackPort>> ports_;
  std::vector<std::unique_ptr<uint8_t[]>> slabs_;
  std::vector<uint32_t> free_;
  uint32_t buf_size_;
  uint64_t seq_ = 0;
};

}  // namespace prism::loopback

#endif  // PRISM_TRANSPORT_BACKENDS_LOOPBACK_LOOPBACK_H_
