"""A small GPT trained on a token stream (distsampler.tokens) under torchrun: data-parallel (DDP,
gloo on the CPU), checkpointing the stream with the model, resumable on any number of ranks.

The data: the sources examples/tokens/prepare_corpus.py writes (Megatron .bin/.idx files, byte
tokens), mixed by token weight (--weights), packed into sequences of --seq-len tokens,
--global-batch sequences a step, each rank reading its share through DataLoader workers. The
global stream of sequences depends on neither the number of ranks nor of workers, so a checkpoint
taken on W ranks resumes on any W' with the same global batch, and the run reads the same
sequences, in the same order, as an uninterrupted one.

    .venv/bin/python examples/tokens/prepare_corpus.py build/tokens/corpus
    OMP_NUM_THREADS=1 PYTHONPATH=build/python .venv/bin/python -m distsampler.torchrun \\
        --nproc_per_node=2 --redirects 2 --tee 2 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \\
        examples/tokens/train_gpt.py --data build/tokens/corpus --out build/tokens/run \\
        --steps 200 --checkpoint-every 20
    (stopped; later, on 3 ranks, the same command with --nproc_per_node=3 --resume --attempt 1)

Edits from a step on (docs/tokens.md, "Edits"), the flags of `distsampler tokens plan`, each
repeatable: --change STEP:W0,W1,... (the weights, in corpus.json's order of sources), --ramp
A:B:W0,W1,..., --append STEP:S=PREFIX (a corpus.json name, such as prepare_corpus.py's extra
python_more, or shard prefixes joined by commas, relative to --data; S = 3 adds a fourth source,
weighted by a --change at STEP), --skip STEP:FILE (lines "source document"). A resume declares
the edits before its checkpoint's step again (the stream refuses one that drops any, naming
"edits"), and may add edits of later steps.

The model: a decoder-only transformer (--layers, --d-model, --heads; a learned position table of
seq_len rows indexed by the batch's position_ids, pre-norm, tied embeddings), each token attending
to the earlier tokens of its own document (the batch's segment_ids), AdamW, a fixed seed, float64 (--dtype). The loss is the mean over the global batch's
tokens (loss_mask), whatever W: each rank's sum is scaled by W over the global token count, and
DDP averages.

Rank 0 saves OUT/checkpoint.pt every --checkpoint-every steps and at the end: {"model",
"optimizer", "stream": the stream's state_dict(), "step": steps done}, atomically (a temporary
name, then os.replace). --resume loads it when present; the step comes from the stream.

Logs, appended, so that a killed run's lines stay: rank 0 writes OUT/loss.csv (attempt,
world_size, step, loss: the global batch's mean); each rank writes
OUT/tokens.a<attempt>.rank<r>.tsv, one line per sequence it trained on, "step sequence sha256":
the hash of the row's tokens, labels, loss_mask, position_ids and segment_ids, keyed by the
global sequence index. --kill-rank/--kill-step make that rank SIGKILL itself on receiving that step's batch, as a
crash would. --chart PNG: rank 0 draws the loss at the end, after the --compare LABEL=DIR runs
(the first is the one the others' differences are drawn from; plot_loss).
"""
import argparse
import csv
import hashlib
import json
import math
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from distsampler.launch import destroy_distributed, init_distributed
from distsampler.tokens import TokenStream, edits_from_flags


class Block(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv, self.proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        self.fc, self.out = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def forward(self, x, allowed):
        m, length, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(m, length, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        attention = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(m, length, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab_size, seq_len, d_model, heads, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        for module in self.modules():  # GPT-2's initialisation: small logits at step 0
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, tokens, segment_ids, position_ids):
        length = tokens.shape[1]
        # Each token sees the earlier tokens of its own document (segment_ids: a token's document
        # in its row; padding, -1, sees only padding and is not in the loss), at its offset in
        # that segment (position_ids, 0 at every segment's first token, always below seq_len).
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        allowed = (causal & (segment_ids[:, :, None] == segment_ids[:, None, :]))[:, None]
        x = self.embed(tokens) + self.position(position_ids)
        for block in self.blocks:
            x = block(x, allowed)
        return self.ln(x) @ self.embed.weight.t()  # tied embeddings


def row_hashes(batch):
    """sha256 of each row: tokens, labels, loss_mask, position_ids and segment_ids (fixed
    dtypes)."""
    fields = [batch["tokens"].to(torch.int64), batch["labels"].to(torch.int64),
              batch["loss_mask"].to(torch.float32), batch["position_ids"].to(torch.int64),
              batch["segment_ids"].to(torch.int64)]
    return [hashlib.sha256(b"".join(f[i].contiguous().numpy().tobytes() for f in fields))
            .hexdigest() for i in range(len(batch["tokens"]))]


def make_stream(args, corpus):
    weights = dict(w.split("=") for w in args.weights.split(","))
    names = [s["name"] for s in corpus["sources"]]
    if sorted(weights) != sorted(names):
        raise SystemExit(f"--weights names {sorted(weights)}; the corpus has {names}")
    sources = []
    for source in corpus["sources"]:
        prefixes = [os.path.join(args.data, p) for p in source["prefixes"]]
        sources.append((prefixes if len(prefixes) > 1 else prefixes[0],
                        float(weights[source["name"]])))
    options = {"window": args.window} if args.packing == "best-fit" else {}
    if args.locality:
        block, _, window = args.locality.partition(":")
        options["locality"] = [(int(block), int(window))] * len(sources)
    if args.split:
        options["split"] = [float(f) for f in args.split.split(",")]
    return TokenStream(sources=sources, seq_len=args.seq_len, global_batch=args.global_batch,
                       seed=args.seed, packing=args.packing, micro_batch=args.micro_batch,
                       **options, **edits(args, corpus))


def held_out_loss(args, model, stream, dtype):
    """The mean loss over every token of the stream's validation split (one pass, the same
    sequences whatever W), all ranks together; written to OUT/held_out.json by rank 0."""
    model.eval()
    total = torch.zeros(2, dtype=dtype)  # loss summed over the tokens, tokens
    with torch.no_grad():
        for batch in stream.validation("valid").loader(num_workers=args.workers):
            logits = model(batch["tokens"], batch["segment_ids"], batch["position_ids"])
            per_token = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(),
                                        reduction="none")
            mask = batch["loss_mask"].to(dtype).flatten()
            total += torch.stack([(per_token * mask).sum(), mask.sum()])
    dist.all_reduce(total)
    model.train()
    loss, tokens = float(total[0] / total[1]), int(total[1])
    if dist.get_rank() == 0:
        with open(os.path.join(args.out, "held_out.json"), "w") as f:
            json.dump({"loss": loss, "tokens": tokens, "step": args.steps}, f)
        print(f"held-out loss after step {args.steps - 1}: {loss:.4f} over {tokens} tokens "
              "of the validation split", flush=True)


def edits(args, corpus):
    """TokenStream's edits from the edit flags, parsed as `distsampler tokens plan` parses them
    (distsampler.tokens.edits_from_flags); an --append PREFIX that names one of corpus.json's
    sources or extras stands for its shards, and every prefix is relative to --data."""
    flags = [(f"--{kind}", value) for kind in ("change", "ramp", "append", "skip")
             for value in getattr(args, kind)]
    try:
        out = edits_from_flags(flags)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    named = {s["name"]: s["prefixes"] for s in corpus["sources"] + corpus.get("extra", [])}

    def resolve(shards):
        if len(shards) == 1 and shards[0] in named:
            shards = named[shards[0]]
        return [os.path.join(args.data, p) for p in shards]
    out["appends"] = [(step, source, resolve(shards)) for step, source, shards in out["appends"]]
    return out


def save(path, model, optimizer, stream, step):
    """Write to a temporary name, then rename: a crash mid-write leaves the previous one."""
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "stream": stream.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def train(args, rank, world):
    with open(os.path.join(args.data, "corpus.json")) as f:
        corpus = json.load(f)
    if args.global_batch % world:
        raise SystemExit(f"--global-batch {args.global_batch} is not a multiple of {world} ranks")
    per_rank = args.global_batch // world
    micro = args.micro_batch or per_rank
    if per_rank % micro:
        raise SystemExit(f"--micro-batch {micro} does not divide {per_rank} sequences a rank")
    stream = make_stream(args, corpus)
    torch.manual_seed(args.seed)  # the same initial model on every rank and every run
    model = GPT(corpus["vocab_size"], args.seq_len, args.d_model, args.heads, args.layers)
    # float64 by default: on another W the gradient all-reduce adds in another order, and this
    # small, noisy training amplifies float32's rounding of that to a visible gap in the loss
    # within a few hundred steps; float64's stays far below anything a chart shows.
    dtype = getattr(torch, args.dtype)
    model.to(dtype)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.01)
    path = os.path.join(args.out, "checkpoint.pt")
    done = 0
    if args.resume and os.path.exists(path):
        checkpoint = torch.load(path)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        stream.load_state_dict(checkpoint["stream"])  # saved on any number of ranks
        done = checkpoint["step"]
    if rank == 0:
        print(f"{'resuming after' if done else 'starting at'} step {done} on {world} ranks, "
              f"{args.workers} workers each", flush=True)
    hashes = open(os.path.join(args.out, f"tokens.a{args.attempt}.rank{rank}.tsv"), "a")
    losses = None
    if rank == 0:
        new = not os.path.exists(os.path.join(args.out, "loss.csv"))
        losses = open(os.path.join(args.out, "loss.csv"), "a")
        if new:
            losses.write("attempt,world_size,step,loss\n")
    batches = iter(stream.loader(num_workers=args.workers))
    step = done
    while step < args.steps:
        micro_batches = [next(batches) for _ in range(per_rank // micro)]
        step = int(micro_batches[0]["step"])  # the stream's own count: nothing else to keep in step
        if rank == args.kill_rank and step == args.kill_step:
            os.kill(os.getpid(), signal.SIGKILL)
        # The loss is the global batch's mean over its tokens: this rank's sum scaled by
        # W / (tokens of the global batch), then DDP's average over the W ranks.
        count = torch.stack([b["loss_mask"].to(dtype).sum() for b in micro_batches]).sum()
        dist.all_reduce(count)
        optimizer.zero_grad()
        total = torch.zeros((), dtype=dtype)
        for i, batch in enumerate(micro_batches):
            # Padding (best-fit) holds TokenStream's pad_token, 0, and loss_mask 0.
            logits = ddp(batch["tokens"], batch["segment_ids"], batch["position_ids"])
            per_token = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(),
                                        reduction="none")
            loss = (per_token * batch["loss_mask"].to(dtype).flatten()).sum()
            if i + 1 < len(micro_batches):
                with ddp.no_sync():
                    (loss * world / count).backward()
            else:
                (loss * world / count).backward()
            total += loss.detach()
        optimizer.step()
        dist.all_reduce(total)
        for batch in micro_batches:
            for k, h in zip(batch["sequence"].tolist(), row_hashes(batch)):
                hashes.write(f"{step} {k} {h}\n")
        hashes.flush()  # a SIGKILL loses nothing written before it
        step += 1
        if rank == 0:
            losses.write(f"{args.attempt},{world},{step - 1},{float(total / count)!r}\n")
            losses.flush()
            if step % 10 == 0 or step == args.steps:
                print(f"step {step - 1}: loss {float(total / count):.4f}", flush=True)
            if (args.checkpoint_every and step % args.checkpoint_every == 0) or step == args.steps:
                save(path, model, optimizer, stream, step)
    hashes.close()
    if args.split:
        held_out_loss(args, model, stream, dtype)
    if rank == 0:
        losses.close()
        if args.chart:
            runs = [tuple(c.split("=", 1)) for c in args.compare] + [(run_label(args.out),
                                                                       args.out)]
            plot_loss(runs, args.chart)
            print(f"chart: {args.chart}", flush=True)


def read_loss(run_dir):
    """{step: (loss, attempt, world_size)} of a run, each step from the last attempt that trained
    it (a resumed attempt starts at its checkpoint, so it redoes what the killed one did after
    it)."""
    by_step = {}
    with open(os.path.join(run_dir, "loss.csv"), newline="") as f:
        for row in csv.DictReader(f):
            by_step[int(row["step"])] = (float(row["loss"]), int(row["attempt"]),
                                         int(row["world_size"]))
    return dict(sorted(by_step.items()))


def run_label(run_dir):
    """'W=2 -> 3 -> 1' from the world sizes of the attempts whose steps a run kept."""
    worlds = []
    for _, attempt, world in read_loss(run_dir).values():
        if not worlds or worlds[-1][0] != attempt:
            worlds.append((attempt, world))
    return "W=" + " -> ".join(str(w) for _, w in worlds)


def plot_loss(runs, png):
    """The loss of each (label, run dir) against the step; below, each run's absolute difference
    from the first (log scale), with a dotted line where a resumed attempt took over."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 1]})
    first = read_loss(runs[0][1])
    for i, (label, run_dir) in enumerate(runs):
        loss = read_loss(run_dir)
        steps = list(loss)
        top.plot(steps, [v[0] for v in loss.values()], label=label,
                 linestyle="-" if i == 0 else "--", linewidth=1.5 if i == 0 else 1.2)
        if i:
            common = [s for s in steps if s in first]
            gap = [(s, abs(loss[s][0] - first[s][0])) for s in common]
            half = [g for s, g in gap if s < common[-1] // 2]
            print(f"|{label} minus {runs[0][0]}|: at most {max(half):.1e} over steps "
                  f"[0, {common[-1] // 2}), {gap[-1][1]:.1e} at step {common[-1]}", flush=True)
            bottom.semilogy([s for s, g in gap if g], [g for _, g in gap if g], ".",
                            markersize=2, label=f"|{label} minus {runs[0][0]}| (0: not drawn)",
                            color=f"C{i}")
        for step, (_, attempt, world) in loss.items():
            if step and loss.get(step - 1, (0, attempt))[1] != attempt:
                for axis in (top, bottom):
                    axis.axvline(step, color="gray", linestyle=":", linewidth=1)
                top.annotate(f"W={world} from step {step}", (step, 1), xycoords=("data",
                             "axes fraction"), xytext=(3, -4), textcoords="offset points",
                             rotation=90, va="top", fontsize=8, color="gray")
    top.set_ylabel("loss (nats per byte token)")
    top.set_title("Tiny GPT on a token stream: uninterrupted vs killed and resumed")
    top.legend()
    bottom.set_ylabel("|difference|")
    if len(runs) > 1:
        bottom.legend(fontsize=8)
    bottom.set_xlabel("step")
    figure.tight_layout()
    figure.savefig(png, dpi=100)
    plt.close(figure)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="prepare_corpus.py's output folder")
    p.add_argument("--out", required=True, help="checkpoint and logs")
    p.add_argument("--weights", default="python=0.5,copyright=0.3,fortunes=0.2",
                   help="token weight of each source, by name")
    p.add_argument("--steps", type=int, required=True, help="train until this many steps are done")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--global-batch", type=int, default=12, help="sequences a step, all ranks")
    p.add_argument("--micro-batch", type=int, default=None,
                   help="sequences a rank's batch (gradient accumulation; default: its share)")
    p.add_argument("--packing", choices=["concat", "best-fit"], default="concat")
    p.add_argument("--window", type=int, default=64, help="best-fit's window of documents")
    p.add_argument("--seed", type=int, default=0)
    edit = p.add_argument_group("edits from a step on (docs/tokens.md, \"Edits\"; repeatable; "
                                "a resume must declare the edits before its checkpoint again)")
    edit.add_argument("--change", action="append", default=[], metavar="STEP:W0,W1,...",
                      help="the weights of every source, in corpus order (new ones included)")
    edit.add_argument("--ramp", action="append", default=[], metavar="A:B:W0,W1,...",
                      help="the weights move linearly from those in force at step A to these at B")
    edit.add_argument("--append", action="append", default=[], metavar="STEP:S=PREFIX",
                      help="PREFIX's documents join source S (S = the number of sources: a new "
                      "source, weighted by a --change at STEP); PREFIX: a corpus.json name, or "
                      "shard prefixes joined by commas, relative to --data")
    edit.add_argument("--skip", action="append", default=[], metavar="STEP:FILE",
                      help="the documents FILE lists (lines \"source document\") are never read "
                      "from STEP on")
    p.add_argument("--locality", metavar="BLOCK:WINDOW",
                   help="every source in the locality order for object stores (docs/tokens.md)")
    p.add_argument("--split", metavar="TRAIN,VALID,TEST",
                   help="train on the train split; at the end, the loss over the valid split")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers a rank")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                   help="the model's parameters and arithmetic")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps (0: only at the end)")
    p.add_argument("--resume", action="store_true", help="load OUT/checkpoint.pt if present")
    p.add_argument("--attempt", type=int, default=0, help="names this launch's token logs")
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--chart", help="PNG: rank 0 draws the loss at the end")
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=DIR",
                   help="another run's OUT to draw beside this one (repeatable)")
    return p.parse_args(argv)


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    rank, world, _ = init_distributed("gloo")
    try:
        train(args, rank, world)
    finally:
        destroy_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
