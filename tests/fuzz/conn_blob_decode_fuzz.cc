// fuzz-libs: prism_runtime
// Fuzzes the connection blob decoder (transport/runtime/conn_blob.h), the
// bytes a peer sends out of band (TCP side channel, NCCL handshake, a file),
// and ConnectionBlob::FromHex, which reads a blob typed by a person. Any
// input must decode or fail cleanly. A decoded blob must re-encode, and the
// re-encoding must decode to the same fields; the encoder's output is
// canonical, so encoding that again gives the same bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "prism/endpoint.h"
#include "transport/runtime/conn_blob.h"

namespace {

using prism::ConnectionBlob;
using prism::runtime::ConnInfoWire;
using prism::runtime::DecodeBlob;
using prism::runtime::EncodeBlob;

void Check(bool ok) {
  if (!ok) abort();
}

bool Same(const ConnInfoWire& a, const ConnInfoWire& b) {
  if (a.datapath != b.datapath || a.info.conn_id != b.info.conn_id ||
      a.info.initial_psn != b.info.initial_psn ||
      a.info.mtu_payload != b.info.mtu_payload ||
      a.info.num_paths != b.info.num_paths ||
      a.info.num_planes != b.info.num_planes ||
      a.info.payload_checksum != b.info.payload_checksum ||
      a.planes.size() != b.planes.size() || a.node != b.node ||
      a.verbs != b.verbs)
    return false;
  for (size_t i = 0; i < a.planes.size(); ++i) {
    if (a.planes[i].addr != b.planes[i].addr ||
        a.planes[i].port != b.planes[i].port)
      return false;
  }
  return true;
}

void RoundTrip(const ConnectionBlob& b) {
  auto w = DecodeBlob(b);
  if (!w.ok()) return;
  Check(w->info.conn_id != prism::kInvalidConn && w->info.num_paths > 0 &&
        w->info.num_planes > 0 && w->info.mtu_payload > 0);
  auto e = EncodeBlob(*w);
  Check(e.ok());
  Check(e->size <= b.size);  // canonical: never longer than what was read
  auto w2 = DecodeBlob(*e);
  Check(w2.ok() && Same(*w, *w2));
  auto e2 = EncodeBlob(*w2);
  Check(e2.ok() && e2->size == e->size &&
        memcmp(e2->bytes, e->bytes, e->size) == 0);
  // Hex text round trip of a valid blob.
  auto h = ConnectionBlob::FromHex(e->ToHex());
  Check(h.ok() && h->size == e->size &&
        memcmp(h->bytes, e->bytes, e->size) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  auto b = ConnectionBlob::FromBytes(in);
  if (b.ok()) {
    Check(b->size == size);
    RoundTrip(*b);
  } else {
    Check(size > ConnectionBlob::kMaxBytes);
  }
  // The same bytes as hex text (what a person pastes).
  auto h = ConnectionBlob::FromHex(in);
  if (h.ok()) RoundTrip(*h);
  return 0;
}
