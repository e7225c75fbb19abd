"""The upstream-suite hook itself (sitecustomize.py), in fresh interpreters as the suites see it:
each mode replaces what it promises, unset it replaces nothing, and a wrong setting fails the
process. Needs torchdata: run on the PyTorch 2 stack only, where a missing torchdata fails
here instead of skipping."""
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON_DIR = os.environ.get("DISTSAMPLER_PYTHON_DIR", os.path.join(ROOT, "build", "python"))


def run(code, mode=None, sabotage=None, python_dir=PYTHON_DIR):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, python_dir]))
    env.pop("DISTSAMPLER_UPSTREAM_MODE", None)
    env.pop("DISTSAMPLER_UPSTREAM_SABOTAGE", None)
    if mode is not None:
        env["DISTSAMPLER_UPSTREAM_MODE"] = mode
    if sabotage is not None:
        env["DISTSAMPLER_UPSTREAM_SABOTAGE"] = sabotage
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=HERE,
                          capture_output=True, text=True, timeout=120)


def check(code, **kwargs):
    proc = run(code, **kwargs)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_ours_replaces_the_loader_and_both_distributed_samplers():
    check("""
        import torch.utils.data
        from torchdata.stateful_dataloader import StatefulDataLoader
        from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler
        import distsampler.data, distsampler.torch
        ours = distsampler.torch.DistributedSampler
        assert issubclass(StatefulDataLoader, distsampler.data.DataLoader), StatefulDataLoader
        assert torch.utils.data.distributed.DistributedSampler is ours
        assert torch.utils.data.DistributedSampler is ours
        assert StatefulDistributedSampler is ours
        assert torch.utils.data.RandomSampler is torch.utils.data.sampler.RandomSampler
        StatefulDataLoader[int]  # generic, as torchdata's
        # torchdata's argument taken and ignored; the checkpoint is ours, exact
        loader = StatefulDataLoader(list(range(10)), batch_size=2, snapshot_every_n_steps=5,
                                    sampler=ours(list(range(10)), 1, 0, seed=3))
        it = iter(loader)
        first = [next(it).tolist() for _ in range(2)]
        state = loader.state_dict()
        rest = [batch.tolist() for batch in it]
        resumed = StatefulDataLoader(list(range(10)), batch_size=2,
                                     sampler=ours(list(range(10)), 1, 0, seed=3))
        resumed.load_state_dict(state)
        assert [batch.tolist() for batch in resumed] == rest
        """, mode="ours")


def test_samplers_keeps_torchdatas_loader_and_seeds_ours_from_the_generator():
    check("""
        import torch, torch.utils.data
        import torchdata.stateful_dataloader.stateful_dataloader as td
        from torchdata.stateful_dataloader import StatefulDataLoader
        import distsampler.torch
        assert StatefulDataLoader is td.StatefulDataLoader
        assert torch.utils.data.DistributedSampler is distsampler.torch.DistributedSampler
        g = torch.Generator()
        g.manual_seed(13)
        sampler = torch.utils.data.RandomSampler(range(20), generator=g)
        assert type(sampler) is distsampler.torch.DistributedSampler
        settings = (sampler.num_replicas, sampler.rank, sampler.shuffle, sampler.seed)
        assert settings == (1, 0, True, 13), settings
        plain = torch.utils.data.RandomSampler(range(20))  # no generator: torch's
        assert isinstance(plain, torch.utils.data.sampler.RandomSampler) and len(plain) == 20
        """, mode="samplers")


def test_unset_the_hook_replaces_nothing_and_a_wrong_setting_or_no_distsampler_fails():
    check("""
        import torch.utils.data
        from torchdata.stateful_dataloader import StatefulDataLoader
        assert torch.utils.data.DistributedSampler.__module__ == "torch.utils.data.distributed"
        assert StatefulDataLoader.__module__.startswith("torchdata.")
        """)
    proc = run("pass", mode="all")
    assert proc.returncode != 0 and "allowed: ours, samplers" in proc.stderr, proc.stderr
    proc = run("import torch", mode="ours", python_dir=os.path.join(HERE, "no-such-folder"))
    assert proc.returncode != 0 and "No module named 'distsampler'" in proc.stderr, proc.stderr


def test_the_sabotage_drops_each_passs_last_index():
    out = check("""
        import torch.utils.data
        print(list(torch.utils.data.DistributedSampler(range(9), 2, 1, shuffle=False)))
        """, mode="ours", sabotage="drop-last")
    assert out.split() == ["[1,", "3,", "5,", "7]"]  # ours: [1, 3, 5, 7, 0]
