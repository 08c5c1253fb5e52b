"""The MegaScale training steps on one GPU: a ~1B GPT's MFU (``gpt``), the sliding window's
kernel (``window_attention``) and the two-stage checkpoint (``resilience``)."""

from __future__ import annotations

import json
from typing import Any


def gpt(pack) -> dict[str, Any]:
    label = "gpt-1b" if pack.sizes.device == "cuda" else "gpt-tiny"
    out = pack.results / "llm_mfu" / label / "single.json"
    args = ["train", "llm_mfu", "--trainer", "single", "--label", label,
            "--train-json", json.dumps(pack.sizes.gpt), "--out", str(out),
            "--steplog", str(out.with_suffix("").with_suffix(".steps.jsonl")),
            "--timeout-s", "280"]
    if (pack.results / "peak.json").exists():
        args += ["--peak", str(pack.results / "peak.json")]
    done = pack.seedbench(*args, timeout=300)
    if not out.exists():
        return {"status": "failed", "reason": f"no record (exit {done.returncode}): "
                                              f"{done.stderr[-800:]}"}
    rec = json.loads(out.read_text())
    from suite.experiments import train_interface as ti

    derived = rec.get("derived") or {}
    mfu = derived.get(ti.MFU) or {}
    return {"record_status": rec["status"], "reason": rec.get("reason", "")[:500],
            "mfu_percent": mfu.get("percent"), "peak": mfu.get("peak_source"),
            "tokens_per_s": derived.get(ti.TOKENS_PER_S),
            **({} if rec["status"] == "ok" else {"status": "failed"})}


def window_attention(pack) -> dict[str, Any]:
    """MegaScale's sliding window on this GPU (``llm_window``): the band-only kernel
    (FlexAttention with a sliding-window block mask) against SDPA's causal flash kernel, forward
    + backward at s = 8w, each system checked against float64 masked attention first."""
    gpu = pack.sizes.device == "cuda"
    point = ({"seq_len": 8192, "window": 1024, "heads": 16, "head_dim": 128} if gpu else
             {"seq_len": 256, "window": 32, "heads": 2, "head_dim": 16})
    label = f"s{point['seq_len']}-w{point['window']}"
    out = pack.results / "llm_window" / label
    done = pack.seedbench("attention-window", *(f"--{k.replace('_', '-')}={v}"
                                                for k, v in point.items()),
                          "--dtype", "bf16" if gpu else "fp32", "--repeats", "10" if gpu else "2",
                          "--device", pack.sizes.device, "--out-dir", str(out), timeout=280)
    found = {}
    for path in sorted(out.glob("*.json")):
        rec = json.loads(path.read_text())
        found[path.stem] = {"status": rec["status"], "reason": rec.get("reason", "")[:300],
                            "time_vs_causal": (rec.get("derived") or {}).get("time_vs_causal")}
    if not found:
        return {"status": "failed", "reason": f"no records (exit {done.returncode}): "
                                              f"{done.stderr[-800:]}"}
    failed = any(r["status"] != "ok" for r in found.values())
    return {"systems": found, **({"status": "failed"} if failed else {})}


def resilience(pack) -> dict[str, Any]:
    """MegaScale's two-stage checkpoint on this GPU (``llm_resilience``): one rank of a 350M
    GPT (a 4 GiB fp32 + AdamW state) whose checkpoints take turns: a synchronous write, and a
    copy to host memory persisted in the background by a process and by a thread; the stall of
    each, fsynced. (The fault runs
    need two ranks, each on a GPU of its own.)"""
    gpu = pack.sizes.device == "cuda"
    model = ({"n_layer": 24, "n_embd": 1024, "n_head": 16} if gpu else
             {"n_layer": 1, "n_embd": 32, "n_head": 2})
    train = {"model": model, "seq_len": 256 if gpu else 16, "global_batch": 8 if gpu else 2,
             "steps": 20 if gpu else 11, "warmup_steps": 1, "device": pack.sizes.device}
    spec = {"every": 3, "steps": train["steps"], "global_batch": train["global_batch"],
            "nprocs": 1}
    out = pack.results / "llm_resilience" / "ddp"
    done = pack.seedbench("resilience", "checkpoint", "--trainer", "ddp", "--nprocs", "1",
                          "--train-json", json.dumps(train), "--spec-json", json.dumps(spec),
                          "--out-dir", str(out), timeout=280)
    found = {}
    for path in sorted(out.glob("checkpoint-*.json")):
        rec = json.loads(path.read_text())
        d = rec.get("derived") or {}
        found[path.stem] = {"status": rec["status"], "reason": rec.get("reason", "")[:300],
                            **{k: d.get(k) for k in ("stall_s", "persist_s", "state_bytes")}}
    if not found:
        return {"status": "failed", "reason": f"no records (exit {done.returncode}): "
                                              f"{done.stderr[-800:]}"}
    failed = any(r["status"] == "failed" for r in found.values())
    return {"systems": found, **({"status": "failed"} if failed else {})}
