# Sourced by tests/slurm/run.sh once its cluster is up (issue 52): `python -m distsampler.prepare`
# as an sbatch array of 3 tasks (--task $SLURM_ARRAY_TASK_ID --tasks $SLURM_ARRAY_TASK_COUNT),
# task 1 SIGKILLed mid-shard on its first run (its batch script waits for a .partial file of one
# of its shards, kills prepare and fails) and rerun by `scontrol requeue JOB_1`; then --finalize.
# The folder must be the one-machine run's (--workers 1), every file byte for byte, every
# document once, no .partial file left (tests/dist/prepare_tasks.py).
# Needs: $1, the PyTorch 2 venv's interpreter (its tokenizers); run.sh's src, build, W, problem,
# skipped.
prepare_on_slurm() {
  local tpy=$1 helper="$src/tests/dist/prepare_tasks.py" P="$W/prepare" job state requeued=0 t
  local begin=$SECONDS
  if [ -z "$tpy" ]; then
    skipped "preparing data as an sbatch array: no PyTorch 2 interpreter" \
      "(DISTSAMPLER_TORCH2_PYTHON), whose tokenizers it needs"
    return
  fi
  if ! "$tpy" -c "import tokenizers" 2>/dev/null; then
    if [ "${DISTSAMPLER_REQUIRE_ALL_TESTS:-}" = 1 ]; then
      problem "preparing data as an sbatch array: $tpy has no tokenizers" \
        "(requirements/torch2.txt pins it)"
    else
      skipped "preparing data as an sbatch array: $tpy has no tokenizers"
    fi
    return
  fi
  mkdir -p "$P/log"
  "$tpy" "$helper" corpus "$P" >/dev/null && "$tpy" "$helper" reference "$P" >"$P/log/reference" ||
    { problem "the corpus and the one-machine run"; cat "$P/log/reference"; return; }
  local inputs
  inputs=$(tr '\n' ' ' <"$P/inputs")
  # The batch script: an attempt's exit status in log/task.I.ATTEMPT.code; task 1's first attempt
  # is killed mid-shard (log/kill says which shard and what the kill left).
  cat >"$P/prepare.sbatch" <<EOF
#!/bin/bash
i=\$SLURM_ARRAY_TASK_ID attempt=\${SLURM_RESTART_COUNT:-0}
run() {
  exec "$tpy" -m distsampler.prepare $inputs -o "$P/out" --tokenizer "$P/tokenizer.json" \\
    --eod '<|endoftext|>' --shard-size 64K --task \$i --tasks \$SLURM_ARRAY_TASK_COUNT --quiet
}
if [ \$i = 1 ] && [ \$attempt = 0 ]; then
  run &
  pid=\$!
  "$tpy" "$helper" wait-partial "$P/out" \$i \$SLURM_ARRAY_TASK_COUNT \$pid 60 >"$P/log/kill"
  echo \$? >>"$P/log/kill"
  wait \$pid
  echo \$? >"$P/log/task.\$i.\$attempt.code"
  exit 1
fi
(run)
code=\$?
echo \$code >"$P/log/task.\$i.\$attempt.code"
exit \$code
EOF
  job=$(sbatch --parsable --array=0-2 -n 1 --open-mode=append -o "$P/log/slurm.%a.out" \
        "$P/prepare.sbatch") || { problem "sbatch --array=0-2 prepare.sbatch"; return; }
  job=${job%%;*}
  # Until every task's last attempt wrote its status (2 min at most); task 1 requeued once it
  # failed (its record stays MinJobAge, 5 s, after).
  for _ in $(seq 600); do
    if [ $requeued = 0 ]; then
      state=$(squeue -h -t all -j "${job}_1" -o %T 2>/dev/null)
      if [ "$state" = FAILED ]; then
        # A requeued job is eligible 120 s later (SLURM's own delay): now, here.
        scontrol requeue "${job}_1" && scontrol update JobId="${job}_1" StartTime=now ||
          { problem "scontrol requeue ${job}_1, then update StartTime=now"; break; }
        requeued=1
      fi
    fi
    [ $requeued = 1 ] && [ -e "$P/log/task.0.0.code" ] && [ -e "$P/log/task.1.1.code" ] &&
      [ -e "$P/log/task.2.0.code" ] && break
    sleep 0.2
  done
  [ $requeued = 1 ] || problem "array task 1 did not fail in 2 min: not requeued"
  for t in 0.0:0 1.0:137 1.1:0 2.0:0; do  # task.attempt:status (137: SIGKILL)
    state=$(cat "$P/log/task.${t%:*}.code" 2>/dev/null)
    [ "$state" = "${t#*:}" ] ||
      problem "array task ${t%%.*}, attempt ${t:2:1}: exit status '$state', expected ${t#*:}"
  done
  if [ "$(tail -n 1 "$P/log/kill" 2>/dev/null)" != 0 ]; then
    problem "task 1's first attempt was not killed mid-shard:"; cat "$P/log/kill"
  fi
  # The array's tasks leave the queue before --finalize (2 s at most after their status).
  for _ in $(seq 20); do [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break; sleep 0.1; done
  "$tpy" -m distsampler.prepare $inputs -o "$P/out" --tokenizer "$P/tokenizer.json" \
    --eod '<|endoftext|>' --shard-size 64K --finalize >"$P/log/finalize" 2>&1 ||
    { problem "--finalize after the array:"; cat "$P/log/finalize"; }
  "$tpy" "$helper" check "$P" "$P/out" || problem "the array's folder against the one-machine run's"
  state=$(cat "$P/log/finalize")
  echo "prepare on SLURM: $(head -n 1 "$P/log/kill"); requeued ${job}_1" \
    "(SLURM_RESTART_COUNT 1); finalized ${state% in *} ($((SECONDS - begin)) s)"
}
