"""distsampler.torch.DistributedSampler(prefetch=True): the next epoch's torch permutation is
built in the background (prefetch.h), with PyTorch's indices unchanged."""
import time

import torch.utils.data as tud

import loader_helpers
from distsampler.data import DataLoader
from distsampler.torch import DistributedSampler

N = 20011


def wait_for_live(prefetcher, count, timeout=20.0):
    deadline = time.monotonic() + timeout
    while prefetcher.live_orders != count and time.monotonic() < deadline:
        time.sleep(0.01)
    return prefetcher.live_orders == count


def test_prefetched_passes_are_pytorchs_and_start_from_the_background_build():
    ours = DistributedSampler(range(N), 4, 2, seed=9)
    theirs = tud.DistributedSampler(range(N), 4, 2, seed=9)
    assert ours.prefetching.prefetching
    for epoch in range(4):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        iterator = iter(ours)
        first = next(iterator)
        # The pass holds its permutation; the next one is built beside it, and no third.
        assert wait_for_live(ours.prefetching, 2)
        assert [first] + list(iterator) == list(theirs)
        # A finished pass releases its permutation: the prefetched one is left.
        assert wait_for_live(ours.prefetching, 1)
    assert ours.prefetching.hits == 3


def test_without_prefetch_or_with_the_feistel_order_nothing_is_built_ahead():
    for sampler in (DistributedSampler(range(N), 2, 0, prefetch=False),
                    DistributedSampler(range(N), 2, 0, order="feistel"),
                    DistributedSampler(range(N), 2, 0, shuffle=False)):
        for epoch in range(2):
            sampler.set_epoch(epoch)
            assert list(sampler) == sampler.indices(epoch).tolist()
        assert not sampler.prefetching.prefetching and sampler.prefetching.hits == 0


def test_loader_workers_forked_while_a_build_runs():
    """DataLoader workers are forked while the background thread may be building: the batches
    are still the sampler's, epoch after epoch."""
    dataset = loader_helpers.Indices(N)
    sampler = DistributedSampler(dataset, 2, 1, seed=3)
    loader = DataLoader(dataset, sampler=sampler, batch_size=512, num_workers=2)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert loader_helpers.flat(loader) == sampler.indices(epoch).tolist()


def waiting_prefetcher():
    """(core, prefetcher, views): two epochs' orders alive, so the background build of epoch 2
    waits for one to be released (the worker thread waits on the condition variable)."""
    from distsampler import _core
    core = _core.DistributedSampler(N, 4, 1, 3, True, False, "torch", _core.RandpermVariant.current)
    prefetcher = _core.PrefetchingSampler(core, True)
    return core, prefetcher, [prefetcher.epoch(0), prefetcher.epoch(1)]


def child_status(pid, timeout=20.0):
    """The forked child's wait status, or None when it was still running after `timeout` s (it
    is killed then)."""
    import os
    import signal
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return code
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_a_child_forked_while_a_build_waits_builds_the_epoch_itself():
    """Issue 28: a process forked while the next epoch's build is requested (DataLoader workers
    are forked from the process that holds the sampler) has the sampler's state but not its
    thread: it builds the epoch itself instead of waiting for ever."""
    import os
    core, prefetcher, views = waiting_prefetcher()
    want = core.epoch(2)
    want = [want[i] for i in range(len(want))]
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            got = prefetcher.epoch(2)
            ok = [got[i] for i in range(len(got))] == want
        finally:
            os._exit(0 if ok else 1)
    status = child_status(pid)
    assert status == 0, "the child hung (killed after 20 s)" if status is None else status
    got = prefetcher.epoch(2)
    assert [got[i] for i in range(len(got))] == want and len(views) == 2


def test_a_child_forked_while_the_worker_waits_can_free_the_sampler():
    """A child forked while the background thread waits on the sampler's condition variable
    frees the sampler (a DataLoader worker's garbage collection did, on Debian 13) without
    waiting for ever: the variable's waiter is the parent's thread, which the child lacks, and
    glibc's pthread_cond_destroy waits for every waiter. CI's Debian 13 root hung here."""
    import gc
    import os
    _, prefetcher, views = waiting_prefetcher()
    time.sleep(0.2)  # for it to be waiting
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            views.clear()
            del prefetcher
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    del prefetcher  # the parent's sampler is its own
    status = child_status(pid)
    assert status == 0, "the child hung freeing the sampler (killed after 20 s)" \
        if status is None else status
    assert len(views) == 2


def test_node_shared_without_a_launcher_warns_and_builds_per_rank(monkeypatch):
    import pytest
    from distsampler import _core
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    ours = DistributedSampler(range(N), 4, 1, seed=3, node_shared=True)
    theirs = tud.DistributedSampler(range(N), 4, 1, seed=3)
    with pytest.warns(RuntimeWarning, match="node_shared=True"):
        assert list(ours) == list(theirs)
    assert _core.detect_node_group() is None


def test_node_shared_local_ranks_map_the_permutation_local_rank_0_built():
    import os
    from distsampler import _core
    core = _core.DistributedSampler(N, 4, 1, 3, True, False, "torch", _core.RandpermVariant.current)
    plain = _core.PrefetchingSampler(core, False)
    job = f"pytest-{os.getpid()}-{time.monotonic_ns()}"
    builder = _core.PrefetchingSampler(core, False, _core.NodeGroup(job, "n", 0, 2))
    reader = _core.PrefetchingSampler(core, False, _core.NodeGroup(job, "n", 1, 2, 10.0))
    before = _core.node_order_counts()
    for epoch in range(2):
        # Each local rank asks for an epoch once, as a training loop does (node/node_order.h):
        # local rank 0 builds it into a memfd and the reader maps what it hands over.
        views = [sampler.epoch(epoch) for sampler in (plain, builder, reader)]
        assert [[view[i] for i in range(len(view))] for view in views[1:]] == \
            [[views[0][i] for i in range(len(views[0]))]] * 2
    after = _core.node_order_counts()
    assert after["built"] - before["built"] == 2
    assert after["mapped"] - before["mapped"] == 2
    assert after["fallbacks"] == before["fallbacks"]
