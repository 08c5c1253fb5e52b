# The measured matmul peak of this machine: every efficiency figure divides by it.


rule peak:
    output:
        f"{RESULTS}/peak.json",
    log:
        f"{RESULTS}/logs/peak.log",
    params:
        dtypes=" ".join(config["peak"]["dtypes"]),
        sizes=" ".join(str(s) for s in config["peak"]["sizes"]),
        repeats=config["peak"]["repeats"],
    threads: TIMED_THREADS
    shell:
        "seedbench peak --dtypes {params.dtypes} --sizes {params.sizes}"
        " --repeats {params.repeats} --out {output} 2> {log}"
