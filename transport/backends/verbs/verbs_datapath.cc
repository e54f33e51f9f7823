// VerbsDatapath implementation. Design: docs/verbs.md; the immediate and the
// control-channel frames: docs/wire-format.md ("Verbs datapath: the 32-bit
// immediate").
#include "transport/backends/verbs/verbs_datapath.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "transport/backends/verbs/descriptor_table.h"
#include "transport/base/bytes.h"
#include "transport/wire/packet.h"
#include "transport/wire/packet_inline.h"

namespace prism::verbs {
namespace {

constexpr size_t kMaxBurst = 64;
constexpr uint32_t kTxRing = 8192;       // >= the engine's PSN window (4096)
constexpr uint16_t kCtrlMagic = 0x5650;  // bytes 0x50 0x56 ("PV")
constexpr uint8_t kCtrlVersion = 1;
constexpr size_t kFrameHeader = 8;
constexpr size_t kDescBytes = kDescriptorBytes;
constexpr size_t kRegionBytes = 32;
constexpr size_t kRegionGoneBytes = 8;
constexpr size_t kCloseBytes = 8;
constexpr size_t kHelloBytes = 8;
constexpr uint32_t kHelloAsk = 1;   // HELLO flags: please answer
constexpr size_t kCloseWaits = 64;  // closes waiting for completions, per peer
constexpr uint32_t kDataRecvBuf = 256;           // PROBE SENDs on data QPs
constexpr uint32_t kCtrlBytes = 4u << 20;        // control buffers per pool
constexpr uint32_t kPeerInfoMagic = 0x31495650;  // "PVI1"
constexpr uint16_t kNoQp = 0xFFFF;               // control QP marker
// An int, not the enum: libibverbs' ibv_reg_mr macro masks it with an
// enum of another type.
constexpr int kLocalAccess = IBV_ACCESS_LOCAL_WRITE;

enum FrameType : uint8_t {
  kFrameDesc = 1,
  kFrameRegion = 2,
  kFrameGone = 3,
  kFrameClose = 4,
  kFrameHello = 5,
};
constexpr uint8_t kPeerInfoCloseBit = 0x80;  // in the mode byte
constexpr uint8_t kPeerInfoHelloBit = 0x40;  // in the mode byte

// Writes a control frame's 8-byte header: magic, version, type, item count,
// reserved (docs/wire-format.md, verbs control frames).
inline void PutFrameHeader(uint8_t* b, uint8_t type, uint16_t count) {
  Put16(b, kCtrlMagic);
  b[2] = kCtrlVersion;
  b[3] = type;
  Put16(b + 4, count);
  Put16(b + 6, 0);
}

// Wrap-aware MSN order (MSNs are 32-bit and wrap).
inline bool MsnBefore(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}

// wr_id layout: kind (2 bits) | peer (14 bits) | qp (16 bits) | value (32).
enum WrKind : uint64_t { kWrData = 1, kWrCtrl = 2 };
constexpr uint64_t MakeWrId(uint64_t kind, uint32_t peer, uint16_t qp,
                            uint32_t value) {
  return (kind << 62) | (uint64_t{peer & 0x3FFF} << 48) | (uint64_t{qp} << 32) |
         value;
}
// Receive wr_id: bit 63 = control SRQ, low 32 bits = buffer index.
constexpr uint64_t kRecvCtrlBit = uint64_t{1} << 63;

// Single-writer counters readable from other threads.
struct Counter {
  std::atomic<uint64_t> v{0};
  void Add(uint64_t d = 1) {
    v.store(v.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }
  uint64_t Get() const { return v.load(std::memory_order_relaxed); }
};

uint32_t MtuBytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 1024;
}
ibv_mtu MtuEnum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

class NicPlacer final : public Placer {
 public:
  // The receive datapath hands NIC-placed payload with payload == its final
  // address: nothing to do. Payload that arrived in a buffer is copied.
  bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
             const MemoryRegion&) override {
    if (dst != src) memcpy(dst, src, len);
    return true;
  }
};

struct LocalRegion {
  MemoryRegion emr;  // the engine's view
  uint64_t va = 0;   // where the bytes are in this process
  ibv_mr* mr = nullptr;
};

struct RemoteRegion {
  uint64_t eaddr = 0;  // engine address (what DATA headers carry)
  uint64_t va = 0;     // peer's virtual address for the WRITE
  uint64_t length = 0;
  uint32_t vrkey = 0;  // the peer NIC's rkey
};

struct TxRec {
  uint32_t psn = 0;
  uint16_t path = 0;
  bool valid = false;
  uint64_t ts = 0;
};

struct DataQp {
  ibv_qp* qp = nullptr;
  bool alive = true;
  uint32_t inflight = 0;        // posted, not yet covered by a completion
  uint32_t since_signal = 0;    // unsignalled WRs since the last signalled
  uint64_t posted = 0;          // WRs posted (or parked) so far
  uint64_t done = 0;            // WRs known complete (signalled completions)
  ibv_send_wr* head = nullptr;  // chain being built in this burst
  ibv_send_wr* tail = nullptr;
};

// A region advertisement (kFrameRegion) or withdrawal (kFrameGone) for one
// peer, or a HELLO. Queued when the peer's control ring is full (or earlier
// frames still wait), and sent in order at the next burst, so a busy control
// QP never makes RegisterMemory / DeregisterMemory fail.
struct RegionFrame {
  uint32_t peer = 0;  // id
  uint8_t type = 0;
  uint32_t erkey = 0, vrkey = 0;  // kFrameHello: erkey holds the flags
  uint64_t eaddr = 0, va = 0, length = 0;
};

// Monotonic wall time: the NIC's retry timers run in real time.
Time MonoTime() {
  return static_cast<Time>(
             std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
                 .count()) *
         kNanosecond;
}

struct Peer {
  bool used = false;
  bool connected = false;
  bool ctrl_alive = true;
  uint32_t id = 0;  // 1-based
  ibv_qp* ctrl = nullptr;
  std::vector<DataQp> qps;
  PeerInfo remote;
  // control send ring
  std::vector<uint8_t> ring;
  ibv_mr* ring_mr = nullptr;
  uint64_t ring_head = 0;  // next slot to use
  uint64_t ring_tail = 0;  // oldest slot not known complete
  uint32_t ctrl_since_signal = 0;
  ibv_send_wr* chead = nullptr;
  ibv_send_wr* ctail = nullptr;
  ibv_send_wr* frame_wr = nullptr;  // open descriptor frame of this burst
  uint8_t* frame_buf = nullptr;
  // sender state
  absl::flat_hash_map<uint32_t, RemoteRegion> rregions;  // by engine rkey
  uint32_t last_rkey = 0;
  const RemoteRegion* last_rr = nullptr;
  bool described = false;
  uint32_t described_msn = 0;
  std::vector<TxRec> txring;
  // receiver state
  std::unique_ptr<DescriptorTable> descs;
  // message close (docs/verbs.md "Buffer reuse: the message close")
  bool bound = false;  // BindConnection: completions of `conn` are fenced
  ConnId conn = kInvalidConn;
  uint32_t acked_next = 0;   // msn < this: the engine reported kWrite
  uint32_t closed_next = 0;  // msn < this: closed (nothing more is posted)
  uint32_t close_sent = 0;   // closed_next as last told to the peer
  std::vector<uint64_t> retx_bits;  // by msn & (desc_ring - 1)
  // Closes that wait for local completions: the first MSN not covered and a
  // snapshot of every data QP's `posted` when the last message was acked.
  uint32_t wait_msn_next[kCloseWaits] = {};
  std::vector<uint64_t> wait_snap;  // kCloseWaits x qps
  size_t wait_head = 0, nwait = 0;
  std::deque<Completion> held_tx;  // kWrite, until closed_next passes it
  uint32_t peer_closed_next = 0;   // from the peer's CLOSE frames
  std::deque<Completion> held_rx;  // kRecvImmediate, until the peer closes
  // start-up (docs/verbs.md "Start-up: the HELLO exchange")
  bool peer_ready = true;       // a control SEND of the peer has arrived
  bool hello_answered = false;  // the peer's HELLO got its answer
  bool ready_waiting = false;   // DATA waits for peer_ready since ready_since
  Time ready_since = 0;
  // A peer that connects late (docs/verbs.md "A peer that connects late").
  bool gate = false;     // until ctrl_up only start-up frames go on ctrl
  bool ctrl_up = false;  // a control SEND of ours completed (peer QP ready)
  bool ctrl_unlogged = false;  // ctrl carried more than start-up frames
  bool not_up_reported = false;
  uint32_t path_mtu = 0;      // of the connection (bytes)
  uint32_t ctrl_rx_pkts = 0;  // packets received on ctrl before ctrl_up
  uint32_t recycles = 0;
  uint64_t epoch_pos = 0;  // ring positions below: posted to a recycled QP
  Time connected_at = 0;   // MonoTime() at ConnectPeer
  std::vector<RegionFrame> startup_log;  // frames posted before ctrl_up
  // Messages whose DATA was dropped before ctrl_up while not described (a
  // later message may be described first): by msn & (desc_ring - 1).
  std::vector<uint64_t> undesc_bits;
  bool any_undesc = false;
};

struct PendingWrite {
  uint32_t peer = 0;  // index
  uint16_t qp = 0;
  uint32_t psn = 0;
  uint32_t len = 0;
};

struct QpRef {
  uint32_t peer = 0;  // index
  uint16_t qp = kNoQp;
};

}  // namespace

const char* DataQpModeName(DataQpMode m) {
  switch (m) {
    case DataQpMode::kAuto:
      return "auto";
    case DataQpMode::kUc:
      return "uc";
    case DataQpMode::kRc:
      return "rc";
  }
  return "?";
}

std::string VerbsStats::ToString() const {
  return absl::StrFormat(
      "tx_data=%u tx_data_bytes=%u tx_ctrl=%u tx_probe=%u tx_descriptors=%u "
      "tx_fallback=%u tx_backpressure=%u tx_drop_dead_path=%u "
      "tx_drop_unknown_peer=%u tx_drop_device_lost=%u tx_drop_malformed=%u "
      "tx_post_errors=%u tx_frames_queued=%u tx_closes=%u tx_drop_acked=%u "
      "close_waits=%u tx_wait_ready=%u tx_hellos=%u rx_hellos=%u "
      "ready_timeouts=%u ctrl_qp_recycles=%u tx_drop_not_ready=%u "
      "tx_sacks_merged=%u tx_data_signalled=%u rx_data=%u rx_data_bytes=%u "
      "rx_ctrl=%u rx_descriptors=%u "
      "rx_pending=%u rx_drop_no_descriptor=%u rx_drop_bad_imm=%u "
      "rx_drop_unknown=%u rx_closes=%u rx_after_close=%u "
      "completions_held=%u cq_errors=%u qp_errors=%u async_events=%u",
      tx_data, tx_data_bytes, tx_ctrl, tx_probe, tx_descriptors, tx_fallback,
      tx_backpressure, tx_drop_dead_path, tx_drop_unknown_peer,
      tx_drop_device_lost, tx_drop_malformed, tx_post_errors, tx_frames_queued,
      tx_closes, tx_drop_acked, close_waits, tx_wait_ready, tx_hellos,
      rx_hellos, ready_timeouts, ctrl_qp_recycles, tx_drop_not_ready,
      tx_sacks_merged, tx_data_signalled, rx_data, rx_data_bytes, rx_ctrl,
      rx_descriptors, rx_pending, rx_drop_no_descriptor, rx_drop_bad_imm,
      rx_drop_unknown, rx_closes, rx_after_close, completions_held, cq_errors,
      qp_errors, async_events);
}

// ---------------------------------------------------------------- discovery

namespace {
// Devices with their ports and GIDs; only the one called `only` when it is
// not empty (opening and querying every device is slow on soft-RoCE under
// TCG: each GID is a sysfs read).
absl::StatusOr<std::vector<DeviceInfo>> ListDevicesNamed(
    const std::string& only) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    if (errno == ENOSYS || errno == ENOENT || errno == 0) {
      return std::vector<DeviceInfo>{};
    }
    return absl::UnavailableError(
        absl::StrCat("ibv_get_device_list: ", strerror(errno)));
  }
  std::vector<DeviceInfo> out;
  for (int i = 0; i < n; ++i) {
    DeviceInfo d;
    d.name = ibv_get_device_name(list[i]);
    if (!only.empty() && d.name != only) continue;
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr da{};
    if (ibv_query_device(ctx, &da) == 0) {
      for (uint8_t p = 1; p <= da.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, p, &pa) != 0) continue;
        PortInfo pi;
        pi.port = p;
        pi.active = pa.state == IBV_PORT_ACTIVE;
        pi.active_mtu = MtuBytes(pa.active_mtu);
        pi.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        for (int g = 0; g < pa.gid_tbl_len; ++g) {
          ibv_gid_entry e{};
          if (ibv_query_gid_ex(ctx, p, g, &e, 0) != 0) continue;
          GidInfo gi;
          gi.index = g;
          memcpy(gi.gid.data(), e.gid.raw, 16);
          bool zero = true;
          for (uint8_t b : gi.gid) zero = zero && b == 0;
          if (zero) continue;
          gi.type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::kRoceV2
                    : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::kRoceV1
                                                         : GidType::kIb;
          static const uint8_t kMapped[12] = {0, 0, 0, 0, 0,    0,
                                              0, 0, 0, 0, 0xff, 0xff};
          gi.ipv4_mapped = memcmp(gi.gid.data(), kMapped, 12) == 0;
          pi.gids.push_back(gi);
        }
        d.ports.push_back(std::move(pi));
      }
    }
    ibv_close_device(ctx);
    out.push_back(std::move(d));
  }
  ibv_free_device_list(list);
  return out;
}
}  // namespace

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
  return ListDevicesNamed("");
}

absl::StatusOr<GidInfo> PickGid(const PortInfo& port) {
  const GidInfo* best = nullptr;
  int best_rank = -1;
  for (const GidInfo& g : port.gids) {
    int rank = g.type == GidType::kRoceV2 ? (g.ipv4_mapped ? 3 : 2) : 1;
    if (rank > best_rank) {
      best = &g;
      best_rank = rank;
    }
  }
  if (best == nullptr) {
    return absl::NotFoundError(absl::StrCat("port ", port.port, " has no GID"));
  }
  return *best;
}

bool RdmaAvailable(std::string* why) {
  auto devs = ListDevices();
  if (!devs.ok()) {
    if (why) *why = std::string(devs.status().message());
    return false;
  }
  for (const DeviceInfo& d : *devs) {
    for (const PortInfo& p : d.ports) {
      if (p.active && !p.gids.empty()) return true;
    }
  }
  if (why) {
    *why = devs->empty() ? "no RDMA device (ibv_get_device_list is empty)"
                         : "no RDMA device with an active port and a GID";
  }
  return false;
}

// ---------------------------------------------------------------- PeerInfo

std::string EncodePeerInfo(const PeerInfo& info) {
  std::string s(40 + 4 * info.data_qpns.size(), '\0');
  uint8_t* p = reinterpret_cast<uint8_t*>(s.data());
  Put32(p + 0, kPeerInfoMagic);
  p[4] = 1;  // version
  p[5] = static_cast<uint8_t>(static_cast<uint8_t>(info.mode) |
                              (info.message_close ? kPeerInfoCloseBit : 0) |
                              (info.hello ? kPeerInfoHelloBit : 0));
  Put16(p + 6, static_cast<uint16_t>(info.data_qpns.size()));
  Put32(p + 8, info.path_mtu);
  Put32(p + 12, info.mtu_payload);
  Put32(p + 16, info.ctrl_qpn);
  Put32(p + 20, info.psn);
  memcpy(p + 24, info.gid.data(), 16);
  for (size_t i = 0; i < info.data_qpns.size(); ++i) {
    Put32(p + 40 + 4 * i, info.data_qpns[i]);
  }
  return s;
}

absl::StatusOr<PeerInfo> DecodePeerInfo(const std::string& bytes) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < 40 || Get32(p) != kPeerInfoMagic || p[4] != 1) {
    return absl::InvalidArgumentError("not a verbs PeerInfo (magic/version)");
  }
  PeerInfo info;
  const uint8_t mode =
      p[5] & static_cast<uint8_t>(~(kPeerInfoCloseBit | kPeerInfoHelloBit));
  if (mode != static_cast<uint8_t>(DataQpMode::kUc) &&
      mode != static_cast<uint8_t>(DataQpMode::kRc)) {
    return absl::InvalidArgumentError("PeerInfo: bad mode");
  }
  info.mode = static_cast<DataQpMode>(mode);
  info.message_close = (p[5] & kPeerInfoCloseBit) != 0;
  info.hello = (p[5] & kPeerInfoHelloBit) != 0;
  const uint16_t n = Get16(p + 6);
  if (n == 0 || bytes.size() != 40 + 4u * n) {
    return absl::InvalidArgumentError("PeerInfo: bad QP count or length");
  }
  info.path_mtu = Get32(p + 8);
  info.mtu_payload = Get32(p + 12);
  info.ctrl_qpn = Get32(p + 16);
  info.psn = Get32(p + 20);
  memcpy(info.gid.data(), p + 24, 16);
  for (uint16_t i = 0; i < n; ++i)
    info.data_qpns.push_back(Get32(p + 40 + 4 * i));
  return info;
}

// ---------------------------------------------------------------- Impl

class VerbsDatapath::Impl {
 public:
  explicit Impl(const VerbsOptions& o) : o_(o) {}

  ~Impl() {
    for (auto& pp : peers_) DestroyPeer(pp.get());
    for (LocalRegion& r : regions_) {
      if (r.mr) ibv_dereg_mr(r.mr);
    }
    if (data_srq_) ibv_destroy_srq(data_srq_);
    if (ctrl_srq_) ibv_destroy_srq(ctrl_srq_);
    if (data_mr_) ibv_dereg_mr(data_mr_);
    if (ctrl_mr_) ibv_dereg_mr(ctrl_mr_);
    if (send_cq_) ibv_destroy_cq(send_cq_);
    if (recv_cq_) ibv_destroy_cq(recv_cq_);
    DrainChannel();
    if (pd_) ibv_dealloc_pd(pd_);
    if (channel_) ibv_destroy_comp_channel(channel_);
    if (ctx_) ibv_close_device(ctx_);
  }

  void ArmWait() {
    ibv_req_notify_cq(recv_cq_, 0);
    ibv_req_notify_cq(send_cq_, 0);
    armed_ = true;
  }

  // Consumes (and acknowledges) the channel's pending CQ events.
  void DrainChannel() {
    if (channel_ == nullptr || !armed_) return;
    armed_ = false;
    ibv_cq* cq;
    void* cq_ctx;
    unsigned send_ev = 0, recv_ev = 0;
    while (ibv_get_cq_event(channel_, &cq, &cq_ctx) == 0) {
      if (cq == send_cq_) {
        ++send_ev;
      } else {
        ++recv_ev;
      }
    }
    if (send_ev) ibv_ack_cq_events(send_cq_, send_ev);
    if (recv_ev) ibv_ack_cq_events(recv_cq_, recv_ev);
  }

  absl::Status Init() {
    if (o_.num_qps == 0 || o_.num_qps > 1024) {
      return absl::InvalidArgumentError("num_qps must be 1..1024");
    }
    if (o_.mtu_payload == 0 || o_.mtu_payload > wire::kMaxPayloadLen) {
      return absl::InvalidArgumentError(
          absl::StrCat("mtu_payload must be 1..", wire::kMaxPayloadLen));
    }
    if (o_.signal_every == 0 || o_.sq_depth <= o_.signal_every ||
        o_.ctrl_depth <= o_.signal_every) {
      return absl::InvalidArgumentError(
          "sq_depth and ctrl_depth must exceed signal_every (> 0)");
    }
    if (o_.ctrl_retry_cnt > 7) {
      return absl::InvalidArgumentError("ctrl_retry_cnt must be 0..7");
    }
    if (o_.desc_ring == 0 || (o_.desc_ring & (o_.desc_ring - 1)) != 0) {
      return absl::InvalidArgumentError("desc_ring must be a power of two");
    }
    // Device and port.
    auto devs = ListDevicesNamed(o_.device);
    if (!devs.ok()) return devs.status();
    const DeviceInfo* dev = nullptr;
    const PortInfo* port = nullptr;
    for (const DeviceInfo& d : *devs) {
      if (!o_.device.empty() && d.name != o_.device) continue;
      for (const PortInfo& p : d.ports) {
        if ((o_.port == 0 && p.active) || p.port == o_.port) {
          dev = &d;
          port = &p;
          break;
        }
      }
      if (dev) break;
    }
    if (dev == nullptr) {
      return absl::NotFoundError(
          o_.device.empty() ? std::string("no RDMA device with an active port")
                            : absl::StrCat("RDMA device '", o_.device,
                                           "' (port ", o_.port, ") not found"));
    }
    if (!port->active) {
      return absl::UnavailableError(
          absl::StrCat(dev->name, " port ", port->port, " is not active"));
    }
    name_ = dev->name;
    port_ = port->port;
    path_mtu_ = port->active_mtu;
    if (o_.gid_index >= 0) {
      bool found = false;
      for (const GidInfo& g : port->gids) {
        if (g.index == o_.gid_index) {
          gid_ = g;
          found = true;
        }
      }
      if (!found) {
        return absl::NotFoundError(
            absl::StrCat(name_, ": no GID at index ", o_.gid_index));
      }
    } else {
      auto g = PickGid(*port);
      if (!g.ok()) return g.status();
      gid_ = *g;
    }
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n; ++i) {
      if (name_ == ibv_get_device_name(list[i]))
        ctx_ = ibv_open_device(list[i]);
    }
    if (list) ibv_free_device_list(list);
    if (ctx_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("cannot open ", name_));
    }
    const int fl = fcntl(ctx_->async_fd, F_GETFL);
    fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK);
    ibv_device_attr da{};
    if (ibv_query_device(ctx_, &da) != 0) {
      return absl::UnavailableError("ibv_query_device failed");
    }
    const uint32_t max_wr = static_cast<uint32_t>(da.max_qp_wr);
    o_.sq_depth = std::min(o_.sq_depth, max_wr);
    o_.ctrl_depth = std::min(o_.ctrl_depth, max_wr);
    if (da.max_srq_wr > 0) {
      o_.data_rq_depth =
          std::min(o_.data_rq_depth, static_cast<uint32_t>(da.max_srq_wr));
      o_.ctrl_depth =
          std::min(o_.ctrl_depth, static_cast<uint32_t>(da.max_srq_wr));
    }
    // Control buffers hold a whole DATA packet (the fallback for data that
    // cannot be placed). With large chunks, fewer of them: at most
    // kCtrlBytes per receive pool and per peer's send ring.
    ctrl_buf_ = static_cast<uint32_t>(
        ((wire::kDataHeaderSize + o_.mtu_payload + 255) / 64) * 64);
    o_.ctrl_depth = std::min<uint32_t>(
        o_.ctrl_depth,
        std::max<uint32_t>(4 * o_.signal_every + 1, kCtrlBytes / ctrl_buf_));
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) return absl::UnavailableError("ibv_alloc_pd failed");
    const int max_cqe = da.max_cqe > 0 ? da.max_cqe : 4096;
    channel_ = ibv_create_comp_channel(ctx_);
    if (channel_ == nullptr) {
      return absl::UnavailableError("ibv_create_comp_channel failed");
    }
    const int cfl = fcntl(channel_->fd, F_GETFL);
    fcntl(channel_->fd, F_SETFL, cfl | O_NONBLOCK);
    send_cq_ =
        ibv_create_cq(ctx_, std::min(max_cqe, 32768), nullptr, channel_, 0);
    recv_cq_ = ibv_create_cq(
        ctx_,
        std::min<int>(max_cqe,
                      static_cast<int>(o_.data_rq_depth + o_.ctrl_depth + 64)),
        nullptr, channel_, 0);
    if (send_cq_ == nullptr || recv_cq_ == nullptr) {
      return absl::UnavailableError("ibv_create_cq failed");
    }
    // Shared receive queues and their buffers.
    data_bufs_.assign(size_t{o_.data_rq_depth} * kDataRecvBuf, 0);
    ctrl_bufs_.assign(size_t{o_.ctrl_depth} * ctrl_buf_, 0);
    data_mr_ =
        ibv_reg_mr(pd_, data_bufs_.data(), data_bufs_.size(), kLocalAccess);
    ctrl_mr_ =
        ibv_reg_mr(pd_, ctrl_bufs_.data(), ctrl_bufs_.size(), kLocalAccess);
    if (data_mr_ == nullptr || ctrl_mr_ == nullptr) {
      return absl::UnavailableError("ibv_reg_mr (receive buffers) failed");
    }
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = o_.data_rq_depth;
    sa.attr.max_sge = 1;
    data_srq_ = ibv_create_srq(pd_, &sa);
    sa.attr.max_wr = o_.ctrl_depth;
    ctrl_srq_ = ibv_create_srq(pd_, &sa);
    if (data_srq_ == nullptr || ctrl_srq_ == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("ibv_create_srq failed: ", strerror(errno)));
    }
    data_rwr_.resize(o_.data_rq_depth);
    data_rsge_.resize(o_.data_rq_depth);
    for (uint32_t i = 0; i < o_.data_rq_depth; ++i) {
      data_rsge_[i] = {
          reinterpret_cast<uint64_t>(&data_bufs_[size_t{i} * kDataRecvBuf]),
          kDataRecvBuf, data_mr_->lkey};
      data_rwr_[i] = {};
      data_rwr_[i].wr_id = i;
      data_rwr_[i].sg_list = &data_rsge_[i];
      data_rwr_[i].num_sge = 1;
      repost_data_.push_back(i);
    }
    ctrl_rwr_.resize(o_.ctrl_depth);
    ctrl_rsge_.resize(o_.ctrl_depth);
    for (uint32_t i = 0; i < o_.ctrl_depth; ++i) {
      ctrl_rsge_[i] = {
          reinterpret_cast<uint64_t>(&ctrl_bufs_[size_t{i} * ctrl_buf_]),
          ctrl_buf_, ctrl_mr_->lkey};
      ctrl_rwr_[i] = {};
      ctrl_rwr_[i].wr_id = kRecvCtrlBit | i;
      ctrl_rwr_[i].sg_list = &ctrl_rsge_[i];
      ctrl_rwr_[i].num_sge = 1;
      repost_ctrl_.push_back(i);
    }
    if (!Repost()) return absl::UnavailableError("ibv_post_srq_recv failed");
    repost_data_.reserve(o_.data_rq_depth);
    repost_ctrl_.reserve(o_.ctrl_depth);
    pending_.resize(1024);
    held_.reserve(o_.ctrl_depth / 2);
    // Resolve the data QP type: UC unless the device refuses it.
    mode_ = o_.mode == DataQpMode::kRc ? DataQpMode::kRc : DataQpMode::kUc;
    {
      ibv_qp* t = nullptr;
      if (mode_ == DataQpMode::kUc && o_.debug_refuse_uc) {
        errno = EOPNOTSUPP;  // tests: behave like a device without UC
      } else {
        t = CreateQp(mode_ == DataQpMode::kUc ? IBV_QPT_UC : IBV_QPT_RC,
                     data_srq_, 4, nullptr);
      }
      if (t == nullptr && o_.mode == DataQpMode::kAuto) {
        fprintf(stderr,
                "prism verbs: %s has no UC queue pairs (%s); using RC\n",
                name_.c_str(), strerror(errno));
        mode_ = DataQpMode::kRc;
        t = CreateQp(IBV_QPT_RC, data_srq_, 4, nullptr);
      }
      if (t == nullptr) {
        return absl::UnavailableError(
            absl::StrCat(name_, ": cannot create a ", DataQpModeName(mode_),
                         " queue pair: ", strerror(errno)));
      }
      ibv_destroy_qp(t);
    }
    return absl::OkStatus();
  }

  ibv_qp* CreateQp(ibv_qp_type type, ibv_srq* srq, uint32_t depth,
                   uint32_t* inline_out) {
    ibv_qp_init_attr a{};
    a.send_cq = send_cq_;
    a.recv_cq = recv_cq_;
    a.srq = srq;
    a.qp_type = type;
    a.cap.max_send_wr = depth;
    a.cap.max_send_sge = 1;
    a.cap.max_inline_data = o_.max_inline;
    a.sq_sig_all = 0;
    ibv_qp* qp = ibv_create_qp(pd_, &a);
    if (qp == nullptr && o_.max_inline > 0) {  // retry without inline
      a.cap.max_inline_data = 0;
      qp = ibv_create_qp(pd_, &a);
    }
    if (qp && inline_out) *inline_out = a.cap.max_inline_data;
    return qp;
  }

  // ------------------------------------------------------------ peers

  absl::StatusOr<uint32_t> AddPeer() {
    size_t idx = peers_.size();
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (!peers_[i]->used) {
        idx = i;
        break;
      }
    }
    if (idx >= 0x3FFF) return absl::ResourceExhaustedError("too many peers");
    if (idx == peers_.size()) peers_.push_back(std::make_unique<Peer>());
    Peer* p = peers_[idx].get();
    *p = Peer{};
    p->id = static_cast<uint32_t>(idx + 1);
    uint32_t inl = 0;
    p->ctrl = CreateQp(IBV_QPT_RC, ctrl_srq_, o_.ctrl_depth, &inl);
    if (p->ctrl == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("control QP: ", strerror(errno)));
    }
    max_inline_ = inl;
    const ibv_qp_type t = mode_ == DataQpMode::kUc ? IBV_QPT_UC : IBV_QPT_RC;
    for (uint16_t q = 0; q < o_.num_qps; ++q) {
      DataQp d;
      d.qp = CreateQp(t, data_srq_, o_.sq_depth, &inl);
      if (d.qp == nullptr) {
        p->used = true;
        DestroyPeer(p);
        return absl::UnavailableError(
            absl::StrCat("data QP ", q, ": ", strerror(errno)));
      }
      max_inline_ = std::min(max_inline_, inl);
      p->qps.push_back(d);
    }
    p->ring.assign(size_t{o_.ctrl_depth} * ctrl_buf_, 0);
    p->ring_mr = ibv_reg_mr(pd_, p->ring.data(), p->ring.size(), kLocalAccess);
    p->txring.assign(kTxRing, TxRec{});
    p->descs = std::make_unique<DescriptorTable>(o_.desc_ring);
    p->retx_bits.assign((o_.desc_ring + 63) / 64, 0);
    p->undesc_bits.assign((o_.desc_ring + 63) / 64, 0);
    p->wait_snap.assign(kCloseWaits * o_.num_qps, 0);
    p->used = true;
    if (p->ring_mr == nullptr) {
      DestroyPeer(p);
      return absl::UnavailableError("ibv_reg_mr (control ring) failed");
    }
    // INIT
    absl::Status s = ToInit(p->ctrl, IBV_ACCESS_LOCAL_WRITE);
    for (DataQp& d : p->qps) {
      if (s.ok()) {
        s = ToInit(d.qp, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      }
    }
    if (!s.ok()) {
      DestroyPeer(p);
      return s;
    }
    qpn_[p->ctrl->qp_num] = QpRef{static_cast<uint32_t>(idx), kNoQp};
    for (uint16_t q = 0; q < o_.num_qps; ++q) {
      qpn_[p->qps[q].qp->qp_num] = QpRef{static_cast<uint32_t>(idx), q};
    }
    return p->id;
  }

  absl::Status ToInit(ibv_qp* qp, int access) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port_;
    a.qp_access_flags = access;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                          IBV_QP_ACCESS_FLAGS) != 0) {
      return absl::UnavailableError(
          absl::StrCat("QP to INIT: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  absl::Status ToRts(ibv_qp* qp, bool rc, uint32_t dqpn, uint32_t rpsn,
                     uint32_t mtu, const std::array<uint8_t, 16>& dgid,
                     uint32_t flow_label, uint8_t retry_cnt = 7) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = MtuEnum(mtu);
    a.dest_qp_num = dqpn;
    a.rq_psn = rpsn & 0xFFFFFF;
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, dgid.data(), 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_.index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = o_.traffic_class;
    a.ah_attr.grh.flow_label = flow_label & 0xFFFFF;
    a.ah_attr.port_num = port_;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
               IBV_QP_RQ_PSN;
    if (rc) {
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 1;
      mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if (ibv_modify_qp(qp, &a, mask) != 0) {
      return absl::UnavailableError(
          absl::StrCat("QP to RTR: ", strerror(errno)));
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = psn_ & 0xFFFFFF;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc) {
      a.timeout = 14;
      a.retry_cnt = retry_cnt;
      a.rnr_retry = 7;
      a.max_rd_atomic = 1;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
              IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if (ibv_modify_qp(qp, &a, mask) != 0) {
      return absl::UnavailableError(
          absl::StrCat("QP to RTS: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  Peer* PeerById(uint32_t id) const {
    if (id == 0 || id > peers_.size()) return nullptr;
    Peer* p = peers_[id - 1].get();
    return p->used ? p : nullptr;
  }

  absl::StatusOr<PeerInfo> LocalInfo(uint32_t id) const {
    const Peer* p = PeerById(id);
    if (p == nullptr) return absl::NotFoundError(absl::StrCat("no peer ", id));
    PeerInfo i;
    i.gid = gid_.gid;
    i.path_mtu = path_mtu_;
    i.mode = mode_;
    i.mtu_payload = o_.mtu_payload;
    i.ctrl_qpn = p->ctrl->qp_num;
    i.psn = psn_;
    i.message_close = o_.message_close;
    i.hello = true;
    for (const DataQp& d : p->qps) i.data_qpns.push_back(d.qp->qp_num);
    return i;
  }

  absl::Status ConnectPeer(uint32_t id, const PeerInfo& r) {
    Peer* p = PeerById(id);
    if (p == nullptr) return absl::NotFoundError(absl::StrCat("no peer ", id));
    if (p->connected) return absl::FailedPreconditionError("already connected");
    if (r.mode != mode_) {
      return absl::FailedPreconditionError(
          absl::StrCat("data QP mode mismatch: local ", DataQpModeName(mode_),
                       ", remote ", DataQpModeName(r.mode)));
    }
    if (r.mtu_payload != o_.mtu_payload) {
      return absl::FailedPreconditionError(
          absl::StrCat("mtu_payload mismatch: local ", o_.mtu_payload,
                       ", remote ", r.mtu_payload));
    }
    if (r.data_qpns.size() != p->qps.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("QP count mismatch: local ", p->qps.size(), ", remote ",
                       r.data_qpns.size()));
    }
    const uint32_t mtu = std::min(path_mtu_, r.path_mtu);
    absl::Status s = ToRts(p->ctrl, true, r.ctrl_qpn, r.psn, mtu, r.gid, 0,
                           o_.ctrl_retry_cnt);
    const bool rc = mode_ == DataQpMode::kRc;
    for (size_t q = 0; q < p->qps.size() && s.ok(); ++q) {
      s = ToRts(p->qps[q].qp, rc, r.data_qpns[q], r.psn, mtu, r.gid,
                static_cast<uint32_t>(q + 1));
    }
    if (!s.ok()) return s;
    p->remote = r;
    p->connected = true;
    p->path_mtu = mtu;
    p->connected_at = MonoTime();
    p->gate = r.hello && o_.ready_wait > 0;
    for (const LocalRegion& lr : regions_) {
      if (lr.emr.access & kAccessRemoteWrite) {
        absl::Status a = SendRegionFrame(p, kFrameRegion, lr);
        if (!a.ok()) return a;
      }
    }
    // Start-up: the peer's control QP may not be ready to receive yet (it
    // connects after us), in which case what we just posted is dropped there
    // and RC resends it only after a timeout or a NAK. A HELLO after the
    // advertisements: the peer answers it once, and its first control SEND
    // to arrive here proves that its own advertisements (posted before its
    // HELLO, in order on RC) have arrived. Until then DATA for a region it
    // has not advertised waits (TxData, bounded by ready_wait).
    if (r.hello) {
      p->peer_ready = false;
      if (!o_.debug_mute_hello) return SendHello(p, kHelloAsk);
    }
    return absl::OkStatus();
  }

  void DestroyPeer(Peer* p) {
    if (!p->used) return;
    if (p->ctrl) {
      qpn_.erase(p->ctrl->qp_num);
      ibv_destroy_qp(p->ctrl);
    }
    for (DataQp& d : p->qps) {
      if (d.qp) {
        qpn_.erase(d.qp->qp_num);
        ibv_destroy_qp(d.qp);
      }
    }
    if (p->ring_mr) ibv_dereg_mr(p->ring_mr);
    // Held completions go out (the connection is gone: nothing more of it
    // is posted here).
    for (const Completion& c : p->held_rx) ready_.push_back(c);
    for (const Completion& c : p->held_tx) ready_.push_back(c);
    if (p->bound) conn_peer_.erase(p->conn);
    nwaiting_ -= p->nwait;
    // Completions of this peer still in the CQs are recognised as stale by
    // the peer's `used` flag / generation and ignored.
    const uint32_t id = p->id;
    *p = Peer{};
    p->id = id;
  }

  absl::Status RemovePeer(uint32_t id) {
    Peer* p = PeerById(id);
    if (p == nullptr) return absl::NotFoundError(absl::StrCat("no peer ", id));
    DestroyPeer(p);
    return absl::OkStatus();
  }

  // ------------------------------------------------------------ memory

  absl::Status RegisterMemory(const MemoryRegion& emr, void* addr, int fd,
                              uint64_t offset) {
    if (addr == nullptr && fd < 0) {
      return absl::InvalidArgumentError("null address");
    }
    if (emr.length == 0) return absl::InvalidArgumentError("zero length");
    for (const LocalRegion& r : regions_) {
      if (r.emr.lkey == emr.lkey) {
        return absl::AlreadyExistsError(absl::StrCat(
            "engine region lkey ", emr.lkey, " already registered"));
      }
    }
    int access = IBV_ACCESS_LOCAL_WRITE;
    if (emr.access & kAccessRemoteWrite) access |= IBV_ACCESS_REMOTE_WRITE;
    LocalRegion lr;
    lr.emr = emr;
    if (fd >= 0) {
      lr.va = emr.addr;
      lr.mr = ibv_reg_dmabuf_mr(pd_, offset, emr.length, emr.addr, fd, access);
    } else {
      lr.va = reinterpret_cast<uint64_t>(addr);
      lr.mr = ibv_reg_mr(pd_, addr, emr.length, access);
    }
    if (lr.mr == nullptr) {
      return absl::UnavailableError(
          absl::StrCat(fd >= 0 ? "ibv_reg_dmabuf_mr" : "ibv_reg_mr", " of ",
                       emr.length, " bytes failed: ", strerror(errno)));
    }
    regions_.push_back(lr);
    ForgetRegionCaches();
    if (emr.access & kAccessRemoteWrite) {
      for (auto& pp : peers_) {
        if (pp->used && pp->connected) {
          absl::Status s = SendRegionFrame(pp.get(), kFrameRegion, lr);
          if (!s.ok()) return s;
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status DeregisterMemory(uint32_t lkey) {
    for (size_t i = 0; i < regions_.size(); ++i) {
      if (regions_[i].emr.lkey != lkey) continue;
      LocalRegion lr = regions_[i];
      if (lr.emr.access & kAccessRemoteWrite) {
        for (auto& pp : peers_) {
          if (pp->used && pp->connected) {
            SendRegionFrame(pp.get(), kFrameGone, lr).IgnoreError();
          }
        }
      }
      ibv_dereg_mr(lr.mr);
      regions_.erase(regions_.begin() + static_cast<long>(i));
      ForgetRegionCaches();
      return absl::OkStatus();
    }
    return absl::NotFoundError(absl::StrCat("no verbs region for lkey ", lkey));
  }

  absl::Status SendRegionFrame(Peer* p, uint8_t type, const LocalRegion& lr) {
    RegionFrame f;
    f.peer = p->id;
    f.type = type;
    f.erkey = lr.emr.rkey;
    f.vrkey = lr.mr->rkey;
    f.eaddr = lr.emr.addr;
    f.va = lr.va;
    f.length = lr.emr.length;
    if (queued_frames_.empty()) {
      PollSendCq();  // may recycle a control QP (queues its replay)
      if (queued_frames_.empty() && !CtrlFull(p)) return PostRegionFrame(p, f);
    }
    queued_frames_.push_back(f);
    st_.tx_frames_queued.Add();
    return absl::OkStatus();
  }

  // A HELLO frame (start-up), in order behind queued region frames. Does
  // not poll the send CQ: it may run inside RxBurst.
  absl::Status SendHello(Peer* p, uint32_t flags) {
    RegionFrame f;
    f.peer = p->id;
    f.type = kFrameHello;
    f.erkey = flags;
    st_.tx_hellos.Add();
    if (queued_frames_.empty() && !CtrlFull(p)) return PostRegionFrame(p, f);
    queued_frames_.push_back(f);
    st_.tx_frames_queued.Add();
    return absl::OkStatus();
  }

  // Sends queued region frames while their peers' rings have room.
  void FlushRegionFrames() {
    size_t done = 0;
    for (; done < queued_frames_.size(); ++done) {
      const RegionFrame& f = queued_frames_[done];
      Peer* p = PeerById(f.peer);
      if (p == nullptr || !p->connected || !p->ctrl_alive) continue;
      if (CtrlFull(p)) break;
      if (!PostRegionFrame(p, f).ok()) RetireCtrl(p, "post region frame");
    }
    queued_frames_.erase(queued_frames_.begin(),
                         queued_frames_.begin() + static_cast<long>(done));
  }

  // Posts one region frame on the control QP (REQUIRES: ring not full).
  absl::Status PostRegionFrame(Peer* p, const RegionFrame& f) {
    const uint64_t pos = p->ring_head++;
    uint8_t* b = &p->ring[(pos % o_.ctrl_depth) * ctrl_buf_];
    PutFrameHeader(b, f.type, 1);
    size_t len = kFrameHeader;
    if (f.type == kFrameRegion) {
      Put32(b + 8, f.erkey);
      Put32(b + 12, f.vrkey);
      Put64(b + 16, f.eaddr);
      Put64(b + 24, f.va);
      Put64(b + 32, f.length);
      len += kRegionBytes;
    } else if (f.type == kFrameHello) {
      Put32(b + 8, f.erkey);
      Put32(b + 12, 0);
      len += kHelloBytes;
    } else {
      Put32(b + 8, f.erkey);
      Put32(b + 12, 0);
      len += kRegionGoneBytes;
    }
    ibv_sge sge{reinterpret_cast<uint64_t>(b), static_cast<uint32_t>(len),
                p->ring_mr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = MakeWrId(kWrCtrl, p->id - 1, kNoQp, static_cast<uint32_t>(pos));
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    p->ctrl_since_signal = 0;
    if (ibv_post_send(p->ctrl, &wr, &bad) != 0) {
      return absl::UnavailableError(
          absl::StrCat("post region frame: ", strerror(errno)));
    }
    st_.tx_ctrl.Add();
    if (!p->ctrl_up) p->startup_log.push_back(f);  // replayed on a recycle
    return absl::OkStatus();
  }

  // last_local_ / last_rx_ point into regions_: every insertion or erasure
  // may move the elements (a reallocation frees them; the allocator then
  // reuses the first bytes of the block while the rkey further in survives,
  // so a stale cache would still "match" and fail every range check).
  void ForgetRegionCaches() {
    last_local_ = nullptr;
    last_rx_ = nullptr;
  }

  const LocalRegion* LocalByVa(const uint8_t* ptr, uint32_t len) {
    const uint64_t a = reinterpret_cast<uint64_t>(ptr);
    auto in = [&](const LocalRegion* r) {
      return r && a >= r->va && len <= r->emr.length &&
             a - r->va <= r->emr.length - len;
    };
    if (in(last_local_)) return last_local_;
    for (const LocalRegion& r : regions_) {
      if (in(&r)) return last_local_ = &r;
    }
    return nullptr;
  }

  const LocalRegion* LocalByRkey(uint32_t rkey) {
    if (last_rx_ && last_rx_->emr.rkey == rkey) return last_rx_;
    for (const LocalRegion& r : regions_) {
      if (r.emr.rkey == rkey) return last_rx_ = &r;
    }
    return nullptr;
  }

  // ------------------------------------------------------------ transmit

  // kHold: DATA waits for the peer's HELLO (start-up); like kFull, the
  // burst stops there and the driver offers the packet again.
  enum class TxResult { kDone, kFull, kHold };

  size_t TxBurst(Time now, const TxPacket* pkts, size_t n) {
    now_ = now;
    n = std::min(n, kMaxBurst);
    if (!health_.ok()) {
      st_.tx_drop_device_lost.Add(n);
      return n;
    }
    if (sends_since_poll_ >= 8) PollSendCq();
    if (!queued_frames_.empty()) FlushRegionFrames();
    if (closes_dirty_) SendCloses();
    nwr_ = 0;
    nqp_touched_ = 0;
    npeer_touched_ = 0;
    const uint64_t repeated = RepeatedSacks(pkts, n);
    size_t i = 0;
    for (; i < n; ++i) {
      const TxPacket& t = pkts[i];
      if ((repeated >> i) & 1) {
        st_.tx_sacks_merged.Add();
        continue;
      }
      Peer* p = PeerById(t.peer);
      if (p == nullptr || !p->connected || !p->ctrl_alive) {
        st_.tx_drop_unknown_peer.Add();
        continue;
      }
      if (t.header_len < wire::kCommonHeaderSize) {
        st_.tx_drop_malformed.Add();
        continue;
      }
      if (!p->ctrl_up && p->gate) {
        // The peer's control QP has not acknowledged anything yet (it may
        // not have connected): keep the control QP to the start-up frames,
        // so that it can be recycled if its retries run out.
        if (WaitingForCtrl(p)) {
          st_.tx_wait_ready.Add();
          break;
        }
        st_.tx_drop_not_ready.Add();
        MarkUndescribed(p, t);
        continue;
      }
      const auto type = static_cast<wire::PacketType>(t.header[3]);
      TxResult r;
      if (type == wire::PacketType::kData) {
        r = TxData(p, t);
      } else if (type == wire::PacketType::kProbe) {
        r = TxProbe(p, t);
      } else {
        r = TxCtrl(p, t.header, t.header_len, nullptr, 0);
        if (r == TxResult::kDone) st_.tx_ctrl.Add();
      }
      if (r == TxResult::kFull) {
        st_.tx_backpressure.Add();
        break;
      }
      if (r == TxResult::kHold) {
        st_.tx_wait_ready.Add();
        break;
      }
    }
    Flush();
    ++sends_since_poll_;
    return i;
  }

  // Bit i set: pkts[i] is a SACK that the next SACK of the burst repeats,
  // so only that one is sent. The engine fills in a SACK's state
  // (cumulative PSN, bitmap, bytes and out-of-order count) when it emits
  // it, so SACKs of one connection emitted in one poll (one per packet that
  // arrived out of order in a receive batch) differ only in their trigger
  // (trigger PSN, echo timestamp and path, coalesced count). The later
  // trigger is the newer one; an earlier one's ECN mark is never dropped.
  // What is lost is the earlier triggers' echo (RTT samples, path
  // feedback), as when the SACK is lost on the wire.
  static uint64_t RepeatedSacks(const TxPacket* pkts, size_t n) {
    static_assert(kMaxBurst <= 64);
    constexpr uint8_t kSack = static_cast<uint8_t>(wire::PacketType::kSack);
    uint64_t repeated = 0;
    const TxPacket* later = nullptr;
    for (size_t k = n; k-- > 0;) {
      const TxPacket& t = pkts[k];
      if (t.header_len != wire::kSackHeaderSize || t.header[3] != kSack)
        continue;
      if (later != nullptr && later->peer == t.peer) {
        namespace off = wire::internal::off;
        const uint8_t* a = t.header;
        const uint8_t* b = later->header;
        static_assert(off::kDstConn + 4 == off::kSCumPsn &&
                      off::kSBytesReceived + 8 == off::kSBitmap &&
                      off::kSBitmapBase + 4 == off::kSTriggerPsn);
        if (memcmp(a + off::kDstConn, b + off::kDstConn, 8) == 0 &&
            memcmp(a + off::kSBytesReceived, b + off::kSBytesReceived,
                   off::kSTriggerPsn - off::kSBytesReceived) == 0 &&
            memcmp(a + off::kSOooCount, b + off::kSOooCount, 4) == 0 &&
            memcmp(a + off::kSRxWindowPenalty, b + off::kSRxWindowPenalty, 2) ==
                0 &&
            a[off::kSEcnSeen] <= b[off::kSEcnSeen]) {
          repeated |= uint64_t{1} << k;
        }
      }
      later = &t;
    }
    return repeated;
  }

  // Packets for a peer whose control QP is not up wait while ready_wait has
  // not run out since the first one; then they are dropped (the engine
  // resends them) until the peer answers.
  bool WaitingForCtrl(Peer* p) {
    if (!p->ready_waiting) {
      p->ready_waiting = true;
      p->ready_since = now_;
    }
    if (now_ - p->ready_since < o_.ready_wait) return true;
    if (!p->not_up_reported) {
      p->not_up_reported = true;
      if (!p->peer_ready) {  // the DATA wait below ran out as well
        p->peer_ready = true;
        st_.ready_timeouts.Add();
      }
      fprintf(stderr,
              "prism verbs: %s peer %u: its control QP has acknowledged "
              "nothing within %llu us (not connected yet?); packets for it "
              "are dropped until it does, for at most %llu ms after "
              "connecting\n",
              name_.c_str(), p->id,
              static_cast<unsigned long long>(o_.ready_wait / kMicrosecond),
              static_cast<unsigned long long>(o_.connect_wait / kMillisecond));
    }
    return false;
  }

  // DATA dropped before the control QP was up: its message must still be
  // described when it is sent again, even after later messages were.
  void MarkUndescribed(Peer* p, const TxPacket& t) {
    if (static_cast<wire::PacketType>(t.header[3]) != wire::PacketType::kData) {
      return;
    }
    wire::Packet pk;
    if (wire::DecodeSplit(t.header, t.header_len, t.payload, t.payload_len,
                          &pk) != wire::DecodeError::kOk) {
      return;
    }
    if (NeedDesc(p, pk.data.msn)) SetUndesc(p, pk.data.msn, true);
  }

  ibv_send_wr* NewWr(ibv_sge** sge) {
    ibv_send_wr* wr = &wrs_[nwr_];
    *sge = &sges_[nwr_];
    ++nwr_;
    *wr = {};
    wr->sg_list = *sge;
    return wr;
  }

  void ChainData(Peer* p, uint16_t qi, ibv_send_wr* wr) {
    DataQp& q = p->qps[qi];
    if (q.head == nullptr) {
      q.head = wr;
      qp_touched_[nqp_touched_++] = {p, qi};
    } else {
      q.tail->next = wr;
    }
    q.tail = wr;
    ++q.inflight;
    ++q.posted;
    if (++q.since_signal >= o_.signal_every) {
      st_.tx_data_signalled.Add();
      wr->send_flags |= IBV_SEND_SIGNALED;
      wr->wr_id = MakeWrId(kWrData, p->id - 1, qi, q.since_signal);
      q.since_signal = 0;
    }
  }

  void ChainCtrl(Peer* p, ibv_send_wr* wr, uint64_t pos) {
    if (p->chead == nullptr) {
      p->chead = wr;
      peer_touched_[npeer_touched_++] = p;
    } else {
      p->ctail->next = wr;
    }
    p->ctail = wr;
    if (!p->ctrl_up) p->ctrl_unlogged = true;
    if (++p->ctrl_since_signal >= o_.signal_every ||
        p->ring_head - p->ring_tail >= o_.ctrl_depth - o_.signal_every) {
      wr->send_flags |= IBV_SEND_SIGNALED;
      wr->wr_id =
          MakeWrId(kWrCtrl, p->id - 1, kNoQp, static_cast<uint32_t>(pos));
      p->ctrl_since_signal = 0;
    }
  }

  bool CtrlFull(const Peer* p) const {
    return p->ring_head - p->ring_tail >= o_.ctrl_depth;
  }

  // A SEND on the control QP of a copy of header (+ payload).
  TxResult TxCtrl(Peer* p, const uint8_t* hdr, size_t hlen,
                  const uint8_t* payload, size_t plen) {
    if (hlen + plen > ctrl_buf_) {
      st_.tx_drop_malformed.Add();
      return TxResult::kDone;
    }
    if (CtrlFull(p)) return TxResult::kFull;
    const uint64_t pos = p->ring_head++;
    uint8_t* b = &p->ring[(pos % o_.ctrl_depth) * ctrl_buf_];
    memcpy(b, hdr, hlen);
    if (plen) memcpy(b + hlen, payload, plen);
    ibv_sge* sge;
    ibv_send_wr* wr = NewWr(&sge);
    *sge = {reinterpret_cast<uint64_t>(b), static_cast<uint32_t>(hlen + plen),
            p->ring_mr->lkey};
    wr->num_sge = 1;
    wr->opcode = IBV_WR_SEND;
    ChainCtrl(p, wr, pos);
    return TxResult::kDone;
  }

  TxResult TxProbe(Peer* p, const TxPacket& t) {
    const uint16_t qi = static_cast<uint16_t>(t.path % p->qps.size());
    DataQp& q = p->qps[qi];
    if (!q.alive) {
      st_.tx_drop_dead_path.Add();
      return TxResult::kDone;
    }
    if (t.header_len > kDataRecvBuf || t.header_len > max_inline_) {
      // Cannot travel inline on the path: use the control channel.
      TxResult r = TxCtrl(p, t.header, t.header_len, nullptr, 0);
      if (r == TxResult::kDone) st_.tx_ctrl.Add();
      return r;
    }
    if (q.inflight >= o_.sq_depth) return TxResult::kFull;
    ibv_sge* sge;
    ibv_send_wr* wr = NewWr(&sge);
    *sge = {reinterpret_cast<uint64_t>(t.header), t.header_len, 0};
    wr->num_sge = 1;
    wr->opcode = IBV_WR_SEND;
    wr->send_flags = IBV_SEND_INLINE;
    ChainData(p, qi, wr);
    st_.tx_probe.Add();
    return TxResult::kDone;
  }

  bool NeedDesc(const Peer* p, uint32_t msn) const {
    return !p->described || static_cast<int32_t>(msn - p->described_msn) > 0 ||
           (p->any_undesc && UndescBit(p, msn));
  }
  bool UndescBit(const Peer* p, uint32_t msn) const {
    const uint32_t b = msn & (o_.desc_ring - 1);
    return (p->undesc_bits[b / 64] >> (b % 64)) & 1;
  }
  void SetUndesc(Peer* p, uint32_t msn, bool on) {
    const uint32_t b = msn & (o_.desc_ring - 1);
    const uint64_t m = uint64_t{1} << (b % 64);
    if (on) {
      p->undesc_bits[b / 64] |= m;
      p->any_undesc = true;
    } else {
      p->undesc_bits[b / 64] &= ~m;
    }
  }

  void AppendDesc(Peer* p, const wire::DataHeader& h, uint32_t first_psn) {
    if (p->frame_wr == nullptr) {
      const uint64_t pos = p->ring_head++;
      uint8_t* b = &p->ring[(pos % o_.ctrl_depth) * ctrl_buf_];
      PutFrameHeader(b, kFrameDesc, 0);
      ibv_sge* sge;
      ibv_send_wr* wr = NewWr(&sge);
      *sge = {reinterpret_cast<uint64_t>(b), kFrameHeader, p->ring_mr->lkey};
      wr->num_sge = 1;
      wr->opcode = IBV_WR_SEND;
      ChainCtrl(p, wr, pos);
      p->frame_wr = wr;
      p->frame_buf = b;
      st_.tx_ctrl.Add();
    }
    uint8_t* b = p->frame_buf;
    const uint16_t count = Get16(b + 4);
    uint8_t* d = b + kFrameHeader + size_t{count} * kDescBytes;
    MessageDescriptor md = DescriptorFromHeader(h, o_.mtu_payload);
    md.first_psn = first_psn;
    EncodeDescriptor(md, d);
    Put16(b + 4, static_cast<uint16_t>(count + 1));
    p->frame_wr->sg_list->length += kDescBytes;
    if (!p->described || MsnBefore(p->described_msn, h.msn)) {
      p->described_msn = h.msn;
    }
    p->described = true;
    if (p->any_undesc) SetUndesc(p, h.msn, false);
    st_.tx_descriptors.Add();
  }

  bool FrameHasRoom(const Peer* p) const {
    return p->frame_wr != nullptr &&
           p->frame_wr->sg_list->length + kDescBytes <= ctrl_buf_;
  }

  TxResult TxData(Peer* p, const TxPacket& t) {
    wire::Packet pk;
    if (wire::DecodeSplit(t.header, t.header_len, t.payload, t.payload_len,
                          &pk) != wire::DecodeError::kOk ||
        pk.trimmed) {
      st_.tx_drop_malformed.Add();
      return TxResult::kDone;
    }
    const wire::DataHeader& h = pk.data;
    if (p->bound) {
      if (MsnBefore(h.msn, p->acked_next)) {
        // The engine already reported this message acknowledged (a resend
        // that waited in the driver's queue): sending it could only land
        // after the message's close.
        st_.tx_drop_acked.Add();
        return TxResult::kDone;
      }
      if (h.flags & wire::kFlagRetransmit) {
        const uint32_t b = h.msn & (o_.desc_ring - 1);
        p->retx_bits[b / 64] |= uint64_t{1} << (b % 64);
      }
    }
    const uint32_t plen = h.payload_len;
    const uint32_t mtu = o_.mtu_payload;
    const bool aligned = h.msg_offset % mtu == 0 && plen <= mtu;
    // Describe a new message first (on the control QP, posted before data).
    const bool need_desc = aligned && NeedDesc(p, h.msn);
    if (need_desc && !FrameHasRoom(p) && CtrlFull(p)) return TxResult::kFull;
    const uint16_t qi = static_cast<uint16_t>(t.path % p->qps.size());
    DataQp& q = p->qps[qi];
    // Where it goes.
    const RemoteRegion* rr = nullptr;
    if (p->last_rr && p->last_rkey == h.rkey) {
      rr = p->last_rr;
    } else {
      auto it = p->rregions.find(h.rkey);
      if (it != p->rregions.end()) {
        rr = &it->second;
        p->last_rr = rr;
        p->last_rkey = h.rkey;
      }
    }
    const bool in_range = rr && h.remote_addr >= rr->eaddr &&
                          plen <= rr->length &&
                          h.remote_addr - rr->eaddr <= rr->length - plen;
    uint32_t lkey = 0;
    bool have_src = plen == 0 || plen <= max_inline_;
    if (!have_src) {
      const LocalRegion* lr = LocalByVa(t.payload, plen);
      if (lr) {
        lkey = lr->mr->lkey;
        have_src = true;
      }
    }
    if (rr == nullptr && !p->peer_ready && aligned && have_src &&
        o_.ready_wait > 0) {
      // Start-up: the peer's advertisements may still be on their way (its
      // HELLO has not arrived). Wait, at most ready_wait, rather than send
      // the data whole over the control QP.
      if (!p->ready_waiting) {
        p->ready_waiting = true;
        p->ready_since = now_;
      }
      if (now_ - p->ready_since < o_.ready_wait) return TxResult::kHold;
      p->peer_ready = true;  // give up waiting: the fallback below
      st_.ready_timeouts.Add();
      fprintf(stderr,
              "prism verbs: %s peer %u: no control SEND from the peer within "
              "%llu us of the first DATA; data for regions it has not "
              "advertised goes over the control QP\n",
              name_.c_str(), p->id,
              static_cast<unsigned long long>(o_.ready_wait / kMicrosecond));
    }
    if (!in_range || !have_src || !aligned) {
      // The peer has not advertised the target (or it is out of range, or
      // the source is not registered): send the packet whole; the peer's
      // engine validates it (BAD_KEY / BAD_RANGE) or copies it.
      if (need_desc && !FrameHasRoom(p) &&
          p->ring_head + 1 - p->ring_tail >= o_.ctrl_depth) {
        return TxResult::kFull;
      }
      if (CtrlFull(p)) return TxResult::kFull;
      if (need_desc) AppendDesc(p, h, h.psn - h.msg_offset / mtu);
      TxResult r = TxCtrl(p, t.header, t.header_len, t.payload, plen);
      if (r == TxResult::kDone) st_.tx_fallback.Add();
      return r;
    }
    if (q.alive && q.inflight >= o_.sq_depth) return TxResult::kFull;
    if (need_desc) AppendDesc(p, h, h.psn - h.msg_offset / mtu);
    if (!q.alive) {
      st_.tx_drop_dead_path.Add();
      return TxResult::kDone;
    }
    TxRec& rec = p->txring[h.psn & (kTxRing - 1)];
    rec.psn = h.psn;
    rec.path = t.path;
    rec.ts = h.send_ts;
    rec.valid = true;
    ibv_sge* sge;
    ibv_send_wr* wr = NewWr(&sge);
    wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr->imm_data = htonl(h.psn);
    wr->wr.rdma.remote_addr = rr->va + (h.remote_addr - rr->eaddr);
    wr->wr.rdma.rkey = rr->vrkey;
    if (plen > 0) {
      *sge = {reinterpret_cast<uint64_t>(t.payload), plen, lkey};
      wr->num_sge = 1;
      if (plen <= max_inline_) wr->send_flags |= IBV_SEND_INLINE;
    }
    ChainData(p, qi, wr);
    st_.tx_data.Add();
    st_.tx_data_bytes.Add(plen);
    return TxResult::kDone;
  }

  void Flush() {
    ibv_send_wr* bad = nullptr;
    // Control first: descriptors must leave before the data they describe.
    for (size_t i = 0; i < npeer_touched_; ++i) {
      Peer* p = peer_touched_[i];
      for (ibv_send_wr* w = p->chead; w; w = w->next) {
        if (w->sg_list->length <= max_inline_) w->send_flags |= IBV_SEND_INLINE;
      }
      if (ibv_post_send(p->ctrl, p->chead, &bad) != 0) {
        st_.tx_post_errors.Add();
        RetireCtrl(p, "ibv_post_send failed on the control QP");
      }
      p->chead = p->ctail = nullptr;
      p->frame_wr = nullptr;
      p->frame_buf = nullptr;
    }
    for (size_t i = 0; i < nqp_touched_; ++i) {
      Peer* p = qp_touched_[i].peer;
      const uint16_t qi = qp_touched_[i].qp;
      DataQp& q = p->qps[qi];
      if (o_.message_close && q.since_signal > 0) {
        // The message close waits for local completions: the last WR of
        // every chain is signalled, so every posted WR is covered by a
        // completion without waiting for later traffic on this QP.
        st_.tx_data_signalled.Add();
        q.tail->send_flags |= IBV_SEND_SIGNALED;
        q.tail->wr_id = MakeWrId(kWrData, p->id - 1, qi, q.since_signal);
        q.since_signal = 0;
      }
      if (o_.debug_park_qp == static_cast<int>(qi)) {
        for (ibv_send_wr* w = q.head; w; w = w->next) {
          Parked pw;
          pw.qp = q.qp;
          pw.wr = *w;
          pw.wr.next = nullptr;
          if (w->num_sge > 0) pw.sge = *w->sg_list;
          parked_.push_back(pw);
        }
        q.head = q.tail = nullptr;
        continue;
      }
      if (ibv_post_send(q.qp, q.head, &bad) != 0) {
        st_.tx_post_errors.Add();
        Retire(p, qp_touched_[i].qp, "ibv_post_send failed");
      }
      q.head = q.tail = nullptr;
    }
  }

  void Retire(Peer* p, uint16_t qi, const char* why) {
    DataQp& q = p->qps[qi];
    if (!q.alive) return;
    q.alive = false;
    st_.qp_errors.Add();
    fprintf(stderr,
            "prism verbs: %s peer %u data QP %u (qpn %u) failed: %s; its "
            "paths are retired\n",
            name_.c_str(), p->id, qi, q.qp->qp_num, why);
  }

  void RetireCtrl(Peer* p, const char* why) {
    if (!p->ctrl_alive) return;
    p->ctrl_alive = false;
    st_.qp_errors.Add();
    fprintf(stderr,
            "prism verbs: %s peer %u control QP (qpn %u) failed: %s; the peer "
            "is unreachable\n",
            name_.c_str(), p->id, p->ctrl->qp_num, why);
  }

  void PollSendCq() {
    sends_since_poll_ = 0;
    PollSendCqOnce();
    if (nwaiting_ > 0) {
      for (auto& pp : peers_) {
        if (pp->used && pp->nwait > 0) TryClose(pp.get());
      }
    }
  }

  void PollSendCqOnce() {
    ibv_wc wc[32];
    for (;;) {
      const int k = ibv_poll_cq(send_cq_, 32, wc);
      if (k <= 0) return;
      for (int i = 0; i < k; ++i) {
        const uint64_t id = wc[i].wr_id;
        const uint64_t kind = id >> 62;
        const uint32_t pidx = static_cast<uint32_t>((id >> 48) & 0x3FFF);
        const uint16_t qi = static_cast<uint16_t>((id >> 32) & 0xFFFF);
        const QpRef* ref = nullptr;
        auto it = qpn_.find(wc[i].qp_num);
        if (it != qpn_.end()) ref = &it->second;
        if (ref == nullptr) continue;  // a destroyed peer's QP
        Peer* p = peers_[ref->peer].get();
        if (ref->qp == kNoQp && p->recycles > 0 && kind == kWrCtrl &&
            CtrlPos(p, id) < p->epoch_pos) {
          continue;  // posted to the control QP before it was recycled
        }
        if (wc[i].status != IBV_WC_SUCCESS) {
          if (ref->qp == kNoQp) {
            if (wc[i].status == IBV_WC_RETRY_EXC_ERR && MayRecycle(p)) {
              RecycleCtrl(p);
              continue;
            }
            st_.cq_errors.Add();
            if (wc[i].status == IBV_WC_RETRY_EXC_ERR && p->connected &&
                !p->ctrl_up) {
              const std::string why = absl::StrFormat(
                  "%s: the peer's control QP acknowledged nothing in %.1f s "
                  "after connecting (%u recycles; connect_wait %.1f s); has "
                  "the peer connected?",
                  ibv_wc_status_str(wc[i].status),
                  static_cast<double>(MonoTime() - p->connected_at) / kSecond,
                  p->recycles, static_cast<double>(o_.connect_wait) / kSecond);
              RetireCtrl(p, why.c_str());
            } else {
              RetireCtrl(p, ibv_wc_status_str(wc[i].status));
            }
          } else {
            st_.cq_errors.Add();
            Retire(p, ref->qp, ibv_wc_status_str(wc[i].status));
          }
          continue;
        }
        if (kind == kWrData && pidx == ref->peer && qi == ref->qp) {
          DataQp& q = p->qps[qi];
          const uint32_t cnt = static_cast<uint32_t>(id & 0xFFFFFFFF);
          q.inflight = q.inflight >= cnt ? q.inflight - cnt : 0;
          q.done += cnt;
        } else if (kind == kWrCtrl && ref->qp == kNoQp) {
          const uint64_t pos = CtrlPos(p, id);
          if (pos + 1 > p->ring_tail && pos < p->ring_head) {
            p->ring_tail = pos + 1;
          }
          if (!p->ctrl_up) CtrlUp(p);
        }
      }
    }
  }

  // Ring positions are 32-bit in the wr_id: extend against head.
  static uint64_t CtrlPos(const Peer* p, uint64_t wr_id) {
    const uint32_t pos32 = static_cast<uint32_t>(wr_id & 0xFFFFFFFF);
    return p->ring_head -
           static_cast<uint32_t>(static_cast<uint32_t>(p->ring_head) - pos32);
  }

  // A control SEND of ours completed: the peer's control QP is ready.
  void CtrlUp(Peer* p) {
    p->ctrl_up = true;
    p->startup_log.clear();
    p->startup_log.shrink_to_fit();
    if (p->recycles > 0) {
      fprintf(stderr,
              "prism verbs: %s peer %u: the peer's control QP answered %.1f s "
              "after we connected (control QP recycled %u times)\n",
              name_.c_str(), p->id,
              static_cast<double>(MonoTime() - p->connected_at) / kSecond,
              p->recycles);
    }
  }

  // A control QP whose RC retries ran out may be recycled while the peer's
  // QP never acknowledged anything (so it holds nothing of ours but,
  // possibly, a prefix of the start-up frames, which the replay repeats
  // with the same PSNs) and only logged start-up frames were posted on it,
  // within connect_wait of ConnectPeer.
  bool MayRecycle(const Peer* p) const {
    return p->connected && p->ctrl_alive && !p->ctrl_up && !p->ctrl_unlogged &&
           MonoTime() - p->connected_at < o_.connect_wait;
  }

  // ERR -> RESET -> INIT -> RTR -> RTS towards the same remote QP: the send
  // PSN starts again where the peer expects it (it has acknowledged
  // nothing), the receive PSN follows what the peer already sent us. The
  // control receive queue is the shared SRQ, so no receive is lost. The
  // start-up frames are replayed in their order, ahead of queued frames.
  void RecycleCtrl(Peer* p) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    absl::Status s = ibv_modify_qp(p->ctrl, &a, IBV_QP_STATE) == 0
                         ? absl::OkStatus()
                         : absl::UnavailableError(
                               absl::StrCat("QP to RESET: ", strerror(errno)));
    if (s.ok()) s = ToInit(p->ctrl, IBV_ACCESS_LOCAL_WRITE);
    if (s.ok()) {
      s = ToRts(p->ctrl, true, p->remote.ctrl_qpn,
                p->remote.psn + p->ctrl_rx_pkts, p->path_mtu, p->remote.gid, 0,
                o_.ctrl_retry_cnt);
    }
    if (!s.ok()) {
      st_.cq_errors.Add();
      const std::string why = absl::StrCat(
          "recycling it after retry exceeded failed: ", s.message());
      RetireCtrl(p, why.c_str());
      return;
    }
    ++p->recycles;
    st_.ctrl_qp_recycles.Add();
    p->ring_tail = p->ring_head;
    p->epoch_pos = p->ring_head;
    p->ctrl_since_signal = 0;
    std::vector<RegionFrame> replay;
    replay.swap(p->startup_log);
    queued_frames_.insert(queued_frames_.begin(), replay.begin(), replay.end());
    fprintf(stderr,
            "prism verbs: %s peer %u: control QP retries ran out %.1f s after "
            "connecting, before the peer's QP answered (not connected yet?); "
            "recycled it (%u) and resending %zu start-up frames\n",
            name_.c_str(), p->id,
            static_cast<double>(MonoTime() - p->connected_at) / kSecond,
            p->recycles, replay.size());
  }

  void PollAsync() {
    ibv_async_event ev;
    while (ibv_get_async_event(ctx_, &ev) == 0) {
      st_.async_events.Add();
      switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR: {
          auto it = qpn_.find(ev.element.qp->qp_num);
          if (it != qpn_.end()) {
            Peer* p = peers_[it->second.peer].get();
            if (it->second.qp == kNoQp) {
              if (MayRecycle(p)) {
                RecycleCtrl(p);  // the retry-exceeded CQE is then stale
              } else {
                RetireCtrl(p, ibv_event_type_str(ev.event_type));
              }
            } else {
              Retire(p, it->second.qp, ibv_event_type_str(ev.event_type));
            }
          }
          break;
        }
        case IBV_EVENT_DEVICE_FATAL:
          fatal_ = true;
          health_ = absl::UnavailableError(absl::StrCat(
              "RDMA device ", name_, " lost (IBV_EVENT_DEVICE_FATAL)"));
          fprintf(stderr, "prism verbs: %s\n",
                  std::string(health_.message()).c_str());
          break;
        case IBV_EVENT_PORT_ERR:
          if (ev.element.port_num == port_ && !fatal_) {
            health_ = absl::UnavailableError(
                absl::StrCat("RDMA device ", name_, " port ", port_,
                             " is down (IBV_EVENT_PORT_ERR)"));
            fprintf(stderr, "prism verbs: %s\n",
                    std::string(health_.message()).c_str());
          }
          break;
        case IBV_EVENT_PORT_ACTIVE:
          if (ev.element.port_num == port_ && !fatal_ && !health_.ok()) {
            health_ = absl::OkStatus();
            fprintf(stderr, "prism verbs: %s port %u is up again\n",
                    name_.c_str(), port_);
          }
          break;
        default:
          break;
      }
      ibv_ack_async_event(&ev);
    }
  }

  // ------------------------------------------------------------ receive

  bool Repost() {
    bool ok = true;
    if (!repost_data_.empty()) {
      for (size_t i = 0; i < repost_data_.size(); ++i) {
        data_rwr_[repost_data_[i]].next = i + 1 < repost_data_.size()
                                              ? &data_rwr_[repost_data_[i + 1]]
                                              : nullptr;
      }
      ibv_recv_wr* bad = nullptr;
      ok = ibv_post_srq_recv(data_srq_, &data_rwr_[repost_data_[0]], &bad) == 0;
      repost_data_.clear();
    }
    if (!repost_ctrl_.empty()) {
      for (size_t i = 0; i < repost_ctrl_.size(); ++i) {
        ctrl_rwr_[repost_ctrl_[i]].next = i + 1 < repost_ctrl_.size()
                                              ? &ctrl_rwr_[repost_ctrl_[i + 1]]
                                              : nullptr;
      }
      ibv_recv_wr* bad = nullptr;
      ok = ibv_post_srq_recv(ctrl_srq_, &ctrl_rwr_[repost_ctrl_[0]], &bad) ==
               0 &&
           ok;
      repost_ctrl_.clear();
    }
    return ok;
  }

  size_t RxBurst(RxPacket* pkts, size_t n) {
    n = std::min(n, kMaxBurst);
    if (armed_) DrainChannel();
    if (!Repost()) st_.rx_drop_unknown.Add();
    if ((++rx_calls_ & 15) == 0) PollAsync();
    PollSendCq();
    if (!queued_frames_.empty()) FlushRegionFrames();
    if (closes_dirty_) SendCloses();
    if (!held_.empty()) ReleaseHeld();
    size_t out = 0;
    if (pending_dirty_) ResolvePending(pkts, n, &out);
    ibv_wc wc[32];
    while (out < n) {
      const int k = ibv_poll_cq(
          recv_cq_, static_cast<int>(std::min<size_t>(n - out, 32)), wc);
      if (k <= 0) break;
      for (int i = 0; i < k; ++i) HandleRecv(wc[i], pkts, &out);
    }
    if (pending_dirty_ && out < n) ResolvePending(pkts, n, &out);
    return out;
  }

  void HandleRecv(const ibv_wc& wc, RxPacket* pkts, size_t* out) {
    const bool is_ctrl = (wc.wr_id & kRecvCtrlBit) != 0;
    const uint32_t bi = static_cast<uint32_t>(wc.wr_id & 0xFFFFFFFF);
    if (!is_ctrl) repost_data_.push_back(bi);
    if (is_ctrl) {
      // A held descriptor frame keeps its buffer until it is handled.
      if (wc.status == IBV_WC_SUCCESS && MaybeHold(wc, bi)) return;
      repost_ctrl_.push_back(bi);
    }
    if (wc.status != IBV_WC_SUCCESS) {
      if (wc.status != IBV_WC_WR_FLUSH_ERR) st_.cq_errors.Add();
      return;
    }
    auto it = qpn_.find(wc.qp_num);
    if (it == qpn_.end()) {
      st_.rx_drop_unknown.Add();
      return;
    }
    const QpRef ref = it->second;
    Peer* p = peers_[ref.peer].get();
    if (is_ctrl) {
      // RC delivers in order: whatever the peer posted on its control QP
      // before this SEND (its region advertisements) has arrived.
      p->peer_ready = true;
      if (!p->ctrl_up) CountCtrlRx(p, wc.byte_len);
      uint8_t* b = &ctrl_bufs_[size_t{bi} * ctrl_buf_];
      HandleCtrl(p, b, wc.byte_len, pkts, out);
      return;
    }
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      const uint32_t psn = ntohl(wc.imm_data);
      if (Resolve(p, ref.qp, psn, wc.byte_len, pkts, out)) return;
      // Its descriptor has not arrived yet: wait for it.
      st_.rx_pending.Add();
      if (npending_ == pending_.size()) {
        st_.rx_drop_no_descriptor.Add();
        pending_head_ = (pending_head_ + 1) % pending_.size();
        --npending_;
      }
      pending_[(pending_head_ + npending_) % pending_.size()] =
          PendingWrite{ref.peer, ref.qp, psn, wc.byte_len};
      ++npending_;
      return;
    }
    // A SEND on a data QP: a PROBE.
    const uint8_t* b = &data_bufs_[size_t{bi} * kDataRecvBuf];
    RxPacket& r = pkts[(*out)++];
    r = RxPacket{};
    r.data = b;
    r.len = wc.byte_len;
    r.peer = p->id;
    st_.rx_ctrl.Add();
  }

  // Packets (PSNs) of a SEND the control QP received: a recycled QP expects
  // the peer's next one.
  static void CountCtrlRx(Peer* p, uint32_t len) {
    const uint32_t m = p->path_mtu ? p->path_mtu : 1;
    p->ctrl_rx_pkts += len == 0 ? 1 : (len + m - 1) / m;
  }

  // debug_defer_descriptors: keeps a descriptor frame's buffer for later.
  bool MaybeHold(const ibv_wc& wc, uint32_t bi) {
    if (o_.debug_defer_descriptors == 0) return false;
    const uint8_t* b = &ctrl_bufs_[size_t{bi} * ctrl_buf_];
    if (wc.byte_len < kFrameHeader || Get16(b) != kCtrlMagic ||
        b[3] != kFrameDesc || held_.size() >= held_.capacity()) {
      return false;
    }
    auto it = qpn_.find(wc.qp_num);
    if (it == qpn_.end()) return false;
    peers_[it->second.peer]->peer_ready = true;  // as in HandleRecv
    if (!peers_[it->second.peer]->ctrl_up) {
      CountCtrlRx(peers_[it->second.peer].get(), wc.byte_len);
    }
    held_.push_back(Held{bi, wc.byte_len, it->second.peer,
                         rx_calls_ + o_.debug_defer_descriptors});
    return true;
  }

  void ReleaseHeld() {
    size_t keep = 0;
    for (size_t i = 0; i < held_.size(); ++i) {
      const Held h = held_[i];
      if (h.due > rx_calls_) {
        held_[keep++] = h;
        continue;
      }
      Peer* p = peers_[h.peer].get();
      if (p->used)
        HandleFrame(p, &ctrl_bufs_[size_t{h.buf} * ctrl_buf_], h.len);
      repost_ctrl_.push_back(h.buf);
    }
    held_.resize(keep);
  }

  void HandleCtrl(Peer* p, uint8_t* b, uint32_t len, RxPacket* pkts,
                  size_t* out) {
    if (len >= kFrameHeader && Get16(b) == kCtrlMagic) {
      HandleFrame(p, b, len);
      return;
    }
    if (len < wire::kCommonHeaderSize) {
      st_.rx_drop_unknown.Add();
      return;
    }
    const auto type = static_cast<wire::PacketType>(b[3]);
    if (type == wire::PacketType::kSack || type == wire::PacketType::kNack) {
      FixEcho(p, b, len, type);
    }
    RxPacket& r = pkts[(*out)++];
    r = RxPacket{};
    r.data = b;
    r.len = len;
    r.peer = p->id;
    st_.rx_ctrl.Add();
  }

  // The receiver's engine echoed the synthesized header's send_ts (0) and
  // path_id (QP index): put back what this side sent (by PSN).
  void FixEcho(Peer* p, uint8_t* b, uint32_t len, wire::PacketType type) {
    wire::Packet pk;
    if (wire::Decode(b, len, &pk) != wire::DecodeError::kOk) return;
    if (type == wire::PacketType::kSack) {
      if (pk.sack.echo_ts != 0) return;
      const TxRec& rec = p->txring[pk.sack.trigger_psn & (kTxRing - 1)];
      if (!rec.valid || rec.psn != pk.sack.trigger_psn) return;
      pk.sack.echo_ts = rec.ts;
      pk.sack.echo_path = rec.path;
      wire::EncodeSack(pk.sack, b, len);
    } else {
      if (pk.nack.echo_ts != 0) return;
      const TxRec& rec = p->txring[pk.nack.psn & (kTxRing - 1)];
      if (!rec.valid || rec.psn != pk.nack.psn) return;
      pk.nack.echo_ts = rec.ts;
      pk.nack.echo_path = rec.path;
      wire::EncodeNack(pk.nack, b, len);
    }
  }

  void HandleFrame(Peer* p, const uint8_t* b, uint32_t len) {
    const uint8_t type = b[3];
    const uint16_t count = Get16(b + 4);
    const size_t item = type == kFrameDesc     ? kDescBytes
                        : type == kFrameRegion ? kRegionBytes
                        : type == kFrameGone   ? kRegionGoneBytes
                        : type == kFrameClose  ? kCloseBytes
                        : type == kFrameHello  ? kHelloBytes
                                               : 0;
    if (b[2] != kCtrlVersion || item == 0 ||
        len != kFrameHeader + item * count) {
      st_.rx_drop_unknown.Add();
      return;
    }
    const uint8_t* d = b + kFrameHeader;
    for (uint16_t i = 0; i < count; ++i, d += item) {
      if (type == kFrameDesc) {
        MessageDescriptor x;
        if (!DecodeDescriptor(d, &x)) {
          st_.rx_drop_unknown.Add();
          continue;
        }
        p->descs->Insert(x);
        st_.rx_descriptors.Add();
        if (npending_ > 0) pending_dirty_ = true;
      } else if (type == kFrameClose) {
        const uint32_t next = Get32(d);
        if (Get32(d + 4) != 0) {
          st_.rx_drop_unknown.Add();
          continue;
        }
        st_.rx_closes.Add();
        if (MsnBefore(p->peer_closed_next, next)) {
          p->peer_closed_next = next;
          if (!p->held_rx.empty()) release_dirty_ = true;
        }
      } else if (type == kFrameHello) {
        const uint32_t flags = Get32(d);
        if ((flags & ~kHelloAsk) != 0 || Get32(d + 4) != 0) {
          st_.rx_drop_unknown.Add();
          continue;
        }
        st_.rx_hellos.Add();
        if ((flags & kHelloAsk) && !p->hello_answered && p->connected &&
            p->ctrl_alive && !o_.debug_mute_hello) {
          p->hello_answered = true;
          if (!SendHello(p, 0).ok()) RetireCtrl(p, "post HELLO");
        }
      } else if (type == kFrameRegion) {
        RemoteRegion r;
        r.vrkey = Get32(d + 4);
        r.eaddr = Get64(d + 8);
        r.va = Get64(d + 16);
        r.length = Get64(d + 24);
        p->rregions[Get32(d)] = r;
        p->last_rr = nullptr;
      } else {
        p->rregions.erase(Get32(d));
        p->last_rr = nullptr;
      }
    }
  }

  // Builds the DATA header of a NIC-placed packet. Returns false when its
  // descriptor is not known yet (the caller keeps it pending); true when the
  // packet was handed out or dropped.
  bool Resolve(Peer* p, uint16_t qi, uint32_t psn, uint32_t len, RxPacket* pkts,
               size_t* out) {
    const MessageDescriptor* d = p->descs->Find(psn);
    if (d == nullptr) return false;
    if (p->remote.message_close && MsnBefore(d->msn, p->peer_closed_next)) {
      // The NIC placed a WRITE of a message its sender had closed: a packet
      // that outlived the close (the residual assumption, docs/verbs.md).
      st_.rx_after_close.Add();
    }
    wire::DataHeader h;
    if (!RebuildDataHeader(*d, psn, len, qi, &h)) {
      st_.rx_drop_bad_imm.Add();
      return true;
    }
    const LocalRegion* lr = LocalByRkey(d->rkey);
    const uint64_t addr = h.remote_addr;
    if (lr == nullptr || addr < lr->emr.addr || len > lr->emr.length ||
        addr - lr->emr.addr > lr->emr.length - len) {
      st_.rx_drop_unknown.Add();
      return true;
    }
    const uint8_t* placed =
        reinterpret_cast<const uint8_t*>(lr->va + (addr - lr->emr.addr));
    if (h.flags & wire::kFlagPayloadCrc) {
      // RoCE's ICRC covered these bytes on the wire; the engine's check then
      // verifies what the NIC placed.
      h.payload_crc = wire::Crc32c(placed, len);
    }
    uint8_t* hb = hdrs_[*out];
    if (wire::EncodeData(h, hb, sizeof(hdrs_[0])) == 0) {
      st_.rx_drop_bad_imm.Add();
      return true;
    }
    RxPacket& r = pkts[(*out)++];
    r = RxPacket{};
    r.data = hb;
    r.len = static_cast<uint32_t>(wire::kDataHeaderSize);
    if (len > 0) {
      r.payload = placed;
      r.payload_len = len;
    }
    r.peer = p->id;
    st_.rx_data.Add();
    st_.rx_data_bytes.Add(len);
    return true;
  }

  void ResolvePending(RxPacket* pkts, size_t n, size_t* out) {
    size_t keep = 0;
    const size_t sz = pending_.size();
    const size_t cnt = npending_;
    for (size_t i = 0; i < cnt; ++i) {
      PendingWrite w = pending_[(pending_head_ + i) % sz];
      Peer* p = peers_[w.peer].get();
      bool done = false;
      if (!p->used) {
        done = true;
      } else if (*out < n) {
        done = Resolve(p, w.qp, w.psn, w.len, pkts, out);
      }
      if (!done) pending_[(pending_head_ + keep++) % sz] = w;
    }
    npending_ = keep;
    // Still dirty if some were skipped only for lack of output room.
    pending_dirty_ = keep > 0 && *out >= n;
  }

  // ------------------------------------------------------------ message close

  absl::Status BindConnection(uint32_t id, ConnId conn) {
    Peer* p = PeerById(id);
    if (p == nullptr) return absl::NotFoundError(absl::StrCat("no peer ", id));
    if (!o_.message_close) return absl::OkStatus();
    if (p->bound) conn_peer_.erase(p->conn);
    p->bound = true;
    p->conn = conn;
    conn_peer_[conn] = p->id;
    return absl::OkStatus();
  }

  void OfferCompletions(const Completion* c, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const Completion& x = c[i];
      Peer* p = nullptr;
      if (!conn_peer_.empty()) {
        auto it = conn_peer_.find(x.conn);
        if (it != conn_peer_.end()) p = PeerById(it->second);
      }
      if (p == nullptr) {
        ready_.push_back(x);
        continue;
      }
      switch (x.type) {
        case CompletionType::kWrite:
          if (x.status != absl::StatusCode::kOk) {
            // Failed: nothing acknowledged; earlier held ones go first.
            ReleaseAll(p);
            ready_.push_back(x);
            break;
          }
          OnAcked(p, x.msn);
          p->held_tx.push_back(x);
          st_.completions_held.Add();
          TryClose(p);
          break;
        case CompletionType::kRecvImmediate:
          if (!p->remote.message_close) {
            ready_.push_back(x);
            break;
          }
          p->held_rx.push_back(x);
          st_.completions_held.Add();
          ReleaseRx(p);
          break;
        case CompletionType::kConnectionError:
          ReleaseAll(p);
          ready_.push_back(x);
          break;
      }
    }
    if (closes_dirty_) SendCloses();
  }

  size_t PollCompletions(Completion* out, size_t max) {
    if (release_dirty_) {
      release_dirty_ = false;
      for (auto& pp : peers_) {
        if (pp->used && !pp->held_rx.empty()) ReleaseRx(pp.get());
      }
    }
    size_t k = 0;
    while (k < max && !ready_.empty()) {
      out[k++] = ready_.front();
      ready_.pop_front();
    }
    return k;
  }

  bool HoldsWriteCompletions(ConnId conn) const {
    for (const Completion& x : ready_) {
      if (x.type == CompletionType::kWrite && x.conn == conn) return true;
    }
    if (conn_peer_.empty()) return false;
    const auto it = conn_peer_.find(conn);
    if (it == conn_peer_.end()) return false;
    const Peer* p = PeerById(it->second);
    return p != nullptr && !p->held_tx.empty();
  }

  size_t held_completions() const {
    size_t n = 0;
    for (const auto& pp : peers_) {
      if (pp->used) n += pp->held_rx.size() + pp->held_tx.size();
    }
    return n;
  }

  // Message `msn` was acknowledged (kWrite, in posting order).
  void OnAcked(Peer* p, uint32_t msn) {
    p->acked_next = msn + 1;
    const uint32_t b = msn & (o_.desc_ring - 1);
    uint64_t& w = p->retx_bits[b / 64];
    const uint64_t bit = uint64_t{1} << (b % 64);
    const bool resent = (w & bit) != 0;
    w &= ~bit;
    if (!resent) {
      // Every transmission of it was placed once (each PSN was sent once
      // and all were acknowledged): nothing of it is left to land.
      if (p->nwait == 0) {
        p->closed_next = msn + 1;
      } else {
        p->wait_msn_next[(p->wait_head + p->nwait - 1) % kCloseWaits] = msn + 1;
      }
      return;
    }
    // A resend (or the original it replaced) may still be queued in the NIC:
    // wait until every WR posted so far has completed locally.
    st_.close_waits.Add();
    size_t slot;
    if (p->nwait == kCloseWaits) {
      slot = (p->wait_head + p->nwait - 1) % kCloseWaits;  // merge into last
    } else {
      slot = (p->wait_head + p->nwait) % kCloseWaits;
      ++p->nwait;
      ++nwaiting_;
    }
    p->wait_msn_next[slot] = msn + 1;
    uint64_t* snap = &p->wait_snap[slot * p->qps.size()];
    for (size_t q = 0; q < p->qps.size(); ++q) snap[q] = p->qps[q].posted;
  }

  // Pops the waits whose WRs have all completed (or whose QPs died) and
  // releases the kWrite completions that are closed now.
  void TryClose(Peer* p) {
    while (p->nwait > 0) {
      const uint64_t* snap = &p->wait_snap[p->wait_head * p->qps.size()];
      bool ok = true;
      for (size_t q = 0; q < p->qps.size() && ok; ++q) {
        const DataQp& d = p->qps[q];
        ok = !d.alive || d.done >= snap[q];
      }
      if (!ok) break;
      p->closed_next = p->wait_msn_next[p->wait_head];
      p->wait_head = (p->wait_head + 1) % kCloseWaits;
      --p->nwait;
      --nwaiting_;
    }
    while (!p->held_tx.empty() &&
           MsnBefore(p->held_tx.front().msn, p->closed_next)) {
      ready_.push_back(p->held_tx.front());
      p->held_tx.pop_front();
    }
    if (p->closed_next != p->close_sent) closes_dirty_ = true;
  }

  void ReleaseRx(Peer* p) {
    while (!p->held_rx.empty() &&
           MsnBefore(p->held_rx.front().msn, p->peer_closed_next)) {
      ready_.push_back(p->held_rx.front());
      p->held_rx.pop_front();
    }
  }

  void ReleaseAll(Peer* p) {
    for (const Completion& c : p->held_rx) ready_.push_back(c);
    for (const Completion& c : p->held_tx) ready_.push_back(c);
    p->held_rx.clear();
    p->held_tx.clear();
  }

  // One cumulative CLOSE frame per peer whose closed_next moved.
  void SendCloses() {
    closes_dirty_ = false;
    for (auto& pp : peers_) {
      Peer* p = pp.get();
      if (!p->used || p->closed_next == p->close_sent) continue;
      if (!p->connected || !p->ctrl_alive) continue;
      if (CtrlFull(p)) {
        closes_dirty_ = true;  // next burst
        continue;
      }
      const uint64_t pos = p->ring_head++;
      uint8_t* b = &p->ring[(pos % o_.ctrl_depth) * ctrl_buf_];
      PutFrameHeader(b, kFrameClose, 1);
      Put32(b + 8, p->closed_next);
      Put32(b + 12, 0);
      ibv_sge sge{reinterpret_cast<uint64_t>(b),
                  static_cast<uint32_t>(kFrameHeader + kCloseBytes),
                  p->ring_mr->lkey};
      ibv_send_wr wr{}, *bad = nullptr;
      wr.wr_id =
          MakeWrId(kWrCtrl, p->id - 1, kNoQp, static_cast<uint32_t>(pos));
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = sge.length <= max_inline_ ? IBV_SEND_INLINE : 0;
      if (!p->ctrl_up) p->ctrl_unlogged = true;
      if (++p->ctrl_since_signal >= o_.signal_every ||
          p->ring_head - p->ring_tail >= o_.ctrl_depth - o_.signal_every) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        p->ctrl_since_signal = 0;
      }
      if (ibv_post_send(p->ctrl, &wr, &bad) != 0) {
        st_.tx_post_errors.Add();
        RetireCtrl(p, "post close frame");
        continue;
      }
      p->close_sent = p->closed_next;
      st_.tx_ctrl.Add();
      st_.tx_closes.Add();
    }
  }

  void ReleaseParked() {
    if (parked_.empty()) return;
    for (Parked& pw : parked_) {
      if (pw.wr.num_sge > 0) pw.wr.sg_list = &pw.sge;
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(pw.qp, &pw.wr, &bad) != 0) st_.tx_post_errors.Add();
    }
    parked_.clear();
  }

  absl::Status ForceQpError(uint32_t id, uint16_t qi) {
    Peer* p = PeerById(id);
    if (p == nullptr || qi >= p->qps.size()) {
      return absl::NotFoundError(absl::StrCat("no QP ", qi, " on peer ", id));
    }
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    if (ibv_modify_qp(p->qps[qi].qp, &a, IBV_QP_STATE) != 0) {
      return absl::UnavailableError(
          absl::StrCat("modify QP to ERR: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  bool qp_alive(uint32_t id, uint16_t qi) const {
    const Peer* p = PeerById(id);
    return p && qi < p->qps.size() && p->qps[qi].alive;
  }

  VerbsStats stats() const {
    VerbsStats s;
    s.tx_data = st_.tx_data.Get();
    s.tx_data_bytes = st_.tx_data_bytes.Get();
    s.tx_ctrl = st_.tx_ctrl.Get();
    s.tx_probe = st_.tx_probe.Get();
    s.tx_descriptors = st_.tx_descriptors.Get();
    s.tx_fallback = st_.tx_fallback.Get();
    s.tx_backpressure = st_.tx_backpressure.Get();
    s.tx_drop_dead_path = st_.tx_drop_dead_path.Get();
    s.tx_drop_unknown_peer = st_.tx_drop_unknown_peer.Get();
    s.tx_drop_device_lost = st_.tx_drop_device_lost.Get();
    s.tx_drop_malformed = st_.tx_drop_malformed.Get();
    s.tx_post_errors = st_.tx_post_errors.Get();
    s.tx_frames_queued = st_.tx_frames_queued.Get();
    s.tx_closes = st_.tx_closes.Get();
    s.tx_drop_acked = st_.tx_drop_acked.Get();
    s.tx_sacks_merged = st_.tx_sacks_merged.Get();
    s.tx_data_signalled = st_.tx_data_signalled.Get();
    s.close_waits = st_.close_waits.Get();
    s.tx_wait_ready = st_.tx_wait_ready.Get();
    s.tx_hellos = st_.tx_hellos.Get();
    s.rx_hellos = st_.rx_hellos.Get();
    s.ready_timeouts = st_.ready_timeouts.Get();
    s.ctrl_qp_recycles = st_.ctrl_qp_recycles.Get();
    s.tx_drop_not_ready = st_.tx_drop_not_ready.Get();
    s.rx_closes = st_.rx_closes.Get();
    s.rx_after_close = st_.rx_after_close.Get();
    s.completions_held = st_.completions_held.Get();
    s.rx_data = st_.rx_data.Get();
    s.rx_data_bytes = st_.rx_data_bytes.Get();
    s.rx_ctrl = st_.rx_ctrl.Get();
    s.rx_descriptors = st_.rx_descriptors.Get();
    s.rx_pending = st_.rx_pending.Get();
    s.rx_drop_no_descriptor = st_.rx_drop_no_descriptor.Get();
    s.rx_drop_bad_imm = st_.rx_drop_bad_imm.Get();
    s.rx_drop_unknown = st_.rx_drop_unknown.Get();
    s.cq_errors = st_.cq_errors.Get();
    s.qp_errors = st_.qp_errors.Get();
    s.async_events = st_.async_events.Get();
    return s;
  }

  size_t mtu() const { return wire::kDataHeaderSize + o_.mtu_payload; }

  VerbsOptions o_;
  std::string name_;
  uint8_t port_ = 1;
  uint32_t path_mtu_ = 1024;
  GidInfo gid_;
  DataQpMode mode_ = DataQpMode::kUc;
  uint32_t psn_ = 0;
  uint32_t max_inline_ = 0;
  absl::Status health_;
  bool fatal_ = false;  // device lost for good
  NicPlacer placer_;

  ibv_context* ctx_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  bool armed_ = false;
  ibv_pd* pd_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_srq* data_srq_ = nullptr;
  ibv_srq* ctrl_srq_ = nullptr;
  uint32_t ctrl_buf_ = 0;
  std::vector<uint8_t> data_bufs_, ctrl_bufs_;
  ibv_mr* data_mr_ = nullptr;
  ibv_mr* ctrl_mr_ = nullptr;
  std::vector<ibv_recv_wr> data_rwr_, ctrl_rwr_;
  std::vector<ibv_sge> data_rsge_, ctrl_rsge_;
  std::vector<uint32_t> repost_data_, repost_ctrl_;

  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<RegionFrame> queued_frames_;    // control path only
  absl::flat_hash_map<uint32_t, QpRef> qpn_;  // lookups only
  std::vector<LocalRegion> regions_;
  const LocalRegion* last_local_ = nullptr;
  const LocalRegion* last_rx_ = nullptr;

  // Per-burst scratch (no allocation on the hot path).
  ibv_send_wr wrs_[2 * kMaxBurst];
  ibv_sge sges_[2 * kMaxBurst];
  size_t nwr_ = 0;
  struct Touched {
    Peer* peer;
    uint16_t qp;
  };
  Touched qp_touched_[2 * kMaxBurst];
  size_t nqp_touched_ = 0;
  Peer* peer_touched_[2 * kMaxBurst];
  size_t npeer_touched_ = 0;
  uint8_t hdrs_[kMaxBurst][wire::kDataHeaderSize];
  uint32_t sends_since_poll_ = 0;
  uint64_t rx_calls_ = 0;

  struct Held {
    uint32_t buf;
    uint32_t len;
    uint32_t peer;
    uint64_t due;
  };
  std::vector<Held> held_;  // debug_defer_descriptors only
  std::vector<PendingWrite> pending_;
  size_t pending_head_ = 0;
  size_t npending_ = 0;
  bool pending_dirty_ = false;
  Time now_ = 0;  // of the current TxBurst

  // Message close.
  absl::flat_hash_map<ConnId, uint32_t> conn_peer_;  // lookups only
  std::deque<Completion> ready_;
  size_t nwaiting_ = 0;  // sum of the peers' nwait
  bool closes_dirty_ = false;
  bool release_dirty_ = false;
  struct Parked {
    ibv_qp* qp = nullptr;
    ibv_send_wr wr{};
    ibv_sge sge{};
  };
  std::vector<Parked> parked_;  // debug_park_qp only

  struct {
    Counter tx_data, tx_data_bytes, tx_ctrl, tx_probe, tx_descriptors,
        tx_fallback, tx_backpressure, tx_drop_dead_path, tx_drop_unknown_peer,
        tx_drop_device_lost, tx_drop_malformed, tx_post_errors,
        tx_frames_queued, tx_closes, tx_drop_acked, close_waits, tx_wait_ready,
        tx_hellos, rx_hellos, ready_timeouts, ctrl_qp_recycles,
        tx_drop_not_ready, tx_sacks_merged, tx_data_signalled, rx_data,
        rx_data_bytes, rx_ctrl, rx_descriptors, rx_pending,
        rx_drop_no_descriptor, rx_drop_bad_imm, rx_drop_unknown, rx_closes,
        rx_after_close, completions_held, cq_errors, qp_errors, async_events;
  } st_;
};

// ---------------------------------------------------------------- facade

absl::StatusOr<std::unique_ptr<VerbsDatapath>> VerbsDatapath::Create(
    const VerbsOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  absl::Status s = impl->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<VerbsDatapath>(new VerbsDatapath(std::move(impl)));
}

VerbsDatapath::VerbsDatapath(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
VerbsDatapath::~VerbsDatapath() = default;

size_t VerbsDatapath::mtu() const { return impl_->mtu(); }
size_t VerbsDatapath::TxBurst(Time now, const TxPacket* pkts, size_t n) {
  return impl_->TxBurst(now, pkts, n);
}
size_t VerbsDatapath::RxBurst(Time, RxPacket* pkts, size_t n) {
  return impl_->RxBurst(pkts, n);
}
absl::StatusOr<uint32_t> VerbsDatapath::AddPeer() { return impl_->AddPeer(); }
absl::StatusOr<PeerInfo> VerbsDatapath::LocalInfo(uint32_t peer) const {
  return impl_->LocalInfo(peer);
}
absl::Status VerbsDatapath::ConnectPeer(uint32_t peer, const PeerInfo& r) {
  return impl_->ConnectPeer(peer, r);
}
absl::Status VerbsDatapath::RemovePeer(uint32_t peer) {
  return impl_->RemovePeer(peer);
}
absl::Status VerbsDatapath::RegisterMemory(const MemoryRegion& mr, void* addr) {
  return impl_->RegisterMemory(mr, addr, -1, 0);
}
absl::Status VerbsDatapath::RegisterDmabuf(const MemoryRegion& mr, int fd,
                                           uint64_t offset) {
  if (fd < 0) return absl::InvalidArgumentError("bad dma-buf fd");
  return impl_->RegisterMemory(mr, nullptr, fd, offset);
}
absl::Status VerbsDatapath::DeregisterMemory(uint32_t lkey) {
  return impl_->DeregisterMemory(lkey);
}
int VerbsDatapath::wait_fd() const { return impl_->channel_->fd; }
void VerbsDatapath::ArmWait() { impl_->ArmWait(); }
Placer* VerbsDatapath::placer() { return &impl_->placer_; }
absl::Status VerbsDatapath::ForceQpError(uint32_t peer, uint16_t qp) {
  return impl_->ForceQpError(peer, qp);
}
absl::Status VerbsDatapath::BindConnection(uint32_t peer, ConnId conn) {
  return impl_->BindConnection(peer, conn);
}
void VerbsDatapath::OfferCompletions(const Completion* c, size_t n) {
  impl_->OfferCompletions(c, n);
}
size_t VerbsDatapath::PollCompletions(Completion* out, size_t max) {
  return impl_->PollCompletions(out, max);
}
size_t VerbsDatapath::held_completions() const {
  return impl_->held_completions();
}
bool VerbsDatapath::HoldsWriteCompletions(ConnId conn) const {
  return impl_->HoldsWriteCompletions(conn);
}
void VerbsDatapath::ReleaseParked() { impl_->ReleaseParked(); }
bool VerbsDatapath::qp_alive(uint32_t peer, uint16_t qp) const {
  return impl_->qp_alive(peer, qp);
}
absl::Status VerbsDatapath::health() const { return impl_->health_; }
VerbsStats VerbsDatapath::stats() const { return impl_->stats(); }
const std::string& VerbsDatapath::device_name() const { return impl_->name_; }
DataQpMode VerbsDatapath::mode() const { return impl_->mode_; }
uint32_t VerbsDatapath::max_inline() const { return impl_->max_inline_; }

}  // namespace prism::verbs
