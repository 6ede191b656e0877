# The three analyses of Bhatele et al. Section IV-V and Confidence-style distributions. Each reads
# the collated dataset, logs to the MLflow store beside it (results/mlflow.db) and writes
# results/analyses/<analysis>/summary.json with its tables and figures. Settings come from the
# `analyses:` section of the config; the regression check (compare) from `compare:`.


rule neighbourhood:
    input:
        collated=COLLATED,
    output:
        summary=f"{RESULTS}/analyses/neighbourhood/summary.json",
    params:
        hpcvar=HPCVAR,
        dataset=lambda wildcards, input: os.path.dirname(input.collated),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=analysis_settings("neighbourhood"),
    log:
        f"{RESULTS}/logs/neighbourhood.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} neighbourhood {params.dataset} --out {params.out} {params.settings} > {log} 2>&1"


rule deviation:
    input:
        collated=COLLATED,
    output:
        summary=f"{RESULTS}/analyses/deviation/summary.json",
    params:
        hpcvar=HPCVAR,
        dataset=lambda wildcards, input: os.path.dirname(input.collated),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=analysis_settings("deviation"),
    log:
        f"{RESULTS}/logs/deviation.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} deviation {params.dataset} --out {params.out} {params.settings} > {log} 2>&1"


rule forecast:
    input:
        collated=COLLATED,
        # The simulator's truth.json (its oracle's error beside the models'), when simulated.
        truth=[TRUTH] if TRUTH else [],
    output:
        summary=f"{RESULTS}/analyses/forecast/summary.json",
    params:
        hpcvar=HPCVAR,
        dataset=lambda wildcards, input: os.path.dirname(input.collated),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=analysis_settings("forecast"),
        truth=lambda wildcards, input: f"--truth {input.truth}" if input.truth else "",
    log:
        f"{RESULTS}/logs/forecast.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} forecast {params.dataset} --out {params.out} {params.truth} {params.settings} > {log} 2>&1"


rule distributions:
    input:
        collated=COLLATED,
    output:
        summary=f"{RESULTS}/analyses/distributions/summary.json",
    params:
        hpcvar=HPCVAR,
        dataset=lambda wildcards, input: os.path.dirname(input.collated),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=analysis_settings("distributions"),
    log:
        f"{RESULTS}/logs/distributions.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} distributions {params.dataset} --out {params.out} {params.settings} > {log} 2>&1"


rule compare:
    input:
        collated=COLLATED,
    output:
        summary=f"{RESULTS}/analyses/compare/summary.json",
    params:
        hpcvar=HPCVAR,
        dataset=lambda wildcards, input: os.path.dirname(input.collated),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        before=COMPARE[0] if COMPARE else "",
        after=COMPARE[1] if COMPARE else "",
        settings=compare_options(),
    log:
        f"{RESULTS}/logs/compare.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        # Exit code 1 means "regression found": a finding for the report, not a failed step
        # (bad input, exit 2, still fails). Gate a maintenance window with the command itself.
        "{params.hpcvar} compare {params.dataset} --before {params.before} --after {params.after}"
        " {params.settings}"
        " --out {params.out} > {log} 2>&1 || [ $? -eq 1 ]"


# Every run's slowdown split into causes (`hpcvar explain`), from what deviation and neighbourhood
# computed: each dataset's findings and its slowest runs explained, for the report.
rule explain:
    input:
        collated=COLLATED,
        deviation=f"{RESULTS}/analyses/deviation/summary.json",
        neighbourhood=f"{RESULTS}/analyses/neighbourhood/summary.json",
    output:
        summary=f"{RESULTS}/analyses/explain/summary.json",
    params:
        hpcvar=HPCVAR,
        dataset=lambda wildcards, input: os.path.dirname(input.collated),
        analyses=lambda wildcards, input: os.path.dirname(os.path.dirname(input.deviation)),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=analysis_settings("explain"),
    log:
        f"{RESULTS}/logs/explain.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} explain {params.dataset} --analyses {params.analyses} --out {params.out} {params.settings}"
        " > {log} 2>&1"
