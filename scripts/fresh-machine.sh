#!/usr/bin/env bash
# The README's two commands on a fresh machine: a minimal Debian 12 or 13 root made here with
# mmdebstrap from the archive apt already uses on this host (read from apt's sources, so no
# host name is written anywhere), with what a fresh machine of this kind has besides Debian: the
# CA trust, pip's configuration and the on-disk wheels and package folders it names, and
# /etc/hosts. A clean clone of this repository's HEAD is copied in, and the commands run there as
# root, with /proc, /sys, /dev, a tmpfs /dev/shm and a tmpfs /tmp mounted. Prints each command's
# time and, for a failing one, the tail of its log; exits non-zero when one fails.
#
# Usage, as root:  bash scripts/fresh-machine.sh [--release 12|13] [--dir DIR] [--keep]
#                                                [--reuse] [COMMAND...]
#   COMMAND: what to run in the clone, in order (default: "bash scripts/demo.sh" and
#            "bash scripts/test.sh", the README's two commands); each one a single argument.
#   --dir:   where the root goes (default /var/tmp/distsampler-fresh-debian<release>); it is
#            made anew unless --reuse (keep a root made before, with what it installed: for
#            rerunning a command, not a fresh-machine result).
#   --keep:  leave the root in place afterwards (default: deleted when every command passed).
#   --timeout SECONDS: each command's limit (default 5400; a hang fails with exit 124).
# Logs: DIR.log/<n>.log for the n-th command, kept in every case.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/scripts/deps.sh"

release=12
dir=
keep=0
reuse=0
limit=5400
commands=()
while [ $# -gt 0 ]; do
  case $1 in
    --release) release=${2:?--release needs 12 or 13}; shift 2 ;;
    --dir) dir=${2:?--dir needs a path}; shift 2 ;;
    --keep) keep=1; shift ;;
    --reuse) reuse=1; keep=1; shift ;;
    --timeout) limit=${2:?--timeout needs seconds}; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $1 (allowed: --release 12|13, --dir DIR, --keep, --reuse, --timeout S)" >&2
        exit 2 ;;
    *) commands+=("$1"); shift ;;
  esac
done
case $release in
  12) codename=bookworm ;;
  13) codename=trixie ;;
  *) echo "error: --release $release: allowed are 12 and 13" >&2; exit 2 ;;
esac
[ ${#commands[@]} -gt 0 ] || commands=("bash scripts/demo.sh" "bash scripts/test.sh")
[ "$(id -u)" = 0 ] || { echo "error: run as root (mmdebstrap, chroot and mounts)" >&2; exit 2; }
dir=${dir:-/var/tmp/distsampler-fresh-debian$release}
logs=$dir.log
ensure_packages mmdebstrap git

# The archive and its security archive as apt's sources name them for this host's release, with
# the suites renamed for the target release.
sources() {
  local host
  host=$(. /etc/os-release && echo "$VERSION_CODENAME")
  /usr/bin/python3 - "$host" "$codename" <<'EOF'
import glob, sys
host, target = sys.argv[1], sys.argv[2]
entries = []  # (uri, suites, components)
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(path).read().split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.split()
        if "deb" in fields.get("types", []) and fields.get("enabled", ["yes"]) != ["no"]:
            for uri in fields.get("uris", []):
                entries.append((uri, fields.get("suites", []), fields.get("components", [])))
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        words = [w for w in line.split("#")[0].split() if not w.startswith("[")]
        if len(words) >= 3 and words[0] == "deb":
            entries.append((words[1], [words[2]], words[3:]))
out = []
for uri, suites, components in entries:
    for suite in suites:
        if suite == host or suite.startswith(host + "-"):
            line = f"deb {uri} {target}{suite[len(host):]} {' '.join(components) or 'main'}"
            if line not in out:
                out.append(line)
if not any(f" {target} " in line for line in out):
    sys.exit(f"error: apt's sources name no archive for {host}; cannot derive {target}'s")
print("\n".join(out))
EOF
}

mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -l "${mounted[$i]}" 2>/dev/null || true
  done
  mounted=()
}
trap unmount_all EXIT
mount_in() {  # mount_in TARGET ARGS...: mount ARGS on $dir/TARGET
  mkdir -p "$dir$1"
  mount "${@:2}" "$dir$1"
  mounted+=("$dir$1")
}

start=$(date +%s)
if [ $reuse = 0 ] || [ ! -x "$dir/bin/bash" ]; then
  rm -rf "$dir"
  echo "== making a minimal Debian $release ($codename) root in $dir"
  sources >"$dir.sources.list" 2>/dev/null || { sources; exit 1; }
  mkdir -p "$(dirname "$dir")"
  mmdebstrap --variant=minbase --include=ca-certificates,git --quiet "$codename" "$dir" \
    "$dir.sources.list" >/dev/null
  echo "   root made in $(( $(date +%s) - start )) s"
fi
mkdir -p "$logs"
# What a fresh machine of this kind has besides Debian: the CA trust, pip's configuration (the
# files pip reads system-wide and root's) and what it names on disk (its find-links and file://
# indexes, bound read-only), /etc/hosts.
cp -L /etc/hosts /etc/resolv.conf "$dir/etc/"
cp -L /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
for f in /etc/pip.conf /etc/xdg/pip /root/.config/pip /root/.pip; do
  if [ -e "$f" ]; then mkdir -p "$dir$(dirname "$f")"; cp -rL "$f" "$dir$(dirname "$f")/"; fi
done
pip_env=()
for v in $(compgen -e | grep '^PIP_' || true); do pip_env+=("$v=${!v}"); done
# The folders pip's configuration and environment name (find-links, file:// indexes).
pip_dirs=$( (cat /etc/pip.conf /etc/xdg/pip/pip.conf /root/.config/pip/pip.conf /root/.pip/pip.conf \
  2>/dev/null; printf '%s\n' "${pip_env[@]}") | grep -o '/opt/[^ ]*\|file://[^ ]*' |
  sed 's|^file://||; s|/simple/*$||' | sort -u)
mount_in /proc -t proc proc
mount_in /sys --rbind /sys
mount_in /dev --rbind /dev
mount_in /dev/shm -t tmpfs -o mode=1777 tmpfs
mount_in /tmp -t tmpfs -o mode=1777 tmpfs
for d in $pip_dirs; do
  [ -d "$d" ] && mount_in "$d" --bind -o ro "$d"
done
# A clean clone of HEAD (what is committed, nothing of this work tree's build or venvs).
rm -rf "$dir/root/distsampler"
git clone --quiet --no-hardlinks "$repo" "$dir/root/distsampler"
echo "== Debian $(cat "$dir/etc/debian_version") in $dir, clone of $(git -C "$repo" rev-parse --short HEAD)"

status=0
n=0
for c in "${commands[@]}"; do
  n=$((n + 1))
  echo "== $n. $c"
  t0=$(date +%s)
  set +e
  timeout --kill-after=30 "$limit" chroot "$dir" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${pip_env[@]}" \
    /bin/bash -c "cd /root/distsampler && $c" </dev/null >"$logs/$n.log" 2>&1
  rc=$?
  set -e
  echo "   exit $rc in $(( $(date +%s) - t0 )) s (log: $logs/$n.log)"
  if [ $rc != 0 ]; then
    status=1
    echo "   --- the last 40 lines:"
    tail -n 40 "$logs/$n.log" | sed 's/^/   | /'
    break
  fi
  tail -n 15 "$logs/$n.log" | sed 's/^/   | /'
done
unmount_all
echo "== total $(( $(date +%s) - start )) s: $([ $status = 0 ] && echo passed || echo FAILED)"
if [ $status = 0 ] && [ $keep = 0 ]; then rm -rf "$dir"; fi
exit $status
