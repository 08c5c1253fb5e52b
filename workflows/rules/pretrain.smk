# Pre-training loss experiments (Virtual Width Networks, checkpoint merging): one job per
# (experiment, label, seed); its table job (tables.smk) writes the summary, the curves and the
# measured claims. Which runs: suite.experiments.pretrain_plan (common.smk).


rule pretrain_run:
    output:
        record=f"{RESULTS}/{{experiment}}/{{label}}/seed{{seed}}.json",
    log:
        f"{RESULTS}/logs/{{experiment}}/{{label}}_seed{{seed}}.log",
    wildcard_constraints:
        experiment=experiments.pattern("pretrain"),
        label=r"[a-z0-9][a-z0-9_-]*",
        seed=r"\d+",
    params:
        # functions: the spec holds braces that must not be read as wildcards. Of the wildcards
        # only: Snakemake's params trigger ignores functions of the output, and a changed
        # config must run the study again (keys sorted: an equal config in another order is not)
        spec=lambda wildcards: json.dumps(pretrain_job(wildcards).spec, sort_keys=True),
        series=lambda wildcards: pretrain_job(wildcards).series,
        checkpoints=lambda wildcards: pretrain_checkpoints(wildcards),
    threads: pretrain_threads
    shell:
        "seedbench pretrain {wildcards.experiment} --spec-json {params.spec:q}"
        " --seed {wildcards.seed} --series {params.series} {params.checkpoints}"
        " --out {output.record} 2> {log}"
