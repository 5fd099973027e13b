"""``iadeep interference report``: how good the interference model and its learner are."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.command("report")
def report_cmd(
    gpu_type: Annotated[str, typer.Option(help="Gavel GPU type: v100, p100, k80.")] = "v100",
    seeds: Annotated[int, typer.Option(help="Random train/test splits to average over.")] = 5,
) -> None:
    """Print pair statistics, memory-estimate agreement and the learner's held-out error."""
    import numpy as np

    from iadeep.datasets import DatasetError, fetch
    from iadeep.interference import InterferenceModel, agreement_with_measurements, evaluate_holdout

    console = Console()
    try:
        model = InterferenceModel.from_file(fetch("gavel-throughputs", progress=False) / "simulation_throughputs.json", gpu_type)
    except (DatasetError, ValueError) as exc:
        typer.echo(f"iadeep interference report: error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(2) from None
    sums = (model.norm + model.norm.T)[model.fits]
    co = model.norm * model.isolated_steps_per_s[:, None]
    console.print(f"{gpu_type}: {len(model.types)} job types, {int((~model.fits).sum())} ordered pairs do not fit; "
                  f"pair sum of normalised throughputs mean {sums.mean():.2f}, {np.mean(sums > 1):.0%} above 1, "
                  f"min {sums.min():.2f}, max {sums.max():.2f}")
    if gpu_type == "v100":
        console.print(f"memory estimate agrees with measured fit/out-of-memory on {agreement_with_measurements(model.types, co, 16.0):.1%} of pairs (16 GiB)")
    table = Table(title=f"Online learner, held-out pairs (mean of {seeds} splits, 3 samples/pair, 5 % noise)")
    for col in ("train share", "train pairs", "test pairs", "MAE", "constant MAE"):
        table.add_column(col, justify="right")
    for frac in (0.2, 0.5, 0.8):
        reps = [evaluate_holdout(model.types, model.norm, model.fits, train_fraction=frac, seed=s) for s in range(seeds)]
        table.add_row(f"{frac:.0%}", str(reps[0].n_train_pairs), str(reps[0].n_test_pairs), f"{np.mean([r.mae for r in reps]):.3f}",
                      f"{np.mean([r.baseline_mae for r in reps]):.3f}")
    console.print(table)
