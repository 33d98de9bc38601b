"""An Inductor graph pass that batches this kernel's sibling Q4_1 linears into one call.

Why: a decode step of a small model is mostly fixed costs per call, not weights streamed. A layer's
q, k and v projections read the same input, and so do its MLP's gate and up; one `linear_q4_1`
call each quantizes that input again, wakes the thread pool and joins it again, and is dispatched
by Inductor's wrapper again. `linear_q4_1_many` does it once for all of them (one activation
quantization, one parallel region over every weight's output groups), with each output bitwise
what its own call gives. On SmolLM2-135M the 7 GEMVs of a layer become 4 calls.

The pass is offered, not imposed: importing this kernel changes no compiler setting. A caller
opts in for its own compile, e.g.

    torch.compile(model, options={"post_grad_custom_post_pass": quantized_linear.graph_passes()})

(kernel_explorer's `StaticDecoder` asks every kernel switched on in the model for its
`graph_passes()`). It rewrites only this build's `linear_q4_1` calls on one input with the same
int8 passes and a GEMV layout each, whose weights are defined before the first of them.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from ._ops import ops


def _arguments(node: torch.fx.Node, schema: Any) -> dict[str, Any] | None:
    """The call's arguments by name (defaults filled in), or None if the node does not bind."""
    values: dict[str, Any] = {}
    for i, argument in enumerate(schema.arguments):
        if i < len(node.args):
            values[argument.name] = node.args[i]
        elif argument.name in node.kwargs:
            values[argument.name] = node.kwargs[argument.name]
        elif argument.has_default_value():
            values[argument.name] = argument.default_value
        else:
            return None
    return values


def _val(arg: Any) -> Any:
    """An argument as the call sees it: a node's (fake) value, lists of them, constants as they are."""
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    if isinstance(arg, (list, tuple)):
        return type(arg)(_val(a) for a in arg)
    return arg


def _meta(node: torch.fx.Node, val: Any) -> dict[str, Any]:
    """A new node's metadata: its value, and where in the model the call it replaces came from.
    Not the rest of `node.meta`: its recorded input values are those of the call it replaces."""
    kept = {
        key: node.meta[key]
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack")
        if key in node.meta
    }
    return {**kept, "val": val}


class SiblingLinears(CustomGraphPass):
    """Every group of two or more `linear_q4_1` calls on one input (same int8 passes, each with its
    GEMV layout) becomes one `linear_q4_1_many` call, placed where the group's first call was."""

    #: groups rewritten by the last call (for a caller that reports what the pass did)
    batched: list[int]

    def __init__(self) -> None:
        self.batched = []

    def __call__(self, graph: torch.fx.Graph) -> None:
        single = ops.linear_q4_1.default
        many = ops.linear_q4_1_many.default
        position = {node: i for i, node in enumerate(graph.nodes)}
        groups: dict[tuple[Any, Any], list[tuple[torch.fx.Node, dict[str, Any]]]] = defaultdict(list)
        for node in graph.nodes:
            if node.op != "call_function" or node.target is not single:
                continue
            args = _arguments(node, single._schema)
            if args is None or not isinstance(args["gemv"], torch.fx.Node):
                continue
            groups[args["x"], args["int8_passes"]].append((node, args))
        self.batched = []
        for (x, passes), calls in groups.items():
            first = calls[0][0]
            members = [
                (node, args)
                for node, args in calls
                if all(
                    position[a] < position[first]
                    for a in (args["packed"], args["gemv"], args["bias"])
                    if isinstance(a, torch.fx.Node)
                )
                or node is first
            ]
            if len(members) < 2:
                continue
            with graph.inserting_before(first):
                batch = graph.call_function(
                    many,
                    (
                        x,
                        [args["packed"] for _, args in members],
                        [args["bias"] for _, args in members],
                        [args["gemv"] for _, args in members],
                        passes,
                    ),
                )
                batch.meta = _meta(first, val=[node.meta.get("val") for node, _ in members])
                # what Inductor holds a custom op's inputs' strides to: the values the call sees
                batch.meta["eager_input_vals"] = (tuple(_val(a) for a in batch.args), {})
                for i, (node, _) in enumerate(members):
                    item = graph.call_function(operator.getitem, (batch, i))
                    item.meta = _meta(node, val=node.meta.get("val"))
                    node.replace_all_uses_with(item)
            for node, _ in members:
                graph.erase_node(node)
            self.batched.append(len(members))

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,))
