"""The precision an export computes in: float32, or bfloat16 matmuls behind float32 signatures.

A bfloat16 export is the task's model built under Keras' `mixed_bfloat16` policy (the trainer
builds that copy and gives it the trained weights: garden/training/report.py): its layers
compute in bfloat16 with float32 variables, while what the training precision keeps in float32
stays there (the attention softmax, LayerNorm, the heads' logits, garden/layers/attention.py
softmax_in_float32). What the exporter adds, on the traced signatures and before anything is
written (`checked`):

- the census: how many matmul-class nodes (MATMUL_OPS) the graphs run in each dtype, written to
  garden_export.json as `matmul_dtypes` beside `compute_dtype`, so the metadata says what the
  graph computes in, read from the graph. A module whose matmuls disagree with the precision
  asked for (a float32 model exported as bfloat16, or the reverse) is refused.
- the kernel check: every node that runs in bfloat16 must have a CPU kernel for it in this
  TensorFlow (MatMul, Einsum, Softmax, Erf ... have one; Lgamma, BesselI0e, Igamma do not),
  else the server would fail on the first request. A refusal names the op and the node.
- float32 outputs: a signature output in a half type is cast to float32, so inputs and outputs
  of every signature are the float32 export's and every REST / gRPC client holds.

TensorFlow is imported inside the functions: garden.train reads PRECISIONS for its flag.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

# export precision -> the Keras dtype policy its model is built under.
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
PRECISIONS = tuple(POLICIES)

# The ops that do a model's multiply-adds, and the attribute that holds their input dtype.
MATMUL_OPS = {"MatMul": "T", "BatchMatMul": "T", "BatchMatMulV2": "T", "BatchMatMulV3": "Ta",
              "Einsum": "T", "Conv1D": "T", "Conv2D": "T", "Conv3D": "T",
              "DepthwiseConv2dNative": "T"}
# Ops that run no kernel of their own on a dtype (function calls, graph plumbing): the functions
# they call are checked node by node instead.
_NO_KERNEL_OPS = {"PartitionedCall", "StatefulPartitionedCall", "While", "StatelessWhile", "If",
                  "StatelessIf", "Case", "StatelessCase", "NoOp", "IdentityN"}
_HALF = ("bfloat16", "float16")


class PrecisionError(ValueError):
    """An export precision that is not one of PRECISIONS, or that the module's traced graphs
    cannot honour; raised before anything is written."""


def check_name(precision: str) -> str:
    """`precision` if it names one of PRECISIONS, else PrecisionError listing them."""
    if precision not in POLICIES:
        raise PrecisionError(f"export precision must be one of "
                             f"{', '.join(repr(p) for p in PRECISIONS)}; got {precision!r}")
    return precision


def _functions(graph_def) -> Iterable[Tuple[str, Iterable]]:
    """(function name, nodes) of a GraphDef: the top level ("") and every library function."""
    yield "", graph_def.node
    for function in graph_def.library.function:
        yield function.signature.name, function.node_def


def _graph_defs(signatures) -> List:
    return [fn.graph.as_graph_def() for fn, _ in signatures.values()]


def _node_dtypes(node) -> Dict[str, List[int]]:
    """attr name -> the DataType enums a node's type attributes hold."""
    dtypes = {}
    for name, value in node.attr.items():
        if value.WhichOneof("value") == "type":
            dtypes[name] = [value.type]
        elif value.WhichOneof("value") == "list" and value.list.type:
            dtypes[name] = list(value.list.type)
    return dtypes


def matmul_dtypes(graph_defs) -> Dict[str, int]:
    """dtype name -> how many matmul-class nodes (MATMUL_OPS) run in it, each function of the
    graphs counted once."""
    import tensorflow as tf

    counts, seen = {}, set()
    for graph_def in graph_defs:
        for name, nodes in _functions(graph_def):
            if name and name in seen:
                continue
            seen.add(name)
            for node in nodes:
                attr = MATMUL_OPS.get(node.op)
                if attr and attr in node.attr:
                    dtype = tf.as_dtype(node.attr[attr].type).name
                    counts[dtype] = counts.get(dtype, 0) + 1
    return dict(sorted(counts.items()))


def _has_cpu_kernel(op: str, dtypes: Dict[str, List[int]], cache: dict) -> bool:
    """Whether this TensorFlow registers a CPU kernel (an unlabelled one, which a stock model
    server selects) for `op` whose type constraints admit the node's dtypes."""
    from tensorflow.python.framework import kernels

    if op not in cache:  # an op this TensorFlow does not know lists no kernel: refused too
        cache[op] = [{c.name: set(c.allowed_values.list.type) for c in k.constraint}
                     for k in kernels.get_registered_kernels_for_op(op).kernel
                     if k.device_type == "CPU" and not k.label]
    return any(all(set(dtypes.get(name, ())) <= allowed for name, allowed in kernel.items())
               for kernel in cache[op])


def missing_bfloat16_kernels(graph_defs) -> List[Tuple[str, str, str]]:
    """(op, node, function) of every node that runs in bfloat16 and has no CPU kernel for it."""
    import tensorflow as tf

    bf16 = tf.bfloat16.as_datatype_enum
    missing, cache, seen = [], {}, set()
    for graph_def in graph_defs:
        for function, nodes in _functions(graph_def):
            for node in nodes:
                if node.op in _NO_KERNEL_OPS or (node.op, node.name, function) in seen:
                    continue
                dtypes = _node_dtypes(node)
                if not any(bf16 in types for types in dtypes.values()):
                    continue
                if not _has_cpu_kernel(node.op, dtypes, cache):
                    missing.append((node.op, node.name, function))
                    seen.add((node.op, node.name, function))
    return missing


def _float32_outputs(fn):
    """fn itself when every output is already float32 or not a float; else a concrete function
    of the same inputs whose half-type outputs are cast to float32."""
    import tensorflow as tf

    outputs = tf.nest.flatten(fn.structured_outputs)
    if not any(t.dtype.name in _HALF for t in outputs):
        return fn
    args, kwargs = fn.structured_input_signature
    if kwargs:
        raise PrecisionError(f"signature function {fn.name} takes keyword-only inputs "
                             f"{sorted(kwargs)}; give it a positional input_signature")

    def cast(*inputs):
        return tf.nest.map_structure(
            lambda t: tf.cast(t, tf.float32) if t.dtype.name in _HALF else t, fn(*inputs))

    return tf.function(cast, input_signature=args).get_concrete_function()


def checked(signatures: dict, precision: str, task: str) -> Tuple[dict, Dict[str, int]]:
    """The module's signatures as the export saves them, and their matmul census.

    signatures: {name: (concrete function, method)} (ServingModule.signatures()). PrecisionError
    when precision is not one of PRECISIONS, when the graphs' matmuls are not in that precision
    (bfloat16 asked of a model built in float32, or float32 asked of one built in a half type),
    or when a bfloat16 node has no CPU kernel. For bfloat16, half-type outputs become float32.
    """
    check_name(precision)
    graph_defs = _graph_defs(signatures)
    census = matmul_dtypes(graph_defs)
    half = {dtype: n for dtype, n in census.items() if dtype in _HALF}
    if precision == "float32" and half:
        raise PrecisionError(
            f"the {task} export was asked in float32 but its graphs run {_counted(half)} "
            f"matmuls (its model was built under a mixed Keras dtype policy): export it with "
            f"precision='bfloat16', or build the model under the float32 policy")
    if precision == "bfloat16":
        if "bfloat16" not in census:
            raise PrecisionError(
                f"the {task} export was asked in bfloat16 but its graphs run no bfloat16 matmul "
                f"({_counted(census) or 'no matmul at all'}): build its model under Keras' "
                f"'mixed_bfloat16' policy (garden.train does, for train.export_precision = "
                f"'bfloat16')")
        missing = missing_bfloat16_kernels(graph_defs)
        if missing:
            import tensorflow as tf

            op, node, function = missing[0]
            more = f" (and {len(missing) - 1} more node(s))" if len(missing) > 1 else ""
            raise PrecisionError(
                f"the {task} export cannot compute in bfloat16: op {op} (node {node!r}"
                f"{f' in {function}' if function else ''}){more} has no bfloat16 CPU kernel "
                f"in TensorFlow {tf.__version__}; build that layer with dtype='float32', or "
                f"export in float32")
        signatures = {name: (_float32_outputs(fn), method)
                      for name, (fn, method) in signatures.items()}
    return signatures, census


def _counted(census: Dict[str, int]) -> str:
    return ", ".join(f"{n} {dtype}" for dtype, n in census.items())
