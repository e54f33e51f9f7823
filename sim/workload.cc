#include "sim/workload.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace prism::sim {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError("workload: " + what);
}

struct Ctx {
  uint32_t hosts;
  uint32_t mtu;
  Rng* rng;
  std::vector<Flow>* flows;
};

// A message size `m` checked and rounded up to whole packets (so payload
// offsets stay MTU-aligned), at most kDefaultMessageBytes.
absl::StatusOr<uint32_t> WholePacketMessages(int64_t m, uint32_t mtu) {
  if (m <= 0 || m > kDefaultMessageBytes) {
    return Bad(absl::StrFormat("message_bytes must be in 1..%d",
                               kDefaultMessageBytes));
  }
  uint64_t r = (static_cast<uint64_t>(m) + mtu - 1) / mtu * mtu;
  return static_cast<uint32_t>(std::min<uint64_t>(r, kDefaultMessageBytes));
}

absl::StatusOr<uint32_t> MessageBytes(const json::Value& v, uint32_t mtu) {
  absl::StatusOr<int64_t> m = v.GetInt("message_bytes", kDefaultMessageBytes);
  if (!m.ok()) return m.status();
  return WholePacketMessages(*m, mtu);
}

// `src` and `dst` as read (int64_t): a host number is range-checked before
// it is narrowed, so 2^32 + 1 is out of range, not host 1.
absl::Status AddFlow(Ctx& c, int64_t src, int64_t dst, int64_t bytes,
                     Time start, uint32_t msg, const std::string& group) {
  if (src < 0 || dst < 0 || src >= c.hosts || dst >= c.hosts) {
    return Bad(absl::StrFormat("host out of range (%d -> %d, %d hosts)", src,
                               dst, c.hosts));
  }
  if (src == dst)
    return Bad(absl::StrFormat("flow %d -> %d to itself", src, dst));
  if (bytes <= 0 || bytes > (int64_t{1} << 40)) {
    return Bad("bytes must be in 1..2^40");
  }
  if (start < 0) return Bad("start must be >= 0");
  Flow f;
  f.id = static_cast<uint32_t>(c.flows->size());
  f.src = static_cast<uint32_t>(src);
  f.dst = static_cast<uint32_t>(dst);
  f.bytes = static_cast<uint64_t>(bytes);
  f.start = start;
  f.message_bytes =
      static_cast<uint32_t>(std::min<uint64_t>(msg, f.bytes + c.mtu));
  f.message_bytes = (f.message_bytes + c.mtu - 1) / c.mtu * c.mtu;
  f.group = group;
  c.flows->push_back(std::move(f));
  return absl::OkStatus();
}

// The `trace` CSV in `text` (ParseTrace's contract), `where` naming it.
absl::Status AddTraceFlows(Ctx& c, absl::string_view text,
                           const std::string& where, uint32_t msg) {
  int lineno = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++lineno;
    absl::string_view sv = absl::StripAsciiWhitespace(line);
    if (sv.empty() || sv[0] == '#') continue;
    std::vector<absl::string_view> f = absl::StrSplit(sv, ',');
    double st_us;
    int64_t s, d, b;
    if (f.size() != 4 ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(f[0]), &st_us) ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(f[1]), &s) ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(f[2]), &d) ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(f[3]), &b) || s < 0 ||
        d < 0 || !(st_us >= 0) || st_us > kMaxScenarioUs) {
      return Bad(absl::StrFormat("%s:%d: expected start_us,src,dst,bytes",
                                 where, lineno));
    }
    absl::Status stt = AddFlow(
        c, s, d, b, static_cast<Time>(st_us * kMicrosecond), msg, "trace");
    if (!stt.ok()) {  // (AddFlow's message, its "workload: " once)
      return Bad(
          absl::StrFormat("%s:%d: %s", where, lineno,
                          absl::StripPrefix(stt.message(), "workload: ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Time> StartOf(const json::Value& v) {
  absl::StatusOr<double> s = v.GetDouble("start_us", 0);
  if (!s.ok()) return s.status();
  if (!(*s >= 0) || *s > kMaxScenarioUs)
    return Bad(absl::StrFormat("start_us = %g must be in [0, 1e9]", *s));
  return static_cast<Time>(*s * kMicrosecond);
}

// Keys every workload type takes; each type adds its own (One).
constexpr std::string_view kWorkloadKeys[] = {
    "type", "message_bytes", "start_us", "bytes", "hosts", "comment"};

absl::Status One(Ctx& c, const json::Value& v, const std::string& base_dir) {
  if (!v.is_object()) return Bad("each workload entry must be an object");
  absl::StatusOr<std::string> type = v.GetString("type", "");
  if (!type.ok()) return type.status();
  // The type's own keys besides kWorkloadKeys: a misspelt key would
  // silently run another experiment.
  const auto keys = [&](absl::Span<const std::string_view> own) {
    return v.CheckKeys(kWorkloadKeys, own, "workload: " + *type);
  };
  absl::StatusOr<uint32_t> msg = MessageBytes(v, c.mtu);
  if (!msg.ok()) return msg.status();
  absl::StatusOr<Time> start = StartOf(v);
  if (!start.ok()) return start.status();
  absl::StatusOr<int64_t> bytes = v.GetInt("bytes", 1 << 20);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<int64_t> nh = v.GetInt("hosts", c.hosts);
  if (!nh.ok()) return nh.status();
  if (*nh < 2 || *nh > c.hosts) return Bad("hosts must be in 2..num_hosts");
  const uint32_t n = static_cast<uint32_t>(*nh);

  if (*type == "bulk") {
    absl::Status k = keys({"flows", "src", "dst"});
    if (!k.ok()) return k;
    const json::Value* fl = v.Find("flows");
    if (fl == nullptr) {
      absl::StatusOr<int64_t> s = v.GetInt("src", 0), d = v.GetInt("dst", 1);
      if (!s.ok()) return s.status();
      if (!d.ok()) return d.status();
      return AddFlow(c, *s, *d, *bytes, *start, *msg, "bulk");
    }
    if (!fl->is_array()) return Bad("bulk.flows must be an array");
    for (const json::Value& f : fl->items()) {
      if (!f.is_object()) return Bad("bulk.flows entries must be objects");
      absl::Status fk =
          f.CheckKeys({"src", "dst", "bytes", "start_us", "group", "comment"},
                      "workload: bulk.flows entry");
      if (!fk.ok()) return fk;
      absl::StatusOr<int64_t> s = f.GetInt("src", -1), d = f.GetInt("dst", -1),
                              b = f.GetInt("bytes", *bytes);
      absl::StatusOr<Time> st = StartOf(f);
      if (!s.ok()) return s.status();
      if (!d.ok()) return d.status();
      if (!b.ok()) return b.status();
      if (!st.ok()) return st.status();
      if (*s < 0 || *d < 0) return Bad("bulk flow needs src and dst");
      absl::StatusOr<std::string> g = f.GetString("group", "bulk");
      if (!g.ok()) return g.status();
      absl::Status st2 = AddFlow(c, *s, *d, *b, *st, *msg, *g);
      if (!st2.ok()) return st2;
    }
    return absl::OkStatus();
  }
  if (*type == "permutation") {
    absl::Status k = keys({"shift"});
    if (!k.ok()) return k;
    absl::StatusOr<int64_t> shift = v.GetInt("shift", 0);
    if (!shift.ok()) return shift.status();
    std::vector<uint32_t> dst(n);
    if (*shift != 0) {
      const int64_t s = ((*shift % n) + n) % n;
      if (s == 0)
        return Bad("permutation shift must not be a multiple of hosts");
      for (uint32_t i = 0; i < n; ++i)
        dst[i] = static_cast<uint32_t>((i + s) % n);
    } else {
      // Random derangement: Sattolo's algorithm gives a single n-cycle.
      for (uint32_t i = 0; i < n; ++i) dst[i] = i;
      for (uint32_t i = n - 1; i > 0; --i) {
        const uint32_t j = static_cast<uint32_t>(c.rng->Uniform(i));
        std::swap(dst[i], dst[j]);
      }
    }
    for (uint32_t i = 0; i < n; ++i) {
      absl::Status st =
          AddFlow(c, i, dst[i], *bytes, *start, *msg, "permutation");
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  if (*type == "all_to_all") {
    absl::Status k = keys({"group_size"});
    if (!k.ok()) return k;
    // Hosts [0, n) in groups of group_size (default: one group); every host
    // sends `bytes` to every other host of its group.
    absl::StatusOr<int64_t> gs = v.GetInt("group_size", n);
    if (!gs.ok()) return gs.status();
    if (*gs < 2 || *gs > n || n % *gs != 0) {
      return Bad("all_to_all group_size must be in 2..hosts and divide hosts");
    }
    // Groups are strided (host i is in group i mod (n / group_size)) so a
    // group spans T0s, as expert-parallel groups span nodes.
    const uint32_t g = static_cast<uint32_t>(*gs);
    const uint32_t stride = n / g;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t pos = i / stride, grp = i % stride;
      for (uint32_t k = 1; k < g; ++k) {
        // Each source starts with a different destination (pos + k).
        const uint32_t dst = ((pos + k) % g) * stride + grp;
        absl::Status st =
            AddFlow(c, i, dst, *bytes, *start, *msg, "all_to_all");
        if (!st.ok()) return st;
      }
    }
    return absl::OkStatus();
  }
  if (*type == "ring_allreduce") {
    absl::Status k = keys({"steps"});
    if (!k.ok()) return k;
    absl::StatusOr<int64_t> steps = v.GetInt("steps", 2 * (n - 1));
    if (!steps.ok()) return steps.status();
    if (*steps < 1 || *steps > 4096) return Bad("steps must be in 1..4096");
    const int64_t chunk = std::max<int64_t>(1, *bytes / n);
    const uint32_t base = static_cast<uint32_t>(c.flows->size());
    for (int64_t k = 0; k < *steps; ++k) {
      for (uint32_t i = 0; i < n; ++i) {
        absl::Status st = AddFlow(c, i, (i + 1) % n, chunk, *start, *msg,
                                  absl::StrFormat("step%d", k));
        if (!st.ok()) return st;
        Flow& f = c.flows->back();
        f.step = static_cast<int32_t>(k);
        if (k > 0) {
          const uint32_t prev = base + static_cast<uint32_t>((k - 1) * n);
          f.after.push_back(prev + i);
          f.after.push_back(prev + (i + n - 1) % n);
        }
      }
    }
    return absl::OkStatus();
  }
  if (*type == "incast") {
    absl::Status k = keys({"dst", "senders", "sender_list", "victim"});
    if (!k.ok()) return k;
    absl::StatusOr<int64_t> dst = v.GetInt("dst", 0);
    absl::StatusOr<int64_t> ns = v.GetInt("senders", 7);
    if (!dst.ok()) return dst.status();
    if (!ns.ok()) return ns.status();
    std::vector<uint32_t> senders;
    if (const json::Value* sl = v.Find("sender_list")) {
      // Whole numbers only: a string or 2^32 + 1 was read as host 0 or 1.
      if (!sl->is_array() || sl->items().empty())
        return Bad("incast sender_list must be a non-empty array of hosts");
      for (const json::Value& s : sl->items()) {
        const std::optional<int64_t> h = s.as_whole();
        if (!h || *h < 0 || *h >= n) {
          return Bad("incast sender_list entries must be hosts in 0..hosts-1");
        }
        senders.push_back(static_cast<uint32_t>(*h));
      }
    } else {
      if (*ns < 1 || *ns >= n)
        return Bad("incast senders must be in 1..hosts-1");
      // Senders spread over the fabric: hosts n-1, n-2, ...
      for (int64_t s = 0; s < *ns; ++s) {
        senders.push_back(static_cast<uint32_t>(n - 1 - s));
      }
    }
    for (uint32_t s : senders) {
      absl::Status st = AddFlow(c, s, *dst, *bytes, *start, *msg, "incast");
      if (!st.ok()) return st;
    }
    if (const json::Value* vf = v.Find("victim")) {
      if (!vf->is_object()) return Bad("incast.victim must be an object");
      absl::Status vk = vf->CheckKeys({"src", "dst", "bytes", "comment"},
                                      "workload: incast.victim");
      if (!vk.ok()) return vk;
      absl::StatusOr<int64_t> s = vf->GetInt("src", -1),
                              d = vf->GetInt("dst", -1),
                              b = vf->GetInt("bytes", *bytes);
      if (!s.ok()) return s.status();
      if (!d.ok()) return d.status();
      if (!b.ok()) return b.status();
      if (*s < 0 || *d < 0) return Bad("victim needs src and dst");
      return AddFlow(c, *s, *d, *b, *start, *msg, "victim");
    }
    return absl::OkStatus();
  }
  if (*type == "trace") {
    absl::Status k = keys({"file"});
    if (!k.ok()) return k;
    absl::StatusOr<std::string> file = v.GetString("file", "");
    if (!file.ok()) return file.status();
    if (file->empty()) return Bad("trace needs a file");
    std::string path = *file;
    if (path[0] != '/' && !base_dir.empty()) path = base_dir + "/" + path;
    // A device or a pipe (/dev/zero, a FIFO) would be read without end.
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      return Bad("trace file " + path +
                 (std::filesystem::exists(path, ec) ? " is not a regular file"
                                                    : " does not exist"));
    std::ifstream in(path, std::ios::binary);
    if (!in) return Bad("cannot open trace file " + path);
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return Bad("cannot read trace file " + path);
    return AddTraceFlows(c, text.str(), path, *msg);
  }
  return Bad("unknown workload type '" + *type + "'");
}

}  // namespace

absl::StatusOr<std::vector<Flow>> BuildWorkload(const json::Value& spec,
                                                uint32_t num_hosts,
                                                uint32_t mtu, Rng& rng,
                                                const std::string& base_dir) {
  std::vector<Flow> flows;
  if (mtu == 0) return Bad("mtu must be > 0");
  Ctx c{num_hosts, mtu, &rng, &flows};
  if (spec.is_array()) {
    for (const json::Value& v : spec.items()) {
      absl::Status st = One(c, v, base_dir);
      if (!st.ok()) return st;
    }
  } else {
    absl::Status st = One(c, spec, base_dir);
    if (!st.ok()) return st;
  }
  if (flows.empty()) return Bad("no flows");
  return flows;
}

absl::StatusOr<std::vector<Flow>> ParseTrace(absl::string_view text,
                                             const std::string& where,
                                             uint32_t num_hosts, uint32_t mtu,
                                             uint32_t message_bytes) {
  if (mtu == 0) return Bad("mtu must be > 0");
  absl::StatusOr<uint32_t> msg = WholePacketMessages(message_bytes, mtu);
  if (!msg.ok()) return msg.status();
  std::vector<Flow> flows;
  Ctx c{num_hosts, mtu, nullptr, &flows};
  absl::Status st = AddTraceFlows(c, text, where, *msg);
  if (!st.ok()) return st;
  return flows;
}

}  // namespace prism::sim
