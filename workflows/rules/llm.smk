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
        # every llm experiment but the attention benchmark (its own rule below)
        experiment="|".join(e for e in experiments.names("llm")
                            if e not in (llm_plan.WINDOW_EXPERIMENT,
                                         llm_plan.RESILIENCE_EXPERIMENT)),
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


rule llm_window_point:
    """Sliding-window attention against causal attention at one point: every system timed side
    by side in one process (suite.experiments.llm_window), a record each."""
    output:
        [f"{RESULTS}/{llm_plan.WINDOW_EXPERIMENT}/{{label}}/{system}.json"
         for system in llm_plan.WINDOW_SYSTEMS],
    log:
        f"{RESULTS}/logs/{llm_plan.WINDOW_EXPERIMENT}/{{label}}.log",
    wildcard_constraints:
        label=r"s\d+-w\d+",
    params:
        point=lambda wildcards: LLM_WINDOW_JOBS[wildcards.label].point,
        job=lambda wildcards: LLM_WINDOW_JOBS[wildcards.label],
        out_dir=lambda wildcards: f"{RESULTS}/{llm_plan.WINDOW_EXPERIMENT}/{wildcards.label}",
    threads: TIMED_THREADS
    shell:
        "seedbench attention-window --seq-len {params.point[seq_len]}"
        " --window {params.point[window]} --heads {params.point[heads]}"
        " --head-dim {params.point[head_dim]} --batch {params.point[batch]}"
        " --dtype {params.job.dtype} --repeats {params.job.repeats} --device {params.job.device}"
        " --out-dir {params.out_dir} > {log} 2>&1"



# llm_resilience: a rule per group (its systems are its outputs), a job per trainer. The faults
# job waits out collective timeouts and torchrun's 30 s shutdown of a stopped rank more than it
# computes: one core, so it runs beside the report's one-core steps; the others are timed.
for _group, _systems in RESILIENCE_SYSTEMS.items():

    rule:
        name:
            f"llm_resilience_{_group}"
        output:
            [f"{RESULTS}/{llm_plan.RESILIENCE_EXPERIMENT}/{{trainer}}/{s}.json" for s in _systems],
        log:
            f"{RESULTS}/logs/{llm_plan.RESILIENCE_EXPERIMENT}/{{trainer}}-{_group}.log",
        wildcard_constraints:
            trainer=r"[a-z0-9][a-z0-9_-]*",
        params:
            # of the wildcards only, as llm_point's: a changed config runs the job again
            group=resilience_param(_group, "group"),
            nprocs=resilience_param(_group, "nprocs"),
            train=resilience_param(_group, "train"),
            spec=resilience_param(_group, "spec"),
            out_dir=lambda wildcards: (
                f"{RESULTS}/{llm_plan.RESILIENCE_EXPERIMENT}/{wildcards.trainer}"),
            timeout=config["llm"]["timeout_s"],
        threads: 1 if _group == "faults" else TIMED_THREADS
        shell:
            # the shell runs after the loop: its group comes from params, not from _group
            "seedbench resilience {params.group}"
            " --trainer {wildcards.trainer} --nprocs {params.nprocs}"
            " --train-json {params.train:q} --spec-json {params.spec:q}"
            " --timeout-s {params.timeout} --out-dir {params.out_dir} > {log} 2>&1"
