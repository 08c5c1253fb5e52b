"""The GEMM libraries ``seedbench peak`` measures, each in a process of its own.

Which library a framework's GEMMs reach decides who wins on a CPU (MKL takes a slow path on AMD,
oneDNN and MLAS do not), so the peak is the best of every library this machine can reach, not
``torch.matmul`` alone. Each library runs in its own child (``python -m suite.peak.libraries``):
TensorFlow must not share a process with triton, thread pools do not leak between libraries, and
the ISA probe can switch on the libraries' verbose modes (``MKL_VERBOSE``, ``ONEDNN_VERBOSE``) in a
short separate run, so that logging never slows the timed one.

Every library does the same thing: C = A @ B on square fp32/bf16/fp16 matrices of each size,
best of ``repeats`` rounds of calls lasting at least ``min_time_s``; 2 n^3 FLOPs per call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

# Library key -> what it is. "cublas" is torch.matmul on CUDA; the rest are CPU paths.
LIBRARIES: dict[str, str] = {
    "torch.matmul": "torch.matmul on the BLAS torch was built with (MKL on x86 wheels)",
    "onednn": "oneDNN through torch (torch.ops.mkldnn._linear_pointwise, weights prepacked once)",
    "numpy": "numpy's BLAS (OpenBLAS in PyPI wheels), numpy.matmul",
    "tensorflow": "TensorFlow tf.linalg.matmul (oneDNN or Eigen, as TensorFlow dispatches)",
    "onnxruntime": "ONNX Runtime MatMul, CPU execution provider (MLAS)",
    "cublas": "torch.matmul on CUDA (cuBLAS)",
}
CPU_LIBRARIES = ("torch.matmul", "onednn", "numpy", "tensorflow", "onnxruntime")
GPU_LIBRARIES = ("cublas",)
DTYPES = ("fp32", "tf32", "fp16", "bf16")
VERBOSE_ENV = {"MKL_VERBOSE": "1", "ONEDNN_VERBOSE": "1", "DNNL_VERBOSE": "1"}


class LibraryUnavailable(RuntimeError):
    """This library (or this dtype in it) cannot run here; the message says why."""


# ----------------------------------------------------------------------------- per library
# Each factory takes (dtype, n, threads) and returns a zero-argument call that computes one
# n x n x n product and returns only when it is done; it raises LibraryUnavailable if it can't.


def _torch_matmul(dtype: str, n: int, threads: int, device: str = "cpu") -> Callable[[], Any]:
    import torch

    from suite.devices import torch_dtype

    if dtype == "tf32" and device != "cuda":
        raise LibraryUnavailable("tf32 is a CUDA tensor-core mode; on CPU measure fp32")
    torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    a, b = (torch.randn(n, n, device=device).to(torch_dtype(dtype)) for _ in range(2))
    if device == "cuda":
        def call():
            torch.matmul(a, b)
            torch.cuda.synchronize()
        return call
    return lambda: torch.matmul(a, b)


def _cublas(dtype: str, n: int, threads: int) -> Callable[[], Any]:
    import torch

    if not torch.cuda.is_available():
        raise LibraryUnavailable("no CUDA device (torch.cuda.is_available() is False)")
    return _torch_matmul(dtype, n, threads, device="cuda")


def _onednn(dtype: str, n: int, threads: int) -> Callable[[], Any]:
    import torch

    from suite.devices import torch_dtype

    if dtype == "tf32":
        raise LibraryUnavailable("tf32 is a CUDA mode")
    if not torch.backends.mkldnn.is_available():
        raise LibraryUnavailable("this torch build has no oneDNN (torch.backends.mkldnn)")
    torch.set_num_threads(threads)
    t = torch_dtype(dtype)
    a, w = torch.randn(n, n).to(t), torch.randn(n, n).to(t)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, n)  # once, as a model's weights are
    op = torch.ops.mkldnn._linear_pointwise
    return lambda: op(a, packed, None, "none", [], "")


def _numpy(dtype: str, n: int, threads: int) -> Callable[[], Any]:
    import numpy as np
    from threadpoolctl import threadpool_limits

    if dtype not in ("fp32", "fp16"):
        raise LibraryUnavailable(f"numpy has no {dtype} matmul")
    if dtype == "fp16":
        raise LibraryUnavailable("numpy's fp16 matmul does not reach BLAS (a plain C loop)")
    threadpool_limits(threads)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    return lambda: a @ b


def _tensorflow(dtype: str, n: int, threads: int) -> Callable[[], Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as e:
        raise LibraryUnavailable(f"tensorflow is not installed ({e})") from e
    if dtype == "tf32":
        raise LibraryUnavailable("tf32 is a CUDA mode")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # already initialized: keep what it has
        pass
    t = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}[dtype]
    with tf.device("/CPU:0"):
        a = tf.cast(tf.random.normal((n, n)), t)
        b = tf.cast(tf.random.normal((n, n)), t)
    matmul = tf.function(tf.linalg.matmul)  # a graph, as the TensorFlow baselines run: the
    return lambda: matmul(a, b).numpy()      # oneDNN rewrite applies; .numpy() waits


def _onnxruntime(dtype: str, n: int, threads: int) -> Callable[[], Any]:
    try:
        import numpy as np
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError as e:
        raise LibraryUnavailable(f"onnxruntime/onnx is not installed ({e})") from e
    if dtype != "fp32":
        raise LibraryUnavailable(f"ONNX Runtime's CPU provider has no fast {dtype} MatMul; "
                                 "measured in fp32 only")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])], "gemm",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])],
        [onnx.numpy_helper.from_array(
            np.random.default_rng(1).standard_normal((n, n), dtype=np.float32), "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    return lambda: sess.run(None, {"A": a})


FACTORIES: dict[str, Callable[[str, int, int], Callable[[], Any]]] = {
    "torch.matmul": _torch_matmul, "onednn": _onednn, "numpy": _numpy,
    "tensorflow": _tensorflow, "onnxruntime": _onnxruntime, "cublas": _cublas,
}


def library_version(library: str) -> str | None:
    """The version of what actually multiplies (oneDNN's own version comes from the probe)."""
    from importlib import metadata

    if library == "numpy":
        blas = _numpy_blas()
        return f"numpy {metadata.version('numpy')}; " + (
            f"{blas['internal_api']} {blas['version']}" if blas else "BLAS unknown")
    if library in ("torch.matmul", "onednn", "cublas"):
        import torch

        extra = f", CUDA {torch.version.cuda}" if library == "cublas" else ""
        return f"torch {torch.__version__}{extra}"
    try:
        return f"{library} {metadata.version(library)}"  # tensorflow, onnxruntime
    except metadata.PackageNotFoundError:
        return None


def _numpy_blas() -> dict[str, Any] | None:
    from threadpoolctl import threadpool_info

    import numpy  # noqa: F401 - loads numpy's BLAS so threadpoolctl sees it

    for lib in threadpool_info():
        if lib.get("user_api") == "blas" and "numpy" in lib.get("filepath", ""):
            return lib
    blas = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
    return blas[0] if blas else None


# ----------------------------------------------------------------------------- timing (child)


def time_library(library: str, dtype: str, sizes: list[int], repeats: int, min_time_s: float,
                 threads: int) -> dict[str, Any]:
    """Best FLOP/s over the sizes (best of ``repeats`` rounds per size). Runs in the child."""
    per_size = []
    for n in sizes:
        call = FACTORIES[library](dtype, n, threads)
        call()  # warm-up: library init, packing, autotuning
        rates = []
        for _ in range(repeats):
            calls, t0 = 0, time.perf_counter()
            while True:
                call()
                calls += 1
                elapsed = time.perf_counter() - t0
                if elapsed >= min_time_s:
                    break
            rates.append(2 * n**3 * calls / elapsed)
        per_size.append({"size": n, "flops_per_s": max(rates), "samples": rates})
    best = max(per_size, key=lambda p: p["flops_per_s"])
    return {"flops_per_s": best["flops_per_s"], "size": best["size"], "per_size": per_size}


# ----------------------------------------------------------------------------- ISA (probe)

_MKL_INFO = re.compile(r"MKL_VERBOSE (oneMKL|Intel\(R\) MKL) (.+?) Product build \S+ for (.+?),"
                       r" Lnx")
_ONEDNN_VERSION = re.compile(r"onednn_verbose,(?:v\d+,)?info,oneDNN (v[\d.]+)")
_ONEDNN_ISA = re.compile(r"onednn_verbose,(?:v\d+,)?info,cpu,isa:(.+)")
_ONEDNN_GEMM = re.compile(r"onednn_verbose,(?:v\d+,)?(?:primitive,)?exec,cpu,"
                          r"(matmul|inner_product),([^,]+),")


def parse_verbose(text: str) -> dict[str, Any]:
    """The ISA facts a library printed in verbose mode: MKL's banner, oneDNN's ISA line and the
    implementation its GEMM primitive ran (e.g. ``brg_matmul:avx512_core``)."""
    out: dict[str, Any] = {}
    if m := _MKL_INFO.search(text):
        out["mkl"] = {"version": f"{m.group(1)} {m.group(2)}", "isa": m.group(3).strip()}
    # oneDNN prints its info lines once per process; GEMM exec lines every time
    onednn: dict[str, Any] = {}
    if m := _ONEDNN_ISA.search(text):
        onednn["isa"] = m.group(1).strip()
    if v := _ONEDNN_VERSION.search(text):
        onednn["version"] = v.group(1)
    if impls := sorted({g.group(2) for g in _ONEDNN_GEMM.finditer(text)}):
        onednn["gemm_implementation"] = impls
    if onednn:
        out["onednn"] = onednn
    return out


def isa_of(library: str, verbose: dict[str, Any], self_report: dict[str, Any]
           ) -> tuple[str | None, str]:
    """(ISA the library ran with, how that is known), from its verbose banners or, failing
    those, from what the probe child read off the library (``_self_report``)."""
    if library == "torch.matmul":
        if "mkl" in verbose:
            return verbose["mkl"]["isa"], f"MKL_VERBOSE banner ({verbose['mkl']['version']})"
        return (f"ATen CPU capability {self_report.get('torch_cpu_capability')}",
                "torch.backends.cpu.get_cpu_capability() (the BLAS did not report its kernel)")
    if library in ("onednn", "tensorflow") and verbose.get("onednn", {}).get("gemm_implementation"):
        d = verbose["onednn"]
        impl = ", ".join(d.get("gemm_implementation", [])) or "no GEMM primitive seen"
        return (f"{d.get('isa', 'ISA line not printed')} (GEMM ran {impl})",
                f"ONEDNN_VERBOSE ({d.get('version', 'oneDNN')})")
    if library == "tensorflow":
        return None, ("TensorFlow printed no oneDNN GEMM in verbose mode (Eigen kernels): "
                      "ISA not reported")
    if library == "numpy":
        blas = self_report.get("numpy_blas")
        if blas:
            return (f"{blas['internal_api']} kernel {blas.get('architecture')}",
                    "threadpoolctl (OpenBLAS core type; OPENBLAS_CORETYPE="
                    f"{self_report.get('openblas_coretype') or 'unset'})")
        return None, "threadpoolctl found no BLAS loaded by numpy"
    if library == "onnxruntime":
        return None, ("MLAS does not report its kernel; it dispatches on CPUID at run time "
                      "(the CPU's flags are in the peak file's cpu facts)")
    if library == "cublas":
        return self_report.get("cuda_capability"), "torch.cuda.get_device_capability()"
    return None, "not reported"


def _self_report(library: str) -> dict[str, Any]:
    if library in ("torch.matmul", "onednn"):
        import torch

        return {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if library == "numpy":
        blas = _numpy_blas()
        return {"numpy_blas": blas and {k: blas.get(k) for k in
                                        ("internal_api", "version", "architecture")},
                "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}
    if library == "cublas":
        import torch

        major, minor = torch.cuda.get_device_capability()
        return {"cuda_capability": f"sm_{major}{minor} ({torch.cuda.get_device_name()})"}
    return {}


def _probe(library: str, dtype: str, threads: int) -> dict[str, Any]:
    """Child side of the ISA probe: one small product with verbose modes on (their banners
    go to stdout, which the parent parses), plus what the library says about itself."""
    FACTORIES[library](dtype, 256, threads)()
    return {"version": library_version(library), "self_report": _self_report(library)}


# ----------------------------------------------------------------------------- parent


def measure_library(library: str, dtype: str, sizes: list[int], repeats: int,
                    min_time_s: float, threads: int, timeout_s: float = 900.0
                    ) -> dict[str, Any]:
    """One library's entry for peak.json: status ok (with FLOP/s, version, ISA), unavailable
    (with the reason) or failed (with the child's error)."""
    if library not in FACTORIES:
        raise ValueError(f"library={library!r} is not one of {sorted(FACTORIES)}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {list(DTYPES)}")
    entry: dict[str, Any] = {"library": library, "description": LIBRARIES[library],
                             "dtype": dtype, "threads": threads}
    common = ["--dtype", dtype, "--threads", str(threads)]
    probe = _child([library, "--probe", *common], timeout_s, verbose=True)
    if probe["status"] != "ok":
        return {**entry, **{k: probe[k] for k in ("status", "reason")}, "flops_per_s": None}
    verbose = parse_verbose(probe["stdout"])
    timed = _child([library, *common, "--sizes", *map(str, sizes), "--repeats", str(repeats),
                    "--min-time-s", str(min_time_s)], timeout_s)
    if timed["status"] != "ok":
        return {**entry, **{k: timed[k] for k in ("status", "reason")}, "flops_per_s": None}
    version = probe["result"]["version"]
    if library in ("onednn", "tensorflow") and verbose.get("onednn", {}).get("gemm_implementation"):
        version = f"{version}; oneDNN {verbose['onednn'].get('version', '?')}"
    isa, isa_source = isa_of(library, verbose, probe["result"]["self_report"])
    return {**entry, "status": "ok", "reason": "", "version": version, "isa": isa,
            "isa_source": isa_source, **timed["result"]}


_RESULT = "SEEDBENCH_PEAK_RESULT "


def _child(args: list[str], timeout_s: float, verbose: bool = False) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "suite.peak.libraries", *args]
    try:
        code, stdout, stderr = _run(cmd, timeout_s, verbose)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {timeout_s:g} s"}
    lines = [line for line in stdout.splitlines() if line.startswith(_RESULT)]
    if code != 0 or not lines:
        tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"status": "failed", "reason": f"exit {code}: {tail[:300]}"}
    out = json.loads(lines[-1].removeprefix(_RESULT))
    out["stdout"] = stdout
    return out


def _run(cmd: list[str], timeout_s: float, verbose: bool) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``cmd``: a timed run forked by a warm server (no torch
    import of its own, ~1.5 s each on a 2-core EPYC); the ``verbose`` probe started cold with
    the libraries' verbose variables (they would key a server of their own, whose start costs
    more than the imports it saves)."""
    from suite.launch import warm as warm_start

    env = {**os.environ, **VERBOSE_ENV} if verbose else dict(os.environ)
    if not verbose:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = warm_start.popen(cmd, env, stderr=err.fileno(), stdout=out.fileno())
            if proc is not None:
                try:
                    code = proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    raise
                out.seek(0)
                err.seek(0)
                return code, out.read(), err.read()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    return proc.returncode, proc.stdout, proc.stderr


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="one library's GEMM, in this process (a child of "
                                            "seedbench peak)")
    p.add_argument("library", choices=sorted(FACTORIES))
    p.add_argument("--dtype", required=True, choices=DTYPES)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--sizes", nargs="+", type=int, default=[1024])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--min-time-s", type=float, default=0.2)
    p.add_argument("--probe", action="store_true", help="the ISA probe run (verbose modes on)")
    a = p.parse_args(argv)
    try:
        if a.probe:
            result = _probe(a.library, a.dtype, a.threads)
        else:
            result = time_library(a.library, a.dtype, a.sizes, a.repeats, a.min_time_s,
                                  a.threads)
        from suite.launch.warm import process_start

        out = {"status": "ok", "result": {**result, "process_start": process_start()}}
    except LibraryUnavailable as e:
        out = {"status": "unavailable", "reason": str(e)}
    sys.stdout.flush()
    print(_RESULT + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())


# ----------------------------------------------------------------------------- observed use

_MKL_GEMM = re.compile(r"MKL_VERBOSE (?:S|D|H|BF16)?GEMM|MKL_VERBOSE \w*gemm", re.I)


def observe_gemm_library(fn: Callable[[], Any]) -> dict[str, Any]:
    """Which GEMM library one call of ``fn`` reached through torch: run it once with torch's
    MKL and oneDNN verbose modes on, count the GEMM calls each logged. Libraries outside torch
    (TensorFlow's own oneDNN copy, ONNX Runtime's MLAS) log nothing here, so zero counts mean
    "not torch's BLAS or oneDNN", not "no GEMMs"."""
    import tempfile

    import torch

    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+") as log:
        os.dup2(log.fileno(), 1)
        try:
            with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON), \
                    torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                fn()
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        text = log.read()
    mkl = len(_MKL_GEMM.findall(text))
    onednn = len(_ONEDNN_GEMM.findall(text))
    seen = parse_verbose(text)
    libs = [name for name, n in (("MKL", mkl), ("oneDNN", onednn)) if n]
    return {"mkl_gemm_calls": mkl, "onednn_gemm_calls": onednn,
            "onednn_implementations": seen.get("onednn", {}).get("gemm_implementation", []),
            "summary": " + ".join(libs) if libs else
            "neither torch's MKL nor its oneDNN (the framework's own GEMM library)"}
