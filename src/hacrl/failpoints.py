"""Crash injection for fault-tolerance tests: ``HACRL_FAILPOINT=<name>@<step>`` makes the process kill
itself with SIGKILL when it reaches the named point during that step (no cleanup, like ``kill -9``).

``<name>@<step>#<rank>`` fires in that data-parallel rank only (``HACRL_RANK``, set by each worker).

Points: ``rollout`` (after an agent's rollout), ``update`` (after an agent's update), ``checkpoint``
(agents written, checkpoint not yet renamed into place). ``rollout`` and ``update`` fire in the agent's
worker: with the local backend that is the trainer (the first agent kills it), on Ray each agent's actor. Unset, a failpoint costs one
dictionary lookup.
"""

from __future__ import annotations

import os
import signal


def failpoint(name: str, step: int) -> None:
    target = os.environ.get("HACRL_FAILPOINT")
    if target and target in (f"{name}@{step}", f"{name}@{step}#{os.environ.get('HACRL_RANK', '0')}"):
        os.kill(os.getpid(), signal.SIGKILL)
