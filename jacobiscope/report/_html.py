"""The self-contained HTML report: tables, notes, evidence and inline figures."""
from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

from .._io import atomic_write_text
from ._values import _plain
from ._text import _flatten, _shorten, _single_line


_FIGURE_CAPTIONS = {
    "eigenvalues": "Top-k Jacobian eigenvalues in the complex plane; outside the unit circle is locally expanding.",
    "norms": "Jacobian spectral norm at the sampled loops, state norm and relative step size against the loop.",
    "lyapunov": "Running estimates of the Lyapunov exponents (nats per loop); near 0 is critical.",
    "energy": "Pseudo-energy against the loop.",
    "clusters": "Top eigenvalue and the (effective) number of token clusters against the loop.",
}


_CSS = (
    "body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em;color:#222;max-width:1400px}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
    "table.summary td{font-variant-numeric:tabular-nums;white-space:nowrap}"
    "table.summary td:nth-child(3){white-space:normal;max-width:28em;overflow-wrap:anywhere}"
    "thead th{background:#f2f2f2}"
    "tr.flagged{background:#fff3f0}"
    ".regime-chaotic,.regime-diverging{color:#b00020;font-weight:600}"
    ".regime-critical{color:#8a5a00;font-weight:600}"
    ".regime-converging{color:#1b6e20}"
    ".regime-oscillating{color:#3a3ab0}"
    "figure{margin:1em 0}img{max-width:100%;height:auto}"
    "figcaption{color:#555;font-size:0.9em}"
    "pre{background:#f7f7f7;padding:0.5em;overflow:auto}"
    "ul.flags{color:#b00020}"
    "footer{margin-top:2em;color:#777;font-size:0.85em}"
)


def _version() -> str:
    # Imported here, not at module level: jacobiscope/__init__ may import this module.
    try:
        import jacobiscope

        return str(getattr(jacobiscope, "__version__", "unknown"))
    except Exception:  # pragma: no cover - a broken install still writes its report
        return "unknown"


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def save_html(report, path, *, figures: bool=True, dpi: int=100) -> Path:
    images = []
    if figures:
        for name, figure in report.plot().items():
            buffer = io.BytesIO()
            # No "Software" chunk: the default one carries matplotlib's URL, and the file names nothing outside.
            figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
            images.append((name, base64.b64encode(buffer.getvalue()).decode("ascii")))
    title = "jacobiscope report"
    if "model" in report.provenance:
        title += f": {report.provenance['model']}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{_esc(title)}</h1>",
        report._html_tables(),
    ]
    if images:
        parts.append("<h2>Figures</h2>")
        for name, data in images:
            parts.append(
                f'<figure id="figure-{_esc(name)}"><img alt="{_esc(name)} figure" '
                f'src="data:image/png;base64,{data}"><figcaption>{_esc(_FIGURE_CAPTIONS.get(name, name))}'
                "</figcaption></figure>"
            )
    if report.rows:
        parts.append("<h2>Evidence</h2>")
        for row in report.rows:
            evidence = json.dumps(_plain(row.evidence, "LayerResult.evidence"), indent=2, ensure_ascii=False,
                                  default=str)
            flags = "".join(f"<li>{_esc(flag)}</li>" for flag in row.flags)
            reason = row.evidence.get("reason") if isinstance(row.evidence, dict) else None
            reason = f" &mdash; {_esc(reason)}" if isinstance(reason, str) else ""
            parts.append(
                f"<details><summary>{_esc(row.label())}: {_esc(row.regime)}{reason} "
                f"({_esc(_shorten(_single_line(str(row.input_label)), 60))})</summary>"
                + (f'<ul class="flags">{flags}</ul>' if flags else "")
                + f"<pre>{_esc(evidence)}</pre></details>"
            )
    parts += [f'<footer>Written by jacobiscope {_esc(_version())}.</footer>', "</body>", "</html>", ""]
    return atomic_write_text(path, "\n".join(parts), errors="xmlcharrefreplace")


def html_tables(report) -> str:
    parts = ["<h2>Provenance</h2>", '<table class="provenance">']
    for key, value in _flatten(report.provenance):
        parts.append(f"<tr><th>{_esc(key)}</th><td>{_esc(value)}</td></tr>")
    parts.append("</table>")
    if report.notes:
        parts.append("<h2>Notes</h2><ul>")
        parts += [f"<li>{_esc(note)}</li>" for note in report.notes]
        parts.append("</ul>")
    parts.append("<h2>Summary</h2>")
    headers, body = report._summary_cells(max_label=None)
    if not body:
        parts.append("<p>(no rows)</p>")
        return "\n".join(parts)
    parts.append('<table class="summary"><thead><tr>')
    parts += [f"<th>{_esc(h)}</th>" for h in headers]
    parts.append("</tr></thead><tbody>")
    for row, cells in zip(report.rows, body):
        css = ' class="flagged"' if row.flags else ""
        tds = "".join(
            f'<td class="regime-{_esc(cell)}">{_esc(cell)}</td>' if header == "regime" else f"<td>{_esc(cell)}</td>"
            for header, cell in zip(headers, cells)
        )
        parts.append(f"<tr{css}>{tds}</tr>")
    parts.append("</tbody></table>")
    outcome = report.outcome_summary()
    if outcome:
        parts.append(f'<p class="outcome">{_esc(outcome)}</p>')
    return "\n".join(parts)
