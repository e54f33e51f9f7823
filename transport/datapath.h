// Datapath: where packets enter and leave Prism.
//
// A datapath moves batches of packets between the engine and a network
// (in-process loopback, UDP/IPv6 sockets, DPDK, verbs queue pairs, the
// simulator's NIC). It maps a TxPacket's (peer, path) to a physical route:
// an SRv6 uSID carrier, an SRH, an entropy value, a queue pair.
//
// Contract:
// - Burst API: TxBurst/RxBurst move up to `n` packets per call and return how
//   many they moved; fewer means back-pressure (tx) or nothing pending (rx).
// - RxBurst fills RxPacket views into buffers the datapath owns; they stay
//   valid until the next RxBurst call on the same datapath.
// - A datapath never allocates per packet and never blocks.
// - A packet larger than mtu() is consumed, dropped and counted in the
//   datapath's own stats (it is not back-pressure: TxBurst returns it as
//   moved). The engine does not learn of it per packet, so an engine whose
//   DATA packets (64 + EngineOptions::mtu_payload bytes) exceed mtu() would
//   retransmit until its connection_timeout: give the engine the limit in
//   EngineOptions::max_packet_bytes (= mtu()) and CreateConnection refuses
//   such a configuration with InvalidArgument.
//
// Thread safety: a datapath is used by one thread (the engine's driver).
#ifndef PRISM_TRANSPORT_DATAPATH_H_
#define PRISM_TRANSPORT_DATAPATH_H_

#include <cstddef>

#include "prism/packet.h"

namespace prism {

class Datapath {
 public:
  virtual ~Datapath() = default;

  // Largest header+payload this datapath carries in one packet.
  virtual size_t mtu() const = 0;
  // Transmits up to n packets at time `now`; returns the number accepted.
  virtual size_t TxBurst(Time now, const TxPacket* pkts, size_t n) = 0;
  // Receives up to n packets that have arrived by `now`; returns the count.
  virtual size_t RxBurst(Time now, RxPacket* pkts, size_t n) = 0;
};

}  // namespace prism

#endif  // PRISM_TRANSPORT_DATAPATH_H_
