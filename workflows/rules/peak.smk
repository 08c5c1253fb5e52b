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
        libraries=" ".join(["--libraries", *config["peak"]["libraries"]]
                           if "libraries" in config["peak"] else []),
    threads: TIMED_THREADS
    shell:
        "seedbench peak --dtypes {params.dtypes} --sizes {params.sizes}"
        " --repeats {params.repeats} {params.libraries} --out {output} 2> {log}"
