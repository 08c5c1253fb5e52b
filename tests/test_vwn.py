"""Virtual Width Networks: GHC equations and initialization, the r = 1 reduction to the plain
residual block, dynamic GHC, MTP losses, weight-decay groups and the overhead counts."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from reference_impl.configs import GPTConfig, VWNConfig
from reference_impl.gpt import GPT, Block
from reference_impl.vwn import (GHC, LossParts, SegmentGroupNorm, VWNGPT, VWNLayer, ghc_init,
                                no_weight_decay_params, param_groups, vwn_cost)

TINY = dict(vocab_size=37, n_layer=2, n_embd=32, n_head=4, block_size=16)
# (m, n) for r = 1, 1.5, 2, 4, 8
EXPANSIONS = [(1, 1), (2, 3), (2, 4), (1, 4), (2, 16)]


pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(**overrides) -> VWNConfig:
    return VWNConfig(**{**TINY, **overrides})


def _model(seed: int = 0, **overrides) -> VWNGPT:
    torch.manual_seed(seed)
    return VWNGPT(_cfg(**overrides)).eval()


def _ids(batch: int = 2, seq: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (batch, seq),
                         generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize("overrides, names", [
    (dict(m=3, n=6), ["m=3", "n_embd=32", "valid m"]),
    (dict(m=2, n=1), ["n=1", "m=2"]),
    (dict(m=0), ["m=0"]),
    (dict(n=2.5), ["n=2.5"]),
    (dict(m=1, n=2, tied_embeddings=True), ["tied_embeddings=True", "(m, n)=(1, 2)"]),
    (dict(parallel_block=True), ["parallel_block=True"]),
    (dict(dynamic="yes"), ["dynamic='yes'"]),
    (dict(mtp_weight=-1.0), ["mtp_weight=-1.0"]),
])
def test_config_errors_name_the_bad_value(overrides, names):
    with pytest.raises(ValueError) as err:
        _cfg(**overrides)
    for name in names:
        assert name in str(err.value)


def test_config_widths():
    cfg = _cfg(m=2, n=3)
    assert (cfg.segment, cfg.wide_embd, cfg.expansion) == (16, 48, 1.5)
    base = cfg.backbone()
    assert type(base) is GPTConfig and base.n_embd == 32 and base.n_layer == 2
    assert not cfg.tied_embeddings  # the default differs from GPTConfig's: the widths differ
    assert _cfg(m=2, n=2, tied_embeddings=True).tied_embeddings


# ----------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("m, n", EXPANSIONS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_shapes(m, n, dynamic):
    model = _model(m=m, n=n, dynamic=dynamic, n_layer=1)
    idx = _ids()
    assert model.features(idx).shape == (2, 12, 32 * n // m)
    logits, loss = model(idx)
    assert logits.shape == (2, 12, TINY["vocab_size"]) and loss is None
    _, loss = model(idx[:, :-1], idx[:, 1:])
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert model.config.expansion == n / m
    with pytest.raises(ValueError, match="block_size=16"):
        model(_ids(seq=17))


# ----------------------------------------------------------------------------- initialization


def test_init_matrices_exactly():
    A, B = ghc_init(2, 3)
    assert torch.equal(A, torch.tensor([[1., 0., 1., 0., 0.],
                                        [0., 1., 0., 1., 0.],
                                        [0., 0., 0., 0., 1.]]))
    assert torch.equal(B, torch.tensor([[1., 0., 1.],
                                        [0., 1., 0.]]))
    A, B = ghc_init(1, 4)  # r = 4 from one segment: read segment 0, write the output to all 4
    assert torch.equal(A[:, :1], torch.tensor([[1.], [0.], [0.], [0.]]))
    assert torch.equal(B, torch.ones(1, 4))


@pytest.mark.parametrize("m, n", [(1, 1), (2, 3), (3, 8), (4, 4), (2, 16)])
def test_init_matrices_follow_the_definition(m, n):
    A, B = ghc_init(m, n)
    assert A.shape == (n, m + n) and B.shape == (m, n)
    for i, j in itertools.product(range(n), range(m)):
        assert A[i, j] == (1.0 if i == j < m else 0.0)  # A_in reads the first m segments
        assert B[j, i] == (1.0 if i % m == j else 0.0)  # segment i gets output segment i mod m
    assert torch.equal(A[:, m:], torch.eye(n))  # A_res = I
    if m == n:
        assert torch.equal(A[:, :m], torch.eye(n)) and torch.equal(B, torch.eye(n))


def test_model_init_has_the_paper_matrices_and_zero_dynamics():
    model = _model(m=2, n=3, dynamic=True)
    A, B = ghc_init(2, 3)
    ghcs = [mod for mod in model.modules() if isinstance(mod, GHC)]
    assert len(ghcs) == 2 * TINY["n_layer"]
    for g in ghcs:
        assert torch.equal(g.A, A) and torch.equal(g.B, B)
        assert not g.W_A.any() and not g.W_B.any()
        assert g.s_A.item() == 1.0 and g.s_B.item() == 1.0
        assert g.W_A.shape == (16, 5) and g.W_B.shape == (16, 2) and g.tau == 4.0


# ----------------------------------------------------------------------------- GHC equations


def test_static_ghc_matches_the_equations_segment_by_segment():
    m, n, s = 2, 3, 4
    torch.manual_seed(0)
    ghc = GHC(m, n, s)
    with torch.no_grad():
        ghc.A.normal_()
        ghc.B.normal_()
    W = torch.randn(m * s, m * s)
    layer = lambda x: torch.tanh(x @ W)  # noqa: E731 - any map D -> D
    h = torch.randn(5, n * s)
    out = ghc(h, layer)
    Hs = h.view(5, n, s)
    A_in, A_res, B = ghc.A[:, :m], ghc.A[:, m:], ghc.B
    x = torch.stack([sum(A_in[i, j] * Hs[:, i] for i in range(n)) for j in range(m)], dim=1)
    y = layer(x.reshape(5, m * s)).view(5, m, s)
    expected = torch.stack([sum(B[j, i] * y[:, j] for j in range(m))
                            + sum(A_res[k, i] * Hs[:, k] for k in range(n))
                            for i in range(n)], dim=1).reshape(5, n * s)
    torch.testing.assert_close(out, expected)


def test_segment_group_norm_is_group_norm():
    norm = SegmentGroupNorm(3, 12)
    ref = nn.GroupNorm(3, 12, eps=1e-5)
    with torch.no_grad():
        for p in (norm.weight, norm.bias):
            p.normal_()
        ref.weight.copy_(norm.weight)
        ref.bias.copy_(norm.bias)
    x = torch.randn(2, 5, 12)
    torch.testing.assert_close(norm(x), ref(x.reshape(10, 12)).reshape(2, 5, 12))


# ----------------------------------------------------------------------------- r = 1


@pytest.mark.parametrize("m", [1, 2, 4])
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("arch", [dict(), dict(norm="rmsnorm", mlp="swiglu", rope=True)])
def test_r1_layer_is_exactly_the_residual_block(m, dynamic, arch):
    """With m == n and the paper's init, A_in = A_res = B = I: the GHC is the residual add."""
    cfg = _cfg(m=m, n=m, dynamic=dynamic, **arch)
    torch.manual_seed(0)
    block = Block(cfg.backbone()).eval()
    for p in block.parameters():
        nn.init.normal_(p, std=0.3)
    layer = VWNLayer(cfg).eval()
    layer.block.load_state_dict(block.state_dict())
    h = torch.randn(2, 7, 32)
    assert torch.equal(layer(h), block(h))


@pytest.mark.parametrize("m", [1, 2])
def test_r1_model_is_the_plain_gpt_up_to_the_output_path(m):
    """Whole-model equivalence stops at the output path: VWN's GroupNorm + W_reduce before the
    final norm have no counterpart in gpt.GPT (norm_f(GroupNorm(x)) != norm_f(x) by the norms'
    eps), so the wide state after the last layer is what must match exactly."""
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(**TINY)).eval()
    vwn = VWNGPT(_cfg(m=m, n=m, tied_embeddings=True)).eval()
    vwn.wte.load_state_dict(gpt.wte.state_dict())
    vwn.wpe.load_state_dict(gpt.wpe.state_dict())
    for layer, block in zip(vwn.layers, gpt.blocks):
        layer.block.load_state_dict(block.state_dict())
    idx = _ids()
    x = gpt.wte(idx) + gpt.wpe(torch.arange(idx.shape[1]))
    for block in gpt.blocks:
        x = block(x)
    assert torch.equal(vwn.features(idx), x)
    assert vwn.lm_head.weight is vwn.wte.weight  # r = 1 may tie, as the plain GPT does


# ----------------------------------------------------------------------------- dynamic


def _copy_static(src: VWNGPT, dst: VWNGPT) -> None:
    missing, unexpected = dst.load_state_dict(src.state_dict(), strict=False)
    assert not unexpected and all(k.rsplit(".", 1)[-1] in ("W_A", "W_B", "s_A", "s_B")
                                  for k in missing)


@pytest.mark.parametrize("m, n", [(2, 3), (1, 4)])
def test_dynamic_at_init_is_static(m, n):
    static = _model(m=m, n=n)
    dynamic = _model(seed=5, m=m, n=n, dynamic=True)
    _copy_static(static, dynamic)
    idx = _ids()
    assert torch.equal(dynamic(idx)[0], static(idx)[0])
    # and with trained-looking static matrices, still the same equations
    with torch.no_grad():
        for g in static.modules():
            if isinstance(g, GHC):
                g.A.add_(0.1 * torch.randn_like(g.A))
                g.B.add_(0.1 * torch.randn_like(g.B))
    _copy_static(static, dynamic)
    torch.testing.assert_close(dynamic(idx)[0], static(idx)[0], rtol=1e-5, atol=1e-5)


def test_dynamic_matrices_follow_the_equations():
    m, n, s = 2, 3, 4
    torch.manual_seed(0)
    g = GHC(m, n, s, dynamic=True)
    with torch.no_grad():
        for p in (g.W_A, g.W_B):
            p.normal_()
        g.s_A.fill_(0.5)
        g.s_B.fill_(2.0)
    H = torch.randn(7, n, s)
    A, Bt = g.matrices(H)
    N = H * torch.rsqrt(H.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(A, g.A + 0.5 * torch.tanh(N @ g.W_A / 2.0))  # tau = sqrt(4)
    torch.testing.assert_close(Bt, g.B.t() + 2.0 * torch.tanh(N @ g.W_B / 2.0))
    assert A.shape == (7, n, m + n) and Bt.shape == (7, n, m)


def test_gradients_reach_every_ghc_parameter():
    model = _model(m=2, n=3, dynamic=True, mtp=True).train()
    idx = _ids()
    _, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    ghcs = [mod for mod in model.modules() if isinstance(mod, GHC)]
    for g in ghcs:
        for p in (g.A, g.B, g.W_A, g.W_B):
            assert p.grad is not None and p.grad.abs().sum() > 0
        # tanh(0) = 0: at init the scales get exactly no gradient...
        assert g.s_A.grad.item() == 0.0 and g.s_B.grad.item() == 0.0
    with torch.no_grad():
        for g in ghcs:
            g.W_A.normal_(std=0.1)
            g.W_B.normal_(std=0.1)
    model.zero_grad()
    _, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    for g in ghcs:  # ... and do once W has moved
        assert g.s_A.grad.item() != 0.0 and g.s_B.grad.item() != 0.0
    assert all(p.grad is not None for p in model.parameters())


def test_full_checkpointing_keeps_loss_and_gradients():
    idx = _ids()
    ref = _model(m=2, n=3, dynamic=True).train()
    ckpt = _model(m=2, n=3, dynamic=True, checkpointing="full").train()
    ckpt.load_state_dict(ref.state_dict())
    losses = []
    for model in (ref, ckpt):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        losses.append(loss.detach())
    assert torch.equal(losses[0], losses[1])
    for (name, p), q in zip(ref.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


# ----------------------------------------------------------------------------- weight decay


def test_no_decay_groups():
    model = _model(m=2, n=3, dynamic=True, mtp=True)
    names = {id(p): name for name, p in model.named_parameters()}
    exempt = {names[id(p)] for p in no_weight_decay_params(model)}
    for name in names.values():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("A", "B", "s_A", "s_B") or leaf == "bias" or "norm" in name:
            assert name in exempt, name
        else:
            assert name not in exempt, name
    assert {"layers.0.ghc_attn.A", "layers.1.ghc_mlp.B", "norm_out.weight"} <= exempt
    assert "layers.0.ghc_attn.W_A" not in exempt and "wte.weight" not in exempt
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    ids = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(names)  # a partition of the parameters
    tied = _model(m=2, n=2, tied_embeddings=True)
    assert sum(len(g["params"]) for g in param_groups(tied, 0.1)) == len(list(tied.parameters()))
    with pytest.raises(ValueError, match="weight_decay=-1"):
        param_groups(model, -1)


# ----------------------------------------------------------------------------- MTP


def test_mtp_loss_pieces():
    model = _model(m=2, n=3, mtp=True, mtp_weight=0.5)
    idx = _ids(seq=13)
    inp, targets = idx[:, :-1], idx[:, 1:].clone()
    targets[0, 3] = -1  # an ignored target counts in neither loss
    logits, parts = model(inp, targets, return_parts=True)
    assert isinstance(parts, LossParts)
    next_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1)
    wide = model.features(inp)
    # position t: wide state at t, embedding of token t+1 (= inp[:, t+1]), predicts
    # targets[:, t+1], through the main model's output path
    logits2 = model.output(model.mtp(wide[:, :-1], model.wte(inp[:, 1:])))
    next_2 = F.cross_entropy(logits2.flatten(0, 1), targets[:, 1:].flatten(), ignore_index=-1)
    torch.testing.assert_close(parts.next_token, next_token)
    torch.testing.assert_close(parts.next_2_token, next_2)
    torch.testing.assert_close(parts.total, next_token + 0.5 * next_2)
    _, total = model(inp, targets)
    torch.testing.assert_close(total, parts.total)
    # the token after next really is what the MTP head is scored on: both losses near ln(V)
    assert abs(parts.next_2_token.item() - torch.log(torch.tensor(37.0)).item()) < 0.5


def test_mtp_sees_only_up_to_the_next_token():
    model = _model(m=2, n=3, mtp=True)
    idx = _ids()
    changed = idx.clone()
    changed[:, 7] = (changed[:, 7] + 1) % TINY["vocab_size"]

    def mtp_logits(ids):
        wide = model.features(ids)
        return model.output(model.mtp(wide[:, :-1], model.wte(ids[:, 1:])))

    before, after = mtp_logits(idx), mtp_logits(changed)
    assert torch.equal(before[:, :6], after[:, :6])  # positions < 6 see tokens <= 6
    assert not torch.allclose(before[:, 6], after[:, 6])  # position 6 reads token 7's embedding


def test_mtp_head_costs_the_same_parameters_at_every_width():
    """The paper's MTP head: a block-wise shared linear at the cost of r = 1. Its mixing (norms
    and linear) and block have the same parameters at r = 1 and r = 8 (one m); its VWN layer's
    GHCs cost what a backbone layer's do (none in the frozen r = 1 baseline)."""
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731

    def head(model):
        return count(model.mtp) - sum(count(g) for g in model.mtp.modules()
                                      if isinstance(g, GHC))

    base = _model(m=2, n=2, ghc_trainable=False, mtp=True)
    wide = _model(m=2, n=16, dynamic=True, mtp=True)
    assert head(base) == head(wide) > 0
    assert count(base.mtp) == head(base)  # the baseline's GHCs: frozen, no parameters
    layer_ghc = sum(count(g) for g in wide.layers[0].modules() if isinstance(g, GHC))
    assert count(wide.mtp) - head(wide) == layer_ghc
    assert vwn_cost(wide.config).params_mtp == count(wide.mtp)
    assert vwn_cost(base.config).params_mtp == count(base.mtp)


def test_without_mtp_there_is_one_loss():
    model = _model(m=2, n=3)
    idx = _ids()
    _, parts = model(idx[:, :-1], idx[:, 1:], return_parts=True)
    assert parts.next_2_token is None and parts.total is parts.next_token
    with pytest.raises(ValueError, match="T=1"):
        _model(mtp=True)(idx[:, :1], idx[:, 1:2])


# ----------------------------------------------------------------------------- overhead


def test_cost_hand_checked():
    # V=11, L=1, D=8, 2 heads, GELU ffn 32, LayerNorm, learned positions (4), (m, n) = (2, 4):
    # s = 4, D' = 16
    cfg = VWNConfig(vocab_size=11, n_layer=1, n_embd=8, n_head=2, block_size=4, m=2, n=4)
    c = vwn_cost(cfg)
    assert c.params_embedding == (11 + 4) * 16
    block = 2 * 16 + (8 * 24 + 24) + (8 * 8 + 8) + (8 * 32 + 32) + (32 * 8 + 8)  # = 872
    assert c.params_backbone == block == 872
    assert c.params_ghc == 2 * (4 * 6 + 2 * 4)  # A is n x (m+n), B is m x n, 2 GHCs
    assert c.params_output == 2 * 16 + 16 * 8 + 2 * 8 + 11 * 8  # GroupNorm, W_reduce, norm, head
    assert c.params_mtp == 0
    assert c.params_total == 240 + 872 + 64 + 264 == 1440
    torch.manual_seed(0)
    model = VWNGPT(cfg)
    assert sum(p.numel() for p in model.parameters()) == 1440
    assert model.num_params() == 1440 - 240  # the wide token and position tables are lookups
    # FLOPs per token at T = 4: GEMMs qkv 8x24, proj 8x8, up 8x32, down 32x8 (2 per MAC) and
    # attention 4 T D
    assert c.flops_backbone == 2 * (192 + 64 + 256 + 256) + 4 * 4 * 8 == 1664
    # per GHC: A_in^T H' n m s = 32, A_res^T H' n n s = 64, B^T y m n s = 32 MACs
    assert c.flops_ghc == 2 * 2 * (32 + 64 + 32) == 512
    assert c.flops_output == 2 * 16 * 8 + 2 * 8 * 11 == 432
    assert c.flops_total == 2608
    assert (c.baseline_params, c.baseline_flops) == (15 * 8 + 872 + 16 + 88, 1664 + 176)
    assert c.flops_overhead == pytest.approx(2608 / 1840 - 1)

    dyn = vwn_cost(VWNConfig(**{**cfg.__dict__, "dynamic": True, "mtp": True}))
    assert dyn.params_ghc == 64 + 2 * (4 * (4 + 2) + 4 * 2 + 2)  # + W_A, W_B, s_A, s_B
    assert dyn.flops_ghc == 2 * 512  # the projections N W_A, N W_B cost as much again
    # two norms at the segment width s = 4, the shared 2s -> s linear, the block, its 2 GHCs
    assert dyn.params_mtp == 2 * 8 + 2 * 4 * 4 + 872 + 2 * (4 * 6 + 2 * 4 + 4 * 8 + 2)
    # the linear on each of the n = 4 segments, the block, its GHCs, the shared output path
    assert dyn.flops_mtp == 4 * 2 * 32 + 1664 + 2 * 512 + 432


@pytest.mark.parametrize("overrides", [
    dict(m=2, n=3, dynamic=True, mtp=True),
    dict(m=1, n=8, mlp="swiglu", norm="rmsnorm", rope=True, n_kv_head=2),
    dict(m=2, n=2, tied_embeddings=True, sliding_window=4),
])
def test_cost_params_match_the_modules(overrides):
    cfg = _cfg(**overrides)
    torch.manual_seed(0)
    model = VWNGPT(cfg)
    c = vwn_cost(cfg)
    count = lambda mods: sum(p.numel() for mod in mods for p in mod.parameters())  # noqa: E731
    assert c.params_backbone == count(layer.block for layer in model.layers)
    assert c.params_ghc == count(g for layer in model.layers for g in layer.modules()
                                 if isinstance(g, GHC))
    assert c.params_total == sum(p.numel() for p in model.parameters())
    assert c.params_mtp == (count([model.mtp]) if cfg.mtp else 0)
    assert c.baseline_params == sum(p.numel() for p in GPT(cfg.backbone()).parameters())


@pytest.mark.parametrize("m, n, dynamic", [(2, 3, False), (2, 3, True), (2, 16, True)])
def test_ghc_flops_match_a_flop_counter(m, n, dynamic):
    """(m = 1 is left out: einsum then contracts over a size-1 dim by a broadcast multiply, which
    the counter does not see, though the multiply-adds are the same.)"""
    cfg = _cfg(m=m, n=n, dynamic=dynamic, n_layer=1)
    ghc = GHC(m, n, cfg.segment, dynamic)
    tokens = 6
    with FlopCounterMode(display=False) as counter:
        ghc(torch.randn(tokens, cfg.wide_embd), lambda x: x)
    assert counter.get_total_flops() == tokens * vwn_cost(cfg).flops_ghc // 2  # one of 2 GHCs


def test_frozen_ghc_is_the_residual_and_has_no_parameters():
    """ghc_trainable=False: A and B are buffers at the init; with m == n the GHC takes the plain
    residual shortcut, which must compute what the general (einsum) path computes."""
    torch.manual_seed(0)
    frozen = GHC(2, 2, 16, trainable=False)
    general = GHC(2, 2, 16)
    assert frozen.identity and not general.identity
    assert list(frozen.parameters()) == [] and set(dict(frozen.named_buffers())) == {"A", "B"}
    layer = nn.Linear(32, 32)
    h = torch.randn(3, 5, 32)
    torch.testing.assert_close(frozen(h, layer), general(h, layer), rtol=0, atol=1e-6)
    torch.testing.assert_close(frozen(h, layer), h + layer(h))
    with pytest.raises(ValueError, match="dynamic=True needs"):
        GHC(2, 2, 16, dynamic=True, trainable=False)
    with pytest.raises(ValueError, match="dynamic=True needs ghc_trainable=True"):
        _cfg(m=2, n=2, dynamic=True, ghc_trainable=False)


def test_frozen_baseline_model_counts():
    """The r = 1 baseline of the experiments: no GHC parameters, no GHC FLOPs, and the same
    model function as the trainable r = 1 model at init."""
    base = _model(m=2, n=2, ghc_trainable=False, mtp=True)
    init = _model(m=2, n=2, mtp=True)
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(base(idx)[0], init(idx)[0], rtol=0, atol=1e-5)
    cost, cost_init = vwn_cost(base.config), vwn_cost(init.config)
    assert cost.params_ghc == 0 and cost.flops_ghc == 0
    assert cost_init.params_ghc > 0 and cost_init.flops_ghc > 0
    mtp_ghc = sum(p.numel() for g in init.mtp.modules() if isinstance(g, GHC)
                  for p in g.parameters())  # the MTP module's VWN layer has GHCs too
    assert base.num_params(False) == init.num_params(False) - cost_init.params_ghc - mtp_ghc
    assert cost.params_total == base.num_params(False)
