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
rm -f /tmp/ds_out.$$ /tmp/ds_err.$$
[ $fail = 0 ] && echo "cli_binary: all checks passed"
exit $fail
