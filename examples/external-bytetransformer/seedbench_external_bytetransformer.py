#!/usr/bin/env python3
"""seedbench's ``external`` baseline for the original ByteTransformer CUDA library (protocol
seedbench-external/1): this front reads the request, converts the canonical BERT weights of
``model_dir`` into ByteTransformer's layout (fp16), computes the embeddings on the host (numpy,
float64, rounded to fp16: ByteTransformer implements only the encoder layers), writes them to a
run folder and runs ``bt_bert`` (``bt_bert.cu``, built with this folder's CMakeLists.txt), which
runs and times the encoder layers with ByteTransformer's ``BertTransformer``. See README.md.

Usage: seedbench_external_bytetransformer.py [--binary PATH] REQUEST.json
``--binary`` defaults to $BT_BERT_BINARY, then ``build/bt_bert`` next to this file, then
``bt_bert`` on PATH. Needs numpy only (safetensors is used when installed; torch is not
needed).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

PROTOCOL = "seedbench-external/1"
UNAVAILABLE_RC = 3  # bt_bert's exit status for "cannot run here"
# GELU forms whose HF name ByteTransformer computes (it always uses the tanh approximation).
GELU_ACTS = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"}
TIMED = ("the model's num_hidden_layers ByteTransformer encoder layers (BertTransformer::infer "
         "once per layer, from the fp16 embeddings already on the GPU to the last layer's "
         "output on the GPU), with CUDA events on the stream around the whole stack; each "
         "layer's padding removal and restoration and its blocking copy of the valid-token "
         "count to the host are inside. Not timed: the embeddings (computed on the host), the "
         "host<->device copies, the weight conversion and the process start.")


def reply(**fields: Any) -> None:
    print(json.dumps({"protocol": PROTOCOL, **fields}), flush=True)


# --- weights ------------------------------------------------------------------------------------

SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """model.safetensors with the safetensors package, or with this reader of its format (an
    8-byte header length, a JSON header, the raw tensors) where the package is missing."""
    try:
        from safetensors.numpy import load_file
    except ImportError:
        pass
    else:
        return load_file(str(path))
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] not in SAFETENSORS_DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {meta['dtype']}, not read here")
        begin, end = meta["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end],
                                  SAFETENSORS_DTYPES[meta["dtype"]]).reshape(meta["shape"])
    return out


def load_model(model_dir: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray], str]:
    """config.json, the tensors of model.safetensors (numpy) and the name prefix of the
    BertModel inside ('' for a BertModel, 'bert.' for a task model)."""
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    tensors = read_safetensors(model_dir / "model.safetensors")
    ends = [k for k in tensors if k.endswith("embeddings.word_embeddings.weight")]
    if not ends:
        raise ValueError(f"{model_dir}/model.safetensors has no embeddings.word_embeddings.weight")
    prefix = ends[0][: -len("embeddings.word_embeddings.weight")]
    return config, tensors, prefix


def config_problem(config: dict[str, Any], seq_len: int) -> str | None:
    """Why ByteTransformer cannot compute this model, or None."""
    if config.get("model_type", "bert") != "bert":
        return f"model_type {config.get('model_type')!r}: this adapter maps BERT only"
    act = config.get("hidden_act", "gelu")
    if act not in GELU_ACTS:
        return f"hidden_act {act!r}: ByteTransformer's BERT layer computes GELU only"
    if config.get("position_embedding_type", "absolute") != "absolute":
        return "position_embedding_type must be 'absolute'"
    h, heads, inter = (config["hidden_size"], config["num_attention_heads"],
                       config["intermediate_size"])
    if h % heads or (h // heads) % 2:
        return f"hidden_size {h} / {heads} heads: the head size must be an even integer"
    if inter % h:
        return (f"intermediate_size {inter} is not a multiple of hidden_size {h} (ByteTransformer "
                f"takes it as a factor)")
    if h % 8 or h > 2048 or inter > 8192:
        return (f"hidden_size {h} / intermediate_size {inter}: ByteTransformer's kernels need "
                f"hidden_size % 8 == 0, hidden_size <= 2048, intermediate_size <= 8192")
    if seq_len > 1024:
        return f"sequence length {seq_len} > 1024 (ByteTransformer's limit)"
    if seq_len > config.get("max_position_embeddings", 512):
        return f"sequence length {seq_len} > max_position_embeddings"
    return None


def layer_weights(tensors: dict[str, np.ndarray], prefix: str, layer: int) -> dict[str, np.ndarray]:
    """One encoder layer in ByteTransformer's layout (float32 here): kernels are [in, out]
    row-major (out = x @ kernel, i.e. HF's Linear weight transposed), Q, K and V side by side."""
    p = f"{prefix}encoder.layer.{layer}."

    def t(name: str) -> np.ndarray:
        return np.asarray(tensors[p + name], dtype=np.float32)

    return {
        "qkv_kernel": np.concatenate([t("attention.self.query.weight").T,
                                      t("attention.self.key.weight").T,
                                      t("attention.self.value.weight").T], axis=1),
        "qkv_bias": np.concatenate([t("attention.self.query.bias"),
                                    t("attention.self.key.bias"),
                                    t("attention.self.value.bias")]),
        "attr_output_kernel": t("attention.output.dense.weight").T,
        "attr_output_bias": t("attention.output.dense.bias"),
        "inter_kernel": t("intermediate.dense.weight").T,
        "inter_bias": t("intermediate.dense.bias"),
        "output_kernel": t("output.dense.weight").T,
        "output_bias": t("output.dense.bias"),
        "attr_output_ln_gamma": t("attention.output.LayerNorm.weight"),
        "attr_output_ln_beta": t("attention.output.LayerNorm.bias"),
        "output_ln_gamma": t("output.LayerNorm.weight"),
        "output_ln_beta": t("output.LayerNorm.bias"),
    }


FP16_PARTS = ("qkv_kernel", "qkv_bias", "attr_output_kernel", "attr_output_bias", "inter_kernel",
              "inter_bias", "output_kernel", "output_bias")
FP32_PARTS = ("attr_output_ln_gamma", "attr_output_ln_beta", "output_ln_gamma", "output_ln_beta")


def layer_blob(w: dict[str, np.ndarray]) -> bytes:
    """The bytes of one layer in weights.bin (order and types as bt_bert.cu reads them)."""
    parts = [np.ascontiguousarray(w[k], dtype="<f2").tobytes() for k in FP16_PARTS]
    parts += [np.ascontiguousarray(w[k], dtype="<f4").tobytes() for k in FP32_PARTS]
    return b"".join(parts)


def embeddings(config: dict[str, Any], tensors: dict[str, np.ndarray], prefix: str,
               input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
    """BertEmbeddings (word + absolute position + token type, then LayerNorm) in float64:
    [B, S, H]. Positions are 0..S-1 for every row (the batch is right-padded)."""
    e = f"{prefix}embeddings."

    def t(name: str) -> np.ndarray:
        return np.asarray(tensors[e + name], dtype=np.float64)

    s = input_ids.shape[1]
    x = t("word_embeddings.weight")[input_ids] + t("position_embeddings.weight")[:s][None]
    if e + "token_type_embeddings.weight" in tensors:
        x = x + t("token_type_embeddings.weight")[token_type_ids]
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    x = (x - mean) / np.sqrt(var + config.get("layer_norm_eps", 1e-12))
    return x * t("LayerNorm.weight") + t("LayerNorm.bias")


# --- the binary ---------------------------------------------------------------------------------

def find_binary(argv: list[str]) -> str | None:
    if "--binary" in argv:
        return argv[argv.index("--binary") + 1]
    if os.environ.get("BT_BERT_BINARY"):
        return os.environ["BT_BERT_BINARY"]
    local = Path(__file__).resolve().parent / "build" / "bt_bert"
    if local.exists():
        return str(local)
    return shutil.which("bt_bert")


def cublas_dirs() -> list[str]:
    """Folders of libcublas.so.* that pip's nvidia wheels (torch's dependencies) installed, so
    bt_bert finds cuBLAS without a system CUDA."""
    found = []
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib"):
            d = Path(base) / sub
            if d.is_dir() and any(d.glob("libcublas.so*")) and str(d) not in found:
                found.append(str(d))
    return found


def child_env(device: str) -> tuple[dict[str, str] | None, str]:
    """The environment for bt_bert (which uses CUDA device 0), or None and the reason."""
    env = dict(os.environ)
    libs = [*filter(None, os.environ.get("BT_BERT_LIBRARY_PATH", "").split(":")), *cublas_dirs(),
            *filter(None, env.get("LD_LIBRARY_PATH", "").split(":"))]
    env["LD_LIBRARY_PATH"] = ":".join(libs)
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v for v in visible.split(",") if v.strip()]
        if index >= len(entries):
            return None, f"{device} is not among CUDA_VISIBLE_DEVICES={visible!r}"
        env["CUDA_VISIBLE_DEVICES"] = entries[index].strip()
    else:
        env["CUDA_VISIBLE_DEVICES"] = str(index)
    return env, ""


def parse_kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            out[key] = value.strip()
    return out


def tail(text: str, n: int = 6) -> str:
    return " | ".join(text.strip().splitlines()[-n:])


def probe(binary: str, env: dict[str, str]) -> tuple[dict[str, str] | None, str]:
    """``bt_bert --probe``: its device info, or None and why it cannot run here."""
    try:
        proc = subprocess.run([binary, "--probe"], capture_output=True, text=True, env=env,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"bt_bert ({binary}) cannot run: {exc}"
    info = parse_kv(proc.stdout)
    if proc.returncode == 0 and info.get("ok") == "1":
        return info, ""
    if proc.returncode == UNAVAILABLE_RC and "unavailable" in info:
        return None, info["unavailable"]
    return None, (f"bt_bert ({binary}) cannot run here (exit {proc.returncode}): "
                  f"{tail(proc.stderr or proc.stdout)}")


# --- main ---------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[-1]).read_text())
    if request.get("protocol") != PROTOCOL:
        reply(status="failed", reason=f"unknown protocol {request.get('protocol')!r}")
        return 1
    device, dtype = str(request["device"]), str(request["dtype"])
    if not device.startswith("cuda"):
        reply(status="unavailable", reason=f"ByteTransformer runs on CUDA GPUs, not {device!r}")
        return 0
    if dtype != "fp16":
        reply(status="unavailable",
              reason=f"this ByteTransformer build computes fp16 only, not {dtype}")
        return 0
    binary = find_binary(argv[:-1])
    if binary is None or not Path(binary).exists():
        reply(status="unavailable",
              reason=f"bt_bert not found ({binary or 'no --binary, $BT_BERT_BINARY, build/bt_bert'}"
                     f" or PATH): build it with this folder's CMakeLists.txt (README.md)")
        return 0
    env, why = child_env(device)
    if env is None:
        reply(status="unavailable", reason=why)
        return 0
    device_info, why = probe(binary, env)
    if device_info is None:
        reply(status="unavailable", reason=why)
        return 0

    batch = request["batch"]
    input_ids = np.asarray(batch["input_ids"], dtype=np.int64)
    mask = np.asarray(batch["attention_mask"], dtype=np.int32)
    token_type_ids = np.asarray(batch.get("token_type_ids") or np.zeros_like(input_ids),
                                dtype=np.int64)
    b, s = input_ids.shape
    config, tensors, prefix = load_model(request["model_dir"])
    problem = config_problem(config, s)
    if problem:
        reply(status="unavailable", reason=problem)
        return 0
    h, layers = config["hidden_size"], config["num_hidden_layers"]
    policy = {"warmup": 1, "min_repeats": 3, "min_time_s": 1.0, "max_repeats": 1000,
              **request.get("timing", {})}

    run_dir = Path(tempfile.mkdtemp(prefix="bt-bert-"))
    try:
        with open(run_dir / "weights.bin", "wb") as f:
            for layer in range(layers):
                f.write(layer_blob(layer_weights(tensors, prefix, layer)))
        x = embeddings(config, tensors, prefix, input_ids, token_type_ids)
        x.astype("<f2").tofile(run_dir / "input.f16")
        mask.astype("<i4").tofile(run_dir / "mask.i32")
        (run_dir / "config.txt").write_text("".join(f"{k} {v}\n" for k, v in {
            "batch_size": b, "seq_len": s, "hidden_size": h,
            "num_heads": config["num_attention_heads"],
            "intermediate_size": config["intermediate_size"], "num_layers": layers,
            "warmup": int(policy["warmup"]), "min_repeats": int(policy["min_repeats"]),
            "min_time_s": float(policy["min_time_s"]), "max_repeats": int(policy["max_repeats"]),
            "remove_padding": 1, "fused_attention": 1}.items()))
        proc = subprocess.run([binary, str(run_dir)], capture_output=True, text=True, env=env)
        if proc.returncode == UNAVAILABLE_RC:
            reason = (run_dir / "unavailable.txt").read_text().strip() \
                if (run_dir / "unavailable.txt").exists() else tail(proc.stderr)
            reply(status="unavailable", reason=reason)
            return 0
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            reply(status="failed", reason=f"bt_bert exited with {proc.returncode}: "
                                          f"{tail(proc.stderr)}")
            return 1
        out = np.fromfile(run_dir / "output.f32", dtype="<f4").reshape(b, s, h)
        samples = [float(v) for v in (run_dir / "samples.txt").read_text().split()]
        wall = [float(v) for v in (run_dir / "wall.txt").read_text().split()]
        info = parse_kv((run_dir / "info.txt").read_text())
    finally:
        if not os.environ.get("BT_BERT_KEEP_RUN_DIR"):
            shutil.rmtree(run_dir, ignore_errors=True)
    np.save(request["output_path"], out.astype(np.float32))
    remove_padding = info.get("remove_padding") == "1"
    reply(status="ok", samples_s=samples, details={
        "padding_free": remove_padding,
        "framework": "ByteTransformer (original CUDA library), fp16, BertTransformer per layer",
        "bytetransformer_commit": info.get("bytetransformer_commit"),
        "device_name": info.get("device"), "arch": info.get("arch"),
        "built_for": info.get("built_for"), "cuda_compiler": info.get("cuda_compiler"),
        "remove_padding": remove_padding
        if remove_padding else "off (ByteTransformer turns it off for batches of 1 or 2)",
        "attention": info.get("attention"),
        "timer": "CUDA events (bt_bert)", "timed": TIMED, "layers": layers,
        "wall_median_s": statistics.median(wall) if wall else None,
        "embeddings": "host (numpy float64, rounded to fp16), untimed",
        "known_differences": [
            "GELU: ByteTransformer's tanh approximation (config hidden_act "
            f"{config.get('hidden_act', 'gelu')!r})",
            "LayerNorm eps: 1e-6 in ByteTransformer's kernels (config "
            f"{config.get('layer_norm_eps', 1e-12):g})",
            "fp16 everywhere except LayerNorm statistics/parameters: cuBLAS GEMMs with fp16 "
            "compute type (CUDA_R_16F), fp16 residual adds",
        ],
    })
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
