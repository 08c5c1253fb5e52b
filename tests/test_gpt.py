"""The GPT reference model: shapes, masks, and that every MegaScale switch keeps (or, for
parallel_block, deliberately changes) the function."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from reference_impl import gpt as gpt_module
from reference_impl.configs import GPTConfig
from reference_impl.gpt import GPT, window_mask

TINY = dict(vocab_size=37, n_layer=2, n_embd=32, n_head=4, block_size=16)
ARCHS = [dict(mlp=mlp, norm=norm, rope=rope, n_kv_head=kv)
         for mlp, norm, rope, kv in itertools.product(("gelu", "swiglu"), ("layernorm", "rmsnorm"),
                                                      (False, True), (None, 2))]


pytestmark = pytest.mark.usefixtures("one_thread")


def _model(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**TINY, **overrides})).eval()


def _same_weights(src: GPT, **overrides) -> GPT:
    """A model of src's config with ``overrides``, carrying src's weights."""
    dst = GPT(GPTConfig(**{**src.config.__dict__, **overrides})).eval()
    dst.load_state_dict(src.state_dict())
    return dst


def _ids(batch: int = 2, seq: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (batch, seq),
                         generator=torch.Generator().manual_seed(seed))


def _grads(model: GPT, idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    _, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_shapes_and_loss():
    model = _model()
    idx = _ids()
    logits, loss = model(idx)
    assert logits.shape == (2, 12, TINY["vocab_size"]) and loss is None
    logits, loss = model(idx[:, :-1], idx[:, 1:])
    assert loss.dim() == 0 and math.isfinite(loss.item())
    # about ln(vocab) at init: the logits start near uniform
    assert abs(loss.item() - math.log(TINY["vocab_size"])) < 0.3
    with pytest.raises(ValueError, match="block_size=16"):
        model(_ids(seq=17))


def test_ignored_targets_do_not_count():
    model, idx = _model(), _ids()
    targets = idx.clone()
    targets[:, 6:] = -1
    _, masked = model(idx, targets)
    logits, _ = model(idx)
    expected = F.cross_entropy(logits[:, :6].flatten(0, 1), idx[:, :6].flatten())
    assert torch.allclose(masked, expected)


@pytest.mark.parametrize("field, value, valid", [
    ("mlp", "relu", "gelu"), ("norm", "batchnorm", "rmsnorm"),
    ("checkpointing", "some", "selective"), ("n_kv_head", 3, "[1, 2, 4]"),
    ("sliding_window", 0, "positive int"), ("dropout", 1.0, "[0, 1)"), ("n_head", 5, "n_embd=32"),
    ("fused", "yes", "True or False"),
])
def test_config_errors_name_the_bad_value(field, value, valid):
    with pytest.raises(ValueError) as err:
        GPTConfig(**{**TINY, field: value})
    assert f"{field}={value!r}" in str(err.value) or f"{field}={value}" in str(err.value)
    assert valid in str(err.value)


def _rope_by_complex_rotation(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE written directly: pair ``(i, i + d/2)`` of ``x (B, H, T, d)`` is the complex number
    ``x_i + j x_{i+d/2}``, turned by ``position * base^(-2i/d)`` radians (float64)."""
    T, d = x.shape[-2], x.shape[-1]
    z = torch.complex(x[..., : d // 2], x[..., d // 2:])
    theta = torch.outer(torch.arange(T, dtype=torch.float64),
                        base ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d))
    z = z * torch.polar(torch.ones_like(theta), theta)
    return torch.cat([z.real, z.imag], dim=-1)


def _attention_by_formula(attn, x: torch.Tensor, rope: bool) -> torch.Tensor:
    """Causal multi-head (grouped) attention of ``attn``'s weights, one head at a time: what
    ``CausalSelfAttention`` should compute, written without any of its helpers."""
    H, Hkv, d = attn.n_head, attn.n_kv_head, attn.head_dim
    q, k, v = F.linear(x, attn.qkv.weight, attn.qkv.bias).split([H * d, Hkv * d, Hkv * d], -1)
    B, T, _ = x.shape
    q, k, v = (t.view(B, T, -1, d).transpose(1, 2) for t in (q, k, v))
    if rope:
        q, k = _rope_by_complex_rotation(q), _rope_by_complex_rotation(k)  # never v
    heads = []
    for h in range(H):
        kv = h // (H // Hkv)  # query head h reads key/value head h // group
        scores = q[:, h] @ k[:, kv].transpose(-2, -1) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ v[:, kv])
    return F.linear(torch.cat(heads, dim=-1), attn.proj.weight, attn.proj.bias)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("rope, n_kv_head", [(True, None), (True, 2), (False, 2)])
def test_attention_matches_a_direct_formula_with_rope_as_a_complex_rotation(fused, rope,
                                                                             n_kv_head):
    """Float64 (RoPE's angles are fp32 by design: 1e-5). The fused and unfused paths share
    ``rope_cos_sin`` / ``apply_rope``, so only an independent formula can tell them wrong.
    Mutations tried: the angle's sign flipped (sin -> -sin), RoPE applied to v as well, the
    pairs taken as adjacent (2i, 2i+1) instead of (i, i + d/2); each fails by over 0.1."""
    model = _model(fused=fused, rope=rope, n_kv_head=n_kv_head).double()
    attn = model.blocks[0].attn
    x = torch.randn(2, 12, TINY["n_embd"], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(attn(x), _attention_by_formula(attn, x, rope),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_swiglu_is_the_three_matrix_formula(fused):
    """``down(silu(x W_gate) * (x W_up))`` with silu(g) = g / (1 + e^-g), the gate being the
    first half of ``up``'s rows, at float64. Mutations tried: gate and up swapped, sigmoid in
    place of silu; each fails."""
    model = _model(fused=fused, mlp="swiglu").double()
    mlp, h = model.blocks[0].mlp, model.config.ffn_hidden
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in mlp.parameters():  # biases off zero, so a dropped bias shows
            p.add_(0.1 * torch.randn(p.shape, dtype=p.dtype, generator=g))
        w_gate, w_up = mlp.up.weight[:h], mlp.up.weight[h:]
        b_gate, b_up = mlp.up.bias[:h], mlp.up.bias[h:]
        x = torch.randn(2, 12, TINY["n_embd"], dtype=torch.float64, generator=g)
        gate, up = x @ w_gate.T + b_gate, x @ w_up.T + b_up
        expected = (gate / (1 + torch.exp(-gate)) * up) @ mlp.down.weight.T + mlp.down.bias
        torch.testing.assert_close(mlp(x), expected, rtol=1e-10, atol=1e-10)


def test_rope_needs_even_head_dim():
    with pytest.raises(ValueError, match="even head_dim"):
        GPTConfig(**{**TINY, "n_embd": 12, "n_head": 4, "rope": True})


def test_shape_attributes():
    cfg = GPTConfig(**{**TINY, "n_kv_head": 2})
    assert (cfg.layers, cfg.width, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.vocab, cfg.tied) == \
        (2, 32, 4, 2, 8, 37, True)
    assert GPTConfig(**TINY).kv_heads == 4
    assert GPTConfig(**TINY).ffn_hidden == 128  # 4 * width
    assert GPTConfig(**{**TINY, "n_embd": 96, "mlp": "swiglu"}).ffn_hidden == 256  # 8*96/3
    assert GPTConfig(**{**TINY, "n_embd": 100, "n_head": 4, "mlp": "swiglu"}).ffn_hidden == 320
    assert GPTConfig(**{**TINY, "mlp": "swiglu", "ffn_dim": 72}).ffn_hidden == 72


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("window", [None, 3])
def test_causal(fused, window):
    model = _model(fused=fused, sliding_window=window, rope=True)
    idx = _ids()
    changed = idx.clone()
    changed[:, 7] = (changed[:, 7] + 1) % TINY["vocab_size"]
    before, after = model(idx)[0], model(changed)[0]
    assert torch.equal(before[:, :7], after[:, :7])
    assert not torch.allclose(before[:, 7:], after[:, 7:])


@pytest.mark.parametrize("fused", [True, False])
def test_one_layer_sees_only_its_window(fused):
    model = _model(fused=fused, sliding_window=3, n_layer=1)
    idx = _ids()
    changed = idx.clone()
    changed[:, 4] = (changed[:, 4] + 1) % TINY["vocab_size"]
    before, after = model(idx)[0], model(changed)[0]
    assert not torch.allclose(before[:, 4:7], after[:, 4:7])  # positions 4, 5, 6 see token 4
    assert torch.equal(before[:, 7:], after[:, 7:])  # position 7 sees 5, 6, 7 only


def _banded_reference(q, k, v, window):
    """Attention query by query over keys max(0, i-window+1) .. i, K/V heads shared in groups."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    out = torch.empty_like(q)
    for i in range(q.shape[2]):
        lo = max(0, i - window + 1)
        w = torch.softmax(q[:, :, i:i + 1] @ k[:, :, lo:i + 1].transpose(-1, -2)
                          / math.sqrt(q.shape[-1]), dim=-1)
        out[:, :, i:i + 1] = w @ v[:, :, lo:i + 1]
    return out


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("kv", [None, 2])
def test_sliding_window_matches_banded_reference(fused, kv):
    T = 10
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, T, 8, generator=g)
    k, v = (torch.randn(2, 2 if kv else 4, T, 8, generator=g) for _ in range(2))
    for window in (1, 3, 9):
        attn = _model(fused=fused, sliding_window=window, n_kv_head=kv).blocks[0].attn
        torch.testing.assert_close(attn.core(q, k, v), _banded_reference(q, k, v, window),
                                   rtol=1e-5, atol=1e-6)
    assert window_mask(4, 2, torch.device("cpu")).int().tolist() == \
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]


@pytest.mark.parametrize("fused", [True, False])
def test_window_at_least_seq_len_is_full_attention(fused):
    full, idx = _model(fused=fused), _ids(seq=12)
    torch.testing.assert_close(_same_weights(full, sliding_window=12)(idx)[0], full(idx)[0],
                               rtol=0, atol=1e-6)
    torch.testing.assert_close(_same_weights(full, sliding_window=16)(idx)[0], full(idx)[0],
                               rtol=0, atol=1e-6)
    assert not torch.allclose(_same_weights(full, sliding_window=4)(idx)[0], full(idx)[0])


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: "-".join(str(v) for v in a.values()))
def test_fused_equals_unfused(arch):
    fused = _model(fused=True, sliding_window=None, **arch)
    fused.train()  # dropout is 0; train mode so the gradients are those of training
    unfused = _same_weights(fused, fused=False).train()
    idx = _ids(seq=13)
    torch.testing.assert_close(fused(idx)[0], unfused(idx)[0], rtol=1e-5, atol=1e-5)
    loss_f, grads_f = _grads(fused, idx)
    loss_u, grads_u = _grads(unfused, idx)
    torch.testing.assert_close(loss_f, loss_u, rtol=1e-6, atol=1e-6)
    for name, grad in grads_f.items():
        torch.testing.assert_close(grad, grads_u[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("window", [None, 4])
def test_fused_window_equals_unfused(window):
    fused = _model(sliding_window=window, parallel_block=True)
    torch.testing.assert_close(fused(_ids())[0], _same_weights(fused, fused=False)(_ids())[0],
                               rtol=1e-5, atol=1e-5)


def test_triton_epilogues_match_torch(monkeypatch):
    """The inference path on CUDA goes through the Triton LayerNorm and bias+GELU kernels; run it
    here under the interpreter (conftest sets TRITON_INTERPRET=1 without CUDA)."""
    pytest.importorskip("triton")
    model, idx = _model(n_layer=1), _ids(batch=1, seq=6)
    with torch.no_grad():
        expected = model(idx)[0]
        calls = []
        monkeypatch.setattr(gpt_module, "_epilogue_backend",
                            lambda *t: calls.append(1) or "triton")
        got = model(idx)[0]
    assert len(calls) == 4  # norm1, norm2, final norm, bias+GELU
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


class _OnCuda:
    """A stand-in for a CUDA tensor (the rule reads only ``is_cuda`` and ``requires_grad``):
    on a CPU-only machine the GPU branch of the rule is otherwise never taken."""
    is_cuda = True

    def __init__(self, requires_grad: bool):
        self.requires_grad = requires_grad


def test_epilogue_backend_never_picks_the_interpreter_nor_a_kernel_without_backward():
    """On CUDA the Triton epilogue, except while autograd records through any operand (it has
    no backward: GPU training would lose its gradients); on CPU always torch. Mutations tried:
    the autograd clause deleted (Triton under autograd), ``is_cuda`` ignored (Triton on CPU)."""
    x, w = _OnCuda(requires_grad=False), _OnCuda(requires_grad=True)
    assert gpt_module._epilogue_backend(x, w) == "torch"  # training: the torch form
    assert gpt_module._epilogue_backend(w, x) == "torch"  # whichever operand records
    assert gpt_module._epilogue_backend(x, _OnCuda(requires_grad=False)) == "triton"
    with torch.no_grad():
        assert gpt_module._epilogue_backend(x, w) == "triton"  # inference on a GPU
    cpu = torch.ones(4)
    assert gpt_module._epilogue_backend(cpu, torch.ones(4, requires_grad=True)) == "torch"
    with torch.no_grad():
        assert gpt_module._epilogue_backend(cpu, cpu) == "torch"  # never the interpreter


@pytest.mark.parametrize("fused", [True, False])
def test_gqa_with_all_kv_heads_is_mha(fused):
    mha, idx = _model(fused=fused), _ids()
    assert torch.equal(_same_weights(mha, n_kv_head=4)(idx)[0], mha(idx)[0])


@pytest.mark.parametrize("fused", [True, False])
def test_gqa_equals_mha_with_repeated_kv_weights(fused):
    gqa = _model(fused=fused, n_kv_head=2, rope=True)
    mha = GPT(GPTConfig(**{**gqa.config.__dict__, "n_kv_head": None})).eval()
    state = gqa.state_dict()
    H, Hkv, d, C = 4, 2, 8, 32
    for i in range(TINY["n_layer"]):
        for kind in ("weight", "bias"):
            key = f"blocks.{i}.attn.qkv.{kind}"
            q, k, v = state[key].split([H * d, Hkv * d, Hkv * d])
            k, v = (t.reshape(Hkv, d, -1).repeat_interleave(H // Hkv, 0).reshape(H * d, -1)
                    for t in (k, v))
            state[key] = torch.cat([q, k, v]).reshape(-1, C) if kind == "weight" else \
                torch.cat([q, k.flatten(), v.flatten()])
    mha.load_state_dict(state)
    idx = _ids()
    torch.testing.assert_close(mha(idx)[0], gqa(idx)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_checkpointing_keeps_loss_and_gradients(fused):
    base = _model(fused=fused, sliding_window=5, mlp="swiglu").train()
    idx = _ids(seq=13)
    loss, grads = _grads(base, idx)
    for mode in ("selective", "full"):
        other = _same_weights(base, checkpointing=mode).train()
        calls = []
        for block in other.blocks:  # count attention cores run: a recompute runs one again
            core = block.attn.core
            block.attn.core = lambda *a, core=core, calls=calls: calls.append(1) or core(*a)
        loss_c, grads_c = _grads(other, idx)
        assert len(calls) == 2 * TINY["n_layer"], mode
        assert torch.equal(loss_c, loss), mode
        for name, grad in grads.items():
            torch.testing.assert_close(grads_c[name], grad, rtol=0, atol=1e-7, msg=f"{mode} {name}")


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("mlp", ["gelu", "swiglu"])
def test_parallel_block_is_the_parallel_formula(fused, mlp, monkeypatch):
    """x + attn(ln x) + mlp(ln x) with the Q/K/V and MLP-up weights stacked in one GEMM."""
    par = _model(parallel_block=True, fused=fused, mlp=mlp)
    block = par.blocks[0]
    assert block.norm2 is None and block.attn.qkv is None and block.mlp.up is None
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(3))
    h = F.layer_norm(x, (32,), block.norm1.weight, block.norm1.bias, 1e-5)
    # the same function as separate Q/K/V and up layers holding the stacked rows
    n = block.attn.in_dim
    w, b = block.in_proj.weight, block.in_proj.bias
    attn_out = block.attn.attend(F.linear(h, w[:n], b[:n]))
    mlp_out = block.mlp.activate_down(F.linear(h, w[n:], b[n:]))
    torch.testing.assert_close(block(x), x + attn_out + mlp_out)
    torch.testing.assert_close(block(x), x + block.attn_branch(x) + block.mlp_branch(x))
    calls, real = [], F.linear

    def counting(inp, weight, bias=None):
        calls.append(tuple(weight.shape))
        return real(inp, weight, bias)

    monkeypatch.setattr(F, "linear", counting)
    block(x)
    monkeypatch.undo()
    assert (n + block.mlp.in_dim, 32) in calls  # one input GEMM for both branches
    assert (n, 32) not in calls and (block.mlp.in_dim, 32) not in calls

    seq = _model(parallel_block=False, fused=fused, mlp=mlp)
    seq.load_state_dict(par.state_dict(), strict=False)  # all but the input GEMMs, norms
    idx = _ids()
    assert not torch.allclose(seq(idx)[0], par(idx)[0], atol=1e-3)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_sequential_block_is_two_residual_branches(norm):
    block = _model(norm=norm).blocks[1]
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(4))
    x1 = x + block.attn_branch(x)
    torch.testing.assert_close(block(x), x1 + block.mlp_branch(x1))
    if norm == "rmsnorm":
        expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * block.norm1.weight
    else:
        expected = F.layer_norm(x, (32,), block.norm1.weight, block.norm1.bias, 1e-5)
    torch.testing.assert_close(block.attn_branch(x), block.attn(expected))


def test_tied_embeddings_share_storage():
    tied, untied = _model(tied_embeddings=True), _model(tied_embeddings=False)
    assert tied.lm_head.weight is tied.wte.weight
    assert tied.lm_head.weight.data_ptr() == tied.wte.weight.data_ptr()
    assert untied.lm_head.weight.data_ptr() != untied.wte.weight.data_ptr()
    table = 37 * 32
    assert untied.num_params(non_embedding=False) - tied.num_params(non_embedding=False) == table
    # position table dropped; the token table stays when it is also the output head
    assert tied.num_params() == tied.num_params(non_embedding=False) - 16 * 32
    assert untied.num_params() == untied.num_params(non_embedding=False) - 16 * 32 - table
    assert _model(rope=True).num_params() == _model(rope=True).num_params(non_embedding=False)


def test_init_is_gpt2_style():
    model = _model(n_embd=64, n_head=4, n_layer=8, vocab_size=256)
    assert abs(model.wte.weight.std().item() - 0.02) < 0.002
    assert abs(model.blocks[0].attn.qkv.weight.std().item() - 0.02) < 0.002
    scaled = 0.02 / math.sqrt(2 * 8)
    for proj in (model.blocks[3].attn.proj, model.blocks[3].mlp.down):
        assert abs(proj.weight.std().item() - scaled) < 0.15 * scaled
        assert not proj.bias.any()


def test_overfits_a_fixed_batch():
    model = _model(rope=True, mlp="swiglu", norm="rmsnorm").train()
    idx = _ids(batch=4, seq=17, seed=7)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    losses = []
    for _ in range(50):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0], losses[::10]
