"""Writes a small demo corpus of random documents in Megatron's indexed format (.bin/.idx), with
distsampler.indexed's writer, for the commands of docs/tokens.md ("Edits"):

    PYTHONPATH=build/python /usr/bin/python3 examples/tokens/write_indexed.py OUT_DIR
        [--sources N] [--documents D] [--seed S]

OUT_DIR/s<i>.bin/.idx per source i (D documents of 0 to 300 tokens each) and OUT_DIR/extra.bin/
.idx (D / 4 more, to append).
"""
import argparse
import os
import random

from distsampler.indexed import write_indexed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--sources", type=int, default=2)
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out_dir, exist_ok=True)

    def documents(count):
        return [[rng.randrange(50000) for _ in range(rng.randint(0, 300))] for _ in range(count)]
    for i in range(args.sources):
        write_indexed(os.path.join(args.out_dir, f"s{i}"), documents(args.documents))
    write_indexed(os.path.join(args.out_dir, "extra"), documents(max(1, args.documents // 4)))


if __name__ == "__main__":
    main()
