"""CPU checks of the original ByteTransformer's protocol front
(examples/external-bytetransformer/seedbench_external_bytetransformer.py; no GPU, no bt_bert).

- the host embeddings equal HF's BertEmbeddings;
- the weight conversion: a float64 numpy restatement of ByteTransformer's layer math (its
  unit_test/python_scripts/bert_transformer_test.py) on the converted weights reproduces HF's
  BertModel, and weights.bin decodes back in the order bt_bert.cu reads it;
- the protocol: `unavailable` replies (cpu, bf16, no binary, no GPU) and a full `ok` run through a
  stand-in for bt_bert that reads the run folder as bt_bert.cu does and computes in numpy.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HERE = Path(__file__).resolve().parent.parent / "examples" / "external-bytetransformer"
sys.path.insert(0, str(HERE))
import seedbench_external_bytetransformer as front  # noqa: E402

B, S = 3, 12
LENGTHS = [12, 7, 3]


def make_model(tmp: Path, hidden_act: str = "gelu") -> tuple[Path, "torch.nn.Module"]:
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, max_position_embeddings=32, type_vocab_size=2,
        hidden_act=hidden_act, attn_implementation="eager")
    model = transformers.BertModel(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embeddings" in name and "LayerNorm" not in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif "LayerNorm.weight" in name:
                p.copy_(1 + 0.05 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:  # Linear weights; Q and K larger so that the attention is far from uniform
                gain = math.sqrt(3.0) if ("query" in name or "key" in name) else 1.0
                p.copy_(gain * torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    model_dir = tmp / "model"
    model.save_pretrained(model_dir, safe_serialization=True)
    return model_dir, model


def make_batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 50, size=(B, S))
    mask = np.zeros((B, S), dtype=np.int64)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1
    ids = ids * mask  # padding token 0
    types = (rng.random((B, S)) < 0.5).astype(np.int64) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def hf_reference(model, batch) -> np.ndarray:
    m = model.double()
    with torch.no_grad():
        out = m(**{k: torch.tensor(v) for k, v in batch.items()}).last_hidden_state
    return out.numpy()


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu(x, approx):
    if approx:
        return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def bt_layers(x, mask, layers, heads, eps, approx_gelu):
    """ByteTransformer's layer, as its python unit test states it, in float64."""
    b, s, h = x.shape
    d = h // heads
    for w in layers:
        qkv = x @ w["qkv_kernel"] + w["qkv_bias"]
        q, k, v = (t.reshape(b, s, heads, d).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, -1))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        scores = scores - 10000.0 * (1.0 - mask[:, None, None, :])
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
        a = ctx @ w["attr_output_kernel"] + w["attr_output_bias"] + x
        a = layer_norm(a, w["attr_output_ln_gamma"], w["attr_output_ln_beta"], eps)
        f = gelu(a @ w["inter_kernel"] + w["inter_bias"], approx_gelu)
        f = f @ w["output_kernel"] + w["output_bias"] + a
        x = layer_norm(f, w["output_ln_gamma"], w["output_ln_beta"], eps)
    return x


def decode_weights(blob: bytes, h: int, inter: int, n_layers: int) -> list[dict[str, np.ndarray]]:
    """weights.bin read back in bt_bert.cu's order."""
    shapes16 = {"qkv_kernel": (h, 3 * h), "qkv_bias": (3 * h,), "attr_output_kernel": (h, h),
                "attr_output_bias": (h,), "inter_kernel": (h, inter), "inter_bias": (inter,),
                "output_kernel": (inter, h), "output_bias": (h,)}
    assert tuple(shapes16) == front.FP16_PARTS
    layers, off = [], 0
    for _ in range(n_layers):
        w = {}
        for name, shape in shapes16.items():
            n = int(np.prod(shape))
            w[name] = np.frombuffer(blob, "<f2", n, off).reshape(shape).astype(np.float64)
            off += 2 * n
        for name in front.FP32_PARTS:
            w[name] = np.frombuffer(blob, "<f4", h, off).astype(np.float64)
            off += 4 * h
        layers.append(w)
    assert off == len(blob)
    return layers


def test_embeddings_match_hf(tmp_path):
    model_dir, model = make_model(tmp_path)
    batch = make_batch()
    config, tensors, prefix = front.load_model(model_dir)
    ours = front.embeddings(config, tensors, prefix, batch["input_ids"], batch["token_type_ids"])
    with torch.no_grad():
        ref = model.double().embeddings(input_ids=torch.tensor(batch["input_ids"]),
                                        token_type_ids=torch.tensor(batch["token_type_ids"]))
    np.testing.assert_allclose(ours, ref.numpy(), rtol=0, atol=1e-10)


def test_converted_weights_reproduce_hf(tmp_path):
    model_dir, model = make_model(tmp_path)
    batch = make_batch()
    config, tensors, prefix = front.load_model(model_dir)
    assert front.config_problem(config, S) is None
    x = front.embeddings(config, tensors, prefix, batch["input_ids"], batch["token_type_ids"])
    layers = [{k: v.astype(np.float64) for k, v in front.layer_weights(tensors, prefix, i).items()}
              for i in range(config["num_hidden_layers"])]
    valid = batch["attention_mask"].astype(bool)
    ref = hf_reference(model, batch)
    # exact GELU and HF's eps: the layout alone, to float64 rounding
    ours = bt_layers(x, batch["attention_mask"], layers, config["num_attention_heads"],
                     config["layer_norm_eps"], approx_gelu=False)
    assert np.abs(ours - ref)[valid].max() < 1e-9
    # what ByteTransformer computes (tanh GELU, eps 1e-6), weights and input rounded to fp16
    blob = b"".join(front.layer_blob(front.layer_weights(tensors, prefix, i))
                    for i in range(config["num_hidden_layers"]))
    decoded = decode_weights(blob, 64, 256, config["num_hidden_layers"])
    x16 = x.astype(np.float16).astype(np.float64)
    bt = bt_layers(x16, batch["attention_mask"], decoded, 4, 1e-6, approx_gelu=True)
    err = np.abs(bt - ref)[valid].max()
    assert err < 2e-2, err  # the suite's fp16 gate is 5e-2


def test_safetensors_reader_without_the_package(tmp_path, monkeypatch):
    model_dir, _ = make_model(tmp_path)
    with_package = front.read_safetensors(model_dir / "model.safetensors")
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)  # import fails
    without = front.read_safetensors(model_dir / "model.safetensors")
    assert with_package.keys() == without.keys()
    for name, value in with_package.items():
        np.testing.assert_array_equal(value, without[name])


def test_config_problems():
    base = {"model_type": "bert", "hidden_size": 768, "num_attention_heads": 12,
            "intermediate_size": 3072, "hidden_act": "gelu", "max_position_embeddings": 512}
    assert front.config_problem(base, 512) is None
    assert "GELU" in front.config_problem({**base, "hidden_act": "relu"}, 128)
    assert "multiple" in front.config_problem({**base, "intermediate_size": 3000}, 128)
    assert "max_position" in front.config_problem(base, 600)


def run_front(request: dict, tmp: Path, *extra: str, env: dict | None = None) -> dict:
    path = tmp / "request.json"
    path.write_text(json.dumps(request))
    proc = subprocess.run([sys.executable, str(HERE / "seedbench_external_bytetransformer.py"),
                           *extra, str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    reply = json.loads(proc.stdout.strip().splitlines()[-1])
    assert reply["protocol"] == front.PROTOCOL
    return reply


def request_for(model_dir: Path, tmp: Path, device="cuda", dtype="fp16") -> dict:
    batch = make_batch()
    return {"protocol": front.PROTOCOL, "task": "bert-encoder", "model_dir": str(model_dir),
            "dtype": dtype, "device": device, "threads": 1,
            "batch": {**{k: v.tolist() for k, v in batch.items()}, "lengths": LENGTHS},
            "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 0.0, "max_repeats": 5},
            "output_path": str(tmp / "out.npy")}


def test_unavailable_replies(tmp_path):
    model_dir, _ = make_model(tmp_path)
    for device, dtype, why in (("cpu", "fp16", "CUDA"), ("cuda", "bf16", "fp16 only")):
        reply = run_front(request_for(model_dir, tmp_path, device, dtype), tmp_path)
        assert reply["status"] == "unavailable" and why in reply["reason"]
    reply = run_front(request_for(model_dir, tmp_path), tmp_path, "--binary", "/nonexistent/bt")
    assert reply["status"] == "unavailable" and "not found" in reply["reason"]


def test_unavailable_without_gpu(tmp_path):
    """The real bt_bert (if built) on a machine without a GPU: `unavailable`, with its reason."""
    binary = os.environ.get("BT_BERT_BINARY") or str(HERE / "build" / "bt_bert")
    if not Path(binary).exists():
        pytest.skip("bt_bert not built (set BT_BERT_BINARY)")
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    model_dir, _ = make_model(tmp_path)
    reply = run_front(request_for(model_dir, tmp_path), tmp_path, "--binary", binary)
    assert reply["status"] == "unavailable" and reply["reason"], reply
    assert not (tmp_path / "out.npy").exists()


STAND_IN = '''#!{python}
# A stand-in for bt_bert: reads a run folder as bt_bert.cu does and computes in numpy.
import math, sys
import numpy as np
sys.path.insert(0, {test_dir!r})
import seedbench_external_bytetransformer as front
{helpers}
if sys.argv[1] == "--probe":
    print("ok 1\\ndevice stand-in\\narch sm_90\\nbuilt_for sm_90\\nbytetransformer_commit test")
    sys.exit(0)
d = sys.argv[1]
cfg = dict(line.split() for line in open(d + "/config.txt"))
b, s, h = int(cfg["batch_size"]), int(cfg["seq_len"]), int(cfg["hidden_size"])
layers = decode_weights(open(d + "/weights.bin", "rb").read(), h, int(cfg["intermediate_size"]),
                        int(cfg["num_layers"]))
x = np.fromfile(d + "/input.f16", "<f2").reshape(b, s, h).astype(np.float64)
mask = np.fromfile(d + "/mask.i32", "<i4").reshape(b, s).astype(np.float64)
y = bt_layers(x, mask, layers, int(cfg["num_heads"]), 1e-6, True)
y.astype("<f4").tofile(d + "/output.f32")
n = int(cfg["min_repeats"])
open(d + "/samples.txt", "w").write("0.001\\n" * n)
open(d + "/wall.txt", "w").write("0.0011\\n" * n)
open(d + "/info.txt", "w").write("device stand-in\\narch sm_90\\nremove_padding 1\\n"
                                 "attention test\\nbytetransformer_commit test\\n")
'''


def test_ok_run_through_stand_in(tmp_path):
    model_dir, model = make_model(tmp_path)
    stand_in = tmp_path / "bt_bert"
    helpers = "\n".join(inspect.getsource(f) for f in (layer_norm, gelu, bt_layers, decode_weights))
    stand_in.write_text(STAND_IN.format(python=sys.executable, test_dir=str(HERE),
                                        helpers=helpers))
    stand_in.chmod(0o755)
    request = request_for(model_dir, tmp_path)
    reply = run_front(request, tmp_path, "--binary", str(stand_in))
    assert reply["status"] == "ok", reply
    assert reply["samples_s"] == [0.001] * 3
    assert reply["details"]["padding_free"] is True
    out = np.load(tmp_path / "out.npy")
    assert out.dtype == np.float32 and out.shape == (B, S, 64)
    batch = make_batch()
    valid = batch["attention_mask"].astype(bool)
    assert np.abs(out - hf_reference(model, batch))[valid].max() < 2e-2
