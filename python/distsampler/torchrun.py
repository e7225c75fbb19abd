"""torchrun for a PyTorch built without libuv: ``python -m distsampler.torchrun ARGS`` is
``torchrun ARGS`` (``python -m torch.distributed.run ARGS``), unchanged where this torch has
libuv, which is every PyTorch from the package index.

From PyTorch 2.4 on, torchrun's rendezvous and agent create ``TCPStore`` servers with the libuv
backend by default, and a build without libuv refuses them ("use_libuv was requested but PyTorch
was build without libuv support", then ``RendezvousConnectionError``). Debian 13's python3-torch
2.6 is such a build, so plain torchrun fails there on every script. ``USE_LIBUV=0`` does not
help: only ``init_process_group``'s ``env://`` and ``tcp://`` read it, not the launcher's own
stores. Here, when a libuv server store is refused, every ``TCPStore`` this process creates
defaults to the classic backend (an explicit ``use_libuv`` is kept), and the workers' ``env://``
hosts its own store on rank 0 with ``USE_LIBUV=0`` instead of joining the agent's.
"""
import os
import sys
from typing import Any, List, Optional

from .launch import libuv_available

__all__ = ["main"]


def _classic_tcp_store() -> None:
    """Makes torch.distributed.TCPStore default to use_libuv=False (before torch.distributed.run
    and the rendezvous modules import it by name)."""
    import torch.distributed as dist

    base: Any = dist.TCPStore  # type: ignore[attr-defined]  # C, not re-exported

    class TCPStore(base):  # type: ignore[misc]  # torch's class, whatever torch
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    TCPStore.__name__ = TCPStore.__qualname__ = base.__name__
    TCPStore.__module__ = base.__module__
    dist.TCPStore = TCPStore  # type: ignore[attr-defined]
    # The workers' env:// reads USE_LIBUV, but a client of the agent's store
    # (TORCHELASTIC_USE_AGENT_STORE=True) is made with libuv: the workers get a store of their
    # own from rank 0, as before torch 2.3 (the dynamic handlers' documented opt-out, and the
    # static handler's property, which has none).
    os.environ["USE_LIBUV"] = "0"
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    # The static handler (torchrun's default) hands the workers its own port, where rank 0 cannot
    # listen: they get a free one, published in the store as the dynamic handlers do.
    from torch.distributed.elastic.rendezvous import api, static_tcp_rendezvous

    static: Any = static_tcp_rendezvous.StaticTCPRendezvous  # patched below
    static.use_agent_store = property(lambda self: False)
    next_rendezvous = static.next_rendezvous

    def next_rendezvous_own_store(self: Any) -> Any:
        info = next_rendezvous(self)
        rendezvous: Any = api  # torch 2.4's names; _classic_store_applies() checked them
        store_info = rendezvous.RendezvousStoreInfo.build(info.rank, info.store,
                                                          self.master_addr)
        return rendezvous.RendezvousInfo(info.store, info.rank, info.world_size, store_info)

    static.next_rendezvous = next_rendezvous_own_store
    # ... and the launcher gives a static job's workers no address and port (the agent's would
    # override what the rendezvous says).
    from torch.distributed.launcher import api as launcher

    setattr(launcher, "_get_addr_and_port", lambda parameters: (None, None))


def _classic_store_applies() -> bool:
    """Whether torchrun here has stores to move off libuv: torch 2.4 on (the libuv default and
    the rendezvous store info the workers' own store is published with)."""
    from torch.distributed.elastic.rendezvous import api

    return hasattr(api, "RendezvousStoreInfo")


def main(argv: Optional[List[str]] = None) -> None:
    # DISTSAMPLER_TORCHRUN_CLASSIC_STORE=1: the classic stores even where libuv works (the tests
    # run this path on every torch that has it; also a way around a libuv problem).
    forced = os.environ.get("DISTSAMPLER_TORCHRUN_CLASSIC_STORE") == "1"
    if (forced or not libuv_available()) and _classic_store_applies():
        _classic_tcp_store()
    from torch.distributed.run import main as torchrun_main

    torchrun_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
