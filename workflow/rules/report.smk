# The report for facility staff (results/report.html) and, for `snakemake --report`, every figure
# in it registered by section (category) and dataset (subcategory). `hpcvar report` draws nothing
# the analyses already drew: their numbers and figures come from their summary.json files.

REPORTED = (list(ANALYSES) + (["compare"] if COMPARE else [])
            + (["interference"] if config["interference"]["experiment"] else []))


localrules:
    effective_config,


rule effective_config:
    output:
        f"{RESULTS}/config.yaml",
    params:
        text=yaml.safe_dump(config, sort_keys=False),
    log:
        f"{RESULTS}/logs/effective_config.log",
    benchmark:
        f"{RESULTS}/benchmarks/effective_config.tsv",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        # The configuration this run used (config file plus --config overrides), for the report's
        # provenance footer; re-written when it changes (Snakemake re-runs on changed params).
        "printf '%s' {params.text:q} > {output} 2> {log}"


rule report:
    input:
        collated=COLLATED,
        summaries=expand(f"{RESULTS}/analyses/{{analysis}}/summary.json", analysis=REPORTED),
        config=f"{RESULTS}/config.yaml",
    output:
        html=report(
            f"{RESULTS}/report.html",
            caption="../report/report.rst",
            category="report",
        ),
        figures=report(
            directory(f"{RESULTS}/report/figures"),
            patterns=["{section}/{dataset}/{figure}.svg"],
            caption="../report/figure.rst",
            category="{section}",
            subcategory="{dataset}",
            labels={"dataset": "{dataset}", "figure": "{figure}"},
        ),
    params:
        hpcvar=HPCVAR,
        dataset=lambda wildcards, input: os.path.dirname(input.collated),
        analyses=lambda wildcards, input: os.path.dirname(os.path.dirname(input.summaries[0])),
        anonymise="" if config["anonymise"] else "--no-anonymise",
        salt_file=config["salt_file"],
    log:
        f"{RESULTS}/logs/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} report {params.dataset} --analyses {params.analyses} --out {output.html}"
        " --figures {output.figures} --config {input.config} --salt-file {params.salt_file}"
        " {params.anonymise} > {log} 2>&1"
