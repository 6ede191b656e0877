# hpcvar: performance-variability campaigns. The rules live in workflow/rules/; configuration is
# config/config.yaml, validated against workflow/schemas/config.schema.yaml (see docs/reference/configuration.md).

configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/simulate.smk"
include: "workflow/rules/campaign.smk"
include: "workflow/rules/collate.smk"
include: "workflow/rules/analyses.smk"
include: "workflow/rules/interference.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        f"{RESULTS}/summary.txt",
        expand(f"{RESULTS}/analyses/{{analysis}}/summary.json", analysis=ANALYSES),
        ([f"{RESULTS}/analyses/interference/summary.json"] if config["interference"]["experiment"] else []),
        f"{RESULTS}/report.html",
    default_target: True
