"""The report as one self-contained HTML file: inline CSS, images as base64 data URIs, no
script and no external asset, so it opens anywhere (mail it, attach it, open it offline)."""

from __future__ import annotations

import base64
import html

from servelab.report.diagnose import ArmDiagnosis
from servelab.report.plots import Plot
from servelab.report.tables import Table

_CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 24px;
       color: #1d2330; background: #ffffff; max-width: 1150px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ccd; }
h3 { font-size: 15px; margin-bottom: 6px; }
table { border-collapse: collapse; margin: 6px 0 4px 0; font-size: 13px; }
th, td { border: 1px solid #c9cfdb; padding: 3px 8px; }
th { background: #e8ecf5; } td { text-align: right; } td:first-child, td:nth-child(2) { text-align: left; }
p.note { font-size: 12px; color: #4a5468; margin: 2px 0 14px 0; }
.plots img { width: 560px; margin: 4px; border: 1px solid #dde; }
li { margin: 2px 0; font-size: 13px; }
"""


def _table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
                   for row in t.rows)
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    return (f"<h3>{html.escape(t.title)}</h3><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{note}")


def _img(p: Plot) -> str:
    data = base64.b64encode(p.png).decode("ascii")
    return (f'<img src="data:image/png;base64,{data}" alt="{html.escape(p.title)}" '
            f'title="{html.escape(p.title)}">')


def _diagnosis(d: ArmDiagnosis) -> str:
    items = "".join(f"<li>{html.escape(x)}</li>" for x in d.lines)
    return f"<h3>{html.escape(d.arm)} (binds: {html.escape(d.binding)})</h3><ul>{items}</ul>"


def render_html(title: str, intro: list[str], tables: list[Table], diagnoses: list[ArmDiagnosis],
                plots: list[Plot], speculation: list[str] | None = None) -> str:
    """The whole page as a string."""
    spec = (["<h2>Speculative decoding</h2><ul>", *(f"<li>{html.escape(x)}</li>" for x in speculation),
             "</ul>"] if speculation else [])
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *(f"<p>{html.escape(line)}</p>" for line in intro),
        "<h2>Results</h2>", *(_table(t) for t in tables),
        "<h2>Diagnosis</h2>", *(_diagnosis(d) for d in diagnoses), *spec,
        '<h2>Plots</h2><div class="plots">', *(_img(p) for p in plots), "</div>",
        "</body></html>",
    ]
    return "\n".join(parts)
