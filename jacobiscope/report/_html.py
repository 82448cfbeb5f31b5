"""The self-contained HTML report: tables, notes, evidence and inline figures."""
from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

from .._io import atomic_write_text, check_file_path
from ._values import _plain
from ._text import _flatten, _shorten, _single_line
from ..errors import ArgumentError, ArgumentTypeError


_FIGURE_CAPTIONS = {
    "overview": "One column per row (layer x input): the largest Lyapunov exponent's late-half estimate with its 95% "
                "interval against the critical band (top), and the loop Jacobian's largest spectral norm and "
                "spectral radius (bottom); above 1, some perturbation grows in one loop.",
    "eigenvalues": "Top-k eigenvalues mu of the loop Jacobian J = dF/dX at the last loop: in the complex plane with "
                   "the unit circle (left; outside it a mode grows), and as modulus against angle (right; angle 0 "
                   "is a real positive eigenvalue, +-pi a real negative one, which flips sign every loop).",
    "norms": "Jacobian spectral norm at the sampled loops, state norm and relative step size against the loop.",
    "lyapunov": "Running estimates of the Lyapunov exponents (nats per loop) against the loop; the shaded band is "
                "the late-half estimate of lambda_max with its 95% interval, which the verdict uses.",
    "energy": "Pseudo-energy -Tr(X^T Y) against the loop.",
    "clusters": "Top eigenvalue of the tokens' second moment and the (effective) number of token clusters against "
                "the loop.",
}


_CSS = (
    # break-word (not anywhere): a long unbroken label or flag wraps in text blocks, while the tables keep their
    # width and scroll inside .table-wrap, so nothing pushes the page sideways at 800 px.
    "body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#222;max-width:1400px;"
    "overflow-wrap:break-word}"
    "h1{font-size:1.5em;margin-bottom:0.2em}h2{font-size:1.2em;margin-top:1.6em}"
    ".lead{color:#555;margin-top:0}"
    "table{border-collapse:collapse;margin:0.5em 0 1em}"
    "th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}"
    ".table-wrap{overflow-x:auto;max-width:100%}"
    "table.summary td{font-variant-numeric:tabular-nums;white-space:nowrap}"
    "table.summary td.input{max-width:18em;overflow:hidden;text-overflow:ellipsis}"
    "table.glossary td{white-space:normal}table.provenance td{overflow-wrap:anywhere}"
    "thead th{background:#f2f2f2}"
    "tr.flagged{background:#fff3f0}"
    "ul.verdicts{list-style:none;padding:0;margin:0.5em 0}"
    "ul.verdicts li{border-left:4px solid #ccc;padding:0.35em 0.7em;margin:0.35em 0;background:#fafafa}"
    "ul.verdicts li.regime-chaotic,ul.verdicts li.regime-diverging{border-color:#b00020}"
    "ul.verdicts li.regime-critical,ul.verdicts li.regime-oscillating{border-color:#c88a00}"
    "ul.verdicts li.regime-converging,ul.verdicts li.regime-periodic{border-color:#1b6e20}"
    "ul.verdicts li.regime-undetermined,ul.verdicts li.regime-unknown{border-color:#888}"
    ".who{font-weight:600}.numbers{font-variant-numeric:tabular-nums;color:#333}"
    ".reason{color:#666;font-size:0.88em;margin-top:0.15em;overflow-wrap:anywhere}"
    ".outcome-solved{color:#1b6e20;font-weight:600}.outcome-unsolved{color:#b00020;font-weight:600}"
    "td.regime-chaotic,td.regime-diverging,.tag.regime-chaotic,.tag.regime-diverging{color:#b00020;font-weight:600}"
    "td.regime-critical,td.regime-oscillating,.tag.regime-critical,.tag.regime-oscillating{color:#8a5a00;"
    "font-weight:600}"
    "td.regime-converging,td.regime-periodic,.tag.regime-converging,.tag.regime-periodic{color:#1b6e20;"
    "font-weight:600}"
    "td.regime-undetermined,.tag.regime-undetermined{color:#555;font-weight:600}"
    "figure{margin:1em 0}img{max-width:100%;height:auto}"
    "figcaption{color:#555;font-size:0.9em}"
    "pre{background:#f7f7f7;padding:0.5em;overflow:auto}"
    "ul.flags{color:#b00020}"
    "footer{margin-top:2em;color:#777;font-size:0.85em}"
    "@media (max-width:900px){body{margin:0.8em}table.summary td.input{max-width:10em}}"
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


def save_html(report, path, *, figures: bool=True, dpi: int=100, figure_format: str = "png") -> Path:
    check_file_path(path, "Report.save_html")  # a bad path fails before the figures are drawn
    if not isinstance(figures, bool):
        raise ArgumentTypeError(f"Report.save_html: figures must be True or False, got {figures!r} — pass figures=False for "
                        "the tables only")
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float)):
        raise ArgumentTypeError(f"Report.save_html: dpi must be a number, got {type(dpi).__name__} {dpi!r} — pass e.g. "
                        "dpi=100")
    if not math.isfinite(dpi) or not 1 <= dpi <= 1200:
        raise ArgumentError(f"Report.save_html: dpi must be a number from 1 to 1200, got {dpi!r} — pass e.g. dpi=100")
    if figure_format not in ("png", "svg"):
        raise ArgumentError(f"Report.save_html: figure_format must be 'png' or 'svg', got {figure_format!r} — pass "
                         "figure_format='svg' for vector figures")
    images = _images(report, dpi, figure_format) if figures else []
    title = "jacobiscope report"
    if "model" in report.provenance:
        title += f": {report.provenance['model']}"
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">', f"<title>{_esc(title)}</title>",
             f"<style>{_CSS}</style>", "</head>", "<body>", f"<h1>{_esc(title)}</h1>", _lead(report),
             _verdicts_html(report)]
    parts += [_figure_html(name, data) for name, data in images if name == "overview"]
    parts.append(_summary_html(report))
    others = [(name, data) for name, data in images if name != "overview"]
    if others:
        parts.append("<h2>Figures</h2>")
        parts += [_figure_html(name, data) for name, data in others]
    parts.append(_evidence_html(report))
    parts.append(_provenance_html(report))
    parts += [f'<footer>Written by jacobiscope {_esc(_version())}.</footer>', "</body>", "</html>", ""]
    return atomic_write_text(path, "\n".join(parts), errors="xmlcharrefreplace", what="Report.save_html")


def _images(report, dpi: int, figure_format: str = "png") -> list:
    from .._figures import figure_bytes

    # PNG without a "Software" chunk (the default one carries matplotlib's URL: the file names nothing outside);
    # SVG as an <img> data URI too, so its ids cannot clash with the page's or another figure's.
    mime = {"png": "image/png", "svg": "image/svg+xml"}[figure_format]
    return [(name, f"data:{mime};base64," + base64.b64encode(figure_bytes(figure, figure_format, dpi=dpi)).decode())
            for name, figure in report.plot().items()]


def _figure_html(name: str, data: str) -> str:
    source = data if data.startswith("data:") else f"data:image/png;base64,{data}"
    return (f'<figure id="figure-{_esc(name)}"><img alt="{_esc(name)} figure" src="{source}">'
            f"<figcaption>{_esc(_caption(name))}</figcaption></figure>")


def _caption(name: str) -> str:
    """The caption of figure ``name``: the report's own figures' here, a diagnostic's from its ``figure_caption``
    (else its description, else its docstring's first paragraph), so a user's registered diagnostic gets one too."""
    if name in _FIGURE_CAPTIONS:
        return _FIGURE_CAPTIONS[name]
    from ._plots import _figure_diagnostics

    diagnostic = _figure_diagnostics().get(name)
    if diagnostic is None:
        return name
    docstring = " ".join((type(diagnostic).__doc__ or "").strip().split("\n\n")[0].split())
    text = diagnostic.figure_caption or diagnostic.description or docstring or name
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _lead(report) -> str:
    provenance = report.provenance
    loops = sorted({row.loops for row in report.rows})
    what = [f"{len(report.rows)} row{'s' if len(report.rows) != 1 else ''} (layer x input)"]
    if loops:
        what.append(f"{', '.join(map(str, loops))} loops")
    if provenance.get("mode"):
        what.append(f"mode {provenance['mode']}")
    return f'<p class="lead">{_esc("; ".join(what))}. Verdicts first; the numbers, figures and provenance follow.</p>'


def _verdicts_html(report) -> str:
    from ._overview import verdict_lines

    parts = ["<h2>Verdicts</h2>"]
    outcome = report.outcome_summary()
    if outcome:
        parts.append(f'<p class="outcome">{_esc(outcome)}</p>')
    lines = verdict_lines(report)
    if not lines:
        return "\n".join(parts + ["<p>(no rows)</p>"])
    parts.append('<ul class="verdicts">')
    for line in lines:
        regime = _esc(line["regime"])
        outcome_class = "outcome-unsolved" if line["outcome"].startswith("not") else "outcome-solved"
        parts.append(
            f'<li class="regime-{regime}"><span class="who" title="{_esc(line["label"])}">{_esc(line["who"])}</span>'
            f' <span class="tag regime-{regime}">{regime}</span>: {_esc(line["words"])}.'
            + (f' <span class="numbers">{_esc(line["numbers"])}</span>.' if line["numbers"] else "")
            + (f' <span class="{outcome_class}">{_esc(line["outcome"])}</span>.' if line["outcome"] else "")
            + (f' <span class="flags">Flags: {_esc("; ".join(line["flags"]))}</span>' if line["flags"] else "")
            + (f'<div class="reason">{_esc(line["reason"])}</div>' if line["reason"] else "")
            + "</li>")
    parts.append("</ul>")
    return "\n".join(parts)


def _summary_html(report) -> str:
    from ._overview import glossary_rows
    from ._text import table_columns

    parts = ["<h2>Summary</h2>"]
    headers, body = report._summary_cells(max_label=None)
    if not body:
        return "\n".join(parts + ["<p>(no rows)</p>"])
    parts.append('<div class="table-wrap"><table class="summary"><thead><tr>')
    parts += [f"<th>{_esc(h)}</th>" for h in headers]
    parts.append("</tr></thead><tbody>")
    for row, cells in zip(report.rows, body):
        css = ' class="flagged"' if row.flags else ""
        parts.append(f"<tr{css}>" + "".join(_cell(header, cell) for header, cell in zip(headers, cells)) + "</tr>")
    parts.append("</tbody></table></div>")
    parts.append('<details open><summary>What the columns mean</summary><table class="glossary"><thead><tr>'
                 "<th>column</th><th>unit</th><th>meaning</th></tr></thead><tbody>")
    owners = {header: diagnostic for diagnostic, header in table_columns(report.rows)}
    for column, unit, meaning in glossary_rows(headers, owners):
        parts.append(f"<tr><td>{_esc(column)}</td><td>{_esc(unit)}</td><td>{_esc(meaning)}</td></tr>")
    parts.append("</tbody></table></details>")
    return "\n".join(parts)


def _cell(header: str, cell: str) -> str:
    if header == "regime":
        return f'<td class="regime-{_esc(cell)}">{_esc(cell)}</td>'
    if header == "input":
        return f'<td class="input" title="{_esc(cell)}">{_esc(cell)}</td>'
    return f"<td>{_esc(cell)}</td>"


def _evidence_html(report) -> str:
    if not report.rows:
        return ""
    parts = ["<h2>Evidence</h2>"]
    for row in report.rows:
        evidence = json.dumps(_plain(row.evidence, "LayerResult.evidence"), indent=2, ensure_ascii=False, default=str)
        flags = "".join(f"<li>{_esc(flag)}</li>" for flag in row.flags)
        reason = row.evidence.get("reason") if isinstance(row.evidence, dict) else None
        reason = f" &mdash; {_esc(reason)}" if isinstance(reason, str) else ""
        parts.append(
            f"<details><summary>{_esc(row.label())}: {_esc(row.regime)}{reason} "
            f"({_esc(_shorten(_single_line(str(row.input_label)), 60))})</summary>"
            + (f'<ul class="flags">{flags}</ul>' if flags else "")
            + f"<pre>{_esc(evidence)}</pre></details>")
    return "\n".join(parts)


def _provenance_html(report) -> str:
    parts = []
    if report.notes:
        parts.append("<h2>Notes</h2><ul>")
        parts += [f"<li>{_esc(note)}</li>" for note in report.notes]
        parts.append("</ul>")
    parts.append('<h2>Provenance</h2><div class="table-wrap"><table class="provenance">')
    for key, value in _flatten(report.provenance):
        parts.append(f"<tr><th>{_esc(key)}</th><td>{_esc(value)}</td></tr>")
    parts.append("</table></div>")
    return "\n".join(parts)


def html_tables(report) -> str:
    """The verdicts, the summary table with its glossary, notes and provenance (a notebook's rich display)."""
    return "\n".join([_verdicts_html(report), _summary_html(report), _provenance_html(report)])
