# Variable-length BERT inference: one job per (baseline, batch size, max length).


def bert_varlen_records(wildcards=None):
    if not BERT.enabled:
        return []
    return [
        f"{RESULTS}/bert_varlen/{baseline}/b{batch}_l{max_len}.json"
        for baseline in BERT.baselines
        for batch, max_len in BERT.points()
    ]


rule bert_varlen_point:
    input:
        peak=rules.peak.output[0],
    output:
        f"{RESULTS}/bert_varlen/{{baseline}}/b{{batch}}_l{{max_len}}.json",
    log:
        f"{RESULTS}/logs/bert_varlen/{{baseline}}_b{{batch}}_l{{max_len}}.log",
    params:
        section=json.dumps(BERT.to_dict(), sort_keys=True),
    threads: TIMED_THREADS
    shell:
        "seedbench run bert_varlen --baseline {wildcards.baseline}"
        " --batch-size {wildcards.batch} --max-seq-len {wildcards.max_len}"
        " --section-json {params.section:q} --peak {input.peak} --out {output} 2> {log}"


rule bert_varlen_table:
    input:
        bert_varlen_records,
    output:
        f"{RESULTS}/bert_varlen/table.csv",
    log:
        f"{RESULTS}/logs/bert_varlen/table.log",
    params:
        padded=BERT.padded_baseline,
    shell:
        "seedbench table {input} --padded-baseline {params.padded} --out {output} 2> {log}"
