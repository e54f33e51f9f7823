// A user of the installed library: two engines, one WRITE, checked.
#include <cstdio>
#include <cstring>
#include <vector>

#include "prism/engine.h"

int main() {
  prism::Engine a(prism::EngineOptions{}), b(prism::EngineOptions{});
  std::vector<uint8_t> src(100000), dst(100000, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  auto ma = a.RegisterMemory(src.data(), src.size(), prism::kAccessLocal);
  auto mb = b.RegisterMemory(dst.data(), dst.size(), prism::kAccessRemoteWrite);
  if (!ma.ok() || !mb.ok()) return 1;
  prism::ConnectionOptions co;
  co.num_paths = 16;
  auto ca = a.CreateConnection(co);
  auto cb = b.CreateConnection(co);
  if (!ca.ok() || !cb.ok()) return 2;
  if (!a.Connect(*ca, b.LocalInfo(*cb)).ok()) return 3;
  if (!b.Connect(*cb, a.LocalInfo(*ca)).ok()) return 3;
  prism::WriteRequest w;
  w.wr_id = 7;
  w.local_addr = src.data();
  w.length = src.size();
  w.lkey = ma->lkey;
  w.remote_addr = mb->addr;
  w.rkey = mb->rkey;
  prism::Time now = 0;
  if (!a.PostWrite(now, *ca, w).ok()) return 4;
  prism::TxPacket tx[32];
  prism::Completion c[8];
  bool done = false;
  for (int iter = 0; iter < 100000 && !done; ++iter) {
    now += prism::kMicrosecond;
    for (prism::Engine* e : {&a, &b}) {
      prism::Engine* peer = e == &a ? &b : &a;
      size_t n = e->PollTransmit(now, tx, 32);
      std::vector<std::vector<uint8_t>> bufs(n);
      std::vector<prism::RxPacket> rx(n);
      for (size_t i = 0; i < n; ++i) {
        bufs[i].assign(tx[i].header, tx[i].header + tx[i].header_len);
        if (tx[i].payload_len)
          bufs[i].insert(bufs[i].end(), tx[i].payload,
                         tx[i].payload + tx[i].payload_len);
        rx[i].data = bufs[i].data();
        rx[i].len = static_cast<uint32_t>(bufs[i].size());
      }
      peer->OnReceive(now, rx.data(), n);
    }
    size_t k = a.PollCompletions(c, 8);
    for (size_t i = 0; i < k; ++i)
      if (c[i].type == prism::CompletionType::kWrite && c[i].wr_id == 7)
        done = true;
  }
  if (!done || std::memcmp(src.data(), dst.data(), src.size()) != 0) {
    std::puts("consumer: transfer FAILED");
    return 5;
  }
  std::puts(
      "consumer: 100000 bytes written and verified through installed Prism");
  return 0;
}
