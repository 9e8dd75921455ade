"""Helpers shared by the tests that check for leftover processes and listening sockets."""

from __future__ import annotations

from pathlib import Path


def listening_ports() -> set[int]:
    """Local TCP ports in LISTEN state, from /proc/net/tcp{,6}."""
    ports: set[int] = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
