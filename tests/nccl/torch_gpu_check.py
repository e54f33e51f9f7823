"""Real NCCL + PyTorch over the Prism plugin on one GPU (gpu_check.sh step 6).

Run by `tests/nccl/gpu_check.sh run` on a GPU machine that has PyTorch (it
is skipped where `python3 -c "import torch"` fails), as

    python3 -m torch.distributed.run --standalone --nproc-per-node=2 \
        tests/nccl/torch_gpu_check.py

with NCCL_NET_PLUGIN=prism, NCCL_NET=Prism (NCCL fails instead of falling
back to its socket transport) and the Prism variables set by the script.

Two ranks share the one GPU. Each rank claims a host of its own
(NCCL_HOSTID), so NCCL treats them as two nodes: no P2P, SHM or NVLS
between them, every byte crosses the network plugin, which is what a
two-node torchrun job does. Checks, each exact (integer-valued data, so
sums are exact in float32 and bfloat16 is not used):

  1. all_reduce of 1 element .. 64 MiB (sum of rank-dependent integers);
  2. broadcast and all_gather of 4 MiB;
  3. send/recv of 1 B .. 32 MiB of random bytes (uint8), compared with the
     same bytes regenerated from the seed on the receiver;
  4. 20 DDP steps of a 4096x4096 Linear (64 MiB of gradients per step),
     then every parameter equal on both ranks (gathered and compared);
  5. all_reduce bus bandwidth of 64 MiB (printed, not judged).

Rank 0 prints `torch_gpu_check: ALL PASS` at the end; any mismatch raises
(non-zero exit of torchrun).

For debugging: TORCH_GPU_CHECK_ONLY=p2p,ddp (a comma list of allreduce,
collectives, p2p, ddp, bw) runs only those checks; TORCH_GPU_CHECK_DUMP_S=N
dumps, N seconds in, this rank's Python stacks and (with
NCCL_PROXY_DUMP_SIGNAL=10) NCCL's proxy state.
"""

import faulthandler
import os
import signal
import sys
import threading
import time

rank = int(os.environ["RANK"])
os.environ["NCCL_HOSTID"] = f"prism-gpu-check-host{rank}"

import torch  # noqa: E402  (NCCL reads NCCL_HOSTID at init; set it first)
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def log(msg):
    print(f"[rank {rank}] {msg}", flush=True)


ONLY = set(filter(None, os.environ.get("TORCH_GPU_CHECK_ONLY", "").split(",")))


def want(step):
    return not ONLY or step in ONLY


def arm_dump():
    secs = float(os.environ.get("TORCH_GPU_CHECK_DUMP_S", "0"))
    if secs <= 0:
        return
    faulthandler.dump_traceback_later(secs, exit=False)
    if os.environ.get("NCCL_PROXY_DUMP_SIGNAL") == "10":
        t = threading.Timer(secs, lambda: os.kill(os.getpid(), signal.SIGUSR1))
        t.daemon = True
        t.start()


def main():
    arm_dump()
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group("nccl", device_id=dev)
    world = dist.get_world_size()
    assert world == 2, world
    if rank == 0:
        log(f"torch {torch.__version__}, nccl {torch.cuda.nccl.version()}, "
            f"{torch.cuda.get_device_name(0)}")

    if want("allreduce"):
        all_reduce(dev)
    if want("collectives"):
        collectives(dev, world)
    if want("p2p"):
        p2p(dev)
    if want("ddp"):
        ddp(dev, world)
    if want("bw"):
        bandwidth(dev, world)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("torch_gpu_check: ALL PASS", flush=True)


def all_reduce(dev):
    # 1. all_reduce, exact sums.
    for n in [1, 7, 1000, 1 << 16, (1 << 20) + 3, 1 << 24]:
        x = torch.arange(n, device=dev, dtype=torch.float32) % 1024 + rank
        dist.all_reduce(x)
        expect = (torch.arange(n, device=dev, dtype=torch.float32) % 1024) * 2 + 1
        if not torch.equal(x, expect):
            raise RuntimeError(f"all_reduce of {n} floats differs")
    log("PASS all_reduce 1 .. 16M floats")


def collectives(dev, world):
    # 2. broadcast and all_gather.
    n = 1 << 20
    b = torch.full((n,), float(rank + 5), device=dev)
    dist.broadcast(b, src=1)
    if not torch.equal(b, torch.full((n,), 6.0, device=dev)):
        raise RuntimeError("broadcast differs")
    parts = [torch.empty(n, device=dev) for _ in range(world)]
    dist.all_gather(parts, torch.full((n,), float(rank * 3 + 1), device=dev))
    for r, p in enumerate(parts):
        if not torch.equal(p, torch.full((n,), float(r * 3 + 1), device=dev)):
            raise RuntimeError(f"all_gather part {r} differs")
    log("PASS broadcast, all_gather")


def p2p(dev):
    # 3. send/recv of random bytes, both directions.
    for i, size in enumerate([1, 4095, 65537, 1 << 20, (1 << 25) + 11]):
        g = torch.Generator(device=dev).manual_seed(1000 + i)
        data = torch.randint(0, 256, (size,), dtype=torch.uint8, device=dev,
                             generator=g)
        src = i % 2
        if rank == src:
            dist.send(data, dst=1 - src)
        else:
            got = torch.zeros(size, dtype=torch.uint8, device=dev)
            dist.recv(got, src=src)
            if not torch.equal(got, data):
                bad = (got != data).nonzero()[:4].flatten().tolist()
                raise RuntimeError(f"send/recv of {size} B differs at {bad}")
    log("PASS send/recv 1 B .. 32 MiB, byte-exact")


def ddp(dev, world):
    # 4. DDP training steps; parameters must stay identical.
    torch.manual_seed(1234 + rank)  # different data per rank
    model = DDP(torch.nn.Linear(4096, 4096).to(dev), device_ids=[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(20):
        opt.zero_grad()
        model(torch.randn(64, 4096, device=dev)).square().mean().backward()
        opt.step()
    for name, p in model.module.named_parameters():
        parts = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(parts, p.detach().contiguous())
        if not torch.equal(parts[0], parts[1]):
            raise RuntimeError(f"DDP parameter {name} differs between ranks")
    log("PASS 20 DDP steps, parameters identical")


def bandwidth(dev, world):
    # 5. all_reduce bandwidth (information only).
    x = torch.ones(1 << 24, device=dev)
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    iters = 10
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / iters
    nbytes = x.numel() * 4
    busbw = nbytes * 2 * (world - 1) / world / dt / 1e9
    if rank == 0:
        log(f"all_reduce 64 MiB: {dt * 1e3:.2f} ms, bus bandwidth "
            f"{busbw:.2f} GB/s")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # report, then fail the launcher
        log(f"FAIL: {type(e).__name__}: {e}")
        sys.exit(1)
