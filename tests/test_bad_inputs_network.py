"""Nothing touches the network unless asked (issue 28, family 3). Every path that can name a Hub id — analyze MODEL,
sudoku eval MODEL, hub prepare NAME, load_pretrained / locate_model, the tokenizer analyze loads, the Sudoku data
loaders — stays offline by default and fails at once with the fix (--download / download=True / a local folder).
Each test unsets HF_HUB_OFFLINE (so that only our own code can keep it offline) and blocks every socket
(`no_network`): a connection attempt fails the test."""
import re

import pytest

from jacobiscope.cli import main

ONE_LINE = re.compile(r"^jacobiscope: error: \S.* — \S.*$")
HUB_ID = "someone-nonexistent/looped-model"


@pytest.fixture
def online(monkeypatch, no_network):
    """HF_HUB_OFFLINE unset, sockets blocked: returns the list of attempted connections (must stay empty)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return no_network


def _cli(capsys, argv):
    status = main([str(part) for part in argv])
    return status, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("argv, fix", [
    pytest.param(["analyze", HUB_ID, "--quiet"], "add --download", id="analyze", marks=pytest.mark.guards("hang")),
    pytest.param(["sudoku", "eval", HUB_ID, "--split", "fresh", "--limit", "1"], "add --download", id="sudoku-eval",
                 marks=pytest.mark.guards("hang")),
    pytest.param(["hub", "prepare", HUB_ID, "--out", "{tmp}/prepared"], "add --download", id="hub-prepare",
                 marks=pytest.mark.guards("hang")),
    pytest.param(["hub", "push", "itrsa-sudoku", "--repo-id", "bad id!"], "use owner/name", id="hub-push-bad-repo",
                 marks=pytest.mark.guards("hang")),
    pytest.param(["analyze", "openai-community/gpt2", "--quiet"], "add --download", id="analyze-known-name",
                 marks=pytest.mark.guards("hang")),
])
def test_a_hub_id_on_the_command_line_stays_offline(tmp_path, capsys, online, argv, fix):
    status, err = _cli(capsys, [part.replace("{tmp}", str(tmp_path)) for part in argv])
    assert online == []
    assert status == 2 and len(err) == 1 and ONE_LINE.match(err[0]) and fix in err[0], err
    assert not (tmp_path / "prepared").exists()


@pytest.mark.guards("hang")
def test_download_with_hf_hub_offline_set_refuses_at_once(capsys, no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status, err = _cli(capsys, ["analyze", HUB_ID, "--download", "--quiet"])
    assert no_network == []
    assert status == 2 and "HF_HUB_OFFLINE is set — unset it to download" in err[0], err


@pytest.mark.guards("hang")
def test_load_pretrained_of_a_hub_id_stays_offline(online):
    from jacobiscope.hub import HubError, load_pretrained

    with pytest.raises(HubError, match="fetches nothing unless asked — pass download=True to fetch it from the Hub, "
                                       "or the path of a local model folder"):
        load_pretrained(HUB_ID)
    assert online == []


@pytest.mark.guards("hang")
def test_locate_model_of_a_hub_id_stays_offline(online):
    from jacobiscope.hub import HubError, locate_model

    with pytest.raises(HubError, match="not in the Hugging Face cache — pass one of those, or add --download"):
        locate_model(HUB_ID)
    assert online == []


@pytest.mark.guards("hang")
def test_the_sudoku_loaders_stay_offline(tmp_path, online):
    from jacobiscope.data import sudoku

    puzzle, solution = sudoku.generate(givens=40, seed=0)
    (tmp_path / "b.csv").write_text(f"{puzzle},{solution}\n")
    assert len(sudoku.load_csv(tmp_path / "b.csv")) == 1
    assert len(sudoku.rrn_test(limit=2)) == 2
    assert online == []


@pytest.mark.guards("silent")
def test_a_local_folder_without_a_tokenizer_never_asks_the_hub_for_one(tmp_path, online):
    import argparse

    from hf_models import tiny_model
    from jacobiscope.cli import UsageError
    from jacobiscope.adapters import plan_maps
    from jacobiscope.cli._commands import _analysis_inputs

    folder = tmp_path / "bert"
    model = tiny_model("bert")
    model.save_pretrained(folder)
    args = argparse.Namespace(model=str(folder), text=None, ids=None, puzzle=None, layers=None, download=False,
                              trust_remote_code=False)
    with pytest.raises(UsageError, match="holds no tokenizer files .* — pass token ids instead, e.g. --ids 1,2,3"):
        _analysis_inputs(args, plan_maps(model), str(folder), None)  # not an analysis of [UNK] tokens
    assert online == []


@pytest.mark.guards("hang")
def test_hub_list_and_a_shipped_prepare_stay_offline(tmp_path, capsys, online):
    assert main(["hub", "list"]) == 0
    assert main(["hub", "prepare", "itrsa-sudoku", "--out", str(tmp_path / "prepared")]) == 0
    assert online == [] and (tmp_path / "prepared" / "modeling_itrsa.py").is_file()
