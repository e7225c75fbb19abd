"""The batch_log of tests/dist/framework_kill_resume.py litgpt's LitGPT runs
(``--data.init_args.batch_log litgpt_ledger.log``): each stream batch LitGPT takes is written as
"step sequence sha256" lines (the hash of the row of seq_len + 1 tokens LitGPT trains on) to
$LEDGER_DIR/tokens.a$LEDGER_ATTEMPT.rank<rank>.tsv; the rank $KILL_RANK SIGKILLs itself on taking
step $KILL_STEP's first batch, or inside Fabric's save of step $KILL_IN_SAVE's checkpoint (the file
written, not yet moved to step-N/lit_model.pth). LEDGER_NO_STREAM_STATE=1 is the broken variant the check must
catch: StreamLoader saves and restores nothing, so LitGPT's checkpoints lack the stream's state
and LitGPT's own resume continues the stream from its start."""
import hashlib
import os
import signal

import torch

from distsampler import litgpt

_ledger = None
if os.environ.get("KILL_IN_SAVE"):  # inside Fabric's save of step-N: written, not yet moved in
    from fsspec.implementations.local import LocalFileOpener
    _commit = LocalFileOpener.commit
    _target = os.path.join(f"step-{int(os.environ['KILL_IN_SAVE']):08d}", "lit_model.pth")

    def _killed_in_save(self):
        if str(self.path).endswith(_target):
            os.kill(os.getpid(), signal.SIGKILL)
        _commit(self)
    LocalFileOpener.commit = _killed_in_save
if os.environ.get("LEDGER_NO_STREAM_STATE") == "1":
    litgpt.StreamLoader.state_dict = lambda self: {}
    litgpt.StreamLoader.load_state_dict = lambda self, state: None


def log(batch):
    global _ledger
    rank = int(os.environ.get("RANK", "0"))
    if batch["step"] == int(os.environ.get("KILL_STEP", "-1")) and \
            rank == int(os.environ.get("KILL_RANK", "0")):
        os.kill(os.getpid(), signal.SIGKILL)
    if _ledger is None:
        _ledger = open(os.path.join(os.environ["LEDGER_DIR"],
                                    f"tokens.a{os.environ['LEDGER_ATTEMPT']}.rank{rank}.tsv"), "a")
    rows = torch.cat([batch["tokens"], batch["labels"][:, -1:]], dim=1)
    for i, k in enumerate(batch["sequence"].tolist()):
        digest = hashlib.sha256(rows[i].to(torch.int64).numpy().tobytes()).hexdigest()
        _ledger.write(f"{batch['step']} {k} {digest}\n")
    _ledger.flush()
