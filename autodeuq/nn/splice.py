"""A traced function's graph spliced from pieces traced once, instead of traced op by op.

Tracing a training epoch builds each TensorFlow op through its Python layer (argument checks,
dtype inference, op-definition lookups, name scopes), the largest part of a small network's fixed
cost, and every network of a search has a structure of its own, so nearly every training traced
its epoch anew (``benchmarks/results/training_speed.md``). Yet an epoch is made of few kinds of
pieces, each repeated many times: the forward and backward of a ``Dense`` of some activation, an
``Add``, the loss, the optimizer's update.

A :class:`Splicer` builds such a graph from pieces. The code that traces the graph calls
``via.call(key, fn, *args)`` for each piece, ``fn`` being the same Python function that would be
called directly (:data:`DIRECT` does exactly that), with ``args`` nested lists and tuples of
tensors and plain Python values (sizes and shapes that vary from one network to the next are
better given as ``via.constant(...)``: the piece then serves every value):

* the first call with a given key and given arguments' structure, dtypes and ranks (a
  constant's whole shape) traces ``fn`` once, on placeholders of unknown sizes, into a graph of
  its own (a :class:`Piece`), kept in a module-wide cache; later calls reuse it, whatever the
  sizes;
* the pieces' nodes are copied, renamed, into one ``GraphDef``, each piece's placeholders replaced
  by the values that feed them, and :meth:`Splicer.run` imports that ``GraphDef`` into the graph
  being traced in one call, the shapes inferred there from the real inputs.

So the ops are exactly those the direct trace would make, in the same order, with the same
attributes; only their names differ, equal constants are one node (fewer nodes to import and
instantiate), and the placeholders that fed the pieces remain, never run (the tests compare the
ops kind for kind, and trainings bit for bit). The stateful ops
of the spliced graph (variable reads and updates, random draws) run in the order they were
called: each waits for the one before it (a control edge), as automatic control dependencies
order a ``tf.function``'s.

A piece that reads or writes variables (the optimizer's update, dropout's draws from the
training's generator) names them: ``via.call(key, fn, *args, variables=[...])``. Its graph holds
a placeholder for each variable it *captured*; spliced for another call, each is fed by the
variable at the same position of that call's list, so one piece serves every trainer's
variables. A piece that captures anything else, or whose graph holds functions of its own (a
``tf.cond``, a ``tf.while_loop``), cannot be spliced: :class:`NotSpliceable` is raised, and the
caller traces directly instead.

A loop is spliced too: ``via.loop(condition, body, loop_vars, invariants)`` (``tf.while_loop``
for :data:`DIRECT`) builds the condition and the body from pieces, each with a splicer of its own,
writes them as the two functions of a ``While`` node (``FunctionDef`` s: the pieces' nodes, their
placeholders the functions' arguments), and puts that node in the enclosing graph.

And a spliced graph need not be imported at all: :meth:`Splicer.function` makes it a function
of TensorFlow's runtime (a :class:`SplicedFunction`), its arguments made by
:meth:`Splicer.argument`, called eagerly like a concrete function. Its ops, and its loops', then
never become Python objects: importing costs about as much per op as tracing once the pieces
exist. Its functions are registered with the runtime as ``tf.while_loop`` registers its own,
and removed with it. The trainer's epochs are such functions.
"""
from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import function_pb2, graph_pb2, node_def_pb2
from tensorflow.core.function.polymorphism import function_type
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import atomic_function
from tensorflow.python.framework import func_graph, op_def_registry
from tensorflow.python.ops import control_flow_util_v2

PIECE_CACHE_SIZE = 2048  #: pieces kept module-wide (each a few nodes)


class NotSpliceable(Exception):
    """A piece that cannot be spliced: it holds functions of its own, reads a value it was not
    given, or needs what a piece cannot carry (a tape of its forward for its backward)."""


class Ref:
    """A value of a graph being spliced: output ``index`` of node ``node``, of ``dtype``.

    ``shape`` is what a piece's placeholder for it knows of its shape: its rank, every size
    unknown (None: not even the rank), except for a constant (:meth:`Splicer.constant`), whose
    shape is known, so that, for example, a reshape to a constant shape keeps its rank.
    """

    __slots__ = ("node", "index", "dtype", "shape")

    def __init__(self, node: str, index: int, dtype: tf.DType, shape: tuple | None):
        self.node, self.index, self.dtype, self.shape = node, index, dtype, shape

    @property
    def name(self) -> str:
        return f"{self.node}:{self.index}"

    def __repr__(self):
        return f"Ref({self.name}, {self.dtype.name}, shape={self.shape})"


def _is_value(leaf) -> bool:
    return isinstance(leaf, (Ref, tf.Tensor))


def _piece_shape(value) -> tuple | None:
    """What a piece's placeholder for ``value`` knows of its shape (see :class:`Ref`)."""
    if isinstance(value, Ref):
        return value.shape
    rank = value.shape.rank
    return None if rank is None else (None,) * rank


def _flatten(nest) -> list:
    """The leaves of nested lists and tuples, in order (anything else is a leaf)."""
    if isinstance(nest, (list, tuple)):
        return [leaf for item in nest for leaf in _flatten(item)]
    return [nest]


def _map(fn: Callable, nest):
    """``nest`` with each leaf replaced by ``fn(leaf)``, in the order of :func:`_flatten`; lists
    stay lists, tuples (named ones included) tuples."""
    if isinstance(nest, list):
        return [_map(fn, item) for item in nest]
    if isinstance(nest, tuple):
        items = [_map(fn, item) for item in nest]
        return type(nest)(*items) if hasattr(nest, "_fields") else tuple(items)
    return fn(nest)


def _signature(args) -> str:
    """What a piece's graph depends on besides its key: the arguments' structure, each value's
    dtype and what a placeholder knows of its shape (:class:`Ref`), and each plain leaf itself."""
    return repr(_map(lambda v: (v.dtype.name, _piece_shape(v)) if _is_value(v) else v, args))


@dataclass
class Piece:
    """One traced piece: its nodes, which of them are its inputs and captures, its outputs."""

    nodes: list  #: NodeDefs, in creation order
    inputs: list[str]  #: the placeholder node of each value argument, in flattened order
    captures: list[tuple[int, str]]  #: (the position of a captured variable, its placeholder node)
    outputs: Any  #: fn's result, each output tensor as a :class:`Ref` of the piece's graph
    versions: Any  #: the GraphDef's version stamps
    constants: dict[str, bytes]  #: its constants without inputs: {node: what makes one equal to another}


def _constant_key(node) -> bytes | None:
    """What makes a constant node without inputs equal to another (all but its name); None for
    any other node."""
    if node.op != "Const" or node.input:
        return None
    unnamed = node_def_pb2.NodeDef()
    unnamed.CopyFrom(node)
    unnamed.name = ""
    return unnamed.SerializeToString(deterministic=True)


def _trace_piece(fn: Callable, args, variables) -> Piece:
    graph = func_graph.FuncGraph("piece")
    with graph.as_default():
        placeholders = []

        def placeholder(leaf):
            if not _is_value(leaf):
                return leaf
            shape = _piece_shape(leaf)
            value = tf.compat.v1.placeholder(leaf.dtype, None if shape is None else list(shape))
            placeholders.append(value)
            return value

        result = fn(*_map(placeholder, args))
    graph_def = graph.as_graph_def()
    if graph_def.library.function:
        raise NotSpliceable(f"a piece's graph holds functions of its own: "
                            f"{[f.signature.name for f in graph_def.library.function]}")

    positions = {id(v.handle): k for k, v in enumerate(variables)}
    unnamed = [outside for outside, _ in graph.captures if id(outside) not in positions]
    if unnamed:
        raise NotSpliceable(f"a piece reads values it was not given as variables: {unnamed}")

    def output(leaf):
        if not isinstance(leaf, tf.Tensor):
            return leaf
        if leaf.graph is not graph:
            raise NotSpliceable(f"a piece returns a value from outside its graph: {leaf}")
        return Ref(leaf.op.name, leaf.value_index, leaf.dtype, _piece_shape(leaf))

    constants = {node.name: key for node in graph_def.node if (key := _constant_key(node)) is not None}
    return Piece(nodes=list(graph_def.node), inputs=[p.op.name for p in placeholders],
                 captures=[(positions[id(outside)], inside.op.name) for outside, inside in graph.captures],
                 outputs=_map(output, result), versions=graph_def.versions, constants=constants)


_PIECES: dict = {}
_PIECES_LOCK = threading.Lock()


def clear_pieces():
    """Forget every piece of the module-wide cache."""
    with _PIECES_LOCK:
        _PIECES.clear()


@functools.cache
def _stateful(op_type: str) -> bool:
    op_def = op_def_registry.get(op_type)
    return op_def is None or op_def.is_stateful


def _source(reference: str, renamed: dict, prefix: str) -> str:
    """A node input (``node``, ``node:index`` or ``^node``) of a piece, in the spliced graph."""
    control = reference.startswith("^")
    node, _, index = reference.lstrip("^").partition(":")
    if node in renamed:
        new_node, new_index = renamed[node]
        if control:
            return "^" + new_node
        return f"{new_node}:{new_index if new_index is not None else (index or 0)}"
    return ("^" if control else "") + prefix + node + (f":{index}" if index else "")


@functools.cache
def _output_args(op_type: str) -> tuple:
    """The output arguments of an op type: ``(name, number_attr, type_list_attr)`` each."""
    return tuple((arg.name, arg.number_attr, arg.type_list_attr) for arg in op_def_registry.get(op_type).output_arg)


def _output_names(node) -> list[str]:
    """A node's outputs as a function body names them (``argument:index``), in output order."""
    names = []
    for name, number_attr, type_list_attr in _output_args(node.op):
        if number_attr:
            count = node.attr[number_attr].i
        elif type_list_attr:
            count = len(node.attr[type_list_attr].list.type)
        else:
            count = 1
        names += [f"{name}:{k}" for k in range(count)]
    return names


_FUNCTION_IDS = itertools.count()


def _lowered() -> bool:
    """Whether ``tf.while_loop`` would lower a loop built now to v1 control flow (Switch and Merge
    ops) when its graph is run: unless the functions of this context run under the
    single-threaded executor, which cannot run them (``control_flow_util_v2``)."""
    return (not getattr(control_flow_util_v2, "_DISABLE_LOWER_USING_SWITCH_MERGE", False)
            and context.context().function_call_options.executor_type != "SINGLE_THREADED_EXECUTOR")


def _registered(definition):
    """A ``FunctionDef`` registered with TensorFlow's runtime as ``tf.while_loop`` registers its
    functions: an ``AtomicFunction`` that removes it from the runtime once no one holds it."""
    no_type = function_type.FunctionType([])  # called by name, never through a FunctionType
    return atomic_function.from_function_def(definition, no_type)


class SplicedFunction:
    """A spliced graph as a function of TensorFlow's runtime (:meth:`Splicer.function`): called
    with tensors for its arguments, it runs, as a concrete function does, under the executor
    of the caller's context, and returns its outputs' tensors.

    No graph is built in Python for it: its ``FunctionDef`` (:attr:`definition`, the pieces' nodes)
    and those of its loops are registered with the runtime as ``tf.while_loop`` registers its
    functions, for as long as this object lives. The variables its pieces named are passed to
    it at each call (their handles, its last arguments). Its stateful ops run in call order, all
    of them (the chain's last op is the function's control output).
    """

    def __init__(self, definition, loops: list, handles: list):
        self.definition = definition
        self.library = [definition, *loops]  #: its FunctionDef, then those of its loops
        self._registered = [_registered(f) for f in reversed(self.library)]
        self._name = definition.signature.name.encode()
        self._handles = list(handles)
        self._outputs = len(definition.signature.output_arg)

    def __call__(self, *tensors):
        return context.context().call_function(self._name, [*tensors, *self._handles], self._outputs)


class Direct:
    """Calls each piece's function directly (the ordinary trace); :data:`DIRECT` is the one instance."""

    @staticmethod
    def input(value):
        return value

    @staticmethod
    def constant(value, dtype):
        return tf.constant(value, dtype)

    @staticmethod
    def call(key, fn: Callable, *args, variables=()):
        return fn(*args)

    @staticmethod
    def loop(condition: Callable, body: Callable, loop_vars, invariants=()):
        """``tf.while_loop`` of ``condition(via, *values)`` and ``body(via, *values)`` (the new
        ``loop_vars``), ``values`` being the loop variables then the ``invariants``: the loop
        variables' final values."""
        count = len(loop_vars)
        outputs = tf.while_loop(lambda *values: condition(DIRECT, *values),
                                lambda *values: [*body(DIRECT, *values), *values[count:]],
                                [*loop_vars, *invariants])
        return list(outputs[:count])

    @staticmethod
    def run(values):
        return values


DIRECT = Direct()


class Splicer:
    """Builds one graph from pieces (see the module's docstring): :meth:`input` the tensors that
    feed it, :meth:`call` each piece, then :meth:`run` to import it into the current graph."""

    def __init__(self):
        self.graph_def = graph_pb2.GraphDef()
        self._feeds: dict[str, Any] = {}  # placeholder node -> the tensor of the current graph
        self._captures: dict[int, tuple[Any, str]] = {}  # id of a variable's handle -> (it, its placeholder)
        self._last_stateful = None
        self._count = 0
        self._functions: list = []  # their functions (FunctionDefs)
        self._constants: dict[bytes, str] = {}  # a constant (see _constant_key) -> its node
        self._arguments: list[Ref] = []  # its arguments, as a function's (see argument)

    def input(self, tensor) -> Ref:
        """A tensor of the graph being traced, as a value of the spliced graph (a value of the
        spliced graph, such as an :meth:`argument`, as it is)."""
        if isinstance(tensor, Ref):
            return tensor
        name = self._placeholder(tensor.dtype, "input")
        self._feeds[name] = tensor
        return Ref(name, 0, tensor.dtype, _piece_shape(tensor))

    def constant(self, value, dtype) -> Ref:
        """A constant of the spliced graph (so that a piece may take sizes and shapes as inputs,
        and serve every value of them)."""
        proto = tf.make_tensor_proto(value, dtype)
        node = node_def_pb2.NodeDef(op="Const")
        node.attr["dtype"].type = proto.dtype
        node.attr["value"].tensor.CopyFrom(proto)
        node.name = f"constant_{self._count}"
        equal = self._equal_constant(_constant_key(node), node.name)
        if equal is None:
            self._count += 1
            self.graph_def.node.append(node)
        return Ref(equal or node.name, 0, tf.as_dtype(dtype), tuple(d.size for d in proto.tensor_shape.dim))

    def _placeholder(self, dtype, prefix: str, template=None) -> str:
        name = f"{prefix}_{self._count}"
        self._count += 1
        node = self.graph_def.node.add()
        if template is not None:
            node.CopyFrom(template)
            node.ClearField("input")
        else:
            node.op = "Placeholder"
            node.attr["dtype"].type = tf.as_dtype(dtype).as_datatype_enum
        node.name = name
        return name

    def call(self, key, fn: Callable, *args, variables=()):
        """``fn(*args)`` as part of the spliced graph: its result, each tensor a :class:`Ref`.

        ``key`` (hashable) names what ``fn`` computes: two calls of functions of the same
        qualified name with equal keys and arguments of the same structure, dtypes and ranks
        must compute the same function, of the variables each names in ``variables``
        (``tf.Variable`` objects, in the same roles).
        """
        name = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
        full_key = (name, key, _signature(args), len(variables))
        with _PIECES_LOCK:
            piece = _PIECES.get(full_key)
        if piece is None:
            piece = _trace_piece(fn, args, variables)
            with _PIECES_LOCK:
                if len(_PIECES) >= PIECE_CACHE_SIZE:
                    _PIECES.pop(next(iter(_PIECES)))
                _PIECES[full_key] = piece
        return self._splice(piece, [leaf for leaf in _flatten(args) if _is_value(leaf)], variables)

    def _splice(self, piece: Piece, values: list, variables):
        """Copy ``piece``'s nodes into the spliced graph, its inputs fed by ``values`` and
        ``variables``; its outputs."""
        if not self.graph_def.HasField("versions"):
            self.graph_def.versions.CopyFrom(piece.versions)
        renamed = self._feeds_of(piece, values, variables)
        prefix = f"piece_{self._count}/"
        self._count += 1
        for node in piece.nodes:
            if node.name in renamed:
                continue
            equal = self._equal_constant(piece.constants.get(node.name), prefix + node.name)
            if equal is not None:  # one node per distinct constant of the spliced graph
                renamed[node.name] = (equal, None)
                continue
            copy = self.graph_def.node.add()
            copy.CopyFrom(node)
            copy.name = prefix + node.name
            del copy.input[:]
            copy.input.extend(_source(reference, renamed, prefix) for reference in node.input)
            if _stateful(node.op):
                if self._last_stateful is not None:
                    copy.input.append("^" + self._last_stateful)
                self._last_stateful = copy.name

        def output(leaf):
            if not isinstance(leaf, Ref):
                return leaf
            if leaf.node in renamed:
                node, index = renamed[leaf.node]
                return Ref(node, leaf.index if index is None else index, leaf.dtype, leaf.shape)
            return Ref(prefix + leaf.node, leaf.index, leaf.dtype, leaf.shape)

        return _map(output, piece.outputs)

    def _equal_constant(self, key: bytes | None, name: str) -> str | None:
        """The node of the spliced graph holding the constant ``key`` (:func:`_constant_key`) if
        there is one; otherwise None, and the node ``name`` about to be copied becomes it (None
        too for any node that is no such constant: ``key`` None)."""
        if key is None or key in self._constants:
            return None if key is None else self._constants[key]
        self._constants[key] = name
        return None

    def _feeds_of(self, piece: Piece, values: list, variables) -> dict:
        """What replaces each placeholder of ``piece``: ``{its node: (node, index)}``, the index
        None for a variable (whose placeholder is shared by every piece reading it)."""
        values = [v if isinstance(v, Ref) else self.input(v) for v in values]
        renamed: dict[str, tuple[str, int | None]] = {
            name: (value.node, value.index) for name, value in zip(piece.inputs, values)}
        for position, inside in piece.captures:
            template = next(node for node in piece.nodes if node.name == inside)
            renamed[inside] = (self._variable(variables[position].handle, template), None)
        return renamed

    def _variable(self, handle, template) -> str:
        """The placeholder node of the spliced graph that stands for a variable's ``handle`` (made
        at its first use, from ``template``, the placeholder of a piece that captured it)."""
        if id(handle) not in self._captures:
            self._captures[id(handle)] = (handle, self._placeholder(handle.dtype, "variable", template))
        return self._captures[id(handle)][1]

    def _argument(self, value: Ref) -> Ref:
        """A value of an enclosing spliced graph, as an argument of this one (a function body)."""
        argument = Ref(self._placeholder(value.dtype, "argument"), 0, value.dtype, value.shape)
        self._arguments.append(argument)
        return argument

    def argument(self, spec: tf.TensorSpec) -> Ref:
        """An argument of the function :meth:`function` makes of this graph: a tensor of
        ``spec``'s dtype and rank."""
        rank = spec.shape.rank
        return self._argument(Ref("", 0, spec.dtype, None if rank is None else (None,) * rank))

    def function(self, outputs: list) -> SplicedFunction:
        """This graph as a function of TensorFlow's runtime, returning ``outputs`` (values of this
        graph): see :class:`SplicedFunction`."""
        definition = self._function("function", self._arguments + self._captured(), list(outputs))
        return SplicedFunction(definition, self._functions, [handle for handle, _ in self._captures.values()])

    def _captured(self) -> list[Ref]:
        """The placeholders of the variables its pieces named, in first use, as values."""
        return [Ref(name, 0, handle.dtype, ()) for handle, name in self._captures.values()]

    def loop(self, condition: Callable, body: Callable, loop_vars, invariants=()):
        """A ``While`` of the spliced graph, as :meth:`Direct.loop` builds with ``tf.while_loop``:
        the final values of the loop variables (``loop_vars``, values of this graph, as
        ``invariants``).

        ``condition`` and ``body`` are called once, each with a splicer of its own and the loop's
        values as its arguments; their pieces become the ``While``'s two functions, which take the
        loop variables, the invariants and the variables the body's pieces named (the body hands
        the invariants and those variables on unchanged, as ``tf.while_loop`` does with what a
        loop captures). The stateful ops of the body run in call order, each iteration after the
        last (the function's control output), and the ``While`` itself in its place among this
        graph's stateful ops.
        """
        values = [*loop_vars, *invariants]
        inner = Splicer()
        arguments = [inner._argument(v) for v in values]
        new = list(body(inner, *arguments))
        captured = list(inner._captures.values())  # (a variable's handle, its placeholder), in first use
        templates = {node.name: node for node in inner.graph_def.node}
        passed = inner._captured()
        body_def = inner._function("body", arguments + passed, new + arguments[len(loop_vars):] + passed)

        test = Splicer()
        test_arguments = [test._argument(v) for v in values]
        test_variables = [Ref(test._placeholder(handle.dtype, "variable", templates[name]), 0, handle.dtype, ())
                          for handle, name in captured]
        condition_def = test._function("condition", test_arguments + test_variables,
                                       [condition(test, *test_arguments)])

        inputs = [v.name for v in values] + [self._variable(handle, templates[name]) for handle, name in captured]
        dtypes = [v.dtype for v in values] + [handle.dtype for handle, _ in captured]
        node = self.graph_def.node.add()
        node.op, node.name = "While", f"loop_{self._count}"
        self._count += 1
        node.input.extend(inputs)
        node.attr["T"].list.type.extend(d.as_datatype_enum for d in dtypes)
        node.attr["cond"].func.name = condition_def.signature.name
        node.attr["body"].func.name = body_def.signature.name
        node.attr["parallel_iterations"].i = 10  # tf.while_loop's default
        node.attr["_num_original_outputs"].i = len(inputs)
        if _lowered():
            node.attr["_lower_using_switch_merge"].b = True
        for value in values + passed:
            shape = node.attr["output_shapes"].list.shape.add()
            if value.shape is None:
                shape.unknown_rank = True
            for size in value.shape or ():
                shape.dim.add(size=-1 if size is None else size)
        if self._last_stateful is not None:
            node.input.append("^" + self._last_stateful)
        self._last_stateful = node.name
        self._functions += [body_def, condition_def, *inner._functions, *test._functions]  # theirs: nested loops
        return [Ref(node.name, k, v.dtype, v.shape) for k, v in enumerate(loop_vars)]

    def _function(self, role: str, arguments: list[Ref], outputs: list[Ref]):
        """This spliced graph as a function (a ``FunctionDef``, named uniquely in the process) of
        its placeholders ``arguments``, returning ``outputs``."""
        function = function_pb2.FunctionDef()
        function.signature.name = f"autodeuq_spliced_{role}_{next(_FUNCTION_IDS)}"
        names = {argument.node for argument in arguments}
        nodes = {node.name: node for node in self.graph_def.node}

        def reference(source: str) -> str:
            if source.startswith("^"):
                return source
            node, _, index = source.partition(":")
            if node in names:
                return node
            return f"{node}:{_output_names(nodes[node])[int(index or 0)]}"

        for argument in arguments:
            function.signature.input_arg.add(name=argument.node, type=argument.dtype.as_datatype_enum)
        for node in self.graph_def.node:
            if node.name in names:
                continue
            if node.op == "Placeholder":
                raise NotSpliceable(f"a function's piece reads a value that is not its argument: {node.name}")
            copy = function.node_def.add()
            copy.CopyFrom(node)
            del copy.input[:]
            copy.input.extend(reference(source) for source in node.input)
        for k, value in enumerate(outputs):
            function.signature.output_arg.add(name=f"output_{k}", type=value.dtype.as_datatype_enum)
            function.ret[f"output_{k}"] = reference(value.name)
        if self._last_stateful is not None:  # the chain's last op: every stateful op runs
            function.signature.is_stateful = True
            function.signature.control_output.append("stateful")
            function.control_ret["stateful"] = self._last_stateful
        return function

    def run(self, values):
        """Import the spliced graph into the current graph (in one call); ``values`` (a nest of
        :class:`Ref`) as tensors of it."""
        graph = tf.compat.v1.get_default_graph()
        feeds = {f"{name}:0": graph.capture(t) if isinstance(graph, func_graph.FuncGraph) else t
                 for name, t in self._feeds.items()}
        for outside, name in self._captures.values():
            feeds[f"{name}:0"] = graph.capture(outside)
        for definition in self._functions:  # kept while a function of the graph holds them
            graph._add_function_recursive(_registered(definition))
        wanted = [leaf.name for leaf in _flatten(values) if isinstance(leaf, Ref)]
        imported = iter(tf.graph_util.import_graph_def(self.graph_def, input_map=feeds, return_elements=wanted,
                                                       name="spliced"))
        return _map(lambda leaf: next(imported) if isinstance(leaf, Ref) else leaf, values)

