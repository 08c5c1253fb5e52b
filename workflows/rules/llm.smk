# LLM training and MFU (MegaScale): one job per training run, each a launcher (torchrun or one
# process) over real distributed engines. Which runs: suite.experiments.llm_plan (common.smk).


rule llm_point:
    input:
        peak=rules.peak.output[0],
    output:
        record=f"{RESULTS}/{{experiment}}/{{label}}/{{trainer}}.json",
        steps=f"{RESULTS}/{{experiment}}/{{label}}/{{trainer}}.steps.jsonl",
    log:
        f"{RESULTS}/logs/{{experiment}}/{{label}}_{{trainer}}.log",
    wildcard_constraints:
        experiment=experiments.pattern("llm"),
        label=r"[a-z0-9][a-z0-9_.-]*",
        trainer=r"[a-z0-9][a-z0-9_-]*",
    params:
        # functions: the train config holds braces that must not be read as wildcards. Of the
        # wildcards only: Snakemake's params trigger ignores functions of the output, and a
        # changed config must run the point again (keys sorted: the same config in another
        # order is no change)
        train=lambda wildcards: json.dumps(llm_job(wildcards).train, sort_keys=True),
        nprocs=lambda wildcards: llm_job(wildcards).nprocs,
        check=lambda wildcards: llm_job(wildcards).check_steps,
        timeout=config["llm"]["timeout_s"],
    threads: TIMED_THREADS
    # what the run launches, so that a scheduler (the slurm profile) allocates exactly that:
    # nodes, one launcher task per node, and on cuda one GPU per process on each node (gres
    # counts per node; the plugin's `gpu` is --gpus, a total over the nodes, so it is 0 here).
    # Profiles leave these keys to the rule (tests/test_cluster.py checks it).
    resources:
        nodes=lambda wildcards: llm_job(wildcards).nnodes,
        tasks=lambda wildcards: llm_job(wildcards).nnodes,
        gres=lambda wildcards: llm_job(wildcards).gres,
        gpu=0,
        # the plugin turns a GPU job's tasks into --ntasks-per-gpu unless this says none
        tasks_per_gpu=0,
    shell:
        "seedbench train {wildcards.experiment} --trainer {wildcards.trainer}"
        " --label {wildcards.label} --nnodes {resources.nodes}"
        " --nprocs {params.nprocs} --check-steps {params.check} --train-json {params.train:q}"
        " --peak {input.peak}"
        " --timeout-s {params.timeout} --out {output.record} --steplog {output.steps} 2> {log}"
