"""The example project's `[hooks] on_run_end` (lakewrap.toml): after every `lakewrap run`, `backfill`
or `resume`, append one line about the run to target/hooks.log (docs/hooks.md)."""

from pathlib import Path


def main(context):
    counts = context["counts"]
    line = (f"{context['run_id']} {context['command']} {context['status']}: {counts['success']} succeeded, "
            f"{counts['failed']} failed, {context['rows_inserted']} rows inserted\n")
    log = Path("target") / "hooks.log"  # hooks run in the project folder
    log.parent.mkdir(exist_ok=True)
    with log.open("a") as f:
        f.write(line)
    print(line.strip())  # a hook's output goes to the run log (lakewrap_log)
