"""``lakewrap graph``: the project's DAG as layers of nodes, printed as text, DOT, Mermaid or JSON.

The nodes are :mod:`lakewrap.listing`'s: the selected models and, as inputs, the seeds and sources
they read (with no selector: every model, seed and source). An edge goes from a table to each
selected model that reads it. A node's layer is 0 when it reads no node of the graph, else one more
than the highest layer of what it reads, so every edge points to a higher layer. Nothing here opens
a lake.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakewrap import __version__
from lakewrap.listing import SCHEMA_VERSION, Node, load, select

FORMATS = ("text", "dot", "mermaid", "json")


@dataclass(frozen=True)
class Graph:
    """Nodes by layer (then by name) and edges (from, to) as node keys."""

    nodes: list[tuple[int, Node]]
    edges: list[tuple[str, str]]

    def label(self, node: Node) -> str:
        """What the node is: a model's strategy, ``seed`` or ``source``."""
        return node.spec.strategy.kind if node.spec is not None else node.kind

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``lakewrap graph --format json`` (``docs/looking.md``, "JSON")."""
        names = {n.key: n.name for _, n in self.nodes}
        return {"schema_version": SCHEMA_VERSION, "lakewrap_version": __version__,
                "nodes": [{"id": n.name, "type": n.kind, "path": n.path,
                           "strategy": n.spec.strategy.kind if n.spec is not None else None,
                           "tags": list(n.spec.tags) if n.spec is not None else [], "layer": layer}
                          for layer, n in self.nodes],
                "edges": [{"from": names[a], "to": names[b]} for a, b in self.edges]}


def graph(root: Path, selectors: Sequence[str] = (), exclude: Sequence[str] = ()) -> Graph:
    """The graph of the selected models and the seeds and sources they read."""
    listed, everything = select(load(root), selectors, exclude)
    chosen = {n.key: n for n in listed.nodes}
    inputs = {n.key: n for n in (*everything.seeds, *everything.sources)}
    for model in listed.models:  # a selection's inputs that are no model: its leaves
        for key in model.reads:
            if key not in chosen and key in inputs:
                chosen[key] = inputs[key]
    edges = sorted({(key, m.key) for m in listed.models for key in m.reads if key in chosen})
    drawn = {m.key for m in listed.models}
    layer = layers([(m.key, m.reads) for m in listed.models], [k for k in chosen if k not in drawn])
    nodes = sorted(((layer[k], n) for k, n in chosen.items()), key=lambda p: (p[0], p[1].key))
    return Graph(nodes, edges)


def layers(models: Sequence[tuple[str, Iterable[str]]], inputs: Iterable[str]) -> dict[str, int]:
    """The layer of every node: ``inputs`` (seeds, sources) 0; each model, given in dependency
    order with what it reads, one more than the highest layer of what it reads among the nodes
    (0 when it reads none of them). The one rule of ``lakewrap graph`` and the docs site."""
    layer = dict.fromkeys(inputs, 0)
    for key, reads in models:  # what a model reads has its layer already
        layer[key] = 1 + max((layer[k] for k in reads if k in layer), default=-1)
    return layer


def text(g: Graph) -> str:
    """One block per layer; each node with what it is and, for models, what it reads."""
    names = {n.key: n.name for _, n in g.nodes}
    reads: dict[str, list[str]] = {}
    for a, b in g.edges:
        reads.setdefault(b, []).append(names[a])
    width = max((len(n.name) for _, n in g.nodes), default=0)
    kinds = max((len(g.label(n)) for _, n in g.nodes), default=0)
    out: list[str] = []
    current = None
    for layer, node in g.nodes:
        if layer != current:
            current = layer
            out.append(f"layer {layer}")
        line = f"  {node.name.ljust(width)}  {g.label(node).ljust(kinds)}"
        if node.key in reads:
            line += "  <- " + ", ".join(reads[node.key])
        out.append(line.rstrip())
    return "\n".join(out) + "\n" if out else ""


def _dot_id(text: str) -> str:
    """A DOT quoted string: backslashes and double quotes escaped, newlines as ``\\n``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_DOT_SHAPES = {"model": "box", "seed": "cylinder", "source": "cylinder"}


def dot(g: Graph) -> str:
    """A Graphviz ``digraph`` (``dot -Tsvg``): models as boxes, seeds and sources as cylinders,
    one rank per layer left to right."""
    names = {n.key: n.name for _, n in g.nodes}
    out = ["digraph lakewrap {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=11];']
    for _, node in g.nodes:
        attrs = [f"label={_dot_id(node.name + chr(10) + g.label(node))}", f"shape={_DOT_SHAPES[node.kind]}"]
        if node.path:
            attrs.append(f"tooltip={_dot_id(node.path)}")
        out.append(f"  {_dot_id(node.name)} [{', '.join(attrs)}];")
    out += [f"  {_dot_id(names[a])} -> {_dot_id(names[b])};" for a, b in g.edges]
    out.append("}")
    return "\n".join(out) + "\n"


def _mermaid_text(text: str) -> str:
    """A Mermaid quoted label: the characters its grammar reads specially as entity codes."""
    return "".join(f"#{ord(c)};" if c in '"#<>&;`' or ord(c) < 32 else c for c in text)


_MERMAID_STYLES = {"model": "fill:#eef3ff,stroke:#4a6fb3", "seed": "fill:#effaef,stroke:#4a9a4a",
                   "source": "fill:#f5f5f5,stroke:#888888"}


def mermaid(g: Graph) -> str:
    """A Mermaid ``flowchart LR``: nodes ``n0``, ``n1`` ... labelled with their names (models as
    rectangles, seeds and sources as cylinders), one class per kind."""
    ids = {n.key: f"n{i}" for i, (_, n) in enumerate(g.nodes)}
    out = ["flowchart LR"]
    for _, node in g.nodes:
        label = f'"{_mermaid_text(node.name)}<br/>{_mermaid_text(g.label(node))}"'
        shape = f"[{label}]" if node.kind == "model" else f"[({label})]"
        out.append(f"  {ids[node.key]}{shape}")
    out += [f"  {ids[a]} --> {ids[b]}" for a, b in g.edges]
    for kind in ("model", "seed", "source"):
        members = [ids[n.key] for _, n in g.nodes if n.kind == kind]
        if members:
            out.append(f"  classDef {kind} {_MERMAID_STYLES[kind]}")
            out.append(f"  class {','.join(members)} {kind}")
    return "\n".join(out) + "\n"
