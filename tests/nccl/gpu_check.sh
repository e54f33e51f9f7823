#!/usr/bin/env bash
# GPU check of the NCCL plugin, for a machine with an NVIDIA GPU and driver
# (not run on the development machines, which have none).
#
#   tests/nccl/gpu_check.sh [build-dir]      (default: build-gpu)
#
# 1. Configures and builds the plugin with CUDA (CMake must find the CUDA
#    toolkit; it links the static CUDA runtime) and fails if it did not.
# 2. Runs the nccl ctest label: the GPU-support test then must see a device
#    (ptrSupport HOST|CUDA|DMABUF), and CUDA_VISIBLE_DEVICES=-1 must fall back.
# 3. Runs the mini-NCCL bandwidth driver with CUDA device buffers on both
#    sides (registered as NCCL_PTR_CUDA, staged through pinned host buffers),
#    every message verified byte by byte, on the Prism udp and the tcp data
#    paths, then the same with host buffers for comparison.
# Prints PASS/FAIL per step and exits nonzero if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-gpu}
fail=0
step() { echo "== $*"; }
ok() { echo "PASS: $*"; }
bad() { echo "FAIL: $*"; fail=1; }

command -v nvidia-smi >/dev/null && nvidia-smi -L
step "configure + build ($B)"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPRISM_BUILD_BENCH=OFF -DPRISM_NCCL_CUDA=ON >"$B.configure.log" 2>&1 ||
  { cat "$B.configure.log"; exit 1; }
grep -q "NCCL plugin CUDA=ON" "$B.configure.log" ||
  { grep "NCCL plugin CUDA" "$B.configure.log"; bad "CUDA toolkit not found"; exit 1; }
cmake --build "$B" -j "$(nproc)" --target prism_nccl_tests nccl_plugin_perf ||
  { bad "build"; exit 1; }
ok "built with CUDA"

step "ctest -L nccl"
if (cd "$B" && ctest -L nccl --output-on-failure); then ok "ctest -L nccl"; else bad "ctest -L nccl"; fi

step "GPU support line"
out=$(cd "$B" && NCCL_DEBUG=INFO ./bin/nccl_plugin_test \
        --gtest_filter=NcclAbi.GpuSupportMatchesItsLogLine 2>&1)
echo "$out" | grep -E "ptrSupport|CUDA" | head -3
if echo "$out" | grep -q "ptrSupport HOST|CUDA|DMABUF"; then ok "device found"; else bad "no usable device seen by the plugin"; fi

export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PRISM_ADDRS=127.0.0.1 PRISM_PATHS=64 PRISM_LINK_MTU=9000 PRISM_UDP_TX_MODE=sockets
for dp in udp tcp; do
  for mem in cuda host; do
    step "driver: $dp data path, $mem buffers, verified"
    cuda=0; [ "$mem" = cuda ] && cuda=1
    if PRISM_DATAPATH=$dp PRISM_NCCL_PERF_VERIFY=1 PRISM_NCCL_PERF_CUDA=$cuda \
         timeout 300 "$B/bin/nccl_plugin_perf" 1048576 400 32; then
      ok "$dp/$mem"
    else
      bad "$dp/$mem"
    fi
  done
done
[ $fail -eq 0 ] && echo "gpu_check: ALL PASS" || echo "gpu_check: FAILED"
exit $fail
