#!/bin/bash
# srv6_fabric.sh TOOL TOPO.json TESTBIN [gtest args...]
# Runs the Prism endpoint SRv6 tests (Srv6FabricTest.*) across the kernel
# SRv6 fabric that tests/fabric/fabric.sh builds from TOPO (hosts 0 and 1),
# with Prism's own path set: uSID carriers and SRH segment lists from
# `prism_fabric_tool expect`. Deletes every namespace on exit (trap).
# Exit 77 (ctest: skipped) when not root or netns/SRv6 are unavailable.
set -u
TOOL=$(readlink -f "$1") TOPO=$(readlink -f "$2") BIN=$(readlink -f "$3"); shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
FAB=$HERE/../fabric/fabric.sh
[[ -f $FAB ]] || { echo "SKIP: no fabric builder ($FAB)"; exit 77; }
source "$FAB"
fabric_require
P=pu$$r$((RANDOM % 1000))
fabric_init "$TOOL" "$TOPO" "$P" || { echo "fabric plan failed"; exit 1; }
trap 'fabric_down' EXIT
trap 'exit 130' INT TERM
fabric_up || { echo "fabric_up failed"; exit 1; }
# Host routes: each plane's NIC port reaches the SID spaces through its T0.
# Same prefixes on both ports, different metrics: sockets bound to a port
# (SO_BINDTODEVICE) use that port's route.
declare -A DEVS ADDRS
for h in h0 h1; do
  while read -r kw id a b plane; do
    [[ $a == "$h" ]] || continue
    gw=fd10:0:0:$id::2
    fx $h ip -6 route add fcbb:bbbb::/32 via $gw dev a$id metric $((100 + plane)) || exit 1
    fx $h ip -6 route add fc00::/16 via $gw dev a$id metric $((100 + plane)) || exit 1
    DEVS[$h]+=${DEVS[$h]:+,}a$id
  done < <("$TOOL" plan "$TOPO" | grep '^link ')
  ADDRS[$h]=$("$TOOL" plan "$TOPO" | awk -v h=$h '$1=="addr" && $2==h {print $3}' | paste -sd,)
done
# Routes per direction. Route r (Prism path p uses route p % routes) must be
# on plane r % planes, and h1's route r must be the reverse of h0's route r
# (same plane and spine): acknowledgements return on the path id of the
# data, so a path id names one bidirectional fabric path.
spine_key() {  # SRC DST X -> "PLANE SPINE"
  "$TOOL" paths "$TOPO" $1 $2 | awk -v x=$3 '$1=="path" && $2==x {
    n = split($6, sw, ","); print $3, sw[int((n + 1) / 2)] }'
}
routes() {  # SRC DST MODE: in the order of h0 -> h1's paths
  local src=$1 dst=$2 mode=$3 out= x y key
  while read -r kw x rest; do
    [[ $kw == path ]] || continue
    key=$(spine_key 0 1 $x)
    y=$x
    if [[ $src == 1 ]]; then
      y=
      while read -r kw2 c rest2; do
        [[ $kw2 == path && $(spine_key 1 0 $c) == "$key" ]] && y=$c
      done < <("$TOOL" paths "$TOPO" 1 0)
      [[ -n $y ]] || { echo "no reverse path for $x ($key)" >&2; exit 1; }
    fi
    if [[ $mode == usid ]]; then
      out+=${out:+;}usid:$("$TOOL" expect "$TOPO" $src $dst $y usid 0)
    else
      # wire order "final,last,...,first" -> travel order without the final
      local segs=$("$TOOL" expect "$TOPO" $src $dst $y srh 0 | awk '{print $3}')
      out+=${out:+;}srh:$(echo "$segs" | tr ',' '\n' | tail -n +2 | tac | paste -sd,)
    fi
  done < <("$TOOL" paths "$TOPO" 0 1)
  echo "$out"
}
# The T0->T1 link of each h0->h1 path ("NS DEV" in route order).
path_links() {
  local out= x plane hl links id dir node
  while read -r kw x plane hl links rest; do
    [[ $kw == path ]] || continue
    IFS=: read id dir <<<"$(echo "$links" | cut -d, -f2)"
    node=${FAB_LA[$id]}; [[ $dir == ba ]] && node=${FAB_LB[$id]}
    out+=${out:+;}$FAB_P$node:$([[ $dir == ab ]] && echo a$id || echo b$id):$id
  done < <("$TOOL" paths "$TOPO" 0 1)
  echo "$out"
}
cat > "/tmp/$P.ctl" <<CTL
#!/bin/bash
# srv6 fabric control for the test: down|up LINKID
source "$FAB"
fabric_init "$TOOL" "$TOPO" "$P" >/dev/null || exit 1
case \$1 in
  down) fabric_link_down \$2 ;;
  up) fabric_link_up \$2 ;;
esac
rc=\$?
rm -f "\$FAB_PLAN"
exit \$rc
CTL
export PRISM_SRV6=1 PRISM_NS_A=${FAB_P}h0 PRISM_NS_B=${FAB_P}h1 PRISM_PLANES=2
export PRISM_ADDR_A=${ADDRS[h0]} PRISM_ADDR_B=${ADDRS[h1]}
export PRISM_DEV_A=${DEVS[h0]} PRISM_DEV_B=${DEVS[h1]}
export PRISM_ROUTES_USID_A=$(routes 0 1 usid) PRISM_ROUTES_USID_B=$(routes 1 0 usid)
export PRISM_ROUTES_SRH_A=$(routes 0 1 srh) PRISM_ROUTES_SRH_B=$(routes 1 0 srh)
export PRISM_PATH_LINKS=$(path_links)
export PRISM_FABRIC_CTL="bash /tmp/$P.ctl"
env | grep ^PRISM_ | sort
"$BIN" --gtest_filter="${PRISM_GTEST_FILTER:-Srv6FabricTest.*}" "$@"
rc=$?
rm -f "/tmp/$P.ctl"
exit $rc
