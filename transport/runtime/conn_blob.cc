#include "transport/runtime/conn_blob.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace prism {

absl::StatusOr<ConnectionBlob> ConnectionBlob::FromBytes(absl::string_view b) {
  if (b.size() > kMaxBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "connection blob of ", b.size(), " bytes (max ", kMaxBytes, ")"));
  ConnectionBlob out;
  // An empty view may have a null data(): memcpy must not see it.
  if (!b.empty()) memcpy(out.bytes, b.data(), b.size());
  out.size = static_cast<uint8_t>(b.size());
  return out;
}

std::string ConnectionBlob::ToHex() const {
  return absl::BytesToHexString(view());
}

absl::StatusOr<ConnectionBlob> ConnectionBlob::FromHex(absl::string_view hex) {
  if (hex.size() % 2 != 0 || hex.size() > 2 * kMaxBytes)
    return absl::InvalidArgumentError("connection blob: bad hex length");
  for (char c : hex)
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)))
      return absl::InvalidArgumentError("connection blob: not hex");
  return FromBytes(absl::HexStringToBytes(hex));
}

namespace runtime {
namespace {

constexpr uint8_t kBlobMagic = 0xA7;
constexpr uint8_t kBlobVersion = 2;
constexpr size_t kFixed = 18;
constexpr uint8_t kFlagPorts = 0x04;  // a port per further plane follows
// mtu_payload >= 64 KiB: its bits 16-23 follow the fixed part (one byte).
constexpr uint8_t kFlagMtuHi = 0x08;

class Writer {
 public:
  explicit Writer(ConnectionBlob* b) : b_(b) {}
  bool Put(const void* p, size_t n) {
    if (pos_ + n > ConnectionBlob::kMaxBytes) return ok_ = false;
    memcpy(b_->bytes + pos_, p, n);
    pos_ += n;
    return true;
  }
  bool U8(uint8_t v) { return Put(&v, 1); }
  bool U16(uint16_t v) {
    uint8_t x[2] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8)};
    return Put(x, 2);
  }
  bool U32(uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; ++i) x[i] = static_cast<uint8_t>(v >> (8 * i));
    return Put(x, 4);
  }
  bool ok() const { return ok_; }
  size_t pos() const { return pos_; }

 private:
  ConnectionBlob* b_;
  size_t pos_ = 0;
  bool ok_ = true;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool Get(void* out, size_t k) {
    if (pos_ + k > n_) return false;
    memcpy(out, p_ + pos_, k);
    pos_ += k;
    return true;
  }
  bool U8(uint8_t* v) { return Get(v, 1); }
  bool U16(uint16_t* v) {
    uint8_t x[2];
    if (!Get(x, 2)) return false;
    *v = static_cast<uint16_t>(x[0] | (x[1] << 8));
    return true;
  }
  bool U32(uint32_t* v) {
    uint8_t x[4];
    if (!Get(x, 4)) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= static_cast<uint32_t>(x[i]) << (8 * i);
    return true;
  }
  bool done() const { return pos_ == n_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

absl::Status Bad(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("connection blob: ", why));
}

}  // namespace

absl::StatusOr<ConnectionBlob> EncodeBlob(const ConnInfoWire& w) {
  if (w.info.mtu_payload > 0xffffff) return Bad("mtu_payload above 24 bits");
  const bool mtu_hi = w.info.mtu_payload > 0xffff;
  if (w.info.num_planes > 0xff) return Bad("more than 255 planes");
  if (w.datapath == BlobDatapath::kUdp &&
      (w.planes.empty() || w.planes.size() > 15))
    return Bad("udp needs 1..15 plane addresses");
  if (w.datapath == BlobDatapath::kVerbs && w.verbs.empty())
    return Bad("verbs needs the datapath's peer info");
  bool same_ports = true;
  for (const auto& a : w.planes) same_ports &= a.port == w.planes[0].port;
  ConnectionBlob b;
  Writer wr(&b);
  wr.U8(kBlobMagic);
  wr.U8(kBlobVersion);
  wr.U8(0);  // length, patched below
  wr.U8(static_cast<uint8_t>(
      static_cast<uint8_t>(w.datapath) | (same_ports ? 0 : kFlagPorts) |
      (mtu_hi ? kFlagMtuHi : 0) | (w.info.payload_checksum ? 0x80 : 0)));
  wr.U8(w.datapath == BlobDatapath::kUdp ? static_cast<uint8_t>(w.planes.size())
                                         : 0);
  wr.U32(w.info.conn_id);
  wr.U32(w.info.initial_psn);
  wr.U16(static_cast<uint16_t>(w.info.mtu_payload));
  wr.U16(w.info.num_paths);
  wr.U8(static_cast<uint8_t>(w.info.num_planes));
  if (mtu_hi) wr.U8(static_cast<uint8_t>(w.info.mtu_payload >> 16));
  if (w.datapath == BlobDatapath::kUdp) {
    wr.U16(w.planes[0].port);
    wr.Put(w.planes[0].addr.data(), 16);
    for (size_t p = 1; p < w.planes.size(); ++p) {
      uint16_t mask = 0;
      for (int i = 0; i < 16; ++i)
        if (w.planes[p].addr[i] != w.planes[0].addr[i]) mask |= 1u << i;
      wr.U16(mask);
      for (int i = 0; i < 16; ++i)
        if (mask & (1u << i)) wr.U8(w.planes[p].addr[i]);
      if (!same_ports) wr.U16(w.planes[p].port);
    }
  } else if (w.datapath == BlobDatapath::kVerbs) {
    wr.Put(w.verbs.data(), w.verbs.size());
  } else {
    wr.U32(w.node);
  }
  if (!wr.ok())
    return Bad(absl::StrCat("does not fit in ", ConnectionBlob::kMaxBytes,
                            " bytes (too many planes with distinct "
                            "addresses, or too many verbs QPs)"));
  b.size = static_cast<uint8_t>(wr.pos());
  b.bytes[2] = b.size;
  return b;
}

absl::StatusOr<ConnInfoWire> DecodeBlob(const ConnectionBlob& b) {
  if (b.size > ConnectionBlob::kMaxBytes) return Bad("too long");
  Reader rd(b.bytes, b.size);
  uint8_t magic, version, length, flags, n_addr, planes8;
  ConnInfoWire w;
  uint16_t mtu16;
  if (b.size >= 2 && b.bytes[0] == kBlobMagic && b.bytes[1] != kBlobVersion)
    return Bad(absl::StrCat("unsupported version ", b.bytes[1],
                            " (this build speaks version ", kBlobVersion, ")"));
  if (!rd.U8(&magic) || !rd.U8(&version) || !rd.U8(&length) || !rd.U8(&flags) ||
      !rd.U8(&n_addr) || !rd.U32(&w.info.conn_id) ||
      !rd.U32(&w.info.initial_psn) || !rd.U16(&mtu16) ||
      !rd.U16(&w.info.num_paths) || !rd.U8(&planes8))
    return Bad(
        absl::StrCat("truncated (", b.size, " bytes, need >= ", kFixed, ")"));
  if (magic != kBlobMagic) return Bad("bad magic");
  if (version != kBlobVersion)
    return Bad(absl::StrCat("unsupported version ", version));
  if (length != b.size)
    return Bad(
        absl::StrCat("length byte says ", length, " bytes, blob has ", b.size));
  if ((flags & 0x70) != 0) return Bad("unknown flags");
  const uint8_t kind = flags & 0x3;
  if (kind > 2) return Bad("unknown datapath");
  w.datapath = static_cast<BlobDatapath>(kind);
  w.info.payload_checksum = (flags & 0x80) != 0;
  w.info.mtu_payload = mtu16;
  if (flags & kFlagMtuHi) {
    uint8_t hi;
    if (!rd.U8(&hi)) return Bad("truncated mtu");
    if (hi == 0) return Bad("mtu flag with a zero high byte");
    w.info.mtu_payload |= uint32_t{hi} << 16;
  }
  w.info.num_planes = planes8;
  if (w.info.conn_id == kInvalidConn) return Bad("connection id 0");
  if (w.info.num_paths == 0 || w.info.num_planes == 0 ||
      w.info.mtu_payload == 0)
    return Bad("zero paths, planes or mtu");
  if (w.datapath == BlobDatapath::kUdp) {
    if (n_addr == 0 || n_addr > 15) return Bad("udp needs 1..15 addresses");
    if (n_addr == 1 && (flags & kFlagPorts)) return Bad("port flag, 1 plane");
    BlobAddress a0;
    if (!rd.U16(&a0.port) || !rd.Get(a0.addr.data(), 16))
      return Bad("truncated address");
    w.planes.push_back(a0);
    for (int p = 1; p < n_addr; ++p) {
      uint16_t mask;
      if (!rd.U16(&mask)) return Bad("truncated address");
      BlobAddress a = a0;
      for (int i = 0; i < 16; ++i)
        if ((mask & (1u << i)) && !rd.U8(&a.addr[i]))
          return Bad("truncated address");
      if ((flags & kFlagPorts) && !rd.U16(&a.port))
        return Bad("truncated address");
      w.planes.push_back(a);
    }
    for (const auto& a : w.planes)
      if (a.port == 0) return Bad("port 0");
  } else if (w.datapath == BlobDatapath::kVerbs) {
    if (n_addr != 0) return Bad("verbs blob with addresses");
    if (flags & kFlagPorts) return Bad("port flag on a verbs blob");
    const size_t rest = b.size - kFixed - ((flags & kFlagMtuHi) ? 1 : 0);
    if (rest == 0) return Bad("verbs blob without peer info");
    w.verbs.resize(rest);
    if (!rd.Get(w.verbs.data(), rest)) return Bad("truncated peer info");
  } else {
    if (n_addr != 0) return Bad("loopback blob with addresses");
    if (flags & kFlagPorts) return Bad("port flag on a loopback blob");
    if (!rd.U32(&w.node)) return Bad("truncated node");
  }
  if (!rd.done()) return Bad("trailing bytes");
  return w;
}

}  // namespace runtime
}  // namespace prism
