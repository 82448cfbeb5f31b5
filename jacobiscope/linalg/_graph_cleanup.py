"""Strip a traced tangent graph of the work forward-mode AD does for tangents that are known to be zero.

A jvp traced with ``make_fx`` carries the bookkeeping of eager forward-mode AD: the weights' zero tangents (a
materialized ``zeros`` and a full matmul against it for every linear layer), shape checks, aliases and copies to
the ``meta`` device. Replaying that graph as is costs about as much as the eager jvp; without it, a replay costs
about two forwards. Every rewrite here keeps the values of the graph's outputs (``a + 0 -> a``, ``A @ 0 -> 0``,
``alias(a) -> a``), so the cleaned graph computes what eager forward-mode AD computes.
"""
from __future__ import annotations

import torch
from torch import fx

__all__ = ["simplify_tangent_graph"]

_aten = torch.ops.aten

_ZERO_SOURCES = {_aten.zeros.default, _aten._efficientzerotensor.default, _aten.zeros_like.default}
# Ops whose result is zero when their first argument is: layout changes, copies, reductions, negation.
_ZERO_FROM_FIRST = {
    _aten.alias.default, _aten.expand.default, _aten.view.default, _aten._unsafe_view.default, _aten.t.default,
    _aten.transpose.int, _aten.permute.default, _aten.clone.default, _aten._to_copy.default, _aten.reshape.default,
    _aten.unsqueeze.default, _aten.squeeze.dim, _aten.squeeze.dims, _aten.select.int, _aten.slice.Tensor,
    _aten.sum.dim_IntList, _aten.mean.dim, _aten.neg.default, _aten.div.Tensor, _aten.div.Scalar, _aten.mul.Scalar,
}
# Ops whose result is zero when either argument is (eager forward AD's ZeroTensor gives zero here too).
_ZERO_FROM_EITHER = {_aten.mm.default, _aten.bmm.default, _aten.mul.Tensor}
_IDENTITY_VIEWS = {_aten.alias.default, _aten.expand.default, _aten.view.default, _aten._unsafe_view.default,
                   _aten._to_copy.default}


def simplify_tangent_graph(module: fx.GraphModule) -> fx.GraphModule:
    """Remove dead code, propagate known-zero tangents and drop identity aliases in ``module`` (in place).

    Example::

        >>> import torch
        >>> from torch.fx.experimental.proxy_tensor import make_fx
        >>> W = torch.randn(3, 3)
        >>> def f(x, v):
        ...     return torch.func.jvp(lambda z: z @ W, (x,), (v,))
        >>> traced = make_fx(f, tracing_mode="fake", _allow_non_fake_inputs=True)(torch.ones(2, 3), torch.ones(2, 3))
        >>> clean = simplify_tangent_graph(traced)
        >>> sum(node.target is torch.ops.aten.mm.default for node in clean.graph.nodes)  # no matmul against 0
        2

    Nodes that an in-place op writes to, and everything they alias, are left alone: a rewrite there could change
    what the mutation sees.
    """
    graph = module.graph
    graph.eliminate_dead_code()
    _drop_aliases(graph)
    _reuse_softmax(graph)
    pinned = _mutated_nodes(graph)
    zero = _zero_nodes(graph, pinned)
    _drop_zero_terms(graph, zero)
    _materialize_zeros(graph, zero, pinned)
    _drop_identities(graph, pinned)
    graph.eliminate_dead_code()
    module.recompile()
    return module


def _value(node):
    """The fake tensor a node computes (None for non-tensors, tuples, placeholders without one)."""
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _is_op(node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)


def _mutated_nodes(graph: fx.Graph) -> set:
    """Nodes written in place, with every node they were viewed from (a mutation shows through a view)."""
    pinned = set()
    for node in graph.nodes:
        if _is_op(node) and node.target._schema.is_mutable:
            pinned.update(arg for arg in node.args if isinstance(arg, fx.Node))
    frontier = list(pinned)
    while frontier:
        node = frontier.pop()
        if _is_op(node) and node.target.is_view and node.args and isinstance(node.args[0], fx.Node):
            if node.args[0] not in pinned:
                pinned.add(node.args[0])
                frontier.append(node.args[0])
    return pinned


def _zero_nodes(graph: fx.Graph, pinned: set) -> set:
    zero = set()
    for node in graph.nodes:
        if not _is_op(node) or node in pinned:
            continue
        target, args = node.target, node.args
        if target in _ZERO_SOURCES:
            zero.add(node)
        elif target in _ZERO_FROM_FIRST and args and args[0] in zero:
            zero.add(node)
        elif target in _ZERO_FROM_EITHER and any(arg in zero for arg in args[:2] if isinstance(arg, fx.Node)):
            zero.add(node)
    return zero


def _drop_zero_terms(graph: fx.Graph, zero: set) -> None:
    """``a + 0``, ``0 + a``, ``a - 0`` -> ``a`` where the sum has ``a``'s shape and dtype (no broadcast)."""
    for node in list(graph.nodes):
        if not _is_op(node) or node in zero or node.target not in (_aten.add.Tensor, _aten.sub.Tensor):
            continue
        left, right = node.args[0], node.args[1]
        keep = left if right in zero else right if (left in zero and node.target is _aten.add.Tensor) else None
        if keep is None or not isinstance(keep, fx.Node):
            continue
        if keep is right and node.kwargs.get("alpha", 1) != 1:
            continue
        kept, result = _value(keep), _value(node)
        if kept is not None and result is not None and kept.shape == result.shape and kept.dtype == result.dtype:
            node.replace_all_uses_with(keep)


def _materialize_zeros(graph: fx.Graph, zero: set, pinned: set) -> None:
    """A zero that is still read becomes one ``zeros`` call (no matmul, no ZeroTensor at replay)."""
    for node in list(graph.nodes):
        if node not in zero or not node.users:
            continue
        if node.target is _aten.zeros.default:
            continue
        value = _value(node)
        readers_fine = all(not (_is_op(user) and (user.target.is_view or user.target._schema.is_mutable))
                           for user in node.users)
        if value is None or not readers_fine or node in pinned:
            continue
        with graph.inserting_before(node):
            filled = graph.call_function(_aten.zeros.default, (list(value.shape),),
                                         {"dtype": value.dtype, "device": value.device})
        filled.meta["val"] = value
        node.replace_all_uses_with(filled)


def _drop_aliases(graph: fx.Graph) -> None:
    """``alias(a)`` -> ``a``: the same storage either way, so even a mutation sees the same thing."""
    for node in list(graph.nodes):
        if _is_op(node) and node.target is _aten.alias.default and isinstance(node.args[0], fx.Node):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)


def _reuse_softmax(graph: fx.Graph) -> None:
    """The tangent of ``p = softmax(s)`` is ``p * (ds - sum(p * ds))``; forward AD recomputes ``exp(s - max s)``
    and its sum to get ``sum(p * ds)``. Read ``p`` instead: four fewer passes over the attention scores.

    Pattern (as the jvp of ``_softmax`` traces): ``div_(sum(exp(s - amax(s)) * ds), sum(exp(s - amax(s))))``,
    with a ``_softmax(s)`` of the same dimension in the graph.
    """
    softmaxes = {}
    for node in graph.nodes:
        if _is_op(node) and node.target is _aten._softmax.default and node.args[2] is False:
            softmaxes[(node.args[0], _dim(node.args[1], node.args[0]))] = node
    for node in list(graph.nodes):
        match = _softmax_weighted_sum(node, softmaxes)
        if match is None:
            continue
        probabilities, exp, product, weighted_sum = match
        other = product.args[1] if product.args[0] is exp else product.args[0]
        with graph.inserting_before(node):
            new_product = graph.call_function(_aten.mul.Tensor, (probabilities, other))
            new_product.meta["val"] = product.meta.get("val")
            new_sum = graph.call_function(_aten.sum.dim_IntList, (new_product, *weighted_sum.args[1:]),
                                          dict(weighted_sum.kwargs))
            new_sum.meta["val"] = weighted_sum.meta.get("val")
        node.replace_all_uses_with(new_sum)
        graph.erase_node(node)  # the in-place div_ on a private temporary: nothing else reads it


def _dim(dim, node) -> int | None:
    value = _value(node)
    if value is None or not isinstance(dim, int):
        return None
    return dim % value.dim() if value.dim() else 0


def _is_exp(node) -> bool:
    return isinstance(node, fx.Node) and _is_op(node) and node.target is _aten.exp.default


def _softmax_weighted_sum(node, softmaxes):
    """``(p, exp, exp * ds, sum(exp * ds))`` when ``node`` is ``div_(sum(exp * ds), sum(exp))`` of a softmax."""
    if not (_is_op(node) and node.target is _aten.div_.Tensor and len(node.args) == 2):
        return None
    weighted_sum, total = node.args
    if not all(isinstance(n, fx.Node) and _is_op(n) and n.target is _aten.sum.dim_IntList and len(n.args) >= 3
               and n.args[2] is True and len(n.args[1]) == 1 for n in (weighted_sum, total)):
        return None
    if len(weighted_sum.users) != 1:
        return None  # something else reads the sum that div_ overwrites
    exp = total.args[0]
    product = weighted_sum.args[0]
    if not _is_exp(exp) or not (_is_op(product) and product.target is _aten.mul.Tensor and exp in product.args[:2]):
        return None
    if product.args[0] is exp and product.args[1] is exp:
        return None
    shifted = exp.args[0]
    if not (_is_op(shifted) and shifted.target is _aten.sub.Tensor and len(shifted.args) == 2 and not shifted.kwargs):
        return None
    scores, maximum = shifted.args
    if not (isinstance(maximum, fx.Node) and _is_op(maximum) and maximum.target is _aten.amax.default
            and maximum.args[0] is scores and len(maximum.args[1]) == 1):
        return None
    dim = _dim(maximum.args[1][0], scores)
    if dim is None or _dim(total.args[1][0], exp) != dim:
        return None
    probabilities = softmaxes.get((scores, dim))
    if probabilities is None or _value(probabilities) is None or _value(exp) is None:
        return None
    if _value(probabilities).shape != _value(exp).shape or _value(probabilities).dtype != _value(exp).dtype:
        return None
    # The weighted sum reduces the same (last-aligned) dimension of the product as the total does of exp.
    product_value = _value(product)
    if product_value is None or _dim(weighted_sum.args[1][0], product) != product_value.dim() - _value(exp).dim() + dim:
        return None
    return probabilities, exp, product, weighted_sum


def _drop_identities(graph: fx.Graph, pinned: set) -> None:
    """``alias(a)``, same-shape ``view``/``expand``/``_to_copy`` and ``a * 1`` -> ``a``."""
    for node in list(graph.nodes):
        if not _is_op(node) or node in pinned or not node.args:
            continue
        source = node.args[0]
        if not isinstance(source, fx.Node) or source in pinned:
            continue
        value, before = _value(node), _value(source)
        if value is None or before is None:
            continue
        same = (value.shape == before.shape and value.dtype == before.dtype and value.device == before.device
                and value.stride() == before.stride())
        if node.target is _aten.alias.default:
            node.replace_all_uses_with(source)
        elif same and node.target in _IDENTITY_VIEWS:
            node.replace_all_uses_with(source)
        elif same and node.target in (_aten.mul.Tensor, _aten.mul.Scalar, _aten.pow.Tensor_Scalar) and \
                len(node.args) > 1 and type(node.args[1]) in (int, float) and node.args[1] == 1:
            node.replace_all_uses_with(source)
