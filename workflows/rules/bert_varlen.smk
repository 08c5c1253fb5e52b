# The ByteTransformer family: one job per (experiment, subject, system, batch size, max length).
# Which jobs a config asks for is decided in suite.experiments.plan.
from suite.baselines.external import BUILD_ROOT, STAMP as EXTERNAL_STAMP
from suite.config import EXTERNAL_PREFIX
from suite.experiments.plan import jobs, speedup_baseline

EXTERNAL_BUILDS = BUILD_ROOT.as_posix()
BERT_SECTION = json.dumps(BERT.to_dict(), sort_keys=True)

BERT_JOBS = jobs(BERT)


def bert_records(wildcards):
    return [job.path(RESULTS) for job in BERT_JOBS[wildcards.experiment]]


def external_build_stamp(wildcards):
    """An external program with a source checkout is built before its runs."""
    name = wildcards.baseline.removeprefix(EXTERNAL_PREFIX)
    if wildcards.baseline.startswith(EXTERNAL_PREFIX) and BERT.external[name]["source"]:
        return [f"{EXTERNAL_BUILDS}/{name}/{EXTERNAL_STAMP}"]
    return []


rule external_build:
    output:
        f"{EXTERNAL_BUILDS}/{{program}}/{EXTERNAL_STAMP}",
    log:
        f"{RESULTS}/logs/external_build/{{program}}.log",
    params:
        # a function: a string param would be read as a wildcard pattern ({build_dir} in commands)
        section=lambda wildcards: BERT_SECTION,
    threads: TIMED_THREADS
    shell:
        "seedbench build-external {wildcards.program} --section-json {params.section:q}"
        " --jobs {threads} > {log} 2>&1"


rule bert_point:
    input:
        peak=rules.peak.output[0],
        build=external_build_stamp,
    output:
        f"{RESULTS}/{{experiment}}/{{subject}}/{{baseline}}/b{{batch}}_l{{max_len}}.json",
    log:
        f"{RESULTS}/logs/{{experiment}}/{{subject}}_{{baseline}}_b{{batch}}_l{{max_len}}.log",
    params:
        # a function: a string param would be read as a wildcard pattern ({build_dir} in commands)
        section=lambda wildcards: BERT_SECTION,
    threads: TIMED_THREADS
    shell:
        "seedbench run {wildcards.experiment} --subject {wildcards.subject}"
        " --baseline {wildcards.baseline}"
        " --batch-size {wildcards.batch} --max-seq-len {wildcards.max_len}"
        " --section-json {params.section:q} --peak {input.peak} --out {output} 2> {log}"


rule bert_table:
    input:
        bert_records,
    output:
        f"{RESULTS}/{{experiment}}/table.csv",
    wildcard_constraints:
        experiment=r"bert_[a-z_]+",
    log:
        f"{RESULTS}/logs/{{experiment}}/table.log",
    params:
        padded=lambda wildcards: speedup_baseline(BERT, wildcards.experiment),
    shell:
        "seedbench table {input} --padded-baseline {params.padded} --out {output} 2> {log}"
