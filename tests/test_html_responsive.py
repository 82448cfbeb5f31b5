"""The HTML report at 800 px, in a real headless browser: nothing overflows the page sideways (long unbroken labels,
many rows, long provenance values and wide figures included); wide tables scroll inside their own box."""
import json
import re
import shutil
import subprocess

import pytest

from jacobiscope.report import LayerResult, Report

BROWSER = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(name)), None)

# Appended to a copy of the page: once it has loaded, write the page's width and every element whose right edge
# passes the window (outside a box that scrolls on its own) into a <pre> that --dump-dom prints.
PROBE = """<script>window.addEventListener("load", () => {
  const bad = [];
  for (const element of document.body.querySelectorAll("*")) {
    const box = element.getBoundingClientRect();
    if (box.right > window.innerWidth + 0.5 && !element.closest(".table-wrap, pre"))
      bad.push(element.tagName.toLowerCase() + (element.className ? "." + element.className : ""));
  }
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({scrollWidth: document.documentElement.scrollWidth,
                                    innerWidth: window.innerWidth, overflowing: bad.slice(0, 20)});
  document.body.appendChild(out);
});</script>"""


def _row(index, layer):
    label = "averyveryverylongunbrokeninputlabelthatwouldstretchthepage" * 3 + f"_{index}"
    return LayerResult(
        input_index=index, input_label=label, layer=layer, mode="block", eta=None, loops=4, state_shape=[5, 8],
        state_norm=[1.0, 1.5, 2.5, 4.0, 7.0], step_size=[0.5, 0.6, 0.6, 0.7],
        spectral_norm=[{"loop": 0, "value": 1.3, "tolerance": 1e-7}, {"loop": 4, "value": 1.9, "tolerance": 1e-7}],
        eigenvalues=[[1.2, 0.1], [1.2, -0.1]], eigen_loop=4, oscillation=None,
        lyapunov={"exponents": [0.3], "stderr": [0.02], "history": [[0.4], [0.35], [0.32], [0.3]],
                  "kaplan_yorke": 1.0},
        clusters=None, energy=None, regime="diverging", evidence={"lambda_max": 0.3, "growth": 7.0},
        flags=["a flag that is quite long and names a fix: " + "lower_the_learning_rate_" * 6], seconds=0.1)


def _layout(html_path, tmp_path) -> dict:
    probe = tmp_path / "probe.html"
    probe.write_text(html_path.read_text().replace("</body>", PROBE + "</body>"))
    command = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'profile'}", "--window-size=800,1000", "--virtual-time-budget=4000",
               "--dump-dom", probe.as_uri()]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"the browser printed no layout probe: {result.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.skipif(BROWSER is None, reason="no headless browser: apt-get install -y chromium")
def test_report_fits_800_px_without_sideways_scrolling(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [_row(index, layer) for index in range(2) for layer in range(3)]
    provenance = {"model": "/a/very/long/local/path/" + "to_a_checkpoint_folder_" * 8, "mode": "block", "loops": 4,
                  "versions": {"torch": "2.13.0"}}
    report = Report(rows, provenance, ["a note with a long unbroken word: " + "x" * 300])
    path = report.save_html(tmp_path / "report.html", dpi=60)
    layout = _layout(path, tmp_path)
    assert layout["innerWidth"] == 800
    assert layout["overflowing"] == []
    assert layout["scrollWidth"] <= 800
