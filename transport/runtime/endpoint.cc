// prism::Endpoint implementation: Engine + EventLoop + a datapath adapter.
#include "prism/endpoint.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "transport/backends/udp/udp_datapath.h"
#include "transport/runtime/conn_blob.h"
#include "transport/runtime/datapath_adapter.h"
#include "transport/runtime/endpoint_testing.h"
#include "transport/runtime/event_loop.h"
#include "transport/runtime/route_groups.h"
#include "transport/wire/packet.h"

namespace prism {

Time Endpoint::Now() { return runtime::MonotonicNow(); }

namespace runtime {
namespace {

class UdpAdapter : public DatapathAdapter, public udp::RxResolver {
 public:
  explicit UdpAdapter(std::unique_ptr<udp::UdpDatapath> dp,
                      std::vector<udp::Route> routes)
      : dp_(std::move(dp)), routes_(std::move(routes)) {}
  Datapath* datapath() override { return dp_.get(); }
  std::vector<int> wait_fds() override { return dp_->rx_fds(); }
  void AttachEngine(Engine* engine) override {
    engine_ = engine;
    if (rx_in_place_)
      (void)dp_->SetRxResolver(engine != nullptr ? this : nullptr);
  }
  uint8_t* Resolve(const uint8_t* hdr, size_t hdr_len,
                   size_t payload_len) override {
    return engine_->RxDestination(hdr, hdr_len, payload_len);
  }
  void set_rx_in_place(bool on) { rx_in_place_ = on; }
  // epoll wakes the loop as soon as a packet arrives; polling after the
  // work ran out spends CPU the peer process may need on shared cores
  // (bench/perf/spin_ab.sh; figures and their spread in docs/runtime.md).
  Time idle_spin() const override { return 0; }
  BlobDatapath kind() const override { return BlobDatapath::kUdp; }
  std::vector<uint16_t> FailureGroups(uint16_t num_paths,
                                      uint16_t num_planes) const override {
    return RouteFailureGroups(routes_, num_paths, num_planes);
  }
  uint32_t ReservePeer() override { return dp_->ReservePeer(); }
  absl::Status SetPeer(uint32_t id, const ConnInfoWire& remote) override {
    udp::PeerConfig pc;
    for (const auto& a : remote.planes) pc.planes.push_back({a.addr, a.port});
    pc.routes = routes_;
    return dp_->SetPeer(id, pc);
  }
  void RemovePeer(uint32_t id) override { (void)dp_->RemovePeer(id); }
  absl::Status FillLocal(uint32_t, ConnInfoWire* w) override {
    w->datapath = BlobDatapath::kUdp;
    w->planes.clear();
    for (const auto& p : dp_->local()) w->planes.push_back({p.addr, p.port});
    return absl::OkStatus();
  }
  void FillStats(DatapathStats* s) override {
    const udp::UdpStats u = dp_->stats();
    s->tx_packets = u.tx_packets;
    s->tx_bytes = u.tx_bytes;
    s->rx_packets = u.rx_packets;
    s->rx_bytes = u.rx_bytes;
    s->rx_ecn_ce = u.rx_ecn_ce;
    s->tx_backpressure = u.tx_backpressure;
    s->tx_errors = u.tx_errors;
    s->drops = u.tx_drop_unknown_peer + u.tx_drop_too_big + u.rx_truncated +
               u.rx_errors + u.rx_kernel_drops;
    s->detail = absl::StrCat(
        dp_->raw_mode() ? "mode=raw " : "mode=sockets ",
        "gso=", dp_->gso_enabled() ? 1 : 0, " gro=", dp_->gro_enabled() ? 1 : 0,
        " in_place=", dp_->in_place_enabled() ? 1 : 0, " ", u.ToString());
  }

 private:
  std::unique_ptr<udp::UdpDatapath> dp_;
  std::vector<udp::Route> routes_;
  Engine* engine_ = nullptr;
  bool rx_in_place_ = false;
};

absl::StatusOr<std::unique_ptr<DatapathAdapter>> MakeUdp(
    const EndpointOptions& o) {
  udp::UdpOptions u;
  if (o.local_addrs.empty())
    return absl::InvalidArgumentError("EndpointOptions: no local_addrs");
  if (!o.ifnames.empty() && o.ifnames.size() != o.local_addrs.size())
    return absl::InvalidArgumentError(
        "EndpointOptions: ifnames must be empty or parallel to local_addrs");
  u.planes.clear();
  for (size_t i = 0; i < o.local_addrs.size(); ++i) {
    udp::LocalPlane lp;
    lp.addr = o.local_addrs[i];
    lp.port = o.port;
    if (!o.ifnames.empty()) lp.ifname = o.ifnames[i];
    u.planes.push_back(lp);
  }
  bool source_routed = false;
  for (const auto& r : o.routes) source_routed |= r != "entropy";
  if (o.tx_mode == "auto") {
    // Raw IPv6 only where it is needed (uSID checksums, SRHs): UDP sockets
    // keep the kernel's checksum offload, which raw mode must compute in
    // software on both ends.
    u.tx_mode = source_routed ? udp::TxMode::kAuto : udp::TxMode::kSockets;
  } else if (o.tx_mode == "raw") {
    u.tx_mode = udp::TxMode::kRaw;
  } else if (o.tx_mode == "sockets") {
    u.tx_mode = udp::TxMode::kSockets;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("EndpointOptions: tx_mode must be auto|raw|sockets, not '",
                     o.tx_mode, "'"));
  }
  u.sockets_per_plane = o.sockets_per_plane;
  u.link_mtu = o.link_mtu;
  u.accept_zero_checksum = o.accept_zero_checksum;
  u.gso = o.gso;
  u.gro = o.gro;
  u.rx_in_place = o.rx_in_place;
  std::vector<udp::Route> routes;
  for (const auto& r : o.routes) {
    auto route = udp::ParseRoute(r);
    if (!route.ok()) return route.status();
    u.max_srh_segments = std::max<uint16_t>(
        u.max_srh_segments, static_cast<uint16_t>(route->segments.size()));
    routes.push_back(*route);
  }
  auto dp = udp::UdpDatapath::Create(u);
  if (!dp.ok()) return dp.status();
  auto adapter =
      std::make_unique<UdpAdapter>(std::move(*dp), std::move(routes));
  adapter->set_rx_in_place(o.rx_in_place);
  return std::unique_ptr<DatapathAdapter>(std::move(adapter));
}

class EndpointImpl : public Endpoint {
 public:
  EndpointImpl(const EndpointOptions& o, std::unique_ptr<DatapathAdapter> dp,
               uint32_t mtu_payload)
      : opt_(o), dp_(std::move(dp)), mtu_payload_(mtu_payload) {
    EngineOptions eo;
    eo.seed = o.seed;
    eo.mtu_payload = mtu_payload;
    eo.max_packet_bytes = dp_->datapath()->mtu();
    eo.max_connections = o.max_connections;
    eo.cq_capacity = o.cq_capacity;
    eo.placer = dp_->placer();
    engine_ = std::make_unique<Engine>(eo);
    dp_->AttachEngine(engine_.get());
    LoopOptions lo;
    lo.busy_poll = o.busy_poll;
    lo.cpu = o.cpu;
    lo.submit_queue_size = o.submit_queue_size;
    lo.wait_fds = dp_->wait_fds();
    lo.max_sleep = dp_->max_sleep();
    lo.spin =
        o.idle_spin_us >= 0 ? o.idle_spin_us * kMicrosecond : dp_->idle_spin();
    if (dp_->has_arm_wait()) {
      DatapathAdapter* a = dp_.get();
      lo.arm_wait = [a] { a->ArmWait(); };
    }
    lo.completion_filter = dp_->completion_filter();
    lo.cq_capacity = o.cq_capacity;
    loop_ = std::make_unique<EventLoop>(engine_.get(), dp_->datapath(), lo);
  }
  ~EndpointImpl() override { loop_->Stop(); }

  absl::Status Start() { return loop_->Start(); }

  absl::StatusOr<ConnId> CreateConnection() override {
    return CreateConnection(opt_.connection);
  }
  absl::StatusOr<ConnId> CreateConnection(
      const ConnectionOptions& options) override {
    absl::StatusOr<ConnId> out = absl::InternalError("not run");
    loop_->Run([&](Time) {
      const uint32_t peer = dp_->ReservePeer();
      if (peer == 0) {
        out = dp_->reserve_error();
        if (out.ok()) out = absl::ResourceExhaustedError("no peer slot");
        return;
      }
      ConnectionOptions co = options;
      co.peer = peer;
      if (co.path_groups.empty() && opt_.route_failure_groups) {
        co.path_groups = dp_->FailureGroups(co.num_paths, co.num_planes);
      }
      out = engine_->CreateConnection(co);
      if (out.ok()) {
        peers_[*out] = peer;
        dp_->BindConnection(peer, *out);
      } else {
        dp_->RemovePeer(peer);
      }
    });
    return out;
  }

  absl::StatusOr<ConnectionBlob> LocalInfo(ConnId conn) override {
    absl::StatusOr<ConnectionBlob> out = absl::InternalError("not run");
    loop_->Run([&](Time) {
      if (!peers_.count(conn)) {
        out = absl::NotFoundError(absl::StrCat("no connection ", conn));
        return;
      }
      ConnInfoWire w;
      w.info = engine_->LocalInfo(conn);
      absl::Status s = dp_->FillLocal(peers_[conn], &w);
      if (!s.ok()) {
        out = s;
        return;
      }
      out = EncodeBlob(w);
    });
    return out;
  }

  absl::Status Connect(ConnId conn, const ConnectionBlob& remote) override {
    auto w = DecodeBlob(remote);
    if (!w.ok()) return w.status();
    if (w->datapath != dp_->kind())
      return absl::InvalidArgumentError(
          "connection blob is for a different datapath");
    absl::Status out;
    loop_->Run([&](Time) {
      auto it = peers_.find(conn);
      if (it == peers_.end()) {
        out = absl::NotFoundError(absl::StrCat("no connection ", conn));
        return;
      }
      out = dp_->SetPeer(it->second, *w);
      if (out.ok()) out = engine_->Connect(conn, w->info);
    });
    return out;
  }

  absl::Status CloseConnection(ConnId conn) override {
    absl::Status out;
    loop_->Run([&](Time) {
      out = engine_->CloseConnection(conn);
      // The WRITEs of it the loop still holds complete with kCancelled,
      // after the engine's.
      if (out.ok()) loop_->ConnectionClosed(conn);
      auto it = peers_.find(conn);
      if (out.ok() && it != peers_.end()) {
        // The peer slot stays reserved until the engine stops sending to it;
        // closed connections send nothing, so release it now.
        dp_->RemovePeer(it->second);
        peers_.erase(it);
      }
    });
    return out;
  }

  absl::StatusOr<MemoryRegion> RegisterMemory(void* addr, uint64_t length,
                                              uint32_t access) override {
    absl::StatusOr<MemoryRegion> out = absl::InternalError("not run");
    loop_->Run([&](Time) {
      out = engine_->RegisterMemory(addr, length, access);
      if (!out.ok()) return;
      absl::Status s = dp_->RegisterMemory(*out, addr);
      if (!s.ok()) {
        (void)engine_->DeregisterMemory(out->lkey);
        out = s;
      }
    });
    return out;
  }
  absl::Status DeregisterMemory(uint32_t lkey) override {
    absl::Status out;
    loop_->Run([&](Time) {
      out = engine_->DeregisterMemory(lkey);
      if (out.ok()) dp_->DeregisterMemory(lkey);
    });
    return out;
  }

  absl::Status PostWrite(ConnId conn, const WriteRequest& req) override {
    if (conn == kInvalidConn)
      return absl::InvalidArgumentError("PostWrite: connection id 0");
    if (req.length > 0 && req.local_addr == nullptr)
      return absl::InvalidArgumentError("PostWrite: null local_addr");
    if (req.length > 0xffffffffull)
      return absl::InvalidArgumentError("PostWrite: length above 2^32-1");
    return loop_->Post(conn, req);
  }
  size_t PollCompletions(Completion* out, size_t max) override {
    return loop_->Poll(out, max);
  }
  size_t WaitCompletions(Completion* out, size_t max, Time timeout) override {
    return loop_->Wait(out, max, timeout);
  }

  EngineStats stats() override {
    EngineStats s;
    loop_->Run([&](Time) { s = engine_->stats(); });
    return s;
  }
  absl::StatusOr<ConnectionStats> connection_stats(ConnId conn) override {
    absl::StatusOr<ConnectionStats> out = absl::InternalError("not run");
    loop_->Run([&](Time) { out = engine_->connection_stats(conn); });
    return out;
  }
  absl::StatusOr<PathStats> path_stats(ConnId conn, PathId path) override {
    absl::StatusOr<PathStats> out = absl::InternalError("not run");
    loop_->Run([&](Time) { out = engine_->path_stats(conn, path); });
    return out;
  }
  DatapathStats datapath_stats() override {
    DatapathStats s;
    dp_->FillStats(&s);
    const LoopCounters c = loop_->counters();
    s.loop_iterations = c.iterations;
    s.loop_sleeps = c.sleeps;
    s.loop_stalls = c.stalls;
    s.loop_stall_time = c.stall_time;
    s.loop_max_gap = c.max_gap;
    s.loop_wakeups = c.loop_wakeups;
    s.app_wakeups = c.app_wakeups;
    s.writes_refused_cq_full = c.writes_refused_cq_full;
    s.cq_full_stalls = c.cq_full_stalls;
    s.cq_depth = c.cq_depth;
    s.cq_peak = c.cq_peak;
    return s;
  }
  absl::Status SetPlaneUp(ConnId conn, uint16_t plane, bool up) override {
    absl::Status out;
    loop_->Run(
        [&](Time now) { out = engine_->SetPlaneUp(conn, plane, up, now); });
    return out;
  }
  uint32_t mtu_payload() const override { return mtu_payload_; }

  void RunOnLoop(const std::function<void()>& fn) {
    loop_->Run([&](Time) { fn(); });
  }

 private:
  EndpointOptions opt_;
  std::unique_ptr<DatapathAdapter> dp_;
  uint32_t mtu_payload_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EventLoop> loop_;
  std::map<ConnId, uint32_t> peers_;  // loop thread only
};

}  // namespace

absl::Status RunOnLoopThreadForTesting(Endpoint& endpoint,
                                       const std::function<void()>& fn) {
  auto* impl = dynamic_cast<EndpointImpl*>(&endpoint);
  if (impl == nullptr)
    return absl::InvalidArgumentError("not an Endpoint made by Create()");
  impl->RunOnLoop(fn);
  return absl::OkStatus();
}

}  // namespace runtime

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Create(
    const EndpointOptions& options) {
  // Checked here, not first by the engine's CreateConnection: the
  // endpoint's own queue is sized from it.
  if (options.cq_capacity == 0 ||
      options.cq_capacity > EndpointOptions::kMaxCqCapacity)
    return absl::InvalidArgumentError(absl::StrCat(
        "EndpointOptions: cq_capacity must be in [1, ",
        EndpointOptions::kMaxCqCapacity, "], got ", options.cq_capacity));
  absl::StatusOr<std::unique_ptr<runtime::DatapathAdapter>> dp;
  if (options.datapath == "udp") {
    dp = runtime::MakeUdp(options);
  } else if (options.datapath == "loopback") {
    dp = runtime::MakeLoopbackAdapter(options);
  } else if (options.datapath == "verbs") {
    dp = runtime::MakeVerbsAdapter(options);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "EndpointOptions: datapath must be 'udp', 'loopback' or 'verbs', "
        "not '",
        options.datapath, "'"));
  }
  if (!dp.ok()) return dp.status();
  const size_t dp_mtu = (*dp)->datapath()->mtu();
  if (dp_mtu <= wire::kDataHeaderSize + 64)
    return absl::InvalidArgumentError("datapath MTU too small");
  uint32_t mtu_payload = static_cast<uint32_t>(
      std::min<size_t>(dp_mtu - wire::kDataHeaderSize, wire::kMaxPayloadLen));
  if (options.mtu_payload != 0) {
    if (options.mtu_payload > mtu_payload)
      return absl::InvalidArgumentError(absl::StrCat(
          "EndpointOptions: mtu_payload ", options.mtu_payload,
          " exceeds what the datapath carries (", mtu_payload, ")"));
    mtu_payload = options.mtu_payload;
  }
  auto ep = std::make_unique<runtime::EndpointImpl>(options, std::move(*dp),
                                                    mtu_payload);
  absl::Status s = ep->Start();
  if (!s.ok()) return s;
  return std::unique_ptr<Endpoint>(std::move(ep));
}

}  // namespace prism
