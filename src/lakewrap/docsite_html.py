"""The documentation site's pages, rendered from :func:`lakewrap.docsite.collect`'s data.

A static site, every asset local (no network at view time): ``index.html`` (the DAG drawn as an
SVG graph, the lists of models and sources), ``models/<schema>.<name>.html`` and
``sources/<schema>.<name>.html``, ``assets/site.css``, ``assets/site.js`` (pan and zoom, search,
the column lineage panel) and ``assets/search.js`` (the search index, a script so that the site
also works opened from the file system). Every text is HTML-escaped; the JSON a page embeds is
escaped for a ``<script>`` element.
"""

from __future__ import annotations

import json
import shutil
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

ASSETS = ("site.css", "site.js")
LABEL = 26  # characters of a name a graph node shows (the whole name is its tooltip)


def write_site(data: dict[str, Any], out: Path) -> list[Path]:
    """Write the site to ``out`` (emptied first); returns the files written."""
    if out.exists():
        shutil.rmtree(out)
    written: list[Path] = []

    def put(rel: str, text: str) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)

    for name in ASSETS:
        put(f"assets/{name}", resources.files("lakewrap").joinpath("docsite_assets", name).read_text("utf-8"))
    put("assets/search.js", "window.LAKEWRAP_INDEX = " + _script_json(search_index(data)) + ";\n")
    put("data.json", json.dumps(data, indent=1, default=str) + "\n")
    put("index.html", index_page(data))
    for m in data["models"]:
        put(page_of(m), relation_page(data, m))
    for s in data["sources"]:
        put(page_of(s), relation_page(data, s))
    return written


def page_of(rel: dict[str, Any]) -> str:
    folder = "models" if rel["kind"] == "model" else "sources"
    return f"{folder}/{rel['key']}.html"


def search_index(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per model and source: name, kind, page, description, column names."""
    return [{"name": r["name"], "kind": r["kind"], "href": page_of(r), "description": r.get("description") or "",
             "columns": [c["name"] for c in r["columns"] or []], "tags": r.get("tags", [])}
            for r in [*data["models"], *data["sources"]]]


def _script_json(value: Any) -> str:
    return json.dumps(value, default=str).replace("</", "<\\/").replace("<!--", "<\\!--")


def _page(data: dict[str, Any], title: str, body: str, depth: int, extra: str = "") -> str:
    up = "../" * depth
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)} · lakewrap docs</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{up}assets/site.css">
</head>
<body data-root="{up}">
<header class="top">
  <a class="brand" href="{up}index.html">{escape(data['project'])} <span>lakewrap docs</span></a>
  <div class="search">
    <input id="search" type="search" placeholder="Search models, sources, columns" autocomplete="off"
           aria-label="Search">
    <ul id="search-results" hidden></ul>
  </div>
</header>
<main>
{body}
</main>
<footer>Generated {escape(data['generated_at'])} by <code>lakewrap docs generate</code>. {escape(data['lake'])}</footer>
{extra}<script src="{up}assets/search.js"></script>
<script src="{up}assets/site.js"></script>
</body>
</html>
"""


def index_page(data: dict[str, Any]) -> str:
    g = data["graph"]
    names = {r["key"]: r for r in [*data["models"], *data["sources"]]}
    pos = {n["key"]: n for n in g["nodes"]}
    edges = []
    for a, b in g["edges"]:
        x1, y1 = pos[a]["x"] + 200, pos[a]["y"] + 18
        x2, y2 = pos[b]["x"], pos[b]["y"] + 18
        mid = (x1 + x2) / 2
        edges.append(f'<path class="edge" d="M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}" '
                     f'data-from="{escape(a)}" data-to="{escape(b)}" marker-end="url(#arrow)"/>')
    nodes = []
    for n in g["nodes"]:
        rel = names.get(n["key"])
        label = rel["name"] if rel else n["key"]
        sub = (rel.get("strategy") or rel["kind"]) if rel else "table"
        href = page_of(rel) if rel else "#"
        short = label if len(label) <= LABEL else label[:LABEL - 1] + "…"
        nodes.append(f'<a class="node {n["kind"]}" href="{escape(href)}" data-key="{escape(n["key"])}">'
                     f'<title>{escape(label)}</title>'
                     f'<rect x="{n["x"]}" y="{n["y"]}" width="200" height="36" rx="6"/>'
                     f'<text x="{n["x"] + 10}" y="{n["y"] + 16}">{escape(short)}</text>'
                     f'<text class="sub" x="{n["x"] + 10}" y="{n["y"] + 30}">{escape(sub)}</text></a>')
    svg = (f'<svg id="graph" class="graph" viewBox="0 0 {g["width"]} {g["height"]}" '
           f'data-width="{g["width"]}" data-height="{g["height"]}" role="img" aria-label="The model DAG">'
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>'
           f'<g id="viewport">{"".join(edges)}{"".join(nodes)}</g></svg>')
    lists = []
    for title, rows in (("Models", data["models"]), ("Sources", data["sources"])):
        items = "".join(f'<li><a href="{escape(page_of(r))}">{escape(r["name"])}</a> '
                        f'<span class="muted">{escape(r.get("strategy") or r["kind"])}</span>'
                        + (f' — {escape(r["description"])}' if r.get("description") else "") + "</li>"
                        for r in rows)
        lists.append(f'<section><h2>{title} ({len(rows)})</h2><ul class="list">{items}</ul></section>')
    body = f"""<h1>The DAG</h1>
<p class="muted">Drag to pan, scroll or use the buttons to zoom; click a node to open its page.</p>
<div class="graph-tools"><button type="button" data-zoom="in" title="Zoom in">+</button>
<button type="button" data-zoom="out" title="Zoom out">−</button>
<button type="button" data-zoom="reset" title="Fit">fit</button></div>
<div class="graph-box">{svg}</div>
<p class="lake-note">{escape(data['lake'])}</p>
{_runs(data)}
<div class="columns2">{''.join(lists)}</div>"""
    return _page(data, "DAG", body, 0)


def _runs(data: dict[str, Any]) -> str:
    if not data.get("runs"):
        return ""
    keys = ("run_id", "command", "status", "started_at", "steps", "succeeded", "failed", "skipped")
    head = "".join(f"<th>{k.replace('_', ' ')}</th>" for k in keys)
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(r.get(k) or '-'))}</td>" for k in keys) + "</tr>"
                   for r in data["runs"])
    return f'<h2>Recent runs</h2><table class="runs"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _links(keys: list[str], names: dict[str, dict[str, Any]]) -> str:
    if not keys:
        return '<span class="muted">none</span>'
    out = []
    for k in keys:
        rel = names.get(k)
        out.append(f'<a href="../{escape(page_of(rel))}">{escape(rel["name"])}</a>' if rel else escape(k))
    return ", ".join(out)


def relation_page(data: dict[str, Any], rel: dict[str, Any]) -> str:
    names = {r["key"]: r for r in [*data["models"], *data["sources"]]}
    is_model = rel["kind"] == "model"
    parts = [f'<h1>{escape(rel["name"])} <span class="badge">{escape(rel.get("strategy") or rel["kind"])}</span></h1>']
    if rel.get("description"):
        parts.append(f'<p class="description">{escape(rel["description"])}</p>')
    facts = []
    if rel.get("path"):
        facts.append(("file", f'<code>{escape(rel["path"])}</code>'))
    if is_model:
        facts += [("materialized", escape(str(rel["materialized"] or "literal"))),
                  ("partitioned", escape(rel["partitioning"] or "no")),
                  ("tags", escape(", ".join(rel["tags"])) or '<span class="muted">none</span>')]
    facts += [("upstream", _links(rel["upstream"], names)), ("downstream", _links(rel["downstream"], names))]
    parts.append('<dl class="facts">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
    if is_model and rel["annotations"]:
        parts.append("<h2>Annotations</h2><pre class=\"sql\">" + escape("\n".join(rel["annotations"])) + "</pre>")
    parts.append(_columns(rel))
    parts.append('<section id="lineage-panel" class="panel"><h2>Column lineage</h2>'
                 '<p class="muted" id="lineage-hint">Choose a column above to see the columns it is computed '
                 'from, down to the sources, and the model columns computed from it.</p>'
                 '<div id="lineage-body"></div></section>')
    if is_model:
        parts.append(_tests(rel))
    parts.append(_partitions(data, rel))
    parts.append(_history(data, rel))
    if is_model:
        parts.append(f'<h2>SQL</h2><pre class="sql">{escape(rel["sql"])}</pre>')
        if rel["compiled"]:
            when = f' for partition {escape(rel["compiled_for"])}' if rel["compiled_for"] else ""
            parts.append(f'<details class="compiled"><summary>Compiled SQL ({escape(rel["strategy"])}{when})'
                         f'</summary><pre class="sql">{escape(rel["compiled"])}</pre></details>')
    lineage = (f'<script type="application/json" id="lineage-data">{_script_json(rel["lineage"])}</script>\n'
               f'<script type="application/json" id="pages-data">'
               f'{_script_json({k: page_of(r) for k, r in names.items()})}</script>\n')
    return _page(data, rel["name"], "\n".join(parts), 1, lineage)


def _columns(rel: dict[str, Any]) -> str:
    cols = rel["columns"]
    if cols is None:
        return ('<h2>Columns</h2><p class="warning">The columns are not known'
                + (f': {escape(rel["columns_note"])}' if rel.get("columns_note") else "") + ".</p>")
    rows = "".join(
        f'<tr><td><button type="button" class="column" data-column="{escape(c["name"])}">{escape(c["name"])}'
        f'</button></td><td><code>{escape(c["type"] or "unknown")}</code></td>'
        f'<td>{escape(c["description"] or "")}</td></tr>' for c in cols)
    why = rel.get("columns_note")
    note = f'<p class="warning">Note: {escape(why)}.</p>' if why else ""
    return (f'<h2>Columns ({len(cols)})</h2>{note}<table class="cols"><thead><tr><th>column</th><th>type</th>'
            f'<th>description</th></tr></thead><tbody>{rows}</tbody></table>')


def _tests(rel: dict[str, Any]) -> str:
    if not rel["tests"]:
        return '<h2>Tests</h2><p class="muted">No <code>-- test</code> lines.</p>'
    rows = []
    for t in rel["tests"]:
        last = t["last"]
        outcome = (f'<span class="outcome {escape(str(last["status"]))}">{escape(str(last["status"]))}</span> '
                   f'<span class="muted">run {escape(str(last["run_id"]))}'
                   + (f', partition {escape(str(last["partition"]))}' if last.get("partition") else "")
                   + (f', {last["failures"]} failing rows' if last.get("failures") else "") + "</span>"
                   ) if last else '<span class="muted">not run yet</span>'
        rows.append(f'<tr><td>{escape(t["kind"])}</td><td><code>{escape(t["args"])}</code></td>'
                    f'<td>{escape(t["severity"])}</td><td>line {t["line"]}</td><td>{outcome}</td></tr>')
    return ('<h2>Tests</h2><table><thead><tr><th>test</th><th>arguments</th><th>severity</th><th>where</th>'
            f'<th>last outcome</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _partitions(data: dict[str, Any], rel: dict[str, Any]) -> str:
    if not data["has_lake"]:
        return ""
    s = rel.get("strip")
    if not s or not s["cells"]:
        if rel.get("history"):
            state = "stale" if rel.get("stale") else "materialized"
            return f'<h2>Partitions</h2><p>Not partitioned: the whole table, <span class="outcome">{state}</span>.</p>'
        return '<h2>Partitions</h2><p class="muted">Nothing materialized yet.</p>' if "strip" in rel else ""
    cells = "".join(f'<span class="cell {c["state"]}" title="{escape(c["value"])}: {c["state"]}"></span>'
                    for c in s["cells"])
    counts = {k: sum(c["state"] == k for c in s["cells"]) for k in ("materialized", "stale", "gap")}
    later = (f' {s["later_gaps"]} later partitions are not materialized (up to {escape(s["last_gap"])}).'
             if s["later_gaps"] else "")
    return (f'<h2>Partitions</h2><div class="strip" aria-label="partitions">{cells}</div>'
            f'<p class="muted">{escape(s["cells"][0]["value"])} … {escape(s["cells"][-1]["value"])}: '
            f'{counts["materialized"]} materialized, {counts["stale"]} stale, {counts["gap"]} missing.{later} '
            '<span class="legend"><span class="cell materialized"></span> materialized '
            '<span class="cell stale"></span> stale <span class="cell gap"></span> missing</span></p>')


def _history(data: dict[str, Any], rel: dict[str, Any]) -> str:
    failed = "".join(f'<li><span class="outcome fail">failed</span> run {escape(str(f.get("run_id")))}'
                     + (f', partition {escape(str(f["partition"]))}' if f.get("partition") else "")
                     + f': <code>{escape(str(f.get("error") or ""))}</code></li>' for f in rel.get("failures") or [])
    failures = f'<h2>Failures since the last commit</h2><ul class="failures">{failed}</ul>' if failed else ""
    if not data["has_lake"] or not rel.get("history"):
        return failures
    keys = ("committed_at", "run_id", "partition", "strategy", "rows_inserted", "rows_updated", "rows_deleted",
            "snapshot_id")
    head = "".join(f"<th>{k.replace('_', ' ')}</th>" for k in keys)
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(h.get(k) if h.get(k) is not None else '-'))}</td>"
                                    for k in keys) + "</tr>" for h in rel["history"])
    return (failures + '<h2>Recent history</h2><table class="history">'
            f'<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')
