// The Prism transport in the simulator: every host runs a real
// prism::Engine through a simulated datapath (this adapter).
//
// Datapath model:
// - Transmit: the NIC has one port per plane, each with a small transmit
//   queue. While any port that is up has room (fewer than
//   FabricConfig::nic_queue_packets queued), the host pulls packets with
//   Engine::PollTransmit and puts each on the port of its path's plane
//   (plane = path % planes). The packet carries a copy of the header bytes
//   and a pointer to the payload (no payload copy).
// - Routing of engine path id p (docs/simulator.md): plane = p % planes;
//   the rest, c = p / planes, picks the uplinks: with SRv6 the carrier is
//   [src T0, the (c mod #uplinks)-th T1, dst T0] (fat tree: mixed radix
//   over both up hops); with ECMP the entropy value is a hash of (src, dst,
//   p) and switches hash it.
// - Receive: packets arriving within rx_batch (250 ns) are handed to
//   Engine::OnReceive together (at most 32), as a polling driver would,
//   in split mode (header bytes + payload pointer); ECN CE and trimming are
//   reported with RxPacket::ecn_ce / RxPacket::trimmed.
// - Placement: the engine's Placer is a VerifyingPlacer, so receivers need
//   no memory and every byte is checked.
// - A NIC port going down is reported with Engine::SetPlaneUp on every
//   connection of the host (the engine tells the peer).
// One connection per unordered host pair carries the flows both ways. A
// connection's ConnectionOptions::peer (opaque to the engine, copied into
// every TxPacket) is its endpoint slot in the driver, which maps to the
// peer host and the pair's spread per plane (routing::PairSpread), both
// cached at setup.
#ifndef PRISM_SIM_PRISM_HOST_H_
#define PRISM_SIM_PRISM_HOST_H_

#include <memory>

#include "sim/simulator.h"

namespace prism::sim {

std::unique_ptr<TransportDriver> MakePrismDriver(const TransportConfig& tc);

}  // namespace prism::sim

#endif  // PRISM_SIM_PRISM_HOST_H_
