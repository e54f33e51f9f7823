#include "transport/runtime/route_groups.h"

#include <algorithm>
#include <set>

#include "prism/types.h"

namespace prism::runtime {
namespace {

bool SameRoute(const udp::Route& a, const udp::Route& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case udp::RouteKind::kEntropy:
      return true;
    case udp::RouteKind::kUsid:
      return a.usid_carrier == b.usid_carrier;
    case udp::RouteKind::kSrh:
      return a.segments == b.segments;
  }
  return false;
}

}  // namespace

std::vector<uint16_t> RouteFailureGroups(const std::vector<udp::Route>& routes,
                                         uint16_t num_paths,
                                         uint16_t num_planes) {
  if (routes.empty() || num_paths == 0 || num_planes == 0) return {};
  // Each route's index among the distinct source routes (-1: entropy).
  std::vector<int> distinct(routes.size(), -1);
  int n_distinct = 0;
  for (size_t i = 0; i < routes.size(); ++i) {
    if (routes[i].kind == udp::RouteKind::kEntropy) continue;
    for (size_t j = 0; j < i; ++j) {
      if (distinct[j] >= 0 && SameRoute(routes[i], routes[j])) {
        distinct[i] = distinct[j];
        break;
      }
    }
    if (distinct[i] < 0) distinct[i] = n_distinct++;
  }
  if (n_distinct == 0) return {};
  std::vector<uint16_t> groups(num_paths, kNoFailureGroup);
  std::set<uint16_t> seen;
  for (uint32_t p = 0; p < num_paths; ++p) {
    const int d = distinct[p % routes.size()];
    if (d < 0) continue;
    const uint64_t id = uint64_t{p % num_planes} * n_distinct + d;
    if (id >= kNoFailureGroup) continue;
    groups[p] = static_cast<uint16_t>(id);
    seen.insert(groups[p]);
  }
  if (seen.size() < 2) return {};
  return groups;
}

}  // namespace prism::runtime
