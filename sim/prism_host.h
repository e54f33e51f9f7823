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

#include <cstdint>
#include <memory>
#include <vector>

#include "sim/fabric.h"
#include "sim/simulator.h"

namespace prism::sim {

std::unique_ptr<TransportDriver> MakePrismDriver(const TransportConfig& tc);

// Fabric::BuildCarrier's choice for engine path `path` from `host` to
// `peer`: the path's index within its plane plus the pair's spread
// (routing::PairSpread, from which routing::PathSet offsets a pair's
// spines). Every sender walks its path ids in the same order (the
// selector's rotation starts at path 0); without the spread, path id x
// would leave every host of a T0 on the same uplink at about the same time.
// (q + s) mod n is a bijection, so the pair's distinct carriers stay
// distinct.
uint32_t CarrierChoice(uint32_t planes, uint32_t host, uint32_t peer,
                       uint16_t path);
// The failure groups of `host`'s first `num_paths` paths to `peer` (fate
// sharing, ConnectionOptions::path_groups): routing::FailureGroupOf of the
// plane and the uplink its carrier leaves the source T0 on (CarrierChoice
// mod Fabric::CarrierFanout; the T0's uplinks are in port order, the same
// for every destination, so an id names one physical uplink and T1 across
// all of the host's connections). kNoFailureGroup on one T0. Symmetric:
// the same for (peer, host).
std::vector<uint16_t> CarrierFailureGroups(const Fabric& fabric, uint32_t host,
                                           uint32_t peer, uint16_t num_paths);

}  // namespace prism::sim

#endif  // PRISM_SIM_PRISM_HOST_H_
