// Routing micro-benchmarks: path-set construction for one destination on the
// 131,072-host MRC fabric, and the per-packet SRv6 encoders.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "routing/path_set.h"
#include "routing/srv6.h"
#include "routing/topology.h"

namespace prism::routing {
namespace {

const Topology& Mrc131k() {
  static const Topology* t = [] {
    TopologySpec s;
    s.planes = 8;
    s.t0_per_plane = 512;
    s.t1_per_plane = 256;
    s.hosts_per_t0 = 256;
    return new Topology(*Topology::Build(s));
  }();
  return *t;
}

// Building the path set of one (src, dst) pair: 2048 distinct paths (8
// planes x 256 T1). The set is arithmetic + a per-destination template, so
// this is the sender's per-destination setup cost.
void BM_PathSetBuild(benchmark::State& state) {
  const Topology& t = Mrc131k();
  uint32_t dst = 1000;
  for (auto _ : state) {
    absl::StatusOr<PathSet> ps = PathSet::Build(t, 7, dst);
    benchmark::DoNotOptimize(ps);
    dst = dst == 131071 ? 1000 : dst + 1;
  }
}
BENCHMARK(BM_PathSetBuild);

// Build + materialise every path's carrier and link list (what the
// simulator does when it wants all 2048 routes of a pair).
void BM_PathSetBuildAndExpandAll(benchmark::State& state) {
  const Topology& t = Mrc131k();
  std::array<uint32_t, kMaxPathLinks> links;
  for (auto _ : state) {
    absl::StatusOr<PathSet> ps = PathSet::Build(t, 7, 99999);
    for (PathId x = 0; x < ps->num_paths(); ++x) {
      Ipv6Address a = ps->Carrier(x);
      benchmark::DoNotOptimize(a);
      benchmark::DoNotOptimize(ps->Links(x, links));
    }
  }
  state.SetItemsProcessed(state.iterations() * 2048);
}
BENCHMARK(BM_PathSetBuildAndExpandAll);

// Per packet: the carrier of path x from the destination template.
void BM_UsidEncode(benchmark::State& state) {
  absl::StatusOr<PathSet> ps = PathSet::Build(Mrc131k(), 7, 99999);
  PathId x = 0;
  for (auto _ : state) {
    Ipv6Address a = ps->Carrier(x);
    benchmark::DoNotOptimize(a);
    x = static_cast<PathId>((x + 1) % ps->num_paths());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UsidEncode);

void BM_UsidCarrierEncodeRaw(benchmark::State& state) {
  UsidCarrier c;
  c.num_usids = 4;
  c.usids = {0x2005, 0x1003, 0x8400, 7};
  Ipv6Address a;
  for (auto _ : state) {
    c.usids[0] = static_cast<uint16_t>(0x2000 + (c.usids[0] + 1) % 256);
    benchmark::DoNotOptimize(EncodeUsidCarrier(c, &a));
    benchmark::DoNotOptimize(a);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UsidCarrierEncodeRaw);

void BM_UsidShift(benchmark::State& state) {
  const Ipv6Address start =
      Ipv6Address::FromWords({0xfcbb, 0xbbbb, 0x2005, 0x1003, 0x8400, 7, 0, 0});
  for (auto _ : state) {
    Ipv6Address a = start;
    benchmark::DoNotOptimize(UsidShift(&a, 0x2005));
    benchmark::DoNotOptimize(a);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_UsidShift);

// Per packet: a 3-segment SRH (T1, T0, host) encoded into a header buffer.
void BM_SrhEncode(benchmark::State& state) {
  absl::StatusOr<PathSet> ps = PathSet::Build(Mrc131k(), 7, 99999);
  Srh srh = ps->MakeSrhFor(5);
  uint8_t buf[kMaxSrhBytes];
  size_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(EncodeSrh(srh, buf, &n));
    benchmark::DoNotOptimize(buf);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_SrhEncode);

void BM_SrhDecode(benchmark::State& state) {
  absl::StatusOr<PathSet> ps = PathSet::Build(Mrc131k(), 7, 99999);
  Srh srh = ps->MakeSrhFor(5);
  uint8_t buf[kMaxSrhBytes];
  size_t n = 0;
  EncodeSrh(srh, buf, &n);
  Srh out;
  size_t used = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        DecodeSrh(std::span<const uint8_t>(buf, n), &out, &used));
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SrhDecode);

// A whole 1 KiB UDP datagram with checksum over the final destination.
void BM_Udp6PacketEncode(benchmark::State& state) {
  absl::StatusOr<PathSet> ps = PathSet::Build(Mrc131k(), 7, 99999);
  std::vector<uint8_t> payload(1024, 0x5a), out(2048);
  Udp6Packet p;
  p.ip.src = ps->SourceAddress(0);
  p.dst_port = 4791;
  p.payload = payload;
  PathId x = 0;
  size_t n = 0;
  for (auto _ : state) {
    p.ip.dst = ps->Carrier(x);
    p.final_dst = ps->FinalDestination(x);
    const EntropyFields f = ps->EntropyFieldsFor(x);
    p.ip.flow_label = f.flow_label;
    p.src_port = f.udp_src_port;
    benchmark::DoNotOptimize(EncodeUdp6Packet(p, out, &n));
    x = static_cast<PathId>((x + 1) % ps->num_paths());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_Udp6PacketEncode);

}  // namespace
}  // namespace prism::routing
