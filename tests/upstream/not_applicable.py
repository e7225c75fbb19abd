"""Upstream tests that test something distsampler does not claim, each with its reason
(docs/upstream-suites.md, "Not applicable"). run.py counts a listed test that does not pass as
"not applicable" instead of "fail", and a listed test that passes as a pass, naming the entry as
stale; a failure of any test not listed here is a failure of ours.

Keys are pytest node ids relative to the upstream checkout; values are (modes, reason), modes
being the hook modes (sitecustomize.MODES) the entry holds in.
"""
BOTH = ("ours", "samplers")
OURS = ("ours",)

_TD = "test/stateful_dataloader/"

_STATEFUL_DISTRIBUTED_SAMPLER = (
    "StatefulDistributedSampler's own interface (yielded, next_yielded, the {'yielded': n} "
    "state): ours has PyTorch's attributes and its own state")
_WORKER_INFO = (
    "written for a torch whose WorkerInfo raised RuntimeError on assignment; torch 2.13's raises "
    "dataclasses.FrozenInstanceError, so it fails with torchdata's own loader too")
_IN_ORDER = ("in_order=False with workers, which our loader refuses in one line (a checkpoint "
             "could not name what the loop received)")

NOT_APPLICABLE = {
    # test_sampler.py
    **{f"{_TD}test_sampler.py::TestDataLoader::{name}": (BOTH, _STATEFUL_DISTRIBUTED_SAMPLER)
       for name in ("test_initialization_StatefulDistributedSampler", "test_sampler_state_dict",
                    "test_sampler_load_state_dict", "test_sampler_next_yielded")},
    # test_dataloader.py (torchdata's copy of PyTorch's suite)
    **{f"{_TD}test_dataloader.py::{cls}::test_get_worker_info": (BOTH, _WORKER_INFO)
       for cls in ("TestDataLoader", "TestDataLoaderPersistentWorkers")},
    **{f"{_TD}test_dataloader.py::TestOutOfOrderDataLoader::{name}": (OURS, _IN_ORDER)
       for name in ("test_in_order_index_ds", "test_in_order_iterable_ds")},
    # test_state_dict.py. A dataset's own state: the dataset or its iterator implements
    # state_dict, or __getitem__ draws from the worker's torch RNG, which torchdata saves and
    # restores per worker; our loader's state is the sampler's and does not checkpoint a user
    # dataset or worker RNGs. Listed only from the classes run so far: a run of the whole file
    # counts the others as failures until they are listed here, by id, from its failures.
    f"{_TD}test_state_dict.py::TestStatefulDataLoaderMap_shard1::test_random_state": (
        OURS, "__getitem__ draws from the worker's torch RNG (a dataset's own state, which "
              "our loader does not checkpoint)"),
    f"{_TD}test_state_dict.py::TestNumWorkersMismatch_shard3::test_num_workers_mismatch": (
        OURS, "torchdata refuses a state saved with another num_workers; ours resumes it, on "
              "purpose"),
    f"{_TD}test_state_dict.py::TestInitialState_shard0::test_init_error": (
        OURS, "torchdata starts its workers in iter(), so a failing worker_init_fn raises "
              "there; ours, like torch's DataLoader, raises at the first batch"),
    **{f"{_TD}test_state_dict.py::TestOutOfOrderWithCheckpointing::{name}": (OURS, _IN_ORDER)
       for name in ("test_out_of_order_index_ds",
                    "test_out_of_order_iterable_ds_one_completed_worker",
                    "test_out_of_order_iterable_ds_no_completed_workers")},
}
