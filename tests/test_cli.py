import json

import jacobiscope.cli


def test_demo_table_and_json(capsys):
    assert jacobiscope.cli.main(["demo", "--tokens", "4", "--dim", "8", "--heads", "2", "--steps", "10", "--k", "2"]) == 0
    table = capsys.readouterr().out
    assert "rmsnorm" in table and "layernorm" in table and "lambda_max" in table
    assert jacobiscope.cli.main(["demo", "--tokens", "4", "--dim", "8", "--heads", "2", "--steps", "10", "--k", "2", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    rows = {row["norm"]: row for row in record["rows"]}
    assert set(rows) == {"rmsnorm", "layernorm", "none"}
    # normalization keeps the state on the sphere of radius ~sqrt(dim); the unnormalized map drifts away
    assert abs(rows["rmsnorm"]["state_norm"] - 8 ** 0.5) < 0.5
    assert rows["none"]["state_norm"] > rows["rmsnorm"]["state_norm"]
    assert record["provenance"]["torch"]
