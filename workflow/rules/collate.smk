# Collation appends the raw runs not yet in the dataset (runs are immutable, so what was collated
# stays as it is). The output is collate's record of what it added, not the dataset directory,
# which Snakemake would empty before every run. A simulated campaign is written anew as a whole,
# so with the simulator the dataset is rebuilt (--rebuild) rather than appended to. A checkpoint:
# the analyses fan out over the datasets it wrote (analyses.smk).
checkpoint collate:
    input:
        unpack(collate_input),
    output:
        collated=COLLATED,
        summary=report(
            f"{RESULTS}/summary.txt",
            caption="../report/summary.rst",
            category="campaign",
        ),
    params:
        hpcvar=HPCVAR,
        anonymise="" if config["anonymise"] else "--no-anonymise",
        salt_file=config["salt_file"],
        raw=RAW_DIR,
        dataset=lambda wildcards, output: os.path.dirname(output.collated),
        rebuild="--rebuild" if config["source"] == "simulate" else "",
    log:
        f"{RESULTS}/logs/collate.log",
    benchmark:
        f"{RESULTS}/benchmarks/collate.tsv",
    # The runs' files are read by one process per thread (`--workers`).
    threads: lambda wildcards: local_cores()
    priority: PRIORITY_CHAIN
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} collate {params.raw} --out {params.dataset} --salt-file {params.salt_file}"
        " {params.anonymise} {params.rebuild} --workers {threads} --summary {output.summary} > {log} 2>&1"
