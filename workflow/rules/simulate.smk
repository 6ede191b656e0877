if config["source"] == "simulate":

    # The output is the simulator's truth file, not the directory: Snakemake deletes a job's
    # outputs before running it, and the simulator itself decides whether the directory may be
    # replaced (only a simulated campaign's raw directory is; another system's is refused).
    rule simulate:
        output:
            truth=TRUTH,
        params:
            hpcvar=HPCVAR,
            raw=lambda wildcards, output: os.path.dirname(output.truth),
            preset=config["simulate"]["preset"],
            seed=config["simulate"]["seed"],
            overrides=set_options(config["simulate"]["overrides"]),
        log:
            f"{RESULTS}/logs/simulate.log",
        benchmark:
            f"{RESULTS}/benchmarks/simulate.tsv",
        # The runs' files are written by one process per thread (`--workers`); simulation and
        # collation go first (common.smk, PRIORITY_CHAIN), before the interference experiment.
        threads: lambda wildcards: local_cores()
        priority: PRIORITY_CHAIN
        conda:
            "../envs/hpcvar.yaml"
        shell:
            "{params.hpcvar} simulate --preset {params.preset} --seed {params.seed} {params.overrides}"
            " --out {params.raw} --workers {threads} > {log} 2>&1"
