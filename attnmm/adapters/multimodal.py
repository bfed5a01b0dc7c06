r"""The multimodal adapter: several adapters' tokens in one sequence, fused by a :class:`~attnmm.masks.Segments`
mask (its head, pooling segment by segment, is :class:`~attnmm.nn.SegmentPoolingClassifier`)."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters._registry import register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.adapters.image import ImageAdapter
from attnmm.adapters.speech import SpeechAdapter
from attnmm.masks import Mask, Segments

Fusion = Literal["late", "joint", "bottleneck", "cross"]
FUSIONS: tuple[str, ...] = ("late", "joint", "bottleneck", "cross")
#: Name of the segment of learned fusion tokens (``fusion="bottleneck"``).
FUSION_SEGMENT = "fusion"


@register_adapter("multimodal")
class MultimodalAdapter(Adapter):
    r"""Fusion of modalities as a mask: the tokens of several adapters, projected to one width and
    tagged with a learned modality embedding, laid one after another as the segments of one sequence
    that attends under a :class:`~attnmm.masks.Segments` mask ("Attention Bottlenecks for Multimodal
    Fusion", Nagrani et al., 2021).

    .. math::
        \mathbf{X} = \big[\mathbf{X}_1 \mathbf{W}_1 + \mathbf{e}_1;\ \ldots;\ \mathbf{X}_K
        \mathbf{W}_K + \mathbf{e}_K\ (;\ \mathbf{Z})\big], \qquad
        A = \mathrm{Segments}\big(n_1..n_K;\ \text{within} = A_1..A_K;\ \text{links} = \text{fusion}\big)

    Modality :math:`k` keeps its own mask :math:`A_k` (a speech Window, an image Grid) within its
    segment; the fusion pattern chooses the blocks across segments:

    - ``"late"``: none; each modality attends only itself, and the head combines them
      (:class:`~attnmm.nn.SegmentPoolingClassifier`);
    - ``"joint"``: every query attends every key of the other modalities (early fusion);
    - ``"bottleneck"``: a last segment of ``num_fusion_tokens`` learned tokens :math:`\mathbf{Z}` that
      attend and are attended by every modality; the modalities exchange information only through
      them;
    - ``"cross"``: the queries of the modalities in ``cross_queries`` also attend the keys of the
      other modalities (cross-attention); the others attend only themselves.

    An item lacking a modality (``batch["<name>_present"]`` false, e.g. AVDigits' ``audio_present``)
    gets length 0 in that segment: its tokens attend nothing and nobody attends them. The real length
    of a segment is the adapter's ``Tokens.lengths`` (all its tokens when ``None``). The output's
    ``lengths`` is ``None``: real tokens are not a prefix of the sequence; the mask's ``lengths``
    (B, K) says which are real.

    Adding a modality is one adapter and one entry of ``adapters``.

    Args:
        adapters (dict[str, Adapter], optional): the modalities by name, in segment order; each reads
            its own keys of the shared batch. (default: :obj:`None`, ``{"audio": SpeechAdapter(),
            "image": ImageAdapter()}`` of width ``d_model``, for audio-visual digits)
        d_model (int, optional): width D of the fused tokens. (default: :obj:`64`)
        fusion (str, optional): ``"late"``, ``"joint"``, ``"bottleneck"`` or ``"cross"``.
            (default: :obj:`"joint"`)
        num_fusion_tokens (int, optional): learned tokens of the bottleneck segment.
            (default: :obj:`4`)
        cross_queries (list[str], optional): modalities whose queries attend the other modalities'
            keys under ``fusion="cross"``. (default: :obj:`None`, the first modality)
        modalities (list[str], optional): the names of ``adapters`` to use, in that order; the others are
            left out of the model (a single-modality baseline is the multimodal config with
            ``modalities: [audio]``). (default: :obj:`None`, all of them)

    Shapes:
        - **input:** a batch every adapter reads, optionally with ``<name>_present`` (B,) bool flags
        - **output:** :class:`Tokens` with x (B, L, D), L the sum of the segments' sizes, and a
          :class:`~attnmm.masks.Segments` mask with lengths (B, K)

    Examples:
        >>> import torch
        >>> from attnmm.adapters import ImageAdapter, SpeechAdapter
        >>> from attnmm.masks import Grid, Window
        >>> adapter = MultimodalAdapter(
        ...     {"audio": SpeechAdapter(d_model=32, mask=Window(8, 2)),
        ...      "image": ImageAdapter(d_model=16, mask=Grid(7, 7, kernel=3))},
        ...     d_model=24, fusion="bottleneck", num_fusion_tokens=2)
        >>> batch = {"waveform": torch.randn(2, 8000), "lengths": torch.tensor([8000, 4000]),
        ...          "image": torch.rand(2, 1, 28, 28), "image_present": torch.tensor([True, False])}
        >>> tokens = adapter(batch)
        >>> tokens.x.shape  # (B, L, D): 23 frames, 49 patches, 2 fusion tokens
        torch.Size([2, 74, 24])
        >>> adapter.segment_names, tokens.mask.lengths.tolist()
        (['audio', 'image', 'fusion'], [[23, 49, 2], [11, 0, 2]])
    """

    def __init__(
        self, adapters: dict[str, Adapter] | None = None, d_model: int = 64, fusion: Fusion = "joint",
        num_fusion_tokens: int = 4, cross_queries: list[str] | None = None, modalities: list[str] | None = None,
    ) -> None:
        super().__init__()
        if adapters is None:  # audio-visual digits
            adapters = {"audio": SpeechAdapter(d_model=d_model), "image": ImageAdapter(d_model=d_model)}
        if not isinstance(adapters, dict) or not adapters:
            raise ValueError(
                "adapters must be a non-empty dict of modality name -> Adapter, e.g. "
                f"{{'audio': SpeechAdapter(...), 'image': ImageAdapter(...)}}; got {adapters!r}"
            )
        for name, adapter in adapters.items():
            if not isinstance(adapter, Adapter):
                raise TypeError(f"adapters[{name!r}] must be an Adapter, got {type(adapter).__name__}")
            if name == FUSION_SEGMENT:
                raise ValueError(f"{FUSION_SEGMENT!r} names the bottleneck's segment; give the modality another name")
        if modalities is not None:
            unknown = [m for m in modalities if m not in adapters]
            if not modalities or unknown or len(set(modalities)) != len(modalities):
                raise ValueError(
                    f"modalities must name distinct adapters, at least one; the adapters are {list(adapters)}, "
                    f"got {modalities}"
                )
            adapters = {name: adapters[name] for name in modalities}
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {list(FUSIONS)}, got {fusion!r}")
        self.out_dim = check_nonneg_int("d_model", d_model, minimum=1)
        self.fusion = fusion
        self.adapters = nn.ModuleDict(adapters)
        self.names = list(adapters)
        self.proj = nn.ModuleDict(
            {name: nn.Linear(a.out_dim, self.out_dim) if a.out_dim != self.out_dim else nn.Identity()
             for name, a in adapters.items()}
        )
        self.modality_embedding = nn.Parameter(torch.empty(len(self.names), self.out_dim))  # (K, D)
        self.num_fusion_tokens = check_nonneg_int("num_fusion_tokens", num_fusion_tokens, minimum=1)
        self.fusion_tokens: nn.Parameter | None = None
        if fusion == "bottleneck":
            self.fusion_tokens = nn.Parameter(torch.empty(self.num_fusion_tokens, self.out_dim))  # (F, D)
        queries = [self.names[0]] if cross_queries is None else list(cross_queries)
        unknown = [q for q in queries if q not in self.names]
        if unknown:
            raise ValueError(f"cross_queries names unknown modalities {unknown}; the modalities are {self.names}")
        self.cross_queries = queries
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for proj in self.proj.values():
            if isinstance(proj, nn.Linear):
                proj.reset_parameters()
        nn.init.normal_(self.modality_embedding, std=0.02)
        if self.fusion_tokens is not None:
            nn.init.normal_(self.fusion_tokens, std=0.02)

    @property
    def segment_names(self) -> list[str]:
        """The segments in order: the modalities, then ``"fusion"`` for the bottleneck."""
        return self.names + [FUSION_SEGMENT] * (self.fusion == "bottleneck")

    def links(self) -> Literal["none", "full"] | list[list[bool]]:
        """The ``links`` of the :class:`~attnmm.masks.Segments` mask for this fusion pattern.

        Examples:
            >>> from attnmm.adapters import ImageAdapter
            >>> a = MultimodalAdapter({"a": ImageAdapter(d_model=8), "b": ImageAdapter(d_model=8)}, 8, "bottleneck")
            >>> a.links()
            [[True, False, True], [False, True, True], [True, True, True]]
        """
        if self.fusion == "late":
            return "none"
        if self.fusion == "joint":
            return "full"
        K = len(self.names)
        if self.fusion == "bottleneck":  # modality <-> fusion tokens only
            return [[a == c or a == K or c == K for c in range(K + 1)] for a in range(K + 1)]
        return [[a == c or self.names[a] in self.cross_queries for c in range(K)] for a in range(K)]

    def forward(self, batch: dict[str, Any]) -> Tokens:
        parts: list[Tensor] = []
        within: list[Mask | None] = []
        lengths: list[Tensor] = []
        B: int | None = None
        for k, name in enumerate(self.names):
            tokens = self.adapters[name](batch)
            x = tokens.x
            if x.dim() != 3:
                raise ValueError(
                    f"adapters[{name!r}] gave tokens of shape {tuple(x.shape)}; the multimodal adapter takes "
                    "the padded layout (B, L, D), not packed nodes"
                )
            if B is not None and x.size(0) != B:
                raise ValueError(f"adapters[{name!r}] gave {x.size(0)} items, the modalities before it {B}")
            B = x.size(0)
            parts.append(self.proj[name](x) + self.modality_embedding[k])  # (B, L_k, D)
            n = tokens.lengths if tokens.lengths is not None else torch.full((B,), x.size(1), dtype=torch.long)
            present = batch.get(f"{name}_present") if isinstance(batch, dict) else None
            if present is not None:
                n = n.to(present.device) * present.bool().long()
            lengths.append(n.long().cpu())
            within.append(tokens.mask)
        assert B is not None
        if self.fusion_tokens is not None:
            parts.append(self.fusion_tokens.unsqueeze(0).expand(B, -1, -1))  # (B, F, D)
            lengths.append(torch.full((B,), self.num_fusion_tokens, dtype=torch.long))
            within.append(None)
        sizes = [p.size(1) for p in parts]
        mask = Segments(sizes, within=within, links=self.links(), lengths=torch.stack(lengths, 1))  # lengths (B, K)
        return Tokens(torch.cat(parts, 1), mask)  # (B, L, D)

    @classmethod
    def example_batch(cls, batch_size: int = 2) -> dict[str, Tensor]:
        batch = {**SpeechAdapter.example_batch(batch_size), **ImageAdapter.example_batch(batch_size)}
        batch["audio_present"] = torch.ones(batch_size, dtype=torch.bool)
        batch["image_present"] = torch.arange(batch_size) % 2 == 0  # every other item lacks its image
        return batch
