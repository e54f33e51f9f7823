#!/bin/bash
# prism_fabric_tool refuses malformed arguments (exit 2 and a message naming
# the argument) instead of reading "12x" as 12 or ignoring extra words.
# Usage: fabric_tool_args_test.sh TOOL TOPO.json
set -u
tool=$1 topo=$2
fail=0
expect_refused() {
  local want=$1; shift
  local err
  err=$("$tool" "$@" 2>&1 >/dev/null)
  local rc=$?
  if [[ $rc -ne 2 || $err != *"$want"* ]]; then
    echo "FAIL: $* -> rc $rc, stderr '$err' (want rc 2 and '$want')"
    fail=1
  fi
}
expect_refused "bad arguments" plan "$topo" extra
expect_refused 'bad host "1x"' paths "$topo" 0 1x
expect_refused 'bad host "-1"' paths "$topo" -1 1
expect_refused 'bad path id "x"' expect "$topo" 0 1 x usid 1
expect_refused "path id out of range" expect "$topo" 0 1 99999 usid 1
expect_refused 'bad hop "1z"' expect "$topo" 0 1 0 usid 1z
expect_refused 'bad port "70000"' recv 70000 /dev/null
expect_refused 'bad count "3k"' send "$topo" 0 1 0 usid 3k lo \
  00:00:00:00:00:00 4791
expect_refused 'unknown send option "badcsumm"' send "$topo" 0 1 0 usid 1 \
  lo 00:00:00:00:00:00 4791 badcsumm
# And well-formed ones still work (no sockets needed).
if ! "$tool" plan "$topo" | grep -q '^node '; then
  echo "FAIL: plan printed no nodes"; fail=1
fi
if ! "$tool" expect "$topo" 0 1 0 usid 1 | grep -q ':'; then
  echo "FAIL: expect printed no address"; fail=1
fi
[[ $fail -eq 0 ]] && echo "prism_fabric_tool argument checks passed"
exit $fail
