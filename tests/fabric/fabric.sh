#!/bin/bash
# Prism's kernel SRv6 fabric builder (a library: source it).
#
# Turns a topology JSON (routing/topology.h, docs/routing.md) into Linux
# network namespaces: one per host and switch, one veth pair per link,
# switches forwarding by static routes and the kernel's SRv6 behaviours
#   classic SIDs:  fc00:P:U::/128  encap seg6local action End
#   uSIDs (F3216): fcbb:bbbb:U::/48 encap seg6local action End
#                                  flavors next-csid lblen 32 nflen 16
# anchored on an ifb device (sid0; routes via lo turn into reject routes),
# hosts with seg6_enabled and their per-plane addresses on lo. The plan
# (nodes, links, routes, SIDs, addresses) comes from Prism itself:
# `prism_fabric_tool plan TOPO.json`.
#
#   fabric_probe / fabric_require  can this kernel build it (0) or not (1-4) /
#                                  exit 77 unless it can
#   fabric_init TOOL TOPO PREFIX   parse the plan; PREFIX names every netns
#   fabric_up                      build it (calls fabric_down on failure)
#   fabric_down                    delete every namespace this run made
#   fabric_link_down ID / fabric_link_up ID        both ends of link ID
#   fabric_switch_down NAME / fabric_switch_up NAME
#   fabric_routes NODE             (re)install NODE's static routes + SIDs
#   fabric_counters                "DEV TX_PACKETS" for every link end
#   fx NODE CMD...                 run CMD in NODE's namespace
# Link ID's ends are devices a<ID> (in its a-node) and b<ID> (b-node),
# addressed fd10:0:0:<ID>::1 and ::2, with permanent neighbours so that no
# ND traffic disturbs per-link counters.
# Pitfalls (from /work/shared/rigs/srv6-fabric): `ip link set X down`
# deletes routes and neighbours through X (re-added on up); MLD reports run
# for ~1 s after links come up (fabric_wait_quiet); receivers need
# seg6_enabled even at segments-left 0.

# fabric_probe: whether this kernel (and iproute2) can build the fabric;
# returns 0 yes, 1 no network namespaces, 2 no ifb, 3 no seg6local End
# next-csid, 4 not root. fabric_require: exit 77 (ctest: skipped), saying
# why, unless it can.
fabric_probe() {
  local probe=prism-probe-$$ rc=0
  [[ $(id -u) == 0 ]] || return 4
  ip netns add $probe 2>/dev/null || return 1
  if ! ip -n $probe link add sid0 type ifb 2>/dev/null; then
    rc=2
  else
    ip -n $probe link set sid0 up
    ip -n $probe -6 route add fcbb:bbbb:1::/48 encap seg6local action End \
      flavors next-csid lblen 32 nflen 16 dev sid0 2>/dev/null || rc=3
  fi
  ip netns del $probe
  return $rc
}
fabric_probe_reason() {  # the words for fabric_probe's status $1
  case $1 in
    1) echo "network namespaces unavailable" ;;
    2) echo "no ifb device support" ;;
    3) echo "kernel/iproute2 without seg6local next-csid" ;;
    4) echo "kernel fabric tests need root (network namespaces)" ;;
  esac
}
fabric_require() {
  fabric_probe
  local rc=$?
  [[ $rc == 0 ]] && return 0
  echo "SKIPPED: $(fabric_probe_reason $rc)"
  exit 77
}

FAB_TOOL= FAB_TOPO= FAB_P= FAB_PLAN=
FAB_NODES=() FAB_LINK_IDS=()
declare -A FAB_KIND FAB_LA FAB_LB FAB_MADE

# `ip` commands run as `ip -n` (setns alone: no second exec, no /sys
# remount; several times cheaper in a VM under emulation, tests/rxe).
fx() {
  local n=$1; shift
  if [[ $1 == ip ]]; then shift; ip -n "$FAB_P$n" "$@"; else ip netns exec "$FAB_P$n" "$@"; fi
}

fabric_init() {
  FAB_TOOL=$1 FAB_TOPO=$2 FAB_P=$3
  FAB_PLAN=$(mktemp /tmp/prism-fabric-plan.XXXXXX) || return 1
  "$FAB_TOOL" plan "$FAB_TOPO" > "$FAB_PLAN" || return 1
  local kw a b c d
  while read -r kw a b c d; do
    case $kw in
      node) FAB_NODES+=("$a"); FAB_KIND[$a]=$b ;;
      link) FAB_LINK_IDS+=("$a"); FAB_LA[$a]=$b; FAB_LB[$a]=$c ;;
    esac
  done < "$FAB_PLAN"
}

fab_is_host() { [[ ${FAB_KIND[$1]} == host ]]; }

# Device of link $2 in node $1.
fab_dev() { [[ ${FAB_LA[$2]} == "$1" ]] && echo "a$2" || echo "b$2"; }

fab_mac() {  # MAC address of device $2 in node $1
  ip -n "$FAB_P$1" -br link show dev "$2" | awk '{print $3}'
}

fab_neigh() {  # permanent neighbours on both ends of link $1
  local l=$1 a=${FAB_LA[$1]} b=${FAB_LB[$1]} ma mb
  ma=$(fab_mac "$a" "a$l") && [[ -n $ma ]] || return 1
  mb=$(fab_mac "$b" "b$l") && [[ -n $mb ]] || return 1
  fx "$a" ip -6 neigh replace "fd10:0:0:$l::2" lladdr "$mb" dev "a$l" nud permanent &&
  fx "$b" ip -6 neigh replace "fd10:0:0:$l::1" lladdr "$ma" dev "b$l" nud permanent
}

fabric_routes() {  # one `ip -batch` per node
  local node=$1 kw n pfx l dev gw batch=
  fab_is_host "$node" && return 0
  while read -r kw n pfx l; do
    [[ $n == "$node" ]] || continue
    case $kw in
      route)
        if [[ ${FAB_LA[$l]} == "$node" ]]; then
          dev=a$l gw=fd10:0:0:$l::2
        else
          dev=b$l gw=fd10:0:0:$l::1
        fi
        batch+="route replace $pfx via $gw dev $dev"$'\n' ;;
      sid)
        if [[ $pfx == end ]]; then
          batch+="route replace $l encap seg6local action End count dev sid0"$'\n'
        else
          batch+="route replace $l encap seg6local action End flavors next-csid"
          batch+=" lblen 32 nflen 16 count dev sid0"$'\n'
        fi ;;
    esac
  done < <(grep -E '^(route|sid) ' "$FAB_PLAN")
  [[ -z $batch ]] || ip -6 -n "$FAB_P$node" -batch - <<< "$batch"
}

fabric_counters() {
  local n
  for n in "${FAB_NODES[@]}"; do
    fx "$n" sh -c 'for d in /sys/class/net/[ab][0-9]*; do
      [ -e "$d/statistics" ] && echo "${d##*/} $(cat "$d/statistics/tx_packets")"
    done'
  done | sort
}

# Waits until no link end's counters move for 0.5 s (MLD after link-up).
fabric_wait_quiet() {
  local a b=x i
  sleep 0.5
  for i in $(seq 20); do
    a=$(fabric_counters)
    [[ $a == "$b" ]] && return 0
    b=$a
    sleep 0.5
  done
  echo "fabric: counters never went quiet" >&2
  return 1
}

fabric_up() {
  local n l a b kw name addr
  for n in "${FAB_NODES[@]}"; do
    ip netns add "$FAB_P$n" || { fabric_down; return 1; }
    FAB_MADE[$n]=1
    fx "$n" ip link set lo up
    fx "$n" sysctl -qw net.ipv6.conf.all.forwarding=$(fab_is_host "$n" && echo 0 || echo 1) \
      net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
      net.ipv6.conf.all.keep_addr_on_down=1 net.ipv6.conf.default.keep_addr_on_down=1 \
      net.ipv6.conf.all.router_solicitations=0 net.ipv6.conf.default.router_solicitations=0 \
      net.ipv6.conf.all.seg6_enabled=1 net.ipv6.conf.default.seg6_enabled=1 \
      net.ipv6.conf.all.accept_ra=0 net.ipv6.conf.default.accept_ra=0 >/dev/null
    if ! fab_is_host "$n"; then
      fx "$n" ip link add sid0 type ifb && fx "$n" ip link set sid0 up ||
        { fabric_down; return 1; }
    fi
  done
  for l in "${FAB_LINK_IDS[@]}"; do
    a=${FAB_LA[$l]} b=${FAB_LB[$l]}
    ip link add "a$l" netns "$FAB_P$a" type veth peer name "b$l" netns "$FAB_P$b" ||
      { fabric_down; return 1; }
    fx "$a" ip -6 addr add "fd10:0:0:$l::1/64" dev "a$l" nodad
    fx "$b" ip -6 addr add "fd10:0:0:$l::2/64" dev "b$l" nodad
    # No checksum offload: the receiving kernel must verify every checksum.
    fx "$a" ethtool -K "a$l" rx off tx off >/dev/null 2>&1
    fx "$b" ethtool -K "b$l" rx off tx off >/dev/null 2>&1
    fx "$a" ip link set "a$l" up && fx "$b" ip link set "b$l" up &&
      fab_neigh "$l" || { fabric_down; return 1; }
  done
  while read -r kw name addr; do
    fx "$name" ip -6 addr add "$addr/128" dev lo || { fabric_down; return 1; }
  done < <(grep '^addr ' "$FAB_PLAN")
  for n in "${FAB_NODES[@]}"; do
    fabric_routes "$n" || { echo "fabric: routes of $n failed" >&2; fabric_down; return 1; }
  done
  fabric_wait_quiet
}

fabric_down() {
  local n
  for n in "${!FAB_MADE[@]}"; do
    # Processes still running inside our namespaces (receivers, captures)
    # are ours: end them by pid so nothing outlives the fabric.
    ip netns pids "$FAB_P$n" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns del "$FAB_P$n" 2>/dev/null
    unset "FAB_MADE[$n]"
  done
  [[ -n $FAB_PLAN ]] && rm -f "$FAB_PLAN"
  FAB_PLAN=
  return 0
}

fabric_link_down() {
  local l=$1
  fx "${FAB_LA[$l]}" ip link set "a$l" down
  fx "${FAB_LB[$l]}" ip link set "b$l" down
}

fabric_link_up() {
  local l=$1
  fx "${FAB_LA[$l]}" ip link set "a$l" up &&
  fx "${FAB_LB[$l]}" ip link set "b$l" up &&
  fab_neigh "$l" &&
  fabric_routes "${FAB_LA[$l]}" && fabric_routes "${FAB_LB[$l]}"
}

fab_links_of() {  # link ids incident to node $1
  local l
  for l in "${FAB_LINK_IDS[@]}"; do
    [[ ${FAB_LA[$l]} == "$1" || ${FAB_LB[$l]} == "$1" ]] && echo "$l"
  done
}

fabric_switch_down() {
  local l
  for l in $(fab_links_of "$1"); do fx "$1" ip link set "$(fab_dev "$1" "$l")" down; done
}

fabric_switch_up() {
  local l peer
  for l in $(fab_links_of "$1"); do
    fx "$1" ip link set "$(fab_dev "$1" "$l")" up || return 1
    fab_neigh "$l" || return 1
  done
  fabric_routes "$1" || return 1
  for l in $(fab_links_of "$1"); do
    peer=${FAB_LA[$l]}; [[ $peer == "$1" ]] && peer=${FAB_LB[$l]}
    fabric_routes "$peer" || return 1
  done
}
