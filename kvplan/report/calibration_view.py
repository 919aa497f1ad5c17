"""Console lines for a calibration fit: the coefficients, how well they fit, and what machine."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from kvplan.stress.cpu_cost import LinearCostModel


def render_fit(console: Console, fit: LinearCostModel, problem: str | None = None) -> None:
    console.print(f"step_s = {fit.intercept_s * 1e3:.3f} ms + {fit.per_token_s * 1e6:.2f} us/token + "
                  f"{fit.per_seq_s * 1e6:.1f} us/seq + {fit.per_context_token_s * 1e9:.1f} ns/context token + "
                  f"{fit.per_attention_pair_s * 1e12:.1f} ps/attention pair")
    spread = (f", residuals p10 {fit.residual_p10_pct:+.1f}% / p90 {fit.residual_p90_pct:+.1f}%"
              if fit.residual_p10_pct is not None and fit.residual_p90_pct is not None else "")
    colour = "red" if problem else "green"
    console.print(f"fit quality: [{colour}]R² {fit.r2:.3f}[/{colour}]{spread} over {fit.num_samples} steps")
    machine = fit.machine or {}
    ref = (
        f"reference kernel {fit.reference_kernel_ms:.3f} ms"
        if fit.reference_kernel_ms
        else "reference kernel not timed"
    )
    wait = f", CPU waits {100 * fit.cpu_wait_share:.0f}% of step time" if fit.cpu_wait_share is not None else ""
    console.print(escape(f"machine: {machine.get('cpu_model') or 'unknown CPU'}, {machine.get('cores')} cores, "
                         f"{fit.threads} threads, torch {machine.get('torch')}; {ref}{wait}"))
