# Tidy tables -> figures and analyses -> reports/index.html, for every machine folder ({root}:
# results/<machine> or results/published/<machine>); figures also registered for
# snakemake --report. What the figure and analysis of each experiment read is declared by its
# spec (suite.experiments.registry); the report step only renders the files named here.


rule figure:
    input:
        unpack(figure_inputs),
    output:
        svg=report(
            "{root}/figures/{experiment}.svg",
            caption="../report/figure.rst",
            category="figures",
            subcategory="{experiment}",
        ),
    log:
        "{root}/logs/{experiment}/figure.log",
    params:
        code=SUITE_DIGEST,
        stem=lambda wildcards, output: output.svg.removesuffix(".svg"),
        flags=figure_flags,
    shell:
        "seedbench plot {wildcards.experiment} --table {input.table} {params.flags}"
        " --out {params.stem} 2> {log}"


rule analyze:
    input:
        unpack(analysis_inputs),
    output:
        "{root}/{experiment}/analysis.json",
    log:
        "{root}/logs/{experiment}/analysis.log",
    params:
        code=SUITE_DIGEST,
        flags=analysis_flags,
    shell:
        "seedbench analyze {wildcards.experiment} --table {input.table} {params.flags}"
        " --records {input.records} --out {output} 2> {log}"


rule report_html:
    input:
        unpack(report_inputs),
    output:
        report(REPORT_HTML, caption="../report/index.rst", category="HTML report"),
    log:
        f"{REPORTS}/logs/report.log",
    params:
        code=SUITE_DIGEST,
        flags=report_flags,
        # the config of this run's folder (a report-only build ran nothing with it)
        config="" if REPORT_ONLY else " ".join(f"--config {f}" for f in workflow.configfiles[-1:]),
    shell:
        "seedbench report {params.flags} {params.config} --out {output} 2> {log}"
