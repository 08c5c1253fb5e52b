# Serving under MLPerf LoadGen: one job per (system, repeat), timed alone like every measured
# run; its table job (tables.smk, table_step) writes the summary, the latency-vs-load curves
# and the measured claims. Which runs: suite.experiments.serving_plan (common.smk).


rule serving_run:
    output:
        record=f"{RESULTS}/{{experiment}}/{{system}}/run{{repeat}}.json",
        loadgen=directory(f"{RESULTS}/{{experiment}}/{{system}}/run{{repeat}}.loadgen"),
    log:
        f"{RESULTS}/logs/{{experiment}}/{{system}}_run{{repeat}}.log",
    wildcard_constraints:
        experiment=experiments.pattern("serving"),
        repeat=r"\d+",
    params:
        # a function: a string param would be read as a wildcard pattern (braces in the JSON)
        section=lambda wildcards: SERVING_SECTION,
    threads: TIMED_THREADS
    shell:
        "seedbench serve {wildcards.experiment} --system {wildcards.system}"
        " --repeat {wildcards.repeat} --section-json {params.section:q} --out {output.record}"
        " 2> {log}"
