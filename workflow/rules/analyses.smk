# The campaign's overview, the three analyses of Bhatele et al. Section IV-V, Confidence-style
# distributions and every run's slowdown split into causes (explain). Each reads the collated
# dataset, writes results/analyses/<analysis>/summary.json with its tables and figures, and (all
# but the overview and explain) logs to the MLflow store beside it (results/mlflow.db). Settings come from the `analyses:` section of the config; the regression
# check (compare) from `compare:`.


# Every analysis of the registry (src/hpcvar/analyses/registry.py), after the analyses it builds
# on (explain reads deviation's and neighbourhood's summaries) and, for forecast, the simulator's
# truth (its oracle's error beside the models'), by `hpcvar <analysis> DATASET`, with its
# settings. The config's fan_out decides the jobs:
# - analysis (the default): one job per analysis over every dataset;
# - dataset (profiles/slurm): one job per (analysis, dataset), `--only NAME` (the dataset's
#   tables, figures and MLflow run, and its part of the result, OUT/parts/NAME.json), then
#   `hpcvar assemble` merges the parts into the same summary.json, so a cluster spreads the
#   forecaster's datasets, the heaviest jobs, over nodes. The datasets are known once collation
#   has run (`collate` is a checkpoint: analysed_datasets in common.smk). An analysis whose
#   numbers compare the datasets (per_dataset=False in the registry: the overview) stays one job.
# A site profile sets resources under the rules' names: `analysis` (and `analysis_part`).


if config["fan_out"] == "analysis":

    rule analysis:
        input:
            unpack(analysis_input),
        output:
            summary=f"{RESULTS}/analyses/{{analysis}}/summary.json",
        wildcard_constraints:
            analysis="|".join(ANALYSES),
        params:
            command=analysis_command,
            workers=analysis_workers,
        log:
            f"{RESULTS}/logs/{{analysis}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{{analysis}}.tsv",
        threads: analysis_threads
        priority: analysis_priority
        conda:
            "../envs/hpcvar.yaml"
        shell:
            "{params.command}{params.workers} > {log} 2>&1"

else:

    rule analysis_part:
        input:
            unpack(analysis_input),
        output:
            part=f"{RESULTS}/analyses/{{analysis}}/parts/{{dataset}}.json",
        wildcard_constraints:
            analysis="|".join(n for n, a in ANALYSES.items() if a.per_dataset),
            dataset="[^/]+",
        params:
            hpcvar=HPCVAR,
            dataset=lambda wildcards, input: os.path.dirname(input.collated),
            out=lambda wildcards, output: os.path.dirname(os.path.dirname(output.part)),
            settings=lambda wildcards: analysis_settings(wildcards.analysis),
            inputs=analysis_inputs,
        log:
            f"{RESULTS}/logs/{{analysis}}/{{dataset}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{{analysis}}/{{dataset}}.tsv",
        priority: analysis_priority
        conda:
            "../envs/hpcvar.yaml"
        shell:
            "{params.hpcvar} {wildcards.analysis} {params.dataset} --out {params.out} --only {wildcards.dataset:q}"
            " {params.inputs} {params.settings} > {log} 2>&1"


    rule analysis:
        input:
            unpack(fanned_out_input),
        output:
            summary=f"{RESULTS}/analyses/{{analysis}}/summary.json",
        wildcard_constraints:
            analysis="|".join(ANALYSES),
        params:
            command=fanned_out_command,
        log:
            f"{RESULTS}/logs/{{analysis}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{{analysis}}.tsv",
        conda:
            "../envs/hpcvar.yaml"
        shell:
            "{params.command} > {log} 2>&1"


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
    benchmark:
        f"{RESULTS}/benchmarks/compare.tsv",
    priority: PRIORITY_LONG
    conda:
        "../envs/hpcvar.yaml"
    shell:
        # Exit code 1 means "regression found": a finding for the report, not a failed step
        # (bad input, exit 2, still fails). Gate a maintenance window with the command itself.
        "{params.hpcvar} compare {params.dataset} --before {params.before} --after {params.after}"
        " {params.settings}"
        " --out {params.out} > {log} 2>&1 || [ $? -eq 1 ]"
