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
source "$HERE/fabric.sh"
fabric_probe
rc=$?
if [[ $rc == 0 ]]; then
  echo "SKIPPED: this kernel has seg6local next-csid and ifb: fabric_srv6 and udp_srv6_fabric_test run natively"
  exit 77
fi
[[ $rc == 1 || $rc == 4 ]] && { echo "SKIPPED: $(fabric_probe_reason $rc)"; exit 77; }
echo "host kernel $(uname -r): $(fabric_probe_reason $rc): running the SRv6 fabric tests in a VM"
RXE_TIMEOUT=${RXE_TIMEOUT:-1100} exec bash "$HERE/../rxe/run-rxe-vm.sh" "$MANIFEST" "$OUT"
