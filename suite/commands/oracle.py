"""``seedbench oracle``: the float64 reference output of one end-to-end BERT point, written once
for every system measured there (``seedbench run --oracle``; ``suite.experiments.bert_oracle``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("oracle", help="the float64 reference output of one BERT point -> a file "
                                      "that every system's `run --oracle` reads")
    p.add_argument("experiment", choices=experiments.oracle_experiments())
    p.add_argument("--subject", default="bert",
                   help="model family: bert, albert, distilbert or deberta")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--max-seq-len", type=int, required=True)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", type=Path, help="workflow config YAML")
    src.add_argument("--section-json", help="the bert_varlen config section as JSON")
    p.add_argument("--out", type=Path, required=True, help="the oracle file (.pt) to write")


def run(args: argparse.Namespace) -> int:
    import torch

    from suite import env as envmod
    from suite.config import BertVarlenConfig, load
    from suite.experiments import bert_oracle
    from suite.experiments.bert_varlen import distribution_of

    section = (load(args.config)["bert_varlen"] if args.config
               else json.loads(args.section_json))
    cfg = BertVarlenConfig.from_dict(section)
    torch.set_num_threads(cfg.threads or envmod.usable_cores())
    oracle = bert_oracle.compute(cfg, distribution_of(cfg, args.experiment), args.subject,
                                 args.batch_size, args.max_seq_len)
    bert_oracle.write(oracle, args.out)
    print(f"{args.out}: {tuple(oracle['output'].shape)} float64", file=sys.stderr)
    return 0
