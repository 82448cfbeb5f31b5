"""How many Jacobian products to batch into one ``vmap`` call without running out of memory.

Example::

    >>> import torch, jacobiscope
    >>> from jacobiscope.linalg._product_memory import products_at_once
    >>> m = jacobiscope.as_looped_map(torch.nn.Linear(16, 16))
    >>> products_at_once(m, torch.randn(16), 256)   # a tiny block: all at once
    256

A vmapped jvp or vjp over ``n`` vectors holds ``n`` copies of the block's intermediates at once. For a transformer
block that is nothing; for a block whose inside is far larger than its state (a Mamba-2 scan: a 6 x 16 state,
~200 MB of saved activations per product) a dense Jacobian's 96 rows at once asked for 48 GiB and the kernel's OOM
killer ended the process — no exception, no partial result. So blocks of more than `SMALL_BLOCK` products
are cut to what fits in `SHARE` of the memory free now, priced from one recorded forward (the intermediates autograd
saves, times `PRODUCT_OVERHEAD`: on that scan a jvp took 2.8 times those bytes, a vjp 1.2). Results do not depend on
the cut: each product is computed alone whatever its neighbours.
"""
from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["products_at_once", "product_bytes", "free_bytes", "SMALL_BLOCK", "SHARE", "PRODUCT_OVERHEAD"]

SMALL_BLOCK = 8  # blocks this small (a user's k) run as asked: no probe forward for them
SHARE = 0.5  # of the memory free now, what one batched call may take
PRODUCT_OVERHEAD = 4  # working bytes of a product per byte autograd saves in a forward (Mamba-2: jvp 2.8, vjp 1.2)
UNKNOWN_FREE = 4 << 30  # where the free memory cannot be read (not Linux): assume this much


def products_at_once(looped_map, x: torch.Tensor, wanted: int) -> int:
    """At most ``wanted``, at least 1: products of ``looped_map`` at ``x`` that one ``vmap`` call may batch."""
    wanted = int(wanted)
    if wanted <= SMALL_BLOCK:
        return wanted
    per_product = product_bytes(looped_map, x)
    if per_product is None:
        return wanted
    return max(1, min(wanted, int(SHARE * free_bytes(x.device)) // max(1, per_product)))


def product_bytes(looped_map, x: torch.Tensor) -> int | None:
    """Working bytes of one jvp or vjp of ``looped_map`` at ``x``: the bytes of the intermediates autograd saves in
    one forward (tensors computed from ``x``, each storage once) plus the output, times `PRODUCT_OVERHEAD`; None when the forward cannot be recorded (then the
    caller keeps its block: this is a guard, never a new way to fail). Cached on the map per state shape."""
    key = (tuple(x.shape), x.dtype, x.device)
    cache = getattr(looped_map, "_product_bytes_cache", None)
    if isinstance(cache, dict) and key in cache:
        return cache[key]
    saved: dict[tuple, int] = {}

    def pack(tensor):
        if tensor.grad_fn is None:  # a weight, a mask, a table: already in memory, not made anew by each product
            return tensor
        try:
            storage = tensor.untyped_storage()
            saved[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # a tensor subclass without a plain storage
            saved[(id(tensor), 0)] = tensor.numel() * tensor.element_size()
        return tensor

    try:
        probe = x.detach().requires_grad_(True)
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            output = looped_map.step(probe)
        total = PRODUCT_OVERHEAD * (sum(saved.values()) + output.numel() * output.element_size())
    except Exception:  # noqa: BLE001 - whatever stops the recording, the products themselves may still run
        total = None
    try:
        if not isinstance(cache, dict):
            cache = {}
            looped_map._product_bytes_cache = cache
        cache[key] = total
    except AttributeError:  # a map type without a writable attribute: priced again next time
        pass
    return total


def free_bytes(device: torch.device | str) -> int:
    """Bytes free for new tensors on ``device`` now: the accelerator's free memory, or on a CPU the smaller of the
    machine's available memory and what the cgroup (a container's limit) still allows."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    limits = [value for value in (_meminfo_available(), _cgroup_left()) if value is not None]
    return min(limits) if limits else UNKNOWN_FREE


def _meminfo_available(root: Path = Path("/")) -> int | None:
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_left(root: Path = Path("/")) -> int | None:
    """What this process's memory cgroup still allows (limit - usage; v2, or v1's memory controller); None where
    there is no limit or no cgroup to read."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, group = parts
        if controllers == "":  # v2: one unified hierarchy
            candidates = [(root / "sys/fs/cgroup" / group.lstrip("/"), "memory.max", "memory.current"),
                          (root / "sys/fs/cgroup/unified" / group.lstrip("/"), "memory.max", "memory.current")]
        elif "memory" in controllers.split(","):
            candidates = [(root / "sys/fs/cgroup/memory" / group.lstrip("/"), "memory.limit_in_bytes",
                           "memory.usage_in_bytes")]
        else:
            continue
        for folder, limit_file, usage_file in candidates:
            try:
                limit = (folder / limit_file).read_text().strip()
                usage = int((folder / usage_file).read_text().strip())
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= 1 << 60:  # no limit (v1 writes a huge number for it)
                continue
            return max(0, int(limit) - usage)
    return None
