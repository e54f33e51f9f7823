// Wire format micro-benchmarks: DATA header encode/decode (ns per packet) and
// CRC32C throughput (bytes/s) for the dispatching, software and SSE4.2 paths.
//   build/bin/prism_microbench --benchmark_filter='BM_(Encode|Decode|Crc32c)'
// and the burst header checksums:
//   build/bin/prism_microbench --benchmark_filter='BM_HeaderCrc'
#include <benchmark/benchmark.h>

#include <vector>

#include "transport/wire/crc32c.h"
#include "transport/wire/packet.h"

namespace prism::wire {
namespace {

DataHeader SampleData() {
  DataHeader h;
  h.dst_conn = 7;
  h.psn = 1000;
  h.msn = 12;
  h.msg_offset = 8 * 4096;
  h.msg_len = 1 << 20;
  h.remote_addr = 0x7f0012340000ull;
  h.rkey = 0xA5A5F00D;
  h.payload_len = 4096;
  h.path_id = 131;
  h.flags = kFlagPayloadCrc;
  h.send_ts = 123456789012ull;
  h.payload_crc = 0x12345678;
  return h;
}

void BM_EncodeData(benchmark::State& state) {
  DataHeader h = SampleData();
  uint8_t buf[kDataHeaderSize];
  for (auto _ : state) {
    ++h.psn;
    benchmark::DoNotOptimize(EncodeData(h, buf, sizeof(buf)));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeData);

// Decodes a full DATA packet (64-byte header + 4 KiB payload, header
// checksum verified; the payload CRC is not part of Decode).
void BM_DecodeData(benchmark::State& state) {
  std::vector<uint8_t> pkt(kDataHeaderSize + 4096, 0x5A);
  EncodeData(SampleData(), pkt.data(), pkt.size());
  Packet p;
  for (auto _ : state) {
    benchmark::DoNotOptimize(pkt.data());
    benchmark::DoNotOptimize(Decode(pkt.data(), pkt.size(), &p));
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeData);

void BM_EncodeSack(benchmark::State& state) {
  SackHeader h;
  h.bitmap[0] = 0xF0F0F0F0F0F0F0F0ull;
  uint8_t buf[kSackHeaderSize];
  for (auto _ : state) {
    ++h.cum_psn;
    benchmark::DoNotOptimize(EncodeSack(h, buf, sizeof(buf)));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeSack);

void BM_DecodeSack(benchmark::State& state) {
  uint8_t buf[kSackHeaderSize];
  EncodeSack(SackHeader{}, buf, sizeof(buf));
  Packet p;
  for (auto _ : state) {
    benchmark::DoNotOptimize(buf);
    benchmark::DoNotOptimize(Decode(buf, sizeof(buf), &p));
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeSack);

template <uint32_t (*Fn)(const uint8_t*, size_t, uint32_t)>
void CrcBench(benchmark::State& state) {
  std::vector<uint8_t> buf(static_cast<size_t>(state.range(0)));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 31);
  uint32_t crc = 0;
  for (auto _ : state) {
    crc = Fn(buf.data(), buf.size(), crc);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// What the engine calls (hardware where available).
void BM_Crc32c(benchmark::State& state) { CrcBench<&Crc32c>(state); }
BENCHMARK(BM_Crc32c)->Arg(64)->Arg(4096);

void BM_Crc32cSoftware(benchmark::State& state) {
  CrcBench<&Crc32cSoftware>(state);
}
BENCHMARK(BM_Crc32cSoftware)->Arg(64)->Arg(4096);

void BM_Crc32cHardware(benchmark::State& state) {
  if (!Crc32cHardwareAvailable()) {
    state.SkipWithError("no SSE4.2 on this CPU");
    return;
  }
  CrcBench<&Crc32cHardware>(state);
}
BENCHMARK(BM_Crc32cHardware)->Arg(64)->Arg(4096);

// Header checksums of a burst of 16 DATA headers (64 bytes each): one
// Crc32cZero4At4 call per header vs one Crc32cZero4At4Multi call for all
// (interleaved chains). Items = headers.
constexpr size_t kBurst = 16;
struct HeaderBurst {
  HeaderBurst() {
    for (size_t i = 0; i < kBurst; ++i) {
      DataHeader h = SampleData();
      h.psn += static_cast<uint32_t>(i);
      EncodeData(h, buf[i], kDataHeaderSize);
      ptr[i] = buf[i];
      len[i] = kDataHeaderSize;
    }
  }
  uint8_t buf[kBurst][kDataHeaderSize];
  const uint8_t* ptr[kBurst];
  size_t len[kBurst];
  uint32_t crc[kBurst];
};

void BM_HeaderCrcSingle(benchmark::State& state) {
  HeaderBurst b;
  for (auto _ : state) {
    benchmark::DoNotOptimize(b.buf);
    for (size_t i = 0; i < kBurst; ++i) {
      b.crc[i] = Crc32cZero4At4(b.ptr[i], b.len[i]);
    }
    benchmark::DoNotOptimize(b.crc);
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
}
BENCHMARK(BM_HeaderCrcSingle);

void BM_HeaderCrcBurst(benchmark::State& state) {
  HeaderBurst b;
  for (auto _ : state) {
    benchmark::DoNotOptimize(b.buf);
    Crc32cZero4At4Multi(b.ptr, b.len, kBurst, b.crc);
    benchmark::DoNotOptimize(b.crc);
  }
  state.SetItemsProcessed(state.iterations() * kBurst);
}
BENCHMARK(BM_HeaderCrcBurst);

}  // namespace
}  // namespace prism::wire
