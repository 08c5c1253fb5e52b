# Tidy tables -> figures and analyses -> reports/index.html (figures also registered for
# snakemake --report). What the figure and analysis of each experiment read is declared by its spec
# (suite.experiments.registry); the report step only renders the files named here.


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


rule analyze:
    input:
        unpack(analysis_inputs),
    output:
        f"{RESULTS}/{{experiment}}/analysis.json",
    log:
        f"{RESULTS}/logs/{{experiment}}/analysis.log",
    params:
        flags=analysis_flags,
    shell:
        "seedbench analyze {wildcards.experiment} --table {input.table} {params.flags}"
        " --records {input.records} --out {output} 2> {log}"


rule report_html:
    input:
        tables=expand(f"{RESULTS}/{{experiment}}/table.csv", experiment=SECTIONS),
        figures=expand(f"{REPORTS}/figures/{{experiment}}.svg", experiment=SECTIONS),
        analyses=expand(f"{RESULTS}/{{experiment}}/analysis.json", experiment=SECTIONS),
        peak=rules.peak.output[0],
    output:
        report(REPORT_HTML, caption="../report/index.rst", category="HTML report"),
    log:
        f"{RESULTS}/logs/report.log",
    params:
        sections=lambda wildcards, input: " ".join(
            f"--section {e} {t} {f} {a}"
            for e, t, f, a in zip(SECTIONS, input.tables, input.figures, input.analyses)
        ),
        config=" ".join(f"--config {f}" for f in workflow.configfiles[-1:]),
    shell:
        "seedbench report {params.sections} --peak {input.peak} {params.config}"
        " --out {output} 2> {log}"
