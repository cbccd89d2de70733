"""The public entry points: `instances()`, `launch()` (and `launch_general()`, its every-option form).

`launch` has one cached path and one first-call path that meet before the driver call. A repeated launch
(same instance, shape, stream and pdl) costs: one key tuple and dict lookup that finds its `LaunchEntry`
(runtime/plan.py: parameter image, launch config with the grid, function), the argument rules of
runtime/problem.py as predicates (canonical sizes, scales, and the pointers with the overlap check of
runtime/overlap.py, skipped when they repeat pointers the entry accepted lately), one `struct` call that
writes this thread's parameter buffer, and `cuLaunchKernelEx`. Anything else (a new shape or stream, a
numpy int, a value to convert or refuse) takes `_first_call`, which runs the same rules through the
functions that explain a failure, builds what is missing and caches it. Either way every error is an
`HgemmError` raised before anything is launched. `launch` allocates no device memory, never synchronizes
and copies nothing between host and device, so it can be captured into a CUDA graph.

`launch` with no option (the plain form) takes that cached path itself, and skips the buffer write when
the thread's buffer for the entry already holds the same pointers; with any option it forwards to
`launch_general`, whose keyword arguments are not keyword-only: CPython binds keyword-only defaults one
dict lookup each (0.27 µs for 27 of them, CPU box), more than the plain form's checks cost.

Measured with the fake driver's no-op cuLaunchKernelEx on the CPU dev box (median of 100 chunks of 200
calls, tests/runtime/test_launch_cost.py): 4.2 µs of Python per launch before the cached path existed
(2026-11-30), 1.7 µs with it, 1.9 µs after grouped GEMM's arguments joined it; 2026-12-01, the plain
form 0.57 µs, a launch with one option 1.8 µs. build_tools/launch_cost.py measures against a bare
cuLaunchKernelEx on the GPU (docs/PERF.md).
"""

from __future__ import annotations

import inspect

from . import problem, scheduling, state
from .errors import InvalidArgumentError
from .launcher import STALE_RESULTS, launch_error
from .plan import B_READY
from .spec import GemmSpec
from .stream import stream_handle

Instance = GemmSpec  # what `instances()` lists: each shipped instance's spec; `.id` is its id

_exact_ints, _overrides_canonical = problem.exact_ints, problem.overrides_canonical
_scales_ok, _workspace_ok = problem.scales_ok, problem.workspace_ok
_offsets_ok = problem.offsets_ok


def instances() -> list[Instance]:
    """Every kernel instance shipped in this installation (its spec; `.id` is the id), sorted by id.
    Needs no GPU."""
    return [spec for _, spec in sorted(state.runtime().manifest.specs.items())]


def workspace_bytes(
    instance_id: str, m: int, n: int, k: int, batch: int = 1, *, k_splits: int | None = None
) -> int:
    """Bytes of workspace `launch(instance_id, ..., k_splits=k_splits, workspace=ptr)` needs for an m x n
    x k problem with `batch` batches: 0 for instances without split-K or stream-K and for a single split.
    A stream-K instance (id suffix `_streamk`) uses this many bytes (the same for every problem) to share
    the last tiles out among all SMs; launched without a workspace it runs every tile whole. Like
    cuBLASLt's workspace, the caller allocates it (launch never allocates); it must be zeroed before its
    first use, and the kernel leaves it zeroed. Needs no GPU."""
    plan = state.runtime().plan(instance_id)
    iid = plan.record.id
    size = problem.size
    key = (size("m", m, iid), size("n", n, iid), size("k", k, iid), size("batch", batch, iid))
    # The canonical shape key (LaunchPlan.shape): packed strides and the default walk, then k_splits.
    key += (None,) * 10 + (problem.k_splits(iid, k_splits), None)
    needed = plan.shape(key).workspace_bytes
    return scheduling.stream_workspace_bytes(*plan.record.spec.tile[:2]) if plan.stream else needed


def launch(instance_id: str, ptrs, stream, *, m: int, n: int, k: int, **options) -> None:
    """Enqueue D = alpha * A @ B^T + beta * C (per batch) with kernel instance `instance_id` on `stream`.

    ptrs: (a, b, d) device pointers as ints; per batch A is m x k, B is n x k, D is m x n, laid out as the
    instance's majorness says (see `instances()`). Leading dimensions and batch strides are in elements
    and default to packed. stream: an int handle (0 = the current context's default stream), a
    cuda.bindings CUstream, or an object with `__cuda_stream__` / `.cuda_stream` (torch, cupy).

    C: instances with `has_c` read an m x n C (their own `c_dtype` and `c_major`) and need `c` (a device
    pointer; `ldc`, `batch_stride_c` as for D); C batches may overlap. `c=d` with D's layout updates D in
    place; any other overlap of D with A, B or C is refused, as is D sharing a byte with A or B. Instances
    without C compute D = alpha * A @ B^T: `c`, `ldc`, `batch_stride_c` must be None and `beta` 0.0 (the
    error lists the shipped instances that read C). alpha and beta are finite floats, rounded to float32;
    C is read even when beta == 0 (NaN in C then reaches D: IEEE 0 * NaN = NaN).

    pdl=True (opt-in) launches with programmatic stream serialization (programmatic dependent launch):
    the kernel may start while the previous kernel in `stream` is still running, overlapping its set-up
    with that kernel's tail; it waits for the previous grid to complete and flush its memory
    (griddepcontrol.wait) before its first load, and lets its own dependents start once it has issued
    its last load (griddepcontrol.launch_dependents). Correct after any predecessor, since ours waits; a
    successor launched with PDL must itself wait before reading our D. Off by default: it only pays off
    for back-to-back short kernels, and a profiler shows the overlapping grids.

    b_ready=True (with pdl=True; opt-in) declares that B is not written by the previous kernel in
    `stream` (a model's weights): the kernel then loads B's first k-tiles before waiting for that
    kernel, so a chain of decode GEMMs streams the next weight while the previous GEMM finishes. Passing
    it when the previous kernel does write B is a race. Grouped instances ignore it (their first loads
    depend on the offsets); without pdl it changes nothing.

    raster_along_m / group_size override the persistent walk over output tiles (default: see
    runtime/scheduling.py).

    Split-K instances (`k_split` "split", id suffix `_splitk`) cut each output tile's K loop into
    `k_splits` ranges (1 .. ceil(k / tile K); None: runtime/scheduling.default_k_splits, from the problem
    alone) and reduce the fp32 partials in a fixed order: the same bits on every run. More than one split
    needs `workspace`: a 16-byte aligned device allocation of at least `workspace_bytes(instance_id, m, n,
    k, batch, k_splits=...)` bytes, zeroed before its first use (the kernel leaves it zeroed again), used
    by one launch at a time (one workspace per stream). Other instances take neither argument.

    Grouped instances (`varlen` "m", id suffix `_varlenm`; a mixture-of-experts layer in one launch):
    A is m x k with the rows of `num_groups` groups one after another, B holds num_groups n x k matrices
    (`batch_stride_b` apart), D is m x n; `cu_seqlens_m` is the device address of int32[num_groups + 1]
    row offsets (0 = s_0 <= s_1 <= ... <= s_G <= m), and group g computes D[s_g:s_g+1] = alpha *
    A[s_g:s_g+1] @ B[g]^T. The offsets are read by the kernel only (no synchronization; a CUDA graph
    replays with whatever they hold then); groups may be empty or of any size. Rows of D outside [0, s_G)
    are not written, and the kernel clamps malformed offsets into [0, m]. batch stays 1. Instances that
    gather A (`gather_a`, id suffix `_gathera`) also take `a_idx`, the device address of int32[m] row
    indices: row i of the groups' A is row a_idx[i] of the A at `ptrs[0]`, which has `a_rows` rows
    (default m; indices outside [0, a_rows) are clamped into it); their K must be a multiple of the
    tile's K. Grouped-K instances (`varlen` "k", id suffix `_varlenk`; the weight gradient) take
    `cu_seqlens_k` instead: int32[num_groups + 1] offsets into the K of A (m x k) and B (n x k), and D
    holds num_groups m x n results (`batch_stride_d` apart): D[g] = alpha * A[:, s_g:s_g+1] @
    B[:, s_g:s_g+1]^T, zeros for an empty group. Grouped-K instances that gather A take `a_idx`, the
    device address of int32[k] column indices: column p of the groups' A is column a_idx[p] of the
    (M-contiguous) A at `ptrs[0]`, which has `a_cols` columns (default k; indices clamped into it).
    Instances with C take it per group too (varlen M: C is m x n like D; varlen K: num_groups m x n
    matrices, `batch_stride_c` apart).

    Returns once the launch is enqueued; raises an `HgemmError` subclass, before launching anything, for
    an unknown id, bad arguments, a non-sm_90 device or a too-old driver.
    """
    if not options:
        # The plain form (every option at its default): one D = A @ B^T, packed operands, batch 1, no C,
        # alpha 1. It skips launch_general's 27 keyword defaults (binding them costs more than all of
        # this path's checks) and keeps the same rules: a cached entry proves the shape was validated,
        # and the predicates below prove these are the values it was validated with.
        rt = state._default or state.runtime()
        try:
            s = stream if type(stream) is int else stream_handle(stream)
            e = rt.plans[instance_id].entries[
                (m, n, k, 1, s, 0 <= s < 3 and rt.devices.current_context(), False)
            ]
            a, b, d = ptrs
        except (KeyError, TypeError, ValueError):
            e = None
        if (
            e is not None
            and e.plain
            and int is type(m) is type(n) is type(k)
            # The pointers' rules (and D's overlap with A and B) are pure functions of their values and
            # the shape: an entry remembers the latest few that passed them (plan.py `accept`).
            and (int is type(a) is type(b) is type(d) and (a, b, d, None) in e.accepted or e.accept(a, b, d))
        ):
            if rt.check_pointers:
                _check_devices(rt, e, a, b, d, None)
            tb = e.plain_buffers  # this thread's buffer of this entry's plain form, and what it holds
            held, params = tb.state
            if held != (a, b, d):
                ch = e.chunks
                e.pack(tb.pair[0], 0, ch[0], a, ch[1], b, ch[2], d, ch[3], 1.0, ch[4])
                tb.state = ((a, b, d), params)
            err = e.launch(e.config, e.function, params, 0)[0]
            if not err:
                return
            _refused(rt, e, err, 0)  # raises, or forgets a stale stream: launch_general prepares it again
    try:
        return launch_general(instance_id, ptrs, stream, m=m, n=n, k=k, **options)
    except TypeError:
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            import difflib  # only on this error path, as in runtime/errors.py: keeps import hgemm_sm90 small

            near = [name for u in unknown for name in difflib.get_close_matches(u, _OPTIONS, 1)]
            raise InvalidArgumentError(
                f"launch() got unknown keyword argument(s) {', '.join(unknown)}",
                (f"did you mean {', '.join(near)}? " if near else "")
                + "launch() takes m, n, k and the options "
                + ", ".join(sorted(_OPTIONS)),
                instance_id if type(instance_id) is str else None,
            ) from None
        raise


def launch_general(
    instance_id: str,
    ptrs,
    stream,
    m: int,
    n: int,
    k: int,
    batch: int = 1,
    lda: int | None = None,
    ldb: int | None = None,
    ldd: int | None = None,
    batch_stride_a: int | None = None,
    batch_stride_b: int | None = None,
    batch_stride_d: int | None = None,
    c: int | None = None,
    ldc: int | None = None,
    batch_stride_c: int | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    pdl: bool = False,
    b_ready: bool = False,
    raster_along_m: bool | None = None,
    group_size: int | None = None,
    k_splits: int | None = None,
    workspace: int | None = None,
    cu_seqlens_m: int | None = None,
    num_groups: int | None = None,
    a_idx: int | None = None,
    a_rows: int | None = None,
    cu_seqlens_k: int | None = None,
    a_cols: int | None = None,
) -> None:
    """`launch` with every option explicit: what `launch` forwards to whenever an option is given, and
    what the library's own callers (gemm(), grouped_gemm(), the CLI) call directly, as they always pass
    some. Same arguments, rules, errors and effect as `launch`; pass everything after `stream` by
    keyword (the arguments are not keyword-only only because CPython binds keyword-only defaults one
    dict lookup at a time: 0.27 µs a call here against 0.10 µs, CPU box, 2026-12-01)."""
    rt = state._default or state.runtime()
    try:
        entries = rt.plans[instance_id].entries
        s = stream if type(stream) is int else stream_handle(stream)
        # The default streams (0, 1, 2) run in the calling thread's current context, so it is part of
        # their key; any other stream's context is fixed, and its entry remembers it.
        ctx = 0 <= s < 3 and rt.devices.current_context()
        mode = pdl if b_ready is False else _mode(pdl, b_ready)  # the launch key's pdl slot
        if (
            lda
            is ldb
            is ldd
            is ldc
            is batch_stride_a
            is batch_stride_b
            is batch_stride_d
            is batch_stride_c
            is raster_along_m
            is group_size
            is k_splits
            is None
        ):
            e = entries[
                (m, n, k, batch, s, ctx, mode)
                if num_groups is a_rows is a_cols is None
                else (m, n, k, batch, s, ctx, mode, (num_groups, a_rows, a_cols))
            ]
        elif _overrides_canonical(
            lda,
            ldb,
            ldd,
            ldc,
            batch_stride_a,
            batch_stride_b,
            batch_stride_d,
            batch_stride_c,
            raster_along_m,
            group_size,
            k_splits,
        ):
            e = entries[
                (
                    m,
                    n,
                    k,
                    batch,
                    s,
                    ctx,
                    mode,
                    lda,
                    ldb,
                    ldd,
                    ldc,
                    batch_stride_a,
                    batch_stride_b,
                    batch_stride_d,
                    batch_stride_c,
                    raster_along_m,
                    group_size,
                    k_splits,
                    None if num_groups is a_rows is a_cols is None else (num_groups, a_rows, a_cols),
                )
            ]
        else:
            e = None
        a, b, d = ptrs
    except (KeyError, TypeError, ValueError):  # new, unhashable or malformed: the first-call path says
        e = None
    # A hit proves the values were validated; these prove they are the values validated (types and all).
    if (
        e is None
        or not _exact_ints(m, n, k, batch)
        or not (pdl is False or pdl is True)
        or not (e.has_c or beta == 0.0)
        # The common case (no workspace, none needed) decided inline: its first branch, without a call.
        or not (
            (workspace is None and not e.workspace_bytes)
            or _workspace_ok(e.takes_workspace, e.workspace_bytes, workspace)
        )
        or not (
            cu_seqlens_m is cu_seqlens_k is None
            if not e.grouped
            else _offsets_ok(cu_seqlens_k if e.varlen_k else cu_seqlens_m)
            and (cu_seqlens_m if e.varlen_k else cu_seqlens_k) is None
        )
        or not (a_idx is None if not e.gathered else _offsets_ok(a_idx))
        # Last, as the overlap error it may raise comes after every other rule's: the pointers (and the
        # operands' overlap), remembered per entry as on the plain path.
        or not (
            int is type(a) is type(b) is type(d)
            and (c is None or type(c) is int)
            and (a, b, d, c) in e.accepted
            or e.accept(a, b, d, c)
        )
    ):
        e = None  # the first-call path (in the loop) validates, converts or refuses
    elif not (_scales_ok(alpha, beta) if e.has_c else _scales_ok(alpha)):  # e.g. ints: converted or refused
        alpha = problem.scale(e.instance, "alpha", alpha)
        if e.has_c:
            beta = problem.scale(e.instance, "beta", beta)
    for attempt in (0, 1):  # a second attempt only after a refusal that fresh stream facts may fix
        if e is None:
            e, a, b, d, c, alpha, beta, offsets, a_idx = _first_call(
                rt,
                instance_id,
                ptrs,
                stream,
                m,
                n,
                k,
                batch,
                lda,
                ldb,
                ldd,
                ldc,
                batch_stride_a,
                batch_stride_b,
                batch_stride_d,
                batch_stride_c,
                raster_along_m,
                group_size,
                k_splits,
                workspace,
                c,
                alpha,
                beta,
                pdl,
                cu_seqlens_m,
                num_groups,
                a_idx,
                a_rows,
                cu_seqlens_k,
                a_cols,
                b_ready,
            )
            cu_seqlens_m = cu_seqlens_k = offsets  # validated and converted: the one the instance takes
            e.accept(a, b, d, c)  # the overlap rule (it raises); the first call checked the pointers
        if rt.check_pointers:
            _check_devices(rt, e, a, b, d, c, workspace)
        buf, params = e.buffers.pair
        # The per-launch values between the shape's constant chunks, in the record's order
        # (runtime/plan.py): descriptors, scales, then split-K's workspace or a grouped launch's offsets
        # (and gather indices).
        ch = e.chunks
        if e.has_c:
            head, rest = (ch[0], a, ch[1], b, ch[2], d, ch[3], c, ch[4], alpha, ch[5], beta, ch[6]), ch[7:]
        else:
            head, rest = (ch[0], a, ch[1], b, ch[2], d, ch[3], alpha, ch[4]), ch[5:]
        if e.takes_workspace:
            e.pack(buf, 0, *head, workspace or 0, rest[0])
        elif e.gathered:
            e.pack(buf, 0, *head, cu_seqlens_k if e.varlen_k else cu_seqlens_m, rest[0], a_idx, rest[1])
        elif e.grouped:
            e.pack(buf, 0, *head, cu_seqlens_k if e.varlen_k else cu_seqlens_m, rest[0])
        else:
            e.pack(buf, 0, *head)
        err = e.launch(e.config, e.function, params, 0)[0]
        if not err:
            return
        _refused(rt, e, err, attempt)  # raises, or forgets the stream's stale facts
        e = None


# launch's keyword options (launch_general's arguments with defaults), and its documented signature,
# which help(launch) and IDEs show rather than **options: everything after `stream` keyword-only.
_GENERAL = inspect.signature(launch_general)
_OPTIONS = frozenset(name for name, p in _GENERAL.parameters.items() if p.default is not p.empty)
launch.__signature__ = _GENERAL.replace(
    parameters=[
        p if i < 3 else p.replace(kind=p.KEYWORD_ONLY) for i, p in enumerate(_GENERAL.parameters.values())
    ]
)


def _mode(pdl, b_ready):
    """The launch mode in a launch key (runtime/plan.py `LaunchEntry`): pdl (False or True), or
    `plan.B_READY` for pdl with b_ready; b_ready without pdl changes nothing. Values that are not bools
    give a key no entry has, so the first-call path explains them."""
    if b_ready is True:
        return B_READY if pdl is True else pdl
    return pdl if b_ready is False else (_mode, b_ready)


def _first_call(
    rt,
    instance_id,
    ptrs,
    stream,
    m,
    n,
    k,
    batch,
    lda,
    ldb,
    ldd,
    ldc,
    bsa,
    bsb,
    bsd,
    bsc,
    raster,
    group,
    splits,
    workspace,
    c,
    alpha,
    beta,
    pdl,
    cu_seqlens_m=None,
    num_groups=None,
    a_idx=None,
    a_rows=None,
    cu_seqlens_k=None,
    a_cols=None,
    b_ready=False,
):
    """Validate everything with the explaining functions of runtime/problem.py, in argument order, and
    build (or find) the launch entry: (entry, a, b, d, c, alpha, beta), values canonical."""
    plan = rt.plan(instance_id)  # InvalidArgumentError for a non-str id, UnknownInstanceError
    iid = plan.record.id
    opt = lambda name, v, conv: None if v is None else conv(name, v, iid)  # noqa: E731
    size, stride = problem.size, problem.stride
    key = (
        size("m", m, iid),
        size("n", n, iid),
        size("k", k, iid),
        size("batch", batch, iid),
        opt("lda", lda, size),
        opt("ldb", ldb, size),
        opt("ldd", ldd, size),
        opt("ldc", ldc, size),
        opt("batch_stride_a", bsa, stride),
        opt("batch_stride_b", bsb, stride),
        opt("batch_stride_d", bsd, stride),
        opt("batch_stride_c", bsc, stride),
        problem.raster(iid, raster),
        problem.group(iid, group),
        problem.k_splits(iid, splits),
        None if num_groups is a_rows is a_cols is None else (num_groups, a_rows, a_cols),
    )
    shape = plan.shape(key)
    a, b, d = problem.pointers(iid, ptrs)
    if workspace is not None:
        if not plan.takes_workspace:
            raise plan.not_split("workspace")
        workspace = problem.pointer(iid, "workspace", workspace)
    elif shape.workspace_bytes:
        raise plan.workspace_missing(shape.workspace_bytes)
    wanted, unwanted = ("cu_seqlens_k", "cu_seqlens_m") if plan.varlen_k else ("cu_seqlens_m", "cu_seqlens_k")
    offsets = {"cu_seqlens_m": cu_seqlens_m, "cu_seqlens_k": cu_seqlens_k}
    if plan.grouped:
        if offsets[unwanted] is not None:
            raise InvalidArgumentError(
                f"{unwanted} given, but this grouped instance takes {wanted}",
                f"pass the offsets as {wanted}= (id suffix {'_varlenk' if plan.varlen_k else '_varlenm'})",
                iid,
            )
        if offsets[wanted] is None:
            what = "K offsets" if plan.varlen_k else "row offsets"
            raise InvalidArgumentError(
                f"this grouped instance needs the groups' {what}, but {wanted} is None",
                f"pass {wanted}=<device address of int32[num_groups + 1] {what}, 4-byte aligned>",
                iid,
            )
        offsets[wanted] = problem.offsets_pointer(iid, offsets[wanted], wanted)
    else:
        for name, value in offsets.items():
            if value is not None:
                raise InvalidArgumentError(
                    f"{name} given, but this instance is not grouped",
                    f"drop {name} (and num_groups), or use a grouped instance (id suffix "
                    f"{'_varlenk' if name == 'cu_seqlens_k' else '_varlenm'})",
                    iid,
                )
    grouped_offsets = offsets[wanted] if plan.grouped else None
    if plan.gathered:
        if a_idx is None:
            what = "int32[k] column indices" if plan.varlen_k else "int32[m] row indices"
            raise InvalidArgumentError(
                f"this instance gathers A's {'columns' if plan.varlen_k else 'rows'}, but a_idx is None",
                f"pass a_idx=<device address of {what} into A, 4-byte aligned>",
                iid,
            )
        a_idx = problem.offsets_pointer(iid, a_idx, "a_idx")
    elif a_idx is not None:
        raise InvalidArgumentError(
            "a_idx given, but this instance does not gather A",
            "drop a_idx, or use an instance that gathers A (id suffix _gathera)",
            iid,
        )
    if plan.has_c:
        if c is None:
            raise plan.c_missing()
        c = problem.pointer(iid, "c", c)
        beta = problem.scale(iid, "beta", beta)
    else:
        if c is not None:
            raise plan.without_c("c")
        if beta != 0.0:
            raise plan.without_c(f"beta={beta!r}")
    alpha = problem.scale(iid, "alpha", alpha)
    if pdl is not False and pdl is not True:
        raise InvalidArgumentError(f"pdl={pdl!r}", "pass pdl=True or pdl=False", iid)
    if pdl and not plan.record.pdl:
        raise InvalidArgumentError(
            "pdl=True, but this instance's kernel does not wait for its predecessor (the manifest does not "
            "mark it pdl-capable), so an early start would race",
            "launch it with pdl=False, or rebuild the kernels with this source tree",
            iid,
        )
    if b_ready is not False and b_ready is not True:
        raise InvalidArgumentError(f"b_ready={b_ready!r}", "pass b_ready=True or b_ready=False", iid)
    s = stream_handle(stream)
    ctx = rt.devices.stream_context(s)
    loaded = rt.kernels.get(ctx, iid)  # device and driver checks, once per context
    rt.decide_pointer_checks()
    mode = _mode(pdl, b_ready)
    full = (*key[:4], s, s < 3 and ctx, mode)
    if any(v is not None for v in key[4:15]):  # the key form `launch` looks up: short when all are omitted
        full += key[4:]
    elif key[15] is not None:  # grouped, the short form: (group count, a gathered A's rows, columns) last
        full += (key[15],)
    e = plan.entry(full, shape, loaded, s, mode, rt.cu)
    return e, a, b, d, c, alpha, beta, grouped_offsets, a_idx


def _check_devices(rt, e, a, b, d, c, workspace=None) -> None:
    """DeviceMismatchError unless every operand is accessible from the device the kernel runs on."""
    allow_peer = rt.knobs.allow_peer_pointers
    for operand, ptr in (("a", a), ("b", b), ("d", d), ("c", c), ("workspace", workspace)):
        if ptr is not None:
            rt.devices.check_pointer(ptr, e.device, operand, e.instance, allow_peer=allow_peer)


def _refused(rt, e, err, attempt) -> None:
    """After a refused launch (which enqueued nothing): raise the error, or forget the stream's cached
    facts so that `launch` prepares it again.

    Non-default streams' contexts are cached (asking the driver per launch, cuStreamGetCtx, costs a round
    trip). If a stream was destroyed and its handle reused by a stream of another context, the cached
    function belongs to the wrong context and the driver refuses it with INVALID_HANDLE / INVALID_CONTEXT
    / CONTEXT_IS_DESTROYED. Then drop what is cached about the stream, so that the launch is prepared
    again with fresh facts, once; any other error, or a second refusal, is raised."""
    error = launch_error(err, e.instance)
    if attempt or error.result not in STALE_RESULTS or e.stream < 3:
        raise error
    rt.forget_stream(e.stream)
