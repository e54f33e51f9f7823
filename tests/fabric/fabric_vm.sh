#!/bin/bash
# fabric_vm.sh MANIFEST OUTDIR - the kernel SRv6 fabric tests (fabric_srv6,
# udp_srv6_fabric_test) inside the soft-RoCE rig's QEMU VM (tests/rxe), on
# Debian's own kernel, for hosts whose kernel has no seg6local (SRv6 End,
# next-csid) or no ifb: there the native tests skip. Where the host kernel
# has both, the native tests run and this one skips (exit 77), as it does
# when not root or when the VM cannot start (no qemu / kernel and apt cannot
# provide them). MANIFEST: written by CMake (tests/udp/CMakeLists.txt).
set -u
MANIFEST=${1:?usage: fabric_vm.sh MANIFEST OUTDIR}
OUT=${2:?usage: fabric_vm.sh MANIFEST OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "kernel fabric tests need root (network namespaces)"
probe=prism-vmprobe-$$
ip netns add $probe 2>/dev/null || skip "network namespaces unavailable"
native=0
if ip netns exec $probe ip link add sid0 type ifb 2>/dev/null; then
  ip netns exec $probe ip link set sid0 up
  ip netns exec $probe ip -6 route add fcbb:bbbb:1::/48 encap seg6local action End \
    flavors next-csid lblen 32 nflen 16 dev sid0 2>/dev/null && native=1
fi
ip netns del $probe
[[ $native == 1 ]] && skip "this kernel has seg6local next-csid and ifb: fabric_srv6 and udp_srv6_fabric_test run natively"
echo "host kernel $(uname -r) lacks seg6local next-csid or ifb: running the SRv6 fabric tests in a VM"
RXE_TIMEOUT=${RXE_TIMEOUT:-1100} exec bash "$HERE/../rxe/run-rxe-vm.sh" "$MANIFEST" "$OUT"
