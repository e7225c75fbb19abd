#!/usr/bin/python3
"""Charts the loss curves of examples/mpi_train's three variants (one world size) as a PNG.

Usage: /usr/bin/python3 examples/plot_losses.py RUN_DIR NP OUT.png
RUN_DIR holds <variant>_np<NP>.csv and <variant>_np<NP>_summary.csv as mpi_train writes them.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

VARIANTS = [
    ("correct", "distsampler, epoch advancing", "tab:green"),
    ("no-set-epoch", "epoch not advancing (forgot set_epoch)", "tab:red"),
    ("no-sampler", "no distributed sampler (every rank reads all)", "tab:blue"),
]


def read_losses(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [int(r["epoch"]) for r in rows], [float(r["loss"]) for r in rows]


def read_summary(path):
    with open(path, newline="") as f:
        return next(csv.DictReader(line for line in f if not line.startswith("#")))


def smooth(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    run_dir, np_, out = sys.argv[1], sys.argv[2], sys.argv[3]
    fig, axes = plt.subplots(2, 2, figsize=(14, 10))
    (ax_steps, ax_replay), overlay_axes = axes
    overlays = dict(zip(["no-set-epoch", "correct"], overlay_axes))
    for variant, label, color in VARIANTS:
        stem = f"{run_dir}/{variant}_np{np_}"
        epochs, losses = read_losses(stem + ".csv")
        s = read_summary(stem + "_summary.csv")
        acc = float(s["final_test_accuracy"])
        steps = range(len(losses))
        ax_steps.plot(steps, losses, color=color, alpha=0.15, linewidth=0.6)
        ax_steps.plot(steps, smooth(losses, 25), color=color, linewidth=1.6,
                      label=f"{label}: test acc {acc:.3f}, {s['steps_per_epoch']} steps/epoch")
        last = max(epochs)
        prev = [l for e, l in zip(epochs, losses) if e == last - 1]
        cur = [l for e, l in zip(epochs, losses) if e == last]
        n = min(len(prev), len(cur))
        corr = float(s["epoch_loss_correlation"])
        ax_replay.scatter(prev[:n], cur[:n], s=4, color=color, alpha=0.5,
                          label=f"{label}: r = {corr:.2f}")
        if variant in overlays:
            ax = overlays[variant]
            shown = min(n, 120)
            ax.plot(range(shown), prev[:shown], color=color, linewidth=1.2,
                    label=f"epoch {last - 1}")
            ax.plot(range(shown), cur[:shown], color="black", linewidth=0.9, linestyle="--",
                    label=f"epoch {last}")
            ax.set_title(f"{label}\nraw loss, the first {shown} steps of the last two epochs")
            ax.set_xlabel("step within the epoch")
            ax.set_ylabel("training loss")
            ax.legend(fontsize=8)
    ax_steps.set_title(f"Loss per step, mpirun -np {np_} (faint: raw, bold: 25-step mean)")
    ax_steps.set_xlabel("step")
    ax_steps.set_ylabel("training loss (mean over ranks)")
    ax_steps.set_ylim(0, 1.6)
    ax_steps.legend(fontsize=8)
    ax_replay.set_title("Step i's loss: last epoch vs the one before\n"
                        "(same batches replayed -> on the diagonal)")
    ax_replay.set_xlabel("loss at step i of the previous epoch")
    ax_replay.set_ylabel("loss at step i of the last epoch")
    lo, hi = ax_replay.get_xlim()
    ax_replay.plot([lo, hi], [lo, hi], color="gray", linewidth=0.8)
    ax_replay.legend(fontsize=8, markerscale=3)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
