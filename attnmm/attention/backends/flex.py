r"""FlexAttention: a fused block-sparse kernel built from the mask's ``mask_mod`` (CUDA, and CPU for
inference)."""

from __future__ import annotations

import copy
import importlib.util
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm.attention.backends._cost import UNIT
from attnmm.attention.backends._registry import get_backend
from attnmm.attention.backends._sizes import dense_bytes
from attnmm.attention.backends.base import Backend, BackendRefusedError, Supports
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Inputs, Problem
from attnmm.masks import Mask
from attnmm.masks._key import content_key

#: Block size of the block masks (FlexAttention's default).
BLOCK_SIZE = 128

#: How many block masks (and tile counts) the backend keeps (least recently used first out).
CACHE_SIZE = 32

#: How many kernels torch may compile for the backend's calls of ``flex_attention`` in one process (one per
#: family of masks, dtype and block-mask shape; torch's own limit for a function is 8). Past it torch would
#: run ``flex_attention`` uncompiled, which materialises every (L, S) score (gigabytes for long
#: sequences); the backend raises instead.
RECOMPILE_LIMIT = 64


def flex_available(device_type: str = "cuda") -> str | None:
    """``None`` when FlexAttention can run on ``device_type`` here (``"cuda"`` or ``"cpu"``), else the
    reason it cannot."""
    if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:  # pragma: no cover
        return "this torch build has no torch.nn.attention.flex_attention"
    if device_type == "cuda":
        if not torch.cuda.is_available():
            return "CUDA is not available"
        if importlib.util.find_spec("triton") is None:
            return "triton is not installed (torch.compile has no GPU code generator)"
    return None


class FlexBackend(Backend):
    r"""``torch.nn.attention.flex_attention`` under ``torch.compile`` with the block mask of the mask's
    :meth:`~attnmm.masks.Mask.mask_mod`: on CUDA, and on CPU for inference (torch compiles no
    FlexAttention backward for the CPU).

    The block mask marks which (128 x 128) tiles of the score matrix hold an allowed pair; the fused
    kernel skips the others and applies ``mask_mod`` inside partial tiles, so the cost follows the
    mask's tiles. Block masks are cached per mask content (equal masks rebuilt per batch share one) and
    shape (B, L, S, device), the
    :data:`CACHE_SIZE` most recent ones. The kernel is compiled once with dynamic shapes, so batches
    of new lengths reuse it (a second compilation comes for sequences shorter than one block); each family of
    masks compiles its own, up to :data:`RECOMPILE_LIMIT` in a process, past which the backend refuses
    (:class:`~attnmm.attention.backends.base.BackendRefusedError`: dispatch chooses another backend) rather
    than let torch run the kernel uncompiled. The mask's tensors go to the kernel's device first.
    Softmax scores only, without bias, returned weights or dropout; queries with an empty allowed set
    get zero. On the CPU it runs in float32 without gradients. Per-item masks (a batch's ``Padding``)
    run there too, one kernel for every length (``Window & Padding(lengths)``: one compilation for
    batches of new lengths); torch's CPU code generator fails on some of them (``Chunk & Padding``,
    ``Grid & Padding`` with torch 2.14), which is then refused by name.

    Its cost estimate (:meth:`cost_terms`) counts the tiles the kernel visits, the mask positions a
    block-mask build evaluates (none when the block mask is cached) and, until the kernel has been
    compiled in this process, the compilation (seconds, calibrated like the rest). So dispatch
    (``backend="auto"``) takes it where it is estimated fastest counting what a call would really pay:
    on a CPU it is not compiled until a call asks for ``backend="flex"`` by name, and with the CPU
    constants calibrated so far its estimate stays above another backend's on every inference
    problem of ``python -m benchmarks.calibrate``, compiled or not.
    """

    name = "flex"
    supports = Supports(
        structures=frozenset({"band", "interval", "segments", "sparse"}),
        layouts=frozenset({"padded"}),
        bias=False,
        relu=False,
        weights=False,
        dropout=False,
        empty=False,
        devices=frozenset({"cuda", "cpu"}),
        dtypes=frozenset({torch.float16, torch.bfloat16, torch.float32}),
    )
    preference = 0
    memory_hint = (
        "building the block mask evaluates mask_mod on every (L, S) position; use a smaller batch or "
        "shorter sequences, or backend='sparse'"
    )

    def __init__(self) -> None:
        self.compiled: Callable[..., Tensor] | None = None
        # (content key of the mask, B, L, S, device) -> (mask, block mask); holding the mask keeps the ids
        # of any objects its key names by identity from being reused
        self.block_masks: OrderedDict[tuple[Any, ...], tuple[Mask, Any]] = OrderedDict()
        # the same key -> tiles holding an allowed pair, for the cost estimate
        self.tile_counts: OrderedDict[tuple[Any, ...], tuple[Mask, tuple[int, int, int]]] = OrderedDict()
        self._available: dict[str, str | None] = {}
        #: why the backend refuses every problem from now on (torch's recompile limit reached), else None
        self.exhausted: str | None = None

    def flex_available(self, device_type: str) -> str | None:
        """:func:`flex_available`, asked once per device type."""
        if device_type not in self._available:
            self._available[device_type] = flex_available(device_type)
        return self._available[device_type]

    def clear(self) -> None:
        """Forget every kept block mask and tile count (the next call of each mask builds it again)."""
        self.block_masks.clear()
        self.tile_counts.clear()

    def reset_compiled(self) -> None:
        """Forget the compiled kernel, so that the next call compiles it again (for measuring)."""
        self.compiled = None
        self.exhausted = None
        torch._dynamo.reset()

    def memory_bytes(self, problem: Problem, forms: Forms) -> int:
        # create_block_mask materialises the boolean (B, L, S) mask and an int64 index grid
        return dense_bytes(problem, 0, 9)

    def available(self) -> str | None:
        return self.flex_available("cpu")

    def cost_terms(self, problem: Problem, forms: Forms) -> tuple[float, ...]:
        """Multiply-adds over the (128 x 128) tiles holding an allowed pair, the positions of the
        partial ones (where ``mask_mod`` runs), the tiles, the (L, S) positions where a block-mask
        build evaluates ``mask_mod`` (0 when this mask's block mask is cached), and 10**6 for a kernel
        not yet compiled in this process (so that its constant reads as seconds)."""
        tiles, positions, partial = (problem.H * n for n in self.tiles(problem, forms))
        cached = block_mask_key(problem) in self.block_masks
        build = 0 if cached else (problem.batch_size or 1) * problem.L * problem.S
        width = problem.E + problem.Ev
        compile_ = 0.0 if self.compiled is not None else 1 / UNIT
        return float(positions * width), float(partial), float(tiles), float(build), compile_

    def cost(self, problem: Problem, forms: Forms) -> float | None:
        """No estimate for a per-item mask on the CPU, so dispatch ranks flex after every estimated
        backend there: it runs such masks when named, since torch's CPU code generator fails on some."""
        if problem.device.type == "cpu" and problem.effective_mask.batched:
            return None
        return super().cost(problem, forms)

    def check(self, problem: Problem, forms: Forms) -> str | None:
        device = problem.device.type
        reason = self.flex_available(device) or self.exhausted
        if reason is not None:
            return reason
        if device == "cpu" and problem.training:
            return "torch compiles no FlexAttention backward for the CPU (inference only there)"
        if device == "cpu" and problem.dtype != torch.float32:
            return f"{problem.dtype} on the CPU (float32 only there)"
        if problem.E < 16 or problem.Ev < 16:
            return "head dims below 16"
        return None

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        from torch.nn.attention.flex_attention import flex_attention

        if self.compiled is None:
            self.compiled = torch.compile(flex_attention, dynamic=True)  # new lengths reuse the kernel
        block_mask = self.block_mask(problem.effective_mask, problem.batch_size, problem.L, problem.S, problem.device)
        config = torch._dynamo.config
        limit = max(RECOMPILE_LIMIT, getattr(config, "recompile_limit", 0))
        # (torch before 2.6 names neither option nor the error: its own limit and fallback stand there)
        options = {"recompile_limit": limit, "fail_on_recompile_limit_hit": True}
        try:
            with config.patch({key: value for key, value in options.items() if hasattr(config, key)}):
                out = self.compiled(inputs.q, inputs.k, inputs.v, block_mask=block_mask, scale=problem.scale)
        except getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", ()) as err:
            self.exhausted = (f"FlexAttention has compiled its {limit} kernels (RECOMPILE_LIMIT) in this process; "
                              "a new one would run uncompiled")
            raise BackendRefusedError(
                f"FlexAttention has compiled {limit} kernels in this process (one per family of masks, dtype and "
                f"shape of block mask), torch's limit for it; the kernel of {problem.effective_mask!r} would run "
                "uncompiled, materialising every score. Raise attnmm.attention.backends.flex.RECOMPILE_LIMIT, or "
                "name another backend for it (backend='sparse', say)"
            ) from err
        except Exception as err:
            if problem.device.type != "cpu" or not problem.effective_mask.batched:
                raise
            raise ValueError(
                f"FlexAttention's CPU code generator failed to compile the kernel of the per-item mask "
                f"{problem.effective_mask!r} (torch {torch.__version__}: {type(err).__name__}); per-item masks "
                "that compile on the CPU include Padding alone and Padding with Window, Causal or a union of "
                "them; compute this one on another backend (backend='auto')"
            ) from err
        nonempty = (forms.row_counts > 0).to(out.device).view(-1, 1, problem.L, 1)  # (B or 1, 1, L, 1)
        return torch.where(nonempty, out, torch.zeros_like(out)), None


    def tiles(self, problem: Problem, forms: Forms) -> tuple[int, int, int]:
        """The (BLOCK_SIZE x BLOCK_SIZE) tiles of the B items' score matrices (one head) that hold an
        allowed pair, as (tiles, their positions within L x S, the positions of the partial tiles, where
        the kernel evaluates ``mask_mod``). For an interval mask, a row of tiles spans from its first
        allowed key to its last, and a tile is full when every query row allows all its keys (O(B * L));
        else the tiles are counted from the mask's pairs (O(nnz)). Cached per mask content and shape."""
        key = block_mask_key(problem)
        if key in self.tile_counts:
            self.tile_counts.move_to_end(key)
            return self.tile_counts[key][1]
        B, L, S, T = problem.B, problem.L, problem.S, BLOCK_SIZE
        items = 1 if problem.batch_size is None else B  # a shared mask: the same tiles in every item
        rows, cols = -(-L // T), -(-S // T)
        height = (L - torch.arange(rows) * T).clamp(max=T)  # real query rows of each row of tiles
        counts: tuple[int, ...]
        if L == 0 or S == 0:
            counts = (0, 0, 0)
        elif (interval := problem.structure.interval) is not None:
            b = torch.arange(items).view(-1, 1)
            start, end = (x.clamp(0, S).expand(items, L) for x in interval(b, torch.arange(L).view(1, -1)))
            pad = rows * T - L
            allowed = F.pad(end > start, (0, pad)).view(items, rows, T)
            real = F.pad(torch.ones(L, dtype=torch.bool), (0, pad)).view(1, rows, T)
            lo = F.pad(start, (0, pad), value=S).view(items, rows, T)
            hi = F.pad(end, (0, pad)).view(items, rows, T)
            first = lo.masked_fill(~allowed, S).amin(-1) // T
            last = -(-hi.masked_fill(~allowed, 0).amax(-1) // T)
            tiles = (last - first).clamp_min(0)
            spanned = ((last * T).clamp(max=S) - first * T).clamp_min(0) * height  # positions of the tiles
            # full tiles: allowed by every real query row of the row of tiles
            full_lo = -(-lo.masked_fill(~real, 0).amax(-1) // T)
            min_end = hi.masked_fill(~real, S).amin(-1)
            full_hi = torch.where(min_end >= S, torch.full_like(min_end, cols), min_end // T)
            full = ((full_hi * T).clamp(max=S) - full_lo * T).clamp_min(0) * height
            counts = (int(tiles.sum()), int(spanned.sum()), int((spanned - full).clamp_min(0).sum()))
        else:
            pairs = forms.pairs()
            tile = (pairs.row // T) * cols + pairs.col // T
            if pairs.batch is not None:
                tile = tile + pairs.batch * (rows * cols)
            found, count = torch.unique(tile, return_counts=True)
            r, c = (found % (rows * cols)) // cols, found % cols
            size = height[r] * (S - c * T).clamp(max=T)
            counts = (found.numel(), int(size.sum()), int(size[count < size].sum()))
        n_tiles, n_spanned, n_partial = (n * (B // items) for n in counts)
        self.tile_counts[key] = (problem.effective_mask, (n_tiles, n_spanned, n_partial))
        while len(self.tile_counts) > CACHE_SIZE:
            self.tile_counts.popitem(last=False)
        return n_tiles, n_spanned, n_partial

    def block_mask(self, mask: Mask, batch_size: int | None, num_rows: int, num_cols: int, device: torch.device) -> Any:
        """The FlexAttention ``BlockMask`` of ``mask`` for one shape, built once and kept (the
        :data:`CACHE_SIZE` most recent)."""
        from torch.nn.attention.flex_attention import create_block_mask

        key = (content_key(mask), batch_size, num_rows, num_cols, str(device))
        if key in self.block_masks:
            self.block_masks.move_to_end(key)
            return self.block_masks[key][1]
        # the kernel evaluates mask_mod where it runs: the mask's own tensors (a Padding's lengths made on the
        # CPU, say) go there first, or torch's code generator would have to copy them inside the kernel
        block_mask = create_block_mask(
            as_mask_mod(on_device(mask, device)), batch_size, None, num_rows, num_cols, device=device,
            BLOCK_SIZE=BLOCK_SIZE,
        )
        self.block_masks[key] = (mask, block_mask)
        while len(self.block_masks) > CACHE_SIZE:
            self.block_masks.popitem(last=False)
        return block_mask

def block_mask_key(problem: Problem) -> tuple[Any, ...]:
    """The key of the problem's block mask (and tile counts): the mask's content and the shape."""
    mask = problem.effective_mask
    return (content_key(mask), problem.batch_size, problem.L, problem.S, str(problem.device))


def on_device(mask: Mask, device: torch.device | str) -> Mask:
    """``mask`` with every tensor it holds (in its parts too) on ``device``: ``mask`` itself when they are
    all there already, else a copy (the mask is not changed)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())  # as a tensor there names its device

    def moved(value: Any) -> Any:
        if isinstance(value, Tensor):
            return value if value.device == device else value.to(device)
        if isinstance(value, Mask):
            return on_device(value, device)
        if isinstance(value, (list, tuple)):
            items = [moved(v) for v in value]
            if all(a is b for a, b in zip(items, value)):
                return value
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            entries = {k: moved(v) for k, v in value.items()}
            return value if all(entries[k] is v for k, v in value.items()) else entries
        return value

    changed = {name: new for name, value in vars(mask).items() if (new := moved(value)) is not value}
    if not changed:
        return mask
    out = copy.copy(mask)
    for name, value in changed.items():
        object.__setattr__(out, name, value)
    return out


def as_mask_mod(mask: Mask) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
    """``mask.mask_mod`` as a plain 4-argument function: FlexAttention tells mask_mods from
    score_mods by counting positional parameters, and a bound method counts ``self``."""

    def predicate(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return mask.mask_mod(b, h, q_idx, kv_idx)

    return predicate


def _registered() -> FlexBackend:
    backend = get_backend("flex")
    assert isinstance(backend, FlexBackend)
    return backend


def block_masks_clear() -> None:
    """Forget the block masks kept by the registered flex backend (the next call of each mask builds it again)."""
    _registered().clear()


def reset_compiled() -> None:
    """Forget the registered flex backend's compiled kernel, so that the next call compiles it again."""
    _registered().reset_compiled()
