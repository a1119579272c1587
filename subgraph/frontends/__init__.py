"""Model frontends: read models into a :class:`~subgraph.graph.Graph` and write them back."""

__all__: list[str] = []
