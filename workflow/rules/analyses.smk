# The three analyses of Bhatele et al. Section IV-V, Confidence-style distributions and every
# run's slowdown split into causes (explain). Each reads the collated dataset, logs to the MLflow
# store beside it (results/mlflow.db) and writes results/analyses/<analysis>/summary.json with its
# tables and figures. Settings come from the `analyses:` section of the config; the regression
# check (compare) from `compare:`.


# One rule for every analysis of the registry (src/hpcvar/analyses/registry.py): `hpcvar
# <analysis> DATASET --out DIR` with its settings, after the analyses it builds on (explain reads
# deviation's and neighbourhood's outputs) and, for forecast, the simulator's truth (its oracle's
# error beside the models'). A site profile sets its resources under the rule's name, `analysis`.
rule analysis:
    input:
        collated=COLLATED,
        reads=lambda wildcards: [f"{RESULTS}/analyses/{r}/summary.json" for r in ANALYSES[wildcards.analysis].reads],
        truth=lambda wildcards: [TRUTH] if TRUTH and ANALYSES[wildcards.analysis].takes_truth else [],
    output:
        summary=f"{RESULTS}/analyses/{{analysis}}/summary.json",
    wildcard_constraints:
        analysis="|".join(ANALYSES),
    params:
        hpcvar=HPCVAR,
        dataset=lambda wildcards, input: os.path.dirname(input.collated),
        out=lambda wildcards, output: os.path.dirname(output.summary),
        settings=lambda wildcards: analysis_settings(wildcards.analysis),
        inputs=lambda wildcards, input: " ".join(
            ([f"--analyses {os.path.dirname(os.path.dirname(input.reads[0]))}"] if input.reads else [])
            + ([f"--truth {input.truth}"] if input.truth else [])),
    log:
        f"{RESULTS}/logs/{{analysis}}.log",
    conda:
        "../envs/hpcvar.yaml"
    shell:
        "{params.hpcvar} {wildcards.analysis} {params.dataset} --out {params.out} {params.inputs} {params.settings}"
        " > {log} 2>&1"


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
