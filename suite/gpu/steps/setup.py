"""The steps every later one runs with: what the machine has (``env``), the varlen attention's
launch tuned on it (``tune``), its GEMM peak with the clock and power under it (``peak``); and
the Triton kernel tests compiled for it (``kernels``)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import platform
import sys
from dataclasses import asdict
from itertools import product
from typing import Any

from suite.gpu.steps.common import ROOT, time_ms, under_load

# What the suite needs beyond torch, triton and transformers (each a module it imports)
NEEDED = ("jsonschema", "yaml", "scipy", "pandas", "matplotlib", "jinja2", "threadpoolctl",
          "mlperf_loadgen", "snakemake")


def env(pack) -> dict[str, Any]:
    """Versions, the device, and every module the suite needs that does not import here."""
    import torch

    versions, missing = {"python": platform.python_version()}, []
    for name in ("torch", "triton", "transformers", *NEEDED):
        try:
            versions[name] = getattr(importlib.import_module(name), "__version__", "?")
        except ImportError as e:
            missing.append(f"{name} ({e})")
    device = (torch.cuda.get_device_name(0) if pack.sizes.device == "cuda" else
              platform.processor() or "cpu")
    from suite.baselines.registry import baselines

    detail = {"versions": versions, "device_name": device, "missing": missing,
              "baselines_registered": sorted(baselines.entry_points())}
    if pack.sizes.device == "cuda":
        detail["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    from reference_impl.kernels.triton_attention import TUNING_ENV

    if pack.env.get(TUNING_ENV):  # a second call, run with the first call's tuning
        detail["tuning_from_env"] = pack.env[TUNING_ENV]
    if missing:
        detail["status"] = "failed"
        detail["reason"] = ("missing: " + ", ".join(missing)
                            + " (carry their wheels: make gpu-wheels)")
    return detail


def kernels(pack) -> dict[str, Any]:
    """The Triton kernel tests, compiled for this GPU (the rehearsal: a subset, interpreted)."""
    import subprocess

    report = pack.out / "kernel_tests.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "test_triton_kernels.py"),
                           f"--junitxml={report}", *pack.sizes.kernel_tests],
                          env=pack.env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return {"summary": summary, **({} if done.returncode == 0 else
                                   {"status": "failed", "tail": done.stdout[-2000:]})}


def tune(pack) -> dict[str, Any]:
    """Time each candidate launch of the varlen attention at the MHA study's shapes (correct
    ones only: each is checked against torch first) and keep the fastest; later steps run with
    it through SEEDBENCH_TRITON_TUNING, and tuning.json records every measurement. Each
    variant is timed where it can run: the short kernel up to SHORT_TUNE_MAX keys (its key
    tile on chip), the long one everywhere; ``_choose`` picks each one's launch from the
    lengths it would serve."""
    import shutil

    import torch

    from reference_impl.kernels import triton_attention as ta

    path = pack.out / "tuning.json"
    if pack.resume and pack.tuning_file.exists():  # an earlier call's, already in pack.env
        shutil.copyfile(pack.tuning_file, path)
        return {"tuning": json.loads(path.read_text())["tuning"],
                "kept": f"from an earlier call ({pack.tuning_file})"}
    device = torch.device(pack.sizes.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    cands = pack.sizes.extra.get("tune", TUNE_GPU if device.type == "cuda" else TUNE_CPU)
    rows = []
    for length in pack.sizes.tune_shapes:
        q, k, v, cu, expected = _attention_case(pack.sizes.batch, length, device, dtype)
        short = [("short", ta.Tuning(short_block_m=m, short_num_warps=w, short_num_warps_wide=w))
                 for m, w in product(cands["block_m"], cands["warps"])
                 if length <= SHORT_TUNE_MAX]
        long_ = [("long", ta.Tuning(block_m=m, long_block_n=n, num_warps=w))
                 for m, n, w in product(cands["block_m"], cands["long_block_n"], cands["warps"])]
        for variant, t in [*short, *long_]:
            block_m, block_n, warps = t.launch(variant, length)
            launch = {"length": length, "variant": variant, "block_m": block_m,
                      "block_n": block_n, "num_warps": warps}
            try:
                out = ta.triton_varlen_attention(q, k, v, cu, length, variant=variant, tuning=t)
                err = (out.float() - expected).abs().max().item()
                ms = time_ms(lambda q=q, k=k, v=v, cu=cu, n=length, var=variant, t=t:
                              ta.triton_varlen_attention(q, k, v, cu, n, variant=var, tuning=t),
                              device)
            except Exception as e:  # noqa: BLE001 - a launch that does not fit is a data point
                rows.append({**launch, "error": f"{type(e).__name__}: {str(e)[:200]}"})
                continue
            ok = err <= (2e-2 if dtype == torch.float16 else 1e-4)
            rows.append({**launch, "ms": ms, "max_abs_err": err, "correct": ok})
    chosen = _choose(rows, ta.Tuning())
    path.write_text(json.dumps({"tuning": asdict(chosen), "device": pack.sizes.device,
                                "dtype": str(dtype), "batch": pack.sizes.batch,
                                "measurements": rows}, indent=1))
    shutil.copyfile(path, pack.tuning_file)  # for a later call that resumes this work
    pack.env[ta.TUNING_ENV] = str(pack.tuning_file)
    timed = sum("ms" in r for r in rows)
    detail = {"tuning": asdict(chosen), "candidates_timed": timed,
              "incorrect": sum(r.get("correct") is False for r in rows)}
    if not timed:
        errors = sorted({r["error"] for r in rows if "error" in r})
        detail.update(status="failed", reason=f"no candidate ran: {errors[:3]}")
    return detail


SHORT_TUNE_MAX = 512  # the short kernel is timed up to here: twice the default crossover


TUNE_GPU = {"block_m": (32, 64, 128), "long_block_n": (32, 64, 128), "warps": (4, 8)}


TUNE_CPU = {"block_m": (16, 32), "long_block_n": (16,), "warps": (4,)}


def _attention_case(batch: int, length: int, device, dtype):
    """BERT-base heads (12 x 64) on a ByteTransformer length distribution, and the answer."""
    import torch

    from suite.workloads import varlen_lengths

    lengths = varlen_lengths(batch, length, "bytetransformer", seed=0)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(sum(lengths), 12, 64, generator=g).to(device, dtype)
               for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                      device=device)
    expected = torch.empty(q.shape, dtype=torch.float32, device=device)
    for i in range(batch):
        s, e = cu[i].item(), cu[i + 1].item()
        expected[s:e] = torch.nn.functional.scaled_dot_product_attention(
            *(t[s:e].transpose(0, 1).float() for t in (q, k, v))).transpose(0, 1)
    return q, k, v, cu, expected


def _choose(rows: list[dict[str, Any]], default):
    """Each variant's fastest correct launch on the lengths it would serve, and the crossover.

    Long: the (block_m, block_n, warps) fastest summed over every length (it may serve any).
    Short: one block_m, with its warps chosen apart below 128 keys (a narrow key tile) and from
    128 (a wide one), each summed over the lengths of that tile only: the short kernel's launch
    is never the long winner's, nor chosen on lengths where it would not run. short_seq_max:
    the longest tuned length at which the chosen short launch beat the chosen long one (a power
    of two, at least 16). A class with no correct timing keeps ``default``'s values."""
    from reference_impl.kernels.triton_attention import Tuning

    timed = [r for r in rows if r.get("correct")]

    def fastest(candidates: list[dict[str, Any]], key) -> tuple[tuple | None, float]:
        """The key whose rows sum lowest, among keys timed at every length of the set, and
        that sum (None and infinity when no key was)."""
        lengths = {r["length"] for r in candidates}
        by_key: dict[tuple, dict[int, float]] = {}
        for r in candidates:
            by_key.setdefault(key(r), {})[r["length"]] = r["ms"]
        full = {k: sum(v.values()) for k, v in by_key.items() if set(v) == lengths}
        best = min(full, key=full.get, default=None)
        return best, full.get(best, math.inf)

    long_, _ = fastest([r for r in timed if r["variant"] == "long"],
                       lambda r: (r["block_m"], r["block_n"], r["num_warps"]))
    short_rows = [r for r in timed if r["variant"] == "short"]
    tiles = {name: rows for name, rows in (
        ("narrow", [r for r in short_rows if r["block_n"] < 128]),
        ("wide", [r for r in short_rows if r["block_n"] >= 128])) if rows}
    short = {}  # block_m -> (its time over every tile, the warps chosen per tile)
    for block_m in {r["block_m"] for r in short_rows}:
        picks = {name: fastest([r for r in tile if r["block_m"] == block_m],
                               lambda r: r["num_warps"]) for name, tile in tiles.items()}
        short[block_m] = (sum(ms for _, ms in picks.values()),
                          {name: warps for name, (warps, _) in picks.items()})
    short_m = min(short, key=lambda m: short[m][0], default=None)
    if long_ is None or short_m is None or short[short_m][0] == math.inf:
        return default
    warps = short[short_m][1]
    chosen = Tuning(block_m=long_[0], long_block_n=long_[1], num_warps=long_[2],
                    short_block_m=short_m,
                    short_num_warps=warps.get("narrow") or default.short_num_warps,
                    short_num_warps_wide=warps.get("wide") or default.short_num_warps_wide)
    ms = {}
    for r in timed:
        b_m, b_n, w = chosen.launch(r["variant"], r["length"])
        if (r["block_m"], r["block_n"], r["num_warps"]) == (b_m, b_n, w):
            ms[(r["length"], r["variant"])] = r["ms"]
    wins = [n for (n, v), t in ms.items() if v == "short" and t <= ms.get((n, "long"), math.inf)]
    short_max = 1 << max(wins).bit_length() - 1 if wins else 16
    return dataclasses.replace(chosen, short_seq_max=max(16, short_max))


def peak(pack) -> dict[str, Any]:
    device = pack.sizes.device
    dtypes = ["fp16", "bf16"] if device == "cuda" else ["fp32"]
    out = pack.results / "peak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if pack.resume and out.exists():  # an earlier call's: the grid's percentages divide by it
        return {**_peaks(out, dtypes), "kept": f"from an earlier call ({out})"}
    # on a GPU 5 repeats at 8k and 16k: the first H200 run's 2 at 4k and 8k (one product and a
    # host sync each) measured 667 TFLOP/s, below the 790 its own layer GEMMs reached
    args = ["peak", "--device", device, "--dtypes", *dtypes,
            "--repeats", "5" if device == "cuda" else "2",
            "--sizes", *map(str, pack.sizes.peak_sizes), "--out", str(out)]
    if device == "cpu":
        args += ["--libraries", "torch.matmul"]
    done = pack.seedbench(*args)
    if done.returncode != 0:
        return {"status": "failed", "reason": done.stderr[-1000:]}
    return {**_peaks(out, dtypes), "under_load": _peak_clocks(pack, dtypes)}


def _peaks(path, dtypes: list[str]) -> dict[str, Any]:
    """Per dtype, the measured and datasheet FLOP/s of the peak file at ``path``."""
    report = json.loads(path.read_text())
    return {dtype: {k: (v or {}).get("flops_per_s") for k, v in report["peaks"][dtype].items()
                    if k in ("measured", "datasheet")} for dtype in dtypes}


def _peak_clocks(pack, dtypes: list[str]) -> dict[str, Any]:
    """Per dtype, the largest peak size's product timed again here with the SM clock and board
    power NVML reads while it runs: whether the peak was measured below the clock the
    datasheet's rate assumes (the H200 run's peak fell short of its own layer GEMMs).
    {} off CUDA."""
    import torch

    from suite.devices import torch_dtype

    device = torch.device(pack.sizes.device)
    if device.type != "cuda":
        return {}
    n, out = max(pack.sizes.peak_sizes), {}
    for dtype in dtypes:
        a, b = (torch.randn(n, n, device=device, dtype=torch_dtype(dtype)) for _ in range(2))
        ms = time_ms(lambda a=a, b=b: a @ b, device)
        out[dtype] = {"size": n, "ms": ms, "flops_per_s": 2 * n**3 / (ms / 1e3),
                      **under_load(lambda a=a, b=b: a @ b, ms, device)}
        del a, b
    return out
