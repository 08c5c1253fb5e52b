# Tidy tables -> figures -> reports/index.html (figures also registered for snakemake --report).


rule bert_varlen_figure:
    input:
        table=rules.bert_varlen_table.output[0],
        paper="results/paper/bytetransformer_readme_a100_fp16_latency.csv",
    output:
        png=report(
            f"{REPORTS}/figures/bert_varlen_latency.png",
            caption="../report/bert_varlen_latency.rst",
            category="BERT variable-length inference",
        ),
        svg=f"{REPORTS}/figures/bert_varlen_latency.svg",
    log:
        f"{RESULTS}/logs/bert_varlen/figure.log",
    params:
        stem=lambda wildcards, output: output.svg.removesuffix(".svg"),
    shell:
        "seedbench plot --table {input.table} --paper {input.paper}"
        " --out {params.stem} 2> {log}"


rule report_html:
    input:
        table=rules.bert_varlen_table.output[0],
        figure=rules.bert_varlen_figure.output.svg,
        peak=rules.peak.output[0],
    output:
        report(
            REPORT_HTML,
            caption="../report/index.rst",
            category="HTML report",
        ),
    log:
        f"{RESULTS}/logs/report.log",
    params:
        config=" ".join(f"--config {f}" for f in workflow.configfiles[-1:]),
    shell:
        "seedbench report --table {input.table} --figure {input.figure} --peak {input.peak}"
        " {params.config} --out {output} 2> {log}"
