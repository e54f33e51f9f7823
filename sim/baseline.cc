#include "sim/baseline.h"

#include <algorithm>
#include <deque>
#include <vector>

namespace prism::sim {
namespace {

constexpr uint16_t kBlHeaderBytes = 32;  // BTH 12 + RETH 16 + ICRC 4
constexpr uint32_t kPlaneTimerTag = 0x80000000u;

struct Qp {
  // sender
  uint32_t flow = 0;
  uint32_t src = 0, dst = 0;
  uint16_t index = 0;  // within the flow
  uint16_t plane = 0;
  uint32_t entropy = 0;
  uint32_t k0 = 0, count = 0;  // flow packets [k0, k0+count)
  uint32_t next = 0, una = 0, max_sent = 0;
  Time next_tx = 0;
  bool in_rr = false;
  bool done = false;
  // DCQCN
  double line = 0, rc = 0, rt = 0, alpha = 1;
  uint32_t stage = 0;
  bool cnp_since_timer = false;
  std::unique_ptr<Timer> rto_timer;
  std::unique_ptr<Timer> cc_timer;
  // receiver
  uint32_t epsn = 0;
  uint32_t since_ack = 0;
  bool nak_outstanding = false;
  Time last_cnp = -kSecond;
};

class BaselineDriver;

class BaselineHost : public HostAgent, public TimerClient {
 public:
  BaselineHost(BaselineDriver* d, uint32_t host, uint32_t planes);
  void OnReceive(Time now, SimPacket* p) override;
  void OnPortIdle(Time now, uint16_t plane) override { Pull(now, plane); }
  void OnPortStatus(Time now, uint16_t plane, bool up) override {
    if (up) Pull(now, plane);
  }
  void StartFlow(Time now, uint32_t flow) override;
  void AddTotals(TransportTotals* t) const override { AddTo(t); }
  void OnTimer(Time now, uint32_t tag) override;

  void Pull(Time now, uint16_t plane);
  void AddTo(TransportTotals* t) const {
    t->data_packets += data_packets_;
    t->retransmissions += retransmissions_;
    t->retransmitted_bytes += retransmitted_bytes_;
    t->timeouts += timeouts_;
    t->receiver_discards += discards_;
    t->trims_seen += trims_seen_;
    t->ecn_echoes += cnps_;
  }
  void Wake(Qp& q) {
    if (!q.in_rr && !q.done) {
      q.in_rr = true;
      rr_[q.plane].push_back(&q);
    }
  }

 private:
  void SendCtl(Time now, const Qp& q, BlType t, uint32_t psn);
  void OnAck(Time now, Qp& q, uint32_t e, bool nak);
  void OnCnp(Time now, Qp& q);

  BaselineDriver* d_;
  uint32_t host_;
  std::vector<std::deque<Qp*>> rr_;
  std::vector<std::unique_ptr<Timer>> plane_timers_;
  uint64_t data_packets_ = 0, retransmissions_ = 0, retransmitted_bytes_ = 0,
           timeouts_ = 0, discards_ = 0, trims_seen_ = 0, cnps_ = 0;
};

class BaselineDriver : public TransportDriver {
 public:
  explicit BaselineDriver(const TransportConfig& tc) : tc_(tc) {}
  absl::Status Init(Simulator* sim) override {
    sim_ = sim;
    const uint32_t planes = sim->planes();
    nqp_ =
        tc_.qps != 0 ? tc_.qps : (tc_.type == "multiqp" ? 4 * planes : planes);
    if (nqp_ > 4096) return absl::InvalidArgumentError("qps must be <= 4096");
    const double port =
        static_cast<double>(sim->topology().spec().host_link_bps);
    rto_ = tc_.rto > 0 ? tc_.rto : 500 * kMicrosecond;
    window_ = tc_.window_bytes > 0
                  ? tc_.window_bytes
                  : static_cast<uint64_t>(4 * port / 8 *
                                          (double(sim->base_rtt()) / kSecond));
    window_ = std::max<uint64_t>(window_, 4ull * tc_.mtu);
    qp_base_.resize(sim->flows().size());
    qps_.resize(sim->flows().size() * static_cast<size_t>(nqp_));
    flow_left_.assign(sim->flows().size(), 0);
    for (uint32_t h = 0; h < sim->topology().num_hosts(); ++h) {
      hosts_.push_back(std::make_unique<BaselineHost>(this, h, planes));
    }
    return absl::OkStatus();
  }
  HostAgent* agent(uint32_t host) override { return hosts_[host].get(); }
  uint32_t data_header_bytes() const override { return kBlHeaderBytes; }

  Simulator* sim_ = nullptr;
  TransportConfig tc_;
  uint32_t nqp_ = 1;
  Time rto_ = 0;
  uint64_t window_ = 0;
  std::vector<uint32_t> qp_base_;
  std::vector<Qp> qps_;  // flow * nqp_ + index
  std::vector<uint32_t> flow_left_;
  std::vector<std::unique_ptr<BaselineHost>> hosts_;
};

BaselineHost::BaselineHost(BaselineDriver* d, uint32_t host, uint32_t planes)
    : d_(d), host_(host), rr_(planes) {
  for (uint32_t p = 0; p < planes; ++p) {
    plane_timers_.push_back(
        std::make_unique<Timer>(this, kPlaneTimerTag | p, host));
  }
}

void BaselineHost::StartFlow(Time now, uint32_t flow) {
  Simulator& sim = *d_->sim_;
  const Flow& f = sim.flows()[flow];
  const uint32_t K = sim.verifier().packets(flow);
  const uint32_t n = d_->nqp_;
  const uint32_t planes = sim.planes();
  Rng rng(sim.SeedFor(7, flow));
  const uint32_t off = static_cast<uint32_t>(rng.Uniform(planes));
  const double line = static_cast<double>(sim.topology().spec().host_link_bps);
  uint32_t live = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Qp& q = d_->qps_[static_cast<size_t>(flow) * n + i];
    q.flow = flow;
    q.src = f.src;
    q.dst = f.dst;
    q.index = static_cast<uint16_t>(i);
    q.plane = static_cast<uint16_t>((i + off) % planes);
    q.entropy = rng.Next32();
    q.k0 = static_cast<uint32_t>(static_cast<uint64_t>(K) * i / n);
    q.count =
        static_cast<uint32_t>(static_cast<uint64_t>(K) * (i + 1) / n) - q.k0;
    q.line = q.rc = q.rt = line;
    const uint32_t tag = static_cast<uint32_t>(flow * n + i) * 2;
    q.rto_timer = std::make_unique<Timer>(this, tag, host_);
    q.cc_timer = std::make_unique<Timer>(this, tag + 1, host_);
    if (q.count == 0) {
      q.done = true;
      continue;
    }
    ++live;
    Wake(q);
  }
  d_->flow_left_[flow] = live;
  if (live == 0) {
    sim.FlowCompleted(now, flow);
    return;
  }
  for (uint32_t p = 0; p < planes; ++p) Pull(now, static_cast<uint16_t>(p));
}

void BaselineHost::Pull(Time now, uint16_t plane) {
  Simulator& sim = *d_->sim_;
  Fabric& fab = sim.fabric();
  std::deque<Qp*>& rr = rr_[plane];
  const uint32_t mtu = d_->tc_.mtu;
  while (!rr.empty() && fab.HostPortHasRoom(host_, plane)) {
    Time min_tx = kTimeInfinite;
    Qp* pick = nullptr;
    for (size_t scan = rr.size(); scan > 0 && !rr.empty(); --scan) {
      Qp* q = rr.front();
      rr.pop_front();
      const bool has_data = q->next < q->count;
      const bool win_ok =
          static_cast<uint64_t>(q->next - q->una) * mtu < d_->window_;
      if (q->done || !has_data || !win_ok) {
        q->in_rr = false;  // woken again by an ACK, NAK or timeout
        continue;
      }
      rr.push_back(q);
      if (q->next_tx > now) {
        min_tx = std::min(min_tx, q->next_tx);
        continue;
      }
      pick = q;
      break;
    }
    if (pick == nullptr) {
      if (min_tx != kTimeInfinite)
        plane_timers_[plane]->ArmEarlier(sim.queue(), min_tx);
      return;
    }
    Qp& q = *pick;
    const Flow& f = sim.flows()[q.flow];
    uint64_t off;
    uint32_t len;
    sim.verifier().PacketRange(q.flow, q.k0 + q.next, &off, &len);
    SimPacket* p = sim.pool().Alloc();
    ResetPacket(p);
    p->bl_type = BlType::kData;
    p->bl_flow = q.flow;
    p->bl_qp = q.index;
    p->bl_psn = q.next;
    p->payload = sim.verifier().Source(q.flow) + off % f.message_bytes;
    p->payload_len = len;
    p->header_len = kBlHeaderBytes;
    p->src = host_;
    p->dst = q.dst;
    p->plane = static_cast<uint8_t>(q.plane);
    p->entropy = q.entropy;
    p->sent_at = now;
    ++data_packets_;
    if (q.next < q.max_sent) {
      ++retransmissions_;
      retransmitted_bytes_ += len;
    }
    if (q.next == q.una) q.rto_timer->Arm(sim.queue(), now + d_->rto_);
    ++q.next;
    q.max_sent = std::max(q.max_sent, q.next);
    if (d_->tc_.dcqcn && q.rc < q.line) {
      q.next_tx =
          now + SerializationTime(fab.WireSize(p), static_cast<uint64_t>(q.rc));
    } else {
      q.next_tx = now;
    }
    sim.Send(now, host_, p);
  }
}

void BaselineHost::SendCtl(Time now, const Qp& q, BlType t, uint32_t psn) {
  Simulator& sim = *d_->sim_;
  SimPacket* p = sim.pool().Alloc();
  ResetPacket(p);
  p->bl_type = t;
  p->bl_flow = q.flow;
  p->bl_qp = q.index;
  p->bl_psn = psn;
  p->header_len = kBlHeaderBytes;
  p->src = host_;
  p->dst = q.src;
  p->plane = static_cast<uint8_t>(q.plane);
  p->entropy = q.entropy ^ 0x5a5a5a5au;
  p->tclass = TrafficClass::kControl;
  p->sent_at = now;
  sim.Send(now, host_, p);
}

void BaselineHost::OnReceive(Time now, SimPacket* p) {
  Simulator& sim = *d_->sim_;
  Qp& q = d_->qps_[static_cast<size_t>(p->bl_flow) * d_->nqp_ + p->bl_qp];
  switch (p->bl_type) {
    case BlType::kData: {
      if (p->trimmed) {
        ++trims_seen_;
        ++discards_;
        sim.fabric().Drop(p, DropReason::kReceiverDiscard);
        return;
      }
      if (p->ecn_ce && d_->tc_.dcqcn &&
          now - q.last_cnp >= d_->tc_.cnp_interval) {
        q.last_cnp = now;
        SendCtl(now, q, BlType::kCnp, 0);
      }
      if (p->bl_psn == q.epsn) {
        uint64_t off;
        uint32_t len;
        sim.verifier().PacketRange(q.flow, q.k0 + q.epsn, &off, &len);
        sim.verifier().Place(q.flow, off, p->payload, p->payload_len);
        ++q.epsn;
        q.nak_outstanding = false;
        if (++q.since_ack >= d_->tc_.ack_every || q.epsn == q.count) {
          q.since_ack = 0;
          SendCtl(now, q, BlType::kAck, q.epsn);
        }
        sim.pool().Free(p);
        return;
      }
      ++discards_;
      if (p->bl_psn > q.epsn) {
        if (!q.nak_outstanding) {
          q.nak_outstanding = true;
          SendCtl(now, q, BlType::kNak, q.epsn);
        }
      } else {
        SendCtl(now, q, BlType::kAck, q.epsn);  // duplicate: re-ack
      }
      sim.fabric().Drop(p, DropReason::kReceiverDiscard);
      return;
    }
    case BlType::kAck:
      OnAck(now, q, p->bl_psn, false);
      break;
    case BlType::kNak:
      OnAck(now, q, p->bl_psn, true);
      break;
    case BlType::kCnp:
      ++cnps_;
      OnCnp(now, q);
      break;
    case BlType::kNone:
      break;
  }
  sim.pool().Free(p);
}

void BaselineHost::OnAck(Time now, Qp& q, uint32_t e, bool nak) {
  Simulator& sim = *d_->sim_;
  if (q.done) return;
  e = std::min(e, q.count);
  if (e > q.una) {
    q.una = e;
    if (q.next < q.una) q.next = q.una;
    if (q.una == q.count) {
      q.done = true;
      q.rto_timer->Cancel();
      q.cc_timer->Cancel();
      if (--d_->flow_left_[q.flow] == 0) sim.FlowCompleted(now, q.flow);
      return;
    }
    q.rto_timer->Arm(sim.queue(), now + d_->rto_);
  }
  if (nak && e >= q.una && e < q.next) q.next = e;  // go back N
  Wake(q);
  Pull(now, q.plane);
}

void BaselineHost::OnCnp(Time now, Qp& q) {
  if (q.done) return;
  constexpr double g = 1.0 / 16;
  q.rt = q.rc;
  q.rc = std::max(q.line / 1000, q.rc * (1 - q.alpha / 2));
  q.alpha = (1 - g) * q.alpha + g;
  q.stage = 0;
  q.cnp_since_timer = true;
  q.cc_timer->Arm(d_->sim_->queue(), now + 55 * kMicrosecond);
}

void BaselineHost::OnTimer(Time now, uint32_t tag) {
  Simulator& sim = *d_->sim_;
  if (tag & kPlaneTimerTag) {
    Pull(now, static_cast<uint16_t>(tag & ~kPlaneTimerTag));
    return;
  }
  Qp& q = d_->qps_[tag / 2];
  if (q.done) return;
  if ((tag & 1) == 0) {  // retransmission timeout: rewind to una
    if (q.una < q.max_sent) {
      ++timeouts_;
      q.next = q.una;
      q.rto_timer->Arm(sim.queue(), now + d_->rto_);
      Wake(q);
      Pull(now, q.plane);
    }
    return;
  }
  // DCQCN timer: alpha decay and rate increase.
  constexpr double g = 1.0 / 16;
  constexpr uint32_t kFastRecovery = 5;
  if (!q.cnp_since_timer) q.alpha = (1 - g) * q.alpha;
  q.cnp_since_timer = false;
  ++q.stage;
  if (q.stage > kFastRecovery) {
    q.rt = std::min(
        q.line, q.rt + q.line * (q.stage > 3 * kFastRecovery ? 0.05 : 0.005));
  }
  q.rc = std::min(q.line, (q.rt + q.rc) / 2);
  if (q.rc < q.line * 0.999 || q.alpha > 0.01) {
    q.cc_timer->Arm(sim.queue(), now + 55 * kMicrosecond);
  } else {
    q.rc = q.line;
  }
}

}  // namespace

std::unique_ptr<TransportDriver> MakeBaselineDriver(const TransportConfig& tc) {
  return std::make_unique<BaselineDriver>(tc);
}

}  // namespace prism::sim
