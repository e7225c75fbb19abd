#!/usr/bin/env python3
"""Megatron's side of the token-stream benchmark (bench/tokens.py): megatron-core's
BlendedMegatronDatasetBuilder builds a BlendedDataset over one GPTDataset per source, on the CPU,
in one process as rank 0 of a gloo process group of one (what rank 0 of a job does; the other
ranks then load its cache), and reads sample 0. Run with the interpreter that has megatron-core (.venv):

    .venv/bin/python bench/tokens_megatron.py SPEC.json

SPEC: {"prefixes": [...], "weights": [...], "samples": N, "seq_len": L, "seed": S,
"cache": DIR}; DIR must not hold a cache of the same configuration (bench/tokens.py gives a fresh
one), so every index is built, never loaded. Prints one JSON line: the seconds from the builder's
start to sample 0 in hand, the process's peak RSS (VmHWM, interpreter and imports included), its
RSS after the imports, its private memory and mapped file pages with sample 0 read (RssAnon,
RssFile), the dataset's length, and whether helpers_cpp (the C++ extension that builds the sample
and blending indices) came compiled in the wheel or was built here.
"""
import datetime
import importlib.metadata
import json
import logging
import os
import sys
import time
import warnings


def status_mb(field):
    """A memory field of /proc/self/status in MB: VmHWM, this process's peak RSS since its exec
    (ru_maxrss would also count the process that spawned it, before the exec); RssAnon and
    RssFile, its private memory and its mapped file pages now."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss_mb():
    return status_mb("VmHWM")


def helpers_origin():
    """'wheel' when megatron-core's installed files (its RECORD) list the compiled helpers_cpp,
    'built here' when the module exists but the wheel did not ship it (compile_helpers ran)."""
    files = importlib.metadata.files("megatron-core") or []
    shipped = any("helpers_cpp" in str(f) and str(f).endswith(".so") for f in files)
    return "wheel" if shipped else "built here"


def open_group(cache):
    """Rank 0 of a gloo process group of one, its file rendezvous in `cache` (made if absent):
    BlendedDataset asks the process group for its rank when it writes a cache, as rank 0 of a
    one-GPU job would answer."""
    import torch
    cache = os.path.abspath(cache)  # file://build/... would name a host "build"
    os.makedirs(cache, exist_ok=True)
    torch.distributed.init_process_group(
        "gloo", init_method="file://" + os.path.join(cache, "rendezvous"), rank=0, world_size=1,
        timeout=datetime.timedelta(seconds=60))


def build_train(prefixes, weights, samples, seq_len, seed, cache):
    """megatron-core's BlendedMegatronDatasetBuilder over the sources with their weights: the
    training split (a BlendedDataset over one GPTDataset per source) of `samples` samples of
    seq_len + 1 tokens, its indices in `cache`. Needs open_group first."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder)
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
    config = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_len, blend=(list(prefixes), list(weights)),
        split="100,0,0", path_to_cache=os.path.abspath(cache), tokenizer=NullTokenizer(50_256),
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    train, _, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [samples, 0, 0], lambda: True, config).build()
    return train


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    # Imported here, before the import RSS and the clock: build_train finds them loaded.
    from megatron.core.datasets import blended_megatron_dataset_builder, gpt_dataset  # noqa: F401
    from megatron.core.datasets import helpers  # noqa: F401 (raises when helpers_cpp is absent)
    from megatron.core.tokenizers.text.libraries import null_tokenizer  # noqa: F401
    import torch
    cache = os.path.abspath(spec["cache"])
    open_group(cache)
    import_rss = peak_rss_mb()

    started = time.perf_counter()
    train = build_train(spec["prefixes"], spec["weights"], spec["samples"], spec["seq_len"],
                        spec["seed"], cache)
    sample = train[0]
    seconds = time.perf_counter() - started
    if sample["tokens"].shape[0] != spec["seq_len"]:
        raise RuntimeError(f"sample 0 has {sample['tokens'].shape[0]} tokens")
    print(json.dumps({"seconds": seconds, "peak_mb": peak_rss_mb(), "import_mb": import_rss,
                      "anon_mb": status_mb("RssAnon"), "file_mb": status_mb("RssFile"),
                      "length": len(train), "helpers_cpp": helpers_origin(),
                      "megatron_core": importlib.metadata.version("megatron-core"),
                      "cache_files": sum(len(files) for _, _, files in os.walk(cache))}))
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
