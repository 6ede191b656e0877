rule collate:
    input:
        raw=RAW_DIR,
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
    log:
        f"{RESULTS}/logs/collate.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} collate {input.raw} --out {output.dataset} --salt-file {params.salt_file}"
        " {params.anonymise} --summary {output.summary} > {log} 2>&1"
