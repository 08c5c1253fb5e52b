"""What the correctness gate can see: how far each mis-mapping of the canonical weights moves
the output, against each dtype's tolerance, and how far from uniform the canonical attention
is. The margins behind ``tests/test_gate_mutations.py``, at the sizes the runs use.

    .venv/bin/python benchmarks/gate_sensitivity.py [--sizes tiny base] [--max-len 128]
        [--batch 4] [--dtypes fp32 bf16 fp16] [--weights canonical hf-init]

Per family and size: each layer's mean normalized attention entropy (1.0 is uniform), then for
no mutation, each of ``suite.measure.mutations.MUTATIONS`` and the ``ACCEPTED`` ones, the max
abs error of HF eager in each dtype (on this CPU) against the float64 oracle, and whether the
gate calls it incorrect. ``--weights hf-init`` measures HF's own initialization instead, the
weights the gate ran with before scheme version 2. Writes ``--out`` (JSON) and prints a table.
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import asdict
from pathlib import Path

import torch

from suite import env as envmod
from suite.config import BertDims
from suite.experiments.bert_oracle import reference_output
from suite.measure.correctness import TOLERANCE, compare
from suite.measure.mutations import ACCEPTED, MUTATIONS, attention_entropy, mutate
from suite.models import KINDS, WEIGHTS, canonical_model, hf_initialized, hf_inputs
from suite.devices import torch_dtype
from suite.workloads import bert_batch, varlen_lengths

SIZES = {"tiny": BertDims(layers=2, hidden=32, heads=4, intermediate=64, vocab_size=100),
         "small": BertDims(layers=2, hidden=64, heads=4, intermediate=256, vocab_size=1000),
         "base": BertDims()}


@torch.inference_mode()
def one(kind: str, dims: BertDims, max_len: int, batch_size: int, dtypes: list[str],
        weights: str) -> dict:
    lengths = varlen_lengths(batch_size, max_len, seed=0)
    batch = bert_batch(lengths, max_len, dims.vocab_size, seed=0)
    model = (canonical_model(kind, dims, max_len) if weights == "canonical" else
             hf_initialized(kind, dims, max_len))
    oracle = reference_output(model, batch, torch.device("cpu"))
    errors: dict[str, dict[str, dict]] = {}
    for name in ("none", *MUTATIONS, *ACCEPTED):
        system = model if name == "none" else mutate(model, name)
        errors[name] = {}
        for dtype in dtypes:
            m = copy.deepcopy(system).to(torch_dtype(dtype))
            out = m(**hf_inputs(m, batch.input_ids, batch.attention_mask,
                                batch.token_type_ids)).last_hidden_state
            check = compare(out, oracle, batch.attention_mask, dtype)
            errors[name][dtype] = {"max_abs_err": check["max_abs_err"],
                                   "incorrect": not check["passed"]}
    return {"lengths": lengths, "attention_entropy": attention_entropy(model, batch),
            "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["tiny", "base"])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--dtypes", nargs="+", choices=sorted(TOLERANCE),
                        default=["fp32", "fp16", "bf16"])
    parser.add_argument("--weights", choices=["canonical", "hf-init"], default="canonical")
    parser.add_argument("--out", type=Path,
                        default=Path("reports/benchmarks/gate_sensitivity.json"))
    args = parser.parse_args()
    torch.set_num_threads(envmod.usable_cores())
    results = {}
    for size in args.sizes:
        for kind in args.kinds:
            r = one(kind, SIZES[size], args.max_len, args.batch, args.dtypes, args.weights)
            results[f"{kind}/{size}"] = r
            entropy = r["attention_entropy"]
            print(f"{kind}/{size}: attention entropy per layer "
                  + " ".join(f"{e:.2f}" for e in entropy)
                  + f" (mean {sum(entropy) / len(entropy):.2f}; 1.0 is uniform)")
            for name, by_dtype in r["errors"].items():
                print(f"  {name:16s} " + "  ".join(
                    f"{d} {e['max_abs_err']:.2g}{' caught' if e['incorrect'] else ''}"
                    for d, e in by_dtype.items()), flush=True)
    header = {"benchmark": "gate_sensitivity", "weights": args.weights,
              "scheme": WEIGHTS.as_dict() if args.weights == "canonical" else None,
              "sizes": {s: asdict(SIZES[s]) for s in args.sizes}, "max_len": args.max_len,
              "batch": args.batch, "tolerance": TOLERANCE, "machine": envmod.machine_slug(),
              "cpu_model": envmod.cpu_model(), "git": envmod.git_state()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**header, "results": results}, indent=1))


if __name__ == "__main__":
    main()
