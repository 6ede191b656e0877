if config["source"] == "simulate":

    rule simulate:
        output:
            raw=directory(f"{RESULTS}/raw"),
        params:
            hpcvar=HPCVAR,
            preset=config["simulate"]["preset"],
            seed=config["simulate"]["seed"],
            overrides=" ".join(f"--set {k}={v}" for k, v in config["simulate"]["overrides"].items()),
        log:
            f"{RESULTS}/logs/simulate.log",
        conda:
            "../envs/hpcvar.yaml"
        shell:
            "{params.hpcvar} simulate --preset {params.preset} --seed {params.seed} {params.overrides}"
            " --out {output.raw} > {log} 2>&1"
