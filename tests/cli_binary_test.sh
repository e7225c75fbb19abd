#!/usr/bin/env bash
# The built distsampler binary as a shell sees it: streams, exit codes, binary output.
# Usage: cli_binary_test.sh BINARY VERSION (VERSION: CMakeLists.txt's project() version)
set -u
bin="$1"
version="$2"
fail=0
check() {  # check NAME EXPECTED_CODE ARGS...
  local name="$1" want="$2"
  shift 2
  "$bin" "$@" >/tmp/ds_out.$$ 2>/tmp/ds_err.$$
  local got=$?
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: exit $got, expected $want"; cat /tmp/ds_err.$$; fail=1
  fi
}
check ok 0 indices --size 16 --world-size 2 --rank 0
[ "$(tr '\n' ' ' </tmp/ds_out.$$)" = "12 9 11 13 2 15 4 7 " ] || { echo "FAIL ok output"; fail=1; }
[ -s /tmp/ds_err.$$ ] && { echo "FAIL ok wrote to stderr"; fail=1; }
check binary 0 indices --size 100 --world-size 4 --rank 1 --format binary
[ "$(stat -c %s /tmp/ds_out.$$)" = 200 ] || { echo "FAIL binary size"; fail=1; }
check bad_rank 2 indices --size 16 --world-size 2 --rank 2
[ "$(wc -l </tmp/ds_err.$$)" = 1 ] || { echo "FAIL bad_rank: not one line on stderr"; fail=1; }
[ -s /tmp/ds_out.$$ ] && { echo "FAIL bad_rank wrote to stdout"; fail=1; }
check no_command 2
check help 0 --help
check version 0 --version
[ "$(cat /tmp/ds_out.$$)" = "distsampler $version" ] ||
  { echo "FAIL version: '$(cat /tmp/ds_out.$$)', expected 'distsampler $version'"; fail=1; }
check huge_feistel 0 indices --order feistel --size 1000000000000000 --world-size 8 --rank 3 \
  --start 100000000000 --count 5
[ "$(wc -l </tmp/ds_out.$$)" = 5 ] || { echo "FAIL huge_feistel line count"; fail=1; }
check demo 0 demo
check audit_resume 0 audit --size 1000 --world-size 64 --consumed 640 --resume-world-size 3
grep -q "verdict: exactly-once holds" /tmp/ds_out.$$ || { echo "FAIL audit_resume verdict"; fail=1; }
check audit_broken 1 audit --size 1000 --world-size 4 --consumed 404 --resume-world-size 7 \
  --break overlap
grep -q "verdict: exactly-once VIOLATED" /tmp/ds_out.$$ || { echo "FAIL audit_broken verdict"; fail=1; }

# A failed write is one line on stderr naming the cause and exit 3, for every command that prints:
# a full disk (ENOSPC), a closed stdout (EBADF).
for args in "indices --size 100 --world-size 1 --rank 0" "indices --size 100000 --world-size 1 \
--rank 0 --format binary" "audit --size 100 --world-size 2" "demo" "--version" "indices --help"; do
  for target in full closed; do
    if [ $target = full ]; then
      "$bin" $args >/dev/full 2>/tmp/ds_err.$$; got=$?; cause="No space left on device"
    else
      "$bin" $args >&- 2>/tmp/ds_err.$$; got=$?; cause="Bad file descriptor"
    fi
    if [ "$got" != 3 ] || [ "$(wc -l </tmp/ds_err.$$)" != 1 ] ||
       ! grep -q "cannot write the output: $cause" /tmp/ds_err.$$; then
      echo "FAIL '$args' to a $target stdout: exit $got, expected 3 and one line naming" \
           "'$cause'; stderr:"; cat /tmp/ds_err.$$; fail=1
    fi
  done
done
# The reader leaving stops the work at once, also with SIGPIPE ignored: 10^9 indices (feistel,
# printed as they are computed) end at the first write after `head` exits, with EPIPE named.
start=$(date +%s%N)
(trap '' PIPE
 timeout 5 "$bin" indices --order feistel --size 1000000000 --world-size 1 --rank 0 \
   2>/tmp/ds_err.$$ | head -1 >/tmp/ds_out.$$
 echo "${PIPESTATUS[0]}" >/tmp/ds_code.$$)
ms=$(( ($(date +%s%N) - start) / 1000000 ))
got=$(cat /tmp/ds_code.$$)
if [ "$ms" -ge 2000 ] || [ "$got" != 3 ] || [ "$(wc -l </tmp/ds_err.$$)" != 1 ] ||
   ! grep -q "cannot write the output: Broken pipe" /tmp/ds_err.$$ ||
   [ "$(wc -l </tmp/ds_out.$$)" != 1 ]; then
  echo "FAIL SIGPIPE ignored, reader gone: $ms ms (< 2000 expected), exit $got (3 expected);" \
       "stderr:"; head -3 /tmp/ds_err.$$; fail=1
fi
rm -f /tmp/ds_code.$$
rm -f /tmp/ds_out.$$ /tmp/ds_err.$$
[ $fail = 0 ] && echo "cli_binary: all checks passed"
exit $fail
