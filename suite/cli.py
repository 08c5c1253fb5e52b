"""``seedbench``: thin command line over the layers below. Each ``run`` is one job in its own
process, as the workflow's rules call it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from suite.experiments import EXPERIMENTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seedbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="measure one workload point of one baseline -> a record")
    run.add_argument("experiment", choices=sorted(e for e in EXPERIMENTS if e.startswith("bert_")),
                     help="a BERT experiment (training runs: `train`, loss runs: `pretrain`)")
    run.add_argument("--baseline", required=True, help="system under test")
    run.add_argument("--subject", default=None,
                     help="model family (bert, albert, distilbert, deberta) for end-to-end "
                          "experiments; operator (attention, layernorm, gemm_gelu) for kernels")
    run.add_argument("--batch-size", type=int, required=True)
    run.add_argument("--max-seq-len", type=int, required=True)
    src = run.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", type=Path, help="workflow config YAML")
    src.add_argument("--section-json", help="the experiment's config section as JSON")
    run.add_argument("--peak", type=Path, help="peak.json from `seedbench peak`")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--in-process", action="store_true",
                     help="run here instead of in a supervised child process")

    peak = sub.add_parser("peak", help="measure the GEMM FLOP/s of every library this machine "
                                       "reaches (each in its own process) -> peak.json")
    peak.add_argument("--dtypes", nargs="+", default=["fp32"])
    peak.add_argument("--sizes", nargs="+", type=int, default=[1024, 2048])
    peak.add_argument("--repeats", type=int, default=3)
    peak.add_argument("--min-time-s", type=float, default=0.2, help="per timed round")
    peak.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    peak.add_argument("--threads", type=int, help="default: the usable cores")
    peak.add_argument("--libraries", nargs="+",
                      help="default: every library of the device type (torch.matmul, onednn, "
                           "numpy, tensorflow, onnxruntime on CPU; cublas on CUDA)")
    peak.add_argument("--fma-units", type=int,
                      help="FMA units per core, where cpuinfo cannot tell (Intel AVX-512 SKUs)")
    peak.add_argument("--clock-ghz", type=float, help="the clock for the theoretical peak")
    peak.add_argument("--out", type=Path, help="write JSON here (default: print)")

    train = sub.add_parser("train", help="one training run under its launcher -> a record and "
                                         "a JSON-lines step log (what the llm rules call)")
    train.add_argument("experiment", help="experiment name in the record (llm_mfu, ...)")
    train.add_argument("--trainer", required=True, help="a registered trainer (seedbench trainers)")
    train.add_argument("--nprocs", type=int, default=1, help="processes per node")
    train.add_argument("--train-json", required=True, help="the TrainConfig section as JSON")
    train.add_argument("--check-steps", type=int, default=3)
    train.add_argument("--peak", type=Path)
    train.add_argument("--timeout-s", type=float, default=1800.0)
    train.add_argument("--nnodes", type=int, default=1)
    train.add_argument("--rdzv-endpoint", help="HOST:PORT every node reaches (multi-node)")
    train.add_argument("--out", type=Path, required=True)
    train.add_argument("--steplog", type=Path, required=True)

    pre = sub.add_parser("pretrain", help="one pre-training loss run (VWN variant or PMA study) "
                                          "for one seed -> a record")
    pre.add_argument("experiment", choices=["vwn_scaling", "pma_merging"])
    pre.add_argument("--spec-json", required=True,
                     help="vwn_scaling: the variant's train config; pma_merging: the pma section")
    pre.add_argument("--seed", type=int, required=True)
    pre.add_argument("--series", default="main", help="vwn_scaling: main or m_ablation")
    pre.add_argument("--checkpoints", type=Path,
                     help="pma_merging: folder for the run's checkpoints")
    pre.add_argument("--out", type=Path, required=True)
    pre_table = sub.add_parser("pretrain-table", help="VWN or PMA records -> table.csv, "
                                                      "curves.csv and claims.csv")
    pre_table.add_argument("experiment", choices=["vwn_scaling", "pma_merging"])
    pre_table.add_argument("records", nargs="*", type=Path)
    pre_table.add_argument("--paper-dir", type=Path, default=Path("results/paper"),
                           help="folder with the papers' CSVs (vwn_*.csv, pma_headline.csv)")
    pre_table.add_argument("--out-dir", type=Path, required=True)

    sub.add_parser("trainers", help="list registered training engines and whether they run here")
    llm_table = sub.add_parser("llm-table", help="training records -> one tidy CSV")
    llm_table.add_argument("records", nargs="*", type=Path)
    llm_table.add_argument("--out", type=Path, required=True)

    ext = sub.add_parser("build-external",
                         help="cmake-build the source checkout of a configured external program")
    ext.add_argument("name", help="the program's key under bert_varlen.external")
    ext_src = ext.add_mutually_exclusive_group(required=True)
    ext_src.add_argument("--config", type=Path, help="workflow config YAML")
    ext_src.add_argument("--section-json", help="the bert_varlen config section as JSON")
    ext.add_argument("--jobs", type=int, default=os.cpu_count() or 1)

    sub.add_parser("env", help="print the environment and provenance record")
    sub.add_parser("baselines", help="list registered baselines and whether they run here")
    sub.add_parser("experiments", help="list experiment families")

    table = sub.add_parser("table", help="records -> one tidy CSV")
    table.add_argument("records", nargs="*", type=Path)
    table.add_argument("--padded-baseline", default="torch-eager")
    table.add_argument("--out", type=Path, required=True)

    plot = sub.add_parser("plot", help="one experiment's tidy CSV -> a figure (PNG and SVG)")
    plot.add_argument("experiment", choices=sorted(EXPERIMENTS))
    plot.add_argument("--table", type=Path, required=True)
    plot.add_argument("--paper", type=Path, help="the paper's numbers the figure shows beside")
    plot.add_argument("--claims", type=Path, help="the paper's claims table")
    plot.add_argument("--curves", type=Path, help="vwn_scaling/pma_merging: curves.csv")
    plot.add_argument("--peak", type=Path, help="bert_varlen: peak.json for the roofline panel")
    plot.add_argument("--out", type=Path, required=True, help="figure path without suffix")

    scale = sub.add_parser("scale-model",
                           help="the cluster-scale model vs MegaScale Table 2 and Fig. 9 -> CSV")
    scale.add_argument("--out", type=Path, required=True)

    report = sub.add_parser("report", help="tidy CSVs + figures -> HTML report")
    report.add_argument("--section", nargs=3, action="append", required=True,
                        metavar=("EXPERIMENT", "TABLE", "FIGURE_SVG"))
    report.add_argument("--claims", type=Path, help="the paper's claims (CSV)")
    report.add_argument("--section-claims", nargs=2, action="append", default=[],
                        metavar=("EXPERIMENT", "CLAIMS_CSV"),
                        help="a measured claims table shown in that experiment's section")
    report.add_argument("--peak", type=Path)
    report.add_argument("--config", type=Path)
    report.add_argument("--out", type=Path, required=True)

    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, KeyError, FileNotFoundError) as e:
        print(f"seedbench {args.command}: error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from suite.config import BertVarlenConfig, load

    section = (load(args.config)["bert_varlen"] if args.config
               else json.loads(args.section_json))
    cfg = BertVarlenConfig.from_dict(section)
    if args.in_process:
        from suite.records import write_record

        from suite.peak.schema import read_peak

        peak = read_peak(args.peak)
        record = _measure(args, cfg, peak)
        write_record(record, args.out)
        print(f"{args.out}: {record.status.value} {record.reason[:200]}", file=sys.stderr)
        return 0

    from suite import env as envmod
    from suite.isolation import run_isolated
    from suite.records import Record, Status

    def failed(reason: str) -> Record:
        point = {"batch_size": args.batch_size, "max_seq_len": args.max_seq_len,
                 "subject": args.subject}
        return Record(args.experiment, args.baseline, point, cfg.to_dict(), Status.FAILED,
                      reason, env=envmod.capture(torch_info=False),
                      created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))

    child = ["run", args.experiment, "--baseline", args.baseline, "--batch-size",
             str(args.batch_size), "--max-seq-len", str(args.max_seq_len), "--section-json",
             json.dumps(cfg.to_dict()), "--out", str(args.out), "--in-process"]
    if args.subject:
        child += ["--subject", args.subject]
    if args.peak:
        child += ["--peak", str(args.peak)]
    args.out.unlink(missing_ok=True)
    run_isolated([sys.executable, "-m", "suite.cli", *child], args.out, failed, cfg.timeout_s)
    return 0


def _measure(args: argparse.Namespace, cfg, peak):
    if args.experiment in ("bert_mha", "bert_fused_ops"):
        from suite.experiments.bert_kernels import OPS, run_kernel_point

        op = args.subject or OPS[args.experiment][0]
        return run_kernel_point(cfg, args.experiment, op, args.baseline, args.batch_size,
                                args.max_seq_len, peak)
    from suite.experiments.bert_varlen import run_point

    return run_point(cfg, args.baseline, args.batch_size, args.max_seq_len, peak,
                     experiment=args.experiment, model_kind=args.subject or "bert")


def _peak(args: argparse.Namespace) -> int:
    from suite.env import capture
    from suite.peak import peak_report
    from suite.records import atomic_write_json

    device_type = args.device
    if device_type == "auto":
        import torch

        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    result = {**peak_report(args.dtypes, device_type, args.sizes, args.repeats, args.threads,
                            args.libraries, args.min_time_s, args.fma_units, args.clock_ghz),
              "env": capture(torch_info=False),
              "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    for dtype, entry in result["peaks"].items():
        for lib, e in entry["libraries"].items():
            rate = (f"{e['flops_per_s'] / 1e9:8.1f} GFLOP/s  {e['isa']}" if e["status"] == "ok"
                    else f"{e['status']}: {e['reason']}")
            print(f"{dtype} {lib:13s} {rate}", file=sys.stderr)
        best, theory = entry["measured"], entry["theoretical"]
        print(f"{dtype} measured peak: " + (f"{best['flops_per_s'] / 1e9:.1f} GFLOP/s "
                                            f"({best['library']})" if best else "none"),
              file=sys.stderr)
        print(f"{dtype} theoretical: " + (f"{theory['flops_per_s'] / 1e9:.1f} GFLOP/s = "
                                          f"{theory['formula']}" if theory["flops_per_s"]
                                          else f"unknown ({theory['reason']})"), file=sys.stderr)
    if args.out:
        atomic_write_json(result, args.out)
    else:
        print(json.dumps(result, indent=1))
    return 0


def _train(args: argparse.Namespace) -> int:
    """Launch the run (torchrun, the deepspeed launcher or one process) under supervision: a
    crash, a hang past the limit (the whole process group is killed) or a missing record
    becomes a failed record."""
    from suite import env as envmod
    from suite.experiments.llm_train import command
    from suite.isolation import run_isolated
    from suite.records import Record, Status

    train = json.loads(args.train_json)

    def failed(reason: str) -> Record:
        return Record(args.experiment, args.trainer, {"nprocs": args.nprocs}, train,
                      Status.FAILED, reason, env=envmod.capture(torch_info=False),
                      created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))

    inner = ["--section-json", args.train_json, "--trainer", args.trainer, "--out",
             str(args.out), "--steplog", str(args.steplog), "--check-steps",
             str(args.check_steps), "--experiment", args.experiment]
    if args.peak:
        inner += ["--peak", str(args.peak)]
    cmd = command(args.trainer, args.nprocs, inner, nnodes=args.nnodes,
                  rdzv_endpoint=args.rdzv_endpoint)
    args.out.unlink(missing_ok=True)
    args.steplog.parent.mkdir(parents=True, exist_ok=True)
    run_isolated(cmd, args.out, failed, args.timeout_s)
    if not args.steplog.exists():  # a run that failed before its first step: an empty log
        args.steplog.touch()
    return 0


def _pretrain(args: argparse.Namespace) -> int:
    from suite.records import write_record

    spec = json.loads(args.spec_json)
    if args.experiment == "vwn_scaling":
        from suite.experiments.vwn_width import run

        record = run(spec, args.seed, series=args.series)
    else:
        from suite.experiments.pma_merging import run

        if args.checkpoints is None:
            raise ValueError("pma_merging needs --checkpoints DIR")
        record = run(spec, args.seed, args.checkpoints)
    write_record(record, args.out)
    print(f"{args.out}: {record.status.value} {record.reason[:300]}", file=sys.stderr)
    return 0


def _pretrain_table(args: argparse.Namespace) -> int:
    import pandas as pd

    paper = args.paper_dir
    if args.experiment == "vwn_scaling":
        from suite.analysis.vwn_analysis import analyze

        table, curves, claims = analyze(args.records, pd.read_csv(paper / "vwn_headline.csv"),
                                        pd.read_csv(paper / "vwn_table1_a0.8b_m8_500b_tokens.csv"))
    else:
        from suite.analysis.pma_analysis import analyze

        table, curves, claims = analyze(args.records, pd.read_csv(paper / "pma_headline.csv"))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, df in (("table", table), ("curves", curves), ("claims", claims)):
        df.to_csv(args.out_dir / f"{name}.csv", index=False)
    return 0


def _trainers(args: argparse.Namespace) -> int:
    from suite import trainers

    for name in trainers.names():
        try:
            engine = trainers.create(name)
            ok, why = engine.available()
            desc = engine.description
        except Exception as e:  # noqa: BLE001 - a broken plugin is listed, not fatal
            ok, why, desc = False, f"cannot load: {type(e).__name__}: {e}", ""
        state = "available" if ok else f"unavailable: {why}"
        print(f"{name:18s} {state}  {desc}")
    return 0


def _llm_table(args: argparse.Namespace) -> int:
    from suite.analysis.llm_tables import llm_table

    df = llm_table(args.records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    return 0


def _build_external(args: argparse.Namespace) -> int:
    from suite.baselines.external import build, spec_from_config
    from suite.config import BertVarlenConfig, ConfigError, load

    section = (load(args.config)["bert_varlen"] if args.config
               else json.loads(args.section_json))
    programs = BertVarlenConfig.from_dict(section).external
    if args.name not in programs:
        raise ConfigError(f"no external program {args.name!r} under bert_varlen.external "
                          f"(configured: {sorted(programs)})")
    print(build(spec_from_config(args.name, programs[args.name]), args.jobs))
    return 0


def _env(args: argparse.Namespace) -> int:
    from suite.env import capture

    print(json.dumps(capture(), indent=1))
    return 0


def _baselines(args: argparse.Namespace) -> int:
    """Each baseline is loaded and asked in its own process: frameworks that cannot share one
    (tensorflow before triton crashes) are asked apart, and a broken plugin breaks nothing."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from suite.baselines import registry

    def ask(name: str) -> str:
        code = ("import json, sys; from suite.baselines import registry; "
                "b = registry.create(sys.argv[1]); ok, why = b.available(); "
                "print(json.dumps([ok, why, b.description]))")
        proc = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                              timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        try:
            ok, why, desc = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            ok, why, desc = False, f"cannot load: {tail}", ""
        state = "available" if ok else f"unavailable: {why}"
        return f"{name:22s} {state}  {desc}"

    with ThreadPoolExecutor(max_workers=2) as pool:
        for line in pool.map(ask, registry.names()):
            print(line)
    return 0


def _experiments(args: argparse.Namespace) -> int:
    from suite.experiments import EXPERIMENTS

    for name, desc in EXPERIMENTS.items():
        print(f"{name:14s} {desc}")
    return 0


def _table(args: argparse.Namespace) -> int:
    from suite.analysis.tables import tidy_table

    df = tidy_table(args.records, args.padded_baseline)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    return 0


def _plot(args: argparse.Namespace) -> int:
    import pandas as pd

    from suite.analysis.plots import experiment_figure

    def read(path: Path | None) -> pd.DataFrame | None:
        return pd.read_csv(path) if path else None

    from suite.peak.schema import read_peak

    experiment_figure(args.experiment, pd.read_csv(args.table), read(args.paper),
                      read(args.claims), args.out, curves=read(args.curves),
                      peak=read_peak(args.peak))
    return 0


def _scale_model(args: argparse.Namespace) -> int:
    import pandas as pd

    from suite.scale_model import predict_fig9, predict_table2

    table = pd.concat([predict_table2().assign(figure="table2"),
                       predict_fig9().assign(figure="fig9")], ignore_index=True)
    table.insert(0, "experiment", "llm_scale")
    table["status"] = "ok"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    return 0


def _report(args: argparse.Namespace) -> int:
    from suite.report.render import render_report

    sections = [(e, Path(t), Path(f)) for e, t, f in args.section]
    render_report(sections, args.out, peak_path=args.peak, config_path=args.config,
                  claims_path=args.claims,
                  section_claims={e: Path(c) for e, c in args.section_claims})
    return 0


COMMANDS = {"run": _run, "peak": _peak, "env": _env, "baselines": _baselines,
            "experiments": _experiments, "build-external": _build_external, "table": _table,
            "train": _train, "trainers": _trainers, "pretrain": _pretrain,
            "pretrain-table": _pretrain_table, "llm-table": _llm_table,
            "plot": _plot, "scale-model": _scale_model, "report": _report}

if __name__ == "__main__":
    sys.exit(main())
