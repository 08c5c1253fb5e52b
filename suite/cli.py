"""``seedbench``: thin command line over the layers below. Each ``run`` is one job in its own
process, as the workflow's rules call it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from suite.experiments import registry as experiments
from suite.machine_load import NOISY_CV


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seedbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="measure one workload point of one system -> a record")
    run.add_argument("experiment", choices=experiments.names("bert"),
                     help="a BERT experiment (training runs: `train`, loss runs: `pretrain`)")
    run.add_argument("--system", required=True,
                     help="system under test: a registered baseline, a ladder step (ladder-N), "
                          "a kernel variant or external-<name>")
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
    train.add_argument("experiment", choices=experiments.names("llm"),
                       help="experiment name in the record")
    train.add_argument("--trainer", required=True, help="a registered trainer (seedbench trainers)")
    train.add_argument("--label", help="the run's name in its experiment (a size, an ablation "
                                       "step), kept in the record")
    train.add_argument("--nprocs", type=int, default=1, help="processes per node")
    train.add_argument("--train-json", required=True, help="the TrainConfig section as JSON")
    train.add_argument("--check-steps", type=int, default=3)
    train.add_argument("--peak", type=Path)
    train.add_argument("--timeout-s", type=float, default=1800.0)
    train.add_argument("--nnodes", type=int, default=1,
                       help="nodes of the run; > 1 needs --rdzv-endpoint (the same command on "
                            "every node) or a SLURM allocation of that many nodes (one torchrun "
                            "per node through srun, meeting at the allocation's first host)")
    train.add_argument("--rdzv-endpoint", help="HOST:PORT every node reaches (multi-node)")
    train.add_argument("--node-rank", type=int,
                       help="this node's rank with --rdzv-endpoint: node 0 writes the record, "
                            "the others only run their ranks")
    train.add_argument("--local-addr", help="this node's address as the other nodes reach it "
                                            "(torchrun --local-addr; default: its hostname)")
    train.add_argument("--out", type=Path, required=True)
    train.add_argument("--steplog", type=Path, required=True)

    pre = sub.add_parser("pretrain", help="one pre-training loss run (VWN variant or PMA study) "
                                          "for one seed -> a record")
    pre.add_argument("experiment", choices=experiments.names("pretrain"))
    pre.add_argument("--spec-json", required=True,
                     help="vwn_scaling: the variant's train config; pma_merging: the pma section")
    pre.add_argument("--seed", type=int, required=True)
    pre.add_argument("--series", default="main", help="vwn_scaling: main or m_ablation")
    pre.add_argument("--checkpoints", type=Path,
                     help="pma_merging: folder for the run's checkpoints")
    pre.add_argument("--out", type=Path, required=True)
    pre_table = sub.add_parser("pretrain-table", help="VWN or PMA records -> table.csv, "
                                                      "curves.csv and claims.csv")
    pre_table.add_argument("experiment", choices=experiments.names("pretrain"))
    pre_table.add_argument("records", nargs="*", type=Path)
    _paper_argument(pre_table)
    pre_table.add_argument("--out-dir", type=Path, required=True)

    sub.add_parser("trainers", help="list registered training engines and whether they run here")
    llm_table = sub.add_parser("llm-table", help="training records -> one tidy CSV")
    llm_table.add_argument("records", nargs="*", type=Path)
    llm_table.add_argument("--out", type=Path, required=True)
    llm_table.add_argument("--curves", type=Path, help="also write the loss per step (the step "
                                                       "logs the records name) here")

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
    plot.add_argument("experiment", choices=experiments.names())
    plot.add_argument("--table", type=Path, required=True)
    _paper_argument(plot)
    plot.add_argument("--curves", type=Path, help="the table step's curves.csv (loss curves)")
    plot.add_argument("--peak", type=Path, help="peak.json (the roofline's library lines)")
    plot.add_argument("--out", type=Path, required=True, help="figure path without suffix")

    analyze = sub.add_parser("analyze", help="one experiment's table (+ the papers' CSVs, other "
                                             "tables, records) -> analysis.json for the report")
    analyze.add_argument("experiment", choices=experiments.names())
    analyze.add_argument("--table", type=Path, required=True)
    _paper_argument(analyze)
    analyze.add_argument("--table-of", action="append", default=[], metavar="EXPERIMENT=CSV",
                         help="another experiment's table this analysis reads")
    analyze.add_argument("--claims", type=Path, help="a claims table the table step wrote")
    analyze.add_argument("--records", nargs="*", type=Path, default=[],
                         help="the records behind the table (provenance)")
    analyze.add_argument("--out", type=Path, required=True)

    cmp = sub.add_parser("compare", help="two results folders (machines or commits) point by "
                                         "point; exit 1 on a significant regression")
    cmp.add_argument("base", help="a results folder, or a machine name under results/ or "
                                  "results/published/")
    cmp.add_argument("new", help="the same, compared against base")
    cmp.add_argument("--threshold", type=float, default=0.05,
                     help="a change counts when its whole 95%% CI is beyond 1 +/- this (0.05)")
    cmp.add_argument("--noisy-cv", type=float, default=NOISY_CV,
                     help="a point whose samples vary more than this CV is 'noisy' "
                          f"({NOISY_CV}; so is one timed beside busy processes)")
    noisy = sub.add_parser("noisy", help="the records of points timed on a busy or noisy "
                                         "machine, one path per line (make rerun-noisy "
                                         "re-runs them)")
    noisy.add_argument("folders", nargs="*", type=Path, help="results folders")
    noisy.add_argument("--config", type=Path,
                       help="a workflow config: its machine's folder, results/<machine>")
    cmp.add_argument("--out", type=Path, help="also write the Markdown table here")

    scale = sub.add_parser("scale-table", help="the cluster-scale model against every published "
                                               "run, llm-analysis beside it -> CSV")
    _paper_argument(scale)
    scale.add_argument("--out", type=Path, required=True)

    from suite.scale import command as scale_command  # torch-free
    scale_command.add_parser(sub)

    report = sub.add_parser("report", help="tidy CSVs + figures + analyses of every machine "
                                           "folder -> HTML report")
    report.add_argument("--machine", nargs=3, action="append",
                        metavar=("FOLDER", "LABEL", "PEAK_JSON"),
                        help="a machine folder, its label in the report and its peak.json "
                             "(repeat; the first is shown first; default: the sections' "
                             "folders, without a peak)")
    report.add_argument("--section", nargs=5, action="append", required=True,
                        metavar=("FOLDER", "EXPERIMENT", "TABLE", "FIGURE_SVG", "ANALYSIS_JSON"))
    report.add_argument("--config", type=Path)
    report.add_argument("--out", type=Path, required=True)

    publish = sub.add_parser("publish", help="copy a machine folder's records into "
                                             "results/published/<name>/ (then make report)")
    publish.add_argument("source", type=Path, help="a machine folder, e.g. results/<machine>")
    publish.add_argument("--name", help="the published folder's name (default: the source's)")
    publish.add_argument("--replace", action="store_true",
                         help="replace an already published folder of that name")

    gpu = sub.add_parser("gpu-check", help="the GPU half in one short lease (kernel tests, "
                                           "autotune, MHA, BERT, ladder, ~1B GPT) -> OUT")
    gpu.add_argument("--out", type=Path, required=True,
                     help="steps.json, tuning.json, kernel_tests.xml, results.tar.gz")
    gpu.add_argument("--dry", action="store_true",
                     help="rehearse every step on CPU at tiny sizes (Triton interpreted)")
    gpu.add_argument("--budget-s", type=float, default=480.0,
                     help="no step starts after this many seconds (480)")

    heads = sub.add_parser("headlines", help="the README's block of published results "
                                             "(after make report) -> stdout or the README")
    heads.add_argument("folders", type=Path, nargs="+", help="published machine folders")
    heads.add_argument("--update-readme", type=Path, metavar="README",
                       help="write the block between the README's markers instead")

    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ValueError, KeyError, OSError) as e:  # OSError: a missing file, a full disk
        print(f"seedbench {args.command}: error: {e}", file=sys.stderr)
        return 2


def _paper_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--paper", action="append", default=[], metavar="ROLE=CSV",
                        help="a paper's CSV under the role the experiment's spec names "
                             "(`seedbench experiments` lists them)")


def _pairs(items: list[str], what: str) -> dict[str, Path]:
    """``["key=path", ...]`` -> {key: path}."""
    out = {}
    for item in items:
        key, sep, path = item.partition("=")
        if not sep or not key or not path:
            raise ValueError(f"{what} {item!r} is not KEY=PATH")
        out[key] = Path(path)
    return out


def _paper_tables(experiment: str, items: list[str]) -> dict:
    """The --paper CSVs, checked against the roles the experiment's spec declares."""
    import pandas as pd

    given = _pairs(items, "--paper")
    roles = experiments.get(experiment).paper
    unknown = sorted(set(given) - set(roles))
    if unknown:
        raise ValueError(f"{experiment}: paper role(s) {unknown} are not declared; its spec "
                         f"declares {sorted(roles) or 'none'}")
    return {role: pd.read_csv(path) for role, path in given.items()}


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

    from suite.launch import run_isolated
    from suite.records import Record, failed_record

    def failed(reason: str) -> Record:
        point = {"batch_size": args.batch_size, "max_seq_len": args.max_seq_len,
                 "subject": args.subject}
        return failed_record(args.experiment, args.system, point, cfg.to_dict(), reason)

    child = ["run", args.experiment, "--system", args.system, "--batch-size",
             str(args.batch_size), "--max-seq-len", str(args.max_seq_len), "--section-json",
             json.dumps(cfg.to_dict()), "--out", str(args.out), "--in-process"]
    if args.subject:
        child += ["--subject", args.subject]
    if args.peak:
        child += ["--peak", str(args.peak)]
    run_isolated([sys.executable, "-m", "suite.cli", *child], args.out, failed, cfg.timeout_s)
    return 0


def _measure(args: argparse.Namespace, cfg, peak):
    runner = experiments.load(experiments.get(args.experiment).runner)
    return runner(cfg, args.experiment, args.subject, args.system, args.batch_size,
                  args.max_seq_len, peak)


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
    from suite.cluster import AllocationError, multi_node_allocation, srun_environment
    from suite.launch import command, run_isolated
    from suite.records import Record, failed_record, write_record

    train = json.loads(args.train_json)

    def failed(reason: str) -> Record:
        point = {"nprocs": args.nprocs, **({"nnodes": args.nnodes} if args.nnodes > 1 else {}),
                 **({"label": args.label} if args.label else {})}
        return failed_record(args.experiment, args.trainer, point, train,
                             reason)

    inner = ["--section-json", args.train_json, "--trainer", args.trainer, "--out",
             str(args.out), "--steplog", str(args.steplog), "--check-steps",
             str(args.check_steps), "--experiment", args.experiment]
    if args.label:
        inner += ["--label", args.label]
    if args.peak:
        inner += ["--peak", str(args.peak)]
    owner = not args.node_rank  # node 0 (or a one-node run) owns the record
    if owner:
        args.out.unlink(missing_ok=True)
        args.steplog.parent.mkdir(parents=True, exist_ok=True)
    try:
        endpoint, prefix, rdzv_id, env = args.rdzv_endpoint, [], "seedbench", None
        if args.nnodes > 1 and not endpoint:  # the nodes of the SLURM allocation
            alloc = multi_node_allocation(args.nnodes)
            endpoint, prefix = alloc.rendezvous_endpoint(), alloc.srun_prefix(args.nnodes)
            rdzv_id, env = f"slurm-{alloc.job_id}", srun_environment(os.environ)
        cmd = prefix + command(args.trainer, args.nprocs, inner, nnodes=args.nnodes,
                               node_rank=args.node_rank, rdzv_endpoint=endpoint,
                               rdzv_id=rdzv_id, local_addr=args.local_addr,
                               join_timeout_s=args.timeout_s if args.nnodes > 1 else None)
    except (AllocationError, ValueError, FileNotFoundError) as e:
        if not owner:
            raise
        write_record(failed(f"cannot launch: {e}"), args.out)
        args.steplog.touch()
        return 0
    code = run_isolated(cmd, args.out, failed if owner else None, args.timeout_s,
                        record_wait_s=60.0 if args.nnodes > 1 else 0.0, env=env)
    if not owner:
        return code
    if not args.steplog.exists():  # a run that failed before its first step: an empty log
        args.steplog.touch()
    return 0


def _pretrain(args: argparse.Namespace) -> int:
    from suite.records import write_record

    runner = experiments.load(experiments.get(args.experiment).runner)
    record = runner(json.loads(args.spec_json), args.seed, series=args.series,
                    checkpoints=args.checkpoints)
    write_record(record, args.out)
    print(f"{args.out}: {record.status.value} {record.reason[:300]}", file=sys.stderr)
    return 0


def _pretrain_table(args: argparse.Namespace) -> int:
    spec = experiments.get(args.experiment)
    paper = _paper_tables(spec.name, args.paper)
    missing = sorted(set(spec.paper) - set(paper))
    if missing:
        raise ValueError(f"{spec.name}: the table step needs the paper CSV(s) {missing} "
                         "(--paper ROLE=CSV)")
    table, curves, claims = experiments.load(spec.table)(args.records, paper)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, df in (("table", table), ("curves", curves), ("claims", claims)):
        df.to_csv(args.out_dir / f"{name}.csv", index=False)
    return 0


def _trainers(args: argparse.Namespace) -> int:
    from suite.trainers import registry as trainers

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
    from suite.analysis.llm_tables import llm_curves, llm_table

    df = llm_table(args.records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    if args.curves:
        llm_curves(df).to_csv(args.curves, index=False)
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

    from suite.baselines.registry import baselines as registry

    def ask(name: str) -> str:
        code = ("import json, sys; from suite.baselines.registry import baselines as registry; "
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
    for spec in experiments.SPECS.values():
        print(f"{spec.name:14s} [{spec.family}] {spec.title}")
        for role, path in spec.paper_paths().items():
            print(f"{'':14s} --paper {role}={path}")
    return 0


def _table(args: argparse.Namespace) -> int:
    from suite.analysis.tables import tidy_table

    df = tidy_table(args.records, args.padded_baseline)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    return 0


def _plot(args: argparse.Namespace) -> int:

    from suite.analysis.figure_io import FigureData
    from suite.analysis.tidy import read_table
    from suite.peak.schema import read_peak

    data = FigureData(read_table(args.table), _paper_tables(args.experiment, args.paper),
                      curves=read_table(args.curves) if args.curves else None,
                      peak=read_peak(args.peak))
    experiments.load(experiments.get(args.experiment).figure)(data, args.out)
    return 0


def _analyze(args: argparse.Namespace) -> int:
    import pandas as pd

    from suite.analysis.analyze import AnalysisInputs, analyze
    from suite.analysis.tidy import read_table
    from suite.records import atomic_write_json

    spec = experiments.get(args.experiment)
    others = _pairs(args.table_of, "--table-of")
    unknown = sorted(set(others) - set(spec.reads_tables))
    if unknown:
        raise ValueError(f"{spec.name} reads the tables of {list(spec.reads_tables) or 'none'}, "
                         f"not {unknown}")
    inputs = AnalysisInputs(read_table(args.table), _paper_tables(spec.name, args.paper),
                            {name: read_table(path) for name, path in others.items()},
                            pd.read_csv(args.claims) if args.claims else None, args.records)
    atomic_write_json(analyze(spec, inputs), args.out)
    return 0


def _results_folder(name: str) -> Path:
    """A folder as given, else a machine's folder under results/ or results/published/."""
    for candidate in (Path(name), Path("results") / name, Path("results/published") / name):
        if candidate.is_dir():
            return candidate
    raise ValueError(f"{name!r} is neither a folder nor a machine under results/ or "
                     "results/published/")


def _compare(args: argparse.Namespace) -> int:
    from suite.analysis.compare import compare, markdown

    base, new = _results_folder(args.base), _results_folder(args.new)
    table = compare(base, new, threshold=args.threshold, noisy_cv=args.noisy_cv)
    text = markdown(table, str(base), str(new), args.threshold)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    slower = table[table.verdict == "slower"]
    if not slower.empty:
        print(f"seedbench compare: {len(slower)} point(s) slower beyond "
              f"{100 * args.threshold:g}%", file=sys.stderr)
        return 1
    return 0


def _gpu_check(args: argparse.Namespace) -> int:
    from suite.gpu_check import run

    steps = run(args.out, dry=args.dry, budget_s=args.budget_s)["steps"]
    for step in steps:
        print(f"{step['step']:8s} {step['status']:8s} {step.get('seconds', '')}")
    return 0 if all(s["status"] == "ok" for s in steps) else 1


def _noisy(args: argparse.Namespace) -> int:
    from suite.machine_load import noise_columns
    from suite.records import NOT_RECORDS, read_record

    if not args.folders and not args.config:
        raise ValueError("give results folders or --config")
    folders = list(args.folders)
    if args.config:
        from suite.config import load
        from suite.env import machine_slug

        machine = load(args.config)["machine"]
        mine = Path("results") / (machine_slug() if machine == "auto" else machine)
        if mine.is_dir():  # else nothing has run on this machine yet: nothing is noisy
            folders.append(mine)
    for folder in folders:
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a folder of results")
        for path in sorted(folder.rglob("*.json")):
            if path.name in NOT_RECORDS or path.name.startswith(".") or "logs" in path.parts:
                continue
            if noise_columns(read_record(path).timing)["noisy"]:
                print(path)
    return 0


def _scale_table(args: argparse.Namespace) -> int:
    from suite.scale.datasets import validation_table

    table = validation_table(_paper_tables("llm_scale", args.paper))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    return 0


def _scale_model(args: argparse.Namespace) -> int:
    from suite.scale import command

    return command.run(args)


def _publish(args: argparse.Namespace) -> int:
    from suite.machine_results import publish, summarize

    dest, files = publish(args.source, args.name, replace=args.replace)
    records = [p for p in files if p.suffix == ".json" and p.name != "peak.json"]
    print(f"published {len(records)} records ({summarize(records)}) and "
          f"{len(files) - len(records)} other files to {dest}/\n"
          f"next: make report, then git add {dest}", file=sys.stderr)
    return 0


def _headlines(args: argparse.Namespace) -> int:
    from suite.report.readme import headlines_markdown, update_readme

    if args.update_readme:
        changed = update_readme(args.update_readme, args.folders)
        print(f"{args.update_readme}: {'updated' if changed else 'already up to date'}",
              file=sys.stderr)
    else:
        print("\n\n".join(headlines_markdown(f) for f in args.folders))
    return 0


def _report(args: argparse.Namespace) -> int:
    from suite.report.render import Machine, Section, render_report

    machines = [Machine(folder, label, Path(peak))
                for folder, label, peak in args.machine] if args.machine else None
    sections = [Section(m, e, Path(t), Path(f), Path(a)) for m, e, t, f, a in args.section]
    render_report(sections, args.out, machines=machines, config_path=args.config)
    return 0


COMMANDS = {"run": _run, "peak": _peak, "env": _env, "baselines": _baselines,
            "experiments": _experiments, "build-external": _build_external, "table": _table,
            "train": _train, "trainers": _trainers, "pretrain": _pretrain,
            "pretrain-table": _pretrain_table, "llm-table": _llm_table,
            "plot": _plot, "analyze": _analyze, "compare": _compare, "noisy": _noisy,
            "gpu-check": _gpu_check,
            "scale-model": _scale_model, "scale-table": _scale_table, "report": _report,
            "publish": _publish,
            "headlines": _headlines}

if __name__ == "__main__":
    sys.exit(main())
