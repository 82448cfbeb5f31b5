"""Figures for papers: every figure save takes its format from the file suffix or ``format=``; SVG and PDF are vector
files (text kept as text, paths for the data, TrueType fonts), PNG is raster at ``dpi``; the HTML report can inline
SVG figures."""
import re
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("matplotlib")

from jacobiscope._figures import figure_bytes, figure_format, new_figure, save_figure  # noqa: E402
from jacobiscope.report import LayerResult, Report  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


def _row(layer, norms):
    return LayerResult(
        input_index=0, input_label="the cat sat", layer=layer, mode="block", eta=None, loops=4, state_shape=[5, 8],
        state_norm=[1.0, 1.02, 1.03, 1.031, 1.0312], step_size=[0.2, 0.05, 0.01, 0.002],
        spectral_norm=[{"loop": t, "value": v, "tolerance": 1e-7} for t, v in zip((0, 2, 4), norms)],
        eigenvalues=[[0.9, 0.1], [0.9, -0.1], [-0.5, 0.0]], eigen_loop=4,
        oscillation={"spectral_radius": 0.9055, "complex_fraction": 2 / 3, "max_imag": 0.1,
                     "max_rotation_angle": 0.11, "mean_rotation_angle": 0.11, "outside_unit_circle_fraction": 0.0},
        lyapunov={"exponents": [-0.05, -0.4], "stderr": [0.01, 0.02],
                  "history": [[-0.1, -0.5], [-0.07, -0.45], [-0.06, -0.42], [-0.05, -0.4]], "kaplan_yorke": 0.0},
        clusters=None, energy=None, regime="converging", evidence={"lambda_max": -0.05}, flags=[], seconds=0.1)


@pytest.fixture(scope="module")
def report():
    return Report([_row(0, (1.3, 1.1, 0.95)), _row(1, (2.0, 1.5, 1.2))], {"model": "demo"}, [])


@pytest.fixture(scope="module")
def names(report):
    return list(report.plot())


def _svg_texts(data: bytes) -> list:
    root = ET.fromstring(data)  # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg"
    return ["".join(element.itertext()) for element in root.iter(f"{SVG}text")]


def _pdf_pages(data: bytes) -> int:
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", data))


def test_the_suffix_or_format_chooses_the_format():
    assert figure_format("a/b/norms.SVG") == "svg"
    assert figure_format("norms.png", format="pdf") == "pdf"
    assert figure_format(None, format=".PNG") == "png"
    with pytest.raises(ValueError, match=r"\.png, \.svg or \.pdf, or pass format="):
        figure_format("norms.jpg")
    with pytest.raises(ValueError, match="pass format= one of png, svg, pdf"):
        figure_format("norms.png", format="eps")


def test_svg_keeps_text_as_text_and_draws_the_data_as_paths(report, tmp_path):
    path = report.save_figure("norms", tmp_path / "norms.svg")
    data = path.read_bytes()
    texts = _svg_texts(data)
    for expected in ("Jacobian spectral norm", "state norm (RMS per token)", "relative step", "loop t"):
        assert expected in texts
    root = ET.fromstring(data)
    assert not list(root.iter(f"{SVG}image"))  # nothing rasterised
    # The ||J|| line of layer 1 is a path through its three samples: (0, 2.0), (2, 1.5), (4, 1.2).
    lines = [p.get("d") for p in root.iter(f"{SVG}path") if p.get("d") and p.get("d").count("L") == 2]
    assert lines, "no three-point line path in the SVG"
    # Same figure, same bytes: no date, a fixed id salt.
    assert report.save_figure("norms", tmp_path / "again.svg").read_bytes() == data


def test_svg_line_coordinates_follow_the_data(tmp_path):
    figure = new_figure(4.0, 3.0)
    ax = figure.subplots()
    ax.plot([0, 1, 2], [0.0, 2.0, 1.0], label="series one")
    ax.set_title("known line")
    ax.legend()
    root = ET.fromstring(save_figure(figure, tmp_path / "line.svg").read_bytes())
    assert "known line" in _svg_texts(ET.tostring(root)) and "series one" in _svg_texts(ET.tostring(root))
    three = [p.get("d") for p in root.iter(f"{SVG}path") if p.get("d", "").count("L") == 2]
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", three[0])]
    xs, ys = numbers[0::2], numbers[1::2]
    # Equal x steps; y of the middle point highest (SVG y grows downwards), the last one halfway.
    assert xs[1] - xs[0] == pytest.approx(xs[2] - xs[1], rel=1e-3)
    assert ys[1] < ys[2] < ys[0]
    assert (ys[0] - ys[2]) == pytest.approx((ys[0] - ys[1]) / 2, rel=1e-3)


def test_pdf_is_one_vector_page_with_truetype_text(report, tmp_path):
    data = report.save_figure("eigenvalues", tmp_path / "eigenvalues.pdf").read_bytes()
    assert data.startswith(b"%PDF-1.") and data.rstrip().endswith(b"%%EOF")
    assert _pdf_pages(data) == 1
    assert b"/FontFile2" in data and b"/Type3" not in data  # embedded TrueType: journals refuse Type 3 fonts
    assert b"/Subtype /Image" not in data  # vector: no raster image inside
    assert b"CreationDate" not in data
    # format= wins over the suffix.
    assert (report.save_figure("norms", tmp_path / "n.png", format="pdf").read_bytes()[:5]) == b"%PDF-"


def test_png_is_raster_at_dpi(report, tmp_path):
    import struct

    figure = report.plot()["norms"]
    data = save_figure(figure, tmp_path / "norms.png", dpi=50).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    inches = figure.get_size_inches()
    assert (width, height) == (round(inches[0] * 50), round(inches[1] * 50))


def test_save_figures_writes_every_figure_in_the_format(report, names, tmp_path):
    paths = report.save_figures(tmp_path / "figures", format="svg")
    assert list(paths) == names
    for name, path in paths.items():
        assert path.name == f"{name}.svg" and _svg_texts(path.read_bytes())
    with pytest.raises(ValueError, match="format="):
        report.save_figures(tmp_path / "bad", format="gif")
    assert not (tmp_path / "bad").exists()


def test_a_display_saves_through_the_same_path(report, tmp_path):
    display = report.display("overview")
    data = save_figure(display, tmp_path / "overview.pdf").read_bytes()  # drawn on demand
    assert _pdf_pages(data) == 1
    titles = [ax.get_title() for ax in display.figure_.axes if ax.get_title()]
    texts = _svg_texts(figure_bytes(display, "svg"))
    assert titles and all(title in texts for title in titles if "$" not in title)
    with pytest.raises(TypeError, match="matplotlib Figure or a display"):
        save_figure("not a figure", tmp_path / "x.svg")
    with pytest.raises(ValueError, match="end the file name in .png, .svg or .pdf"):
        report.save_figure("norms", tmp_path / "norms.tiff")


def test_html_can_inline_vector_figures(report, names, tmp_path):
    import base64

    text = report.save_html(tmp_path / "r.html", figure_format="svg").read_text()
    sources = re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', text)
    assert len(sources) == len(names)
    assert "loop t" in _svg_texts(base64.b64decode(sources[1]))
    assert "data:image/png" not in text
    with pytest.raises(ValueError, match="figure_format='svg'"):
        report.save_html(tmp_path / "r2.html", figure_format="pdf")
