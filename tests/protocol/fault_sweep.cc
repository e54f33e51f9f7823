// Seeded fault sweep: two engines over the loopback datapath under a random
// fault plan (loss up to 20%, burst loss, duplication, reordering,
// corruption with payload checksums, trims, ECN, paths blackholed and
// restored), many concurrent WRITEs of random sizes (0 B .. 16 MiB, skewed
// small) in both directions. Every seed must end with every message
// completed exactly once, byte-exact, immediates in order, no connection
// error, within a virtual-time budget. A failing seed prints a one-line
// replay command. About a quarter of the seeds also give one or both
// engines a small completion queue (EngineOptions::cq_capacity 1 .. 64)
// whose application polls only every 1 .. 300 us, a few completions at a
// time: PostWrite is refused at times, delivery held, NACK NO_BUFFER sent,
// and still nothing may be lost. That part of the plan is drawn from a
// generator of its own (CqPlan), so the other seeds' plans and runs are
// what they were before it. About half of the seeds (with two or more
// paths) also give the paths failure groups (ConnectionOptions::
// path_groups, a few paths without one), so group balance takes part;
// drawn from a generator of its own too (GroupPlan).
//
// Usage: prism_fault_sweep [--seeds=A:B] [--seed=N] [--cc=fixed|nscc]
//                          [--max_mib=M] [--mtu=BYTES] [--verbose]
// --max_mib caps the bytes per seed (default 40); the quick "unit" sweep
// uses a small cap so it stays fast under ASan. --mtu replaces every plan's
// packet payload size (drawn from 512 B .. 8 KiB otherwise; the plan is
// otherwise the same): 65536 and more exercise payload_len_hi, the verbs
// datapath's chunk.
//   (gtest flags are accepted too). Default: --seeds=0:20.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "prism/engine.h"
#include "tests/protocol/harness.h"
#include "transport/base/random.h"

namespace prism {
namespace {

uint64_t g_seed_begin = 0;
uint64_t g_seed_end = 20;
bool g_verbose = false;
const char* g_cc = "fixed";

constexpr size_t kPatternBytes = (16u << 20) + 4096;
uint64_t g_max_bytes_per_seed = 40u << 20;
uint32_t g_mtu = 0;  // 0: the plan's
constexpr Time kVirtualBudget = 20 * kSecond;

const std::vector<uint8_t>& Pattern() {
  static const std::vector<uint8_t>* p = [] {
    auto* v = new std::vector<uint8_t>(kPatternBytes);
    Rng r(0x5eed);
    for (size_t i = 0; i < v->size(); i += 8) {
      const uint64_t x = r.Next();
      std::memcpy(v->data() + i, &x, std::min<size_t>(8, v->size() - i));
    }
    return v;
  }();
  return *p;
}

struct Msg {
  int dir = 0;  // 0: engine 0 -> 1, 1: engine 1 -> 0
  uint64_t wr_id = 0;
  uint64_t len = 0;
  uint64_t src_off = 0;
  uint64_t dst_off = 0;
  bool imm = false;
  uint32_t imm_val = 0;
  Time post_at = 0;
  bool posted = false;
  int completions = 0;
};

uint64_t LogUniform(Rng& r, uint64_t lo, uint64_t hi) {
  // lo >= 1
  const double a = std::log(static_cast<double>(lo));
  const double b = std::log(static_cast<double>(hi));
  return static_cast<uint64_t>(std::exp(a + (b - a) * r.NextDouble()));
}

struct Plan {
  uint32_t mtu;
  uint16_t paths, planes;
  bool crc;
  loopback::LinkConfig link;
  loopback::FaultPlan faults;
  uint32_t max_outstanding;
  std::string Describe() const {
    std::string s = absl::StrCat(
        "mtu=", mtu, " paths=", paths, " planes=", planes, " crc=", crc,
        " delay_ns=", link.delay / kNanosecond,
        " path_rate=", link.path_rate_bps, " port_rate=", link.port_rate_bps,
        " loss=", faults.loss, " ge_enter=", faults.p_enter_bad,
        " dup=", faults.duplicate, " reorder=", faults.reorder, "/",
        faults.reorder_max_delay / kNanosecond, "ns corrupt=", faults.corrupt,
        " trim=", faults.trim, " ecn=", faults.ecn,
        " max_outstanding=", max_outstanding, " blackholes=");
    for (const auto& b : faults.blackholes) {
      absl::StrAppend(&s, "[src=", b.src, " paths ", b.path_lo, "-", b.path_hi,
                      " ", b.start / kMicrosecond, "-", b.end / kMicrosecond,
                      "us]");
    }
    return s;
  }
};

Plan MakePlan(Rng& r) {
  Plan p;
  static const uint32_t kMtus[] = {512, 1024, 2048, 4096, 4096, 8192};
  p.mtu = kMtus[r.Uniform(6)];
  if (g_mtu != 0) p.mtu = g_mtu;
  static const uint16_t kPaths[] = {1, 2, 7, 16, 64, 128, 256, 256};
  p.paths = kPaths[r.Uniform(8)];
  static const uint16_t kPlanes[] = {1, 2, 4, 8};
  p.planes = std::min<uint16_t>(kPlanes[r.Uniform(4)], p.paths);
  p.link.delay = r.Range(1, 10) * kMicrosecond;
  p.link.path_rate_bps =
      r.Bernoulli(0.5) ? 0 : r.Range(10, 100) * 1'000'000'000ull;
  p.link.port_rate_bps = r.Bernoulli(0.5) ? 0 : 100'000'000'000ull;
  auto& f = p.faults;
  f.seed = r.Next();
  f.loss = r.Bernoulli(0.25) ? 0 : 0.2 * r.NextDouble();
  if (r.Bernoulli(0.3)) {
    f.p_enter_bad = 0.001 + 0.01 * r.NextDouble();
    f.p_leave_bad = 0.1 + 0.4 * r.NextDouble();
  }
  f.duplicate = r.Bernoulli(0.5) ? 0 : 0.05 * r.NextDouble();
  if (r.Bernoulli(0.5)) {
    f.reorder = 0.3 * r.NextDouble();
    f.reorder_max_delay = r.Range(0, 20) * kMicrosecond;
  }
  f.corrupt = r.Bernoulli(0.5) ? 0 : 0.05 * r.NextDouble();
  f.trim = r.Bernoulli(0.5) ? 0 : 0.1 * r.NextDouble();
  f.ecn = r.Bernoulli(0.7) ? 0 : 0.1 * r.NextDouble();
  p.crc = f.corrupt > 0 || r.Bernoulli(0.3);
  const int nbh = static_cast<int>(r.Uniform(4));
  for (int i = 0; i < nbh; ++i) {
    loopback::Blackhole b;
    b.src = r.Bernoulli(0.5) ? -1 : static_cast<int>(r.Uniform(2));
    const int kind = static_cast<int>(r.Uniform(3));
    if (kind == 0) {  // one path
      b.path_lo = b.path_hi = static_cast<uint32_t>(r.Uniform(p.paths));
    } else if (kind == 1) {  // a range
      b.path_lo = static_cast<uint32_t>(r.Uniform(p.paths));
      b.path_hi = b.path_lo + static_cast<uint32_t>(r.Uniform(p.paths / 2 + 1));
    } else {  // everything (a switch reboot)
      b.path_lo = 0;
      b.path_hi = 0xFFFF;
    }
    b.start = r.Range(0, 2000) * kMicrosecond;
    b.end = b.start + r.Range(10, kind == 2 ? 3000 : 8000) * kMicrosecond;
    f.blackholes.push_back(b);
  }
  p.max_outstanding =
      r.Bernoulli(0.2) ? static_cast<uint32_t>(r.Range(1, 8)) : 4096;
  // The wire must carry the chosen packets (header included).
  if (g_mtu != 0) {
    p.link.max_packet_bytes =
        std::max<uint32_t>(p.link.max_packet_bytes, g_mtu + 256);
  }
  return p;
}

// The completion-queue part of a seed's plan, from its own generator.
struct CqPlan {
  uint32_t capacity[2] = {0, 0};  // 0: the default, polled every step
  // Tiny WRITE-with-immediate messages added to the seed's (drawn from
  // `extra_seed`), towards an engine with a small queue, and a 256-packet
  // window (a 256-message receive ring): enough messages to fill a held
  // receiver's ring (NACK NO_BUFFER).
  int extra_msgs = 0;
  uint64_t extra_seed = 0;
  Time poll_every[2] = {0, 0};
  size_t poll_batch[2] = {0, 0};
  std::string Describe() const {
    std::string s;
    for (int e = 0; e < 2; ++e) {
      if (capacity[e] == 0) continue;
      absl::StrAppend(&s, " cq", e, "=", capacity[e], "/every ",
                      poll_every[e] / kNanosecond, "ns/batch ", poll_batch[e]);
    }
    if (extra_msgs > 0) {
      absl::StrAppend(&s, " extra_msgs=", extra_msgs, " window=256");
    }
    return s;
  }
};

// Failure groups for the connection's paths: path p is in group p % groups
// unless it is one of the paths left without a group (every `ungrouped`-th
// when non-zero). groups == 0: no path_groups at all.
struct GroupPlan {
  uint16_t groups = 0;
  uint16_t ungrouped = 0;
  std::string Describe() const {
    if (groups == 0) return "";
    return absl::StrCat(" groups=", groups, " ungrouped_every=", ungrouped);
  }
  std::vector<uint16_t> PathGroups(uint16_t paths) const {
    std::vector<uint16_t> v;
    if (groups == 0) return v;
    for (uint16_t p = 0; p < paths; ++p) {
      v.push_back(ungrouped != 0 && p % ungrouped == ungrouped - 1
                      ? kNoFailureGroup
                      : static_cast<uint16_t>(100 + p % groups));
    }
    return v;
  }
};

GroupPlan MakeGroupPlan(uint64_t seed, uint16_t paths) {
  Rng r(seed * 0xA24BAED4963EE407ull + 4242);
  GroupPlan p;
  if (paths < 2 || !r.Bernoulli(0.5)) return p;
  static const uint16_t kGroups[] = {2, 3, 4, 8, 32};
  p.groups = std::min<uint16_t>(kGroups[r.Uniform(5)], paths);
  static const uint16_t kUngrouped[] = {0, 0, 5, 16};
  p.ungrouped = kUngrouped[r.Uniform(4)];
  return p;
}

CqPlan MakeCqPlan(uint64_t seed) {
  Rng r(seed * 0xD1B54A32D192ED03ull + 777);
  CqPlan p;
  if (!r.Bernoulli(0.25)) return p;
  const int which = static_cast<int>(r.Uniform(3));  // 0, 1 or both
  for (int e = 0; e < 2; ++e) {
    if (which != 2 && which != e) continue;
    static const uint32_t kCaps[] = {1, 2, 3, 8, 16, 64};
    p.capacity[e] = kCaps[r.Uniform(6)];
    p.poll_every[e] = r.Range(1, 300) * kMicrosecond;
    p.poll_batch[e] = r.Bernoulli(0.5) ? 0 : r.Range(1, 8);
  }
  if (r.Bernoulli(0.5)) p.extra_msgs = static_cast<int>(r.Range(300, 1000));
  p.extra_seed = r.Next();
  return p;
}

// Runs one seed; returns "" on success or a description of the failure.
std::string RunSeed(uint64_t seed) {
  Rng r(seed * 0x9E3779B97F4A7C15ull + 12345);
  const Plan plan = MakePlan(r);
  const CqPlan cqp = MakeCqPlan(seed);
  EngineOptions eo;
  eo.seed = seed + 1;
  eo.mtu_payload = plan.mtu;
  testing::LoopbackHarness h(2, eo, plan.link, plan.faults,
                             [&](int i, EngineOptions* o) {
                               if (cqp.capacity[i] != 0) {
                                 o->cq_capacity = cqp.capacity[i];
                               }
                             });
  for (int e = 0; e < 2; ++e) {
    if (cqp.capacity[e] != 0) {
      h.SetPolling(e, cqp.poll_every[e], cqp.poll_batch[e]);
    }
  }
  ConnectionOptions co;
  co.num_paths = plan.paths;
  co.num_planes = plan.planes;
  co.congestion = g_cc;
  co.payload_checksum = plan.crc;
  co.max_outstanding_messages = plan.max_outstanding;
  if (cqp.extra_msgs > 0) co.max_inflight_packets = 256;
  const GroupPlan gp = MakeGroupPlan(seed, plan.paths);
  co.path_groups = gp.PathGroups(plan.paths);
  const auto [c0, c1] = h.Connect(0, 1, co, co);
  if (c0 == kInvalidConn) return "connect failed";
  const ConnId conn[2] = {c0, c1};

  // Messages.
  std::vector<Msg> msgs;
  const int count = static_cast<int>(r.Range(8, 64));
  uint64_t total[2] = {0, 0};
  uint64_t all = 0;
  for (int i = 0; i < count; ++i) {
    Msg m;
    m.dir = static_cast<int>(r.Uniform(2));
    m.wr_id = 1000 + static_cast<uint64_t>(i);
    const double u = r.NextDouble();
    if (u < 0.05) {
      m.len = 0;
    } else if (u < 0.40) {
      m.len = LogUniform(r, 1, 4096);
    } else if (u < 0.85) {
      m.len = LogUniform(r, 4096, 256 << 10);
    } else if (u < 0.95) {
      m.len = LogUniform(r, 256 << 10, 2 << 20);
    } else {
      m.len = LogUniform(r, 2 << 20, 16 << 20);
    }
    if (all + m.len > g_max_bytes_per_seed) m.len = r.Uniform(4096);
    all += m.len;
    m.src_off = r.Uniform(kPatternBytes - m.len + 1);
    m.dst_off = total[m.dir];
    total[m.dir] += m.len + 64;  // 64 canary bytes after each message
    m.imm = m.len == 0 || r.Bernoulli(0.5);
    m.imm_val = r.Next32();
    m.post_at = r.Bernoulli(0.5) ? 0 : r.Range(0, 2000) * kMicrosecond;
    msgs.push_back(m);
  }
  Rng xr(cqp.extra_seed);
  for (int i = 0; i < cqp.extra_msgs; ++i) {
    Msg m;
    // Towards an engine with a small queue (direction d writes into
    // engine 1 - d).
    m.dir = cqp.capacity[0] == 0   ? 0
            : cqp.capacity[1] == 0 ? 1
                                   : static_cast<int>(xr.Uniform(2));
    m.wr_id = 1000 + static_cast<uint64_t>(count + i);
    m.len = xr.Uniform(65);
    m.src_off = xr.Uniform(kPatternBytes - m.len + 1);
    m.dst_off = total[m.dir];
    total[m.dir] += m.len + 64;
    all += m.len;
    m.imm = true;
    m.imm_val = xr.Next32();
    m.post_at = xr.Range(0, 200) * kMicrosecond;
    msgs.push_back(m);
  }
  // Posting order = time order, stable.
  std::stable_sort(msgs.begin(), msgs.end(), [](const Msg& a, const Msg& b) {
    return a.post_at < b.post_at;
  });

  const auto& pat = Pattern();
  std::vector<uint8_t> dst[2];
  MemoryRegion src_mr[2], dst_mr[2];
  for (int e = 0; e < 2; ++e) {
    auto s = h.engine(e).RegisterMemory(const_cast<uint8_t*>(pat.data()),
                                        pat.size(), kAccessLocal);
    if (!s.ok()) return "register src failed";
    src_mr[e] = *s;
  }
  for (int d = 0; d < 2; ++d) {
    dst[d].assign(total[d] + 64, 0xA5);
    // Direction d writes into engine (1 - d).
    auto s = h.engine(1 - d).RegisterMemory(dst[d].data(), dst[d].size(),
                                            kAccessRemoteWrite);
    if (!s.ok()) return "register dst failed";
    dst_mr[d] = *s;
  }

  std::vector<size_t> order[2];  // post order per direction (imm checking)
  size_t next_post = 0;
  std::vector<size_t> backlog;
  auto post_due = [&]() -> std::string {
    while (next_post < msgs.size() && msgs[next_post].post_at <= h.now()) {
      backlog.push_back(next_post++);
    }
    size_t keep = 0;
    for (size_t k = 0; k < backlog.size(); ++k) {
      Msg& m = msgs[backlog[k]];
      // Keep per-direction FIFO: do not overtake a blocked message.
      bool blocked = false;
      for (size_t j = 0; j < keep; ++j) {
        if (msgs[backlog[j]].dir == m.dir) blocked = true;
      }
      absl::Status st = absl::ResourceExhaustedError("blocked");
      if (!blocked) {
        WriteRequest w;
        w.wr_id = m.wr_id;
        w.local_addr = pat.data() + m.src_off;
        w.length = m.len;
        w.lkey = src_mr[m.dir].lkey;
        w.remote_addr = dst_mr[m.dir].addr + m.dst_off;
        w.rkey = dst_mr[m.dir].rkey;
        w.has_immediate = m.imm;
        w.immediate = m.imm_val;
        st = h.engine(m.dir).PostWrite(h.now(), conn[m.dir], w);
      }
      if (st.ok()) {
        m.posted = true;
        order[m.dir].push_back(backlog[k]);
      } else if (st.code() == absl::StatusCode::kResourceExhausted) {
        backlog[keep++] = backlog[k];
      } else {
        return absl::StrCat("PostWrite failed: ", st.ToString());
      }
    }
    backlog.resize(keep);
    h.SetWakeup(next_post < msgs.size() ? msgs[next_post].post_at
                                        : kTimeInfinite);
    return "";
  };

  size_t done_writes = 0;
  size_t imm_seen[2] = {0, 0};
  size_t cq_pos[2] = {0, 0};
  std::string err;
  auto check_cq = [&]() {
    for (int e = 0; e < 2 && err.empty(); ++e) {
      auto& cq = h.completions(e);
      for (; cq_pos[e] < cq.size() && err.empty(); ++cq_pos[e]) {
        const Completion& c = cq[cq_pos[e]];
        if (c.type == CompletionType::kConnectionError) {
          err = absl::StrCat("engine ", e, " connection error status=",
                             static_cast<int>(c.status), " at t=", h.now());
        } else if (c.type == CompletionType::kWrite) {
          bool found = false;
          for (Msg& m : msgs) {
            if (m.wr_id == c.wr_id && m.dir == e) {
              found = true;
              if (c.status != absl::StatusCode::kOk) {
                err = absl::StrCat("write ", c.wr_id, " status ",
                                   static_cast<int>(c.status));
              } else if (++m.completions > 1) {
                err = absl::StrCat("write ", c.wr_id, " completed twice");
              } else if (!m.posted) {
                err = absl::StrCat("write ", c.wr_id, " completed unposted");
              }
              ++done_writes;
            }
          }
          if (!found) err = absl::StrCat("unknown wr_id ", c.wr_id);
        } else {  // kRecvImmediate at engine e: direction 1 - e
          const int d = 1 - e;
          // The next posted-with-immediate message of direction d.
          size_t k = imm_seen[d];
          size_t idx = SIZE_MAX;
          size_t seen = 0;
          for (size_t j : order[d]) {
            if (!msgs[j].imm) continue;
            if (seen++ == k) {
              idx = j;
              break;
            }
          }
          if (idx == SIZE_MAX) {
            err = absl::StrCat("unexpected immediate at engine ", e);
          } else {
            const Msg& m = msgs[idx];
            if (c.immediate != m.imm_val || c.byte_len != m.len ||
                c.remote_addr != dst_mr[d].addr + m.dst_off) {
              err = absl::StrCat("immediate out of order / wrong at engine ", e,
                                 " #", k, " got imm=", c.immediate, " want ",
                                 m.imm_val);
            }
            // In-order: the message must already be byte-complete.
            if (std::memcmp(dst[d].data() + m.dst_off, pat.data() + m.src_off,
                            m.len) != 0) {
              err = absl::StrCat("immediate ", k,
                                 " delivered before its "
                                 "bytes landed");
            }
          }
          ++imm_seen[d];
        }
      }
    }
  };

  const bool finished = h.RunUntil(
      [&]() {
        if (err.empty()) err = post_due();
        check_cq();
        if (!err.empty()) return true;
        // Keep stepping until every message posted and completed.
        return next_post == msgs.size() && backlog.empty() &&
               done_writes == msgs.size() &&
               imm_seen[0] + imm_seen[1] ==
                   static_cast<size_t>(
                       std::count_if(msgs.begin(), msgs.end(),
                                     [](const Msg& m) { return m.imm; }));
      },
      kVirtualBudget);
  if (!err.empty()) return err;
  if (h.livelock()) return "livelock (no time progress)";
  if (!finished) {
    return absl::StrCat(
        "did not finish within the virtual budget (", kVirtualBudget / kSecond,
        " s): writes done ", done_writes, "/", msgs.size(), " t=", h.now(),
        " next=", h.NextTime(),
        "\n  conn0: ", h.engine(0).connection_stats(c0)->ToString(),
        "\n  conn1: ", h.engine(1).connection_stats(c1)->ToString(),
        "\n  eng0: ", h.engine(0).stats().ToString(),
        "\n  eng1: ", h.engine(1).stats().ToString(),
        "\n  net: ", h.net().stats().ToString());
  }
  // Byte-exact destination memory, canaries intact.
  for (const Msg& m : msgs) {
    const uint8_t* d = dst[m.dir].data() + m.dst_off;
    if (std::memcmp(d, pat.data() + m.src_off, m.len) != 0) {
      size_t i = 0;
      while (d[i] == pat[m.src_off + i]) ++i;
      return absl::StrCat("message ", m.wr_id, " len ", m.len,
                          " differs at byte ", i);
    }
    for (int i = 0; i < 64; ++i) {
      if (d[m.len + i] != 0xA5) {
        return absl::StrCat("canary after message ", m.wr_id, " overwritten");
      }
    }
  }
  if (g_verbose) {
    std::printf("seed %" PRIu64 ": ok msgs=%zu bytes=%" PRIu64
                " t=%.3fms %s%s\n  net: %s\n  conn0: %s\n  eng0: %s\n"
                "  eng1: %s\n",
                seed, msgs.size(), all, h.now() / 1e9, plan.Describe().c_str(),
                (cqp.Describe() + gp.Describe()).c_str(),
                h.net().stats().ToString().c_str(),
                h.engine(0).connection_stats(c0)->ToString().c_str(),
                h.engine(0).stats().ToString().c_str(),
                h.engine(1).stats().ToString().c_str());
  }
  return "";
}

TEST(FaultSweep, SeedsCompleteExactlyOnceByteExactInOrder) {
  int failures = 0;
  for (uint64_t s = g_seed_begin; s < g_seed_end; ++s) {
    const std::string e = RunSeed(s);
    if (!e.empty()) {
      ++failures;
      Rng r(s * 0x9E3779B97F4A7C15ull + 12345);
      Rng r2(s * 0x9E3779B97F4A7C15ull + 12345);
      ADD_FAILURE()
          << "seed " << s << ": " << e << "\n  plan: " << MakePlan(r).Describe()
          << MakeCqPlan(s).Describe()
          << MakeGroupPlan(s, MakePlan(r2).paths).Describe()
          << "\n  replay: build/bin/prism_fault_sweep --seed=" << s
          << (std::strcmp(g_cc, "fixed") != 0 ? std::string(" --cc=") + g_cc
                                              : std::string())
          << (g_max_bytes_per_seed != (40u << 20)
                  ? " --max_mib=" + std::to_string(g_max_bytes_per_seed >> 20)
                  : std::string())
          << (g_mtu != 0 ? " --mtu=" + std::to_string(g_mtu) : std::string());
      if (failures >= 10) break;
    }
  }
  std::printf("fault sweep: seeds [%" PRIu64 ", %" PRIu64 "): %d failed\n",
              g_seed_begin, g_seed_end, failures);
}

}  // namespace
}  // namespace prism

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--seeds=", 8) == 0) {
      const char* colon = std::strchr(a + 8, ':');
      if (colon == nullptr) {
        std::fprintf(stderr, "--seeds=A:B\n");
        return 2;
      }
      prism::g_seed_begin = std::strtoull(a + 8, nullptr, 10);
      prism::g_seed_end = std::strtoull(colon + 1, nullptr, 10);
    } else if (std::strncmp(a, "--seed=", 7) == 0) {
      prism::g_seed_begin = std::strtoull(a + 7, nullptr, 10);
      prism::g_seed_end = prism::g_seed_begin + 1;
      prism::g_verbose = true;
    } else if (std::strncmp(a, "--max_mib=", 10) == 0) {
      prism::g_max_bytes_per_seed = std::strtoull(a + 10, nullptr, 10) << 20;
    } else if (std::strncmp(a, "--mtu=", 6) == 0) {
      prism::g_mtu = static_cast<uint32_t>(std::strtoul(a + 6, nullptr, 10));
    } else if (std::strncmp(a, "--cc=", 5) == 0) {
      prism::g_cc = a + 5;
    } else if (std::strcmp(a, "--verbose") == 0 || std::strcmp(a, "-v") == 0) {
      prism::g_verbose = true;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a);
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
