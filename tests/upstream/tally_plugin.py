"""pytest plugin of tests/upstream/run.py (-p tally_plugin): writes, as JSON lines to the file
named by DISTSAMPLER_UPSTREAM_REPORT, the classes the suite will test (so run.py can refuse a
run where the hook is not in effect) and every report of every test, subtests included."""
import json
import os


def _name(cls) -> str:
    """The class and the one it derives from, e.g. sitecustomize.StatefulDataLoader <
    distsampler._loader.DataLoader."""
    return " < ".join(f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__[:2])


def _write(record) -> None:
    with open(os.environ["DISTSAMPLER_UPSTREAM_REPORT"], "a") as out:
        out.write(json.dumps(record) + "\n")


def pytest_configure(config):
    import torch
    import torch.utils.data.distributed
    stack = {"kind": "stack", "torch": torch.__version__, "torch_file": torch.__file__,
             "DistributedSampler": _name(torch.utils.data.distributed.DistributedSampler),
             "RandomSampler": _name(torch.utils.data.RandomSampler)}
    try:
        import torchdata
        import torchdata.stateful_dataloader as stateful
        import torchdata.stateful_dataloader.sampler as stateful_sampler
    except ImportError as error:
        stack["torchdata"] = f"not importable: {error}"
    else:
        stack.update(torchdata=torchdata.__version__, torchdata_file=torchdata.__file__,
                     StatefulDataLoader=_name(stateful.StatefulDataLoader),
                     StatefulDistributedSampler=_name(
                         stateful_sampler.StatefulDistributedSampler))
    _write(stack)


def pytest_report_header(config):
    import torch
    import torch.utils.data.distributed
    return (f"upstream harness: mode {os.environ.get('DISTSAMPLER_UPSTREAM_MODE') or 'none'}, "
            f"torch {torch.__version__}, DistributedSampler is "
            f"{_name(torch.utils.data.distributed.DistributedSampler)}")


def pytest_collectreport(report):
    if report.failed:
        _write({"kind": "collect", "nodeid": report.nodeid, "outcome": "failed",
                "longrepr": str(report.longrepr)[-2000:]})


def pytest_runtest_logreport(report):
    _write({"kind": "test", "nodeid": report.nodeid, "when": report.when,
            "outcome": report.outcome, "subtest": hasattr(report, "context"),
            "longrepr": str(report.longrepr)[-2000:] if report.failed else ""})
