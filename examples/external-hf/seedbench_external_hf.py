#!/usr/bin/env python3
"""A complete external program for seedbench's ``external`` baseline (protocol
seedbench-external/1), written as an adapter for another framework would be: it reads the
request, loads the canonical weights from ``model_dir``, times its own calls, writes the last
hidden state as .npy and prints one JSON line. This one runs HF transformers (padded, eager), so
the suite's tests can exercise the protocol end to end; a FasterTransformer or ByteTransformer
adapter replaces ``load`` and ``forward`` (see docs/external-baselines.md).

Usage: seedbench_external_hf.py [--mutate NAME] REQUEST.json
``--mutate NAME`` maps one weight wrongly, as a buggy adapter would (a bias dropped, Q and K
swapped, ...: the catalogue of ``suite/measure/mutations.py``), to show that the suite's
correctness gate catches it. An adapter of your own leaves it out.
"""

from __future__ import annotations

import json
import sys
import time

PROTOCOL = "seedbench-external/1"


def reply(**fields) -> None:
    print(json.dumps({"protocol": PROTOCOL, **fields}), flush=True)


def main(argv: list[str]) -> int:
    mutation = argv[argv.index("--mutate") + 1] if "--mutate" in argv else None
    request = json.loads(open(argv[-1]).read())
    if request.get("protocol") != PROTOCOL:
        reply(status="failed", reason=f"unknown protocol {request.get('protocol')!r}")
        return 1
    if request["device"] != "cpu" or request["dtype"] != "fp32":
        reply(status="unavailable",
              reason=f"this example runs fp32 on cpu only, not {request['dtype']} on "
                     f"{request['device']}")
        return 0

    import numpy as np
    import torch
    from transformers import AutoModel

    torch.set_num_threads(int(request["threads"]))
    model = AutoModel.from_pretrained(request["model_dir"], attn_implementation="eager").eval()
    if mutation:
        from suite.measure.mutations import mutate

        model = mutate(model, mutation)
    batch = {k: torch.tensor(request["batch"][k]) for k in ("input_ids", "attention_mask")}
    if getattr(model.config, "type_vocab_size", 0) > 0:
        batch["token_type_ids"] = torch.tensor(request["batch"]["token_type_ids"])

    def forward():
        with torch.inference_mode():
            return model(**batch).last_hidden_state

    policy = request["timing"]
    for _ in range(policy["warmup"]):
        forward()
    samples: list[float] = []
    started = time.perf_counter()
    while (len(samples) < policy["min_repeats"]
           or (time.perf_counter() - started < policy["min_time_s"]
               and len(samples) < policy["max_repeats"])):
        t0 = time.perf_counter()
        out = forward()
        samples.append(time.perf_counter() - t0)
    np.save(request["output_path"], out.float().numpy())
    reply(status="ok", samples_s=samples,
          details={"padding_free": False, "framework": "transformers (eager, padded)",
                   "torch": torch.__version__})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
