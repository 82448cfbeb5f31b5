"""Bad inputs at the file edges (issue 28, family 1): the atomic writer writes regular files only (a symlink is
written through, a FIFO / socket / symlink loop is refused, a full device gives the disk-full error and is never
replaced), and every command refuses an output that is, or lies inside, one of its inputs before anything runs.
Real files, links, FIFOs and sockets in tmp_path; the CLI is called in-process."""
import errno
import os
import re
import shutil
import socket

import pytest

import jacobiscope
from jacobiscope._io import (
    NotARegularFileError, OutputInsideInputError, PathError, atomic_write_bytes, atomic_write_text, path_relation,
    refuse_output_inside_inputs,
)
from jacobiscope.cli import main

ONE_LINE = re.compile(r"^jacobiscope: error: \S.* — \S.*$")
SHIPPED = jacobiscope.hub.shipped_checkpoints()["itrsa-sudoku"]
PUZZLE = "670000005003040082040005136000730090304206070001090600509008000000950208000127400"


def _cli(capsys, argv):
    """Exit status and the stderr lines of ``jacobiscope <argv>``."""
    status = main([str(part) for part in argv])
    return status, capsys.readouterr().err.strip().splitlines()


def _snapshot(folder):
    """Every file under ``folder`` with its bytes: what 'nothing lost' compares."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def model_copy(tmp_path):
    folder = tmp_path / "my-model"
    shutil.copytree(SHIPPED, folder)
    return folder


# ------------------------------------------------------------------------------------- the atomic writer
@pytest.mark.guards("lost")
def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    target = tmp_path / "data" / "report.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new" and sorted(p.name for p in target.parent.iterdir()) == ["report.json"]


@pytest.mark.guards("lost")
def test_a_relative_symlink_into_another_folder_is_written_through(tmp_path):
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("v1")
    (tmp_path / "out").mkdir()
    link = tmp_path / "out" / "notes.txt"
    link.symlink_to("../keep/notes.txt")
    atomic_write_bytes(link, b"v2")
    assert link.is_symlink() and (tmp_path / "keep" / "notes.txt").read_bytes() == b"v2"


@pytest.mark.guards("silent")
def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "later" / "report.json")
    atomic_write_text(link, "{}")
    assert link.is_symlink() and (tmp_path / "later" / "report.json").read_text() == "{}"


@pytest.mark.guards("hang")
@pytest.mark.parametrize("through_link", [False, True], ids=["fifo", "symlink-to-fifo"])
def test_a_fifo_is_refused_before_anything_is_written(tmp_path, through_link):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    path = tmp_path / "link" if through_link else fifo
    if through_link:
        path.symlink_to(fifo)
    with pytest.raises(NotARegularFileError, match="is a FIFO .* — nothing was written; pass the path of a regular"):
        atomic_write_text(path, "x")
    assert fifo.exists() and not fifo.is_file() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"pipe", path.name})


@pytest.mark.guards("internal")
def test_a_socket_is_refused(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "s.sock"))
        with pytest.raises(NotARegularFileError, match="is a socket, which cannot be written as a file — nothing"):
            atomic_write_bytes(tmp_path / "s.sock", b"x")
    finally:
        server.close()


@pytest.mark.guards("lost")
def test_a_link_to_a_full_device_gives_the_disk_full_error_and_stays(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    link = tmp_path / "report.json"
    link.symlink_to("/dev/full")
    with pytest.raises(PathError, match=r"the device is full .* — the disk or device is full") as caught:
        atomic_write_text(link, "{}")
    assert caught.value.errno == errno.ENOSPC
    assert link.is_symlink() and os.readlink(link) == "/dev/full" and not any(tmp_path.glob(".*tmp"))


@pytest.mark.guards("lost")
def test_a_link_to_dev_null_is_written_into_never_replaced(tmp_path):
    link = tmp_path / "discard.json"
    link.symlink_to(os.devnull)
    atomic_write_text(link, "{}")
    assert link.is_symlink() and os.path.exists(os.devnull) and not os.path.isfile(os.devnull)


@pytest.mark.guards("hang")
def test_a_symlink_loop_is_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(PathError, match="loops back on itself — remove the link"):
        atomic_write_text(tmp_path / "a", "x")


@pytest.mark.guards("hang")
def test_report_to_json_refuses_a_fifo(tmp_path):
    from jacobiscope.report import Report

    os.mkfifo(tmp_path / "r.json")
    with pytest.raises(NotARegularFileError, match="Report.to_json: .* is a FIFO"):
        Report([], {"model": "m"}).to_json(tmp_path / "r.json")


@pytest.mark.guards("hang")
def test_cli_json_output_that_is_a_fifo_is_one_line_before_any_model_load(tmp_path, capsys):
    os.mkfifo(tmp_path / "out.json")
    status, err = _cli(capsys, ["analyze", "no-such-model-at-all", "--json", tmp_path / "out.json"])
    assert status == 2 and len(err) == 1 and ONE_LINE.match(err[0]) and "is a FIFO" in err[0], err


# ------------------------------------------------------------------------ the shared overlap helper
@pytest.mark.parametrize("output, source, relation", [
    ("{t}/a/../m/x.json", "{t}/m", "inside"),
    ("{t}/m", "{t}/m/", "same"),
    ("{t}/m", "{t}/m/config.json", "holds"),
    ("{t}/link-to-m/x.json", "{t}/m", "inside"),
    ("{t}/hard.csv", "{t}/m/data.csv", "same"),
], ids=["dotdot", "trailing-slash", "holds", "via-symlink", "hard-link"])
@pytest.mark.guards("lost")
def test_path_relation_sees_through_spellings(tmp_path, output, source, relation):
    (tmp_path / "m").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "m" / "data.csv").write_text("x")
    os.link(tmp_path / "m" / "data.csv", tmp_path / "hard.csv")
    (tmp_path / "link-to-m").symlink_to(tmp_path / "m")
    assert path_relation(output.format(t=tmp_path), source.format(t=tmp_path)) == relation


@pytest.mark.guards("lost")
def test_refuse_output_inside_inputs_relative_to_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path / "m")
    with pytest.raises(OutputInsideInputError, match="lies inside the model folder .* — write it outside the inputs"):
        refuse_output_inside_inputs({"--json": "eval.json"}, {"the model folder": str(tmp_path / "m")})
    refuse_output_inside_inputs({"--json": "../eval.json"}, {"the model folder": str(tmp_path / "m")})


@pytest.mark.guards("lost")
def test_a_replaced_folder_output_that_holds_an_input_is_refused(tmp_path):
    with pytest.raises(OutputInsideInputError, match="holds the checkpoint .* replacing it would delete that input — "
                                                     "choose a new folder"):
        refuse_output_inside_inputs({"--out": tmp_path}, {"the checkpoint": tmp_path / "m"}, replaced=("--out",))


# ---------------------------------------------------------------- every command: outputs inside inputs
def _bom_recipe(folder):
    path = folder / "recipe.json"
    path.write_bytes(b'{"max_steps": 1}')
    return path


CASES = [
    ("analyze-json-in-model", ["analyze", "{model}", "--json", "{model}/report.json"], "lies inside the model folder"),
    ("analyze-out-is-config", ["analyze", "{model}", "--out", "{model}/config.json"], "lies inside the model folder"),
    ("analyze-json-is-weights", ["analyze", "{model}", "--json", "{model}/model.safetensors"],
     "lies inside the model folder"),
    ("analyze-json-via-link", ["analyze", "{model}", "--json", "{link}/report.json"], "lies inside the model folder"),
    ("eval-json-in-model", ["sudoku", "eval", "{model}", "--split", "{csv}", "--json", "{model}/eval.json"],
     "lies inside the model folder"),
    ("eval-json-is-split", ["sudoku", "eval", "{model}", "--split", "{csv}", "--json", "{csv}"],
     "is the split"),
    ("eval-json-is-split-dotdot", ["sudoku", "eval", "{model}", "--split", "{csv}", "--json", "{tmp}/x/../boards.csv"],
     "is the split"),
    ("eval-json-in-data", ["sudoku", "eval", "{model}", "--split", "id", "--data", "{tmp}/data", "--json",
                           "{tmp}/data/eval.json"], "lies inside the data --data"),
    ("train-out-is-data-file", ["sudoku", "train", "--out", "{tmp}/data/satnet.csv.xz/run", "--data",
                                "{tmp}/data/satnet.csv.xz"], "is a file"),
    ("train-out-in-data", ["sudoku", "train", "--out", "{tmp}/data/run", "--data", "{tmp}/data"],
     "lies inside the data --data"),
    ("prepare-out-holds-source", ["hub", "prepare", "{model}", "--out", "{tmp}"], "holds the checkpoint folder"),
    ("prepare-out-is-source-link", ["hub", "prepare", "{model}", "--out", "{link}"], "is the checkpoint folder"),
    ("prepare-out-in-source", ["hub", "prepare", "{model}", "--out", "{model}/prepared"],
     "lies inside the checkpoint folder"),
]


@pytest.mark.parametrize("argv, fragment", [pytest.param(argv, fragment, id=name, marks=pytest.mark.guards("lost"))
                                            for name, argv, fragment in CASES])
def test_an_output_inside_an_input_is_refused_and_nothing_changes(tmp_path, capsys, model_copy, argv, fragment):
    (tmp_path / "data").mkdir()
    shutil.copy(jacobiscope.data.sudoku.BUNDLED_DIR / "satnet.csv.xz", tmp_path / "data" / "satnet.csv.xz")
    (tmp_path / "boards.csv").write_text(f"{PUZZLE}\n")
    (tmp_path / "link").symlink_to(model_copy)
    before = _snapshot(tmp_path)
    values = {"model": model_copy, "tmp": tmp_path, "csv": tmp_path / "boards.csv", "link": tmp_path / "link"}
    status, err = _cli(capsys, [part.format(**values) for part in argv])
    assert status == 2 and len(err) == 1 and ONE_LINE.match(err[0]), err
    assert fragment in err[0], err
    assert _snapshot(tmp_path) == before


@pytest.mark.guards("lost")
def test_train_out_that_is_the_recipe_file_is_refused(tmp_path, capsys):
    recipe = _bom_recipe(tmp_path)
    before = recipe.read_bytes()
    status, err = _cli(capsys, ["sudoku", "train", "--config", recipe, "--out", recipe])
    assert status == 2 and len(err) == 1 and ("is a file" in err[0] or "is the recipe" in err[0]), err
    assert recipe.read_bytes() == before


# ------------------------------------------------------------------------------ inputs that would block
@pytest.mark.parametrize("load", [
    pytest.param(lambda path: jacobiscope.data.sudoku.load_csv(path), id="load_csv",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda path: jacobiscope.data.sudoku.satnet_splits(path), id="satnet_splits",
                 marks=pytest.mark.guards("hang")),
    pytest.param(lambda path: jacobiscope.data.sudoku.rrn_test(path), id="rrn_test", marks=pytest.mark.guards("hang")),
    pytest.param(lambda path: jacobiscope.data.sudoku.load_satnet_tensors(path), id="load_satnet_tensors",
                 marks=pytest.mark.guards("hang")),
])
def test_a_fifo_given_as_data_is_refused_not_read_forever(tmp_path, load):
    os.mkfifo(tmp_path / "boards.csv")
    with pytest.raises(jacobiscope.data.SudokuFileError, match="is a FIFO .* not a regular file — reading it could "
                                                               "block forever; pass the path of a csv file"):
        load(tmp_path / "boards.csv")


# ----------------------------------------------------------------------------------- property tests
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_PART = st.text(alphabet="abcxyz_-", min_size=1, max_size=6)


@pytest.mark.guards("lost")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inside=st.lists(_PART, min_size=1, max_size=4), noise=st.lists(st.sampled_from([".", "..x", "q/.."]),
                                                                      max_size=3),
       link=st.booleans())
def test_property_every_spelling_of_a_path_inside_an_input_is_refused(tmp_path, inside, noise, link):
    """However the output is spelled (``.``, ``x/..``, through a symlink), if it resolves inside the input folder
    it is refused; the same names under a sibling folder never are."""
    source = tmp_path / "model"
    source.mkdir(exist_ok=True)
    alias = tmp_path / "alias"
    if not alias.exists():
        alias.symlink_to(source)
    parts = []
    for index, part in enumerate(inside):
        parts.append(part)
        if index < len(noise):
            parts.extend(noise[index].replace("..x", "x/..").split("/"))
    output = (alias if link else source).joinpath(*parts)
    with pytest.raises(OutputInsideInputError, match="lies inside the model folder"):
        refuse_output_inside_inputs({"--json": output}, {"the model folder": source})
    refuse_output_inside_inputs({"--json": tmp_path.joinpath("model-out", *parts)}, {"the model folder": source})


@pytest.mark.guards("lost")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=256), through_link=st.booleans())
def test_property_the_writer_keeps_links_and_writes_the_bytes(tmp_path, data, through_link):
    target = tmp_path / "target.bin"
    target.write_bytes(b"old")
    path = target
    if through_link:
        path = tmp_path / "link.bin"
        if not path.is_symlink():
            path.symlink_to(target)
    atomic_write_bytes(path, data)
    assert target.read_bytes() == data and (not through_link or path.is_symlink())
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
