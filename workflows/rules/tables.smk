# Records -> one tidy table per experiment and machine folder ({root}: results/<machine> or
# results/published/<machine>). Which records: the plan for this run's folder, what is on disk
# for the others (records_of in common.smk).


rule bert_table:
    input:
        records,
    output:
        "{root}/{experiment}/table.csv",
    wildcard_constraints:
        experiment=experiments.pattern("bert"),
    log:
        "{root}/logs/{experiment}/table.log",
    params:
        code=SUITE_DIGEST,
        padded=padded_baseline,
    shell:
        "seedbench table {input} --padded-baseline {params.padded} --out {output} 2> {log}"


rule llm_table:
    input:
        records=records,
        steps=llm_steplogs,
    output:
        table="{root}/{experiment}/table.csv",
        curves="{root}/{experiment}/curves.csv",
    log:
        "{root}/logs/{experiment}/table.log",
    wildcard_constraints:
        experiment=experiments.pattern("llm"),
    params:
        code=SUITE_DIGEST,
    shell:
        "seedbench llm-table {input.records} --out {output.table} --curves {output.curves}"
        " 2> {log}"


rule llm_scale:
    input:
        **paper_inputs("llm_scale"),
    output:
        "{root}/llm_scale/table.csv",
    log:
        "{root}/logs/llm_scale/table.log",
    params:
        code=SUITE_DIGEST,
        paper=lambda wildcards, input: paper_flags("llm_scale", input),
    shell:
        "seedbench scale-table {params.paper} --out {output} 2> {log}"


rule table_step:
    input:
        unpack(lambda wildcards: paper_inputs(wildcards.experiment)),
        records=records,
    output:
        table="{root}/{experiment}/table.csv",
        curves="{root}/{experiment}/curves.csv",
        claims="{root}/{experiment}/claims.csv",
    log:
        "{root}/logs/{experiment}/table.log",
    wildcard_constraints:
        experiment="|".join(experiments.table_step_names()),
    params:
        code=SUITE_DIGEST,
        out_dir=lambda wildcards, output: os.path.dirname(output.table),
        paper=lambda wildcards, input: paper_flags(wildcards.experiment, input),
    shell:
        "seedbench table-step {wildcards.experiment} {input.records}"
        " {params.paper} --out-dir {params.out_dir} 2> {log}"
