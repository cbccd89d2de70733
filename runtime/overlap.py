"""Whether D shares a byte with its inputs: the overlap rule `launch` applies per call (docs/CONTRACT.md).

- D's batches must not overlap each other (checked per shape, runtime/problem.py); input batches may.
- D must not share a byte with A or B: CTAs write D while other CTAs still read those inputs.
- C may alias D only exactly: `c == d` with the same dtype, major, leading dimension and (for more than
  one batch) batch stride, an in-place update (each CTA loads its C tile before it stores the same D
  tile). Any other overlap of C and D is refused.

"Share a byte" is decided from the byte ranges [ptr, ptr + extent); ranges that intersect are still
accepted when they provably interleave without touching (one batch stride with disjoint per-batch
windows, or one row pitch with disjoint column windows). Anything else that intersects is refused
(conservative). `Footprints` does the shape arithmetic once per shape; its `check` compares byte ranges
per launch and looks closer only when two of them intersect.
"""

from __future__ import annotations

from .errors import InvalidArgumentError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~10 ms)
if TYPE_CHECKING:
    from .problem import OperandLayout


class Footprint:
    """The bytes one operand covers, relative to its pointer: `extent` bytes from it (the last element's
    end); per batch `batch_extent` bytes every `batch_bytes` bytes (None: one batch), made of rows of
    `width` bytes every `pitch` bytes. `periodic`: every row starts at the same offset modulo the pitch
    (one batch, or batch strides a whole number of rows)."""

    __slots__ = (
        "batch_bytes",
        "batch_extent",
        "batch_stride",
        "extent",
        "layout",
        "ld",
        "periodic",
        "pitch",
        "width",
    )

    def __init__(self, op: OperandLayout, values: dict):
        ld, bs, l, e = values[f"ld{op.name}"], values[f"batch_stride_{op.name}"], values[op.batches], op.elem
        rows = values[op.other]
        self.layout, self.ld, self.batch_stride = op, ld, bs if l > 1 else None  # unused with one batch
        self.batch_extent = e * ((rows - 1) * ld + values[op.contiguous])
        self.batch_bytes = bs * e if l > 1 else None
        self.extent = e * (l - 1) * bs + self.batch_extent
        self.pitch, self.width = ld * e, values[op.contiguous] * e
        self.periodic = l == 1 or (bs * e) % self.pitch == 0


class Footprints:
    """The operands' footprints for one resolved shape (runtime/problem.py `resolve`), and the overlap rule
    on them: D may not share a byte with A, B or C, except that C may be exactly D (`alias_ok`: the same
    layout)."""

    __slots__ = ("a", "b", "d", "c", "ext_a", "ext_b", "ext_d", "ext_c", "alias_ok")

    def __init__(self, ops: tuple[OperandLayout, ...], values: dict):
        fps = {op.name: Footprint(op, values) for op in ops}
        self.a, self.b, self.d, self.c = fps["a"], fps["b"], fps["d"], fps.get("c")
        self.ext_a, self.ext_b, self.ext_d = self.a.extent, self.b.extent, self.d.extent
        self.ext_c = self.c.extent if self.c is not None else 0
        self.alias_ok = self.c is not None and same_layout(self.c, self.d)

    def check(self, instance: str, a: int, b: int, d: int, c: int | None = None) -> None:
        """Raise `InvalidArgumentError` if D shares a byte with A, B or C (C exactly D excepted).

        Cheap when the byte ranges [ptr, ptr + extent) do not meet (every launch runs this); where they
        do, `_decide` looks closer. Conservative: ranges that meet and are not provably disjoint
        (`_interleaved_disjoint`) count as overlapping."""
        end_d = d + self.ext_d
        meet_a = a < end_d and d < a + self.ext_a
        meet_b = b < end_d and d < b + self.ext_b
        meet_c = c is not None and (c != d or not self.alias_ok) and c < end_d and d < c + self.ext_c
        if meet_a or meet_b or meet_c:
            self._decide(
                instance, d, ((meet_a, "a", self.a, a), (meet_b, "b", self.b, b), (meet_c, "c", self.c, c))
            )

    def _decide(self, instance: str, pd: int, candidates) -> None:
        d = self.d
        for meet, name, x, px in candidates:
            if not meet:
                continue
            if name == "c" and px == pd:  # same pointer, not the same layout (else alias_ok)
                lc, ld_ = x.layout, d.layout
                raise InvalidArgumentError(
                    f"c and d are the same pointer 0x{pd:x} but lay out the matrix differently "
                    f"(C: {lc.dtype} {lc.major}-major, ldc={x.ld}, batch_stride_c={x.batch_stride}; "
                    f"D: {ld_.dtype} {ld_.major}-major, ldd={d.ld}, batch_stride_d={d.batch_stride})",
                    "for an in-place update (c=d) pass ldc=ldd and batch_stride_c=batch_stride_d with an "
                    "instance whose C dtype and major equal D's; otherwise give D its own memory",
                    instance,
                )
            if _interleaved_disjoint(d, pd, x, px):
                continue
            why = (
                "C may alias D only exactly (c=d with the same layout, an in-place update)"
                if name == "c"
                else f"D is written while other CTAs still read {name.upper()}"
            )
            raise InvalidArgumentError(
                f"output d [0x{pd:x}, 0x{pd + d.extent:x}) overlaps input {name} "
                f"[0x{px:x}, 0x{px + x.extent:x}): {why}",
                f"write D to memory that shares no byte with {name.upper()}"
                + (" (copy the input first for an in-place product)" if name != "c" else ""),
                instance,
            )


def same_layout(x: Footprint, y: Footprint) -> bool:
    """Whether x and y at one pointer would be the same matrix (dtype, major, strides; one batch: any
    batch stride)."""
    lx, ly = x.layout, y.layout
    return (lx.dtype, lx.major, x.ld, x.batch_stride) == (ly.dtype, ly.major, y.ld, y.batch_stride)


def _disjoint_modulo(period: int, px: int, wx: int, py: int, wy: int) -> bool:
    """Whether the arcs [px, px + wx) and [py, py + wy) of a circle of `period` bytes do not meet."""
    delta = (py - px) % period
    return wx <= delta and delta + wy <= period


def _interleaved_disjoint(x: Footprint, px: int, y: Footprint, py: int) -> bool:
    """True if x and y, though their byte ranges intersect, provably share no byte. Every byte of an
    operand lies at its pointer plus (batch index * batch stride) plus an offset inside one batch, and at
    the pointer plus (row * pitch) plus a column offset inside a row; so two operands whose batches (or
    rows) repeat with one period are disjoint if their per-period windows are disjoint modulo it:
    - batches side by side (one workspace holding A_0, D_0, A_1, D_1, ...): one batch stride;
    - columns side by side (A and D in the columns of one wide row-major buffer): one pitch, periodic."""
    periods = {f.batch_bytes for f in (x, y) if f.batch_bytes is not None}
    if len(periods) == 1:
        s = periods.pop()
        if _disjoint_modulo(s, px, x.batch_extent, py, y.batch_extent):
            return True
    if x.pitch == y.pitch and x.periodic and y.periodic:
        return _disjoint_modulo(x.pitch, px, x.width, py, y.width)
    return False
