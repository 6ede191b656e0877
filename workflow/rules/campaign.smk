# source: campaign. A round runs every dataset's ReFrame test once, in random order: ReFrame runs
# here (a local rule) and submits its own jobs through the site configuration's scheduler. Its
# JSON report is then imported into the raw campaign directory (sacct of each job's window
# included, and the job's window of the LDMS store when campaign.ldms is set), which collate
# reads. Rounds run one after another so a round is imported before the next one starts; a round
# whose report exists is never run again, so re-invoking the workflow runs only the missing rounds.


localrules:
    campaign_round,
    import_round,


rule campaign_round:
    input:
        # ancient: re-importing an earlier round (e.g. after a retry) must not re-run this one.
        previous=lambda wildcards: [ancient(f) for f in previous_round(wildcards)],
    output:
        report=f"{RESULTS}/rounds/{{round}}/reframe-report.json",
    log:
        f"{RESULTS}/logs/round-{{round}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/round-{{round}}.tsv",
    run:
        # A measurement, not a derived file: the ReFrame arguments are read here rather than
        # declared as params, so changing them for later rounds never re-runs a finished round.
        shell(f"{HPCVAR} campaign round --report {output.report} --prefix {RESULTS}/reframe "
              f"{campaign_args(wildcards.round)} > {log} 2>&1")


rule import_round:
    input:
        report=f"{RESULTS}/rounds/{{round}}/reframe-report.json",
    output:
        summary=f"{RESULTS}/rounds/{{round}}/imported.json",
    params:
        hpcvar=HPCVAR,
        raw=RAW_DIR,
        topology=f"--topology {config['campaign']['topology']}" if config["campaign"]["topology"] else "",
        ldms=(f"--ldms {config['campaign']['ldms']} --ldms-margin {config['campaign']['ldms_margin']}"
              if config["campaign"]["ldms"] else ""),
    log:
        f"{RESULTS}/logs/import-{{round}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/import-{{round}}.tsv",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} import-reframe {input.report} --raw {params.raw} {params.topology} {params.ldms}"
        " --summary {output.summary} > {log} 2>&1"
