"""The programs and checks of tests/slurm/run.sh.

  once N FILE...              the first number of every line of the FILEs: each of [0, N) once
  python N PREFIX             a task of srun: init_distributed, the drop-in's epochs 0 and 1 to
                              PREFIX.dropin.e<epoch>.<rank>; node_shared=True against the
                              per-rank build, its indices and counts to PREFIX.e<epoch>.<rank>
                              and PREFIX.<rank>.json
  shared-verify N PREFIX      every index once per epoch; per node (SLURM_NODEID) local rank 0
                              built each epoch once and the others mapped it; no fallback
  mpi-once N EPOCHS DIR       mpi_checkpoint's logs in DIR: each of [0, N) once per epoch
"""
import glob
import json
import os
import sys

SEED = 3


def read_numbers(paths):
    out = []
    for path in paths:
        with open(path) as f:
            out += [int(line.split()[0]) for line in f if line.strip()]
    return out


def exactly_once(numbers, n, what):
    if sorted(numbers) != list(range(n)):
        missing = len(set(range(n)) - set(numbers))
        sys.exit(f"{what}: {len(numbers)} indices, {missing} of [0, {n}) missing, "
                 f"{len(numbers) - len(set(numbers))} repeated")


def write(path, indices):
    with open(path, "w") as f:
        f.write("".join(f"{i}\n" for i in indices))


def python(n, prefix):
    """The drop-in under init_distributed (prefix.dropin.e<epoch>.<rank>), then node_shared=True
    (prefix.e<epoch>.<rank>, prefix.<rank>.json): one interpreter start for both."""
    from distsampler import _core
    from distsampler.launch import destroy_distributed, init_distributed
    from distsampler.torch import DistributedSampler

    rank, world, local_rank = init_distributed("gloo")
    sampler = DistributedSampler(range(n), seed=SEED)
    assert (sampler.rank, sampler.num_replicas) == (rank, world)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        write(f"{prefix}.dropin.e{epoch}.{rank}", iter(sampler))

    node = _core.detect_node_group()
    sampler = DistributedSampler(range(n), seed=SEED, node_shared=True)
    plain = DistributedSampler(range(n), seed=SEED, prefetch=False, check_agreement=False)
    same = True
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        plain.set_epoch(epoch)
        got = list(sampler)
        same = same and got == list(plain)
        write(f"{prefix}.e{epoch}.{rank}", got)
    del sampler
    report = dict(_core.node_order_counts(), same=same, rank=rank, local_rank=local_rank,
                  node=int(os.environ["SLURM_NODEID"]),
                  local_world_size=node.local_world_size if node else None)
    with open(f"{prefix}.{rank}.json", "w") as f:
        json.dump(report, f)
    # destroy_distributed, not destroy_process_group alone: Debian 13's torch 2.6 can hang there
    # (distsampler.launch's docstring says why); a step hung so for its 4-minute limit once.
    destroy_distributed()


def shared_verify(n, prefix):
    for epoch in (0, 1):
        exactly_once(read_numbers(glob.glob(f"{prefix}.e{epoch}.*")), n, f"epoch {epoch}")
    reports = []
    for path in glob.glob(f"{prefix}.*.json"):
        with open(path) as f:
            reports.append(json.load(f))
    problems = []
    for r in reports:
        on_node = sum(1 for o in reports if o["node"] == r["node"])
        who = f"rank {r['rank']} (node {r['node']}, local {r['local_rank']} of {on_node})"
        if not r["same"]:
            problems.append(f"{who}: indices differ from the per-rank build")
        if r["fallbacks"] or r["local_world_size"] != on_node:
            problems.append(f"{who}: node group {r['local_world_size']}, fallbacks "
                            f"{r['fallbacks']}")
        if on_node > 1 and r["local_rank"] == 0 and not 2 <= r["built"] <= 3:
            problems.append(f"{who}: built {r['built']}, expected 2 epochs (+1 prefetched)")
        if on_node > 1 and r["local_rank"] != 0 and (r["built"] or r["mapped"] < 2):
            problems.append(f"{who}: built {r['built']}, mapped {r['mapped']}")
    if problems:
        sys.exit("\n".join(problems))
    nodes = sorted({r["node"] for r in reports})
    print(f"node_shared: {len(reports)} ranks on nodes {nodes}, one permutation per node and "
          f"epoch")


def mpi_once(n, epochs, log_dir):
    reads = {}
    for path in glob.glob(os.path.join(log_dir, "run0.rank*.log")):
        with open(path) as f:
            for line in f:
                epoch, _, _, index = map(int, line.split())
                reads.setdefault(epoch, []).append(index)
    if sorted(reads) != list(range(epochs)):
        sys.exit(f"epochs read {sorted(reads)}, expected {list(range(epochs))}")
    for epoch, indices in reads.items():
        exactly_once(indices, n, f"epoch {epoch}")


def main(argv):
    mode, n = argv[1], int(argv[2])
    if mode == "once":
        exactly_once(read_numbers(argv[3:]), n, " ".join(argv[3:]))
    elif mode == "python":
        python(n, argv[3])
    elif mode == "shared-verify":
        shared_verify(n, argv[3])
    elif mode == "mpi-once":
        mpi_once(n, int(argv[3]), argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
