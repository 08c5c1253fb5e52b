# The ByteTransformer family: one job per (experiment, subject, system, batch size, max length).
# Which jobs a config asks for is decided in suite.experiments.plan.
from suite.experiments.plan import jobs, speedup_baseline

BERT_JOBS = jobs(BERT)


def bert_records(wildcards):
    return [job.path(RESULTS) for job in BERT_JOBS[wildcards.experiment]]


rule bert_point:
    input:
        peak=rules.peak.output[0],
    output:
        f"{RESULTS}/{{experiment}}/{{subject}}/{{baseline}}/b{{batch}}_l{{max_len}}.json",
    log:
        f"{RESULTS}/logs/{{experiment}}/{{subject}}_{{baseline}}_b{{batch}}_l{{max_len}}.log",
    params:
        section=json.dumps(BERT.to_dict(), sort_keys=True),
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
    log:
        f"{RESULTS}/logs/{{experiment}}/table.log",
    params:
        padded=lambda wildcards: speedup_baseline(BERT, wildcards.experiment),
    shell:
        "seedbench table {input} --padded-baseline {params.padded} --out {output} 2> {log}"
