#include "transport/nccl/endpoint_pool.h"

#ifdef PRISM_NCCL_HAVE_ENDPOINT

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "transport/nccl/log.h"

namespace prism::nccl {
namespace {

std::mutex g_pool_mu;
std::vector<std::unique_ptr<DeviceEndpoint>>* g_pool =
    new std::vector<std::unique_ptr<DeviceEndpoint>>();
// SetFactoryForTesting (guarded by g_pool_mu); nullptr: Endpoint::Create.
DeviceEndpoint::Factory g_factory = nullptr;

}  // namespace

absl::StatusOr<DeviceEndpoint*> DeviceEndpoint::Acquire(
    const DeviceContext& dev) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (g_pool->size() <= static_cast<size_t>(dev.index)) {
    g_pool->resize(dev.index + 1);
  }
  std::unique_ptr<DeviceEndpoint>& slot = (*g_pool)[dev.index];
  if (slot == nullptr) slot = std::make_unique<DeviceEndpoint>();
  if (slot->ep_ == nullptr) {
    const PluginConfig& c = *dev.config;
    const DeviceConfig& d = *dev.device;
    EndpointOptions o;
    if (c.mode == DataMode::kPrismVerbs) {
      o.datapath = "verbs";
      o.device = d.ib_device;
      o.verbs_qps = c.ib_qps;
      o.verbs_mode = c.ib_mode;
    } else {
      o.datapath = "udp";
      o.local_addrs = d.plane_addrs;
    }
    o.port = c.port;
    o.tx_mode = c.udp_tx_mode;
    o.link_mtu = c.link_mtu;
    o.busy_poll = c.busy_poll;
    o.idle_spin_us = c.spin_us;
    o.gso = c.udp_gso;
    o.gro = c.udp_gro;
    o.rx_in_place = c.udp_rx_in_place;
    if (c.seed != 0) {
      o.seed = c.seed + dev.index;
    } else {
      std::random_device rd;
      o.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    o.connection.num_paths = c.paths;
    o.connection.num_planes = c.mode == DataMode::kPrismVerbs
                                  ? 1
                                  : static_cast<uint16_t>(d.plane_addrs.size());
    o.connection.congestion = c.congestion;
    o.connection.base_rtt = static_cast<Time>(c.base_rtt_us) * kMicrosecond;
    if (c.mode == DataMode::kPrismVerbs) {
      // RDMA NICs (and soft-RoCE most of all) complete in bursts: timers
      // scale with the configured RTT instead of the 50 us defaults, which
      // fire on every completion hiccup (docs/verbs.md, "Timers"); the
      // RTO ceiling 8 x that floor (as prism_perf's --rto-max default), so
      // backoff can rise above soft-RoCE's 30-200 ms queueing RTTs.
      const Time t = 40 * o.connection.base_rtt;
      o.connection.rto_max = std::max(o.connection.rto_max, 8 * t);
      o.connection.rto_min = std::max(o.connection.rto_min, t);
      o.connection.probe_interval = std::max(o.connection.probe_interval, t);
    }
    // Explicit timers (PRISM_RTO_MIN_US, PRISM_PROBE_US) win over both.
    if (c.rto_min_us != 0) {
      o.connection.rto_min = static_cast<Time>(c.rto_min_us) * kMicrosecond;
      o.connection.rto_max =
          std::max(o.connection.rto_max, 8 * o.connection.rto_min);
    }
    if (c.probe_us != 0) {
      o.connection.probe_interval =
          static_cast<Time>(c.probe_us) * kMicrosecond;
    }
    o.connection.path_policy = c.path_policy;
    o.connection.link_rate_bps =
        static_cast<uint64_t>(d.speed_mbps) * 1'000'000ull;
    auto ep = g_factory != nullptr ? g_factory(o) : Endpoint::Create(o);
    if (!ep.ok()) return ep.status();
    slot->ep_ = std::move(*ep);
    PRISM_NCCL_INFO(
        "dev %d: Prism endpoint up (%s): %zu plane(s) starting at %s, "
        "%u paths, congestion %s, policy %s, mtu payload %u, gso %d gro %d "
        "in-place %d, "
        "rto_min %lld us, probe %lld us",
        dev.index, o.datapath.c_str(), d.plane_addrs.size(),
        c.mode == DataMode::kPrismVerbs
            ? (d.ib_device.empty() ? "first rdma device" : d.ib_device.c_str())
        : d.plane_addrs.empty() ? "?"
                                : d.plane_addrs[0].c_str(),
        c.paths, c.congestion.c_str(), c.path_policy.c_str(),
        slot->ep_->mtu_payload(), o.gso ? 1 : 0, o.gro ? 1 : 0,
        o.rx_in_place ? 1 : 0,
        static_cast<long long>(o.connection.rto_min / kMicrosecond),
        static_cast<long long>(o.connection.probe_interval / kMicrosecond));
  }
  ++slot->users_;
  return slot.get();
}

void DeviceEndpoint::Release() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (users_ > 0) --users_;
}

void DeviceEndpoint::ReleaseIdleEndpoints() {
  std::vector<std::unique_ptr<Endpoint>> doomed;
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    for (auto& d : *g_pool) {
      if (d != nullptr && d->users_ == 0 && d->ep_ != nullptr) {
        doomed.push_back(std::move(d->ep_));
      }
    }
  }
  doomed.clear();  // joins the loop threads, outside the pool lock
}

void DeviceEndpoint::SetFactoryForTesting(Factory factory) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_factory = factory;
}

void DeviceEndpoint::AddRoute(ConnId conn, CompletionSink* sink) {
  std::lock_guard<std::mutex> lock(route_mu_);
  routes_[conn] = sink;
}

void DeviceEndpoint::RemoveRoute(ConnId conn) {
  std::lock_guard<std::mutex> lock(route_mu_);
  routes_.erase(conn);
}

void DeviceEndpoint::Poll() {
  std::unique_lock<std::mutex> lock(poll_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  Completion* const cq = cq_;
  for (;;) {
    const size_t n = ep_->PollCompletions(cq, 64);
    if (n == 0) return;
    std::lock_guard<std::mutex> rlock(route_mu_);
    for (size_t i = 0; i < n; ++i) {
      auto it = routes_.find(cq[i].conn);
      if (it == routes_.end()) {
        ++unrouted_;  // a closed comm's late completion
        continue;
      }
      it->second->Deliver(cq[i]);
    }
    if (n < 64) return;
  }
}

}  // namespace prism::nccl

#endif  // PRISM_NCCL_HAVE_ENDPOINT
