# Collation rebuilds the dataset from the raw runs (immutable, so the result is the same rows plus
# the new ones; collate is idempotent): Snakemake clears a directory output before its job runs.
rule collate:
    input:
        unpack(collate_input),
    output:
        dataset=directory(f"{RESULTS}/dataset"),
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
    log:
        f"{RESULTS}/logs/collate.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} collate {params.raw} --out {output.dataset} --salt-file {params.salt_file}"
        " {params.anonymise} --summary {output.summary} > {log} 2>&1"
