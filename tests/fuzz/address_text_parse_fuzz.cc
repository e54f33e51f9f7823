// fuzz-libs: prism_routing prism_udp
// Fuzzes the parsers of text a person or a config file supplies: the routing
// layer's own IPv6 parser (routing::Ipv6Address::Parse, RFC 4291 forms
// without zones or embedded IPv4), the UDP datapath's address and route
// parsers (udp::ParseIp6, a bracket-tolerant inet_pton; udp::ParseRoute,
// "entropy" | "usid:<addr>" | "srh:<a>,<b>,..."). Any input must parse or
// fail cleanly. Checked beyond that:
// - routing::Ipv6Address::Parse agrees with the C library's inet_pton:
//   whatever it accepts inet_pton reads as the same 16 bytes, and whatever
//   inet_pton accepts without a '.' (embedded IPv4) it accepts too;
// - every accepted address prints (ToString / FormatIp6) to text that parses
//   back to the same bytes;
// - an accepted route rebuilt as text parses to the same route.
#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "routing/srv6.h"
#include "transport/backends/udp/udp_datapath.h"

namespace {

using prism::routing::Ipv6Address;
using prism::udp::FormatIp6;
using prism::udp::Ip6;
using prism::udp::ParseIp6;
using prism::udp::ParseRoute;
using prism::udp::Route;
using prism::udp::RouteKind;

void Check(bool ok) {
  if (!ok) abort();
}

// inet_pton on the text, which must hold no NUL (the C string would end
// early and accept a prefix).
bool Pton(std::string_view text, std::array<uint8_t, 16>* out) {
  if (text.find('\0') != std::string_view::npos) return false;
  const std::string s(text);
  return inet_pton(AF_INET6, s.c_str(), out->data()) == 1;
}

void RoutingParse(std::string_view text) {
  auto a = Ipv6Address::Parse(text);
  std::array<uint8_t, 16> ref{};
  const bool ref_ok = Pton(text, &ref);
  if (a.ok()) {
    Check(ref_ok);
    Check(memcmp(a->bytes.data(), ref.data(), 16) == 0);
    auto b = Ipv6Address::Parse(a->ToString());
    Check(b.ok() && *b == *a);
  } else if (ref_ok) {
    // Only the forms the routing parser documents as not taken.
    Check(text.find('.') != std::string_view::npos);
  }
}

void UdpParse(std::string_view text) {
  auto a = ParseIp6(absl::string_view(text.data(), text.size()));
  if (!a.ok()) return;
  Check(text.find('\0') == std::string_view::npos);
  auto b = ParseIp6(FormatIp6(*a));
  Check(b.ok() && *b == *a);
}

void UdpRoute(std::string_view text) {
  auto r = ParseRoute(absl::string_view(text.data(), text.size()));
  if (!r.ok()) return;
  std::string again;
  switch (r->kind) {
    case RouteKind::kEntropy:
      Check(r->segments.empty());
      again = "entropy";
      break;
    case RouteKind::kUsid:
      again = "usid:" + FormatIp6(r->usid_carrier);
      break;
    case RouteKind::kSrh:
      Check(!r->segments.empty() &&
            r->segments.size() <= prism::udp::UdpDatapath::kMaxSrhSegments);
      again = "srh:";
      for (size_t i = 0; i < r->segments.size(); ++i) {
        if (i > 0) again += ",";
        again += FormatIp6(r->segments[i]);
      }
      break;
  }
  auto r2 = ParseRoute(again);
  Check(r2.ok() && r2->kind == r->kind && r2->usid_carrier == r->usid_carrier &&
        r2->segments == r->segments);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  RoutingParse(text);
  UdpParse(text);
  UdpRoute(text);
  return 0;
}
