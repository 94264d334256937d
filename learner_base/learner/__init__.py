"""learner: the stdlib-only helper that every learnerkit learner image ships for training scripts.

The learner contract (docs/learner-contract.md): ``learner-run`` starts the training command once the
sidecar has written ``$JOB_STATE_DIR/start``, tees its output to ``$LOG_DIR/learner.log``, signals it when
``$JOB_STATE_DIR/halt`` appears, and reports how it ended in ``$JOB_STATE_DIR/learner.exit``. A training
script uses this module to find its directories, log metrics the sidecar picks up, notice a halt, and
write and resume from atomic checkpoints::

    import learner

    learner.install_halt_handler()
    ckpt = learner.latest_checkpoint()
    step = resume_from(ckpt.path) if ckpt else 0
    limit = learner.budget()  # a sweep's trial: stop at its rung by itself
    while step < total and not learner.halt_requested() and not (limit and limit.reached(step)):
        loss = train_step()
        step += 1
        learner.log_metrics(step, loss=loss)
        if limit and limit.reached(step):
            limit = learner.next_budget(step) or limit  # promoted in place: train on in this process
    with learner.new_checkpoint(step) as path:
        save(path / "model.pt")
"""

from learner.budget import Budget, budget, parameters
from learner.checkpoints import Checkpoint, latest_checkpoint, new_checkpoint
from learner.halt import halt_requested, install_halt_handler
from learner.metrics import log_metrics
from learner.modelfile import load_model, save_model
from learner.paths import checkpoint_dir, data_dir, log_dir, model_dir, result_dir, state_dir
from learner.promotion import next_budget

__all__ = [
    "Budget",
    "Checkpoint",
    "budget",
    "checkpoint_dir",
    "data_dir",
    "halt_requested",
    "install_halt_handler",
    "latest_checkpoint",
    "load_model",
    "log_dir",
    "log_metrics",
    "model_dir",
    "new_checkpoint",
    "next_budget",
    "parameters",
    "result_dir",
    "save_model",
    "state_dir",
]
