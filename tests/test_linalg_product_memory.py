"""Batched Jacobian products cut to what fits in memory: the cut, what it is priced from, and exact results under it."""
import sys

import pytest
import torch
import transformers

import jacobiscope
from jacobiscope.linalg import _product_memory as memory
from jacobiscope.linalg import operators


class WideInside(torch.nn.Module):
    """A state of D numbers through a hidden layer of `width`: the inside is far larger than the state (the shape of
    a Mamba scan or a wide MLP)."""

    def __init__(self, size=12, width=200_000):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.up = torch.nn.Parameter(torch.randn(width, size, generator=generator, dtype=torch.float64) / size ** 0.5)
        self.down = torch.nn.Parameter(torch.randn(size, width, generator=generator, dtype=torch.float64) / width ** 0.5)

    def forward(self, x):
        return self.down @ torch.tanh(self.up @ x)


def _chunks_seen(monkeypatch):
    seen = []
    real = operators.vmap

    def recording(function, *args, chunk_size=None, **kwargs):
        batched = real(function, *args, chunk_size=chunk_size, **kwargs)

        def call(block, *rest):
            seen.append((block.shape[0], chunk_size or block.shape[0]))  # vectors in the call, at once
            return batched(block, *rest)
        return call
    monkeypatch.setattr(operators, "vmap", recording)
    return seen


def test_a_small_block_or_a_light_map_is_never_cut():
    light = jacobiscope.as_looped_map(torch.nn.Linear(16, 16))
    assert memory.products_at_once(light, torch.randn(16), 256) == 256
    heavy = jacobiscope.as_looped_map(WideInside().requires_grad_(False))
    assert memory.products_at_once(heavy, torch.zeros(12, dtype=torch.float64), memory.SMALL_BLOCK) == memory.SMALL_BLOCK


def test_product_bytes_counts_what_autograd_keeps_for_the_inside():
    width = 200_000
    looped = jacobiscope.as_looped_map(WideInside(width=width).requires_grad_(False))
    priced = memory.product_bytes(looped, torch.zeros(12, dtype=torch.float64))
    # tanh keeps its output and the second product its input: one tensor of `width` float64 computed from x, kept
    # once; the weights each product multiplies by are already in memory and not counted (they would be 30x more)
    saved = priced / memory.PRODUCT_OVERHEAD - 12 * 8  # less the output
    assert saved == width * 8
    assert memory.product_bytes(looped, torch.zeros(12, dtype=torch.float64)) == priced  # cached per shape


def test_the_cut_follows_the_free_memory(monkeypatch):
    looped = jacobiscope.as_looped_map(WideInside().requires_grad_(False))
    x = torch.zeros(12, dtype=torch.float64)
    per_product = memory.product_bytes(looped, x)
    for products in (1, 3, 7):
        monkeypatch.setattr(memory, "free_bytes", lambda device, n=products: int(n * per_product / memory.SHARE))
        assert memory.products_at_once(looped, x, 64) == products
    monkeypatch.setattr(memory, "free_bytes", lambda device: 0)
    assert memory.products_at_once(looped, x, 64) == 1  # never zero: one product at a time still runs


def test_a_dense_jacobian_is_exact_when_its_rows_are_cut(monkeypatch):
    module = WideInside().requires_grad_(False)
    x = torch.randn(12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    reference = torch.autograd.functional.jacobian(module, x)
    looped = jacobiscope.as_looped_map(module)
    per_product = memory.product_bytes(looped.detached(), x)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int(5 * per_product / memory.SHARE))
    seen = _chunks_seen(monkeypatch)
    J = jacobiscope.jacobian(looped, x)
    torch.testing.assert_close(J, reference, rtol=1e-12, atol=1e-12)
    assert [at_once for _, at_once in seen] == [5, 5, 2]  # 12 rows in vmapped calls of 5, not at once
    values = jacobiscope.linalg.jacobian_eigenvalues(looped, x).values
    expected = torch.linalg.eigvals(reference)
    torch.testing.assert_close(values.abs().sort().values, expected.abs().sort().values, rtol=1e-9, atol=1e-12)


def test_a_jvp_block_is_exact_when_cut_and_an_explicit_chunk_is_kept(monkeypatch):
    module = WideInside().requires_grad_(False)
    x = torch.randn(12, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    V = torch.randn(10, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    reference = V @ torch.autograd.functional.jacobian(module, x).T
    per_product = memory.product_bytes(jacobiscope.as_looped_map(module), x)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int(3 * per_product / memory.SHARE))
    seen = _chunks_seen(monkeypatch)
    torch.testing.assert_close(jacobiscope.linalg.jacobian_matmat(module, x, V), reference, rtol=1e-12, atol=1e-12)
    assert seen[-1] == (10, 3)
    jacobiscope.linalg.jacobian_matmat(module, x, V, chunk_size=10)
    assert seen[-1] == (10, 10)  # the caller's own chunk size is the caller's choice
    operator = jacobiscope.linalg.JacobianOperator(jacobiscope.as_looped_map(module), x)
    torch.testing.assert_close(operator.rmatmat(V), V @ torch.autograd.functional.jacobian(module, x), rtol=1e-12,
                               atol=1e-12)
    assert seen[-1] == (10, 3)


def test_the_dense_lyapunov_loop_cuts_its_loops_or_leaves_for_the_jvp_loop(monkeypatch):
    from jacobiscope.dynamics import _dense_tangent

    module = WideInside(size=12, width=50_000).requires_grad_(False)
    x = 0.5 * torch.randn(12, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    reference = jacobiscope.lyapunov_spectrum(module, x, steps=40, k=3, transient=5)
    assert reference.meta["tangent_path"] == "dense"
    per_product = memory.product_bytes(jacobiscope.as_looped_map(module), x)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int(30 * per_product / memory.SHARE))
    calls = []
    real = _dense_tangent._jacobians
    monkeypatch.setattr(_dense_tangent, "_jacobians", lambda step, states, *a: calls.append(len(states)) or real(
        step, states, *a))
    cut = jacobiscope.lyapunov_spectrum(module, x, steps=40, k=3, transient=5)
    assert cut.meta["tangent_path"] == "dense" and max(calls) == 2  # 30 products: 2 loops of 12 a call
    torch.testing.assert_close(cut.exponents, reference.exponents, rtol=1e-10, atol=1e-12)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int(11 * per_product / memory.SHARE))
    jvp_loop = jacobiscope.lyapunov_spectrum(module, x, steps=40, k=3, transient=5)
    assert jvp_loop.meta["tangent_path"] != "dense"  # one loop's 12 products do not fit: k jvps a loop instead
    torch.testing.assert_close(jvp_loop.exponents, reference.exponents, rtol=1e-8, atol=1e-10)


def test_a_real_block_with_a_wide_inside_gives_the_models_own_jacobian(monkeypatch):
    """A Llama block of hidden size 8 with an MLP 4,096 wide, its rows cut to two a call: the dense Jacobian of the
    map still equals the one autograd takes of the block itself (another route: torch.autograd.functional)."""
    config = transformers.LlamaConfig(hidden_size=8, intermediate_size=4096, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, vocab_size=32)
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).double().eval()
    ids = torch.tensor([[3, 5, 7]])
    looped = jacobiscope.looped_block(model, ids, layer=0)
    x = looped.x0.double()
    per_product = memory.product_bytes(looped.detached(), x)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int(2 * per_product / memory.SHARE))
    seen = _chunks_seen(monkeypatch)
    J = jacobiscope.jacobian(looped, x)
    reference = torch.autograd.functional.jacobian(lambda h: looped.step(h), x).reshape(J.shape)
    torch.testing.assert_close(J, reference, rtol=1e-10, atol=1e-12)
    assert seen and max(at_once for _, at_once in seen) == 2


def test_free_memory_is_read_from_meminfo_and_a_cgroup_limit(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert memory._meminfo_available(tmp_path) == 2048 * 1024
    # cgroup v1: the memory controller's limit and usage
    (tmp_path / "proc/self/cgroup").write_text("5:cpu:/\n4:memory:/jobs/a\n0::/\n")
    v1 = tmp_path / "sys/fs/cgroup/memory/jobs/a"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("1000000\n")
    (v1 / "memory.usage_in_bytes").write_text("400000\n")
    assert memory._cgroup_left(tmp_path) == 600_000
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert memory._cgroup_left(tmp_path) is None
    # cgroup v2: one unified hierarchy
    (tmp_path / "proc/self/cgroup").write_text("0::/user.slice/job\n")
    v2 = tmp_path / "sys/fs/cgroup/user.slice/job"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text("5\n")
    assert memory._cgroup_left(tmp_path) is None
    (v2 / "memory.max").write_text("300\n")
    assert memory._cgroup_left(tmp_path) == 295
    (v2 / "memory.current").write_text("999\n")
    assert memory._cgroup_left(tmp_path) == 0  # over its limit: nothing left, never negative
    assert memory._cgroup_left(tmp_path / "nowhere") is None and memory._meminfo_available(tmp_path / "no") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/meminfo")
def test_free_bytes_on_this_machine_is_at_most_what_meminfo_says():
    available = memory._meminfo_available()
    assert 0 < memory.free_bytes("cpu") <= available


def test_lyapunov_tangents_are_cut_to_what_fits_and_give_the_same_exponents(monkeypatch):
    module = WideInside(size=80, width=20_000).requires_grad_(False)  # 80 numbers: past the dense loop's limit
    x = 0.3 * torch.randn(80, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    whole = jacobiscope.lyapunov_spectrum(module, x, steps=12, k=12, transient=2, compile=False)
    per_product = memory.product_bytes(jacobiscope.as_looped_map(module), x)
    monkeypatch.setattr(memory, "free_bytes", lambda device: int(4 * per_product / memory.SHARE))
    seen = _chunks_seen_in_tangent_steps(monkeypatch)
    cut = jacobiscope.lyapunov_spectrum(module, x, steps=12, k=12, transient=2, compile=False)
    assert seen and set(seen) == {4}
    torch.testing.assert_close(cut.exponents, whole.exponents, rtol=1e-10, atol=1e-12)


def _chunks_seen_in_tangent_steps(monkeypatch):
    seen = []
    real = torch.func.vmap  # the tangent step imports it when it runs

    def recording(function, *args, chunk_size=None, **kwargs):
        seen.append(chunk_size)
        return real(function, *args, chunk_size=chunk_size, **kwargs)
    monkeypatch.setattr(torch.func, "vmap", recording)
    return seen
