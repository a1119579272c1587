"""``subgraph devices``: the registered devices, and what a TVM RPC tracker offers.

Examples
--------
>>> print(format_tracker({"keys": {"board": {"free": 1, "pending": 0}},
...                       "servers": [("board", "10.0.0.7:9090")]}, "10.0.0.2:9190"))
tracker 10.0.0.2:9190
 key    free  pending  servers
 board     1        0  10.0.0.7:9090
use: -d HETERO:REMOTE.0,NUMPY --device-option REMOTE.tracker=10.0.0.2:9190 --device-option REMOTE.key=KEY
"""

from __future__ import annotations

import argparse
from typing import Any

from subgraph.properties import registered_devices
from subgraph.properties.registry import PROPERTIES

__all__ = ["add_parser"]


def _available(device: str) -> str:
    if device not in ("TVM", "REMOTE"):
        return "yes"
    from subgraph.properties.tvm.intake.support import tvm_installed

    return "yes" if tvm_installed() else "no: apache-tvm is not installed"


def format_local() -> str:
    """One row per registered device: its property, whether it can run here, its options.

    >>> print(format_local().splitlines()[0])
     device  property  available  options
    """
    rows = [(device, name, _available(device), ", ".join(PROPERTIES[name].known_options or ("any",)))
            for device, name in registered_devices().items()]
    wide = max(len(r[0]) for r in rows) + 1
    lines = [f" {'device':<{wide}} {'property':<9} {'available':<10} options"]
    lines += [f" {d:<{wide}} {p:<9} {a:<10} {o}" for d, p, a, o in rows]
    lines.append("instances: NAME.N (REMOTE.0, TVM.1, ...), each with its own options")
    return "\n".join(lines)


def format_tracker(summary: dict[str, Any], tracker: str) -> str:
    """A tracker's keys (free and pending sessions) and its servers, as a table."""
    servers: dict[str, list[str]] = {}
    for key, address in summary["servers"]:
        servers.setdefault(key, []).append(address)
    keys = list(dict.fromkeys([*summary["keys"], *servers]))
    lines = [f"tracker {tracker}"]
    if not keys:
        return "\n".join([*lines, "no servers are registered"])
    wide = max(4, *map(len, keys)) + 1
    lines.append(f" {'key':<{wide}} {'free':>4}  {'pending':>7}  servers")
    for key in keys:
        queue = summary["keys"].get(key, {"free": 0, "pending": 0})
        lines.append(f" {key:<{wide}} {queue['free']:>4}  {queue['pending']:>7}  "
                     f"{', '.join(servers.get(key, [])) or '-'}")
    lines.append(f"use: -d HETERO:REMOTE.0,NUMPY --device-option REMOTE.tracker={tracker} "
                 "--device-option REMOTE.key=KEY")
    return "\n".join(lines)


def devices_command(args: argparse.Namespace) -> int:
    """``subgraph devices [--tracker HOST:PORT] [--timeout S]``."""
    print(format_local())
    if args.tracker:
        from subgraph.properties.remote.session import tracker_summary  # imports tvm

        print()
        print(format_tracker(tracker_summary(args.tracker, args.timeout), args.tracker))
    return 0


def add_parser(sub: Any, formatter: Any, positive_float: Any) -> None:
    """The ``devices`` subcommand on the ``subgraph`` parser's subparsers ``sub``."""
    d = sub.add_parser("devices", help="list the devices, and the servers a TVM RPC tracker offers",
                       formatter_class=formatter,
                       description="Print the registered devices (their property, whether they run here, their "
                                   "options) and, with --tracker, the keys and servers the tracker pools "
                                   "(TVM's tracker summary: free and pending sessions per key).")
    d.add_argument("--tracker", metavar="HOST:PORT", help="a TVM RPC tracker (python -m tvm.exec.rpc_tracker)")
    d.add_argument("--timeout", type=positive_float, default=10.0, metavar="SECONDS",
                   help="how long to wait for the tracker (default 10)")
    d.set_defaults(func=devices_command, verbose=False)
