// Engine micro-benchmarks: engine-to-engine goodput on one core next to a
// plain memcpy of the same bytes, measured in the same run.
//
// BM_EngineLoopback_4KiBPackets_1MiBMessages_256Paths: two engines in one
// thread, 1 MiB WRITEs segmented into 4 KiB packets sprayed over 256 paths,
// moved by a direct PollTransmit -> OnReceive pump (split RxPackets: header
// + zero-copy payload pointer, as a scatter-gather datapath delivers them),
// SACKs flowing back the same way. The receiver's placement memcpy is the
// one copy of the payload, so the ratio to BM_Memcpy_1MiB is the engine's
// protocol overhead. Target: >= 80% of the memcpy rate.
#include <emmintrin.h>
#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "prism/engine.h"

namespace prism {
namespace {

constexpr size_t kMsg = 1 << 20;

// A page-aligned byte buffer, for every source and destination below: the
// distance between a copy's destination and its source modulo 4 KiB is
// then exactly the shift a benchmark names. (With std::vector it depended
// on what ran before in the process: glibc serves a 1 MiB vector from a
// fresh mmap, page-aligned + 16, until freeing one raises its mmap
// threshold, and from the heap after that, where two vectors allocated
// back to back are 16 or 32 bytes apart modulo 4 KiB; a copy whose
// destination is 1-63 bytes ahead of its source modulo 4 KiB ran 15-25%
// slower with `rep movsb` on AMD Zen 5 and up to 15x slower on Zen 4,
// which is why the placer's string move now skips those (engine.h,
// CopyMethod), docs/benchmarks.md "Buffer alignment".)
class PageBuffer {
 public:
  PageBuffer(size_t size, uint8_t fill)
      : size_(size),
        data_(static_cast<uint8_t*>(
            ::operator new (size, std::align_val_t{4096}))) {
    std::memset(data_, fill, size);
  }
  ~PageBuffer() { ::operator delete (data_, std::align_val_t{4096}); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  size_t size_;
  uint8_t* data_;
};

void BM_Memcpy_1MiB(benchmark::State& state) {
  PageBuffer src(kMsg, 1), dst(kMsg, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kMsg);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kMsg);
}
BENCHMARK(BM_Memcpy_1MiB);

// The same bytes copied in 4 KiB pieces (the packet size), for comparison
// with the engine's per-packet placement.
void BM_Memcpy_1MiB_4KiBChunks(benchmark::State& state) {
  PageBuffer src(kMsg, 1), dst(kMsg, 0);
  for (auto _ : state) {
    for (size_t off = 0; off < kMsg; off += 4096) {
      std::memcpy(dst.data() + off, src.data() + off, 4096);
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kMsg);
}
BENCHMARK(BM_Memcpy_1MiB_4KiBChunks);

// One 1 MiB memcpy with the destination `shift` bytes ahead of the source
// modulo 4 KiB (BM_Memcpy_1MiB: 0, both page-aligned).
void BM_Memcpy_1MiB_DstShift(benchmark::State& state) {
  const size_t shift = static_cast<size_t>(state.range(0));
  PageBuffer src(kMsg, 1), dst(kMsg + 4096, 0);
  for (auto _ : state) {
    std::memcpy(dst.data() + shift, src.data(), kMsg);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kMsg);
}
BENCHMARK(BM_Memcpy_1MiB_DstShift)->Arg(0)->Arg(16)->Arg(64)->Arg(2048);

// The engine's default placement loop (prism::PlacementCopy, what
// MemcpyPlacer in engine.cc runs) for the baselines below.
inline void PlacerLoop(uint8_t* dst, const uint8_t* src, uint32_t len) {
  prism::PlacementCopy(dst, src, len);
}

// The same 1 MiB copied by the engine's placement loop in 4 KiB pieces,
// same buffers as BM_Memcpy_1MiB: the copy code's own speed, cache-hot.
void BM_Memcpy_1MiB_PlacerLoop4KiB(benchmark::State& state) {
  PageBuffer src(kMsg, 1), dst(kMsg, 0);
  for (auto _ : state) {
    for (size_t off = 0; off < kMsg; off += 4096) {
      PlacerLoop(dst.data() + off, src.data() + off, 4096);
      benchmark::ClobberMemory();
    }
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kMsg);
}
BENCHMARK(BM_Memcpy_1MiB_PlacerLoop4KiB);

// The placement loop with each copy method, `shift` bytes between the
// destination's and the source's offsets modulo 4 KiB (0: the same offset,
// as in BM_Memcpy_1MiB; `rep movsb` is known to slow down on AMD Zen 3/4
// when that distance is small).
void PlacerLoopWith(benchmark::State& state, CopyMethod m) {
  const size_t shift = static_cast<size_t>(state.range(0));
  PageBuffer src(kMsg, 1), dstv(kMsg + 4096, 0);
  uint8_t* const dst = dstv.data() + shift;
  for (auto _ : state) {
    for (size_t off = 0; off < kMsg; off += 4096) {
      PlacementCopyWith(m, dst + off, src.data() + off, 4096);
      benchmark::ClobberMemory();
    }
    benchmark::DoNotOptimize(dst);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kMsg);
}
void BM_Memcpy_1MiB_PlacerLoop4KiB_Vector(benchmark::State& state) {
  PlacerLoopWith(state, CopyMethod::kVector);
}
// The shifts both placer loops run: aligned, the string move's 4 KiB
// window (1 .. 63 bytes ahead), its edge, and half a page.
void PlacerLoopShifts(benchmark::internal::Benchmark* b) {
  for (int64_t shift : {0, 1, 16, 63, 64, 2048}) b->Arg(shift);
}
BENCHMARK(BM_Memcpy_1MiB_PlacerLoop4KiB_Vector)->Apply(PlacerLoopShifts);
void BM_Memcpy_1MiB_PlacerLoop4KiB_String(benchmark::State& state) {
  PlacerLoopWith(state, CopyMethod::kString);
}
BENCHMARK(BM_Memcpy_1MiB_PlacerLoop4KiB_String)->Apply(PlacerLoopShifts);

// Diagnostic placer: the default loop, timed with rdtsc around each packet
// (~2 x 20 cycles of overhead against ~300 for the 4 KiB copy), so that the
// copy's cost inside the loopback can be told apart from the protocol's
// slowdown caused by the copy (cache evictions). rdtsc counts wall time,
// the benchmark CPU time: a copy during which the thread was descheduled
// (over `max_ticks`, ~20 us against ~0.1 us) is left out and counted in
// `skipped`, so the figure does not grow with the machine's load.
class TimedPlacer final : public Placer {
 public:
  explicit TimedPlacer(uint64_t max_ticks) : max_ticks_(max_ticks) {}
  bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
             const MemoryRegion&) override {
    const uint64_t t0 = __rdtsc();
    PlacerLoop(dst, src, len);
    const uint64_t dt = __rdtsc() - t0;
    if (dt <= max_ticks_) {
      ticks += dt;
      ++calls;
    } else {
      ++skipped;
    }
    return true;
  }
  uint64_t ticks = 0;
  uint64_t calls = 0;
  uint64_t skipped = 0;

 private:
  uint64_t max_ticks_;
};

// rdtsc ticks per nanosecond, measured once against steady_clock.
double TicksPerNs() {
  static const double r = [] {
    const auto c0 = std::chrono::steady_clock::now();
    const uint64_t t0 = __rdtsc();
    while (std::chrono::steady_clock::now() - c0 <
           std::chrono::milliseconds(20)) {
    }
    const uint64_t t1 = __rdtsc();
    const auto c1 = std::chrono::steady_clock::now();
    return static_cast<double>(t1 - t0) /
           static_cast<double>(
               std::chrono::duration_cast<std::chrono::nanoseconds>(c1 - c0)
                   .count());
  }();
  return r;
}

// Placement with glibc memcpy per packet (the engine's default placer uses
// its own vector loop; this variant shows the difference).
class GlibcPlacer final : public Placer {
 public:
  bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
             const MemoryRegion&) override {
    std::memcpy(dst, src, len);
    return true;
  }
};

// Placement with non-temporal (streaming) 16-byte stores where the
// destination is 16-byte aligned, one sfence per packet: bypasses the
// caches for the destination (for messages larger than the last-level
// cache; here 1 MiB, so the question is whether it pays at all).
class StreamingPlacer final : public Placer {
 public:
  bool Place(uint8_t* dst, const uint8_t* src, uint32_t len,
             const MemoryRegion&) override {
    uint32_t i = 0;
    if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
      for (; i + 64 <= len; i += 64) {
        const __m128i a =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        const __m128i b =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
        const __m128i c =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
        const __m128i d =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
      }
      _mm_sfence();
    }
    if (i < len) std::memcpy(dst + i, src + i, len - i);
    return true;
  }
};

// Placement that only touches nothing: isolates the protocol overhead.
class NoopPlacer final : public Placer {
 public:
  bool Place(uint8_t*, const uint8_t*, uint32_t, const MemoryRegion&) override {
    return true;
  }
};

struct Rig {
  // `dst_shift`: the receive region starts that many bytes into its buffer
  // (the source and destination then differ modulo 4 KiB by it).
  // `copy_method`: the default placer's copy (EngineOptions::copy_method).
  explicit Rig(Placer* placer = nullptr, uint32_t window = 4096,
               size_t dst_shift = 0,
               CopyMethod copy_method = CopyMethod::kAuto) {
    EngineOptions ea;
    ea.seed = 1;
    ea.mtu_payload = 4096;
    ea.placer = placer;
    ea.copy_method = copy_method;
    EngineOptions eb = ea;
    eb.seed = 2;
    a = std::make_unique<Engine>(ea);
    b = std::make_unique<Engine>(eb);
    ConnectionOptions o;
    o.num_paths = 256;
    o.num_planes = 4;
    o.congestion = "fixed";
    o.max_inflight_packets = window;
    ca = *a->CreateConnection(o);
    cb = *b->CreateConnection(o);
    (void)a->Connect(ca, b->LocalInfo(cb));
    (void)b->Connect(cb, a->LocalInfo(ca));
    dbase = dst.data() + dst_shift;
    smr = *a->RegisterMemory(src.data(), src.size(), kAccessLocal);
    dmr = *b->RegisterMemory(dbase, kMsg, kAccessRemoteWrite);
  }

  // Moves packets from `from` to `to`; returns how many.
  size_t Pump(Engine& from, Engine& to) {
    const size_t n = from.PollTransmit(now, tx, kBurst);
    for (size_t i = 0; i < n; ++i) {
      rx[i].data = tx[i].header;
      rx[i].len = tx[i].header_len;
      rx[i].payload = tx[i].payload;
      rx[i].payload_len = tx[i].payload_len;
    }
    if (n > 0) to.OnReceive(now, rx, n);
    return n;
  }

  // Posts one 1 MiB WRITE and runs until it completes.
  bool WriteOnce(uint64_t id) {
    WriteRequest w;
    w.wr_id = id;
    w.local_addr = src.data();
    w.length = kMsg;
    w.lkey = smr.lkey;
    w.remote_addr = dmr.addr;
    w.rkey = dmr.rkey;
    if (!a->PostWrite(now, ca, w).ok()) return false;
    Completion c[4];
    for (int round = 0; round < 100000; ++round) {
      const size_t moved = Pump(*a, *b) + Pump(*b, *a);
      if (a->PollCompletions(c, 4) > 0) {
        return c[0].status == absl::StatusCode::kOk;
      }
      // Nothing moved: jump to the next timer (the delayed SACK).
      now = moved > 0 ? now + 100 * kNanosecond
                      : std::max(now + 1, std::min(a->NextEventTime(),
                                                   b->NextEventTime()));
    }
    return false;
  }

  static constexpr size_t kBurst = 64;
  std::unique_ptr<Engine> a, b;
  ConnId ca = 0, cb = 0;
  PageBuffer src{kMsg, 7};
  PageBuffer dst{kMsg + 4096, 0};
  uint8_t* dbase = nullptr;  // the receive region (in dst)
  MemoryRegion smr, dmr;
  Time now = kMicrosecond;
  TxPacket tx[kBurst];
  RxPacket rx[kBurst];
};

// One 1 MiB WRITE per iteration through `rig`; bytes per second reported.
void PumpWrites(benchmark::State& state, Rig& rig) {
  uint64_t id = 0;
  for (auto _ : state) {
    if (!rig.WriteOnce(++id)) {
      state.SkipWithError("write did not complete");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kMsg);
}

double DstMatchesSrc(const Rig& rig) {
  return std::memcmp(rig.src.data(), rig.dbase, kMsg) == 0 ? 1 : 0;
}

// A loopback variant: the rig with these settings, pumped, and the
// received bytes checked ("ok").
void PumpVariant(benchmark::State& state, Placer* placer, uint32_t window,
                 size_t dst_shift) {
  Rig rig(placer, window, dst_shift);
  PumpWrites(state, rig);
  state.counters["ok"] = DstMatchesSrc(rig);
}

void BM_EngineLoopback_4KiBPackets_1MiBMessages_256Paths(
    benchmark::State& state) {
  Rig rig;
  PumpWrites(state, rig);
  state.SetLabel(std::string("copy=") + CopyMethodName(DefaultCopyMethod()));
  const auto st = *rig.a->connection_stats(rig.ca);
  state.counters["pkts_per_msg"] = benchmark::Counter(
      static_cast<double>(st.tx_data_packets) /
      static_cast<double>(std::max<uint64_t>(1, st.messages_completed)));
  state.counters["retx"] = static_cast<double>(st.retransmitted_packets);
  state.counters["ok"] = DstMatchesSrc(rig);
}
BENCHMARK(BM_EngineLoopback_4KiBPackets_1MiBMessages_256Paths);

// The same with a 256-packet window (ConnectionOptions::max_inflight_packets):
// 1 MiB is exactly one window, and the connection state is ~4x smaller.
void BM_EngineLoopback_4KiBPackets_1MiBMessages_256Paths_Window256(
    benchmark::State& state) {
  PumpVariant(state, nullptr, 256, 0);
}
BENCHMARK(BM_EngineLoopback_4KiBPackets_1MiBMessages_256Paths_Window256);

// The same with the default placer's copy method forced (the default picks
// one per CPU, CopyMethod in prism/engine.h): both in one run, so the
// choice can be checked on any machine.
void BM_EngineLoopback_VectorCopy_4KiBPackets_1MiBMessages_256Paths(
    benchmark::State& state) {
  Rig rig(nullptr, 4096, 0, CopyMethod::kVector);
  PumpWrites(state, rig);
  state.counters["ok"] = DstMatchesSrc(rig);
}
BENCHMARK(BM_EngineLoopback_VectorCopy_4KiBPackets_1MiBMessages_256Paths);

void BM_EngineLoopback_StringCopy_4KiBPackets_1MiBMessages_256Paths(
    benchmark::State& state) {
  Rig rig(nullptr, 4096, 0, CopyMethod::kString);
  PumpWrites(state, rig);
  state.counters["ok"] = DstMatchesSrc(rig);
}
BENCHMARK(BM_EngineLoopback_StringCopy_4KiBPackets_1MiBMessages_256Paths);

// The same with glibc memcpy as the placer.
void BM_EngineLoopback_GlibcPlacer_4KiBPackets_1MiBMessages_256Paths(
    benchmark::State& state) {
  GlibcPlacer glibc;
  PumpVariant(state, &glibc, 4096, 0);
}
BENCHMARK(BM_EngineLoopback_GlibcPlacer_4KiBPackets_1MiBMessages_256Paths);

// The same with the receive region 2 KiB off the source modulo 4 KiB (no
// 4K aliasing between the placement copy's loads and stores).
void BM_EngineLoopback_DstShift2KiB_4KiBPackets_1MiBMessages_256Paths(
    benchmark::State& state) {
  PumpVariant(state, nullptr, 4096, 2048);
}
BENCHMARK(BM_EngineLoopback_DstShift2KiB_4KiBPackets_1MiBMessages_256Paths);

// The same with non-temporal stores for the placement copy.
void BM_EngineLoopback_StreamingPlacer_4KiBPackets_1MiBMessages_256Paths(
    benchmark::State& state) {
  StreamingPlacer streaming;
  PumpVariant(state, &streaming, 4096, 0);
}
BENCHMARK(BM_EngineLoopback_StreamingPlacer_4KiBPackets_1MiBMessages_256Paths);

// The same pump with a no-op Placer: protocol cost alone (no payload copy).
void BM_EngineLoopback_NoPlacement_4KiBPackets_1MiBMessages_256Paths(
    benchmark::State& state) {
  NoopPlacer noop;
  Rig rig(&noop);
  PumpWrites(state, rig);
  state.counters["ns_per_pkt"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 256,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_EngineLoopback_NoPlacement_4KiBPackets_1MiBMessages_256Paths);

// #2's ratio measured in pairs: each iteration copies the 1 MiB with one
// glibc memcpy into the receive region, twice, then moves it as one 1 MiB
// WRITE through the loopback (the default placer, or the copy method the
// second argument forces), twice; the second of each is timed with rdtsc
// (so each finds the caches as its own standalone loop leaves them). The
// same source and destination bytes for both. This machine's speed drifts
// by 15-40% within minutes, more than separate benchmarks run at different
// moments can tell apart; a pair's halves run microseconds apart, so the
// median of the per-pair ratios ("pct_of_memcpy": memcpy time over
// loopback time, i.e. goodput as a share of memcpy's rate) does not move
// with the drift, and a pair the scheduler interrupted is one outlier
// among thousands. "memcpy_us_per_MiB" / "loopback_us_per_MiB": the
// medians of each half. Args: the receive region's shift from the source
// modulo 4 KiB (0: page-aligned both, as in BM_Memcpy_1MiB and the
// loopback above; 16: two buffers malloc'd back to back) and the copy
// method (0 the default, 1 vector, 2 string).
void BM_EngineLoopbackVsMemcpy(benchmark::State& state) {
  const size_t shift = static_cast<size_t>(state.range(0));
  const CopyMethod method = state.range(1) == 1   ? CopyMethod::kVector
                            : state.range(1) == 2 ? CopyMethod::kString
                                                  : CopyMethod::kAuto;
  Rig rig(nullptr, 4096, shift, method);
  std::vector<uint64_t> mc, lb;
  mc.reserve(1 << 16);
  lb.reserve(1 << 16);
  uint64_t id = 0;
  for (auto _ : state) {
    // Each timed half runs right after an untimed run of itself, so that
    // it finds the caches as its standalone loop leaves them (a memcpy
    // right after the loopback's placement ran up to 20% faster than
    // after a memcpy on this AMD, which would flatter nothing real).
    std::memcpy(rig.dbase, rig.src.data(), kMsg);
    benchmark::ClobberMemory();
    const uint64_t t0 = __rdtsc();
    std::memcpy(rig.dbase, rig.src.data(), kMsg);
    benchmark::ClobberMemory();
    const uint64_t t1 = __rdtsc();
    bool ok = rig.WriteOnce(++id);
    const uint64_t t2 = __rdtsc();
    ok = ok && rig.WriteOnce(++id);
    const uint64_t t3 = __rdtsc();
    if (!ok) {
      state.SkipWithError("write did not complete");
      break;
    }
    if (mc.size() < mc.capacity()) {
      mc.push_back(t1 - t0);
      lb.push_back(t3 - t2);
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 4 * kMsg);
  if (mc.empty()) return;
  std::vector<double> ratio(mc.size());
  for (size_t i = 0; i < mc.size(); ++i) {
    ratio[i] = static_cast<double>(mc[i]) / static_cast<double>(lb[i]);
  }
  auto median = [](auto v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return static_cast<double>(v[v.size() / 2]);
  };
  const double us_per_tick = 1.0 / TicksPerNs() / 1000.0;
  state.counters["memcpy_us_per_MiB"] = median(mc) * us_per_tick;
  state.counters["loopback_us_per_MiB"] = median(lb) * us_per_tick;
  state.counters["pct_of_memcpy"] = 100.0 * median(ratio);
  // The memcpy wrote the bytes too: "ok" from one more WRITE into a
  // cleared region.
  std::memset(rig.dbase, 0, kMsg);
  state.counters["ok"] = rig.WriteOnce(++id) ? DstMatchesSrc(rig) : 0;
  state.SetLabel(std::string("copy=") +
                 CopyMethodName(method == CopyMethod::kAuto
                                    ? DefaultCopyMethod()
                                    : method));
}
BENCHMARK(BM_EngineLoopbackVsMemcpy)
    ->ArgNames({"shift", "method"})
    ->ArgsProduct({{0, 16, 2048}, {0, 1, 2}});

// The loopback with the placement copy timed in place (TimedPlacer):
// "copy_us_per_MiB" is the copy's own time per 1 MiB message inside the
// loopback (wall time of the copies not interrupted; "skipped": the others),
// to set against BM_Memcpy_1MiB_PlacerLoop4KiB (the same loop,
// cache-hot, alone).
void BM_EngineLoopback_TimedPlacer_4KiBPackets_1MiBMessages_256Paths(
    benchmark::State& state) {
  const double tpn = TicksPerNs();
  TimedPlacer timed(static_cast<uint64_t>(20000 * tpn));
  Rig rig(&timed);
  PumpWrites(state, rig);
  state.counters["ok"] = DstMatchesSrc(rig);
  // Mean over the copies kept, times 256 packets per MiB.
  state.counters["copy_us_per_MiB"] =
      static_cast<double>(timed.ticks) / tpn / 1000.0 * 256.0 /
      static_cast<double>(std::max<uint64_t>(1, timed.calls));
  state.counters["skipped"] = static_cast<double>(timed.skipped);
}
BENCHMARK(BM_EngineLoopback_TimedPlacer_4KiBPackets_1MiBMessages_256Paths);

}  // namespace
}  // namespace prism
