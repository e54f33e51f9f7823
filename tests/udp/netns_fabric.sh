#!/bin/bash
# netns_fabric.sh PLANES MTU COMMAND...
# Builds two network namespaces joined by PLANES veth pairs (one per NIC
# plane), runs COMMAND with the fabric described in environment variables,
# and deletes the namespaces on exit (trap), whatever happens.
#   plane p: <A>:v<p>a fd77:<p>::1/64  <-->  <B>:v<p>b fd77:<p>::2/64
# Exports PRISM_NS_A, PRISM_NS_B, PRISM_PLANES, PRISM_ADDR_A/B and
# PRISM_DEV_A/B (comma lists, one per plane).
# Exits 77 (ctest: skipped) with a message when not root or netns is missing.
set -u
PLANES=${1:?planes}; MTU=${2:?mtu}; shift 2
RUN=pu$$$(date +%N | cut -c1-5)
A=${RUN}a B=${RUN}b
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: kernel-fabric tests need root (network namespaces, veth)"; exit 77
fi
if ! ip netns add "$A" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here"; exit 77
fi
cleanup() { ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$B" || exit 1
for ns in "$A" "$B"; do
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.accept_dad=0 \
    net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.keep_addr_on_down=1 \
    net.ipv6.conf.default.keep_addr_on_down=1 \
    net.ipv6.conf.default.router_solicitations=0 >/dev/null
done
AA= AB= DA= DB=
for ((p = 0; p < PLANES; p++)); do
  ip -n "$A" link add v${p}a mtu "$MTU" type veth peer name v${p}b netns "$B" mtu "$MTU" || exit 1
  ip -n "$A" -6 addr add fd77:$p::1/64 dev v${p}a nodad
  ip -n "$B" -6 addr add fd77:$p::2/64 dev v${p}b nodad
  ip -n "$A" link set v${p}a up
  ip -n "$B" link set v${p}b up
  AA+=${AA:+,}fd77:$p::1; AB+=${AB:+,}fd77:$p::2
  DA+=${DA:+,}v${p}a; DB+=${DB:+,}v${p}b
done
# Wait until the addresses are usable (no DAD, but the link must be up).
for ((i = 0; i < 50; i++)); do
  ip netns exec "$A" ping -6 -c1 -W1 fd77:0::2 >/dev/null 2>&1 && break
  sleep 0.1
done
export PRISM_NS_A=$A PRISM_NS_B=$B PRISM_PLANES=$PLANES
export PRISM_ADDR_A=$AA PRISM_ADDR_B=$AB PRISM_DEV_A=$DA PRISM_DEV_B=$DB
"$@"
