# Pre-training loss experiments (Virtual Width Networks, checkpoint merging): one job per
# (experiment, label, seed), then one table job per experiment that writes the summary, the
# curves and the measured claims. Which runs: suite.experiments.pretrain_plan (common.smk).


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
        # functions: the spec holds braces that must not be read as wildcards
        spec=lambda wildcards, output: json.dumps(pretrain_job(output).spec),
        series=lambda wildcards, output: pretrain_job(output).series,
        checkpoints=lambda wildcards, output: pretrain_checkpoints(output),
    threads: pretrain_threads
    shell:
        "seedbench pretrain {wildcards.experiment} --spec-json {params.spec:q}"
        " --seed {wildcards.seed} --series {params.series} {params.checkpoints}"
        " --out {output.record} 2> {log}"


rule pretrain_table:
    input:
        unpack(lambda wildcards: paper_inputs(wildcards.experiment)),
        records=records,
    output:
        table=f"{RESULTS}/{{experiment}}/table.csv",
        curves=f"{RESULTS}/{{experiment}}/curves.csv",
        claims=f"{RESULTS}/{{experiment}}/claims.csv",
    log:
        f"{RESULTS}/logs/{{experiment}}/table.log",
    wildcard_constraints:
        experiment=experiments.pattern("pretrain"),
    params:
        out_dir=lambda wildcards, output: os.path.dirname(output.table),
        paper=lambda wildcards, input: paper_flags(wildcards.experiment, input),
    shell:
        "seedbench pretrain-table {wildcards.experiment} {input.records}"
        " {params.paper} --out-dir {params.out_dir} 2> {log}"
