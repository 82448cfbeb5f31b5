"""Models wrapped for distributed training, over two real processes (gloo, CPU): DistributedDataParallel gives the
plain model's numbers, bit for bit, with the inputs sharded over the ranks; FSDP (FullyShardedDataParallel) and
FSDP2 (`fully_shard`), whose weights are sharded, are refused on every rank with the fix (their every forward runs
collectives the ranks' diagnostics would not run in step: a hang or a crash otherwise)."""
import json
import os
import socket
import subprocess
import sys

import pytest

SCRIPT = r'''
import copy, json, os, sys, warnings
import torch, torch.distributed as dist, transformers
warnings.simplefilter("ignore")
dist.init_process_group("gloo")
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
from torch.nn.parallel import DistributedDataParallel
import jacobiscope

torch.manual_seed(0)
config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64)
plain = transformers.GPT2LMHeadModel(config).eval()
ids = torch.randint(0, 100, (4, 8), generator=torch.Generator().manual_seed(0))   # 4 inputs, sharded over the ranks

def exponents(model):
    report = jacobiscope.analyze(model, {"input_ids": ids}, loops=4, diagnostics=["lyapunov", "spectral_norm"],
                                 progress=False)
    return [[row.input_index, row.layer, row.results["lyapunov"].exponents, row.results["spectral_norm"].values]
            for row in report.rows]

def refusal(model):
    try:
        jacobiscope.analyze(model, {"input_ids": ids}, loops=4, diagnostics=["lyapunov"], progress=False)
    except jacobiscope.AdapterError as error:
        return str(error)
    return None

def sharded():
    model = copy.deepcopy(plain)
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    return model

out = {"plain": exponents(plain), "ddp": exponents(DistributedDataParallel(copy.deepcopy(plain))),
       "fsdp": refusal(FullyShardedDataParallel(copy.deepcopy(plain), device_id=torch.device("cpu"))),
       "fsdp2": refusal(sharded())}
out["fsdp2_sharded"] = type(next(sharded().parameters())).__name__
print("RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ddp_measures_the_plain_models_numbers_and_sharded_fsdp_is_refused_with_the_fix(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    port = str(_free_port())
    ranks = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
        ranks.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for process in ranks:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:]))
    for result in results:
        assert result["fsdp2_sharded"] == "DTensor"   # the weights really are sharded over the two ranks
        assert {row[0] for row in result["plain"]} == {0, 1, 2, 3} and len(result["plain"]) == 8   # gathered
        # The same numbers up to the product path (eager jvps, or a graph the plain run recorded in this process):
        # the rows' keys exactly, the values to float32 rounding.
        assert [row[:2] for row in result["ddp"]] == [row[:2] for row in result["plain"]]
        assert [v for row in result["ddp"] for part in row[2:] for v in part] == pytest.approx(
            [v for row in result["plain"] for part in row[2:] for v in part], rel=1e-5, abs=1e-6)
        for wrapped in ("fsdp", "fsdp2"):
            assert "over 2 processes (FSDP)" in result[wrapped] and "full_state_dict=True" in result[wrapped]
