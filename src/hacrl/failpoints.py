"""Crash injection for fault-tolerance tests: ``HACRL_FAILPOINT=<name>@<step>`` makes the process kill
itself with SIGKILL when it reaches the named point during that step (no cleanup, like ``kill -9``).

``<name>@<step>#<rank>`` fires in that data-parallel rank only (``HACRL_RANK``, set by each worker), and
``<agent>/<name>@<step>`` (optionally ``#<rank>``) in that agent's worker only, the others going on
(an OOM kill or a lost node takes one actor, not all).

Points: ``rollout`` (after an agent's rollout), ``update`` (after an agent's update), ``save`` (an agent's
weights written into the checkpoint's temporary directory, its random stream not yet), ``checkpoint``
(agents written, checkpoint not yet renamed into place). ``rollout``, ``update`` and ``save`` fire in the
agent's worker: with the local backend that is the trainer (the first agent kills it), on Ray each agent's
actor. Unset, a failpoint costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal


def failpoint(name: str, step: int, agent: str | None = None) -> None:
    target = os.environ.get("HACRL_FAILPOINT")
    if not target:
        return
    point = f"{name}@{step}"
    points = (point, f"{point}#{os.environ.get('HACRL_RANK', '0')}")
    if target in points or (agent is not None and target in tuple(f"{agent}/{p}" for p in points)):
        os.kill(os.getpid(), signal.SIGKILL)
