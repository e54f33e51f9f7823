// fuzz-libs: prism_routing
// Fuzzes the SRH decoder (RFC 8754) alone and behind an IPv6 header: any
// input must decode or fail cleanly; a decoded header must re-encode, and the
// re-encoding must decode to the same fields (segments, counters, TLVs).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "routing/srv6.h"

namespace {

using prism::routing::DecodeIpv6Header;
using prism::routing::DecodeSrh;
using prism::routing::EncodeSrh;
using prism::routing::Ipv6Address;
using prism::routing::Ipv6Header;
using prism::routing::Srh;
using prism::routing::SrhAdvance;
using prism::routing::SrhStatus;

void Check(bool ok) {
  if (!ok) abort();
}

void RoundTrip(std::span<const uint8_t> in) {
  Srh s;
  size_t used = 0;
  if (DecodeSrh(in, &s, &used) != SrhStatus::kOk) return;
  Check(used <= in.size() && used % 8 == 0);
  Check(s.num_segments == s.last_entry + 1);
  Check(s.segments_left <= s.num_segments);
  (void)s.active();
  uint8_t buf[prism::routing::kMaxSrhBytes];
  size_t n = 0;
  Check(EncodeSrh(s, buf, &n) == SrhStatus::kOk);
  Check(n == s.encoded_size());
  Srh d;
  size_t used2 = 0;
  Check(DecodeSrh(std::span<const uint8_t>(buf, n), &d, &used2) ==
        SrhStatus::kOk);
  Check(used2 == n);
  Check(d.next_header == s.next_header && d.segments_left == s.segments_left &&
        d.last_entry == s.last_entry && d.flags == s.flags && d.tag == s.tag &&
        d.num_segments == s.num_segments);
  for (int i = 0; i < s.num_segments; ++i)
    Check(d.segments[i] == s.segments[i]);
  Check(d.hmac.present == s.hmac.present);
  if (s.hmac.present) {
    Check(d.hmac.d_flag == s.hmac.d_flag && d.hmac.key_id == s.hmac.key_id &&
          d.hmac.len == s.hmac.len &&
          memcmp(d.hmac.hmac.data(), s.hmac.hmac.data(), s.hmac.len) == 0);
  }
  Check(d.other.present == s.other.present);
  if (s.other.present) {
    Check(d.other.type == s.other.type && d.other.len == s.other.len &&
          memcmp(d.other.value.data(), s.other.value.data(), s.other.len) == 0);
  }
  // The End behaviour terminates and stays in bounds.
  Ipv6Address dst;
  int steps = 0;
  while (SrhAdvance(&d, &dst)) Check(++steps <= 256);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  RoundTrip(in);
  Ipv6Header h;
  if (DecodeIpv6Header(in, &h) && h.next_header == 43) {
    RoundTrip(in.subspan(40));
  }
  return 0;
}
