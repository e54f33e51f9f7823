// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) implementations behind
// prism::wire::Crc32c(): a portable slice-by-8 table version and an SSE4.2
// version (crc32 instruction), chosen once at runtime.
//
// Contract:
// - All functions compute the same standard CRC32C: initial value and final
//   XOR of 0xFFFFFFFF are applied inside, so `crc` is the previous result and
//   Crc32c(b, nb, Crc32c(a, na)) == Crc32c(a||b). Crc32c("123456789") is
//   0xE3069283.
// - Thread-safe and allocation-free. `data` may be null only when len == 0.
// - Crc32cHardware() REQUIRES Crc32cHardwareAvailable(); it exists for tests
//   and benchmarks. Normal code calls prism::wire::Crc32c().
#ifndef PRISM_WIRE_CRC32C_H_
#define PRISM_WIRE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace prism::wire {

uint32_t Crc32cSoftware(const uint8_t* data, size_t len, uint32_t crc = 0);

// True when this CPU has SSE4.2 (x86-64 only; false elsewhere).
bool Crc32cHardwareAvailable();

// REQUIRES: Crc32cHardwareAvailable(). On builds without x86 support this
// falls back to the software version.
uint32_t Crc32cHardware(const uint8_t* data, size_t len, uint32_t crc = 0);

// CRC32C of `len` bytes (len >= 8) with bytes [4, 8) taken as zero: the
// header checksum (its field sits at offset 4), in one pass without a copy.
// Same dispatch as Crc32c() (resolved once, then one indirect call).
uint32_t Crc32cZero4At4(const uint8_t* data, size_t len);

// Crc32cZero4At4 of `n` buffers at once: out[i] = Crc32cZero4At4(data[i],
// len[i]). REQUIRES: len[i] >= 8. One buffer's crc32 chain is bound by the
// instruction's latency (3 cycles on current x86), not its throughput (1 per
// cycle), so runs of up to four buffers of equal length are checksummed as
// interleaved independent chains: a burst of 64-byte headers costs about a
// third of n single calls (bench/wire_bench.cc, BM_HeaderCrcBurst).
void Crc32cZero4At4Multi(const uint8_t* const* data, const size_t* len,
                         size_t n, uint32_t* out);

// Crc32cZero4At4 of `n` buffers laid out `stride` bytes apart from
// `first`, each stored into its own bytes [4, 8) (little-endian): buffer k
// starts at first + k * stride and is as long as the 16-bit host-order
// length at its start + len_off. The same checksums as
// Crc32cZero4At4Multi, without the pointer and length arrays (an array of
// records such as prism::TxPacket, whose header and header_len are at a
// fixed distance). REQUIRES: every length >= 8, the length fields outside
// bytes [0, len) of their own buffer.
void Crc32cZero4At4StoreStrided(uint8_t* first, size_t stride, size_t len_off,
                                size_t n);

}  // namespace prism::wire

#endif  // PRISM_WIRE_CRC32C_H_
