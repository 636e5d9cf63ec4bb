"""Generate the Triton source of one fused kernel from a group of graph nodes.

A fused kernel walks a *domain* (a shape) and, at each element, evaluates the group's
outputs. Every value is written as a function of an *index context*: one index expression
per dim of the value's shape. The domain's own context is ``(i0, i1, ...)`` (pointwise
kernels: the flat offset unravelled) or ``(r0, ..., c)`` (row kernels: the row's leading
indices and the vector of columns). An op maps the context it is evaluated at to its
operands' contexts:

* elementwise ops broadcast (a size-1 dim of an operand reads index 0),
* ``expand``/``view``/``permute``/``slice`` re-index (``x[:, 2:]`` at ``(a, b)`` is ``x`` at
  ``(a, 2 + b)``), so views of values never materialise,
* ``cat`` selects, per piece, with ``tl.where`` on the cat dim's index (each piece's loads
  masked to its own range),
* a reduction (row kernels only) evaluates its operand at ``(r0, ..., c)`` and reduces the
  column vector to one value per row.

Tensors from outside the group are loaded at the context they are needed at, with their
strides baked into the source (a group is compiled per stride pattern). Each (value,
context) is computed once, into one named variable, so the source reads as the program it
fuses; a header comment lists the nodes and the user's source lines. Inside the kernel the
values are numbered afresh (graph value ``v12`` may be ``x3``; the header says which), so
the same work on other values reads the same and is compiled once.

``Unfusible`` is raised for what the generator cannot express; the caller then runs the
group's nodes eagerly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from genesis import dtypes as D
from genesis_cuda.compiler import ops_table as T
from genesis_cuda.kernels._launch import contiguous_strides, next_pow2

MAX_ROW = 8192  # longest row a row kernel holds in registers (a longer one is not fused)
BLOCK = 1024  # elements per program of a pointwise kernel
_VECTOR = re.compile(r"\b(i\d+|c|vlin\d+)\b")  # index names that vary along a program


class Unfusible(Exception):
    """The group holds something the generator cannot express (the caller runs it eagerly)."""


@dataclass
class KernelSpec:
    """A generated kernel: its source and how to launch it.

    ``inputs``/``outputs`` are the value ids behind the kernel's pointer parameters, in
    order (inputs first); ``grid`` and ``constexprs`` complete a launch; ``name`` is the
    ``@triton.jit`` function's name in ``source``; ``label`` names this use of it (the
    group's place in the graph: the debug file's name). ``code`` is ``source`` without the
    header comment: the same for every group that fuses the same work on the same
    geometry (values are numbered per kernel), so such groups share one compiled kernel.
    """

    name: str
    label: str
    source: str
    code: str
    inputs: list
    outputs: list
    grid: tuple
    constexprs: dict
    num_warps: int


_VALUE = re.compile(r"(?<![A-Za-z0-9_])(in_|out_)?v(\d+)")  # v12, in_v12, out_v12, v12_1


def _number_locally(func: str) -> tuple[str, list[str]]:
    """``func`` with the graph's values (``v12``) renamed ``x0``, ``x1``, ... in order of
    appearance, so that the same work on other values (the next layer's) reads the same;
    and the graph names in that order."""
    numbering: dict[str, str] = {}

    def local(m) -> str:
        new = numbering.setdefault(m.group(2), str(len(numbering)))
        return f"{m.group(1) or ''}x{new}"

    return _VALUE.sub(local, func), [f"v{old}" for old in numbering]


def _numbering_comment(graph_names: list[str]) -> list[str]:
    """Comment lines saying which graph value each kernel-local ``x<k>`` is."""
    pairs = [f"x{k} is {g}" for k, g in enumerate(graph_names)]
    lines, line = [], "# in the kernel below:"
    for p in pairs:
        if len(line) + len(p) + 2 > 96:
            lines.append(line + ",")
            line = "#  "
        line += (" " if line.endswith(":") or line == "#  " else ", ") + p
    return lines + [line]


def _shift(expr: str, start: int, step: int = 1) -> str:
    """``start + expr * step`` written plainly."""
    if expr == "0":
        return str(start)
    e = expr if step == 1 else f"{expr} * {step}"
    if start == 0:
        return e
    return f"({e} + {start})" if start > 0 else f"({e} - {-start})"


def dense(shape: tuple, stride) -> bool:
    """Whether ``stride`` lays ``shape`` out densely (a permutation of the contiguous
    layout): an output allocated with it takes exactly its element count."""
    if stride is None or len(stride) != len(shape):
        return False
    expected = 1
    for n, s in sorted(((n, s) for n, s in zip(shape, stride) if n != 1),
                       key=lambda p: p[1]):
        if s != expected:
            return False
        expected *= n
    return True


def _offset(ctx: tuple, shape: tuple, strides: tuple) -> str:
    terms = [e if s == 1 else f"{e} * {s}" for e, n, s in zip(ctx, shape, strides)
             if n != 1 and s != 0 and e != "0"]
    return " + ".join(terms) if terms else "0"


class Emitter:
    """Writes one kernel. ``members``: value id -> the group node computing it; ``values``:
    value id -> ``Value`` (every value the group touches); ``domain``: the shape walked;
    ``row``: a row kernel (domain ``(*R, C)``, reductions over ``C``) or a pointwise one.
    """

    def __init__(self, members: dict, values: dict, domain: tuple, row: bool):
        self.members, self.values, self.domain, self.row = members, values, tuple(domain), row
        self.lines: list[str] = []
        self.memo: dict = {}
        self.loads: list = []  # value ids loaded from outside, in first-use order
        self.index_vars: dict[str, str] = {}
        self.counts: dict = {}
        n = len(self.domain)
        if row:
            if n == 0:
                raise Unfusible("a row kernel needs at least one dim")
            self.ctx = tuple(f"r{d}" for d in range(n - 1)) + ("c",)
        else:
            self.ctx = tuple(f"i{d}" for d in range(n))
        self.dstrides = contiguous_strides(self.domain)

    # ------------------------------------------------------------------ indices
    def _need_index(self, ctx: tuple) -> None:
        for e in ctx:
            for name in re.findall(r"\b([ir]\d+)\b", e):
                if name not in self.index_vars:
                    d = int(name[1:])
                    src = "row" if self.row else "offs"
                    size = self.domain[d]
                    stride = (contiguous_strides(self.domain[:-1])[d] if self.row
                              else self.dstrides[d])
                    e2 = src if stride == 1 else f"({src} // {stride})"
                    first = d == 0
                    self.index_vars[name] = e2 if first else f"{e2} % {size}"

    def _name(self, vid) -> str:
        k = self.counts.get(vid, 0)
        self.counts[vid] = k + 1
        return f"v{vid}" if k == 0 else f"v{vid}_{k}"

    def _mask(self, ctx: tuple, conds: tuple) -> str | None:
        """The mask of a load or store at ``ctx``: the program's lanes and the branch
        conditions (``cat`` pieces, ``slice_backward``) it is read under. One element (no
        lane index in ``ctx``) takes only the conditions that are one value too."""
        if any(_VECTOR.search(e) for e in ctx):
            if self.row:  # a row's own condition, spread over the lanes (the Triton
                # interpreter refuses a mask made of a lane mask and one value)
                conds = [c if _VECTOR.search(c) else re.sub(r"\b(r\d+)\b", r"(\1 + c * 0)", c)
                         for c in conds]
            return " & ".join(["cmask" if self.row else "mask", *conds])
        scalar = [c for c in conds if not _VECTOR.search(c)]
        return " & ".join(scalar) if scalar else None

    # ------------------------------------------------------------------ values
    def value(self, vid, ctx: tuple, conds: tuple = ()) -> str:
        """The variable holding value ``vid`` at index context ``ctx`` (in its ``reg``)."""
        key = (vid, ctx, conds)
        var = self.memo.get(key)
        if var is None:
            node = self.members.get(vid)
            expr = self._load(vid, ctx, conds) if node is None else \
                self._node(node, ctx, conds)
            var = self._name(vid)
            self.lines.append(f"{var} = {expr}")
            self.memo[key] = var
        return var

    def _load(self, vid, ctx: tuple, conds: tuple) -> str:
        v = self.values[vid]
        if vid not in self.loads:
            self.loads.append(vid)
        shape, strides = tuple(v.shape), tuple(v.stride)
        if ctx == self.ctx and shape == self.domain and strides == self.dstrides:
            off = "row * " + str(self.domain[-1]) + " + c" if self.row else "offs"
            if self.row and len(self.domain) == 1:
                off = "c"
        else:
            self._need_index(ctx)
            off = _offset(ctx, shape, strides)
        mask = self._mask(ctx, conds)
        m = f", mask={mask}, other=0" if mask else ""
        expr = f"tl.load(in_v{vid} + {off}{m})"
        return expr if T.reg(v.dtype) is v.dtype else f"{expr}.to({T.tl_name(T.reg(v.dtype))})"

    def _operand(self, arg, out, ctx: tuple, conds: tuple, dtype: D.DType):
        """(expression in ``reg(dtype)``, its dtype) of an argument broadcast to ``out``."""
        if isinstance(arg, (bool, int, float)):
            return T.constant(arg, dtype), dtype
        v = self.values[arg.id]
        lead = len(out.shape) - len(v.shape)
        sub = tuple("0" if n == 1 else ctx[lead + d] for d, n in enumerate(v.shape))
        return self.value(arg.id, sub, conds), v.dtype

    def _node(self, node, ctx: tuple, conds: tuple) -> str:
        op, args, out = node.op, node.args, node.outputs[0]
        if op in T.UNARY:
            x, xd = self._operand(args[0], out, ctx, conds, out.dtype)
            return T.unary_expr(op, x, xd, out.dtype)
        if op in T.BINARY:
            a, b = args[0], args[1]
            ct = T.promoted(a, b) if T.BINARY[op].ints == "bool" else out.dtype
            x, xd = self._operand(a, out, ctx, conds, ct)
            y, yd = self._operand(b, out, ctx, conds, ct)
            expr = T.binary_expr(op, (x, xd), (y, yd), ct)
            return T.to_reg(expr, T.binary_result_reg(op, ct, out.dtype), out.dtype)
        if op == "cast":
            x, xd = self._operand(args[0], out, ctx, conds, out.dtype)
            return T.cast_expr(x, xd, out.dtype)
        if op in ("clone", "contiguous"):
            return self._operand(args[0], out, ctx, conds, out.dtype)[0]
        if op == "where":
            c, _ = self._operand(args[0], out, ctx, conds, D.bool_)
            a, ad = self._operand(args[1], out, ctx, conds, out.dtype)
            b, bd = self._operand(args[2], out, ctx, conds, out.dtype)
            return T.where_expr(c, T.to_reg(a, ad, out.dtype), T.to_reg(b, bd, out.dtype),
                                out.dtype)
        if op == "clamp":
            x, xd = self._operand(args[0], out, ctx, conds, out.dtype)
            lo, hi = (None if v is None else T.constant(v, out.dtype) for v in args[1:3])
            return T.clamp_expr(T.to_reg(x, xd, out.dtype), lo, hi)
        if op in T.REDUCTIONS:
            return self._reduce(node, ctx, conds)
        return self._view(node, ctx, conds)

    def _reduce(self, node, ctx: tuple, conds: tuple) -> str:
        if not self.row:
            raise Unfusible("a reduction outside a row kernel")
        x = node.args[0]
        lead = self.ctx[:-1]
        if tuple(ctx[:len(lead)]) != lead or conds:
            raise Unfusible(f"{node.op} read at another row than its own")
        v = self.value(x.id, lead + ("c",))
        return T.reduce_expr(node.op, v, self.values[x.id].dtype, node.outputs[0].dtype)

    def _view(self, node, ctx: tuple, conds: tuple) -> str:
        op, args, out = node.op, node.args, node.outputs[0]
        if op == "cat":
            return self._cat(node, ctx, conds)
        if op == "slice_backward":
            return self._slice_backward(node, ctx, conds)
        src = self.values[args[0].id]
        if op == "expand":
            lead = len(out.shape) - len(src.shape)
            sub = tuple("0" if n == 1 else ctx[lead + d] for d, n in enumerate(src.shape))
        elif op == "permute":
            sub = [None] * len(src.shape)
            for k, d in enumerate(args[1]):
                sub[d % len(src.shape)] = ctx[k]
            sub = tuple(sub)
        elif op == "slice":
            sub = self._slice_ctx(src.shape, args[1], ctx)
        else:  # view: same elements in C order, another shape
            sub = self._reshape_ctx(tuple(src.shape), tuple(out.shape), ctx)
        return self.value(args[0].id, sub, conds)

    @staticmethod
    def _slice_ctx(shape: tuple, key, ctx: tuple) -> tuple:
        sub, j, d = [], 0, 0
        for k in key:
            if k is None:
                j += 1
            elif isinstance(k, int):
                sub.append(str(k % shape[d]))
                d += 1
            elif isinstance(k, slice):
                start, stop, step = k.indices(shape[d])
                sub.append(_shift(ctx[j], start, step))
                j += 1
                d += 1
            else:
                raise Unfusible(f"slice key element {k!r}")
        return tuple(sub) + tuple(ctx[j:])

    def _slice_backward(self, node, ctx: tuple, conds: tuple) -> str:
        """``slice_backward(g, shape, key)``: ``g`` inside the slice of ``shape``, 0 outside."""
        g, shape, key = node.args
        sub, inside, d = [], [], 0
        for k in key:
            if k is None:
                sub.append("0")
                continue
            e, n = ctx[d], shape[d]
            if e.isdigit():
                raise Unfusible("slice_backward read at a constant index")
            if isinstance(k, int):
                inside.append(f"({e} == {k % n})")
            else:
                start, stop, step = k.indices(n)
                length = max(0, (stop - start + step - 1) // step)
                last = start + (length - 1) * step
                inside += [f"({e} >= {start})"] if start > 0 else []
                inside += [f"({e} <= {last})"] if last < n - 1 else []
                if step != 1:
                    inside.append(f"((({e} - {start}) % {step}) == 0)")
                sub.append(_shift(e, -start) if step == 1 else f"(({e} - {start}) // {step})")
            d += 1
        sub = tuple(sub) + tuple(ctx[d:])
        self._need_index(ctx)
        if not inside:
            return self.value(g.id, sub, conds)
        cond = " & ".join(inside)
        v = self.value(g.id, sub, conds + (cond,))
        return f"tl.where({cond}, {v}, 0)"

    def _reshape_ctx(self, src: tuple, dst: tuple, ctx: tuple) -> tuple:
        if [n for n in src if n != 1] == [n for n in dst if n != 1]:  # (un)squeeze only
            it = iter(e for e, n in zip(ctx, dst) if n != 1)
            return tuple("0" if n == 1 else next(it) for n in src)
        self._need_index(ctx)
        lin = " + ".join(f"{e} * {s}" for e, s, n in zip(ctx, contiguous_strides(dst), dst)
                         if n != 1 and e != "0") or "0"
        var = f"{'v' if _VECTOR.search(lin) else ''}lin{len(self.lines)}"
        self.lines.append(f"{var} = {lin}")
        ss = contiguous_strides(src)
        return tuple("0" if n == 1 else (f"({var} // {s}) % {n}" if d else f"{var} // {s}")
                     for d, (n, s) in enumerate(zip(src, ss)))

    def _cat(self, node, ctx: tuple, conds: tuple) -> str:
        out = node.outputs[0]
        dim = node.args[0] % len(out.shape)
        pieces = [a for a in node.args[1:] if self.values[a.id].shape[dim] != 0]
        e = ctx[dim]
        branches, start = [], 0
        for p in pieces:
            n = self.values[p.id].shape[dim]
            branches.append((p, start, start + n))
            start += n
        if e.isdigit():  # a constant index: one piece, picked here
            for p, s, t in branches:
                if s <= int(e) < t:
                    sub = ctx[:dim] + (str(int(e) - s),) + ctx[dim + 1:]
                    v = self.value(p.id, sub, conds)
                    return T.to_reg(v, self.values[p.id].dtype, out.dtype)
        self._need_index((e,))
        total, expr = out.shape[dim], None
        for p, s, t in reversed(branches):
            cond = " & ".join(([f"({e} >= {s})"] if s > 0 else [])
                              + ([f"({e} < {t})"] if t < total else [])) or "True"
            sub = ctx[:dim] + (_shift(e, -s),) + ctx[dim + 1:]
            piece_conds = conds + ((cond,) if cond != "True" else ())
            v = T.to_reg(self.value(p.id, sub, piece_conds), self.values[p.id].dtype,
                         out.dtype)
            expr = v if expr is None else f"tl.where({cond}, {v}, {expr})"
        return expr

    # ------------------------------------------------------------------ the kernel
    def kernel(self, name: str, label: str, outputs: list, header: list[str]) -> KernelSpec:
        """The kernel storing ``outputs`` (value ids of the domain's shape or, in a row
        kernel, one value per row), as function ``name``; ``label``: see ``KernelSpec``."""
        stores = []
        for vid in outputs:
            v = self.values[vid]
            shape = tuple(v.shape)
            if shape == self.domain:
                var, ctx = self.value(vid, self.ctx), self.ctx
            elif self.row and shape in (self.domain[:-1] + (1,), self.domain[:-1]):
                ctx = self.ctx[:-1] + (("0",) if len(shape) == len(self.domain) else ())
                var = self.value(vid, ctx)
            else:
                raise Unfusible(f"output of shape {shape} in a kernel over {self.domain}")
            store = var if T.reg(v.dtype) is v.dtype else f"{var}.to({T.tl_name(v.dtype)})"
            stride = tuple(v.stride) if dense(shape, v.stride) else contiguous_strides(shape)
            if stride != contiguous_strides(shape):  # eager's layout (a permuted one)
                self._need_index(ctx)
                off = _offset(ctx, shape, stride)
            elif shape == self.domain:
                off = "offs" if not self.row else (
                    "c" if len(shape) == 1 else f"row * {shape[-1]} + c")
            else:
                off = "row"
            mask = self._mask(ctx, ())
            m = f", mask={mask}" if mask else ""
            stores.append(f"tl.store(out_v{vid} + {off}, {store}{m})")
        n = 1
        for s in self.domain:
            n *= s
        big = n >= 2**31 or any(
            sum((s - 1) * abs(st) for s, st in zip(self.values[i].shape, self.values[i].stride))
            >= 2**31 for i in self.loads)
        params = [f"in_v{i}" for i in self.loads] + [f"out_v{i}" for i in outputs]
        pid = "tl.program_id(0).to(tl.int64)" if big else "tl.program_id(0)"
        if self.row:
            cols = self.domain[-1]
            block = next_pow2(cols)
            if block > MAX_ROW:
                raise Unfusible(f"a row of {cols} elements")
            params.append("BLOCK_C: tl.constexpr")
            pre = [f"row = {pid}", "c = tl.arange(0, BLOCK_C)", f"cmask = c < {cols}"]
            grid, constexprs = (n // cols if cols else 0,), {"BLOCK_C": block}
            # about 8 to 16 elements a thread: short rows get few warps rather than idle lanes
            warps = 1 if block <= 256 else 2 if block <= 512 else 4 if block <= 2048 \
                else 8 if block <= 4096 else 16
        else:
            params.append("BLOCK: tl.constexpr")
            pre = [f"offs = {pid} * BLOCK + tl.arange(0, BLOCK)", f"mask = offs < {n}"]
            grid, constexprs, warps = (-(-n // BLOCK),), {"BLOCK": BLOCK}, 4
        pre += [f"{k} = {e}" for k, e in sorted(self.index_vars.items())]
        body = pre + self.lines + stores
        func, numbering = _number_locally("\n".join(
            [f"def {name}({', '.join(params)}):"] + [f"    {line}" for line in body]))
        code = "\n".join(["import triton", "import triton.language as tl", "",
                          "from genesis_cuda.kernels._elementwise_math import _binary, _unary",
                          "", "", "@triton.jit", func]) + "\n"
        src = "\n".join(header + _numbering_comment(numbering) + ["", code])
        return KernelSpec(name, label, src, code, list(self.loads), list(outputs), grid,
                          constexprs, warps)
