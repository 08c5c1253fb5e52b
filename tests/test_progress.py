"""Progress lines of a sweep: done/total, elapsed, time left from each rule's finished jobs, and
the outcome counts at the end; and the Snakemake logger plugin that feeds them."""

import logging
from types import SimpleNamespace

from snakemake_interface_logger_plugins.common import LogEvent

from suite.workflow.progress import Progress, duration
from suite.records import Record, Status, write_record

from conftest import Clock


def test_estimate_from_each_rules_finished_jobs():
    clock = Clock()
    p = Progress(clock=clock)
    p.plan({"bert_point": 4, "figure": 2, "total": 6})
    assert p.remaining_s() is None and "estimating" in p.line(0, 6)
    p.job_started(1, "bert_point", ["a.json"])
    clock.t = 20.0
    p.job_finished(1)
    # 3 more bert points at 20 s (one at a time: 20 s of wall per 20 s of job), and 2 figures
    # at the only mean known so far (20 s)
    assert p.remaining_s() == 3 * 20 + 2 * 20
    p.job_started(2, "figure", ["f.svg"])
    clock.t = 22.0
    p.job_finished(2)
    assert p.remaining_s() == 3 * 20 + 1 * 2
    assert p.line(2, 6) == "[seedbench] 2/6 jobs done, 22s elapsed, about 1m02s left"
    assert p.line(6, 6).endswith("finished")


def test_jobs_run_side_by_side_shorten_the_estimate():
    clock = Clock()
    p = Progress(clock=clock)
    p.plan({"pretrain_run": 6})
    for job in (1, 2):  # two at once, 10 s each, 10 s of wall
        p.job_started(job, "pretrain_run", [])
    clock.t = 10.0
    p.job_finished(1)
    p.job_finished(2)
    assert p.remaining_s() == 4 * 10 * 0.5


def test_summary_counts_the_records_written(tmp_path):
    p = Progress(clock=Clock())
    outs = []
    for i, status in enumerate([Status.OK, Status.OK, Status.UNAVAILABLE, Status.FAILED]):
        path = tmp_path / f"r{i}.json"
        write_record(Record("bert_varlen", "x", {"i": i}, {}, status), path)
        outs.append(str(path))
    (tmp_path / "peak.json").write_text('{"status": "ok", "experiment": "no"}')
    p.job_started(1, "bert_point", outs + [str(tmp_path / "peak.json"), str(tmp_path / "t.csv")])
    p.job_finished(1)
    log = tmp_path / "table.log"
    log.write_text("Traceback ...\nseedbench table: error: r9.json: not a readable record\n\n")
    p.job_failed(2, "bert_table", [str(log), str(tmp_path / "missing.log")])
    text = p.summary()
    assert "2 ok, 1 unavailable, 0 incorrect, 1 failed" in text
    assert "reports/index.html#problems" in text and "1 job(s) failed" in text
    # why the job failed, from the last line of its log, without opening it
    assert ("\n[seedbench]   bert_table: seedbench table: error: r9.json: not a readable "
            "record\n[seedbench] job time by rule" in text)
    assert Progress(clock=Clock()).summary() == ""  # nothing written: nothing to say


def test_the_summary_says_where_the_time_went():
    clock = Clock()
    p = Progress(clock=clock)
    for job, (rule, seconds) in enumerate([("bert_point", 20), ("bert_point", 40),
                                           ("figure", 3), ("llm_point", 30)]):
        p.job_started(job, rule, [])
        clock.t += seconds
        p.job_finished(job)
    assert p.time_by_rule(most=2) == ("[seedbench] job time by rule (1m33s in all): "
                                      "bert_point 2 x 30s = 1m00s, llm_point 1 x 30s = 30s")


def test_duration_text():
    assert [duration(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m"]


def test_logger_plugin_prints_progress_and_summary(tmp_path, capsys):
    from snakemake_logger_plugin_seedbench import LogHandler

    settings = SimpleNamespace(dryrun=False)
    handler = LogHandler(settings, None)
    record_path = tmp_path / "r.json"
    write_record(Record("bert_varlen", "x", {}, {}, Status.OK), record_path)

    def emit(event, **fields):
        rec = logging.LogRecord("snakemake", logging.INFO, "", 0, None, None, None)
        rec.__dict__.update(event=event, **fields)
        handler.emit(rec)

    emit(LogEvent.RUN_INFO, stats={"bert_point": 1, "total": 1})
    emit(LogEvent.JOB_INFO, jobid=0, rule_name="bert_point", output=[f"{record_path} (report)"])
    emit(LogEvent.JOB_FINISHED, job_id=0)
    emit(LogEvent.PROGRESS, done=1, total=1)
    handler.close()
    err = capsys.readouterr().err
    assert "[seedbench] 1/1 jobs done" in err
    assert err.count("points this run: 1 ok, 0 unavailable, 0 incorrect, 0 failed") == 1
