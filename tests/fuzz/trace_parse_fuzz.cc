// fuzz-libs: prism_sim
// Fuzzes the simulator's flow-trace reader (sim/workload.h ParseTrace: the
// `trace` workload's CSV, `start_us,src,dst,bytes` per line) on arbitrary
// text, 16 hosts, MTU 4096, 64 KiB messages. Any input must be accepted or
// refused with a status, never crash or trip a sanitizer. Checked beyond
// that:
// - accepted: one flow per line that is neither blank nor a '#' comment, in
//   line order (no line is skipped silently), each flow numbered densely,
//   hosts in [0, 16) and distinct, bytes in 1 .. 2^40, start in
//   [0, kMaxScenarioUs], whole-packet messages of at most 64 KiB; the flows
//   written back as CSV read to the same flows (start within 1 ps);
// - refused: the message names the trace and a line that exists
//   ("workload: trace:N: ...", 1 <= N <= the input's line count).
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sim/workload.h"

namespace {

using prism::sim::Flow;
using prism::sim::ParseTrace;

constexpr uint32_t kHosts = 16;
constexpr uint32_t kMtu = 4096;
constexpr uint32_t kMsg = 65536;

void Check(bool ok) {
  if (!ok) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<std::vector<Flow>> flows =
      ParseTrace(text, "trace", kHosts, kMtu, kMsg);
  size_t lines = 0, flow_lines = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++lines;
    const absl::string_view sv = absl::StripAsciiWhitespace(line);
    if (!sv.empty() && sv[0] != '#') ++flow_lines;
  }
  if (!flows.ok()) {
    absl::string_view m = flows.status().message();
    Check(absl::ConsumePrefix(&m, "workload: trace:"));
    const size_t colon = m.find(':');
    Check(colon != absl::string_view::npos);
    size_t n = 0;
    Check(absl::SimpleAtoi(m.substr(0, colon), &n));
    Check(n >= 1 && n <= lines);
    return 0;
  }
  Check(flows->size() == flow_lines);
  std::string again;
  for (size_t i = 0; i < flows->size(); ++i) {
    const Flow& f = (*flows)[i];
    Check(f.id == i);
    Check(f.src < kHosts && f.dst < kHosts && f.src != f.dst);
    Check(f.bytes >= 1 && f.bytes <= (uint64_t{1} << 40));
    Check(f.start >= 0 &&
          f.start <= static_cast<prism::Time>(prism::sim::kMaxScenarioUs *
                                              prism::kMicrosecond));
    Check(f.message_bytes > 0 && f.message_bytes % kMtu == 0 &&
          f.message_bytes <= kMsg);
    Check(f.group == "trace" && f.after.empty());
    // Picoseconds written as exact decimal microseconds.
    char line[96];
    std::snprintf(line, sizeof(line),
                  "%" PRId64 ".%06" PRId64 ",%u,%u,%" PRIu64 "\n",
                  f.start / prism::kMicrosecond, f.start % prism::kMicrosecond,
                  f.src, f.dst, f.bytes);
    again += line;
  }
  const absl::StatusOr<std::vector<Flow>> back =
      ParseTrace(again, "again", kHosts, kMtu, kMsg);
  Check(back.ok() && back->size() == flows->size());
  for (size_t i = 0; i < flows->size(); ++i) {
    const Flow& a = (*flows)[i];
    const Flow& b = (*back)[i];
    Check(a.src == b.src && a.dst == b.dst && a.bytes == b.bytes &&
          a.message_bytes == b.message_bytes);
    Check(a.start - b.start <= 1 && b.start - a.start <= 1);
  }
  return 0;
}
