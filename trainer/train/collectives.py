"""The collectives a compiled training loop waits on, counted in its graph.

On a cluster a tabular model's step is bound by the cross-worker collectives it waits
for, not by its arithmetic, so the count is a fact worth logging and keeping in tests:
one all-reduce per step (the gradients, packed into one collective), and whatever runs
once per loop outside the step.
"""

from __future__ import annotations

import collections

# Ops that wait on the other replicas (TensorFlow's collective ops, and NCCL's).
COLLECTIVE_OPS = frozenset(
    {
        "CollectiveReduce",
        "CollectiveReduceV2",
        "CollectiveReduceV3",
        "CollectiveGather",
        "CollectiveGatherV2",
        "CollectiveBcastSend",
        "CollectiveBcastRecv",
        "CollectiveBcastSendV2",
        "CollectiveBcastRecvV2",
        "CollectiveAllToAllV2",
        "CollectiveAllToAllV3",
        "CollectiveReduceScatterV2",
        "NcclAllReduce",
    }
)
LOOPS = ("While", "StatelessWhile")


def count(graph_def, local_replicas: int = 1) -> tuple[float, float]:
    """(collectives per iteration of the function's loop, collectives outside it),
    per replica: every local replica launches its own op of the same collective.

    `graph_def`: of a traced `tf.function` with one `tf.range` loop
    (`fn.get_concrete_function(...).graph.as_graph_def()`).
    """
    functions, body, inside = _loop(graph_def)
    outside = _reachable(functions, _called(graph_def.node), exclude={body})
    in_loop = sum(_collectives(functions[f].node_def) for f in inside)
    out_loop = sum(_collectives(functions[f].node_def) for f in outside - inside)
    out_loop += _collectives(graph_def.node)
    return in_loop / local_replicas, out_loop / local_replicas


def loop_ops(graph_def) -> collections.Counter:
    """The ops of one iteration of the traced function's loop (its body and every
    function it calls), by op type."""
    functions, _, inside = _loop(graph_def)
    return collections.Counter(n.op for f in inside for n in functions[f].node_def)


def _loop(graph_def) -> tuple[dict, str, set[str]]:
    """(the graph's functions by name, its one loop's body, the functions that body
    reaches)."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    loops = [n for n in graph_def.node if n.op in LOOPS]
    if len(loops) != 1:
        raise ValueError(f"expected one loop in the traced function, found {len(loops)}")
    body = loops[0].attr["body"].func.name
    return functions, body, _reachable(functions, [body])


def _collectives(nodes) -> int:
    return sum(1 for n in nodes if n.op in COLLECTIVE_OPS)


def _called(nodes) -> list[str]:
    """Names of the functions that `nodes` call (function attributes, lists included)."""
    names = []
    for node in nodes:
        for value in node.attr.values():
            if value.HasField("func"):
                names.append(value.func.name)
            names.extend(f.name for f in value.list.func)
    return names


def _reachable(functions: dict, roots: list[str], exclude=frozenset()) -> set[str]:
    seen: set[str] = set()
    todo = collections.deque(r for r in roots if r in functions and r not in exclude)
    while todo:
        name = todo.popleft()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(
            f
            for f in _called(functions[name].node_def)
            if f in functions and f not in seen and f not in exclude
        )
    return seen
