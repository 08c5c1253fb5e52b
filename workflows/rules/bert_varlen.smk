# The ByteTransformer family: one job per (experiment, subject, system, batch size, max length).
# Which jobs a config asks for is decided in suite.experiments.plan (helpers: common.smk).


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
        " --jobs {threads} --record-failure > {log} 2>&1"


rule bert_point:
    input:
        peak=rules.peak.output[0],
        build=external_build_stamp,
    output:
        f"{RESULTS}/{{experiment}}/{{subject}}/{{system}}/b{{batch}}_l{{max_len}}.json",
    log:
        f"{RESULTS}/logs/{{experiment}}/{{subject}}_{{system}}_b{{batch}}_l{{max_len}}.log",
    params:
        # a function: a string param would be read as a wildcard pattern ({build_dir} in commands)
        section=lambda wildcards: BERT_SECTION,
        oracle=oracle_flag,
    threads: TIMED_THREADS
    shell:
        "seedbench run {wildcards.experiment} --subject {wildcards.subject}"
        " --system {wildcards.system}"
        " --batch-size {wildcards.batch} --max-seq-len {wildcards.max_len}"
        " --section-json {params.section:q} --peak {input.peak} {params.oracle}"
        " --out {output} 2> {log}"


# The points' shared oracles and models (ORACLE_DIR) are a cache of this run: gone once it
# has succeeded; an interrupted run keeps them for its resumption.
onsuccess:
    shutil.rmtree(ORACLE_DIR, ignore_errors=True)
