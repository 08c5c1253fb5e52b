"""The load watched around a timing loop and the noisy verdict (suite.measure.load)."""

import subprocess
import sys
import time

import pytest

from suite.measure.load import NOISY_CV, NOISY_OTHER_CPUS, noise_columns, verdict, watched

from conftest import wait_for_a_quiet_machine

BUSY = [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"]


def test_verdict_names_each_threshold_crossed():
    assert verdict(None, 0.05) == {"noisy": False, "reasons": [],
                                   "thresholds": {"cv": NOISY_CV, "other_cpus": NOISY_OTHER_CPUS}}
    assert verdict(None, 0.2)["reasons"] == ["CV 0.20 > 0.15"]
    load = {"other_cpus": 0.9, "busy_processes": [{"pid": 7, "name": "hog", "cpus": 0.9}]}
    v = verdict(load, 0.01)
    assert v["noisy"] and v["reasons"] == [
        "other processes used 0.90 CPUs while timing: hog (pid 7) 0.90"]
    # a command line, where the record has one, tells one python from another
    load["busy_processes"][0]["cmd"] = "python -m pytest -n 2"
    assert verdict(load, 0.01)["reasons"] == [
        "other processes used 0.90 CPUs while timing: python -m pytest -n 2 (pid 7) 0.90"]
    assert not verdict({"other_cpus": 0.1, "busy_processes": []}, float("nan"))["noisy"]
    assert noise_columns({}) == {"noisy": None, "noise_reason": None}  # older records
    assert noise_columns({"noise": v}) == {"noisy": True, "noise_reason": v["reasons"][0]}


@pytest.mark.serial
def test_work_of_the_timed_session_is_not_counted_but_another_session_is():
    """The timed process's own children and ranks share its session and are part of the
    measurement; a process of another session is the machine being busy. The own-work watch
    is tried up to three times: a daemon waking up on a shared machine adds to any one try,
    while counting the child as another's work would put ~1 CPU on every try."""
    wait_for_a_quiet_machine()
    for _ in range(3):
        with watched() as own:
            subprocess.run(BUSY, check=True)  # a child of the timed process, in its session
        if own["other_cpus"] < 0.5:
            break
    hog = subprocess.Popen(BUSY, start_new_session=True)  # another program's process
    try:
        time.sleep(0.2)
        with watched() as other:
            time.sleep(1.0)
    finally:
        hog.kill()
        hog.wait()
    assert own["other_cpus"] < 0.5, own
    assert other["other_cpus"] > 0.5, other
    assert other["busy_processes"][0]["pid"] == hog.pid
    assert other["busy_processes"][0]["cmd"] == " ".join(BUSY)[:100]
    assert set(own["before"]) == {"loadavg", "cpu_mhz", "governor"}


@pytest.mark.serial
def test_a_launchers_other_ranks_are_the_runs_own_work():
    """torchrun starts each rank in a session of its own: with ``family_of`` the launcher's
    pid, a busy sibling rank is not "another program"; without it, it is. Asserted on whom
    each watch names, not on the machine's total: a shared machine's background work (a
    daemon waking up) may add to ``other_cpus`` but cannot move the sibling between lists."""
    wait_for_a_quiet_machine()
    code = ("import subprocess, sys\n"
            f"rank = subprocess.Popen({BUSY!r}, start_new_session=True)\n"
            "print(rank.pid, flush=True)\n"
            "rank.wait()\n")
    launcher = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                                stdout=subprocess.PIPE, text=True)
    try:
        rank = int(launcher.stdout.readline())
        time.sleep(0.1)
        with watched(family_of=launcher.pid) as family:
            time.sleep(0.5)
        with watched() as stranger:
            time.sleep(0.5)
    finally:
        launcher.wait()
        launcher.stdout.close()
    assert rank not in {p["pid"] for p in family["busy_processes"]}, family
    named = {p["pid"]: p["cpus"] for p in stranger["busy_processes"]}
    assert named.get(rank, 0.0) > 0.5, stranger
    assert stranger["other_cpus"] > 0.5, stranger
