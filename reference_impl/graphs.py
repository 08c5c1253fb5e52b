"""The padding-free encoder replayed from CUDA graphs, on static buffers sized by buckets.

Why: at BERT's common lengths a forward is about 120 short kernels, and launched one by one from
Python the host sets the pace (an H200 at b16 L128: 8.8 ms a forward, the GPU idle most of it).
A CUDA graph launches them as one. A graph replays fixed shapes on fixed addresses, while every
padding-free batch has its own token count, so the encoder runs on static buffers whose sizes are
rounded up to buckets, as vLLM and FlashInfer do:

- tokens ``T`` up to ``token_bucket(T)`` (under 1/16 more, or 16 rows): the rows past ``T``
  belong to no sequence, so attention neither reads nor writes them (it sees only
  ``cu_seqlens``) and the GEMMs and LayerNorms work row by row: they cost compute, never a
  valid token's value;
- the batch up to the next power of two, the sequences added empty (``cu_seqlens`` repeats ``T``);
- the longest length up to the next power of two (>= 16): the varlen kernel's key tile and grid
  follow from it, and its programs past a sequence's end return at once.

One graph per (tokens, batch, longest) bucket, captured on its first batch into one memory pool
that the graphs share (they replay one after another on one stream, never at once). Above
``max_tokens`` the eager forward runs: there the GPU's work hides the launches. Without CUDA the
same static-buffer path runs eagerly (``capture=False``), which is how the bucketing is tested on
machines without a GPU.

A server cannot capture as it goes: a capture takes a few forwards' time, and it would land among
the latencies it reports. ``for_serving(max_batch, max_seqlen)`` fixes the batch and longest-length
buckets at the server's largest (its batches' added sequences are empty, and the attention
programs past a sequence's end return at once), which leaves one bucket per token count, and
captures them all before the first request, largest first so that the smaller graphs reuse the
larger ones' memory in the shared pool (as vLLM captures its decode graphs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reference_impl.packing import PackInfo, packing_of, unpack

# larger batches run eagerly: their kernels outlast the host's launches (an H200's eager forward
# took 8.8 ms at 2k tokens and 9.5 ms at 16k: the host set the pace up to about there)
MAX_TOKENS = 16384
MIN_BUCKET = 16


def _next_pow2(n: int, least: int = 1) -> int:
    return max(least, 1 << max(0, n - 1).bit_length())


def token_bucket(tokens: int) -> int:
    """``tokens`` rounded up to a multiple of 1/32 of its next power of two (and of 16): fewer
    than ``tokens / 16`` or 16 rows more, 16 buckets an octave."""
    granule = max(MIN_BUCKET, _next_pow2(tokens) >> 5)
    return -(-tokens // granule) * granule


def token_buckets(most: int) -> list[int]:
    """Every bucket of 1 to ``most`` tokens, largest first."""
    found, tokens = [], 1
    while tokens <= most:
        found.append(token_bucket(tokens))
        tokens = found[-1] + 1
    return found[::-1]


@dataclass(frozen=True)
class BucketKey:
    tokens: int
    batch: int
    max_seqlen: int

    @classmethod
    def of(cls, info: PackInfo) -> "BucketKey":
        return cls(token_bucket(info.total_tokens), _next_pow2(info.batch_size),
                   _next_pow2(info.max_seqlen, MIN_BUCKET))

    def __str__(self) -> str:
        return f"T{self.tokens}_B{self.batch}_L{self.max_seqlen}"


class _Bucket:
    """One bucket's static inputs, its output and (on CUDA) its graph."""

    def __init__(self, key: BucketKey, device: torch.device, with_types: bool):
        def ints(n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
            return torch.zeros(n, dtype=dtype, device=device)

        self.key = key
        self.ids, self.pos = ints(key.tokens), ints(key.tokens)
        self.types = ints(key.tokens) if with_types else None
        self.cu_seqlens = ints(key.batch + 1, torch.int32)
        self.info = PackInfo(indices=torch.arange(key.tokens, device=device),
                             cu_seqlens=self.cu_seqlens, seqlens=ints(key.batch, torch.int32),
                             max_seqlen=key.max_seqlen, batch_size=key.batch,
                             padded_len=key.max_seqlen)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None

    def fill(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
             info: PackInfo) -> None:
        """This batch's packed ids, positions, types and ``cu_seqlens`` into the static
        buffers, without a read of the device."""
        t, b = info.total_tokens, info.batch_size
        flat = info.indices
        torch.index_select(input_ids.reshape(-1), 0, flat, out=self.ids[:t])
        torch.remainder(flat, info.padded_len, out=self.pos[:t])
        if self.types is not None:
            types = (torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids)
            torch.index_select(types.reshape(-1), 0, flat, out=self.types[:t])
        self.cu_seqlens[:b + 1].copy_(info.cu_seqlens)
        if b < self.key.batch:
            self.cu_seqlens[b + 1:].fill_(t)


class GraphedEncoder:
    """``PaddingFreeBert``'s forward (same arguments, same result) through bucketed static
    buffers, each bucket a CUDA graph when ``capture`` (default: on CUDA). Needs the
    padding-free, fused-MHA switches: the padded forms attend over every row."""

    def __init__(self, model: torch.nn.Module, *, max_tokens: int = MAX_TOKENS,
                 capture: bool | None = None):
        sw = model.switches
        if not (sw.padding_free and sw.fused_mha):
            raise ValueError(f"graphs need padding_free and fused_mha on; switches are {sw}")
        if max_tokens < MIN_BUCKET:
            raise ValueError(f"max_tokens={max_tokens} must be >= {MIN_BUCKET}")
        self.model, self.max_tokens = model, max_tokens
        self.device = next(model.parameters()).device
        self.capture = self.device.type == "cuda" if capture is None else capture
        if self.capture and self.device.type != "cuda":
            raise ValueError(f"capture=True needs a CUDA model, this one is on {self.device}")
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.buckets: dict[BucketKey, _Bucket] = {}
        self.calls = {"graph": 0, "eager": 0}
        self.serving: dict | None = None  # for_serving's shape and what it captured

    def for_serving(self, max_batch: int, max_seqlen: int) -> dict:
        """Every batch of at most ``max_batch`` sequences of at most ``max_seqlen`` tokens into
        the batch bucket ``max_batch`` and the length bucket ``max_seqlen`` (each rounded to a
        power of two), and each token bucket such a batch can fill built now (on CUDA:
        captured), largest first. Returns, for the record, the shape, the buckets' count and the
        seconds it took."""
        if max_batch < 1 or max_seqlen < 1:
            raise ValueError(f"max_batch={max_batch} and max_seqlen={max_seqlen} must be >= 1")
        start = time.perf_counter()
        self.serving = {"batch": _next_pow2(max_batch),
                        "max_seqlen": _next_pow2(max_seqlen, MIN_BUCKET)}
        for tokens in token_buckets(min(self.max_tokens, max_batch * max_seqlen)):
            key = BucketKey(tokens, self.serving["batch"], self.serving["max_seqlen"])
            if key not in self.buckets:
                self._build(self.buckets.setdefault(key, self._new_bucket(key)))
        if self.capture:
            torch.cuda.synchronize(self.device)
        self.serving |= {"buckets": len(self.buckets),
                         "seconds": round(time.perf_counter() - start, 3)}
        return dict(self.serving)

    def key(self, info: PackInfo) -> BucketKey:
        """The bucket of a batch: its own powers of two, or the server's shape where it fits."""
        own = BucketKey.of(info)
        shape = self.serving
        if shape and own.batch <= shape["batch"] and own.max_seqlen <= shape["max_seqlen"]:
            return BucketKey(own.tokens, shape["batch"], shape["max_seqlen"])
        return own

    def _new_bucket(self, key: BucketKey) -> _Bucket:
        return _Bucket(key, self.device, self.model.token_type is not None)

    def _build(self, bucket: _Bucket) -> None:
        """The bucket's graph, captured on what its buffers hold (on CUDA), or its forward run."""
        if not self.capture:
            bucket.out = self._rows(bucket)
        elif bucket.graph is None:
            self._capture(bucket)
        else:
            bucket.graph.replay()

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 token_type_ids: torch.Tensor | None = None,
                 lengths: Sequence[int] | None = None) -> torch.Tensor:
        info = packing_of(attention_mask, lengths)
        if not 0 < info.total_tokens <= self.max_tokens:
            self.calls["eager"] += 1
            return self.model(input_ids, attention_mask, token_type_ids, lengths=lengths)
        key = self.key(info)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = self._new_bucket(key)
        bucket.fill(input_ids, token_type_ids, info)
        self._build(bucket)
        self.calls["graph"] += 1
        return unpack(bucket.out[:info.total_tokens], info)

    def _rows(self, bucket: _Bucket) -> torch.Tensor:
        return self.model.rows(bucket.ids, bucket.pos, bucket.types, bucket.info)

    def _capture(self, bucket: _Bucket) -> None:
        """Warm up on a side stream (Triton compiles, cuBLAS picks its kernels and workspace
        there, none of which a capture may do), then capture; the capture runs nothing, so one
        replay computes this batch."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._rows(bucket)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            bucket.out = self._rows(bucket)
        bucket.graph = graph
        graph.replay()

    def details(self) -> dict:
        """What ran, for the record: graphs or not, the buckets, calls of each kind."""
        out = {"execution": "cuda-graphs" if self.capture else "static-buckets (no capture)",
               "max_tokens": self.max_tokens, "calls": dict(self.calls),
               "buckets": [str(k) for k in self.buckets]}
        return out | ({"serving": dict(self.serving)} if self.serving else {})
