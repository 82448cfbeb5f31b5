"""Bad inputs at the library's edges: checkpoint folders (load_pretrained), report files (Report.from_json /
to_json / save_html) and the command line. Every case is a real file in tmp_path (tiny models built from configs
and saved with save_pretrained), no mocks; each asserts the exact outcome: the exception type and the key words of
its one-line message (what is wrong and the fix), or the CLI's exit status 2 with one stderr line."""
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import jacobiscope
from hf_models import tiny_configs, tiny_model
from jacobiscope._io import (
    MissingFileError, NoPermissionError, NotAFileError, NotAFolderError, PathError, atomic_write_text,
)
from jacobiscope.cli import main
from jacobiscope.hub import HubError, check_repo_id, load_pretrained, prepare_for_hub
from jacobiscope.report import LayerResult, Report

ONE_LINE = re.compile(r"^jacobiscope: error: \S.* — \S.*$")


# ------------------------------------------------------------------------------------------------ helpers
def _saved(tmp_path, family="bert", name=None, model_class=None):
    """A tiny model of ``family`` saved with save_pretrained; returns its folder."""
    folder = tmp_path / (name or family)
    if model_class is None:
        tiny_model(family).save_pretrained(folder)
    else:
        torch.manual_seed(0)
        model_class(tiny_configs()[family]).save_pretrained(folder)
    return folder


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _rewrite_weights(folder, change):
    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _only_one_tensor_nan(tensors):
    tensors["encoder.layer.1.attention.self.query.weight"][0, 0] = math.nan


def _corrupt_data_bytes(folder):
    """Overwrite the first bytes of the tensor data (not the header) with NaN bit patterns, as a bad disk would."""
    data = bytearray((folder / "model.safetensors").read_bytes())
    header = struct.unpack("<Q", data[:8])[0]
    data[8 + header: 8 + header + 64] = struct.pack("<f", math.nan) * 16
    (folder / "model.safetensors").write_bytes(bytes(data))


def _truncate(folder, keep):
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:keep(len(data))])


def _gpt2_config_over_bert(folder):
    (folder / "config.json").unlink()
    tiny_configs()["gpt2"].save_pretrained(folder)


def _pickle_only(folder):
    model = load_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")


def _index_without_shard(folder):
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"embeddings.word_embeddings.weight": "model-00001-of-00002.safetensors"}}))


def _index_garbage(folder):
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    (folder / "model.safetensors.index.json").write_text("{{{ not json")


def _remote_code_only(folder):
    """A folder whose model class exists only in its own code (auto_map, a model_type transformers lacks)."""
    shutil.rmtree(folder)
    prepare_for_hub("itrsa-sudoku", folder)
    _edit_config(folder, model_type="itrsa_custom_code")


def _integer_weights(tensors):
    key = "encoder.layer.0.attention.self.key.weight"
    tensors[key] = tensors[key].to(torch.int32)


LOAD_CASES = [
    # (id, how the saved BERT folder is broken, message fragments)
    ("nan-weights", lambda f: _rewrite_weights(f, _only_one_tensor_nan),
     ["bert/model.safetensors holds NaN/Inf", "'encoder.layer.1.attention.self.query.weight' has 1 of 256",
      "re-download"]),
    ("nan-bytes-on-disk", _corrupt_data_bytes, ["bert/model.safetensors holds NaN/Inf", "tensor '"]),
    ("truncated-safetensors", lambda f: _truncate(f, lambda n: n // 2),
     ["bert/model.safetensors is corrupt or truncated", "re-download or re-save"]),
    ("truncated-header", lambda f: _truncate(f, lambda n: 20), ["corrupt or truncated", "invalid header length"]),
    ("empty-safetensors", lambda f: _truncate(f, lambda n: 0), ["corrupt or truncated", "header too small"]),
    ("gpt2-config-over-bert-weights", _gpt2_config_over_bert,
     ["config.json of 'bert' does not match model.safetensors", "GPT2Model (model_type 'gpt2')",
      "another model family", "pass the config.json saved with these weights"]),
    ("config-other-sizes", lambda f: _edit_config(f, intermediate_size=48),
     ["does not match model.safetensors", "of another shape", "[32, 16] in the file, [48, 16] by the config"]),
    ("config-more-layers", lambda f: _edit_config(f, num_hidden_layers=4),
     ["16 weight(s) the config needs are missing from the file", "encoder.layer.3."]),
    ("config-fewer-layers", lambda f: _edit_config(f, num_hidden_layers=2),
     ["16 weight(s) in the file fit no module of the config", "encoder.layer.2."]),
    ("config-invalid-json", lambda f: (f / "config.json").write_text('{"model_type": "bert",'),
     ["bert/config.json is not valid JSON", "line 1", "re-save the model with save_pretrained"]),
    ("config-empty", lambda f: (f / "config.json").write_text(""), ["bert/config.json is empty"]),
    ("config-a-list", lambda f: (f / "config.json").write_text("[1, 2]"),
     ["config.json holds a JSON list, expected an object"]),
    ("config-without-model-type", lambda f: (f / "config.json").write_text('{"hidden_size": 16}'),
     ["config.json has no model_type", "re-save"]),
    ("config-unknown-model-type", lambda f: _edit_config(f, model_type="frobnicator"),
     ["model_type 'frobnicator', which transformers", "pip install -U transformers"]),
    ("no-config", lambda f: (f / "config.json").unlink(), ["model folder 'bert' has no config.json"]),
    ("pickle-weights-only", _pickle_only,
     ["only pickle weights (pytorch_model.bin)", "save_pretrained(folder, safe_serialization=True)"]),
    ("weights-under-another-name", lambda f: (f / "model.safetensors").rename(f / "weights.safetensors"),
     ["holds weights.safetensors but no model.safetensors", "rename the weights to model.safetensors"]),
    ("index-names-a-missing-shard", _index_without_shard,
     ["names the shard 'model-00001-of-00002.safetensors', which is not in the folder"]),
    ("index-not-json", _index_garbage, ["model.safetensors.index.json is not valid JSON"]),
    ("integer-weights", lambda f: _rewrite_weights(f, _integer_weights),
     ["stores tensor 'encoder.layer.0.attention.self.key.weight' as I32", "is float32", "re-download"]),
    ("remote-code-without-trust", _remote_code_only, ["needs its own Python code", "trust_remote_code=True"]),
]


@pytest.mark.parametrize("breakage, fragments", [case[1:] for case in LOAD_CASES], ids=[case[0] for case in LOAD_CASES])
def test_load_pretrained_refuses_a_broken_folder(tmp_path, breakage, fragments):
    folder = _saved(tmp_path)
    breakage(folder)
    with pytest.raises(HubError) as error:
        load_pretrained(folder)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and " — " in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert str(tmp_path) not in message  # folders are named as public_name shows them


@pytest.mark.parametrize("argument, fragment", [
    (None, "got NoneType"),
    (3, "got int"),
    (b"folder", "got bytes"),
    ("", "no checkpoint named (got '')"),
    ("   ", "no checkpoint named"),
    ("no-such-model", "unknown checkpoint 'no-such-model'"),
    ("./no/such/folder", "no such model folder './no/such/folder'"),
], ids=["none", "int", "bytes", "empty", "blank", "unknown-name", "missing-folder"])
def test_load_pretrained_refuses_a_bad_name(argument, fragment):
    with pytest.raises(HubError, match=re.escape(fragment)):
        load_pretrained(argument)


def test_load_pretrained_names_a_dtype_overflow(tmp_path):
    folder = _saved(tmp_path)
    _rewrite_weights(folder, lambda tensors: tensors["encoder.layer.0.output.dense.weight"].__setitem__((0, 0), 1e6))
    with pytest.raises(HubError, match=r"'encoder.layer.0.output.dense.weight' of 'bert' is NaN/Inf after loading, "
                                       r"although its file holds finite values: they overflow float16 — load in "
                                       r"float32"):
        load_pretrained(folder, dtype=torch.float16)
    assert load_pretrained(folder).encoder.layer[0].output.dense.weight[0, 0] == 1e6


def test_load_pretrained_refuses_a_file(tmp_path):
    folder = _saved(tmp_path)
    with pytest.raises(HubError, match="is a file, not a model folder — pass the folder"):
        load_pretrained(folder / "model.safetensors")


def test_good_checkpoints_still_load(tmp_path):
    # A checkpoint of a task model (BertForMaskedLM: cls.* heads, no pooler) loads as the base model, as in
    # transformers; strict=False loads a mismatched config on purpose; output_loading_info still works.
    masked = _saved(tmp_path, "bert", "masked", model_class=transformers.BertForMaskedLM)
    assert type(load_pretrained(masked)).__name__ == "BertModel"
    deeper = _saved(tmp_path, "bert", "deeper")
    _edit_config(deeper, num_hidden_layers=4)
    model, info = load_pretrained(deeper, strict=False, output_loading_info=True)
    assert len(model.encoder.layer) == 4 and any(key.startswith("encoder.layer.3.") for key in info["missing_keys"])
    assert type(load_pretrained("itrsa-sudoku")).__name__ == "ItrSAForSudoku"


# ---------------------------------------------------------------------------------------------- hub helpers
@pytest.mark.parametrize("repo_id", ["bad repo id!", "owner/name/extra", "owner--x/name", "a..b", "-name", "", None],
                         ids=["spaces", "three-parts", "double-dash", "double-dot", "leading-dash", "empty", "none"])
def test_check_repo_id_refuses_what_the_hub_would(repo_id):
    with pytest.raises(HubError, match="is not a Hub repo id — use owner/name"):
        check_repo_id(repo_id)


def test_prepare_for_hub_never_deletes_the_source_or_an_unrelated_folder(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(jacobiscope.hub.shipped_checkpoints()["itrsa-sudoku"], run / "best")
    with pytest.raises(HubError, match="holds the checkpoint .* would delete the source — choose a new folder"):
        prepare_for_hub(run / "best", run)
    assert (run / "best" / "model.safetensors").is_file()
    with pytest.raises(HubError, match="lies inside the checkpoint folder"):
        prepare_for_hub(run / "best", run / "best" / "prepared")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "thesis.tex").write_text("years of work")
    with pytest.raises(HubError, match="is not a prepared checkpoint .* is not replaced — choose a new or empty"):
        prepare_for_hub(run / "best", notes)
    assert (notes / "thesis.tex").read_text() == "years of work"
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(HubError, match="is a file — give a folder path"):
        prepare_for_hub(run / "best", tmp_path / "a-file")
    with pytest.raises(HubError, match="knows only the reference models .* not model_type 'bert' — pass"):
        prepare_for_hub(_saved(tmp_path), tmp_path / "prepared")
    assert not (tmp_path / "prepared").exists()  # refused before anything was copied
    again = prepare_for_hub(run / "best", tmp_path / "prepared")  # an earlier prepared copy is replaced
    assert prepare_for_hub(run / "best", again) == again and (again / "modeling_itrsa.py").is_file()


# ------------------------------------------------------------------------------------------- report reading
def _row(**overrides):
    values = dict(input_index=0, input_label="x", layer=5, mode="block", eta=None, loops=1, state_shape=[2],
                  state_norm=[1.0, math.inf], step_size=[math.nan], spectral_norm=[], eigenvalues=None,
                  eigen_loop=None, oscillation=None, lyapunov=None, clusters=None, energy=None, regime="diverging",
                  evidence={"growth": math.inf}, flags=["NaN/Inf at loop 1"], seconds=0.0)
    values.update(overrides)
    return LayerResult(**values)


@pytest.fixture
def report():
    return Report([_row()], {"model": "demo"}, ["a note"])


def _document(report, change=None):
    data = json.loads(report.to_json())
    if change is not None:
        change(data)
    return data


def _set(path, value):
    def change(data):
        if path[0] == "rows":
            data["nonfinite"] = {}  # the row changes, so the markers of its NaN/Inf would point nowhere
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


READ_CASES = [
    # (id, file bytes or a document change, exception type, message fragments)
    ("empty-file", b"", ValueError, ["is empty", "pass a file written by Report.to_json"]),
    ("blank-file", b"  \n\t\n", ValueError, ["is empty"]),
    ("invalid-json", b"{rows: [", ValueError, ["is not valid JSON", "line 1 column 2"]),
    ("truncated-json", "truncate", ValueError, ["is not valid JSON", "truncated or edited?"]),
    ("not-utf8", b"\xff\xfe\x00{}", ValueError, ["is not UTF-8 text (byte 0xff at offset 0)"]),
    ("json-array", b"[1, 2]", ValueError, ["holds a JSON list, expected an object"]),
    ("another-tools-json", json.dumps({"name": "pkg", "version": "1.0", "dependencies": {}}).encode(), ValueError,
     ["not a jacobiscope report", "has no rows (keys: 'dependencies', 'name', 'version')"]),
    ("another-format", _set(["format"], "coverage"), ValueError, ["format is 'coverage'", "another tool"]),
    ("newer-format-version", _set(["format_version"], 99), ValueError,
     ["format_version 99", "Upgrade jacobiscope (git pull"]),
    ("format-version-a-string", _set(["format_version"], "1"), ValueError,
     ["format_version is '1' (str), expected an integer"]),
    ("format-version-zero", _set(["format_version"], 0), ValueError, ["format_version 0 was never written"]),
    ("deep-nesting", b"[" * 100000 + b"]" * 100000, ValueError, ["nests JSON too deeply"]),
    ("huge-integer", b'{"rows": [], "provenance": {"x": ' + b"9" * 5000 + b"}}", ValueError,
     ["is not usable JSON"]),
    ("rows-an-object", _set(["rows"], {"a": 1}), ValueError, ["rows is a JSON dict, expected a list"]),
    ("row-a-list", _set(["rows", 0], [1, 2]), ValueError, ["rows[0] is a JSON list, expected an object"]),
    ("row-missing-fields", _set(["rows"], [{"layer": 0}]), ValueError, ["rows[0]", "missing field(s) input_index"]),
    ("row-loops-a-string", _set(["rows", 0, "loops"], "three"), ValueError,
     ["rows[0]: loops is 'three' (str), expected an int >= 0"]),
    ("row-loops-negative", _set(["rows", 0, "loops"], -1), ValueError, ["loops is -1 (int), expected an int >= 0"]),
    ("row-loops-a-float", _set(["rows", 0, "loops"], 1.5), ValueError, ["loops is 1.5 (float)"]),
    ("row-loops-a-bool", _set(["rows", 0, "loops"], True), ValueError, ["loops is True (bool)"]),
    ("row-layer-a-string", _set(["rows", 0, "layer"], "5"), ValueError, ["layer is '5' (str), expected an int"]),
    ("row-mode-a-number", _set(["rows", 0, "mode"], 3), ValueError, ["mode is 3 (int), expected one of 'block'"]),
    ("row-regime-unknown", _set(["rows", 0, "results", "regime"], {"regime": "stable", "evidence": {}}), ValueError,
     ["regime is 'stable' (str), expected one of 'converging'"]),
    ("row-flags-a-string", _set(["rows", 0, "flags"], "oops"), ValueError, ["flags is 'oops' (str)"]),
    ("row-seconds-a-string", _set(["rows", 0, "seconds"], "1s"), ValueError, ["seconds is '1s' (str)"]),
    ("row-state-shape-an-int", _set(["rows", 0, "state_shape"], 7), ValueError, ["state_shape is 7 (int)"]),
    ("row-step-size-with-text", _set(["rows", 0, "step_size"], [1, "a"]), ValueError,
     ["step_size is [1, 'a'] (list), expected a list of numbers"]),
    ("row-spectral-norm-numbers", _set(["rows", 0, "results", "spectral_norm"], {"samples": [1, 2]}), ValueError,
     ["spectral_norm[0] is 1 (int)"]),
    ("row-eigenvalues-flat", _set(["rows", 0, "results", "eigenvalues"], {"loop": 1, "values": [1, 2], "oscillation": None}), ValueError,
     ["eigenvalues is [1, 2] (list), expected null or a list of [re, im]"]),
    ("row-lyapunov-exponents-a-number", _set(["rows", 0, "results", "lyapunov"], {"exponents": 1, "stderr": [], "history": [], "kaplan_yorke": 0.0}), ValueError,
     ["lyapunov['exponents'] is 1 (int)"]),
    ("row-input-index-null", _set(["rows", 0, "input_index"], None), ValueError, ["input_index is None"]),
    ("provenance-a-list", _set(["provenance"], [1]), ValueError, ["provenance is a JSON list, expected an object"]),
    ("notes-a-string", _set(["notes"], "a note"), ValueError, ["notes is a JSON str, expected a list"]),
    ("notes-numbers", _set(["notes"], [1, 2]), ValueError, ["notes[0] is 1, expected a string"]),
    ("nonfinite-a-list", _set(["nonfinite"], ["x"]), ValueError, ["nonfinite is a JSON list, expected an object"]),
    ("nonfinite-unknown-kind", _set(["nonfinite", "/rows/0/state_norm/1"], "banana"), ValueError,
     ["is 'banana', expected 'nan', 'inf' or '-inf'"]),
    ("nonfinite-pointing-nowhere", _set(["nonfinite", "/rows/0/zzz"], "nan"), ValueError,
     ["nonfinite entry '/rows/0/zzz' points to nothing"]),
]


@pytest.mark.parametrize("content, kind, fragments", [case[1:] for case in READ_CASES],
                         ids=[case[0] for case in READ_CASES])
def test_from_json_refuses_a_bad_file(tmp_path, report, content, kind, fragments):
    path = tmp_path / "report.json"
    if content == "truncate":
        text = report.to_json()
        path.write_text(text[: len(text) // 2])
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(json.dumps(_document(report, content)))
    with pytest.raises(kind) as error:
        Report.from_json(path)
    message = str(error.value)
    assert len(message.splitlines()) == 1, message
    assert " — " in message or "Upgrade jacobiscope" in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("source, kind, fragment", [
    ("", ValueError, "Report.from_json got an empty string"),
    ("[1, 2]", ValueError, "the JSON text holds a JSON list"),
    (None, TypeError, "expected a path or JSON text, got NoneType"),
    (3.5, TypeError, "got float"),
    ("missing", MissingFileError, "no such report file"),
    ("folder", NotAFileError, "is a folder — pass the report file inside it"),
], ids=["empty-string", "json-array-text", "none", "float", "missing-file", "folder"])
def test_from_json_refuses_a_bad_source(tmp_path, source, kind, fragment):
    if source == "missing":
        source = tmp_path / "absent.json"
    elif source == "folder":
        source = tmp_path
    with pytest.raises(kind, match=re.escape(fragment)):
        Report.from_json(source)


def test_from_json_reads_a_file_with_a_byte_order_mark(tmp_path, report):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + report.to_json().encode())  # as Windows editors save it
    assert Report.from_json(path) == report


# ------------------------------------------------------------------------------------------- report writing
@pytest.mark.parametrize("writer", ["to_json", "save_html"])
@pytest.mark.parametrize("target, kind, fragment", [
    ("folder", NotAFileError, "is a folder, not a file — pass a file path inside it"),
    ("under-a-file", NotAFolderError, "is a file, not a folder — choose a path"),
    ("empty", MissingFileError, "got an empty file path ''"),
    ("name-too-long", PathError, "characters, too long for the file system — use a name under 200"),
    ("nul", PathError, "contains a NUL character"),
    ("int", TypeError, "expected a file path (str or os.PathLike), got int"),
], ids=["folder", "under-a-file", "empty", "name-too-long", "nul", "int"])
def test_writers_refuse_a_bad_path_and_leave_nothing(tmp_path, report, writer, target, kind, fragment):
    (tmp_path / "a-file").write_text("keep")
    path = {"folder": tmp_path, "under-a-file": tmp_path / "a-file" / "r.out", "empty": "",
            "name-too-long": tmp_path / ("r" * 300), "nul": f"{tmp_path}/r\0.out", "int": 5}[target]
    write = (lambda p: report.to_json(p)) if writer == "to_json" else (lambda p: report.save_html(p, figures=False))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(kind, match=re.escape(fragment)):
        write(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temp file, nothing half written
    assert (tmp_path / "a-file").read_text() == "keep"
    if kind is not TypeError:
        assert isinstance(pytest.raises(PathError, write, path).value, OSError)


@pytest.mark.parametrize("dpi, figures, kind, fragment", [
    (0, True, ValueError, "dpi must be a number from 1 to 1200, got 0"),
    (math.inf, True, ValueError, "got inf"),
    ("high", True, TypeError, "dpi must be a number, got str"),
    (100, "yes", TypeError, "figures must be True or False, got 'yes'"),
], ids=["dpi-zero", "dpi-inf", "dpi-text", "figures-text"])
def test_save_html_refuses_bad_options_before_drawing(tmp_path, report, dpi, figures, kind, fragment):
    with pytest.raises(kind, match=re.escape(fragment)):
        report.save_html(tmp_path / "r.html", figures=figures, dpi=dpi)
    assert list(tmp_path.iterdir()) == []


def test_writers_create_missing_folders(tmp_path, report):
    report.to_json(tmp_path / "a" / "b" / "r.json")
    assert Report.from_json(tmp_path / "a" / "b" / "r.json") == report
    assert report.save_html(tmp_path / "c" / "d" / "r.html", figures=False).is_file()


def test_a_failed_serialization_leaves_the_old_file(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    with pytest.raises(TypeError, match="JSON cannot hold"):
        Report([_row()], {"model": object()}, []).to_json(path)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["report.json"]


_CHILD = textwrap.dedent("""
    import json, os, resource, signal, sys, tempfile
    from pathlib import Path
    from jacobiscope.report import Report
    folder = Path(sys.argv[1])
    report = Report.from_json(sys.argv[2])
    outcome = {}
    if sys.argv[3] == "read-only":
        os.chmod(folder, 0o555)
        if os.geteuid() == 0:
            os.seteuid(65534)  # root writes anywhere: act as nobody, as a user on a read-only share would be
        try:
            report.to_json(folder / "report.json")
        except Exception as error:
            outcome = {"type": type(error).__name__, "message": str(error), "oserror": isinstance(error, OSError)}
        if os.geteuid() != os.getuid():
            os.seteuid(0)
        os.chmod(folder, 0o755)
    else:  # the disk fills up in the middle of the write
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, resource.RLIM_INFINITY))
        try:
            report.to_json(folder / "report.json")
        except Exception as error:
            outcome = {"type": type(error).__name__, "message": str(error), "oserror": isinstance(error, OSError)}
    print(json.dumps(outcome))
""")


@pytest.mark.parametrize("failure, kind, fragments", [
    ("read-only", "NoPermissionError", ["no permission to write in", "choose a folder you can write to"]),
    ("disk-full", "PathError", ["cannot write", "File too large", "the old file, if any, is intact"]),
], ids=["read-only-folder", "disk-full-mid-write"])
def test_a_failed_write_is_atomic(tmp_path, report, failure, kind, fragments):
    # A real failure in a child process: a folder the writer may not write to, or a file size limit hit after
    # the first 200 bytes. Either way the old report stays whole and no temp file is left behind.
    folder = Path(__import__("tempfile").mkdtemp(prefix="jacobiscope-io-"))
    try:
        os.chmod(folder, 0o755)
        old = Report([], {"model": "old"}, []).to_json(folder / "report.json")
        source = tmp_path / "new.json"
        big = Report([_row(input_label="x" * 2000)], {"model": "new"}, [])
        big.to_json(source)
        result = subprocess.run([sys.executable, "-c", _CHILD, str(folder), str(source), failure],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        outcome = json.loads(result.stdout.strip().splitlines()[-1])
        assert outcome["type"] == kind and outcome["oserror"], outcome
        assert len(outcome["message"].splitlines()) == 1 and " — " in outcome["message"]
        for fragment in fragments:
            assert fragment in outcome["message"], (fragment, outcome["message"])
        assert (folder / "report.json").read_text() == old
        assert sorted(p.name for p in folder.iterdir()) == ["report.json"]
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder, ignore_errors=True)


def test_path_errors_are_oserrors_of_the_matching_kind(tmp_path):
    with pytest.raises(IsADirectoryError):
        atomic_write_text(tmp_path, "x")
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        atomic_write_text(tmp_path / "f" / "g", "x")
    with pytest.raises(FileNotFoundError):
        Report.from_json(tmp_path / "absent.json")
    assert issubclass(NoPermissionError, PermissionError) and issubclass(PathError, jacobiscope.errors.JacobiscopeError)


# ------------------------------------------------------------------------------------------------ CLI
@pytest.fixture(autouse=True)
def restore_transformers_logging():
    """--quiet turns transformers' bars and info logs off process-wide: put them back for the other tests."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as transformers_logging

    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    hub_bars_off = are_progress_bars_disabled()
    yield
    transformers_logging.set_verbosity(verbosity)
    (transformers_logging.enable_progress_bar if bars else transformers_logging.disable_progress_bar)()
    (disable_progress_bars if hub_bars_off else enable_progress_bars)()


def _cli(argv, capsys):
    status = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _assert_user_error(argv, capsys, *fragments):
    status, _, err = _cli(argv, capsys)
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and ONE_LINE.match(lines[0]), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
def folders(tmp_path):
    """Model folders the CLI cases point at, built on demand."""
    def make(kind):
        folder = tmp_path / kind
        if folder.exists():
            return folder
        if kind == "bert":
            _saved(tmp_path)
        elif kind == "no-config":
            _saved(tmp_path, name=kind)
            (folder / "config.json").unlink()
        elif kind == "pickle":
            _pickle_only(_saved(tmp_path, name=kind))
        elif kind == "nan":
            _rewrite_weights(_saved(tmp_path, name=kind), _only_one_tensor_nan)
        elif kind == "gpt2-over-bert":
            _gpt2_config_over_bert(_saved(tmp_path, name=kind))
        elif kind == "remote":
            _remote_code_only(_saved(tmp_path, name=kind))
        elif kind == "a-file":
            folder.write_text("x")
        return folder
    return make


SOLVER = ["itrsa-sudoku", "--quiet"]
CLI_CASES = [
    # (id, argv with {name} for a folder from `folders`, fragments of the one stderr line)
    ("unknown-subcommand", ["frobnicate"], ["invalid choice: 'frobnicate'", "see 'jacobiscope --help'"]),
    ("unknown-hub-subcommand", ["hub", "delete"], ["invalid choice: 'delete'"]),
    ("loops-negative", ["analyze", *SOLVER, "--loops", "-1"], ["--loops: expected an integer >= 1, got '-1'"]),
    ("loops-float", ["analyze", *SOLVER, "--loops", "1e3"], ["--loops: expected an integer >= 1, got '1e3'"]),
    ("layers-letters", ["analyze", *SOLVER, "--layers", "a,b"], ["--layers: expected comma-separated integers"]),
    ("layers-empty", ["analyze", *SOLVER, "--layers", ""], ["--layers: expected comma-separated integers"]),
    ("eta-infinite", ["analyze", *SOLVER, "--eta", "inf"], ["--eta: expected a number > 0.0 (finite), got 'inf'"]),
    ("puzzle-80-chars", ["analyze", *SOLVER, "--puzzle", "0" * 80],
     ["--puzzle #1 is not a usable Sudoku puzzle", "got 80", "give 81 digits"]),
    ("puzzle-contradictory", ["analyze", *SOLVER, "--puzzle", "11" + "0" * 79],
     ["digit 1 appears twice in row 1"]),
    ("out-a-folder", ["analyze", *SOLVER, "--out", "{tmp}"], ["--out", "is a folder — give a file name"]),
    ("out-under-a-file", ["analyze", *SOLVER, "--out", "{a-file}/r.html"],
     ["is a file, not a folder — choose a path"]),
    ("out-empty", ["analyze", *SOLVER, "--out", ""], ["--out needs a file name, got ''", "--out report.html"]),
    ("json-a-folder", ["analyze", *SOLVER, "--json", "{tmp}"], ["--json", "is a folder", "report.json"]),
    ("json-empty", ["analyze", *SOLVER, "--json", " "], ["--json needs a file name"]),
    ("json-same-file-as-out", ["analyze", *SOLVER, "--json", "{tmp}/r", "--out", "{tmp}/r"],
     ["--out and --json both name", "give them different files"]),
    ("diagnostics-unknown", ["analyze", *SOLVER, "--diagnostics", "lyapunov,entropy"],
     ["unknown diagnostic(s) entropy", "choose from spectral_norm"]),
    ("diagnostics-empty", ["analyze", *SOLVER, "--diagnostics", ","], ["--diagnostics: expected comma-separated"]),
    ("mode-unknown", ["analyze", *SOLVER, "--mode", "mlp"], ["--mode: invalid choice: 'mlp'"]),
    ("mode-loop-without-recurrence", ["analyze", "{bert}", "--quiet", "--mode", "loop"],
     ["has no recurrence of its own", "use --mode block or --mode attention"]),
    ("mode-attention-on-a-solver", ["analyze", *SOLVER, "--mode", "attention"],
     ["--mode attention does not apply to itrsa-sudoku", "drop --mode"]),
    ("recurrence-unknown", ["analyze", *SOLVER, "--recurrence", "Z"], ["has no recurrence 'Z'", "choose from loop"]),
    ("recurrence-on-a-plain-model", ["analyze", "{bert}", "--quiet", "--recurrence", "L"],
     ["has no recurrence 'L'", "use --mode block"]),
    ("remote-code-without-the-flag", ["analyze", "{remote}", "--quiet"],
     ["needs its own Python code", "rerun with --trust-remote-code"]),
    ("trust-remote-code-where-it-means-nothing", ["hub", "list", "--trust-remote-code"],
     ["unrecognized arguments: --trust-remote-code"]),
    ("text-empty", ["analyze", "{bert}", "--quiet", "--text", ""], ["--text #1 is empty", "give a sentence"]),
    ("text-blank-second", ["analyze", "{bert}", "--quiet", "--text", "a b", "--text", "   "], ["--text #2 is empty"]),
    ("text-on-a-solver", ["analyze", *SOLVER, "--text", "hi"], ["takes puzzles, not --text"]),
    ("puzzle-on-a-language-model", ["analyze", "{bert}", "--quiet", "--puzzle", "0" * 81],
     ["is not a looped Sudoku solver, so --puzzle does not apply"]),
    ("model-empty", ["analyze", "", "--quiet"], ["no model named (got '')", "pass 'minilm'"]),
    ("model-folder-without-config", ["analyze", "{no-config}", "--quiet"], ["has no config.json"]),
    ("model-folder-with-pickle-only", ["analyze", "{pickle}", "--quiet"],
     ["only pickle weights (pytorch_model.bin)", "safe_serialization=True"]),
    ("model-a-file", ["analyze", "{a-file}", "--quiet"], ["is a file, not a model folder"]),
    ("model-with-nan-weights", ["analyze", "{nan}", "--quiet"],
     ["nan/model.safetensors holds NaN/Inf weights", "encoder.layer.1.attention.self.query.weight"]),
    ("model-config-of-another-family", ["analyze", "{gpt2-over-bert}", "--quiet"],
     ["does not match model.safetensors", "another model family"]),
    ("hub-prepare-a-plain-model", ["hub", "prepare", "{bert}", "--out", "{tmp}/prepared"],
     ["knows only the reference models", "not model_type 'bert'"]),
    ("hub-prepare-out-a-file", ["hub", "prepare", "itrsa-sudoku", "--out", "{a-file}"],
     ["is a file — give a folder path"]),
    ("hub-push-bad-repo-id", ["hub", "push", "itrsa-sudoku", "--repo-id", "bad repo id!"],
     ["'bad repo id!' is not a Hub repo id"]),
    ("sudoku-train-out-a-file", ["sudoku", "train", "--out", "{a-file}", "--max-steps", "1"],
     ["cannot be a run folder", "is a file"]),
    ("sudoku-train-out-empty", ["sudoku", "train", "--out", ""], ["--out needs a folder name, got ''"]),
    ("hub-prepare-out-empty", ["hub", "prepare", "itrsa-sudoku", "--out", ""], ["--out needs a folder name"]),
    ("sudoku-eval-json-a-folder", ["sudoku", "eval", "itrsa-sudoku", "--json", "{tmp}"], ["--json", "is a folder"]),
]


@pytest.mark.parametrize("argv, fragments", [case[1:] for case in CLI_CASES], ids=[case[0] for case in CLI_CASES])
def test_cli_bad_arguments_are_one_line(tmp_path, folders, capsys, argv, fragments):
    def fill(arg):
        for key in re.findall(r"{([a-z0-9-]+)}", arg):
            arg = arg.replace(f"{{{key}}}", str(tmp_path if key == "tmp" else folders(key)))
        return arg

    argv = [fill(arg) for arg in argv]
    capsys.readouterr()  # save_pretrained's own progress bars while the folders were built
    _assert_user_error(argv, capsys, *fragments)


def test_cli_out_into_a_missing_folder_creates_it(tmp_path, capsys):
    html, record = tmp_path / "new" / "deeper" / "report.html", tmp_path / "other" / "report.json"
    status, out, err = _cli(["analyze", "itrsa-sudoku", "--loops", "2", "--puzzles", "1", "--diagnostics",
                             "spectral_norm", "--quiet", "--out", html, "--json", record], capsys)
    assert status == 0, err
    assert html.is_file() and Report.from_json(record).rows and f"wrote {record}" in out
