"""Why two things cross Snakemake's documented surface (docs/pipeline.md, "What of Snakemake it
touches"), shown on Snakemake itself with workflows of a few lines: a batch's cells cannot reach
its job through params, and its rules cannot be `use rule ... with:` copies. A Snakemake that
lifts either fails here, and the workflow can then take the documented way."""

import os
import re

from helpers import SNAKEMAKE, run_snakemake

AHEAD = """import os

rule all:
    input: "cell.txt"

rule make_ahead:  # as a batch's job or trains_alone makes a cell's ahead file
    output: temp("ahead.txt")
    params: batch=os.environ["BATCH"]
    shell: "echo {params.batch} > {output}"

rule train:  # the cell's own job
    input: "ahead.txt"
    output: "cell.txt"
    shell: "cat {input} > {output}"
"""


def test_params_of_the_maker_of_a_removed_temporary_file_rerun_its_reader(tmp_path):
    # a cell trained in a batch (params: its batch) and planned alone by the next run (other
    # params) would train again: so batches reach their jobs through a file, not params
    (tmp_path / "Snakefile").write_text(AHEAD)
    cmd = [SNAKEMAKE, "--cores", "1", "-d", str(tmp_path), "-s", str(tmp_path / "Snakefile")]
    batch = {**os.environ, "BATCH": "train_together_1"}
    assert run_snakemake(cmd, env=batch).returncode == 0
    assert not (tmp_path / "ahead.txt").exists()  # removed: temporary
    again = run_snakemake([*cmd, "-n"], env=batch)
    assert "Nothing to be done" in again.stdout + again.stderr
    alone = run_snakemake([*cmd, "-n"], env={**os.environ, "BATCH": "alone"})
    out = alone.stdout + alone.stderr
    assert "Params have changed since last execution" in out
    assert re.search(r"rule train:\n(.*\n)*?\s+reason: Input files updated by another job", out)


USE_RULE = """rule alone:
    output: "{x}.txt"
    shell: "touch {output}"

for name, outputs in [("together_1", ["a.txt", "b.txt"]), ("together_2", ["c.txt"])]:
    use rule alone as together with:
        name: name
        output: outputs
"""


def test_a_use_rule_copy_takes_no_name_from_the_plan(tmp_path):
    # a batch's rule is named by the plan (train_together_N, as many as the run has batches);
    # `use rule X as Y with:` takes its name from Y, written in the Snakefile, and `name:` in
    # its `with:` does not change it: the second copy clashes with the first
    (tmp_path / "Snakefile").write_text(USE_RULE)
    res = run_snakemake([SNAKEMAKE, "--cores", "1", "-n", "-d", str(tmp_path), "-s",
                         str(tmp_path / "Snakefile")])  # fmt: skip
    assert res.returncode != 0
    assert "The name together is already used by another rule" in res.stdout + res.stderr
