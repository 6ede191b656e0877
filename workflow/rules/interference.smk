# A victim/aggressor interference experiment (config `interference:`): evaluated on the simulated
# dragonfly (mode: simulate) or carried out on the cluster (mode: slurm: ReFrame submits every
# job, so the rule itself runs where Snakemake runs and holds no allocation). Either way the
# tables and summary.json go to results/analyses/interference/, which the report reads.

if INTERFERENCE["experiment"] and INTERFERENCE["mode"] == "simulate":

    rule interference:
        input:
            experiment=INTERFERENCE["experiment"],
        output:
            summary=f"{RESULTS}/analyses/interference/summary.json",
        params:
            hpcvar=HPCVAR,
            out=lambda wildcards, output: os.path.dirname(output.summary),
            sets=interference_sets(),
        log:
            f"{RESULTS}/logs/interference.log",
        benchmark:
            f"{RESULTS}/benchmarks/interference.tsv",
        priority: PRIORITY_LONG
        conda:
            "../envs/hpcvar.yaml"
        shell:
            "{params.hpcvar} interference simulate {input.experiment} --out {params.out} {params.sets} > {log} 2>&1"


elif INTERFERENCE["experiment"]:

    localrules:
        interference,

    rule interference:
        input:
            experiment=INTERFERENCE["experiment"],
        output:
            summary=f"{RESULTS}/analyses/interference/summary.json",
        params:
            hpcvar=HPCVAR,
            runs=f"{RESULTS}/interference",
            out=lambda wildcards, output: os.path.dirname(output.summary),
            sets=interference_sets(),
            salt_file=config["salt_file"],
        log:
            f"{RESULTS}/logs/interference.log",
        benchmark:
            f"{RESULTS}/benchmarks/interference.tsv",
        conda:
            "../envs/hpcvar.yaml"
        shell:
            # The experiment directory (reports, raw runs, dataset) lives beside the analyses and
            # is resumed, not rewritten, when the rule runs again.
            "{params.hpcvar} interference run {input.experiment} --out {params.runs} --analysis-out {params.out}"
            " --salt-file {params.salt_file} {params.sets} > {log} 2>&1"
