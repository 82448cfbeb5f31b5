"""Bad inputs to the hub surface (issue 28, families 1 and 3): ``prepare_for_hub`` replaces only a folder it prepared
itself (its marker file), never a model folder, the source, or a path it cannot use; ``load_pretrained`` /
``locate_model`` / ``check_repo_id`` refuse what they cannot use with the fix. Real folders in tmp_path."""
import json
import re
import shutil

import pytest

import jacobiscope
from jacobiscope.hub import PREPARED_MARKER, HubError, check_repo_id, load_pretrained, locate_model, prepare_for_hub

SHIPPED = jacobiscope.hub.shipped_checkpoints()["itrsa-sudoku"]


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def source(tmp_path):
    folder = tmp_path / "run" / "best"
    shutil.copytree(SHIPPED, folder)
    return folder


@pytest.mark.guards("silent")
def test_a_prepared_copy_carries_the_marker_and_the_source_none(tmp_path, source):
    prepared = prepare_for_hub(source, tmp_path / "prepared")
    marker = json.loads((prepared / PREPARED_MARKER).read_text())
    assert marker["prepared_by"] == "jacobiscope.hub.prepare_for_hub"
    assert not (source / PREPARED_MARKER).exists()
    again = prepare_for_hub(source, prepared)  # its own earlier copy is replaced
    assert again == prepared and (again / "modeling_itrsa.py").is_file()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left


@pytest.mark.guards("lost")
def test_an_arbitrary_model_folder_is_never_replaced(tmp_path, source):
    other = tmp_path / "someone-elses-model"
    shutil.copytree(SHIPPED, other)
    (other / "NOTES.md").write_text("my fine-tuning notes")
    before = _snapshot(other)
    with pytest.raises(HubError, match=f"is a model folder \\(config.json\\) that prepare_for_hub did not prepare "
                                       f"\\(no {PREPARED_MARKER}\\), so it is not replaced — choose a new or empty"):
        prepare_for_hub(source, other)
    assert _snapshot(other) == before


@pytest.mark.guards("lost")
def test_an_in_place_preparation_leaves_no_marker_so_it_is_never_replaced_later(tmp_path, source):
    trained = tmp_path / "trained"
    shutil.copytree(SHIPPED, trained)
    prepare_for_hub(trained)  # in place: the user's own folder
    assert not (trained / PREPARED_MARKER).exists()
    before = _snapshot(trained)
    with pytest.raises(HubError, match="did not prepare"):
        prepare_for_hub(source, trained)
    assert _snapshot(trained) == before


@pytest.mark.guards("lost")
def test_a_marker_copied_from_the_source_does_not_make_the_source_replaceable(tmp_path, source):
    prepared = prepare_for_hub(source, tmp_path / "prepared")
    with pytest.raises(HubError, match="holds the checkpoint|is the checkpoint|would delete the source"):
        prepare_for_hub(prepared, prepared.parent)
    assert (prepared / "model.safetensors").is_file()


@pytest.mark.guards("silent")
def test_a_shipped_checkpoint_is_never_prepared_in_place(tmp_path):
    """Code written into hub_configs/ would be a copy of the package's, free to drift: a destination is required."""
    with pytest.raises(HubError, match="'itrsa-sudoku' is a checkpoint shipped with jacobiscope, which carries no code "
                                       "of its own — pass a destination folder"):
        prepare_for_hub("itrsa-sudoku")
    with pytest.raises(HubError, match="pass a destination folder"):
        prepare_for_hub(SHIPPED, SHIPPED)
    assert sorted(p.name for p in SHIPPED.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                         "results.json"]
    assert "auto_map" not in json.loads((SHIPPED / "config.json").read_text())


@pytest.mark.guards("lost")
def test_a_destination_that_is_the_source_through_a_symlink_is_prepared_in_place_not_deleted(tmp_path, source):
    link = tmp_path / "link"
    link.symlink_to(source)
    assert prepare_for_hub(source, link) == link
    assert (source / "model.safetensors").is_file() and (source / "modeling_itrsa.py").is_file()


@pytest.mark.parametrize("destination, kind, fragment", [
    pytest.param(lambda t: t / ("d" * 300), HubError, "too long", id="name-too-long",
                 marks=pytest.mark.guards("internal")),
    pytest.param(lambda t: 42, HubError, "expected a destination folder path (str or Path), got int",
                 id="int", marks=pytest.mark.guards("internal")),
    pytest.param(lambda t: b"out", HubError, "got bytes", id="bytes", marks=pytest.mark.guards("internal")),
    pytest.param(lambda t: "   ", HubError, "empty destination", id="blank", marks=pytest.mark.guards("internal")),
    pytest.param(lambda t: t / "a-file" / "out", HubError, "is a file — give a folder path", id="under-a-file",
                 marks=pytest.mark.guards("internal")),
    pytest.param(lambda t: t / "fifo", HubError, "is a file — give a folder path", id="a-fifo",
                 marks=pytest.mark.guards("lost")),
], )
def test_unusable_destinations_are_refused_before_anything_is_copied(tmp_path, source, destination, kind, fragment):
    import os

    (tmp_path / "a-file").write_text("keep")
    os.mkfifo(tmp_path / "fifo")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(kind, match=re.escape(fragment)):
        prepare_for_hub(source, destination(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before and (tmp_path / "a-file").read_text() == "keep"


@pytest.mark.guards("silent")
def test_load_pretrained_of_an_uncached_hub_id_fails_at_once_with_the_fix():
    with pytest.raises(HubError, match="is not in the local Hugging Face cache, and load_pretrained fetches nothing "
                                       "unless asked — pass download=True"):
        load_pretrained("someone/not-a-cached-model")


@pytest.mark.parametrize("name, fragment", [
    pytest.param(True, "got bool", id="bool", marks=pytest.mark.guards("internal")),
    pytest.param(["itrsa-sudoku"], "got list", id="list", marks=pytest.mark.guards("internal")),
    pytest.param("../no/such/folder", "no such model folder", id="missing-relative",
                 marks=pytest.mark.guards("internal")),
])
def test_load_pretrained_refuses_unusable_names(name, fragment):
    with pytest.raises(HubError, match=fragment):
        load_pretrained(name)


@pytest.mark.parametrize("make, fragment", [
    pytest.param(lambda t: t / "file.json", "is a file, not a model folder — pass the folder", id="a-file",
                 marks=pytest.mark.guards("internal")),
    pytest.param(lambda t: t / "empty", "has no config.json — pass a folder saved with save_pretrained",
                 id="no-config", marks=pytest.mark.guards("internal")),
    pytest.param(lambda t: "  ", "no model named", id="blank", marks=pytest.mark.guards("internal")),
    pytest.param(lambda t: "bad--id/x", "no such model folder", id="bad-repo-id", marks=pytest.mark.guards("internal")),
])
def test_locate_model_names_the_problem(tmp_path, make, fragment):
    (tmp_path / "file.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    with pytest.raises(HubError, match=fragment):
        locate_model(str(make(tmp_path)))


@pytest.mark.parametrize("repo_id", [
    pytest.param("owner/name-", id="trailing-dash", marks=pytest.mark.guards("internal")),
    pytest.param("a/b/c", id="three-parts", marks=pytest.mark.guards("internal")),
    pytest.param("owner/" + "n" * 97, id="too-long", marks=pytest.mark.guards("internal")),
    pytest.param(None, id="none", marks=pytest.mark.guards("internal")),
])
def test_check_repo_id_refuses_offline(repo_id):
    with pytest.raises(HubError, match="is not a Hub repo id — use owner/name"):
        check_repo_id(repo_id)


@pytest.mark.guards("internal")
def test_a_bom_prefixed_config_json_is_named_not_called_invalid_json(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(SHIPPED, folder)
    (folder / "config.json").write_bytes(b"\xef\xbb\xbf" + (folder / "config.json").read_bytes())
    with pytest.raises(HubError, match="starts with a UTF-8 byte-order mark .* — save it as UTF-8 without a BOM"):
        load_pretrained(folder)


@pytest.mark.parametrize("name, words", [
    pytest.param("itrsa-sudok", "unknown checkpoint 'itrsa-sudok' (did you mean 'itrsa-sudoku'?)", id="short-name"),
    # owner/name looks like a Hub id, so the typo was told only "not in the local Hugging Face cache"
    pytest.param("zoo/akorn-n4-sed1", "nor a shipped name (did you mean 'zoo/akorn-n4-seed1'?)", id="zoo-name"),
])
@pytest.mark.guards("internal")
def test_a_misspelt_shipped_name_gets_the_shipped_one(name, words):
    with pytest.raises(HubError) as info:
        jacobiscope.load_pretrained(name)
    assert words in str(info.value)
