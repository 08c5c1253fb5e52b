"""The pre-training experiments' configs: one run's settings (``PretrainConfig``), the runs the
``vwn`` section asks for (``variants``, ``train_config``) and the checks of the ``pma`` section
(``check_section``, ``parse_method``). Torch-free: the workflow plans from it
(``suite.experiments.pretrain_plan``); the runs (``pretrain``, ``vwn_width``, ``pma_merging``)
train from it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from reference_impl.configs import GPTConfig, VWNConfig
from suite.config import ConfigError, validate_section

VWN_EXPERIMENT = "vwn_scaling"
PMA_EXPERIMENT = "pma_merging"
# a run's types, ranges and choices (kind, dtype, device) are the schema's $defs.pretrain_run
# (suite.config.validate_section)
GPT_KEYS = tuple(f.name for f in dataclasses.fields(GPTConfig))
VWN_KEYS = tuple(f.name for f in dataclasses.fields(VWNConfig))


@dataclass(frozen=True)
class PretrainConfig:
    """One run's settings. ``model`` holds ``GPTConfig`` fields (``VWNConfig`` fields for
    ``kind='vwn'``); ``block_size`` defaults to ``seq_len``, ``vocab_size`` to 256 (bytes).
    ``warmup_steps`` of linear warm-up, then the constant peak ``lr`` (the experiments add their
    own decays). ``threads`` 0 = torch's default."""

    kind: str = "gpt"
    model: dict[str, Any] = field(default_factory=lambda: {"n_layer": 2, "n_embd": 64,
                                                           "n_head": 4})
    seq_len: int = 64
    batch: int = 8
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    warmup_steps: int = 20
    steps: int = 200
    eval_every: int = 25
    eval_batches: int = 8
    device: str = "cpu"
    dtype: str = "fp32"  # bf16: autocast around forward (weights and optimizer stay fp32)
    threads: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PretrainConfig:
        validate_section(d, "pretrain_run", "train")  # unknown keys, before cls(**d)
        kw = dict(d)
        if "betas" in kw:
            kw["betas"] = tuple(kw["betas"])
        return cls(**kw)

    def __post_init__(self) -> None:
        # types, ranges and choices: the schema's $defs.pretrain_run; by hand only what depends
        # on another field (the model's keys on kind) or on the model classes
        validate_section({f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                         "pretrain_run", "train")
        keys = VWN_KEYS if self.kind == "vwn" else GPT_KEYS
        bad = sorted(set(self.model) - set(keys))
        if bad:
            raise ConfigError(f"train.model: unknown key(s) {bad} for kind={self.kind!r}; "
                              f"valid: {list(keys)}")
        try:
            self.model_config()
        except (TypeError, ValueError) as e:
            raise ConfigError(f"train.model: {e}") from None

    def model_config(self) -> GPTConfig:
        fields_ = {"vocab_size": 256, "block_size": self.seq_len, **self.model}
        return (VWNConfig if self.kind == "vwn" else GPTConfig)(**fields_)

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d


# ----------------------------------------------------------------------------- vwn


@dataclass(frozen=True)
class Variant:
    m: int
    n: int
    series: str  # "main" (over r at the fixed m) or "m_ablation" (over m at one r)

    @property
    def r(self) -> float:
        return self.n / self.m

    @property
    def label(self) -> str:
        return f"m{self.m}-n{self.n}"


def _n_for(r: float, m: int, where: str) -> int:
    n = Fraction(str(r)) * m
    if n.denominator != 1 or n < m:
        raise ConfigError(f"{where}: expansion r={r} with m={m} gives n={float(n):g}; r*m must be "
                          f"an integer >= m (e.g. r=1.5 needs an even m)")
    return int(n)


def variants(vwn: dict[str, Any]) -> list[Variant]:
    """The runs' (m, n), main series first; a variant in both series is run once (as main).
    The schema's integers may come as floats (YAML's ``2.0``): m is an int from here on."""
    m = int(vwn["m"])
    out = [Variant(m, _n_for(r, m, "vwn.expansions"), "main") for r in vwn["expansions"]]
    ab = vwn["m_ablation"]
    if ab["enabled"]:
        for mm in map(int, ab["m"]):
            v = Variant(mm, _n_for(ab["r"], mm, "vwn.m_ablation"), "m_ablation")
            if all((v.m, v.n) != (o.m, o.n) for o in out):
                out.append(v)
    return out


def train_config(vwn: dict[str, Any], v: Variant) -> dict[str, Any]:
    """The complete ``PretrainConfig`` dict of one variant. The r = 1 baseline trains
    ``baseline_length`` times as many steps: a wide model's loss at T can only be matched by the
    baseline if the baseline runs on past T (its curve at the common T is what the loss
    comparisons use)."""
    baseline = v.m == v.n
    if vwn["train"]["steps"] % vwn["train"]["eval_every"]:
        raise ConfigError(f"vwn.train.steps={vwn['train']['steps']} must be a multiple of "
                          f"eval_every={vwn['train']['eval_every']}: the baseline is compared "
                          f"with the wide runs at their last step")
    model = {**vwn["train"]["model"], "m": v.m, "n": v.n, "mtp": vwn["mtp"],
             "dynamic": vwn["dynamic"] and not baseline, "ghc_trainable": not baseline}
    train = {**vwn["train"], "kind": "vwn", "model": model, "device": vwn["device"]}
    if baseline:  # longer, so that S(T) = tokens the baseline needs / T is measurable
        train["steps"] = vwn["train"]["steps"] * vwn["baseline_length"]
    PretrainConfig.from_dict(train)  # fail at planning, not in the job
    return train


# ----------------------------------------------------------------------------- pma


METHOD_NAMES = ("sma", "wma", "ema")


def parse_method(spec: str) -> tuple[str, float]:
    """``"sma"``, ``"wma"`` or ``"ema:ALPHA"`` -> (method, alpha); alpha is EMA's (0.2 unused
    otherwise)."""
    name, _, alpha = spec.partition(":")
    if name not in METHOD_NAMES or (name == "ema") != bool(alpha):
        raise ConfigError(f"pma.methods: {spec!r} is not 'sma', 'wma' or 'ema:ALPHA' "
                          f"(e.g. 'ema:0.1')")
    try:
        value = float(alpha) if alpha else 0.2
    except ValueError:
        raise ConfigError(f"pma.methods: {spec!r}: alpha {alpha!r} is not a number") from None
    if not 0 < value <= 1:
        raise ConfigError(f"pma.methods: {spec!r}: alpha must be in (0, 1]")
    return name, value


def stable_window(pma: dict[str, Any], steps: int) -> int:
    """The steps the stable-phase slope is fitted over: ``pma.stable.window``, or the last
    quarter of the run."""
    return pma["stable"]["window"] or steps // 4


def check_section(pma: dict[str, Any]) -> PretrainConfig:
    """The section's train config, after checking that the grid fits the run."""
    cfg = PretrainConfig.from_dict({**pma["train"], "kind": "gpt", "device": pma["device"]})
    v0, steps = pma["checkpoint_every"], cfg.steps
    if steps % v0:
        raise ConfigError(f"pma.train.steps={steps} must be a multiple of "
                          f"pma.checkpoint_every={v0}")
    for spec in pma["methods"]:
        parse_method(spec)
    h = pma["headline"]
    parse_method(h["method"])
    span = (h["n"] - 1) * h["interval"] * v0
    if span >= steps:
        raise ConfigError(f"pma.headline: n={h['n']} checkpoints interval={h['interval']} x "
                          f"checkpoint_every={v0} steps apart span {span} steps; they must "
                          f"span fewer than the run's {steps} (pma.train.steps)")
    for d in pma["decay"]["steps"]:
        if d % v0 or steps - d < max(cfg.warmup_steps, v0):
            raise ConfigError(f"pma.decay.steps: {d} must be a multiple of checkpoint_every={v0} "
                              f"and leave at least max(warmup_steps, checkpoint_every) = "
                              f"{max(cfg.warmup_steps, v0)} constant-LR steps before the fork "
                              f"(the fork leaves the run at step steps - d; steps={steps})")
    early = pma["decay"]["early_end"]
    if early and not pma["decay"]["steps"]:
        raise ConfigError(f"pma.decay.steps={pma['decay']['steps']} must hold at least one decay "
                          f"length while early_end={early} (the early fork decays over the "
                          f"longest)")
    if early:
        longest = max(pma["decay"]["steps"])
        if (early % pma["merge_every"] or early >= steps or early - span < v0
                or early - longest < max(cfg.warmup_steps, v0)):
            raise ConfigError(
                f"pma.decay.early_end={early} must be a merge point (a multiple of "
                f"merge_every={pma['merge_every']}) before the end ({steps}), late enough for "
                f"the headline merge's span of {span} steps (>= {span + v0}) and for a fork of "
                f"the longest decay ({longest} steps) to leave after warm-up "
                f"(>= {longest + max(cfg.warmup_steps, v0)})")
    window = stable_window(pma, steps)
    if window >= steps or window < 2 * v0:
        raise ConfigError(f"pma.stable.window={window} must be shorter than the run ({steps} "
                          f"steps) and hold at least 3 evaluations (>= {2 * v0}: "
                          f"checkpoint_every={v0})")
    if pma["spike"]["enabled"] and pma["spike"]["checkpoints"] * v0 > steps:
        raise ConfigError(f"pma.spike.checkpoints={pma['spike']['checkpoints']} needs "
                          f"{pma['spike']['checkpoints'] * v0} steps of checkpoints "
                          f"(checkpoint_every={v0}); the run has {steps}: it must be at most "
                          f"{steps // v0}")
    return cfg
