// fuzz-libs: prism_engine prism_wire
// Fuzzes prism::Engine's receive path (OnReceive, RxDestination) with
// packets that pass the header checksum, so the engine's semantic checks
// (connection id, PSN window, MSN, rkey, remote address bounds, offsets,
// SACK / NACK ranges, trims) are reached, not only the decoder.
//
// Setup per input (the first byte: MTU, planes, payload checksums, the
// second WRITE's size, and bit 6 enabling the control-API steps): two
// engines A and B (fixed seeds), connected both ways
// on one connection pair. Each owns a remote-writable receive region and a
// local source region, each placed inside a larger buffer with canary guard
// bytes before and after it. A posts WRITEs into B's region, B one into A's.
//
// The input is a script of steps: pump legit packets A->B or B->A (whole
// bursts, dropping or holding some), replay a held packet (duplicate,
// reorder, delay; contiguous, split or read in place via RxDestination,
// alone or queued into a batch with others), advance time, forge a packet
// from a held one (decode, overwrite chosen fields from the input, re-encode
// so the header checksum verifies), craft a SACK / NACK / PROBE /
// PLANE_STATUS / CONNECT from scratch, trim a held DATA packet, deliver
// held bytes mutated raw (resealed or not), or drive the control API
// between packets: close a connection, deregister a region, take a plane
// down or up, open a second connection pair and WRITE on it, or post a
// WRITE with fuzzed fields (API misuse).
//
// Properties checked (abort on violation):
// - No crash, no sanitizer report, every loop bounded (no hang).
// - Guard bytes around all four regions untouched; the source regions (not
//   remote-writable) never change.
// - RxDestination returns nullptr or an address whose payload range lies in
//   the receiving engine's remote-writable region.
// - PollCompletions reports only sane completions: known type and
//   connection, kWrite for a posted wr_id at most once with its length,
//   kRecvImmediate inside the receiver's region.
// - A deregistered receive region never changes afterwards; PostWrite
//   refuses a local range outside a registered local region.
// - Without any forged packet, close, deregistration or bogus WRITE, every
//   plane is brought back up and a bounded legit pump to quiescence
//   completes every WRITE with kOk and the destinations are byte-exact.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "prism/engine.h"
#include "prism/packet.h"
#include "transport/wire/packet.h"

namespace {

using prism::Completion;
using prism::CompletionType;
using prism::ConnId;
using prism::Engine;
using prism::kMicrosecond;
using prism::MemoryRegion;
using prism::RxPacket;
using prism::Time;
using prism::TxPacket;
namespace wire = prism::wire;

void Fail(const char* what) {
  std::fprintf(stderr, "engine_receive_fuzz: %s\n", what);
  std::abort();
}

// Reads the fuzz input; 0 once exhausted.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return U16() | (static_cast<uint32_t>(U16()) << 16); }
  uint64_t U64() { return U32() | (static_cast<uint64_t>(U32()) << 32); }
  // A value near `base` (most often), or an arbitrary one.
  uint32_t Near32(uint32_t base) {
    switch (U8() & 3) {
      case 0:
        return base + static_cast<uint32_t>(static_cast<int8_t>(U8()));
      case 1:
        return base + static_cast<uint32_t>(static_cast<int16_t>(U16()));
      case 2:
        return base ^ (1u << (U8() & 31));
      default:
        return U32();
    }
  }
  uint64_t Near64(uint64_t base) {
    switch (U8() & 3) {
      case 0:
        return base + static_cast<uint64_t>(static_cast<int8_t>(U8()));
      case 1:
        return base + static_cast<uint64_t>(static_cast<int16_t>(U16()));
      case 2:
        return base ^ (uint64_t{1} << (U8() & 63));
      default:
        return U64();
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr size_t kGuard = 64;
constexpr uint8_t kCanary = 0xA5;
constexpr size_t kRegion = 4096;  // receive and source regions
constexpr size_t kBurst = 32;
constexpr size_t kPool = 32;
constexpr size_t kBatch = 16;
constexpr int kMaxSteps = 256;

// A region inside a buffer with guard bytes on both sides.
struct Guarded {
  std::vector<uint8_t> buf = std::vector<uint8_t>(kGuard + kRegion + kGuard);
  Guarded() {
    std::memset(buf.data(), kCanary, kGuard);
    std::memset(buf.data() + kGuard + kRegion, kCanary, kGuard);
  }
  uint8_t* region() { return buf.data() + kGuard; }
  void Check() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (buf[i] != kCanary || buf[kGuard + kRegion + i] != kCanary) {
        Fail("guard bytes around a region were written");
      }
    }
  }
};

struct Held {
  std::vector<uint8_t> bytes;  // header + payload, contiguous
  int to = 0;                  // receiving engine: 0 = A, 1 = B
};

struct PostedWrite {
  uint64_t wr_id = 0;
  uint64_t length = 0;
  size_t dst_off = 0;
  int from = 0;
  ConnId conn = 0;     // the sender's connection
  bool bogus = false;  // fuzzed fields: may fail, no content check
  bool completed = false;
};

// The second connection pair's WRITEs land here (the first pair's legit
// WRITEs stay below it).
constexpr size_t kSecondOff = 3584;

class Harness {
 public:
  explicit Harness(uint8_t config) {
    prism::EngineOptions eo;
    eo.mtu_payload = (config & 1) ? 1024 : 256;
    eo.max_connections = 4;
    eo.seed = 11;
    e_[0] = std::make_unique<Engine>(eo);
    eo.seed = 22;
    e_[1] = std::make_unique<Engine>(eo);
    prism::ConnectionOptions co;
    co.num_paths = 8;
    co.num_planes = (config & 2) ? 2 : 1;
    co.congestion = "fixed";
    co.max_inflight_packets = 256;
    co.payload_checksum = (config & 4) != 0;
    co_ = co;
    lifecycle_ = (config & 0x40) != 0;
    for (int i = 0; i < 2; ++i) {
      auto c = e_[i]->CreateConnection(co);
      if (!c.ok()) Fail("CreateConnection");
      conn_[i] = *c;
    }
    for (int i = 0; i < 2; ++i) {
      if (!e_[i]->Connect(conn_[i], e_[1 - i]->LocalInfo(conn_[1 - i])).ok()) {
        Fail("Connect");
      }
    }
    for (int i = 0; i < 2; ++i) {
      for (size_t k = 0; k < kRegion; ++k) {
        src_[i].region()[k] = static_cast<uint8_t>(k * 7 + i * 13 + 1);
      }
      src_copy_[i].assign(src_[i].region(), src_[i].region() + kRegion);
      auto s =
          e_[i]->RegisterMemory(src_[i].region(), kRegion, prism::kAccessLocal);
      auto d = e_[i]->RegisterMemory(dst_[i].region(), kRegion,
                                     prism::kAccessRemoteWrite);
      if (!s.ok() || !d.ok()) Fail("RegisterMemory");
      smr_[i] = *s;
      dmr_[i] = *d;
    }
    // A: two WRITEs (the second with immediate, size chosen by config);
    // B: one back.
    const uint64_t len2 = 1 + ((config >> 3) & 7) * 200;
    Post(0, 1, 0, 1500, false);
    Post(0, 2, 2048, len2, true);
    Post(1, 3, 512, 700, true);
  }

  void Run(Input& in) {
    for (int step = 0; step < kMaxSteps && !in.empty(); ++step) {
      Step(in);
      CheckAll();
    }
    // Quiescence: legit pump with time jumps, bounded (a forged packet may
    // leave a connection retrying until connection_timeout: not waited for).
    // Every plane taken down comes back first.
    for (int i = 0; i < 2; ++i) DeliverBatch(i, false);
    for (int i = 0; i < 2; ++i) {
      for (uint16_t pl = 0; pl < co_.num_planes; ++pl) {
        for (const ConnId c : {conn_[i], conn2_[i]}) {
          if (c != 0) (void)e_[i]->SetPlaneUp(c, pl, true, now_);
        }
      }
    }
    const int rounds = Disturbed() ? 200 : 2000;
    for (int round = 0; round < rounds; ++round) {
      const size_t moved = Pump(0, 0, 0) + Pump(1, 0, 0);
      CheckAll();
      if (moved == 0) {
        const Time next =
            std::min(e_[0]->NextEventTime(), e_[1]->NextEventTime());
        if (next == prism::kTimeInfinite) break;
        now_ = std::max(now_ + 1, next);
      } else {
        now_ += 100 * prism::kNanosecond;
      }
    }
    if (!Disturbed()) {
      for (const PostedWrite& w : writes_) {
        if (!w.completed) Fail("legit WRITE did not complete");
        const uint8_t* got = dst_[1 - w.from].region() + w.dst_off;
        const uint8_t* want = src_[w.from].region() + w.dst_off;
        if (std::memcmp(got, want, w.length) != 0) {
          Fail("legit WRITE not byte-exact");
        }
      }
    }
  }

 private:
  // Stops the harness's legit-completion checks: something was done to the
  // engines that may fail WRITEs or connections.
  bool Disturbed() const { return forged_ || disrupted_; }

  void Post(int from, uint64_t wr_id, size_t off, uint64_t len, bool imm,
            bool second = false) {
    const ConnId conn = second ? conn2_[from] : conn_[from];
    prism::WriteRequest w;
    w.wr_id = wr_id;
    w.local_addr = src_[from].region() + off;
    w.length = len;
    w.lkey = smr_[from].lkey;
    w.remote_addr = dmr_[1 - from].addr + off;
    w.rkey = dmr_[1 - from].rkey;
    w.has_immediate = imm;
    w.immediate = static_cast<uint32_t>(0xC0DE0000u + wr_id);
    const absl::Status st = e_[from]->PostWrite(now_, conn, w);
    if (!st.ok()) {
      // Only a connection this harness closed, or one failed by forged
      // input, may refuse a legit WRITE.
      if (!Disturbed()) Fail("PostWrite");
      return;
    }
    writes_.push_back({wr_id, len, off, from, conn, false, false});
  }

  // Control-API steps between packets.
  void Lifecycle(Input& in) {
    const uint8_t op = in.U8();
    const int e = op >> 7;
    switch (op % 6) {
      case 0:  // close a connection (its WRITEs complete kCancelled)
        if (e_[e]
                ->CloseConnection((op & 8) && conn2_[e] ? conn2_[e] : conn_[e])
                .ok()) {
          disrupted_ = true;
        }
        break;
      case 1:  // deregister the receive region: it never changes again
        if (!dereg_[e] && e_[e]->DeregisterMemory(dmr_[e].lkey).ok()) {
          dereg_[e] = true;
          dereg_copy_[e].assign(dst_[e].region(), dst_[e].region() + kRegion);
          disrupted_ = true;
        }
        break;
      case 2:  // deregister the source region (refused while WRITEs use it)
        if (e_[e]->DeregisterMemory(smr_[e].lkey).ok()) disrupted_ = true;
        break;
      case 3: {  // a plane down or up (out of range: refused); any order
        const uint16_t pl =
            static_cast<uint16_t>(in.U8() % (co_.num_planes + 1));
        const absl::Status st =
            e_[e]->SetPlaneUp((op & 8) && conn2_[e] ? conn2_[e] : conn_[e], pl,
                              (op & 16) != 0, now_);
        if (pl >= co_.num_planes && st.ok()) Fail("SetPlaneUp: bad plane ok");
        break;
      }
      case 4: {  // a second connection pair, then a WRITE on it
        if (conn2_[0] == 0) {
          ConnId c[2] = {};
          for (int i = 0; i < 2; ++i) {
            auto r = e_[i]->CreateConnection(co_);
            if (!r.ok()) Fail("second CreateConnection");
            c[i] = *r;
          }
          for (int i = 0; i < 2; ++i) {
            if (!e_[i]->Connect(c[i], e_[1 - i]->LocalInfo(c[1 - i])).ok()) {
              Fail("second Connect");
            }
          }
          conn2_[0] = c[0];
          conn2_[1] = c[1];
        }
        if (second_posted_ < 2) {
          const uint64_t len = 1 + in.U16() % (kRegion - kSecondOff);
          ++second_posted_;
          Post(e, 100 + second_posted_, kSecondOff, len, (op & 8) != 0,
               /*second=*/true);
        }
        break;
      }
      default: {  // a WRITE with fuzzed fields (API misuse or a bad target)
        prism::WriteRequest w;
        w.wr_id = 1000 + bogus_posted_;
        const uint8_t c = in.U8();
        const MemoryRegion& l = (c & 1) ? smr_[e] : dmr_[e];
        w.local_addr = reinterpret_cast<void*>(
            static_cast<uintptr_t>(AddrChoice(in, smr_[e].addr)));
        w.length = (c & 2) ? in.U16() : in.U32();
        w.lkey = (c & 4) ? in.U32() : l.lkey;
        w.remote_addr = AddrChoice(in, dmr_[1 - e].addr);
        w.rkey = (c & 8) ? in.Near32(dmr_[1 - e].rkey) : dmr_[1 - e].rkey;
        w.has_immediate = (c & 16) != 0;
        w.immediate = in.U32();
        const ConnId conn = (c & 32) && conn2_[e] ? conn2_[e]
                            : (c & 64)            ? in.U32()
                                                  : conn_[e];
        if (!e_[e]->PostWrite(now_, conn, w).ok()) break;
        // Accepted: the local range must lie in a registered region this
        // engine may read (its source region, or its receive region when
        // the fuzzed key is that region's and it allows local access).
        const uint64_t a = reinterpret_cast<uintptr_t>(w.local_addr);
        bool in_local = false;
        for (const MemoryRegion* r : {&smr_[e], &dmr_[e]}) {
          if (w.lkey == r->lkey && (r->access & prism::kAccessLocal) &&
              a >= r->addr && w.length <= r->length &&
              a - r->addr <= r->length - w.length) {
            in_local = true;
          }
        }
        if (!in_local && w.length > 0) {
          Fail("PostWrite accepted a local range outside its region");
        }
        ++bogus_posted_;
        disrupted_ = true;
        writes_.push_back({w.wr_id, w.length, 0, e, conn, true, false});
        break;
      }
    }
  }

  void Hold(const uint8_t* hdr, size_t hlen, const uint8_t* payload,
            size_t plen, int to) {
    Held& h = pool_[pool_next_++ % kPool];
    h.bytes.assign(hdr, hdr + hlen);
    if (plen) h.bytes.insert(h.bytes.end(), payload, payload + plen);
    h.to = to;
    if (pool_size_ < kPool) ++pool_size_;
  }

  // Polls engine `from` and delivers its burst to the other one, except
  // packet indices in `drop_mask` (dropped) and `hold_mask` (held only).
  // Every packet is also kept in the pool.
  size_t Pump(int from, uint32_t drop_mask, uint32_t hold_mask,
              bool in_place = false) {
    TxPacket tx[kBurst];
    RxPacket rx[kBurst];
    const size_t n = e_[from]->PollTransmit(now_, tx, kBurst);
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      if (tx[i].header_len == 0 || tx[i].header_len > TxPacket::kMaxHeaderBytes)
        Fail("TxPacket header length");
      Hold(tx[i].header, tx[i].header_len, tx[i].payload, tx[i].payload_len,
           1 - from);
      if (i < 32 && ((drop_mask | hold_mask) >> i & 1)) continue;
      rx[m].data = tx[i].header;
      rx[m].len = tx[i].header_len;
      rx[m].payload = tx[i].payload;
      rx[m].payload_len = tx[i].payload_len;
      ++m;
    }
    if (in_place) {  // the burst read in place, after anything queued
      for (size_t i = 0; i < m; ++i) {
        if (batch_[1 - from].size() == kBatch) DeliverBatch(1 - from, true);
        std::vector<uint8_t> b(rx[i].data, rx[i].data + rx[i].len);
        if (rx[i].payload_len) {
          b.insert(b.end(), rx[i].payload, rx[i].payload + rx[i].payload_len);
        }
        batch_[1 - from].push_back(std::move(b));
      }
      DeliverBatch(1 - from, true);
      return n;
    }
    if (m > 0) e_[1 - from]->OnReceive(now_, rx, m);
    Drain();
    return n;
  }

  // Delivers the packets queued for engine `to` in one OnReceive batch,
  // contiguous, or read in place: RxDestination for every packet of at
  // least a DATA header's size first (as a datapath that peeks headers
  // does), then the batch with those given a destination split there.
  void DeliverBatch(int to, bool in_place) {
    std::vector<std::vector<uint8_t>>& q = batch_[to];
    RxPacket rx[kBatch];
    const size_t n = q.size();
    for (size_t i = 0; i < n; ++i) {
      std::vector<uint8_t>& b = q[i];
      rx[i] = RxPacket();
      rx[i].data = b.empty() ? nullptr : b.data();
      rx[i].len = static_cast<uint32_t>(b.size());
      if (!in_place || b.size() < wire::kDataHeaderSize) continue;
      const size_t hdr = wire::kDataHeaderSize;
      const size_t plen = b.size() - hdr;
      uint8_t* dst = e_[to]->RxDestination(b.data(), hdr, plen);
      if (dst == nullptr) continue;
      uint8_t* lo = dst_[to].region();
      if (plen == 0 || dst < lo || dst + plen > lo + kRegion) {
        Fail("RxDestination outside the receive region");
      }
      std::memcpy(dst, b.data() + hdr, plen);
      rx[i].len = static_cast<uint32_t>(hdr);
      rx[i].payload = dst;
      rx[i].payload_len = static_cast<uint32_t>(plen);
    }
    if (n > 0) e_[to]->OnReceive(now_, rx, n);
    q.clear();
    Drain();
  }

  // Delivers `bytes` to engine `to` in one of several ways, or queues it
  // for the next batch (flushed when full or by a step).
  void Deliver(const std::vector<uint8_t>& bytes, int to, uint8_t how) {
    if (how & 64) {
      batch_[to].push_back(bytes);
      if (batch_[to].size() == kBatch) DeliverBatch(to, how & 128);
      return;
    }
    RxPacket rx;
    rx.ecn_ce = (how & 8) != 0;
    rx.trimmed = (how & 16) != 0;
    const size_t hdr = std::min(bytes.size(), wire::kDataHeaderSize);
    const bool is_data =
        bytes.size() >= wire::kCommonHeaderSize &&
        bytes[3] == static_cast<uint8_t>(wire::PacketType::kData);
    std::vector<uint8_t> copy(bytes);  // the engine sees only this copy
    switch (how & 3) {
      case 1:  // split at the DATA header
        if (is_data && copy.size() > hdr) {
          rx.data = copy.data();
          rx.len = static_cast<uint32_t>(hdr);
          rx.payload = copy.data() + hdr;
          rx.payload_len = static_cast<uint32_t>(copy.size() - hdr);
          break;
        }
        [[fallthrough]];
      case 0:
      case 3:
        rx.data = copy.empty() ? nullptr : copy.data();
        rx.len = static_cast<uint32_t>(copy.size());
        break;
      case 2: {  // receive in place
        if (!is_data || copy.size() < hdr) {
          rx.data = copy.empty() ? nullptr : copy.data();
          rx.len = static_cast<uint32_t>(copy.size());
          break;
        }
        const size_t plen = copy.size() - hdr;
        uint8_t* dst = e_[to]->RxDestination(copy.data(), hdr, plen);
        rx.data = copy.data();
        rx.len = static_cast<uint32_t>(hdr);
        if (dst != nullptr) {
          uint8_t* lo = dst_[to].region();
          if (plen == 0 || dst < lo || dst + plen > lo + kRegion) {
            Fail("RxDestination outside the receive region");
          }
          std::memcpy(dst, copy.data() + hdr, plen);
          rx.payload = dst;
          rx.payload_len = static_cast<uint32_t>(plen);
        } else if (plen > 0) {
          rx.payload = copy.data() + hdr;
          rx.payload_len = static_cast<uint32_t>(plen);
        }
        break;
      }
    }
    e_[to]->OnReceive(now_, &rx, 1);
    Drain();
  }

  // Forges a packet from a held one: decoded, fields overwritten, resealed.
  void Forge(Input& in) {
    if (pool_size_ == 0) return;
    const Held& h = pool_[in.U8() % pool_size_];
    wire::Packet p;
    if (wire::Decode(h.bytes.data(), h.bytes.size(), &p) !=
        wire::DecodeError::kOk) {
      return;
    }
    std::vector<uint8_t> payload;
    if (p.payload_len) payload.assign(p.payload, p.payload + p.payload_len);
    const int muts = 1 + (in.U8() & 3);
    for (int k = 0; k < muts; ++k) {
      const uint8_t f = in.U8();
      switch (p.type) {
        case wire::PacketType::kData:
          MutateData(in, f, &p.data, &payload);
          break;
        case wire::PacketType::kSack:
          MutateSack(in, f, &p.sack);
          break;
        case wire::PacketType::kNack:
          MutateNack(in, f, &p.nack);
          break;
        case wire::PacketType::kProbe:
        case wire::PacketType::kProbeAck:
          if (f & 1) p.probe.probe_seq = in.Near32(p.probe.probe_seq);
          if (f & 2) p.probe.path_id = in.U16();
          if (f & 4) p.probe.send_ts = in.U64();
          if (f & 8) p.probe.dst_conn = in.Near32(p.probe.dst_conn);
          break;
        case wire::PacketType::kPlaneStatus:
          if (f & 1) p.plane.planes_down = in.U32();
          if (f & 2) p.plane.seq = in.Near32(p.plane.seq);
          if (f & 4) p.plane.dst_conn = in.Near32(p.plane.dst_conn);
          break;
        case wire::PacketType::kConnect:
        case wire::PacketType::kConnectAck:
          p.connect.src_conn = in.U32();
          break;
      }
    }
    uint8_t hdr[wire::kMaxHeaderSize];
    size_t n = 0;
    switch (p.type) {
      case wire::PacketType::kData:
        n = wire::EncodeData(p.data, hdr, sizeof(hdr));
        break;
      case wire::PacketType::kSack:
        n = wire::EncodeSack(p.sack, hdr, sizeof(hdr));
        break;
      case wire::PacketType::kNack:
        n = wire::EncodeNack(p.nack, hdr, sizeof(hdr));
        break;
      case wire::PacketType::kProbe:
      case wire::PacketType::kProbeAck:
        n = wire::EncodeProbe(p.probe, p.type == wire::PacketType::kProbeAck,
                              hdr, sizeof(hdr));
        break;
      case wire::PacketType::kConnect:
      case wire::PacketType::kConnectAck:
        n = wire::EncodeConnect(p.connect,
                                p.type == wire::PacketType::kConnectAck, hdr,
                                sizeof(hdr));
        break;
      case wire::PacketType::kPlaneStatus:
        n = wire::EncodePlaneStatus(p.plane, hdr, sizeof(hdr));
        break;
    }
    if (n == 0) return;
    std::vector<uint8_t> bytes(hdr, hdr + n);
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    const uint8_t how = in.U8();
    forged_ = true;
    Deliver(bytes, (how & 32) ? 1 - h.to : h.to, how);
  }

  uint64_t AddrChoice(Input& in, uint64_t legit) {
    const uint8_t c = in.U8();
    const MemoryRegion& r = (c & 0x80) ? dmr_[c & 1] : smr_[c & 1];
    switch ((c >> 1) & 3) {
      case 0:
        return in.Near64(legit);
      case 1:
        return r.addr + r.length - (in.U8() & 0x7F);
      case 2:
        return r.addr - (in.U8() & 0x7F);
      default:
        return r.addr + in.U16();
    }
  }

  void MutateData(Input& in, uint8_t f, wire::DataHeader* d,
                  std::vector<uint8_t>* payload) {
    switch (f % 14) {
      case 0:
        d->psn = in.Near32(d->psn);
        break;
      case 1:
        d->msn = in.Near32(d->msn);
        break;
      case 2:
        d->msg_offset = in.Near32(d->msg_offset);
        break;
      case 3:
        d->msg_len = in.Near32(d->msg_len);
        break;
      case 4: {
        const uint8_t c = in.U8();
        const MemoryRegion& r = (c & 2) ? dmr_[c & 1] : smr_[c & 1];
        d->rkey = (c & 4) ? in.Near32(d->rkey) : r.rkey;
        break;
      }
      case 5:
        d->remote_addr = AddrChoice(in, d->remote_addr);
        break;
      case 6: {  // payload length: header and bytes together, or only one
        const uint32_t len = in.U16() % 1500;
        const uint8_t c = in.U8();
        if (c & 1) d->payload_len = len;
        if (c & 2) payload->resize(len, static_cast<uint8_t>(c));
        break;
      }
      case 7:
        d->flags = static_cast<uint16_t>(in.U8() & wire::kKnownDataFlags);
        break;
      case 8:
        d->immediate = in.U32();
        break;
      case 9:
        d->dst_conn = in.Near32(d->dst_conn);
        break;
      case 10:
        d->path_id = in.U16();
        break;
      case 11:
        d->send_ts = in.U64();
        break;
      case 12:
        if (!payload->empty()) {
          (*payload)[in.U16() % payload->size()] ^=
              static_cast<uint8_t>(1u << (in.U8() & 7));
        }
        break;
      default:
        d->payload_crc = (in.U8() & 1)
                             ? wire::Crc32c(payload->data(), payload->size())
                             : in.U32();
        d->flags |= wire::kFlagPayloadCrc;
        break;
    }
  }

  void MutateSack(Input& in, uint8_t f, wire::SackHeader* s) {
    switch (f % 11) {
      case 0:
        s->cum_psn = in.Near32(s->cum_psn);
        break;
      case 1:
        s->bitmap_base = in.Near32(s->bitmap_base);
        break;
      case 2:
        s->bitmap[in.U8() % wire::kSackBitmapWords] = in.U64();
        break;
      case 3:
        s->trigger_psn = in.Near32(s->trigger_psn);
        break;
      case 4:
        s->echo_path = in.U16();
        break;
      case 5:
        s->echo_ts = in.Near64(s->echo_ts);
        break;
      case 6:
        s->bytes_received = in.Near64(s->bytes_received);
        break;
      case 7:
        s->ooo_count = in.U32();
        break;
      case 8:
        s->rx_window_penalty = in.U16();
        s->coalesced = in.U16();
        break;
      case 9:
        s->ecn_seen = in.U8() & 1;
        break;
      default:
        s->dst_conn = in.Near32(s->dst_conn);
        break;
    }
  }

  void MutateNack(Input& in, uint8_t f, wire::NackHeader* n) {
    switch (f % 7) {
      case 0:
        n->psn = in.Near32(n->psn);
        break;
      case 1:
        n->cum_psn = in.Near32(n->cum_psn);
        break;
      case 2:
        n->reason = static_cast<wire::NackReason>(1 + in.U8() % 6);
        break;
      case 3:
        n->echo_path = in.U16();
        break;
      case 4:
        n->echo_ts = in.Near64(n->echo_ts);
        break;
      case 5:
        n->ecn_seen = in.U8() & 1;
        break;
      default:
        n->dst_conn = in.Near32(n->dst_conn);
        break;
    }
  }

  // Crafts a control packet answering a held DATA packet (a SACK or NACK
  // to its sender) or a PROBE / PLANE_STATUS / CONNECT, fields from input.
  void Craft(Input& in) {
    uint32_t psn = 0;
    int to = in.U8() & 1;  // default: to the engine that sent the DATA
    if (pool_size_ > 0) {
      const Held& h = pool_[in.U8() % pool_size_];
      wire::Packet p;
      if (wire::Decode(h.bytes.data(), h.bytes.size(), &p) ==
              wire::DecodeError::kOk &&
          p.type == wire::PacketType::kData) {
        psn = p.data.psn;
        to = 1 - h.to;
      }
    }
    const uint32_t conn = (in.U8() & 7) == 0 ? in.U32() : conn_[to];
    uint8_t hdr[wire::kMaxHeaderSize];
    size_t n = 0;
    const uint8_t kind = in.U8();
    switch (kind % 6) {
      case 0:
      case 1: {
        wire::NackHeader h;
        h.dst_conn = conn;
        h.psn = in.Near32(psn);
        h.cum_psn = in.Near32(psn);
        h.reason = static_cast<wire::NackReason>(1 + in.U8() % 6);
        h.echo_path = in.U8() & 15;
        h.echo_ts = static_cast<uint64_t>(now_) - in.U16();
        n = wire::EncodeNack(h, hdr, sizeof(hdr));
        break;
      }
      case 2:
      case 3: {
        wire::SackHeader h;
        h.dst_conn = conn;
        h.cum_psn = in.Near32(psn);
        h.bitmap_base = in.Near32(psn);
        for (uint64_t& w : h.bitmap) w = (in.U8() & 1) ? in.U64() : 0;
        h.trigger_psn = in.Near32(psn);
        h.echo_path = in.U8() & 15;
        h.echo_ts = static_cast<uint64_t>(now_) - in.U16();
        h.bytes_received = in.U32();
        h.coalesced = in.U8();
        n = wire::EncodeSack(h, hdr, sizeof(hdr));
        break;
      }
      case 4: {
        wire::ProbeHeader h;
        h.dst_conn = conn;
        h.path_id = in.U16();
        h.probe_seq = in.U32();
        h.send_ts = in.U64();
        n = wire::EncodeProbe(h, in.U8() & 1, hdr, sizeof(hdr));
        break;
      }
      default: {
        if (kind & 0x40) {
          wire::ConnectHeader h;
          h.dst_conn = (kind & 0x80) ? conn : 0;
          h.src_conn = in.U32();
          h.num_paths = in.U16();
          h.num_planes = in.U8();
          h.mtu_payload = in.U32() % (wire::kMaxPayloadLen + 1);
          h.flags = in.U8() & 1;
          h.nonce = in.U64();
          n = wire::EncodeConnect(h, kind & 0x80, hdr, sizeof(hdr));
        } else {
          wire::PlaneStatusHeader h;
          h.dst_conn = conn;
          h.planes_down = in.U32();
          h.seq = in.U32();
          n = wire::EncodePlaneStatus(h, hdr, sizeof(hdr));
        }
        break;
      }
    }
    if (n == 0) return;
    forged_ = true;
    Deliver(std::vector<uint8_t>(hdr, hdr + n), to, in.U8());
  }

  void Step(Input& in) {
    const uint8_t op = in.U8();
    // Without the lifecycle bit in the config byte, the steps of the seeds
    // written before the control-API steps existed keep their meaning.
    switch (op % (lifecycle_ ? 11 : 10)) {
      case 0:
      case 1:
        if (op & 0x40) {  // flush the batch queued for one engine
          DeliverBatch(op & 1, op & 0x80);
        } else {
          Pump(op & 1, 0, 0, op & 0x80);
        }
        break;
      case 2: {  // drop / hold some of a burst
        const uint32_t drop = in.U8();
        const uint32_t hold = in.U8();
        Pump(op >> 7, drop, hold);
        break;
      }
      case 3:  // advance time
        now_ += (1 + in.U8()) *
                ((op & 0x80) ? 10 * kMicrosecond : 100 * prism::kNanosecond);
        break;
      case 4: {  // replay a held packet unchanged (duplicate / reorder)
        if (pool_size_ == 0) break;
        const Held& h = pool_[in.U8() % pool_size_];
        Deliver(h.bytes, h.to, in.U8() & ~32);
        break;
      }
      case 5:
      case 6:
        Forge(in);
        break;
      case 7:
        Craft(in);
        break;
      case 8: {  // trim a held DATA packet (a legit switch action)
        if (pool_size_ == 0) break;
        const Held& h = pool_[in.U8() % pool_size_];
        std::vector<uint8_t> b(h.bytes);
        const size_t n = wire::TrimData(b.data(), b.size());
        if (n == 0) break;
        b.resize(n);
        Deliver(b, h.to, in.U8() & ~32);
        break;
      }
      case 9: {  // raw mutation of held bytes, resealed or not
        if (pool_size_ == 0) break;
        const Held& h = pool_[in.U8() % pool_size_];
        std::vector<uint8_t> b(h.bytes);
        const int flips = 1 + (in.U8() & 7);
        for (int k = 0; k < flips && !b.empty(); ++k) {
          b[in.U16() % b.size()] = in.U8();
        }
        const uint8_t c = in.U8();
        if (c & 1) b.resize(in.U16() % (b.size() + 1));
        if ((c & 2) && b.size() >= wire::kCommonHeaderSize) {
          uint8_t* hp = b.data();
          const size_t span = wire::HeaderCrcSpan(hp, b.size());
          if (span) wire::SealHeaders(&hp, &span, 1);
        }
        forged_ = true;
        Deliver(b, (c & 4) ? 1 - h.to : h.to, in.U8());
        break;
      }
      case 10:
        Lifecycle(in);
        break;
    }
  }

  void Drain() {
    Completion c[16];
    for (int e = 0; e < 2; ++e) {
      for (int round = 0; round < 64; ++round) {
        const size_t n = e_[e]->PollCompletions(c, 16);
        if (n > 16) Fail("PollCompletions returned more than max");
        for (size_t i = 0; i < n; ++i) CheckCompletion(e, c[i]);
        if (n < 16) break;
      }
    }
  }

  void CheckCompletion(int e, const Completion& c) {
    if (c.conn != conn_[e] && (conn2_[e] == 0 || c.conn != conn2_[e])) {
      Fail("completion for an unknown connection");
    }
    switch (c.type) {
      case CompletionType::kWrite: {
        PostedWrite* w = nullptr;
        for (PostedWrite& p : writes_) {
          if (p.from == e && p.wr_id == c.wr_id) w = &p;
        }
        if (w == nullptr) Fail("kWrite completion for an unknown wr_id");
        if (w->completed) Fail("kWrite completed twice");
        if (c.conn != w->conn) Fail("kWrite completion on another connection");
        if (c.byte_len != w->length) Fail("kWrite byte_len");
        w->completed = true;
        if (c.status != absl::StatusCode::kOk && !Disturbed()) {
          Fail("legit WRITE failed");
        }
        break;
      }
      case CompletionType::kRecvImmediate: {
        const MemoryRegion& r = dmr_[e];
        if (c.status != absl::StatusCode::kOk) Fail("kRecvImmediate status");
        if (c.remote_addr < r.addr || c.byte_len > r.length ||
            c.remote_addr - r.addr > r.length - c.byte_len) {
          Fail("kRecvImmediate outside the receive region");
        }
        if (!Disturbed()) {
          bool found = false;
          for (const PostedWrite& p : writes_) {
            if (p.from == 1 - e && c.immediate == 0xC0DE0000u + p.wr_id &&
                c.byte_len == p.length && c.remote_addr == r.addr + p.dst_off) {
              found = true;
            }
          }
          if (!found) Fail("legit kRecvImmediate does not match a WRITE");
        }
        break;
      }
      case CompletionType::kConnectionError:
        if (c.status == absl::StatusCode::kOk) Fail("kConnectionError ok");
        if (!Disturbed()) Fail("legit connection failed");
        break;
      default:
        Fail("unknown completion type");
    }
  }

  void CheckAll() {
    for (int i = 0; i < 2; ++i) {
      src_[i].Check();
      dst_[i].Check();
      if (std::memcmp(src_[i].region(), src_copy_[i].data(), kRegion) != 0) {
        Fail("a local-only source region was written");
      }
      if (dereg_[i] &&
          std::memcmp(dst_[i].region(), dereg_copy_[i].data(), kRegion) != 0) {
        Fail("a deregistered region was written");
      }
    }
  }

  std::unique_ptr<Engine> e_[2];
  ConnId conn_[2] = {};
  Guarded src_[2], dst_[2];
  std::vector<uint8_t> src_copy_[2];
  MemoryRegion smr_[2], dmr_[2];
  std::vector<PostedWrite> writes_;
  Held pool_[kPool];
  std::vector<std::vector<uint8_t>> batch_[2];  // queued for one OnReceive
  size_t pool_next_ = 0;
  size_t pool_size_ = 0;
  Time now_ = kMicrosecond;
  bool forged_ = false;
  bool disrupted_ = false;  // closed, deregistered, bogus WRITE posted
  bool lifecycle_ = false;  // config bit 6: control-API steps enabled
  prism::ConnectionOptions co_;
  ConnId conn2_[2] = {};  // the second pair (0: not opened)
  int second_posted_ = 0;
  int bogus_posted_ = 0;
  bool dereg_[2] = {};
  std::vector<uint8_t> dereg_copy_[2];
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  Harness h(in.U8());
  h.Run(in);
  return 0;
}
