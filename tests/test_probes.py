"""jacobiscope's own random probes come from generators of their own: the caller's global stream never moves."""
import torch

import jacobiscope
from jacobiscope._probes import probe_like

from hf_models import tiny_inputs, tiny_model


def test_probe_like_is_seeded_shaped_and_leaves_the_global_stream():
    like = torch.zeros(3, 4, dtype=torch.float32)
    before = torch.random.get_rng_state()
    first, block = probe_like(like), probe_like(like, seed=2, count=5)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert first.shape == (3, 4) and first.dtype == torch.float32 and block.shape == (5, 3, 4)
    generator = torch.Generator().manual_seed(2)  # the reference: the same draw made by hand
    expected = torch.randn(5, 3, 4, generator=generator, dtype=torch.float64).float()
    torch.testing.assert_close(block, expected, rtol=0, atol=0)
    assert not torch.equal(first, probe_like(like, seed=1))


def test_describe_and_analyze_leave_the_callers_random_stream_where_it_was():
    """Recording a product graph, timing a plan, Lanczos and the tangent frames all draw random vectors; none of
    them from the global stream (the second analyze of a model used to move it: its graph is recorded then)."""
    model, ids = tiny_model("llama"), tiny_inputs("llama")
    torch.manual_seed(11)
    before = torch.random.get_rng_state()
    jacobiscope.describe(model, ids, loops=3)
    for _ in range(2):
        jacobiscope.analyze(model, ids, loops=3, progress=False)
    assert torch.equal(torch.random.get_rng_state(), before)
