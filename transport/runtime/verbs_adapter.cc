// "verbs" endpoints: the libibverbs datapath (transport/backends/verbs).
// Peer slots are VerbsDatapath peers (their QPs are created at
// CreateConnection, connected at Connect from the PeerInfo the blob
// carries); memory the engine registers is registered with the NIC too; the
// loop sleeps on the completion channel, armed before each sleep. The
// datapath's message close is on (VerbsOptions::message_close): the
// adapter is the loop's completion filter, so an application never sees a
// message complete while a WRITE of it can still be placed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "transport/runtime/datapath_adapter.h"

#ifdef PRISM_RUNTIME_HAVE_VERBS
#include "transport/backends/verbs/verbs_datapath.h"
#endif

namespace prism::runtime {

#ifdef PRISM_RUNTIME_HAVE_VERBS
namespace {

class VerbsAdapter : public DatapathAdapter, public CompletionFilter {
 public:
  explicit VerbsAdapter(std::unique_ptr<verbs::VerbsDatapath> dp)
      : dp_(std::move(dp)) {}
  // PRISM_VERBS_STATS=1: the datapath's counters on stderr when the
  // endpoint goes away (diagnostics for runs driven by other programs, such
  // as the NCCL plugin's tests).
  ~VerbsAdapter() override {
    const char* e = getenv("PRISM_VERBS_STATS");
    if (e != nullptr && *e != '\0' && *e != '0') {
      fprintf(stderr, "prism verbs stats: device=%s %s\n",
              dp_->device_name().c_str(), dp_->stats().ToString().c_str());
    }
  }
  Datapath* datapath() override { return dp_.get(); }
  std::vector<int> wait_fds() override { return {dp_->wait_fd()}; }
  BlobDatapath kind() const override { return BlobDatapath::kVerbs; }
  uint32_t ReservePeer() override {
    auto p = dp_->AddPeer();
    if (!p.ok()) {
      last_error_ = p.status();  // CreateConnection fails with it
      return 0;
    }
    return *p;
  }
  absl::Status reserve_error() const override { return last_error_; }
  absl::Status SetPeer(uint32_t id, const ConnInfoWire& remote) override {
    if (id == 0)
      return last_error_.ok()
                 ? absl::FailedPreconditionError("verbs: no peer slot")
                 : last_error_;
    auto info = verbs::DecodePeerInfo(remote.verbs);
    if (!info.ok()) return info.status();
    return dp_->ConnectPeer(id, *info);
  }
  void RemovePeer(uint32_t id) override {
    if (id != 0) (void)dp_->RemovePeer(id);
  }
  absl::Status FillLocal(uint32_t id, ConnInfoWire* w) override {
    w->datapath = BlobDatapath::kVerbs;
    w->planes.clear();
    w->verbs.clear();
    if (id == 0)
      return last_error_.ok()
                 ? absl::FailedPreconditionError("verbs: no peer slot")
                 : last_error_;
    auto info = dp_->LocalInfo(id);
    if (!info.ok()) return info.status();
    w->verbs = verbs::EncodePeerInfo(*info);
    return absl::OkStatus();
  }
  void FillStats(DatapathStats* s) override {
    const verbs::VerbsStats v = dp_->stats();
    s->tx_packets = v.tx_data + v.tx_ctrl + v.tx_probe;
    s->tx_bytes = v.tx_data_bytes;
    s->rx_packets = v.rx_data + v.rx_ctrl;
    s->rx_bytes = v.rx_data_bytes;
    s->tx_backpressure = v.tx_backpressure;
    s->tx_errors = v.tx_post_errors + v.cq_errors;
    s->drops = v.tx_drop_dead_path + v.tx_drop_unknown_peer +
               v.tx_drop_device_lost + v.tx_drop_malformed +
               v.rx_drop_no_descriptor + v.rx_drop_bad_imm + v.rx_drop_unknown +
               v.tx_drop_acked;
    s->detail = absl::StrCat("device=", dp_->device_name(),
                             " mode=", verbs::DataQpModeName(dp_->mode()), " ",
                             v.ToString());
  }
  Placer* placer() override { return dp_->placer(); }
  bool has_arm_wait() const override { return true; }
  void ArmWait() override { dp_->ArmWait(); }
  absl::Status RegisterMemory(const MemoryRegion& mr, void* addr) override {
    return dp_->RegisterMemory(mr, addr);
  }
  void DeregisterMemory(uint32_t lkey) override {
    (void)dp_->DeregisterMemory(lkey);
  }
  void BindConnection(uint32_t peer, ConnId conn) override {
    (void)dp_->BindConnection(peer, conn);
  }
  CompletionFilter* completion_filter() override { return this; }
  void Offer(const Completion* c, size_t n) override {
    dp_->OfferCompletions(c, n);
  }
  size_t Poll(Completion* out, size_t max) override {
    return dp_->PollCompletions(out, max);
  }
  bool HoldsWrites(ConnId conn) const override {
    return dp_->HoldsWriteCompletions(conn);
  }

 private:
  std::unique_ptr<verbs::VerbsDatapath> dp_;
  absl::Status last_error_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DatapathAdapter>> MakeVerbsAdapter(
    const EndpointOptions& o) {
  verbs::VerbsOptions vo;
  vo.device = o.device;
  vo.port = o.device_port;
  vo.gid_index = o.gid_index;
  if (o.verbs_qps == 0)
    return absl::InvalidArgumentError("EndpointOptions: verbs_qps is 0");
  vo.num_qps = o.verbs_qps;
  if (o.verbs_mode == "auto") {
    vo.mode = verbs::DataQpMode::kAuto;
  } else if (o.verbs_mode == "uc") {
    vo.mode = verbs::DataQpMode::kUc;
  } else if (o.verbs_mode == "rc") {
    vo.mode = verbs::DataQpMode::kRc;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("EndpointOptions: verbs_mode must be auto|uc|rc, not '",
                     o.verbs_mode, "'"));
  }
  if (o.mtu_payload != 0) vo.mtu_payload = o.mtu_payload;
  vo.message_close = true;
  // A peer may connect up to the connection's failure budget after us.
  vo.connect_wait = o.connection.connection_timeout;
  // The descriptor ring must cover the messages a connection has in flight.
  while (vo.desc_ring < 2 * o.connection.max_outstanding_messages &&
         vo.desc_ring < (1u << 24))
    vo.desc_ring *= 2;
  auto dp = verbs::VerbsDatapath::Create(vo);
  if (!dp.ok()) return dp.status();
  return std::unique_ptr<DatapathAdapter>(new VerbsAdapter(std::move(*dp)));
}

#else

absl::StatusOr<std::unique_ptr<DatapathAdapter>> MakeVerbsAdapter(
    const EndpointOptions&) {
  return absl::UnimplementedError(
      "EndpointOptions: datapath 'verbs' needs a build with libibverbs");
}

#endif

}  // namespace prism::runtime
