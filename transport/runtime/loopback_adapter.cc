// "loopback" endpoints: ports of one process-wide LoopbackNetwork.
#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "transport/backends/loopback/loopback.h"
#include "transport/runtime/datapath_adapter.h"

namespace prism::runtime {
namespace {

struct SharedNetwork {
  std::mutex mu;
  std::unique_ptr<loopback::LoopbackNetwork> net;
};

SharedNetwork& Shared() {
  static SharedNetwork* s = new SharedNetwork();  // never destroyed
  return *s;
}

// Serialises access to the shared network and maps the endpoint's peer
// slots (assigned at CreateConnection) to remote port ids (known at Connect).
class LockedPort : public Datapath {
 public:
  explicit LockedPort(loopback::LoopbackPort* port) : port_(port) {}
  size_t mtu() const override { return port_->mtu(); }
  size_t TxBurst(Time now, const TxPacket* pkts, size_t n) override {
    n = std::min(n, kMax);
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t slot = pkts[i].peer;
      if (slot == 0 || slot > remote_.size() || remote_[slot - 1] < 0) {
        ++unknown_peer_;
        continue;
      }
      scratch_[m] = pkts[i];
      scratch_[m].peer = static_cast<uint32_t>(remote_[slot - 1]);
      ++m;
    }
    std::lock_guard<std::mutex> l(Shared().mu);
    port_->TxBurst(now, scratch_, m);
    return n;
  }
  size_t RxBurst(Time now, RxPacket* pkts, size_t n) override {
    std::lock_guard<std::mutex> l(Shared().mu);
    return port_->RxBurst(now, pkts, n);
  }

  static constexpr size_t kMax = 32;
  loopback::LoopbackPort* port_;
  std::vector<int> remote_;  // slot - 1 -> remote port id (-1 unset)
  std::vector<bool> used_;
  TxPacket scratch_[kMax];
  uint64_t unknown_peer_ = 0;
};

class LoopbackAdapter : public DatapathAdapter {
 public:
  explicit LoopbackAdapter(loopback::LoopbackPort* port) : dp_(port) {}
  Datapath* datapath() override { return &dp_; }
  std::vector<int> wait_fds() override { return {}; }
  Time max_sleep() const override { return 20 * kMicrosecond; }
  BlobDatapath kind() const override { return BlobDatapath::kLoopback; }
  uint32_t ReservePeer() override {
    for (size_t i = 0; i < dp_.used_.size(); ++i) {
      if (!dp_.used_[i]) {
        dp_.used_[i] = true;
        dp_.remote_[i] = -1;
        return static_cast<uint32_t>(i + 1);
      }
    }
    dp_.used_.push_back(true);
    dp_.remote_.push_back(-1);
    return static_cast<uint32_t>(dp_.used_.size());
  }
  absl::Status SetPeer(uint32_t id, const ConnInfoWire& remote) override {
    if (id == 0 || id > dp_.used_.size() || !dp_.used_[id - 1])
      return absl::NotFoundError(absl::StrCat("no loopback peer ", id));
    {
      std::lock_guard<std::mutex> l(Shared().mu);
      if (remote.node >= Shared().net->num_ports())
        return absl::InvalidArgumentError(absl::StrCat(
            "no loopback endpoint ", remote.node, " in this process"));
    }
    dp_.remote_[id - 1] = static_cast<int>(remote.node);
    return absl::OkStatus();
  }
  void RemovePeer(uint32_t id) override {
    if (id == 0 || id > dp_.used_.size()) return;
    dp_.used_[id - 1] = false;
    dp_.remote_[id - 1] = -1;
  }
  absl::Status FillLocal(uint32_t, ConnInfoWire* w) override {
    w->datapath = BlobDatapath::kLoopback;
    w->planes.clear();
    w->node = static_cast<uint32_t>(dp_.port_->id());
    return absl::OkStatus();
  }
  void FillStats(DatapathStats* s) override {
    std::lock_guard<std::mutex> l(Shared().mu);
    const loopback::LoopbackStats& ls = Shared().net->stats();
    s->detail = absl::StrCat("network-wide: ", ls.ToString());
    s->drops = ls.refused + ls.lost_random + ls.lost_burst + ls.lost_blackhole;
  }

 private:
  LockedPort dp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DatapathAdapter>> MakeLoopbackAdapter(
    const EndpointOptions& options) {
  SharedNetwork& s = Shared();
  std::lock_guard<std::mutex> l(s.mu);
  if (!s.net) {
    loopback::LinkConfig link;
    // link_mtu 0 ("the interface's") has no interface here: 9000.
    link.max_packet_bytes = options.link_mtu == 0
                                ? 9000
                                : std::max<uint32_t>(options.link_mtu, 1500);
    s.net = std::make_unique<loopback::LoopbackNetwork>(link);
  }
  return std::unique_ptr<DatapathAdapter>(
      new LoopbackAdapter(s.net->AddPort()));
}

}  // namespace prism::runtime
