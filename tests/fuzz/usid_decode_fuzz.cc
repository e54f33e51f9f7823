// fuzz-libs: prism_routing
// Fuzzes the uSID carrier decoder and the switch shift: the first 16 bytes
// are a destination address, the next 2 a switch's local uSID. A decoded
// carrier must re-encode to the same address; shifting must consume exactly
// one uSID; the text form and the host-address parser must round-trip.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "routing/path_set.h"
#include "routing/srv6.h"

namespace {

using namespace prism::routing;

void Check(bool ok) {
  if (!ok) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Ipv6Address a;
  if (size > 0) std::memcpy(a.bytes.data(), data, size < 16 ? size : 16);
  const uint16_t local =
      size >= 18 ? static_cast<uint16_t>((data[16] << 8) | data[17]) : 0;

  absl::StatusOr<Ipv6Address> back = Ipv6Address::Parse(a.ToString());
  Check(back.ok() && *back == a);

  UsidCarrier c;
  const UsidStatus st = DecodeUsidCarrier(a, &c);
  if (st == UsidStatus::kOk) {
    Check(c.num_usids >= 1 && c.num_usids <= kMaxUsids);
    Ipv6Address e;
    Check(EncodeUsidCarrier(c, &e) == UsidStatus::kOk);
    Check(e == a);
  }
  Ipv6Address s = a;
  const UsidAction act = UsidShift(&s, local);
  if (act == UsidAction::kShifted) {
    // A switch shifts whenever anything follows its uSID (as the kernel's
    // next-csid End does), even in a malformed carrier.
    Check(a.word(2) == local);
    Check(s == UsidShifted(a, 1));
    if (st == UsidStatus::kOk) {
      Check(c.num_usids >= 2);
      UsidCarrier c2;
      Check(DecodeUsidCarrier(s, &c2) == UsidStatus::kOk);
      Check(c2.num_usids == c.num_usids - 1);
      for (int i = 0; i < c2.num_usids; ++i) {
        Check(c2.usids[i] == c.usids[i + 1]);
      }
    }
  } else {
    Check(s == a);  // no change unless shifted
    if (act == UsidAction::kEndOfCarrier) {
      Check(st == UsidStatus::kOk && c.num_usids == 1 && c.usids[0] == local);
    }
  }
  uint32_t host = 0;
  uint16_t plane = 0;
  if (ParseHostAddress(a, &host, &plane)) {
    Check(HostAddress(host, plane) == a);
  }
  return 0;
}
