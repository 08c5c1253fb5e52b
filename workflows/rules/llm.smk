# LLM training and MFU (MegaScale): one job per training run, each a launcher (torchrun or one
# process) over real distributed engines. Which runs a config asks for: suite.experiments.llm_plan.
from suite.experiments.llm_plan import jobs as llm_jobs

LLM_JOBS = {job.path(RESULTS): job for js in llm_jobs(config).values() for job in js}
LLM_EXPERIMENTS = sorted({job.experiment for job in LLM_JOBS.values()}) + (
    ["llm_scale"] if config["llm"]["enabled"] and config["llm"]["scale"]["enabled"] else [])


def llm_records(wildcards):
    return sorted(p for p, job in LLM_JOBS.items() if job.experiment == wildcards.experiment)


def llm_job(wildcards, output):
    return LLM_JOBS[output.record]


rule llm_point:
    input:
        peak=rules.peak.output[0],
    output:
        record=f"{RESULTS}/{{experiment}}/{{label}}/{{trainer}}.json",
        steps=f"{RESULTS}/{{experiment}}/{{label}}/{{trainer}}.steps.jsonl",
    log:
        f"{RESULTS}/logs/{{experiment}}/{{label}}_{{trainer}}.log",
    wildcard_constraints:
        experiment=r"llm_(mfu|engines|ablation|loss)",
        label=r"[a-z0-9][a-z0-9_.-]*",
        trainer=r"[a-z0-9][a-z0-9_-]*",
    params:
        # functions: the train config holds braces that must not be read as wildcards
        train=lambda wildcards, output: json.dumps(llm_job(wildcards, output).train),
        nprocs=lambda wildcards, output: llm_job(wildcards, output).nprocs,
        check=lambda wildcards, output: llm_job(wildcards, output).check_steps,
        timeout=config["llm"]["timeout_s"],
    threads: TIMED_THREADS
    shell:
        "seedbench train {wildcards.experiment} --trainer {wildcards.trainer}"
        " --nprocs {params.nprocs} --check-steps {params.check} --train-json {params.train:q}"
        " --peak {input.peak}"
        " --timeout-s {params.timeout} --out {output.record} --steplog {output.steps} 2> {log}"


rule llm_table:
    input:
        llm_records,
    output:
        f"{RESULTS}/{{experiment}}/table.csv",
    log:
        f"{RESULTS}/logs/{{experiment}}/table.log",
    wildcard_constraints:
        experiment=r"llm_(mfu|engines|ablation|loss)",
    shell:
        "seedbench llm-table {input} --out {output} 2> {log}"


rule llm_scale:
    output:
        f"{RESULTS}/llm_scale/table.csv",
    log:
        f"{RESULTS}/logs/llm_scale/table.log",
    shell:
        "seedbench scale-model --out {output} 2> {log}"
