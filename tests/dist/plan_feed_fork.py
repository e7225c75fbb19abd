"""DataLoader workers forked while the loop's process reads the next step's rows ahead (a
TokenStream read with 0 workers, then loader(num_workers=2)): the workers must not wait for the
reading thread, which stayed in the parent. Run by ctest with tests/support/read_latency.cc
preloaded (every pread 20 ms), so that the read ahead is still in flight when the workers fork.

Usage: plan_feed_fork.py PYTHON_PACKAGE_DIR   (fails after 120 s if the workers hang)
"""
import os
import subprocess
import sys
import tempfile


def child():
    from distsampler.indexed import write_indexed
    from distsampler.tokens import TokenStream
    root = tempfile.mkdtemp()
    sources = []
    for s in range(3):
        docs = [[(s * 31 + d * 7 + t) % 50000 for t in range(1 + (d * 13) % 90)]
                for d in range(4000)]
        write_indexed(os.path.join(root, f"s{s}"), docs)
        sources.append((os.path.join(root, f"s{s}"), 1.0 + s))

    def stream(planner):
        return TokenStream(sources, seq_len=31, global_batch=8, seed=2, rank=1, world_size=2,
                           micro_batch=2, planner=planner)

    fed, inline = stream("node"), stream("inline")
    it = iter(fed.loader(num_workers=0))
    first = [next(it)["tokens"] for _ in range(4)]  # steps 0, 1; step 2's rows being read ahead
    got = first + [b["tokens"] for _, b in zip(range(8), fed.loader(num_workers=2))]
    want = iter(inline.loader(num_workers=0))
    ref = [next(want)["tokens"] for _ in range(4)]
    ref += [b["tokens"] for _, b in zip(range(8), inline.loader(num_workers=2))]
    assert len(got) == 12 and all(bool((a == b).all()) for a, b in zip(got, ref))
    print("ok: workers forked during a read ahead read 8 batches, the inline stream's")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        sys.path.insert(0, sys.argv[2])
        child()
    elif len(sys.argv) == 2:
        try:
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "child", sys.argv[1]],
                                  timeout=120, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            sys.exit("FAIL: the DataLoader workers hung for 120 s")
        print(done.stdout + done.stderr[-3000:])
        sys.exit(done.returncode)
    else:
        sys.exit(__doc__)
