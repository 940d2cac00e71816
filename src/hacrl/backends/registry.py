"""``backend.name`` → the class that runs the agents' workers.

A new backend is a class with the ``Backend`` protocol's methods (``hacrl.backends.base``) and one line here,
plus its name among ``backend.name``'s values in the config schema (``tests/backends/test_backend_protocol.py``
checks that the two lists agree and that every class has every method of the protocol).
"""

from __future__ import annotations

from hacrl.backends.base import Backend
from hacrl.backends.local import LocalBackend
from hacrl.backends.ray_actors import RayBackend
from hacrl.registry import Registry

BACKENDS: Registry[type[Backend]] = Registry("backend")
BACKENDS.add(LocalBackend.name, LocalBackend)
BACKENDS.add(RayBackend.name, RayBackend)
