#!/bin/bash
# run-rxe-vm.sh - runs Prism's soft-RoCE (rdma_rxe) tests inside a throw-away
# QEMU VM booting Debian's own kernel, for hosts whose kernel has no RDMA.
# Adapted from the rxe-vm rig; needs nothing outside the repository at run time.
#
# Usage:  run-rxe-vm.sh MANIFEST [OUTDIR]
#   MANIFEST: one test per line, "NAME<TAB>TIMEOUT_S<TAB>COMMAND ARGS..." (written
#   by CMake, tests/rxe/CMakeLists.txt). Every command runs as root inside the
#   guest after the rxe devices exist (see guest-run.sh for the device layout).
#   Exit status: 0 all passed; 1 some failed; 77 cannot run here (skip: no
#   qemu/kernel and apt cannot provide them); 125 the guest never reported.
#
# Guest: host / shared read-only over 9p as the guest root (host binaries run
# unchanged), tmpfs on /tmp /run /var/tmp /dev/shm, OUTDIR shared read-write.
# No NIC (-nic none): nothing leaves the VM. TCG (KVM hangs on these hosts).
#
# Environment (optional):
#   RXE_CACHE   kernel + initramfs cache (default /var/cache/prism-rxe-vm, else
#               ~/.cache/prism-rxe-vm)
#   RXE_MEM     guest MiB (default 1536)    RXE_SMP vCPUs (default 2)
#   RXE_TIMEOUT seconds for the whole VM (default 560)
#   RXE_KPKG    pin the kernel package      RXE_NO_APT=1 never call apt-get
# Paths must not contain spaces or commas (kernel cmdline / -virtfs syntax).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MANIFEST=$(realpath "${1:?usage: run-rxe-vm.sh MANIFEST [OUTDIR]}")
RXE_OUT=${2:-$(dirname "$MANIFEST")/rxe-out}
if [ -z "${RXE_CACHE:-}" ]; then
  RXE_CACHE=/var/cache/prism-rxe-vm
  mkdir -p "$RXE_CACHE" 2>/dev/null && [ -w "$RXE_CACHE" ] || RXE_CACHE=$HOME/.cache/prism-rxe-vm
fi
RXE_MEM=${RXE_MEM:-1536}
RXE_SMP=${RXE_SMP:-2}
RXE_TIMEOUT=${RXE_TIMEOUT:-560}
log() { echo "[rxe-vm $(date +%T)] $*" >&2; }
skip() { log "SKIP: $*"; exit 77; }
mkdir -p "$RXE_CACHE" "$RXE_OUT"; RXE_OUT=$(realpath "$RXE_OUT")
START=$(date +%s)
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"

# ---------------------------------------------------------------- 1. host packages
PKGS="qemu-system-x86 busybox-static kmod cpio iproute2 rdma-core ibverbs-providers ibverbs-utils perftest"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "${RXE_NO_APT:-0}" = 1 ] && skip "missing packages:$missing (RXE_NO_APT=1)"
  log "installing:$missing"
  { timeout 300 $SUDO apt-get update -qq &&
    timeout 900 env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
      --no-install-recommends $missing >/dev/null; } || skip "apt-get could not install:$missing"
fi
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not found"

# ---------------------------------------------------------------- 2. guest kernel
# The kernel linux-image-amd64 points to, unpacked with dpkg-deb (never installed).
KPKG=${RXE_KPKG:-}
if [ -z "$KPKG" ]; then
  KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [ -z "$KPKG" ] && [ "${RXE_NO_APT:-0}" != 1 ]; then
    timeout 300 $SUDO apt-get update -qq || true
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
fi
if [ -z "$KPKG" ]; then  # offline: reuse whatever kernel is cached
  KV=$(ls "$RXE_CACHE" 2>/dev/null | sed -n 's/^vmlinuz-//p' | sort -V | tail -n1)
  [ -n "$KV" ] || skip "no linux-image-amd64 in apt and no cached kernel"
else
  KV=${KPKG#linux-image-}
fi
MODS="virtio_pci 9pnet_virtio 9p crc32_generic rdma_rxe rdma_ucm ib_umad veth dummy ifb"
VMLINUZ=$RXE_CACHE/vmlinuz-$KV
INITRD=$RXE_CACHE/initramfs-$KV.cpio.gz
STAMP="$MODS $(md5sum < "$HERE/run-rxe-vm.sh")"
if [ ! -s "$VMLINUZ" ] || [ ! -s "$INITRD" ] || [ "$(cat "$INITRD.stamp" 2>/dev/null)" != "$STAMP" ]; then
  [ -n "${KPKG:-}" ] || skip "kernel cache stale and apt unavailable"
  TMPK=$(mktemp -d "$RXE_CACHE/tmp.XXXXXX"); trap 'rm -rf "$TMPK"' EXIT
  log "fetching $KPKG (cached in $RXE_CACHE afterwards)"
  (cd "$TMPK" && timeout 600 apt-get download -q "$KPKG" 2>&1 | grep -v 'unsandboxed' >&2 || true)
  ls "$TMPK"/*.deb >/dev/null 2>&1 || skip "download of $KPKG failed"
  KROOT=$TMPK/root
  dpkg-deb -x "$TMPK"/*.deb "$KROOT"
  depmod -b "$KROOT" "$KV"

  # ------------------------------------------------------------ 3. initramfs
  log "building initramfs"
  IR=$TMPK/initramfs
  mkdir -p "$IR"/{bin,dev,proc,sys,newroot,lib/modules/$KV}
  cp /bin/busybox "$IR/bin/busybox"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$IR/bin/$a"; done
  for m in $MODS; do modprobe -d "$KROOT" -S "$KV" --show-depends "$m"; done |
    awk '$1=="insmod"{print $2}' | sort -u | while read -r f; do
      rel=${f#$KROOT/lib/modules/$KV/}; mkdir -p "$IR/lib/modules/$KV/$(dirname "$rel")"
      cp "$f" "$IR/lib/modules/$KV/$rel"; done
  cp "$KROOT/lib/modules/$KV"/modules.{order,builtin,builtin.modinfo} "$IR/lib/modules/$KV/"
  depmod -b "$IR" "$KV"
  cat > "$IR/init" <<'INIT'
#!/bin/sh
# PID 1 of the guest: load modules, mount the 9p shares, run the entry script, power off.
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
up() { cut -d' ' -f1 /proc/uptime; }
SHARES=""
for kv in $(cat /proc/cmdline); do case "$kv" in rxe_out=*) OUTD=${kv#rxe_out=};;
  rxe_share*=*) SHARES="$SHARES ${kv#rxe_share}";; esac; done
die() { echo "[init] FATAL: $*"; poweroff -f; }
for m in virtio_pci 9pnet_virtio 9p; do modprobe $m || die "modprobe $m"; done
O=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $O,ro,cache=loose hostroot /newroot || die "9p hostroot"
R=/newroot
mount -t proc proc $R/proc; mount -t sysfs sys $R/sys; mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm; mount -t devpts devpts $R/dev/pts; mount -t tmpfs tmpfs $R/dev/shm
for d in /run /tmp /var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $R$d; done
# Project folders under /tmp, /run or /var/tmp are hidden by the tmpfs mounts
# above: they come back as their own 9p shares (tag N -> path), read-write.
for s in $SHARES; do n=${s%%=*}; p=${s#*=}; mkdir -p "$R$p"
  mount -t 9p -o $O,rw,cache=mmap "proj$n" "$R$p" || die "9p proj$n -> $p"; done
mkdir -p "$R$OUTD" 2>/dev/null
mount -t 9p -o $O,rw,cache=mmap out "$R$OUTD" || die "9p out -> $OUTD"
mkdir -p $R/run/rxe-kroot/lib/modules; mount --bind /lib/modules $R/run/rxe-kroot/lib/modules
printf '#!/bin/sh\nexec /sbin/modprobe -d /run/rxe-kroot "$@"\n' > $R/run/rxe-modprobe
chmod 755 $R/run/rxe-modprobe; echo /run/rxe-modprobe > /proc/sys/kernel/modprobe
for m in crc32_generic rdma_rxe rdma_ucm ib_umad veth; do modprobe $m || echo "[init] modprobe $m failed"; done
modprobe dummy numdummies=0
echo "[init] $(up)s: running $OUTD/.entry.sh"
chroot $R /bin/bash "$OUTD/.entry.sh" < /dev/console > /dev/console 2>&1
rc=$?
echo "$rc" > "$R$OUTD/.guest-rc"; sync
echo "[init] $(up)s: guest exit code $rc, powering off"
umount "$R$OUTD" 2>/dev/null
poweroff -f
INIT
  chmod 755 "$IR/init"
  (cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1 > "$INITRD.tmp") && mv "$INITRD.tmp" "$INITRD"
  cp "$KROOT/boot/vmlinuz-$KV" "$VMLINUZ"
  echo "$STAMP" > "$INITRD.stamp"
  rm -rf "$TMPK"; trap - EXIT
fi

# ---------------------------------------------------------------- 4. entry script
# Copied into OUTDIR because the guest's /tmp is a fresh tmpfs.
cp "$HERE/guest-run.sh" "$RXE_OUT/.guest-run.sh"
cp "$MANIFEST" "$RXE_OUT/.manifest"
{
  echo '#!/bin/bash'
  printf 'export RXE_OUT=%q\n' "$RXE_OUT"
  echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp/home TERM=dumb; mkdir -p $HOME'
  printf 'cd %q || exit 102\n' "$RXE_OUT"
  echo '/bin/bash "$RXE_OUT/.guest-run.sh" "$RXE_OUT/.manifest"'
  echo 'rc=$?; dmesg > "$RXE_OUT/dmesg.txt" 2>&1; exit $rc'
} > "$RXE_OUT/.entry.sh"
rm -f "$RXE_OUT/.guest-rc" "$RXE_OUT/results.txt"

# ---------------------------------------------------------------- 5. boot
# The guest mounts fresh tmpfs on /tmp /run /var/tmp: a source or build tree
# living there (a CI clone in /tmp, say) is shared explicitly.
SRC_DIR=$(cd "$HERE/../.." && pwd)
BUILD_DIR=$(cd "$(dirname "$MANIFEST")/.." && pwd)
SHARE_ARGS=(); SHARE_CMDLINE=""; n=0
for d in "$SRC_DIR" "$BUILD_DIR"; do
  case "$d/" in /tmp/*|/run/*|/var/tmp/*) ;; *) continue;; esac
  [ "$d" = "$BUILD_DIR" ] && case "$BUILD_DIR/" in "$SRC_DIR"/*) [ $n -gt 0 ] && continue;; esac
  SHARE_ARGS+=(-virtfs "local,path=$d,mount_tag=proj$n,security_model=none,multidevs=remap")
  SHARE_CMDLINE="$SHARE_CMDLINE rxe_share$n=$d"; n=$((n + 1))
done
log "booting $KV (tcg, ${RXE_SMP} vCPU, ${RXE_MEM} MiB), console -> $RXE_OUT/console.log"
set +e
timeout -k 10 "$RXE_TIMEOUT" qemu-system-x86_64 -accel tcg,thread=multi -cpu max \
  -smp "$RXE_SMP" -m "$RXE_MEM" -nographic -no-reboot -nic none \
  -kernel "$VMLINUZ" -initrd "$INITRD" \
  -append "console=ttyS0 panic=-1 quiet loglevel=3 rxe_out=$RXE_OUT$SHARE_CMDLINE" \
  "${SHARE_ARGS[@]}" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$RXE_OUT,mount_tag=out,security_model=none,multidevs=remap" \
  < /dev/null 2>&1 | tr -d '\r' > "$RXE_OUT/console.log"
qrc=${PIPESTATUS[0]}
set -e
grep -E '^(PASS|FAIL|SKIP|METRIC|\[guest\])' "$RXE_OUT/console.log" >&2 || true
if [ -s "$RXE_OUT/.guest-rc" ]; then rc=$(cat "$RXE_OUT/.guest-rc"); else
  why="qemu rc=$qrc"; [ "$qrc" = 124 ] && why="timeout after ${RXE_TIMEOUT}s"
  log "no exit code from the guest ($why); last console lines:"; tail -n 30 "$RXE_OUT/console.log" >&2
  rc=125; fi
log "guest exit code $rc, total $(( $(date +%s) - START ))s; logs in $RXE_OUT"
exit "$rc"
