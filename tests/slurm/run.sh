#!/usr/bin/env bash
# A real SLURM cluster on this host, as a user runs distsampler on one (issue 21): munged,
# slurmctld and two slurmd (nodes ds1 and ds2, distinct ports, no cgroups: proctrack/linuxproc,
# task/none, oversubscribed, each slurmd its own spool and TmpFS for PMIx), all on loopback,
# started here and stopped here (exactly those processes, also on failure). Under srun -n 4
# (one node) and -N2 (both): the CLI in launcher mode, the PyTorch drop-in with
# distsampler.launch.init_distributed, node_shared=True (one permutation per node, nothing left
# in /dev/shm), the MPI examples (srun --mpi=pmix, and salloc + mpirun); an sbatch array job;
# a program run without srun in a batch script refusing in one line. Every index is read once.
# Then `python -m distsampler.prepare` as an sbatch array, a task killed mid-shard and requeued,
# on TORCH2_PYTHON (its tokenizers; skipped, saying so, without it): tests/slurm/prepare.sh.
#
# Usage: tests/slurm/run.sh SOURCE_DIR BUILD_DIR [PYTHON [TORCH2_PYTHON]]   (root: installs
# slurm-wlm and munge when missing, as scripts/deps.sh does; exit 77, skipped and saying so, when
# not root)
set -u
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
py=${3:-/usr/bin/python3}
. "$src/scripts/deps.sh"
# A skip says why, here and in DISTSAMPLER_SKIP_LOG (scripts/test.sh prints it at the end).
skipped() {
  echo "skipped: $*"
  [ -z "${DISTSAMPLER_SKIP_LOG:-}" ] || echo "slurm: $*" >>"$DISTSAMPLER_SKIP_LOG"
}
if [ "$(id -u)" != 0 ]; then skipped "starting munged, slurmctld and slurmd needs root"; exit 77; fi
ensure_packages $DISTSAMPLER_SLURM_PACKAGES || exit 1

W=$(mktemp -d /tmp/distsampler-slurm.XXXXXX)
chmod 755 "$W"
daemons=()
fail=0
stop_daemons() {
  local p
  # The jobs first (their slurmstepd outlive slurmd), then exactly the daemons started here.
  if [ ${#daemons[@]} -gt 1 ]; then
    scancel --quiet -u root 2>/dev/null  # this cluster's jobs (SLURM_CONF)
    for _ in $(seq 60); do
      [ -z "$(squeue -h 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${daemons[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for p in "${daemons[@]}"; do kill -KILL "$p" 2>/dev/null; done
  if [ $fail = 0 ]; then rm -rf "$W"; else echo "logs kept in $W"; fi
}
trap stop_daemons EXIT
trap 'exit 1' TERM INT HUP
problem() { echo "FAIL: $*"; fail=1; }

# Free loopback ports: slurmctld, the two slurmd, and srun's range.
read -r p_ctld p_ds1 p_ds2 p_srun < <("$py" - <<'EOF'
import random, socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks], random.randint(41000, 47000))
EOF
)

dd if=/dev/urandom of="$W/munge.key" bs=1024 count=1 status=none
chmod 600 "$W/munge.key"
munged -F --force --key-file="$W/munge.key" --socket="$W/munge.sock" --pid-file="$W/munged.pid" \
  --log-file="$W/munged.log" --seed-file="$W/munged.seed" >"$W/munged.out" 2>&1 &
daemons+=($!)

host=$(hostname -s)
mkdir -p "$W/state" "$W/spool" "$W/tmp/ds1" "$W/tmp/ds2" "$W/out"
conf() {  # conf TMPFS
  cat <<EOF
ClusterName=dstest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$p_ctld
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$W/munge.sock
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool/%n
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.%n.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.%n.log
TmpFS=$1
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SrunPortRange=$p_srun-$((p_srun + 400))
KillWait=5
MinJobAge=5
InactiveLimit=0
PlugStackConfig=$W/plugstack.conf
NodeName=ds1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p_ds1 CPUs=4 State=UNKNOWN
NodeName=ds2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p_ds2 CPUs=4 State=UNKNOWN
PartitionName=ds Nodes=ds1,ds2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}
: >"$W/plugstack.conf"
conf "$W/tmp" >"$W/slurm.conf"
conf "$W/tmp/ds1" >"$W/slurm.ds1.conf"
conf "$W/tmp/ds2" >"$W/slurm.ds2.conf"
export SLURM_CONF="$W/slurm.conf"
# A hung step is ended by SLURM (minutes), not by the test's timeout.
export SLURM_TIMELIMIT=4 SBATCH_TIMELIMIT=4 SALLOC_TIMELIMIT=6
slurmctld -D -i -f "$W/slurm.conf" >"$W/slurmctld.out" 2>&1 &
daemons+=($!)
for node in ds1 ds2; do
  slurmd -D -N "$node" -f "$W/slurm.$node.conf" >"$W/slurmd.$node.out" 2>&1 &
  daemons+=($!)
done
up=0
for _ in $(seq 120); do
  [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle')" = 2 ] && { up=1; break; }
  sleep 0.5
done
if [ $up = 0 ]; then
  fail=1
  echo "FAIL: the two slurmd did not come up"; sinfo -N 2>&1
  tail -n 20 "$W"/*.log "$W"/*.out
  exit 1
fi
echo "cluster up: slurmctld :$p_ctld, slurmd ds1 :$p_ds1, ds2 :$p_ds2 ($(srun --version))"

bin="$build/bin/distsampler"
check="$src/tests/slurm/checks.py"
export PYTHONPATH="$build/python" OMP_NUM_THREADS=1 TORCH_CPP_LOG_LEVEL=ERROR
shm_names() { ls /dev/shm | grep '^distsampler' ; }  # /dev/shm is shared with other jobs
shm_before=$(shm_names)
start=$SECONDS
n=1200  # a multiple of 3 and 4: no padding, every index exactly once

# 1. The CLI in launcher mode.
for layout in "-n 4" "-N 2 -n 4" "-N 2 -n 3"; do
  tag=cli${layout// /}
  srun $layout -o "$W/out/$tag.%t" "$bin" indices --size $n --epoch 1 --from-env ||
    problem "srun $layout distsampler indices --from-env"
  "$py" "$check" once "$n" "$W/out/$tag".* || problem "srun $layout: the CLI's indices"
done

# 2. The drop-in with the one-call helper, and 3. node_shared=True, in one program.
for layout in "-n 4" "-N 2 -n 4"; do
  tag=py${layout// /}
  srun $layout "$py" "$check" python "$n" "$W/out/$tag" ||
    problem "srun $layout: the drop-in with init_distributed, node_shared=True"
  for e in 0 1; do
    "$py" "$check" once "$n" "$W/out/$tag".dropin.e$e.* || problem "srun $layout: drop-in epoch $e"
  done
  "$py" "$check" shared-verify "$n" "$W/out/$tag" || problem "srun $layout: node_shared"
done
[ "$(shm_names)" = "$shm_before" ] || problem "/dev/shm: new $(shm_names)"

# 4. The MPI examples: direct launch with PMIx when this SLURM has it, and salloc + mpirun.
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_gds=hash
mpi_run() {  # mpi_run TAG LAUNCHER...
  local tag=$1
  shift
  mkdir -p "$W/out/$tag"
  "$@" "$build/bin/mpi_checkpoint" --size $n --epochs 2 --log-dir "$W/out/$tag" --attempt 0 \
    --checkpoint "$W/out/$tag/ckpt" >"$W/out/$tag.log" 2>&1 ||
    { problem "$* mpi_checkpoint"; tail -n 20 "$W/out/$tag.log"; }
  "$py" "$check" mpi-once "$n" 2 "$W/out/$tag" || problem "$*: mpi_checkpoint's indices"
  "$@" "$build/bin/mpi_node_order" >"$W/out/$tag.node.log" 2>&1 && grep -q "^ok:" "$W/out/$tag.node.log" ||
    { problem "$* mpi_node_order"; tail -n 20 "$W/out/$tag.node.log"; }
}
# The probe: 4 ranks under srun --mpi=pmix through MPI_Init, node groups and MPI_Finalize
# (mpi_node_order, which ctest's mpi_node_order also runs under mpirun). Debian 13's SLURM 24.11
# and Open MPI 5.0.7 fail it (MPI_Init: PMIX_ERR_UNPACK_READ_PAST_END_OF_BUFFER, or slurmstepd's
# pmix_v5 error handler with status -61), which is theirs.
if [[ $(srun --mpi=list 2>&1) != *pmix* ]]; then
  skipped "srun --mpi=pmix (this SLURM has no PMIx plugin: $(srun --mpi=list 2>&1 | tr '\n' ' '));" \
    "MPI only through salloc + mpirun"
elif ! probe=$(srun --mpi=pmix -n 4 "$build/bin/mpi_node_order" 2>&1) || [[ $probe != *ok:* ]]; then
  skipped "srun --mpi=pmix (this SLURM's PMIx plugin cannot start this Open MPI's ranks:" \
    "$(printf '%s\n' "$probe" | grep -m1 -i 'error' | cut -c1-160));" \
    "MPI only through salloc + mpirun"
else
  mpi_run pmix1 srun --mpi=pmix -n 4
  mpi_run pmix2 srun --mpi=pmix -N 2 -n 4
fi
# --bind-to none: Open MPI 5 refuses to bind 4 ranks to the allocation's CPUs otherwise.
mpi_run salloc salloc -N 2 -n 4 mpirun --bind-to none -np 4

# 5. An sbatch array job: each task of the array is an epoch, read by srun -n 2 in its script;
# and the same program run in the script without srun refuses in one line.
cat >"$W/array.sh" <<EOF
#!/bin/bash
"$bin" indices --size $n --from-env >/dev/null 2>"$W/out/batch.\$SLURM_ARRAY_TASK_ID.err"
echo \$? >"$W/out/batch.\$SLURM_ARRAY_TASK_ID.code"
srun -o "$W/out/array.\$SLURM_ARRAY_TASK_ID.%t" "$bin" indices --size $n \\
  --epoch \$SLURM_ARRAY_TASK_ID --from-env
EOF
sbatch --wait --array=0-1 -n 2 -o "$W/out/array.%a.out" "$W/array.sh" >/dev/null ||
  problem "sbatch --array"
for e in 0 1; do
  "$py" "$check" once "$n" "$W/out/array.$e".[0-9]* || problem "sbatch array task $e"
  code=$(cat "$W/out/batch.$e.code" 2>/dev/null)
  if [ "$code" != 2 ] || [ "$(wc -l <"$W/out/batch.$e.err")" != 1 ] ||
     ! grep -q "without SLURM_STEP_ID" "$W/out/batch.$e.err"; then
    problem "batch script without srun: exit '$code', expected 2 and one line:"
    cat "$W/out/batch.$e.err"
  fi
done
echo "the batch script without srun: $(cat "$W/out/batch.0.err")"

# 6. Preparing data as an sbatch array: a task killed mid-shard, requeued; the one-machine bytes.
. "$src/tests/slurm/prepare.sh"
prepare_on_slurm "${4:-}"

[ "$(shm_names)" = "$shm_before" ] || problem "/dev/shm: new $(shm_names)"
if [ $fail = 0 ]; then echo "slurm: all checks passed ($((SECONDS - start)) s)"; fi
exit $fail
