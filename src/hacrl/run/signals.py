"""SIGINT and SIGTERM routed to one handler while a block runs, the previous handlers back after it: the
trainer's stop requests and ``hacrl compare --jobs``'s parent both install theirs this way."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def stop_signals_to(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM while the block runs, on the main thread only (elsewhere Python cannot
    install handlers, and the block runs without them)."""
    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
