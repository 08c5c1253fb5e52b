"""A free TCP port on this host, for a process group's store or a launcher's master port.

The port is free when asked; whoever binds it next wins, which is why callers ask just before
they launch. Fixed defaults (DeepSpeed's launcher: 29500) collide as soon as two runs share a
host (two workflow jobs, two test workers)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports unused on ``host`` (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
