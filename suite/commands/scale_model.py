"""``seedbench scale-model``: what-if, ``--search`` and ``validate RUNS.csv`` (an
``add_parser`` and a ``run``)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from suite.scale.hardware import HARDWARE
from suite.scale.layout import ATTENTION, DP_MODES, LOSS_KINDS, RECOMPUTE, Layout
from suite.scale.model import NORMS, ModelConfig
from suite.scale.systems import SYSTEMS

DEFAULT_SYSTEM = "Megatron-Core r0.8 (H100)"
MODEL_INTS = (("layers", 96), ("hidden", 12288), ("heads", 96), ("seq-len", 2048),
              ("vocab", 51200))
LAYOUT_INTS = (("gpus", 1024), ("tp", 8), ("pp", 8), ("vp", 1), ("micro-batch", 1),
               ("global-batch", 1536))


def add_parser(sub: argparse._SubParsersAction) -> None:
    whatif = sub.add_parser(
        "scale-model", help="the cluster-scale model: one layout's iteration time, MFU, memory "
                            "and breakdown; --search ranks every layout; validate RUNS.csv "
                            "fits a system on your runs and predicts the rest",
        description="A GPT/Llama shape and a layout on a GPU cluster -> iteration time, "
                    "tokens/s, MFU, memory and where the time goes, at the two numbers a "
                    "system was fitted to (docs/scale-model.md).")
    model = whatif.add_argument_group("model")
    for name, default in MODEL_INTS:
        model.add_argument(f"--{name}", type=int, default=default, help=f"(default {default})")
    model.add_argument("--kv-heads", type=int, help="grouped-query attention (default: heads)")
    model.add_argument("--ffn-hidden", type=int, help="MLP width (default: 4 x hidden)")
    model.add_argument("--gated-mlp", action="store_true", help="SwiGLU: three matrices")
    model.add_argument("--untied", action="store_true", help="untied output embedding")
    model.add_argument("--rotary", action="store_true", help="no learned position table")
    model.add_argument("--no-dropout", action="store_true")
    model.add_argument("--norm", choices=NORMS, default="layernorm")
    layout = whatif.add_argument_group("layout (what-if; --search enumerates these)")
    for name, default in LAYOUT_INTS:
        layout.add_argument(f"--{name}", type=int, default=default, help=f"(default {default})")
    for end in ("first", "last"):
        layout.add_argument(f"--{end}-stage-layers", type=int, metavar="N",
                            help=f"layers of the {end} pipeline stage, the middle ones sharing "
                                 "the rest evenly (default: DeepSpeed's uniform split)")
    layout.add_argument("--recompute", choices=RECOMPUTE, default="none")
    layout.add_argument("--sequence-parallel", action="store_true")
    layout.add_argument("--attention", choices=ATTENTION, help="default: the system's")
    layout.add_argument("--dp-mode", choices=DP_MODES, help="default: the system's")
    layout.add_argument("--loss", choices=sorted(LOSS_KINDS), help="default: the system's")
    layout.add_argument("--recompute-early-stop", action=argparse.BooleanOptionalAction,
                        help="full recompute as torch's non-reentrant checkpoint runs it (torch "
                             ">= 2.1: not the MLP's output projection); default: the system's")
    layout.add_argument("--attention-unpad", action="store_true",
                        help="the tiled kernel called through flash-attn's unpad_input / "
                             "pad_input copies, as llm-foundry's MPT runs attn_impl flash "
                             "(what-if only)")
    layout.add_argument("--logit-metrics", type=int, metavar="N",
                        help="training metrics computed on each micro-batch's logits, an eager "
                             "cross entropy each (Composer's trainer: 2); default: the system's")
    machine = whatif.add_argument_group("machine and system")
    machine.add_argument("--gpu", "--hardware", dest="gpu", choices=sorted(HARDWARE),
                         default="H100")
    machine.add_argument("--system", default=DEFAULT_SYSTEM, choices=sorted(SYSTEMS),
                         metavar="SYSTEM", help="whose overlaps, kernels and fitted numbers "
                                                f"(default {DEFAULT_SYSTEM!r}; one of "
                                                f"{sorted(SYSTEMS)})")
    machine.add_argument("--gemm-efficiency", type=float, help="instead of the system's fit")
    machine.add_argument("--straggler", type=float, help="instead of the system's fit")
    machine.add_argument("--paper-dir", type=Path, default=Path("results/paper"),
                         help="the published runs the system is fitted on (results/paper)")
    whatif.add_argument("--search", action="store_true",
                        help="rank every layout of --gpus GPUs at --global-batch that fits in "
                             "memory, fastest first")
    whatif.add_argument("--top", type=int, default=10, help="layouts shown by --search (10)")
    whatif.add_argument("--json", action="store_true", help="JSON instead of a table")
    actions = whatif.add_subparsers(dest="action", metavar="validate")
    val = actions.add_parser("validate", help="your measured runs (a CSV, docs/scale-model.md) "
                                              "-> a system fitted on the rows you name, every "
                                              "other row predicted, errors and rank metrics")
    val.add_argument("runs", type=Path, help="the runs CSV")
    val.add_argument("--calibrate", required=True, action="append", metavar="ID",
                     help="the row id(s) to fit the system on, one or two: comma-separated, "
                          "or the option given twice (an id that holds a comma is taken whole)")
    val.add_argument("--system-like", choices=sorted(SYSTEMS), metavar="SYSTEM",
                     help="whose overlaps, kernels and DP mode fill the layout columns you "
                          "leave empty (default: nothing overlapped, flash, allreduce)")
    val.add_argument("--json", action="store_true", dest="validate_json")
    val.add_argument("--out", type=Path, help="also write every row's prediction here (CSV)")
    val.add_argument("--by", default="", metavar="COLUMNS",
                     help="also split the errors by these layout columns, comma-separated "
                          "(e.g. recompute,tp), to see where the model is biased; columns: "
                          "suite.scale.validate.SLICES")


def _model(args: argparse.Namespace) -> ModelConfig:
    return ModelConfig(layers=args.layers, hidden=args.hidden, heads=args.heads,
                       seq_len=args.seq_len, vocab=args.vocab, kv_heads=args.kv_heads,
                       ffn_hidden=args.ffn_hidden, gated_mlp=args.gated_mlp,
                       tied_embeddings=not args.untied, position_embeddings=not args.rotary,
                       dropout=not args.no_dropout, norm=args.norm)


def run(args: argparse.Namespace) -> int:
    if args.action == "validate":
        return _validate(args)
    from suite.scale.search import SEARCHED_DP_MODES, search
    from suite.scale.whatif import (
        as_text,
        fitted_hardware,
        search_as_text,
        search_report,
        what_if,
    )

    model = _model(args)
    spec = SYSTEMS[args.system]
    if args.recompute_early_stop is not None:
        spec = replace(spec, recompute_early_stop=args.recompute_early_stop)
    if args.logit_metrics is not None:
        spec = replace(spec, logit_metrics=args.logit_metrics)
    hw, fitted_on = fitted_hardware(args.gpu, args.system, args.gemm_efficiency,
                                    args.straggler, args.paper_dir)
    if args.search:
        if args.attention_unpad:
            raise ValueError("--attention-unpad is a what-if setting; --search prices the "
                             "kernels without it")
        chosen = {"attention": (args.attention,) if args.attention else ATTENTION,
                  "dp_modes": (args.dp_mode,) if args.dp_mode else SEARCHED_DP_MODES}
        report = search_report(model, hw, search(model, args.gpus, args.global_batch, hw, spec,
                                                 **chosen), args.system, fitted_on, args.top)
        print(json.dumps(report, indent=1) if args.json else search_as_text(report))
        return 0
    if args.gpus % (args.tp * args.pp):
        raise ValueError(f"gpus={args.gpus} is not a multiple of tp * pp = {args.tp * args.pp}")
    full = 1.0 if args.recompute == "full" else 0.0
    settings = spec.layout_defaults(args.vp, full, args.sequence_parallel)
    settings.update({k: v for k, v in (("attention", args.attention), ("dp_mode", args.dp_mode),
                                        ("loss", args.loss)) if v is not None})
    if args.attention_unpad:
        settings["attention_unpad"] = True
    layout = Layout(tp=args.tp, pp=args.pp, dp=args.gpus // (args.tp * args.pp),
                    micro_batch=args.micro_batch, global_batch=args.global_batch,
                    virtual_stages=args.vp, recompute=args.recompute,
                    sequence_parallel=args.sequence_parallel,
                    first_stage_layers=args.first_stage_layers,
                    last_stage_layers=args.last_stage_layers, **settings)
    result = what_if(model, hw, layout, args.system, fitted_on)
    print(json.dumps(result, indent=1) if args.json else as_text(result))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from suite.scale import peer
    from suite.scale.runs import read_runs
    from suite.scale.validate import (
        memory_line,
        memory_summary,
        predict,
        summarize,
        unfitted_straggler,
        user_system,
        weak_calibration,
    )

    runs = read_runs(args.runs, args.system_like)
    known = {r.id for r in runs}
    ids = [part.strip() for value in args.calibrate
           for part in ([value] if value.strip() in known else value.split(",")) if part.strip()]
    by = [c.strip() for c in args.by.split(",") if c.strip()]
    runs, calibration = user_system(runs, args.runs.stem, ids)
    table = predict(runs, calibration).merge(peer.predict(runs, calibration),
                                             on=["dataset", "system", "label"])
    ours = summarize(table, by=by)
    theirs = summarize(table, "peer_fitted_time_s", by=by)
    weak = weak_calibration(table)
    unfitted = [u.line() for u in unfitted_straggler(table)]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)
    if args.validate_json:
        print(json.dumps({"system": args.runs.stem, "calibration": ids,
                          "gemm_efficiency": float(table.gemm_efficiency.iloc[0]),
                          "straggler": float(table.straggler.iloc[0]),
                          "weak_calibration": weak,
                          "unfitted_straggler": unfitted,
                          "summary": json.loads(ours.to_json(orient="records")),
                          "memory": json.loads(memory_summary(table).to_json(orient="records")),
                          "peer": peer.PEER,
                          "peer_summary": json.loads(theirs.to_json(orient="records")),
                          "rows": json.loads(table.to_json(orient="records"))}, indent=1))
        return 0
    print(f"{args.runs.stem}: fitted on {ids}: gemm efficiency "
          f"{table.gemm_efficiency.iloc[0]:.3f}, straggler {table.straggler.iloc[0]:.4f}")
    for line in weak + unfitted:
        print(f"warning: {line}", file=sys.stderr)
    cols = ["label", "paper_iteration_time_s", "predicted_iteration_time_s",
            "iteration_time_rel_error", "peer_fitted_time_s", "calibration",
            *(["outcome"] if (table.outcome == "oom").any() else []),
            *(["paper_memory_gib"] if table.paper_memory_gib.notna().any() else []),
            "predicted_memory_gib", "predicted_fits"]
    print(table[cols].rename(columns={"paper_iteration_time_s": "measured_s",
                                      "predicted_iteration_time_s": "model_s",
                                      "iteration_time_rel_error": "error",
                                      "peer_fitted_time_s": "llm_analysis_s",
                                      "paper_memory_gib": "measured_gib",
                                      "predicted_memory_gib": "model_gib",
                                      "predicted_fits": "fits"})
          .to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    for name, summary in (("scale model", ours), (peer.PEER, theirs)):
        for r in summary.itertuples():
            where = "".join(f", {c}={getattr(r, c)}" for c in by)
            print(f"{name} on {r.dataset}{where} ({r.runs} rows not fitted): mean |error| "
                  f"{r.time_mean_abs_pct:.1f}%, signed {r.time_mean_signed_pct:+.1f}%, max "
                  f"{r.time_max_abs_pct:.1f}%, within 10%: {100 * r.within_10pct:.0f}%"
                  + (f"; {r.sweeps} sweeps: top-1 regret {r.top1_regret_pct:.1f}%"
                     + (f", Spearman {r.spearman:.2f}" if not math.isnan(r.spearman) else "")
                     if r.sweeps else ""))
    for r in memory_summary(table).itertuples():
        line = memory_line(r)
        if line:
            print(f"memory on {r.dataset}: {line}")
    return 0
