"""Pages written from the stores: each study's README results block, the docs pages' blocks that quote a
study, and docs/results.md (one table per task).

A generated block sits between two markers, ``<!-- NAME:start ... -->`` and ``<!-- NAME:end -->``;
everything outside the markers is hand-written. A summary row of docs/results.md is a dict::

    {"task": "Speech: spoken digits", "dataset": "FSDD", "split": "leave one speaker out, 6 speakers",
     "metric": "accuracy", "result": "96.1 ± 1.2 % (3 seeds)", "anchors": "...", "order": 10}
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import template
from .protocol import ProtocolError, moved_edits
from .stats import mean_std
from .store import Record
from .study import ROOT, STUDIES, Study

RESULTS = ROOT / "docs" / "results.md"
HEADER = STUDIES / "_results_header.md"


class View:
    """What a study's renderer reads: its protocol, its store and helpers to format them."""

    def __init__(self, study: Study):
        self.study, self.protocol, self.store = study, study.protocol, study.store
        self.name = study.name

    @classmethod
    def load(cls, name: str) -> View:
        """The view of study ``name``'s committed store."""
        return cls(Study.load(name))

    def records(self, kind: str) -> list[Record]:
        return self.store.select(kind)

    def stale(self, record: Record) -> bool:
        """A test result made under a protocol other than the current one, or under it with a moved config
        edited since."""
        return record["protocol"] != self.protocol.hash or bool(self.edited)

    @functools.cached_property
    def edited(self) -> list[str]:
        return moved_edits(self.protocol.data, ROOT)

    def link(self, page: Path) -> str:
        """The study README's path relative to ``page`` (a file under the repository)."""
        import os

        return os.path.relpath(self.study.folder / "README.md", page.parent).replace(os.sep, "/")

    @property
    def detail(self) -> dict[str, Any]:
        """The store's ``detail`` object (study data the pages need beyond the records' scores)."""
        return self.store.data.get("detail", {})

    @functools.cached_property
    def pages(self) -> dict[str, list[str]]:
        """The blocks of the study's ``page.md`` (:mod:`.template`) rendered from its store's detail (read by the
        module's ``unpack``) and the names its ``context(detail, view)`` adds; none without a template."""
        path, module = self.study.folder / "page.md", self.study.module
        if not path.exists():
            return {}
        detail = getattr(module, "unpack", dict)(self.detail)
        return template.pages(path, detail, module.context(detail, self) if hasattr(module, "context") else None)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines


_ABSENT = object()


def field(obj: Any, path: str, default: Any = _ABSENT) -> Any:
    """``path`` ("scores.test.ap", "detail.best_epoch") in a record; ``*`` takes a mapping's first value;
    ``default`` for a record without it (else KeyError)."""
    if "|" in path:  # alternatives: the first the record has
        first, rest = path.split("|", 1)
        found = field(obj, first, None)
        return field(obj, rest, default) if found is None else found
    for key in path.split("."):
        if key != "*" and key not in obj and default is not _ABSENT:
            return default
        obj = next(iter(obj.values())) if key == "*" else obj[key]
    return obj


def where(recs: Iterable[Record], spec: dict[str, Any]) -> list[Record]:
    """The records whose fields equal ``spec["where"]`` (a list: any of; ``"current"``: the protocol's hash)."""
    def ok(r: Record) -> bool:
        return all(field(r, k, None) in (v if isinstance(v, list) else [v]) for k, v in spec.get("where", {}).items())

    return [r for r in recs if ok(r)]


def matching(view: View, spec: dict[str, Any]) -> list[Record]:
    """The records of ``spec["kind"]`` (default "test"), or the entries of the store's mapping ``spec["source"]``,
    :func:`where` ``spec`` says."""
    if "source" in spec:  # a mapping in the store ("detail.4.accuracy"): its entries as records, named "key"
        recs = [{"key": k, **v} for k, v in field(view.store.data, spec["source"]).items()]
        return where(recs, spec)
    recs = view.records(spec.get("kind", "test"))
    return where([r for r in recs if r["protocol"] == view.protocol.hash] if spec.get("current") else recs, spec)


def cell(recs: Sequence[Record], col: dict[str, Any]) -> str:
    """One table cell from ``recs``: ``col`` names a ``field`` (scaled by ``scale``), ``agg`` "mean_std" over the
    records (``digits``), or a first record's value (a list joined by "; "; ``default`` shown as is for a record
    without the field); ``format`` sees ``v``, ``n``, ``seeds`` and the record ``r``."""
    if "text" in col:
        return col["text"]
    recs = where(recs, col)
    if not recs:
        return "—"
    scale = col.get("scale", 1)
    values = [field(r, col["field"], col.get("default", _ABSENT)) for r in recs] if "field" in col else []
    if "default" in col and values and values[0] in (None, col["default"]):
        return col["default"]
    if col.get("agg") == "mean_std":
        v: Any = mean_std(values, scale, col.get("digits", 2))
    elif values and isinstance(values[0], (int, float)) and not isinstance(values[0], bool):
        v = values[0] * scale
    else:
        v = values[0] if values else None
        v = "; ".join(map(str, v)) if isinstance(v, list) else v
    if v is None:
        return "—"
    n = len(recs)
    return col.get("format", "{v}").format(v=v, n=n, seeds=f"{n} seed{'s' if n != 1 else ''}", r=recs[0])


def spec_table(view: View, spec: dict[str, Any]) -> list[str]:
    """A table of the study's records from a declarative ``spec`` (a protocol's ``tables`` entry): ``title`` and
    ``intro`` lines, the records ``matching`` it, one row per record or per ``group`` of fields, the
    ``columns`` (see :func:`cell`), and an optional ``total`` row aggregated over every matching record. With
    ``parts``, each part adds the rows of its own ``where``, with its own ``cells`` (by header), ``sort``
    ordering the rows by their group."""
    if spec.get("per_split"):
        return per_split_table(view, spec)
    cols, rows, recs = spec["columns"], [], []
    for part in spec.get("parts", [{}]):  # a part: its own records ("where") and cells (by header)
        mine = matching(view, {**spec, **part})
        groups: dict[tuple[Any, ...], list[Record]] = {}
        for r in mine:
            groups.setdefault(tuple(field(r, g) for g in spec.get("group", [])) or (len(groups),), []).append(r)
        rows += [((part.get("order", 0), key), [cell(g, part.get("cells", {}).get(c["header"], c)) for c in cols])
                 for key, g in groups.items()]
        recs += mine
    rows = [row for _, row in (sorted(rows, key=lambda kr: kr[0]) if spec.get("sort") else rows)]
    if "total" in spec and recs:
        rows.append([spec["total"]["label"], *(cell(recs, spec["total"][c["header"]]) if c["header"] in spec["total"]
                                               else "" for c in cols[1:])])
    out = [*([spec["title"], ""] if "title" in spec else []), *([spec["intro"], ""] if "intro" in spec else [])]
    return [*out, *table([c["header"] for c in cols], rows), ""] if cols else out


def per_split_table(view: View, spec: dict[str, Any]) -> list[str]:
    """A nested selection, split by split (the current protocol's runs): the ids of kind ``show`` its validation
    sets hold, each candidate's mean validation score, the split's choice, the ``columns`` of its test record
    and its test score; then the test scores' mean ± std over the splits done."""
    p, study, digits = view.protocol, view.study, spec.get("digits", 2)
    metric, cands = p.data.get("select", {}).get("metric", "accuracy"), list(p.candidates)
    rows, tests = [], []
    for s in p.splits:
        sel = [r for r in view.records("select") if r["protocol"] == p.hash and r["split"] == s.name]
        scores = [[m[metric] for r in sel if r["candidate"] == c for m in r["scores"].values()] for c in cands]
        try:
            chosen = ", ".join(study.selected(s.name))
        except ProtocolError:
            chosen = "—"
        test = [r for r in view.records("test") if r["protocol"] == p.hash and r["split"] == s.name]
        value = [next(iter(r["scores"].values()))[metric] for r in test]
        tests += value
        shown = ", ".join(str(i) for v in s.validation for i in sorted(study.resolve(v).ids.get(spec.get("show"), [])))
        rows.append([s.name, shown, *(f"{sum(v) / len(v):.{digits}f}" if v else "—" for v in scores), chosen,
                     *(cell(test, c) for c in spec.get("columns", [])), mean_std(value, digits=digits)])
    header = [spec.get("split", "split"), f"validation {spec.get('show', 'set')}",
              *(f"{c} (validation)" for c in cands), "chosen", *(c["header"] for c in spec.get("columns", [])), "test"]
    done = len({r["split"] for r in view.records("test") if r["protocol"] == p.hash})
    total = (f"Test {metric} over the splits done ({done} of {len(p.splits)}): **{mean_std(tests, digits=digits)}**"
             + ("" if done == len(p.splits) else " (incomplete: the remaining splits had not run)") + ".")
    out = [*([spec["title"], ""] if "title" in spec else []), *([spec["intro"], ""] if "intro" in spec else [])]
    return [*out, *table(header, rows), "", total, ""]


def spec_summary(view: View) -> list[dict[str, Any]]:
    """docs/results.md's rows from the protocol's ``summary`` specs: fixed fields, and ``result`` a
    :func:`cell` spec over the records ``matching`` the row."""
    return [{**{k: v for k, v in row.items() if k not in ("kind", "where", "result", "source")},
             "result": cell(matching(view, row), row["result"])} for row in view.protocol.data.get("summary", [])]


def default_results(view: View) -> list[str]:
    """The runner's own results section: the selection runs and the test results, by candidate and set."""
    out: list[str] = []
    for kind, title in (("select", "Selection runs (validation sets only)"), ("test", "Test results")):
        recs = view.records(kind)
        if not recs:
            continue
        groups: dict[tuple[str, str, str, str, bool], list[float]] = defaultdict(list)
        for r in recs:
            for s, m in r["scores"].items():
                for metric, v in m.items():
                    groups[(r["candidate"], r["split"], s, metric, view.stale(r))].append(v)
        rows = [(c, sp, s, metric, mean_std(v, digits=4), len(v), "stale" if st else "")
                for (c, sp, s, metric, st), v in sorted(groups.items())]
        out += [f"### {title}", "", *table(["candidate", "split", "set", "metric", "value", "seeds", ""], rows), ""]
    return out


def readme_block(view: View) -> list[str]:
    p = view.protocol
    lines = [f"Protocol `{p.hash}` (`protocol.json`)."]
    if p.reconstructed:
        lines[0] += (" This protocol was **reconstructed after the results**: the runs below were made before "
                     "the study runner existed and their protocol was rebuilt from their stores.")
    for h, why in p.data.get("amends", {}).items():
        lines.append(f"It amends protocol `{h}`: {why}.")
    retest, why = p.retest
    if retest:
        lines.append(f"Its test results are **exploratory**: it scores again the test data of protocol(s) "
                     f"{', '.join(f'`{h}`' for h in retest)} ({why}).")
    lines += [""] if p.data.get("moved") else []
    for old, m in p.data.get("moved", {}).items():
        lines.append(f"- Amended: `{old}` moved to `{m['to']}`; the hash counts it under its old path, and its "
                     + ("content changed since the move." if m["to"] in view.edited
                        else f"content was rewritten, the runs' settings kept: {m['rewritten']}." if m.get("rewritten")
                        else "content (comments aside) is the one the runs used."))
    stale = sum(view.stale(r) for r in view.records("test"))
    if stale:
        lines.append(f"{stale} test result(s) were made under an earlier protocol and are marked stale.")
    lines.append("")
    if hasattr(view.study.module, "render"):
        body = view.study.module.render(view)
    elif "results" in view.pages:
        body = view.pages["results"]
    elif "tables" in p.data:
        body = [line for spec in p.data["tables"] for line in spec_table(view, spec)]
    else:
        body = default_results(view)
    return lines + list(body)


def splice(page: str, name: str, body: Sequence[str], note: str) -> str:
    """``page`` with the block ``name`` replaced by ``body``; appended when the page has no such block."""
    start, end = f"<!-- {name}:start", f"<!-- {name}:end -->"
    block = "\n".join([f"{start} ({note}) -->", *body, end])
    if start in page and end in page:
        head, rest = page.split(start, 1)
        return head + block + rest.split(end, 1)[1]
    return page.rstrip("\n") + "\n\n" + block + "\n"


def summary_page(rows: list[dict[str, Any]]) -> str:
    out = [HEADER.read_text().rstrip("\n"), ""]
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(r)
    for task, group in sorted(by_task.items(), key=lambda kv: (min(r.get("order", 0) for r in kv[1]), kv[0])):
        out += [f"## {task}", ""]
        out += table(["Dataset", "Split protocol", "Metric", "Result", "Published anchors", "Study"],
                     [(r["dataset"], r["split"], r["metric"], r["result"], r.get("anchors", "—"), r["study"])
                      for r in group])
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def index_block() -> list[str]:
    """The table of every study: its question and its protocol (from the protocols alone, so that a study's
    new runs change only its own pages and docs/results.md)."""
    rows = []
    for name in studies():
        p = Study.load(name).protocol
        question = p.data.get("question") or p.data.get("title") or ""
        rows.append((f"[`{name}`]({name}/README.md)", question,
                     f"`{p.hash}`" + (" (reconstructed after the results)" if p.reconstructed else "")))
    return table(["study", "question", "protocol"], rows)


def studies() -> list[str]:
    return sorted(p.parent.name for p in STUDIES.glob("*/protocol.json") if not p.parent.name.startswith("_"))


def render(names: Sequence[str] | None = None, out: Path | None = None) -> list[Path]:
    """Write the pages of the studies ``names`` (all, and docs/results.md, when None) under ``out`` (the
    repository by default); returns the paths written, relative to the repository."""
    out = ROOT if out is None else Path(out)
    everything = names is None
    pages: dict[Path, str] = {}
    rows: list[dict[str, Any]] = []

    def page(rel: Path) -> str:
        if rel not in pages:
            pages[rel] = (ROOT / rel).read_text()
        return pages[rel]

    for name in (studies() if names is None else names):
        view = View(Study.load(name))
        note = f"written by python -m studies render from studies/{name}/store.json; edit the study, not this block"
        readme = Path("studies") / name / "README.md"
        pages[readme] = splice(page(readme), "results", readme_block(view), note)
        module_blocks = view.study.module.blocks(view) if hasattr(view.study.module, "blocks") else {}
        for where, body in {**{k: v for k, v in view.pages.items() if "/" in k}, **module_blocks}.items():
            if "#" not in where:  # a whole page
                pages[Path(where)] = "\n".join(body).rstrip("\n") + "\n"
                continue
            rel, block = where.split("#", 1)
            pages[Path(rel)] = splice(page(Path(rel)), f"{name}:{block}", body, note)
        module_summary = getattr(view.study.module, "summary", None)
        if module_summary is not None or "summary" in view.protocol.data:
            for r in (module_summary or spec_summary)(view):
                rows.append({"study": f"[`{name}`]({view.link(RESULTS)})", **r})
    if everything:
        pages[RESULTS.relative_to(ROOT)] = summary_page(rows)
        index = Path("studies") / "README.md"
        pages[index] = splice(page(index), "index", index_block(), "written by python -m studies render; "
                              "edit the studies' protocols, not this block")
    for rel, text in pages.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    return sorted(pages)
