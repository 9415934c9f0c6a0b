"""Network interfaces of this node (standard library only): names and IPv4 addresses.

`launch.master_interface` (ib0, eth0, ...) makes MASTER_ADDR the address of that interface on the first
host rather than its hostname, which may resolve to a management network (the seeds loop over
interface names for the same reason).
"""

from __future__ import annotations

import fcntl
import socket
import struct

SIOCGIFADDR = 0x8915


def names() -> list[str]:
    return sorted(name for _, name in socket.if_nameindex())


def ipv4(name: str) -> str | None:
    """The interface's IPv4 address, or None (no such interface, or no IPv4 address on it)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(packed[20:24])
    except OSError:
        return None
    finally:
        s.close()
