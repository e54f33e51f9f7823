// Failure groups for a UDP endpoint's source routes: the fate-sharing hint
// (ConnectionOptions::path_groups) derived from EndpointOptions::routes.
//
// Contract: path p of a connection leaves through local plane
// p % num_planes and follows routes[p % routes.size()] (udp_datapath.h).
// Paths on the same plane whose routes are equal (same kind, same uSID
// carrier or the same SRH segments) cross the same switches and links, so
// they share a failure group; a path on an entropy route (ECMP decides
// where it goes) shares fate with no other path (kNoFailureGroup). Ids are
// plane x distinct routes + the route's index among the distinct source
// routes in list order, so every connection of one endpoint (one engine)
// gives the same fabric route the same id, as the engine requires; an id
// that would not fit below kNoFailureGroup is kNoFailureGroup. Returns an
// empty vector (no hint) when fewer than two groups would result: with
// one group neither fate sharing nor group balance has anything to act on.
// Pure; no allocation beyond the result.
#ifndef PRISM_TRANSPORT_RUNTIME_ROUTE_GROUPS_H_
#define PRISM_TRANSPORT_RUNTIME_ROUTE_GROUPS_H_

#include <cstdint>
#include <vector>

#include "transport/backends/udp/udp_datapath.h"

namespace prism::runtime {

std::vector<uint16_t> RouteFailureGroups(const std::vector<udp::Route>& routes,
                                         uint16_t num_paths,
                                         uint16_t num_planes);

}  // namespace prism::runtime

#endif  // PRISM_TRANSPORT_RUNTIME_ROUTE_GROUPS_H_
