"""``python -m subgraph``: the ``subgraph`` command (see :mod:`subgraph.cli`)."""

from subgraph.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
