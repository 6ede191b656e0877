# The three analyses of Bhatele et al. Section IV-V. Each reads the collated dataset, logs to the
# MLflow store beside it (results/mlflow.db) and writes results/analyses/<analysis>/summary.json
# with its tables and figures. Settings come from the `analyses:` section of the config.


rule neighbourhood:
    input:
        dataset=f"{RESULTS}/dataset",
    output:
        summary=f"{RESULTS}/analyses/neighbourhood/summary.json",
    params:
        hpcvar=HPCVAR,
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=analysis_settings("neighbourhood"),
    log:
        f"{RESULTS}/logs/neighbourhood.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} neighbourhood {input.dataset} --out {params.out} {params.settings} > {log} 2>&1"


rule deviation:
    input:
        dataset=f"{RESULTS}/dataset",
    output:
        summary=f"{RESULTS}/analyses/deviation/summary.json",
    params:
        hpcvar=HPCVAR,
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=analysis_settings("deviation"),
    log:
        f"{RESULTS}/logs/deviation.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} deviation {input.dataset} --out {params.out} {params.settings} > {log} 2>&1"


rule forecast:
    input:
        dataset=f"{RESULTS}/dataset",
    output:
        summary=f"{RESULTS}/analyses/forecast/summary.json",
    params:
        hpcvar=HPCVAR,
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=analysis_settings("forecast", truth=TRUTH),
    log:
        f"{RESULTS}/logs/forecast.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} forecast {input.dataset} --out {params.out} {params.settings} > {log} 2>&1"
