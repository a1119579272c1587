"""Where a REMOTE device lives: one RPC server (``address``) or a tracker's pool (``tracker`` + ``key``).

Plain data, no tvm: the property checks its options when it is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subgraph.errors import DeviceError, DeviceUnavailableError

__all__ = ["Endpoint", "RemoteDeviceError", "parse_host_port"]

#: seconds a REMOTE device waits to connect, and for each call, unless ``timeout`` says
DEFAULT_TIMEOUT = 10.0


class RemoteDeviceError(DeviceUnavailableError):
    """A remote device is unreachable, failed, or did not answer within its timeout; the
    message names the device and its address."""


def parse_host_port(text: Any, where: str) -> tuple[str, int]:
    """``"127.0.0.1:9090"`` -> ``("127.0.0.1", 9090)``; :class:`DeviceError` naming ``where`` otherwise.

    Examples
    --------
    >>> parse_host_port("10.0.0.7:9190", "tracker")
    ('10.0.0.7', 9190)
    >>> parse_host_port("10.0.0.7", "REMOTE.0 address")
    Traceback (most recent call last):
    ...
    subgraph.errors.DeviceError: REMOTE.0 address must be 'host:port', e.g. '127.0.0.1:9090', got '10.0.0.7'
    """
    host, sep, port = str(text).rpartition(":") if isinstance(text, str) else ("", "", "")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DeviceError(f"{where} must be 'host:port', e.g. '127.0.0.1:9090', got {text!r}")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class Endpoint:
    """The RPC server (``address``) or tracker pool (``tracker`` and ``key``) a device uses."""

    device: str
    address: tuple[str, int] | None = None
    tracker: tuple[str, int] | None = None
    key: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_options(cls, device: str, options: dict[str, Any]) -> Endpoint:
        """The endpoint ``options`` give ``device``; :class:`DeviceError` when they give
        neither an address nor a tracker with a key, or both.

        >>> Endpoint.from_options("REMOTE.0", {"address": "127.0.0.1:9090"}).where
        '127.0.0.1:9090'
        >>> Endpoint.from_options("REMOTE", {"tracker": "127.0.0.1:9190", "key": "board"}).where
        "tracker 127.0.0.1:9190, key 'board'"
        """
        address, tracker, key = options.get("address"), options.get("tracker"), options.get("key")
        timeout = options.get("timeout", DEFAULT_TIMEOUT)
        example = (f"device_properties={{{device!r}: {{'address': '127.0.0.1:9090'}}}} or "
                   f"{{{device!r}: {{'tracker': '127.0.0.1:9190', 'key': 'cpu'}}}}")
        if address is not None and tracker is not None:
            raise DeviceError(f"{device}: give either 'address' (one RPC server) or 'tracker' and 'key' "
                              f"(a tracker's pool), not both; got address {address!r}, tracker {tracker!r}")
        if address is None and tracker is None:
            raise DeviceError(f"{device} has no RPC server: give {example}")
        if tracker is not None and not (isinstance(key, str) and key):
            raise DeviceError(f"{device}: a tracker needs the 'key' of the servers to ask for, got {key!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
            raise DeviceError(f"{device}: 'timeout' must be a positive number of seconds, got {timeout!r}")
        return cls(device, address=None if address is None else parse_host_port(address, f"{device} address"),
                   tracker=None if tracker is None else parse_host_port(tracker, f"{device} tracker"),
                   key=key if tracker is not None else None, timeout=float(timeout))

    @property
    def where(self) -> str:
        """The address for messages: ``host:port`` or ``tracker host:port, key 'k'``."""
        if self.address is not None:
            return f"{self.address[0]}:{self.address[1]}"
        return f"tracker {self.tracker[0]}:{self.tracker[1]}, key {self.key!r}"
