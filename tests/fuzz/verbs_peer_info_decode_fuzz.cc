// fuzz-libs: prism_verbs
// Fuzzes the verbs datapath's PeerInfo decoder (transport/backends/verbs/
// verbs_datapath.h), the bytes a peer sends inside its connection blob to
// connect a queue-pair slot. Any input must decode or fail cleanly; a decoded
// PeerInfo must encode to exactly the input (the encoding has one form) and
// decode again to the same fields. Registered only where libibverbs is found
// (tests/fuzz/CMakeLists.txt skips a target whose libraries are missing).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "transport/backends/verbs/verbs_datapath.h"

namespace {

using prism::verbs::DecodePeerInfo;
using prism::verbs::EncodePeerInfo;
using prism::verbs::PeerInfo;

void Check(bool ok) {
  if (!ok) abort();
}

bool Same(const PeerInfo& a, const PeerInfo& b) {
  return a.gid == b.gid && a.path_mtu == b.path_mtu && a.mode == b.mode &&
         a.mtu_payload == b.mtu_payload && a.ctrl_qpn == b.ctrl_qpn &&
         a.psn == b.psn && a.message_close == b.message_close &&
         a.hello == b.hello && a.data_qpns == b.data_qpns;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  auto info = DecodePeerInfo(in);
  if (!info.ok()) return 0;
  Check(!info->data_qpns.empty());
  Check(info->mode == prism::verbs::DataQpMode::kUc ||
        info->mode == prism::verbs::DataQpMode::kRc);
  const std::string again = EncodePeerInfo(*info);
  Check(again == in);
  auto info2 = DecodePeerInfo(again);
  Check(info2.ok() && Same(*info, *info2));
  return 0;
}
