#!/usr/bin/env bash
# Installs the Debian packages Prism needs, only those missing. Idempotent.
# Usage: .ci/install-deps.sh            (build + test dependencies)
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config
  clang llvm libclang-rt-dev          # libFuzzer targets
  clang-format git                    # tests/style (make format)
  libabsl-dev libgtest-dev libgmock-dev googletest libbenchmark-dev
  libibverbs-dev rdma-core ibverbs-utils perftest ibverbs-providers rdmacm-utils qemu-system-x86 busybox-static kmod cpio  # verbs datapath + soft-RoCE VM rig (tests/rxe)
  libdpdk-dev                         # DPDK datapath (optional)
  iproute2 ethtool tshark iperf3      # kernel SRv6 fabric tests
  python3 python3-matplotlib          # plots
)
missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# tshark asks whether non-root users may capture; answer no, non-interactively.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections || true
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
