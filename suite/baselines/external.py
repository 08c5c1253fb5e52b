"""Any program as a baseline: the workload goes out as JSON, a result record comes back.

This is how FasterTransformer, TurboTransformers or the original ByteTransformer builds are
compared without Python bindings (``docs/external-baselines.md``). A program is configured under
``bert_varlen.external.<name>`` and listed as baseline ``external-<name>``.

Protocol ``seedbench-external/1``. The suite runs ``command + [request.json]``. The request holds
the canonical weights (``model_dir``: HF ``config.json`` + ``model.safetensors``, fp32), the
padded batch, dtype, device, threads, the timing policy and ``output_path``. The program
computes the encoder's last hidden state for the batch, runs it ``warmup`` times and then at least
``min_repeats`` times (and for at least ``min_time_s`` seconds, at most ``max_repeats`` times),
timing each call itself (a process start and a weight load are not what is measured), writes the
last hidden state of the batch as a float32 ``.npy`` ``[B, S, H]`` to ``output_path`` and prints
one JSON object as the last line of stdout::

    {"protocol": "seedbench-external/1", "status": "ok", "samples_s": [...], "details": {...}}

or ``{"protocol": ..., "status": "unavailable", "reason": "..."}`` when it cannot run here (no
GPU, wrong architecture). The suite checks the written output against its float64 oracle exactly
as for an in-process baseline; a wrong output is recorded ``incorrect`` and its timings dropped.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite.baselines.base import Baseline, Unavailable
from suite.baselines.external_build import BUILD_ROOT, STAMP
from suite.devices import dtype_name
from suite.records import clip
from suite.workloads import BertBatch

PROTOCOL = "seedbench-external/1"
PREFIX = "external-"


@dataclass(frozen=True)
class ExternalSpec:
    """One configured program (``bert_varlen.external.<name>``)."""
    name: str
    command: tuple[str, ...]
    source: str | None = None  # a source checkout that cmake builds into build_dir
    cmake_args: tuple[str, ...] = ()
    build_target: str | None = None
    description: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def build_dir(self) -> Path:
        return BUILD_ROOT / self.name

    def argv(self) -> list[str]:
        """The command with ``{build_dir}`` and ``{source}`` filled in."""
        values = {"{build_dir}": str(self.build_dir.resolve()),
                  "{source}": str(Path(self.source).resolve()) if self.source else ""}
        out = []
        for part in self.command:  # plain replacement: other braces (JSON, code) stay as they are
            for key, value in values.items():
                part = part.replace(key, value)
            out.append(part)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("name")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def spec_from_config(name: str, d: dict[str, Any]) -> ExternalSpec:
    return ExternalSpec(name=name, command=tuple(d["command"]), source=d.get("source"),
                        cmake_args=tuple(d.get("cmake_args", ())),
                        build_target=d.get("build_target"),
                        description=d.get("description", ""), env=dict(d.get("env", {})))


class External(Baseline):
    """A configured program; ``padding_free`` is what the program says of itself (``details``),
    since only it knows whether it computes padding."""

    name = "external"
    description = ("any program speaking the seedbench-external/1 JSON protocol "
                   "(configure bert_varlen.external.<name>, list external-<name>)")
    times_itself = True

    def __init__(self, spec: ExternalSpec | None = None, timeout_s: float = 1800.0) -> None:
        self.spec, self.timeout_s = spec, timeout_s
        self._samples: list[float] | None = None
        self._details: dict[str, Any] = {}

    def available(self) -> tuple[bool, str]:
        if self.spec is None:
            return False, ("no program configured: add bert_varlen.external.<name> with a "
                           "command and list baseline external-<name>")
        argv = self.spec.argv()
        stamp = self.spec.build_dir / STAMP
        if self.spec.source and not stamp.exists():
            return False, (f"{self.spec.source} is not built yet ({stamp} "
                           f"missing): the workflow's external_build rule builds it, or run "
                           f"`seedbench build-external {self.spec.name} --config FILE`")
        if self.spec.source:
            built = json.loads(stamp.read_text())
            if built.get("status", "ok") != "ok":
                return False, f"{self.spec.source} did not build here: {built.get('reason')}"
        if shutil.which(argv[0]) is None:
            hint = ("set bert_varlen.external.{0}.source to a source checkout to build it"
                    if not self.spec.source else "check the command against the build's outputs")
            return False, (f"command {argv[0]!r} of external program {self.spec.name!r} is not "
                           f"an executable on this machine; " + hint.format(self.spec.name))
        return True, ""

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"seedbench-{self.spec.name}-"))
        self.model_dir = self.workdir / "model"
        model.save_pretrained(self.model_dir, safe_serialization=True)
        self.device, self.dtype = device, dtype_name(dtype)
        self.policy: dict[str, Any] = {"warmup": 1, "min_repeats": 3, "min_time_s": 1.0,
                                       "max_repeats": 1000}

    def set_timing(self, policy: dict[str, Any]) -> None:
        self.policy = dict(policy)

    def run(self, batch: BertBatch) -> np.ndarray:
        """One invocation of the program: warm-up and timed repeats inside, the output of the
        batch back. The samples are kept for ``reported_samples``."""
        out_path = self.workdir / "last_hidden_state.npy"
        out_path.unlink(missing_ok=True)
        request = {
            "protocol": PROTOCOL, "task": "bert-encoder", "model_dir": str(self.model_dir),
            "dtype": self.dtype, "device": str(self.device), "threads": torch.get_num_threads(),
            "batch": {"input_ids": batch.input_ids.tolist(),
                      "attention_mask": batch.attention_mask.tolist(),
                      "token_type_ids": batch.token_type_ids.tolist(),
                      "lengths": list(batch.lengths)},
            "timing": self.policy, "output_path": str(out_path),
        }
        request_path = self.workdir / "request.json"
        request_path.write_text(json.dumps(request))
        reply = self._invoke(request_path)
        if reply.get("status") == "unavailable":
            raise Unavailable(clip(f"{self.spec.name}: {reply.get('reason', 'no reason given')}"))
        if reply.get("status") != "ok":
            raise RuntimeError(f"external program {self.spec.name!r} replied status "
                               f"{reply.get('status')!r} (expected 'ok' or 'unavailable'): "
                               f"{clip(str(reply.get('reason', '')))}")
        samples = reply.get("samples_s")
        if (not isinstance(samples, list) or not samples
                or not all(isinstance(s, (int, float)) and math.isfinite(s) and s > 0
                           for s in samples)):
            raise RuntimeError(f"external program {self.spec.name!r}: samples_s must be a "
                               "non-empty list of finite positive seconds, got "
                               f"{clip(repr(samples))}")
        details = reply.get("details", {})
        if not isinstance(details, dict):
            raise RuntimeError(f"external program {self.spec.name!r}: details must be a JSON "
                               f"object, got {type(details).__name__}")
        if not out_path.exists():
            raise RuntimeError(f"external program {self.spec.name!r} wrote no output to "
                               f"{out_path}")
        self._samples = [float(s) for s in samples]
        self._details = details
        self.padding_free = bool(self._details.get("padding_free", False))
        return np.load(out_path)

    def _invoke(self, request_path: Path) -> dict[str, Any]:
        argv = [*self.spec.argv(), str(request_path)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s,
                                  env={**os.environ, **self.spec.env})
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"external program {self.spec.name!r} ran past "
                               f"{self.timeout_s:g} s") from None
        tail = clip("\n".join(proc.stderr.strip().splitlines()[-8:]))
        if proc.returncode != 0:
            raise RuntimeError(f"external program {self.spec.name!r} exited with "
                               f"{proc.returncode}: {tail}")
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        try:
            reply = json.loads(lines[-1])
            assert isinstance(reply, dict)
        except (IndexError, ValueError, AssertionError):
            raise RuntimeError(f"external program {self.spec.name!r} did not print a JSON object "
                               f"as its last stdout line (got {clip(repr(lines[-1:]))}); "
                               f"stderr: "
                               f"{tail}") from None
        if reply.get("protocol") != PROTOCOL:
            raise RuntimeError(f"external program {self.spec.name!r} speaks protocol "
                               f"{reply.get('protocol')!r}, expected {PROTOCOL!r}")
        return reply

    def reported_samples(self) -> list[float] | None:
        return self._samples

    def details(self) -> dict[str, Any]:
        return {"program": self.spec.name, "command": self.spec.argv(),
                "timer": "reported by the program", **self._details}


class BuildFailed(RuntimeError):
    """cmake's configure or build step failed; the message ends with its output's tail."""


def build(spec: ExternalSpec, jobs: int = 1, record_failure: bool = False) -> Path:
    """Configure and build ``spec.source`` with cmake into ``spec.build_dir``; write the stamp
    (source commit, arguments, cmake version) that marks the build done. Returns the stamp.

    A build that fails raises ``BuildFailed``; with ``record_failure`` (the workflow's rule) the
    stamp records the failure instead, with cmake's last lines, and every point of the program
    is then ``unavailable`` with that reason rather than a broken workflow."""
    if not spec.source:
        raise ValueError(f"external program {spec.name!r} has no source to build "
                         f"(bert_varlen.external.{spec.name}.source is null)")
    source = Path(spec.source).resolve()
    if not (source / "CMakeLists.txt").is_file():
        raise ValueError(f"bert_varlen.external.{spec.name}.source = {spec.source!r} has no "
                         f"CMakeLists.txt; it must be a CMake source checkout")
    build_dir = spec.build_dir.resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    stamp = build_dir / STAMP
    stamp.unlink(missing_ok=True)
    meta: dict[str, Any] = {"name": spec.name, "source": str(source)}
    try:
        meta.update(_cmake(spec, source, build_dir, jobs))
    except (BuildFailed, FileNotFoundError) as e:
        if not record_failure:
            raise
        meta.update(status="failed", reason=clip(str(e), 2000))
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True,
                            text=True)
    meta["source_commit"] = commit.stdout.strip() if commit.returncode == 0 else None
    stamp.write_text(json.dumps({"status": "ok", **meta}, indent=1))
    return stamp


def _cmake(spec: ExternalSpec, source: Path, build_dir: Path, jobs: int) -> dict[str, Any]:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise FileNotFoundError("cmake is not on PATH: pip install 'seedbench[external]' "
                                "(the cmake wheel) or install it from your system")
    configure = [cmake, "-S", str(source), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 *spec.cmake_args]
    compile_ = [cmake, "--build", str(build_dir), "--parallel", str(max(1, jobs))]
    if spec.build_target:
        compile_ += ["--target", spec.build_target]
    for argv in (configure, compile_):
        print("+", " ".join(argv), flush=True)
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace")
        print(done.stdout, end="", flush=True)
        if done.returncode != 0:
            raise BuildFailed(f"`{' '.join(argv[:2])} ...` exited {done.returncode}:\n"
                              + _failure_lines(done.stdout))
    version = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout
    return {"cmake": version.splitlines()[0] if version else None, "configure": configure,
            "build": compile_}


def _failure_lines(output: str, first: int = 8, last: int = 6) -> str:
    """What a reader needs of a failed build's output: the compilers' first error lines (make's
    own ``*** [...] Error`` lines are only their echo), then the last lines."""
    lines = output.strip().splitlines()
    errors = [ln for ln in lines if "error" in ln.lower() and "***" not in ln][:first]
    tail = [ln for ln in lines[-last:] if ln not in errors]
    return "\n".join([*errors, *(["..."] if errors and tail else []), *tail])
