# Tidy tables -> figures -> reports/index.html (figures also registered for snakemake --report).


rule figure:
    input:
        unpack(figure_inputs),
    output:
        png=report(
            f"{REPORTS}/figures/{{experiment}}.png",
            caption="../report/figure.rst",
            category="figures",
            subcategory="{experiment}",
        ),
        svg=f"{REPORTS}/figures/{{experiment}}.svg",
    log:
        f"{RESULTS}/logs/{{experiment}}/figure.log",
    params:
        stem=lambda wildcards, output: output.svg.removesuffix(".svg"),
        flags=figure_flags,
    shell:
        "seedbench plot {wildcards.experiment} --table {input.table} {params.flags}"
        " --out {params.stem} 2> {log}"


rule report_html:
    input:
        tables=expand(f"{RESULTS}/{{experiment}}/table.csv", experiment=SECTIONS),
        figures=expand(f"{REPORTS}/figures/{{experiment}}.svg", experiment=SECTIONS),
        peak=rules.peak.output[0],
        claims=[BERT_CLAIMS] if "bert_varlen" in SECTIONS else [],
        section_claims=expand(f"{RESULTS}/{{experiment}}/claims.csv", experiment=CLAIM_SECTIONS),
    output:
        report(REPORT_HTML, caption="../report/index.rst", category="HTML report"),
    log:
        f"{RESULTS}/logs/report.log",
    params:
        sections=lambda wildcards, input: " ".join(
            f"--section {e} {t} {f}" for e, t, f in zip(SECTIONS, input.tables, input.figures)
        ),
        config=" ".join(f"--config {f}" for f in workflow.configfiles[-1:]),
        claims=lambda wildcards, input: " ".join(f"--claims {c}" for c in input.claims),
        section_claims=lambda wildcards, input: " ".join(
            f"--section-claims {e} {c}" for e, c in zip(CLAIM_SECTIONS, input.section_claims)
        ),
    shell:
        "seedbench report {params.sections} --peak {input.peak} {params.claims}"
        " {params.section_claims}"
        " {params.config}"
        " --out {output} 2> {log}"
