# Tidy tables -> figures -> reports/index.html (figures also registered for snakemake --report).


rule figure:
    input:
        table=f"{RESULTS}/{{experiment}}/table.csv",
        paper="results/paper/bytetransformer_readme_a100_fp16_latency.csv",
        claims="results/paper/bytetransformer_abstract_claims.csv",
    output:
        png=report(
            f"{REPORTS}/figures/{{experiment}}.png",
            caption="../report/figure.rst",
            category="ByteTransformer",
            subcategory="{experiment}",
        ),
        svg=f"{REPORTS}/figures/{{experiment}}.svg",
    log:
        f"{RESULTS}/logs/{{experiment}}/figure.log",
    params:
        stem=lambda wildcards, output: output.svg.removesuffix(".svg"),
    shell:
        "seedbench plot {wildcards.experiment} --table {input.table} --paper {input.paper}"
        " --claims {input.claims} --out {params.stem} 2> {log}"


rule report_html:
    input:
        tables=expand(f"{RESULTS}/{{experiment}}/table.csv", experiment=BERT_JOBS),
        figures=expand(f"{REPORTS}/figures/{{experiment}}.svg", experiment=BERT_JOBS),
        peak=rules.peak.output[0],
        claims="results/paper/bytetransformer_abstract_claims.csv",
    output:
        report(REPORT_HTML, caption="../report/index.rst", category="HTML report"),
    log:
        f"{RESULTS}/logs/report.log",
    params:
        sections=lambda wildcards, input: " ".join(
            f"--section {e} {t} {f}" for e, t, f in zip(BERT_JOBS, input.tables, input.figures)
        ),
        config=" ".join(f"--config {f}" for f in workflow.configfiles[-1:]),
    shell:
        "seedbench report {params.sections} --peak {input.peak} --claims {input.claims}"
        " {params.config}"
        " --out {output} 2> {log}"
