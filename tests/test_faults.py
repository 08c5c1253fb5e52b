"""Faults injected for real, with what must follow asserted (marker ``faults``: ``pytest -m
faults`` runs only these; ``make test`` runs them too).

- killed work: the workflow killed outright (SIGKILL) or interrupted (SIGINT) mid-run, then
  started again the way ``make reproduce`` does; a point job SIGKILLed while it takes samples;
- resources: a full disk (RLIMIT_FSIZE), a memory limit (RLIMIT_AS), a job over its timeout;
- misbehaving plugins and external programs: import error, crash in ``prepare``, segfault, hang,
  NaN/Inf, wrong shape/dtype/device/type, markup and floods on stderr (external programs'
  malformed and huge replies: ``test_baselines_external.py``);
- damaged results: truncated, other schema, stray and non-JSON files at the table step; records
  of two configs in one folder;
- bad configs: property-based over the schema (hypothesis);
- noise: a point timed beside a CPU hog against a quiet one; `make rerun-noisy`;
- trust boundaries: hostile strings from another machine's records in the figure and report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from suite.launch import warm
from suite.records import Status, read_record

from conftest import BIN, ROOT, copy_workflow, job_env, wait_for_a_quiet_machine, warm_servers
UNLOCK = ROOT / "workflows" / "unlock_stale.py"
pytestmark = pytest.mark.faults

CONFIG = {
    "machine": "faults",
    "peak": {"dtypes": ["fp32"], "sizes": [64], "repeats": 1,
             "libraries": ["torch.matmul", "numpy"]},
    "bert_varlen": {
        "baselines": ["torch-eager", "reference", "torch-nested"],
        "model": {"layers": 1, "hidden": 32, "heads": 4, "intermediate": 64, "vocab_size": 100},
        "batch_sizes": [2], "max_seq_lens": [8, 16], "device": "cpu", "threads": 1,
        # 2 s of timing a point: a Ctrl-C or kill then meets a running point (warm-started
        # tiny points last about a second, less than the wait for a quiet log)
        "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 2.0},
        **{k: {"enabled": False} for k in ("ablation", "mha", "fused_ops", "fixed_length",
                                            "variants")},
    },
    "llm": {"enabled": False}, "vwn": {"enabled": False}, "pma": {"enabled": False},
}


def _snakemake() -> list[str]:
    """What `make reproduce` runs (Makefile: SNAKEMAKE)."""
    return [str(BIN / "snakemake"), "--profile", str(ROOT / "workflows/profiles/local"),
            "--configfile", "config.yaml"]


def _records(results: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in results.rglob("b*_l*.json")}


def _workflow_dir(tmp_path: Path) -> Path:
    """A copy of the workflow with the small config; returns its machine's results folder."""
    return copy_workflow(tmp_path, CONFIG) / "results" / "faults"


def _start_and_stop(workdir: Path, results: Path, written: int, sig: int) -> dict[Path, int]:
    """Start the workflow (what `make reproduce` runs after its unlock step), send ``sig`` to
    Snakemake and the job it runs once this run has written ``written`` records; returns the
    records then on disk. Records from before count only once rewritten: Snakemake removes an
    earlier run's incomplete one as it starts, so counting all on disk raced that removal."""
    start = time.time_ns()

    def new() -> int:
        return sum(mtime >= start for mtime in _records(results).values())

    with (workdir / "run.log").open("a") as log:
        run = subprocess.Popen([*_snakemake(), "--cores", "1"], cwd=workdir, env=job_env(),
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=_default_sigint)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and new() < written and run.poll() is None:
            time.sleep(0.2)
        _until_quiet(workdir / "run.log", deadline)
        assert run.poll() is None, "the workflow ended before it could be stopped"
        assert new() >= written, (workdir / "run.log").read_text()[-3000:]
        os.killpg(run.pid, sig)  # Snakemake and the job it is running (the foreground group)
        run.wait(timeout=120)
    return _records(results)


def _default_sigint() -> None:
    """Ctrl-C's default in the started workflow, whatever pytest inherited: a shell starts a
    background command with SIGINT ignored, a child inherits that across exec, and Python then
    installs no KeyboardInterrupt handler, so the workflow would never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _until_quiet(log: Path, deadline: float, quiet_s: float = 1.0) -> None:
    """Wait until Snakemake has written nothing for ``quiet_s``: it is then waiting on a job.
    Snakemake's log handler swallows a KeyboardInterrupt raised while it writes
    (snakemake/logging.py, ``emit``), and the record that ends the wait appears just as
    Snakemake logs the job's end."""
    size, since = log.stat().st_size, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.1)
        if log.stat().st_size != size:
            size, since = log.stat().st_size, time.monotonic()


def _locked(workdir: Path) -> bool:
    locks = workdir / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def _unlock(workdir: Path) -> str:
    """The first step of `make reproduce`; returns what it said."""
    unlock = subprocess.run([sys.executable, str(UNLOCK), *_snakemake()], cwd=workdir,
                            env=job_env(), capture_output=True, text=True, timeout=300)
    assert unlock.returncode == 0, unlock.stderr
    return unlock.stderr


def _redone(before: dict[Path, int], after: dict[Path, int]) -> list[Path]:
    """Records of ``before`` that ``after`` holds rewritten. With one core one job runs at a
    time, and only the job cut off may run again (its record can be on disk before Snakemake
    saw it end): at most one per stop."""
    return [p for p in before if after[p] != before[p]]


def test_a_workflow_interrupted_then_killed_resumes_and_rerun_noisy_forces_exactly_the_noisy(
        tmp_path):
    """One workflow folder through what happens to real runs, in order (each step would
    otherwise pay for a whole run of its own):

    1. Ctrl-C (SIGINT to the whole foreground group) while a point runs: Snakemake cleans up,
       no lock is left and the unlock step says nothing;
    2. the next `make reproduce` killed outright (SIGKILL: OOM killer, power loss) mid-point:
       the lock stays; Snakemake alone refuses the directory (what users met before), the unlock
       step drops the stale lock with a message, and the run finishes only the unfinished
       points: every record parses, nothing finished is redone or lost;
    3. `make rerun-noisy` (workflows/rerun_noisy.py): the records judged noisy (every verdict
       set here by hand, two noisy: the detector itself is tested below) run again, nothing
       else does, and a call with none left finds nothing to do."""
    results = _workflow_dir(tmp_path)

    interrupted = _start_and_stop(tmp_path, results, 2, signal.SIGINT)
    assert len(interrupted) < 6, "Ctrl-C did not stop the workflow"
    assert not _locked(tmp_path)  # Ctrl-C lets Snakemake clean up after itself
    assert "stale lock" not in _unlock(tmp_path)

    killed = _start_and_stop(tmp_path, results, 1, signal.SIGKILL)
    assert len(_redone(interrupted, killed)) <= 1
    assert _locked(tmp_path)
    refused = subprocess.run([*_snakemake(), "--cores", "1"], cwd=tmp_path, env=job_env(),
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "--unlock" in refused.stdout + refused.stderr
    assert "stale lock" in _unlock(tmp_path)
    again = subprocess.run([*_snakemake(), "--cores", "1"], cwd=tmp_path, env=job_env(),
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    before = _records(results)
    assert len(before) == 6  # 3 systems x 2 lengths: the unfinished ones ran
    assert len(_redone(killed, before)) <= 1
    for path in before:
        assert read_record(path).status == Status.OK, path
    assert (tmp_path / "reports" / "index.html").stat().st_size > 0

    # The verdicts set by hand: tiny points (3 samples) are often noisy on their own, and all
    # of them are beside another test worker. The detector itself is tested below.
    noisy = set(sorted(before)[:2])
    for path in before:
        _judge(path, path in noisy)
    rerun = [sys.executable, str(ROOT / "workflows" / "rerun_noisy.py"), "config.yaml",
             *_snakemake(), "--cores", "1"]
    again = subprocess.run(rerun, cwd=tmp_path, env=job_env(), capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "re-running 2 noisy point(s)" in again.stderr
    after = _records(results)
    assert {p for p in after if after[p] != before[p]} == noisy
    for path in noisy:  # fresh records with the detector's own verdicts
        assert BY_HAND not in read_record(path).timing["noise"]["reasons"]
    for path in after:
        _judge(path, False)
    done = subprocess.run(rerun, cwd=tmp_path, env=job_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and "nothing to re-run" in done.stderr, done.stderr[-3000:]
    assert _records(results) == after


BY_HAND = "noisy: set by the test"


def _judge(path: Path, noisy: bool) -> None:
    """Set a record's noise verdict by hand, its modification time kept (so Snakemake sees
    nothing else change)."""
    stat = path.stat()
    raw = json.loads(path.read_text())
    raw["timing"]["noise"] = {"noisy": noisy, "reasons": [BY_HAND] if noisy else [],
                              "thresholds": {"cv": 0.15, "other_cpus": 0.5}}
    path.write_text(json.dumps(raw))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_lock_held_by_a_live_run_is_left_alone(tmp_path):
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    fake = tmp_path / "snakemake"  # a process that looks like a Snakemake run working here
    fake.write_text("import time\ntime.sleep(60)\n")
    live = subprocess.Popen([sys.executable, str(fake)], cwd=tmp_path)
    try:
        time.sleep(0.5)
        held = subprocess.run([sys.executable, str(UNLOCK), "snakemake"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    finally:
        live.kill()
        live.wait()
    assert held.returncode == 1
    assert f"another Snakemake run (pid {live.pid})" in held.stderr
    assert (tmp_path / ".snakemake" / "locks" / "0.input.lock").exists()


# --- misbehaving plugins -------------------------------------------------------------------------
# A plugin distribution as an installed one looks to importlib.metadata (a dist-info folder on the
# path), each baseline broken in one way; the entry-point registry finds them like any plugin.
MISBEHAVING = textwrap.dedent('''
    import os, signal, time
    import torch
    from suite.baselines.torch_hf import TorchEager

    class CrashInPrepare(TorchEager):
        name = "crash-in-prepare"
        def prepare(self, model, device, dtype):
            raise RuntimeError("prepare blew up")

    class NanOutput(TorchEager):
        name = "nan-output"
        def run(self, batch):
            return super().run(batch) * float("nan")

    class InfOutput(TorchEager):
        name = "inf-output"
        def run(self, batch):
            out = super().run(batch).clone()
            out[0, 0, 0] = float("inf")
            return out

    class WrongShape(TorchEager):
        name = "wrong-shape"
        def run(self, batch):
            return super().run(batch)[:, :-1]

    class WrongDtype(TorchEager):
        name = "wrong-dtype"
        def run(self, batch):
            return super().run(batch).to(torch.int32)

    class WrongDevice(TorchEager):
        name = "wrong-device"
        def run(self, batch):
            return super().run(batch).to("meta")

    class NotATensor(TorchEager):
        name = "not-a-tensor"
        def run(self, batch):
            return {"hidden": "<b>not</b> a tensor"}

    class HtmlAndScript(TorchEager):
        name = "html-script"
        def run(self, batch):
            import sys
            print("<script>alert('stderr')</script>" * 500, file=sys.stderr)
            raise RuntimeError("<script>alert('pwned')</script><img src=x onerror=alert(1)>")

    class Segfault(TorchEager):
        name = "segfault"
        def run(self, batch):
            import sys
            print("<script>x</script>" * 100_000, file=sys.stderr, flush=True)  # one 1.8 MB line
            os.kill(os.getpid(), signal.SIGSEGV)

    class Hang(TorchEager):
        name = "hang"
        def run(self, batch):
            time.sleep(3600)

    class OutOfMemory(TorchEager):
        name = "out-of-memory"
        def run(self, batch):
            return torch.ones(8 * 2**30, dtype=torch.uint8)  # 8 GiB, over the job's limit
''')
BROKEN_IMPORT = "raise ImportError(\"No module named 'cuda_magic' (a missing dependency)\")\n"
PLUGIN_NAMES = {"crash-in-prepare": "CrashInPrepare", "nan-output": "NanOutput",
                "inf-output": "InfOutput", "wrong-shape": "WrongShape",
                "wrong-dtype": "WrongDtype", "wrong-device": "WrongDevice",
                "not-a-tensor": "NotATensor", "html-script": "HtmlAndScript",
                "segfault": "Segfault", "hang": "Hang", "out-of-memory": "OutOfMemory"}
SECTION = {"model": {"layers": 1, "hidden": 32, "heads": 4, "intermediate": 64,
                     "vocab_size": 100},
           "batch_sizes": [2], "max_seq_lens": [16], "device": "cpu", "threads": 1,
           "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 0.0}, "timeout_s": 60}


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """A folder holding the misbehaving plugin distribution (put it on PYTHONPATH)."""
    root = tmp_path_factory.mktemp("plugins")
    (root / "misbehaving.py").write_text(MISBEHAVING)
    (root / "broken_import.py").write_text(BROKEN_IMPORT)
    info = root / "misbehaving-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: misbehaving\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[seedbench.baselines]\n"
        + "".join(f"{n} = misbehaving:{c}\n" for n, c in PLUGIN_NAMES.items())
        + "broken-import = broken_import:Anything\n")
    return root


def _run_point(system: str, out: Path, plugins: Path, section: dict | None = None,
               preexec=None) -> subprocess.CompletedProcess:
    """`seedbench run` as the workflow's bert_point rule runs it (supervisor + child)."""
    env = {**job_env(), "PYTHONPATH": os.pathsep.join([str(plugins), str(ROOT)])}
    return subprocess.run(
        [str(BIN / "seedbench"), "run", "bert_varlen", "--system", system, "--batch-size", "2",
         "--max-seq-len", "16", "--section-json", json.dumps(section or SECTION), "--out",
         str(out)], env=env, capture_output=True, text=True, timeout=300, preexec_fn=preexec)


# system -> (status, what the reason must say)
PLUGIN_FAULTS = {
    "broken-import": ("failed", "No module named 'cuda_magic'"),
    "crash-in-prepare": ("failed", "RuntimeError: prepare blew up"),
    "nan-output": ("incorrect", "non-finite values"),
    "inf-output": ("incorrect", "non-finite values"),
    "wrong-shape": ("incorrect", "output shape (2, 15, 32) != reference shape (2, 16, 32)"),
    "wrong-dtype": ("incorrect", "output dtype torch.int32: a hidden state is floating point"),
    "wrong-device": ("incorrect", "output on device meta: a tensor without values"),
    "not-a-tensor": ("incorrect", "output of type dict"),
    "html-script": ("failed", "RuntimeError: <script>alert('pwned')</script>"),
    "segfault": ("failed", "killed by signal 11"),
    "hang": ("failed", "timed out after 8 s"),
    "out-of-memory": ("failed", "can't allocate memory"),
}


def test_misbehaving_plugins_become_records_with_the_reason_and_the_report_escapes_them(
        plugin_path, tmp_path):
    """Each broken plugin ends as the right record, the sweep goes on (a good system runs after
    them), and nothing of theirs reaches the report's HTML unescaped."""
    from concurrent.futures import ThreadPoolExecutor

    from suite.analysis.tables import tidy_table
    from suite.report.render import render_report
    from conftest import report_section

    def memory_limit():  # the job's memory limit: 6 GiB of address space
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    outs = {system: tmp_path / "results" / system / "b2_l16.json"
            for system in [*PLUGIN_FAULTS, "torch-eager"]}
    # a preexec_fn is unsafe beside threads: that one runs first, alone; the rest two at a time
    done = {"out-of-memory": _run_point("out-of-memory", outs["out-of-memory"], plugin_path,
                                        SECTION, memory_limit)}
    rest = [s for s in outs if s not in done]  # the good system last: the sweep went on
    with ThreadPoolExecutor(max_workers=2) as pool:
        done |= dict(zip(rest, pool.map(lambda s: _run_point(
            s, outs[s], plugin_path, {**SECTION, "timeout_s": 8} if s == "hang" else SECTION),
            rest)))
    for system, out in outs.items():
        assert done[system].returncode == 0, done[system].stderr[-2000:]
        rec = read_record(out)  # every fault leaves a whole, valid record
        want_status, want_reason = PLUGIN_FAULTS.get(system, ("ok", ""))
        assert rec.status.value == want_status, (system, rec.reason)
        assert want_reason in rec.reason, (system, rec.reason)
        if want_status == "incorrect":
            assert rec.timing == {}, system  # flagged, not timed
    assert len(read_record(outs["segfault"]).reason) < 20_000  # a clipped tail, not the flood

    table = tidy_table(outs.values())
    section = report_section(tmp_path, "bert_varlen", table, records=list(outs.values()))
    html = render_report([section], tmp_path / "index.html").read_text()
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>not" not in html
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in html
    for system in PLUGIN_FAULTS:
        assert system in html  # every one listed among the problems


# --- killed work, resources -------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def _job_of(supervisor: int, env: dict[str, str]) -> int:
    """A point job's process: forked by the warm server of the supervisor's environment
    (suite.launch.warm), else the supervisor's own child."""
    (job,) = [k for s in warm_servers(warm.server_key(env)) for k in _children(s)] \
        or _children(supervisor)
    return job


def _digest(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_point_job_killed_mid_timing_leaves_a_failed_record_and_the_rest_intact(
        plugin_path, tmp_path):
    """SIGKILL (the OOM killer's signal) to the job's process while it takes samples: its
    supervisor writes a failed record naming the signal; the folder's other records are
    untouched and a re-run of the point succeeds."""
    results = tmp_path / "results"
    earlier = results / "reference" / "b2_l16.json"
    assert _run_point("reference", earlier, plugin_path).returncode == 0
    before = _digest(results)
    out = results / "torch-eager" / "b2_l16.json"
    slow = {**SECTION, "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 120.0}}
    env = {**job_env(), "PYTHONPATH": os.pathsep.join([str(plugin_path), str(ROOT)])}
    sup = subprocess.Popen(
        [str(BIN / "seedbench"), "run", "bert_varlen", "--system", "torch-eager",
         "--batch-size", "2", "--max-seq-len", "16", "--section-json", json.dumps(slow),
         "--out", str(out)], env=env, stderr=subprocess.PIPE, text=True)
    for line in sup.stderr:  # the job says when its first timed sample is taken
        if "] sample 1" in line:
            break
    else:
        pytest.fail(f"the job ended before timing (exit {sup.wait()})")
    os.kill(_job_of(sup.pid, env), signal.SIGKILL)
    sup.stderr.read()
    assert sup.wait(timeout=120) == 0
    rec = read_record(out)
    assert rec.status is Status.FAILED and "killed by signal 9" in rec.reason
    assert _digest(results)["reference/b2_l16.json"] == before["reference/b2_l16.json"]
    assert not list(results.rglob("*.tmp"))
    assert _run_point("torch-eager", out, plugin_path).returncode == 0
    assert read_record(out).status is Status.OK


def test_a_full_disk_names_the_cause_and_leaves_no_partial_record(plugin_path, tmp_path):
    """Writes past RLIMIT_FSIZE fail as on a full disk (EFBIG; Python ignores SIGXFSZ): the job
    cannot write its record, nor the supervisor its failed record; the command says which file
    and why, leaves no half-written file, and the records already there stay as they were."""
    results = tmp_path / "results"
    earlier = results / "reference" / "b2_l16.json"
    assert _run_point("reference", earlier, plugin_path).returncode == 0
    before = _digest(results)

    def small_disk():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    out = results / "torch-eager" / "b2_l16.json"
    done = _run_point("torch-eager", out, plugin_path, preexec=small_disk)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "File too large while writing" in done.stderr and str(out) in done.stderr
    assert "Traceback" not in done.stderr.splitlines()[-1]
    assert not out.exists() and not list(results.rglob("*.tmp"))
    assert _digest(results) == before


# --- damaged results ------------------------------------------------------------------------


def _hand_record(system: str, config: dict, samples: list[float]):
    from suite.records import Record
    from suite.measure.stats import summarize

    return Record("bert_varlen", system,
                  {"batch_size": 2, "max_seq_len": 16, "distribution": "bytetransformer",
                   "seed": 0, "dtype": "fp32"}, config, Status.OK,
                  env={"machine": "m"}, workload={"lengths": [8, 16], "total_tokens": 24},
                  timing={"samples": samples, "stats": summarize(samples)},
                  derived={"padding_free": system == "reference"})


DAMAGE = {
    "truncated": lambda good: good[: len(good) // 2],
    "other-schema": lambda good: good.replace('"schema_version": 2', '"schema_version": 99'),
    "stray-file": lambda good: '{"notes": "a file someone left here"}',
    "not-json": lambda good: "<html>not json</html>",
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_the_table_step_names_a_damaged_record_and_refuses(damage, tmp_path, capsys):
    from suite.cli import main
    from suite.records import write_record

    good = write_record(_hand_record("torch-eager", {"seed": 0}, [0.02, 0.021, 0.019]),
                        tmp_path / "torch-eager.json")
    bad = tmp_path / "reference.json"
    write_record(_hand_record("reference", {"seed": 0}, [0.01, 0.011, 0.009]), bad)
    bad.write_text(DAMAGE[damage](bad.read_text()))
    out = tmp_path / "table.csv"
    assert main(["table", str(good), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: not a readable record" in err
    assert f"--forcerun {bad}" in err  # the one command that replaces it
    assert not out.exists()


def test_records_of_two_configs_in_one_folder_are_never_paired(tmp_path):
    """A record left from another config (another config hash) beside this config's: each row
    keeps its hash, and a speedup only pairs records of one config."""
    from suite.analysis.tables import tidy_table
    from suite.records import write_record

    paths = [write_record(_hand_record(system, config, samples), tmp_path / f"{name}.json")
             for name, system, config, samples in [
                 ("eager-a", "torch-eager", {"seed": 0}, [0.020, 0.021, 0.019]),
                 ("ref-a", "reference", {"seed": 0}, [0.010, 0.011, 0.009]),
                 ("ref-b", "reference", {"seed": 1}, [0.005, 0.005, 0.005])]]
    t = tidy_table(paths).set_index("record")
    assert t.config_hash.nunique() == 2
    assert t.loc[str(paths[1]), "speedup_vs_padded"] == pytest.approx(2.0)
    assert pd.isna(t.loc[str(paths[2]), "speedup_vs_padded"])  # no torch-eager of config b


# --- noise ------------------------------------------------------------------------------------


@pytest.mark.serial
def test_a_point_timed_beside_a_cpu_hog_is_marked_noisy_and_listed_for_a_rerun(
        plugin_path, tmp_path, capsys):
    """The same point timed on a quiet machine and beside a busy-loop process: the second is
    `noisy`, its reason names the hog, the table and the report mark it, `seedbench noisy`
    lists it (what `make rerun-noisy` forces through Snakemake) and `compare` will not call the
    two the same."""
    from suite.analysis.compare import compare
    from suite.analysis.tables import tidy_table
    from suite.cli import main
    from suite.report.render import render_report
    from conftest import report_section

    timed = {**SECTION, "timing": {"warmup": 1, "min_repeats": 5, "min_time_s": 2.0}}
    quiet = tmp_path / "quiet" / "torch-eager" / "b2_l16.json"
    for _ in range(3):  # another process waking during one try (seen once on a test run, a
        wait_for_a_quiet_machine()  # python that had been idle) is what the detector is for
        assert _run_point("torch-eager", quiet, plugin_path, timed).returncode == 0
        if read_record(quiet).timing["load"]["other_cpus"] < 0.5:
            break
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = tmp_path / "busy" / "torch-eager" / "b2_l16.json"
        assert _run_point("torch-eager", busy, plugin_path, timed).returncode == 0
    finally:
        hog.kill()
        hog.wait()
    q, b = read_record(quiet).timing, read_record(busy).timing
    print(f"quiet: other CPUs {q['load']['other_cpus']}, {q['noise']}; "
          f"busy: other CPUs {b['load']['other_cpus']}, {b['noise']}")
    assert b["noise"]["noisy"] and f"(pid {hog.pid})" in b["noise"]["reasons"][-1]
    assert b["load"]["other_cpus"] > 0.8  # the hog held a core throughout
    assert b["load"]["before"]["loadavg"] and b["load"]["after"]["loadavg"]
    # nothing else ran beside the quiet one: the load detector blames nobody. (Its samples' CV
    # may still cross the threshold on a VM whose host is busy, which no guest process shows:
    # on one shared VM 2 of 3 quiet runs of this point had CV 0.19. Then it is noisy too, and
    # everything below follows each record's own verdict.)
    assert q["load"]["other_cpus"] < 0.5
    assert not any("other processes" in r for r in q["noise"]["reasons"]), q["noise"]
    quiet_noisy = q["noise"]["noisy"]

    table = tidy_table([quiet, busy]).set_index("record")
    assert table.loc[str(busy), "noisy"] == True  # noqa: E712
    assert table.loc[str(quiet), "noisy"] == quiet_noisy
    section = report_section(tmp_path, "bert_varlen", table.reset_index(),
                             records=[quiet, busy])
    html = render_report([section], tmp_path / "index.html").read_text()
    noisy_part = html[html.index('id="noisy"'):]
    assert str(busy) in noisy_part and (str(quiet) in noisy_part) == quiet_noisy
    assert "make rerun-noisy" in noisy_part

    capsys.readouterr()
    assert main(["noisy", str(tmp_path / "quiet"), str(tmp_path / "busy")]) == 0
    assert capsys.readouterr().out.split() == [str(quiet)] * quiet_noisy + [str(busy)]
    # never "same": the busy side was judged noisy, so a ratio inside the threshold is
    # "noisy"; a CI wholly beyond it is reported as the change it is (on a VM whose host is
    # busy the quiet run can be the slower one: "faster" was seen)
    assert compare(tmp_path / "quiet", tmp_path / "busy").verdict.iloc[0] in {
        "noisy", "slower", "faster"}


# --- bad config -------------------------------------------------------------------------------

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

QUICK = yaml.safe_load((ROOT / "workflows" / "config" / "quick.yaml").read_text())
HOSTILE = ["<script>alert(1)</script>", "../../etc/passwd", "a b; rm -rf /", "$(reboot)",
           "", "x" * 300, "cuda:99", "-1"]
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10**7, 10**7),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(HOSTILE),
    st.text(max_size=12), st.lists(st.integers(-4, 5000), max_size=3),
    st.lists(st.sampled_from(HOSTILE), max_size=2),
    st.dictionaries(st.sampled_from(["a", "enabled", "<b>"]), st.integers(-2, 3), max_size=2))


def _paths(node, prefix=()):
    """Every key path of a config (dicts only; a list is a value)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))


PATHS = sorted(_paths(QUICK))


def _parse_time(config: dict) -> None:
    """What the Snakefile does with a config before any job (workflows/rules/common.smk):
    validate it, build the typed sections, check plugin names, plan every job."""
    from suite import config as suite_config
    from suite.baselines.registry import baselines
    from suite.experiments import llm_plan, pretrain_plan
    from suite.experiments.plan import jobs
    from suite.trainers import registry as trainer_registry

    config = suite_config.validate(config)
    bert = suite_config.BertVarlenConfig.from_dict(config["bert_varlen"])
    for section, check in (("bert_varlen", lambda: baselines.check_names(
            bert.registered_baselines())), ("llm", lambda: trainer_registry.check_names(
            llm_plan.trainers(config)))):
        try:
            check()
        except KeyError as e:  # an unknown plugin name: the Snakefile names the section
            raise suite_config.ConfigError(f"{section}: {e.args[0]}") from None
    jobs(bert)
    llm_plan.jobs(config)
    pretrain_plan.jobs(config)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), op=st.sampled_from(["set", "delete", "add-unknown"]),
       value=VALUES)
@example(path=("pma", "headline", "interval"), op="set", value=10**7)  # a cross-field rule
@example(path=("bert_varlen", "timing", "warmup"), op="delete", value=None)
@example(path=("bert_varlen", "timing"), op="add-unknown", value=3)
@example(path=("llm", "sizes", "gpt-tiny"), op="delete", value=None)  # a rule names it
@example(path=("pma", "decay", "steps"), op="set", value=[])  # the early fork needs one
def test_any_config_is_valid_or_one_error_naming_key_value_and_what_is_allowed(path, op, value):
    """Property over the schema: a config with one key set to anything, removed, or joined by
    an unknown key either plans, or stops with ConfigError naming the key path (or, for an
    unknown plugin name, its section) with the value and what is allowed: never another
    exception, which would reach the user as a traceback."""
    import copy

    from suite.config import ConfigError

    config = copy.deepcopy(QUICK)
    parent = config
    for key in path[:-1]:
        parent = parent[key]
    if op == "set":
        parent[path[-1]] = value
    elif op == "delete":
        del parent[path[-1]]
    else:
        target = parent[path[-1]]
        if not isinstance(target, dict):
            return
        target["zz_unknown"] = value
    try:
        _parse_time(config)
    except ConfigError as e:
        _names_key_value_and_what_is_allowed(str(e.args[0]), path, op, value)


# What a rule's message says is allowed, in the words the rules use
ALLOWED_WORDS = ("must", "valid", "allowed", "one of", "not among", "registered", "has [", "need")


def _reprs(value) -> set[str]:
    """How a message can name ``value``: its repr or str, or those of any part of it (the schema
    names the innermost bad element of a list or mapping, or a mapping's unknown key)."""
    out = {repr(value), str(value)}
    for part in ([*value, *value.values()] if isinstance(value, dict) else
                 value if isinstance(value, list) else ()):
        out |= _reprs(part)
    return out


def _names_key_value_and_what_is_allowed(message: str, path: tuple, op: str, value) -> None:
    """The message of a config changed at ``path`` by ``op``: the key (for a deleted key, its
    parent's line says which is missing), the value that was set, and what is allowed.
    Mutations tried: a rule's message without its key (pma.headline once named its
    ``interval`` only by value), the schema's line without ``allowed:``, without the value."""
    key = ".".join(path)
    lines = message.splitlines()
    if lines[0] == "invalid config:":  # the schema's errors: one line per bad key
        lines = lines[1:]
        where = key if op != "delete" else ".".join(path[:-1]) or "<top level>"
        assert lines and all(line.startswith(f"  {path[0]}") for line in lines), message
        assert any(line.startswith(f"  {where}") for line in lines), (where, message)
        assert all("allowed" in line for line in lines), message
    else:  # a rule the schema cannot state (divisibility, a grid longer than the run)
        assert len(lines) == 1 and lines[0].startswith(path[0]), message
        assert any(word in message for word in ALLOWED_WORDS), message
    named = "zz_unknown" if op == "add-unknown" else path[-1]
    assert named in message, (named, message)
    if op == "set":
        assert any(r in message for r in _reprs(value)), (value, message)


# --- trust boundaries -------------------------------------------------------------------------


def test_strings_from_another_machines_records_stay_data_in_the_figure_and_the_report(
        tmp_path):
    """A published folder from elsewhere is not trusted: a system name, a machine name and a
    reason carrying markup are escaped in the inlined SVG figure and in the HTML."""
    from suite.analysis.tables import tidy_table
    from suite.records import write_record
    from suite.report.render import render_report
    from conftest import report_section

    evil = "<script>alert(1)</script>"
    good = _hand_record("torch-eager", {"seed": 0}, [0.02, 0.021, 0.019])
    bad = _hand_record(evil, {"seed": 0}, [0.01, 0.011, 0.009])
    bad.env = {"machine": f"<img src=x onerror=alert(2)>{evil}"}
    failed = _hand_record("reference", {"seed": 0}, [0.01])
    failed.status, failed.reason, failed.timing = Status.FAILED, f"{evil}<iframe>", {}
    paths = [write_record(r, tmp_path / f"r{i}.json") for i, r in enumerate([good, bad, failed])]
    section = report_section(tmp_path, "bert_varlen", tidy_table(paths), records=paths)
    svg = section.figure_svg.read_text()
    html = render_report([section], tmp_path / "index.html").read_text()
    for text in (svg, html):
        assert "<script>alert" not in text and "<img src=x" not in text
        assert "<iframe>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
