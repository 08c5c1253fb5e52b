# Tidy tables -> figures -> reports/index.html (figures also registered for snakemake --report).

# The paper's numbers each figure shows beside the measured ones.
PAPER_OF = {
    "bert_varlen": "results/paper/bytetransformer_readme_a100_fp16_latency.csv",
    "bert_mha": "results/paper/bytetransformer_readme_a100_fp16_latency.csv",
    "llm_ablation": "results/paper/megascale_table3_ablation_175b_256gpu.csv",
}
BERT_CLAIMS = "results/paper/bytetransformer_abstract_claims.csv"
SECTIONS = [*BERT_JOBS, *LLM_EXPERIMENTS]


def figure_inputs(wildcards):
    inputs = {"table": f"{RESULTS}/{wildcards.experiment}/table.csv"}
    if wildcards.experiment in PAPER_OF:
        inputs["paper"] = PAPER_OF[wildcards.experiment]
    if wildcards.experiment.startswith("bert_"):
        inputs["claims"] = BERT_CLAIMS
    return inputs


def figure_flags(wildcards, input):
    return " ".join(f"--{k} {v}" for k, v in input.items() if k in ("paper", "claims"))


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
    shell:
        "seedbench report {params.sections} --peak {input.peak} {params.claims}"
        " {params.config}"
        " --out {output} 2> {log}"
