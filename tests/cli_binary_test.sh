#!/usr/bin/env bash
# The built distsampler binary as a shell sees it: streams, exit codes, binary output.
# Usage: cli_binary_test.sh BINARY VERSION [PYTHON PYTHON_DIR] (VERSION: CMakeLists.txt's
# project() version; PYTHON_DIR: where PYTHON imports the built distsampler package from, for
# `tokens prepare`'s real module; without them, only a stand-in interpreter runs)
set -u
bin="$1"
version="$2"
python="${3:-}"
python_dir="${4:-}"
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
# Launcher mode (issue 21): the rank and world size of srun, torchrun or mpirun; a program run in
# a batch script without srun (SLURM_PROCID=0, SLURM_NTASKS=4, no step) refuses in one line.
want=$("$bin" indices --size 16 --world-size 4 --rank 3)
got=$(env -i SLURM_JOB_ID=9 SLURM_STEP_ID=0 SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_STEP_NUM_TASKS=4 \
  "$bin" indices --size 16 --from-env)
[ "$got" = "$want" ] || { echo "FAIL from_env_slurm: '$got', expected '$want'"; fail=1; }
got=$(env -i RANK=3 WORLD_SIZE=4 "$bin" indices --size 16 --from-env)
[ "$got" = "$want" ] || { echo "FAIL from_env_torchrun: '$got', expected '$want'"; fail=1; }
env -i SLURM_JOB_ID=9 SLURM_PROCID=0 SLURM_NTASKS=4 "$bin" indices --size 16 --from-env \
  >/tmp/ds_out.$$ 2>/tmp/ds_err.$$
got=$?
if [ $got != 2 ] || [ -s /tmp/ds_out.$$ ] || [ "$(wc -l </tmp/ds_err.$$)" != 1 ] ||
   ! grep -q "without SLURM_STEP_ID" /tmp/ds_err.$$; then
  echo "FAIL from_env_batch: exit $got, expected 2 and one line on stderr:"; cat /tmp/ds_err.$$
  fail=1
fi
check consumed_past_end 2 indices --size 10 --world-size 4 --rank 0 --consumed 13
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
every_command=("indices --size 100 --world-size 1 --rank 0" "indices --size 100000 --world-size 1 \
--rank 0 --format binary" "audit --size 100 --world-size 2" "demo" "--version" "help" "indices --help"
"audit --help" "demo --help")
for args in "${every_command[@]}"; do
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

# SIGPIPE ignored, for every command. (1) The reader gone before the first write (a pipe whose
# read end is closed, so that every write fails with EPIPE; Python ignores SIGPIPE and
# restore_signals=False keeps it so in the child): exit 3, one line naming "Broken pipe".
closed_pipe='import os, subprocess, sys
r, w = os.pipe()
os.close(r)
code = subprocess.run(sys.argv[1:], stdout=w, restore_signals=False).returncode
sys.exit(code if code >= 0 else 128 - code)'
for args in "${every_command[@]}" "indices --order feistel --size 1000000000 --world-size 1 --rank 0" \
    "audit --size 100 --world-size 2 --epochs 1000"; do
  timeout 5 /usr/bin/python3 -c "$closed_pipe" "$bin" $args 2>/tmp/ds_err.$$; got=$?
  if [ "$got" != 3 ] || [ "$(wc -l </tmp/ds_err.$$)" != 1 ] ||
     ! grep -q "cannot write the output: Broken pipe" /tmp/ds_err.$$; then
    echo "FAIL '$args' to a pipe without reader (SIGPIPE ignored): exit $got, expected 3 and" \
         "one line naming 'Broken pipe'; stderr:"; head -3 /tmp/ds_err.$$; fail=1
  fi
done
# (2) `| head -1`, a reader that leaves after the first line: the command ends at once, never by a
# signal; exit 0 with nothing on stderr when everything was written before the reader left (short
# outputs race with head), else exit 3 and one line naming "Broken pipe". Outputs longer than a
# pipe's buffer (the last two) cannot have been written in full: exit 3 there.
for args in "${every_command[@]}" "indices --order feistel --size 1000000000 --world-size 1 --rank 0" \
    "audit --size 100 --world-size 2 --epochs 1000"; do
  start=$(date +%s%N)
  (trap '' PIPE
   timeout 5 "$bin" $args 2>/tmp/ds_err.$$ | head -1 >/tmp/ds_out.$$
   echo "${PIPESTATUS[0]}" >/tmp/ds_code.$$)
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  got=$(cat /tmp/ds_code.$$)
  long=0
  case "$args" in *1000000000*|*"--epochs 1000"*) long=1 ;; esac
  ok=1
  [ "$ms" -lt 2000 ] && [ "$(wc -l </tmp/ds_out.$$)" = 1 ] || ok=0
  if [ "$got" = 0 ] && [ $long = 0 ]; then
    [ -s /tmp/ds_err.$$ ] && ok=0
  elif [ "$got" = 3 ]; then
    [ "$(wc -l </tmp/ds_err.$$)" = 1 ] && grep -q "cannot write the output: Broken pipe" \
      /tmp/ds_err.$$ || ok=0
  else
    ok=0
  fi
  if [ $ok = 0 ]; then
    echo "FAIL '$args | head -1' with SIGPIPE ignored: exit $got after $ms ms (0 or 3 within" \
         "2 s expected, 3 for a long output), $(wc -l </tmp/ds_out.$$) lines read; stderr:"
    head -3 /tmp/ds_err.$$; fail=1
  fi
done
rm -f /tmp/ds_code.$$

# Bad arguments: exit 2, nothing on stdout, exactly one line on stderr that names the flag and the
# value (the FRAGMENT, a fixed string).
bad() {  # bad FRAGMENT ARGS...
  local want="$1"
  shift
  "$bin" "$@" >/tmp/ds_out.$$ 2>/tmp/ds_err.$$
  local got=$?
  if [ "$got" != 2 ] || [ -s /tmp/ds_out.$$ ] || [ "$(wc -l </tmp/ds_err.$$)" != 1 ] ||
     [ -n "$(tail -c 1 /tmp/ds_err.$$)" ] || ! grep -qF -- "$want" /tmp/ds_err.$$; then
    echo "FAIL bad arguments '$*': exit $got (2 expected), $(wc -c </tmp/ds_out.$$) bytes on" \
         "stdout (0 expected), stderr (one line with '$want' expected):"
    cat /tmp/ds_err.$$; fail=1
  fi
}
ok=(--size 10 --world-size 2 --rank 0)
bad "unknown command 'frobnicate'" frobnicate
bad "unknown command ''" ""
bad "missing required flag --size" indices --world-size 2 --rank 0
bad "missing required flag --rank" indices --size 10 --world-size 2
bad "--size = 'ten'" indices --size ten --world-size 2 --rank 0
bad "--size = ''" indices --size "" --world-size 2 --rank 0
bad "--size = '-1'" indices --size -1 --world-size 2 --rank 0
bad "--size = ' 1'" indices --size " 1" --world-size 2 --rank 0
bad "--size = '1e3'" indices --size 1e3 --world-size 2 --rank 0
bad "--size = '18446744073709551616'" indices --size 18446744073709551616 --world-size 2 --rank 0
bad "size = 9223372036854775809" indices --size 9223372036854775809 --world-size 2 --rank 0 \
  --order feistel
bad "size = 4611686018427387904" indices --size 4611686018427387904 --world-size 2 --rank 0
bad "world_size = 0" indices --size 10 --world-size 0 --rank 0
bad "rank = 2" indices --size 10 --world-size 2 --rank 2
bad "rank = 18446744073709551615" indices --size 10 --world-size 2 --rank 18446744073709551615
bad "--append-eod = -1: a token id, an integer in [0, 9223372036854775807]" tokens plan \
  --seq-len 4 --global-batch 1 --source missing:1 --append-eod -1
bad "--append-eod = 18446744073709551616: a token id" tokens plan --seq-len 4 --global-batch 1 \
  --source missing:1 --append-eod 18446744073709551616
bad "--epoch = '-1'" indices "${ok[@]}" --epoch -1
bad "--epoch = '1.5'" indices "${ok[@]}" --epoch 1.5
bad "flag --epoch needs a value" indices "${ok[@]}" --epoch
bad "flag --epoch needs a value" indices --epoch --size 10 --world-size 2 --rank 0
bad "seed = '1.5'" indices "${ok[@]}" --seed 1.5
bad "seed = '18446744073709551616'" indices "${ok[@]}" --seed 18446744073709551616
bad "seed = '-9223372036854775809'" indices "${ok[@]}" --seed -9223372036854775809
bad "seed = '1 2'" indices "${ok[@]}" --seed "1
2"
bad "18446744073709551615" indices "${ok[@]}" --seed 18446744073709551615 --epoch 1
bad "--order = 'random'" indices "${ok[@]}" --order random
bad "--order = ''" indices "${ok[@]}" --order=
bad "--format = 'csv'" indices "${ok[@]}" --format csv
bad "--randperm = 'new'" indices "${ok[@]}" --randperm new
bad "--randperm = 'classic' with --order feistel" indices "${ok[@]}" --order feistel \
  --randperm classic
bad "--mask with --format = binary" indices "${ok[@]}" --mask --format binary
bad "--start = 6" indices "${ok[@]}" --start 6
bad "--count = 4" indices "${ok[@]}" --start 2 --count 4
bad "--consumed = 9223372036854775809" indices "${ok[@]}" --consumed 9223372036854775809
bad "unknown flag '--bogus'" indices "${ok[@]}" --bogus 1
bad "unknown flag '--shuffle'" indices "${ok[@]}" --shuffle
bad "flag --size is given twice" indices "${ok[@]}" --size 3
bad "flag --drop-last takes no value" indices "${ok[@]}" --drop-last=yes
bad "flag --mask takes no value" indices "${ok[@]}" --mask=
bad "unexpected argument 'stray'" indices "${ok[@]}" stray
bad "unexpected argument '-s'" indices -s 10 --world-size 2 --rank 0
bad "--size = 100000001" audit --size 100000001 --world-size 2
bad "--world-size = 65537" audit --size 10 --world-size 65537
bad "--world-size = 0" audit --size 10 --world-size 0
bad "--epochs = 0" audit --size 10 --world-size 2 --epochs 0
bad "--epochs = 1001" audit --size 10 --world-size 2 --epochs 1001
bad "--epochs = '18446744073709551616'" audit --size 10 --world-size 2 --epochs 18446744073709551616
bad "--consumed = 11" audit --size 10 --world-size 2 --consumed 11 --resume-world-size 3
bad "--resume-world-size = 0" audit --size 10 --world-size 2 --consumed 4 --resume-world-size 0
bad "--consumed and --resume-world-size go together" audit --size 10 --world-size 2 --consumed 4
bad "--cut-epoch = 1" audit --size 10 --world-size 2 --consumed 4 --resume-world-size 3 \
  --cut-epoch 1
bad "--break = 'sideways'" audit --size 10 --world-size 2 --consumed 4 --resume-world-size 3 \
  --break sideways
bad "--order = 'nope'" demo --order nope
bad "unknown flag '--extra'" demo --extra 1
bad "unexpected argument 'extra'" --version extra
bad "allowed: plan, audit, explain, index, where, takedown, prepare" tokens frobnicate
bad "expected a subcommand, plan, audit, explain, index, where, takedown or prepare" tokens

# tokens prepare (issue 52): the process becomes `PY -m distsampler.prepare ARGS...`, ARGS
# untouched (never the tokens command's flags or --help), PY from DISTSAMPLER_PYTHON (empty: unset)
# else python3 on PATH, DISTSAMPLER_PREPARE_PROG the module's program name. A stand-in interpreter
# prints what it was given and exits 7.
fake_dir=/tmp/ds_python.$$
mkdir -p $fake_dir
printf '#!/bin/sh\nprintf "%%s|" "$0" "$DISTSAMPLER_PREPARE_PROG" "$@"\nexit 7\n' \
  >$fake_dir/python3
chmod +x $fake_dir/python3
prepare_args=(--help -o "a b" --workers=2 "" --source x:1 --tokenizer=t.json)
want="|distsampler tokens prepare|-m|distsampler.prepare|--help|-o|a b|--workers=2||--source|x:1|"
want+="--tokenizer=t.json|"
for how in env empty path; do
  case $how in
    env) env DISTSAMPLER_PYTHON=$fake_dir/python3 "$bin" tokens prepare "${prepare_args[@]}" \
           >/tmp/ds_out.$$ 2>/tmp/ds_err.$$; got=$?; want0=$fake_dir/python3 ;;
    empty) env DISTSAMPLER_PYTHON= PATH="$fake_dir:$PATH" "$bin" tokens prepare \
             "${prepare_args[@]}" >/tmp/ds_out.$$ 2>/tmp/ds_err.$$; got=$?; want0=python3 ;;
    path) env -u DISTSAMPLER_PYTHON PATH="$fake_dir:$PATH" "$bin" tokens prepare \
            "${prepare_args[@]}" >/tmp/ds_out.$$ 2>/tmp/ds_err.$$; got=$?; want0=python3 ;;
  esac
  # $0 is what the shell was started as: the path it was found at.
  [ $want0 = python3 ] && want0=$fake_dir/python3
  if [ $got != 7 ] || [ "$(cat /tmp/ds_out.$$)" != "$want0$want" ] || [ -s /tmp/ds_err.$$ ]; then
    echo "FAIL tokens prepare ($how): exit $got (7 expected), stdout '$(cat /tmp/ds_out.$$)'" \
         "('$want0$want' expected), stderr:"; cat /tmp/ds_err.$$; fail=1
  fi
done
rm -rf $fake_dir
# An interpreter that is not there: one line naming it, the usage error's exit status.
DISTSAMPLER_PYTHON=/nonexistent/python bad \
  "prepare: cannot run DISTSAMPLER_PYTHON='/nonexistent/python': No such file or directory" \
  tokens prepare --output x --help
env -u DISTSAMPLER_PYTHON PATH=/nonexistent "$bin" tokens prepare --help >/tmp/ds_out.$$ \
  2>/tmp/ds_err.$$
got=$?
if [ $got != 2 ] || [ -s /tmp/ds_out.$$ ] || [ "$(wc -l </tmp/ds_err.$$)" != 1 ] ||
   ! grep -qF "cannot run 'python3' from PATH: No such file or directory; set DISTSAMPLER_PYTHON" \
     /tmp/ds_err.$$; then
  echo "FAIL tokens prepare without python3: exit $got (2 expected), stderr:"; cat /tmp/ds_err.$$
  fail=1
fi
# `tokens --help` names both forms.
check tokens_help 0 tokens --help
grep -qF "distsampler tokens prepare ARGS...  (= python -m distsampler.prepare ARGS...)" \
  /tmp/ds_out.$$ || { echo "FAIL tokens --help does not name tokens prepare"; fail=1; }
# The real module's --help, on the interpreter the build's package is for (no tokenizers needed):
# its flags, and once the module reads DISTSAMPLER_PREPARE_PROG, its usage names the CLI's form.
if [ -n "$python_dir" ]; then
  env PYTHONPATH="$python_dir" DISTSAMPLER_PYTHON="$python" "$bin" tokens prepare --help \
    >/tmp/ds_out.$$ 2>/tmp/ds_err.$$
  got=$?
  if [ $got != 0 ] || ! grep -q -- "--tokenizer" /tmp/ds_out.$$; then
    echo "FAIL tokens prepare --help ($python, PYTHONPATH=$python_dir): exit $got (0 expected)," \
         "stdout:"; cat /tmp/ds_out.$$; echo "stderr:"; cat /tmp/ds_err.$$; fail=1
  elif grep -q DISTSAMPLER_PREPARE_PROG "$python_dir/distsampler/prepare.py" &&
       ! grep -q "^usage: distsampler tokens prepare" /tmp/ds_out.$$; then
    echo "FAIL tokens prepare --help: the usage does not name 'distsampler tokens prepare':"
    head -3 /tmp/ds_out.$$; fail=1
  fi
fi

rm -f /tmp/ds_out.$$ /tmp/ds_err.$$
[ $fail = 0 ] && echo "cli_binary: all checks passed"
exit $fail
