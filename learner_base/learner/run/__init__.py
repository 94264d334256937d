"""The implementation of ``learner-run``, the entrypoint of every learner image.

Layers, each importing only those below it: ``cli`` (argv, exit status) -> ``supervise`` (start, run, halt,
signals) -> ``settings``, ``scrub``, ``tee``, ``exitfile`` -> ``errors``. Stdlib only; it runs under the
system ``python3``, never the learner's venv.
"""

from learner.run.cli import main

__all__ = ["main"]
